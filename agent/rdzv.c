/* SPDX-License-Identifier: Apache-2.0
 * The agent's side of a multi-node rendezvous (docs/ARCHITECTURE.md): host the store when the
 * endpoint is this machine's, JOIN rounds, watch for the end of the running round, report
 * failures, stop the run (ABORT), say who is missing while a JOIN waits, and linger while the
 * other nodes hang up. Everything is asynchronous on the agent's loop (rdzv_acall over
 * rdzv_aclient), so signals are handled during a rendezvous. The link to the store (connections,
 * heartbeats, reconnecting) is rdzv_link.c; the exit barrier, rdzv_barrier.c; their shared state,
 * rdzv_int.h. */
#include "rdzv_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ddp_addr.h"
#include "ddp_contract.h"
#include "ddp_log.h"
#include "rdzv_async_client.h"
#include "rdzv_client.h"
#include "rdzv_etcd_store.h"
#include "rdzv_layout.h"
#include "rdzv_proto.h"
#include "rdzv_round_calls.h"
#include "rdzv_server.h"

/* Slack on top of join_timeout for the parked JOIN: the server answers at join_timeout itself. */
#define AGENT_JOIN_SLACK_MS 10000
/* While a JOIN is parked, a line now and then says who has joined, so that a rendezvous waiting
 * for a missing node is not silent for all of join_timeout (600 s by default): first after
 * min(10 s, join_timeout / 4), then at doubling gaps up to a minute. */
#define AGENT_JOIN_REPORT_FIRST_MS 10000
#define AGENT_JOIN_REPORT_MAX_MS 60000

int agent__rdzv_wanted(const agent_job_t *job) {
    return job->max_nodes > 1;
}

/* The flag that names the endpoint of job's backend, for messages. */
static const char *endpoint_flag(const agent_job_t *job) {
    return job->backend == AGENT_RDZV_STATIC ? "--master_addr" : "--rdzv_endpoint";
}

/* The etcd backend: its members were checked by the launcher; the credentials come from the
 * environment (never the command line, which every user of the machine can read). */
static int etcd_prepare(agent_job_t *job, ddp_err_t *err) {
    if (job->etcd.endpoints == NULL || *job->etcd.endpoints == '\0')
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_backend=etcd needs --rdzv_endpoint=HOST:PORT[,HOST:PORT...] "
                           "(the etcd members)");
    if ((job->etcd.cert == NULL) != (job->etcd.key == NULL))
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_conf: etcd_cert and etcd_key: give both or neither");
    job->etcd.user = getenv(AGENT_ENV_ETCD_USER);
    job->etcd.password = getenv(AGENT_ENV_ETCD_PASSWORD);
    if ((job->etcd.user == NULL) != (job->etcd.password == NULL))
        return ddp_err_set(err, DDP_EUSAGE, "%s and %s: set both or neither", AGENT_ENV_ETCD_USER,
                           AGENT_ENV_ETCD_PASSWORD);
    int rc = rdzv_token_from_job_env(&job->token, err);
    return rc == -ENOMEM ? rc : rc < 0 ? DDP_EUSAGE : 0;
}

int agent__rdzv_prepare(agent_job_t *job, ddp_err_t *err) {
    if (job->backend == AGENT_RDZV_ETCD)
        return etcd_prepare(job, err);
    if (job->rdzv_host == NULL || *job->rdzv_host == '\0')
        return ddp_err_set(err, DDP_EUSAGE,
                           "--nnodes=%d:%d needs --rdzv_endpoint=HOST[:PORT] (or --master_addr "
                           "with --rdzv_backend=static)",
                           job->min_nodes, job->max_nodes);
    ddp_err_t why;
    ddp_err_clear(&why);
    if (ddp_addr_resolve(job->rdzv_host, job->rdzv_addr, sizeof job->rdzv_addr, &why) < 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s: %s", endpoint_flag(job), why.text);
    /* The job token (rdzv_token_load's sources); the message names the variable. */
    int rc = rdzv_token_from_job_env(&job->token, err);
    return rc == -ENOMEM ? rc : rc < 0 ? DDP_EUSAGE : 0;
}

static void emit(agent_t *a, agent_event_t ev) {
    agent__event(a, ev, NULL);
}

/* A JOIN result this node can use: the numbers become ints (RANK, WORLD_SIZE, ...) and index the
 * group, so a store that sends them out of range (a bug, or not a ddprun store) is refused rather
 * than wrapped. Returns NULL, or what is wrong. */
static const char *join_result_check(const rdzv_join_result_t *j, int nproc, int max_nodes) {
    if (j->group_world_size < 1 || j->group_world_size > max_nodes)
        return "group_world_size outside 1..--nnodes max";
    if (j->group_rank < 0 || j->group_rank >= j->group_world_size)
        return "group_rank outside 0..group_world_size-1";
    if (j->world_size < 1 || j->world_size > INT_MAX)
        return "world_size outside 1..2147483647";
    if (j->rank_base < 0 || j->rank_base > j->world_size - nproc)
        return "rank_base + this node's nproc past world_size";
    if (j->master_port < 0 || j->master_port > 65535)
        return "master_port outside 0..65535";
    if (j->round < 0 || j->restarts_used < 0 || j->restarts_used > INT_MAX)
        return "negative round or restarts_used out of range";
    return NULL;
}

/* The key the server SETs when round `round` ends (its value says why). The run id was checked
 * (agent_job_prepare) and rounds are never negative: it fits RDZV_LAYOUT_KEY_MAX. */
static void end_key(const struct agent_rdzv *r, int64_t round, char *key, size_t cap) {
    rdzv_layout_end_key(key, cap, r->a->cfg.job->run_id, round);
}

static void on_round_reason(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)arg;
    (void)errtext;
    char esc[AGENT_STORE_TEXT_MAX];
    /* The key's value: the server's reason, or whatever a client of the store SET there. */
    if (status == 0 && len > 0)
        DDP_WARN("%s; re-joining", agent__store_text(reply, len, "", esc));
}

static void on_round_end(void *arg, int status, const uint8_t *reply, size_t len,
                         const char *errtext) {
    (void)reply;
    (void)len;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return; /* a closed connection's: its count was reset */
    r->watch_waits--;
    if (status != 0) {
        agent__link_lost(r, errtext);
        return;
    }
    /* The end of an earlier round: this node ended it itself (a failure, a hang) and joined the
     * next one before the key's reply came back; the next round's WAIT is queued behind this
     * one on the same connection, so the reply is for the newest round only when no other is
     * pending. Taking it for the newest round's end would stop a group that just started. */
    if (r->watch_waits > 0 || r->watch_round != r->a->as.round)
        return;
    /* The server stored why the round ended (a failure, a lost node, a scale-up) as the key's
     * value: say it, for the user watching this node. */
    char key[RDZV_LAYOUT_KEY_MAX];
    end_key(r, r->watch_round, key, sizeof key);
    if (r->a->sup.state == SUP_RUNNING)
        rdzv_aclient_get(r->watch, key, 0, on_round_reason, r, NULL);
    r->watch_round = -1;
    emit(r->a, EV_ROUND_END);
}

/* Arms the watch for the end of round. */
static void watch_round(struct agent_rdzv *r, int64_t round) {
    char key[RDZV_LAYOUT_KEY_MAX];
    end_key(r, round, key, sizeof key);
    const char *keys[1] = {key};
    ddp_err_t err;
    ddp_err_clear(&err);
    r->watch_round = round;
    if (rdzv_aclient_wait(r->watch, keys, 1, -1, on_round_end, r, &err) < 0)
        agent__link_lost(r, err.text);
    else
        r->watch_waits++;
}

/* Whether the text of a JOIN refused with code names the run, so that the log line need not name
 * it again. The reply carries a code and a text, nothing that says what the text names: the
 * decision is the code's. The store's texts for the JOIN refusals (the table in
 * docs/protocol-rdzv.md, "0x50 JOIN") all name the run: the failed run's root cause
 * (DDP_ERDZV_CLOSED), the excluded host, the JOIN's timeout, a field out of range (DDP_EUSAGE;
 * the run id this agent sends is checked before it is sent), the connection's other run or parked
 * JOIN (-EBUSY, -EALREADY), no room for another run (DDP_ETOOBIG, -ENOMEM). Any other code (the
 * connection refused, a store answering what ours never would) gets the run id in front. */
static int refusal_names_run(int code) {
    switch (code) {
    case DDP_ERDZV_CLOSED:
    case DDP_ERDZV_EXCLUDED:
    case DDP_ETIMEOUT:
    case DDP_EUSAGE:
    case DDP_ETOOBIG:
    case -EBUSY:
    case -EALREADY:
    case -ENOMEM: return 1;
    default: return 0;
    }
}

static void on_join_retry(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (r->a->sup.state != SUP_JOINING)
        return;
    if (r->link == LINK_UP)
        agent__rdzv_join(r->a);
    else if (r->link == LINK_RECONNECTING || r->link == LINK_CHECKING)
        /* The new control connection answered "not yet" before the watch connection was made:
         * asked again once the link is up (another loss JOINs anew and stops this timer). */
        uv_timer_start(t, on_join_retry, AGENT_JOIN_RETRY_MS, 0);
}

static void on_join(void *arg, int status, const rdzv_round_reply_t *rep, const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == DDP_ECLOSED || status == DDP_EPROTO) {
        /* The connection, not the rendezvous, failed: a lost store (or one not back yet), or
         * one that answers what no store of ours would. */
        agent__link_lost(r, errtext);
        return;
    }
    if (status != 0) {
        DDP_ERROR("rendezvous '%s' at %s:%d failed: %s", a->cfg.job->run_id, r->addr, r->port,
                  agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
        emit(a, EV_RDZV_ERROR);
        return;
    }
    if (rep->status == 0 || rep->code == DDP_ERDZV_SPARE) {
        /* A store took the JOIN: a follower's workers meet this one, whichever candidate it
         * was reached through. */
        if (r->follower)
            agent__job_store_at(a, r->addr, r->port, r->token);
        agent__elect_joined(r);
    }
    int moved = rep->status != 0 && rep->code == DDP_ERDZV_MOVED
                    ? agent__elect_moved(r, rep->text.data, rep->text.len)
                    : 0;
    if (rep->status != 0 && (rep->code == RDZV_NOT_YET || moved > 0)) {
        /* A store elected a moment ago, loading the run's records from etcd; a candidate
         * before the election names a store, or naming the one this follower lost: the same
         * JOIN again shortly, on the same connection. */
        uint64_t ms = agent__elect_backoff_ms(r);
        DDP_DEBUG("rendezvous '%s' at %s:%d: the store is not serving yet; joining again in "
                  "%llu ms",
                  a->cfg.job->run_id, r->addr, r->port, (unsigned long long)ms);
        uv_timer_start(&r->join_retry_timer, on_join_retry, ms, 0);
        return;
    }
    if (moved < 0) {
        /* No store of ours names a store so: asking it again would get the same, and going
         * round would come back to it. One line, and the node is out of the job. */
        DDP_ERROR("rendezvous '%s' at %s:%d: the store names '%s' as the store that serves, not "
                  "an address; this node is out of the job",
                  a->cfg.job->run_id, r->addr, r->port,
                  agent__store_text(rep->text.data, rep->text.len, "", esc));
        emit(a, EV_RDZV_ERROR);
        return;
    }
    if (rep->status != 0 && rep->code == DDP_ERDZV_MOVED)
        return; /* followed: the link reconnects there and JOINs again */
    if (agent__reply_fenced(rep)) {
        /* A store that no longer serves the rendezvous (its node lost the etcd leadership):
         * lost, as a closed connection is; the reconnection follows the election. */
        agent__link_fenced(r, rep);
        return;
    }
    if (rep->status != 0 && rep->code == DDP_ERDZV_SPARE) {
        /* The run is at max_nodes: this node waits for a place (a node excluded or lost). The
         * store answers a spare now and then; its JOIN again is the spare's keep-alive. Each
         * follows the health check, as every JOIN does: a spare that fell sick while it waited
         * reports itself unfit instead of taking a place (the store keeps the spare for a
         * keep-alive bound after the answer, the check included). */
        if (!r->spare_said) {
            DDP_INFO("%s",
                     agent__store_text(rep->text.data, rep->text.len, "waiting as a spare", esc));
            agent__evlog(a, "rendezvous_spare", "{s:I}", "max_nodes",
                         (json_int_t)a->cfg.job->max_nodes);
            r->spare_said = 1;
        }
        emit(a, EV_SPARE);
        return;
    }
    if (rep->status != 0) {
        const char *why = rep->text.len > 0
                              ? agent__store_text(rep->text.data, rep->text.len, "", esc)
                              : "refused";
        if (rep->code == DDP_ERDZV_DONE || (rep->code == DDP_ERDZV_REUSED && r->spare_said)) {
            /* A spare (or a late node) of a run that succeeded: nothing to do, no failure. A
             * spare the store dropped (a health check longer than its keep-alive bound) is
             * told what a new node is (DDP_ERDZV_REUSED), but it waited in this run. A new
             * node is refused (the error below): its job did not run. */
            DDP_INFO("%s", why);
            agent__rdzv_leave(r, EV_RUN_DONE, AGENT_HOST_LINGER_MS);
            return;
        }
        /* A failed run's refusal names its root cause: every node names that one. */
        if (rep->code == DDP_ERDZV_CLOSED)
            rdzv_text_root_cause(why, r->root_cause, sizeof r->root_cause);
        if (rep->text.len > 0 && refusal_names_run(rep->code))
            DDP_ERROR("%s", why);
        else
            DDP_ERROR("rendezvous '%s': %s", a->cfg.job->run_id, why);
        if (rep->code == DDP_ERDZV_EXCLUDED) {
            /* A sick node kept out of the run: exit 4 (unfit), so that a scheduler replaces it
             * and an ssh launch goes on without it. */
            agent__evlog(a, "node_excluded", "{s:s}", "reason", why);
            agent__result_unfit(a);
            if (agent__rdzv_serving(r)) {
                /* The run goes on without this node, but on its store: serve it, with no
                 * worker, until every other node has hung up (the job is over), then leave.
                 * The job bounds the wait (its nodes leave through their exit barrier or die,
                 * which closes their connections); a termination signal ends it at once. */
                DDP_WARN("this node hosts the rendezvous store: it keeps serving it, with no "
                         "worker, until the other nodes are done");
                agent__rdzv_leave(r, EV_RDZV_ERROR, UINT64_MAX);
                return;
            }
        }
        /* The run failed (or was stopped): when this agent hosts the store, the node whose
         * failure ended it may still be on its way to the same refusal, after which it prints
         * its summary. Gone with the store, it would learn only that the store is lost. */
        agent__rdzv_leave(r, EV_RDZV_ERROR, AGENT_HOST_LINGER_MS);
        return;
    }
    const rdzv_join_result_t *j = &rep->join;
    const char *bad = join_result_check(j, a->cfg.nproc, a->cfg.job->max_nodes);
    if (bad != NULL) {
        DDP_ERROR("rendezvous '%s' at %s:%d: the JOIN reply is out of range (%s)",
                  a->cfg.job->run_id, r->addr, r->port, bad);
        emit(a, EV_RDZV_ERROR);
        return;
    }
    r->round_told = j->round;
    r->spare_said = 0;
    r->fail = FAIL_NONE;
    r->member = j->member;
    r->member_key = j->member_key;
    r->embedded = (j->store_flags & RDZV_STORE_EMBEDDED) != 0;
    if (j->restarts_used > r->restarts_seen)
        r->restarts_seen = j->restarts_used;
    /* Every node's workers use group rank 0's store: its limits follow the world size, which
     * the start could only guess (this node's nproc times --nnodes' maximum). */
    rdzv_server_set_workers(a->stores.wstore, (size_t)j->world_size);
    agent_assignment_t as = {.round = j->round,
                             .attempt = (int)j->restarts_used,
                             .node_rank = (int)j->group_rank,
                             .group_world_size = (int)j->group_world_size,
                             .rank_base = (int)j->rank_base,
                             .world_size = (int)j->world_size,
                             .master_port = (int)j->master_port};
    snprintf(as.master_addr, sizeof as.master_addr, "%s", j->master_addr);
    if (agent__assignment_apply(a, &as) < 0) {
        emit(a, EV_RDZV_ERROR);
        return;
    }
    DDP_INFO("rendezvous '%s' round %lld: node %d of %d, ranks %d..%d of %d, master %s:%d",
             a->cfg.job->run_id, (long long)a->as.round, a->as.node_rank, a->as.group_world_size,
             a->as.rank_base, a->as.rank_base + a->cfg.nproc - 1, a->as.world_size,
             agent__store_text(a->as.master_addr, (size_t)-1, "", esc), a->as.master_port);
    agent__evlog(a, "rendezvous_joined", "{s:I, s:i, s:i, s:i, s:s, s:i}", "round",
                 (json_int_t)a->as.round, "nnodes", a->as.group_world_size, "world_size",
                 a->as.world_size, "rank_base", a->as.rank_base, "master_addr", a->as.master_addr,
                 "master_port", a->as.master_port);
    watch_round(r, a->as.round);
    emit(a, EV_JOINED);
}

void agent__rdzv_join(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    const agent_job_t *job = a->cfg.job;
    if (r->elect_failed) {
        emit(a, EV_RDZV_ERROR);
        return;
    }
    /* This JOIN is the one the retry would send (a second one parked would be refused). */
    if (r->join_retry_timer.data != NULL)
        uv_timer_stop(&r->join_retry_timer);
    rdzv_join_req_t req;
    memset(&req, 0, sizeof req);
    snprintf(req.run_id, sizeof req.run_id, "%s", job->run_id);
    snprintf(req.host, sizeof req.host, "%s", r->host);
    req.want_node_rank = job->node_rank;
    req.nproc = a->cfg.nproc;
    if (a->stores.wstore != NULL) {
        /* None of this node's workers runs, and the next group cannot start anywhere before
         * this JOIN is in the round: the previous group's keys go now. */
        rdzv_server_reset(a->stores.wstore);
        req.master_port = rdzv_server_port(a->stores.wstore);
    } else {
        int port = agent__pick_free_port(r->host);
        req.master_port = port > 0 ? port : AGENT_DEFAULT_MASTER_PORT;
    }
    agent__barrier_event(r, BARRIER_EV_RESET, 0, NULL);
    req.cfg.min_nodes = job->min_nodes;
    req.cfg.max_nodes = job->max_nodes;
    req.cfg.last_call_timeout_ms = job->rdzv.last_call_timeout_ms;
    req.cfg.join_timeout_ms = job->rdzv.join_timeout_ms;
    req.cfg.keep_alive_interval_ms = job->rdzv.keep_alive_interval_ms;
    req.cfg.keep_alive_max_attempt = job->rdzv.keep_alive_max_attempt;
    req.cfg.max_restarts = job->max_restarts;
    req.cfg.max_node_failures = job->rdzv.max_node_failures;
    /* The store drops the worker library's keys of old rounds under this prefix. */
    snprintf(req.cfg.round_keys, sizeof req.cfg.round_keys, "%s", DDP_WORKER_KEY_PREFIX);
    /* For a store that forgot the run (restarted): the rounds go on after ours, and the
     * restarts counted so far stay counted. A store that remembers ignores both. */
    req.min_round = r->round_told >= 0 ? a->as.round + 1 : 0;
    req.restarts_used = r->restarts_seen > a->as.attempt ? r->restarts_seen : a->as.attempt;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_acall_join(r->ctl, &req, (int)req.cfg.join_timeout_ms + AGENT_JOIN_SLACK_MS,
                             on_join, r, &err);
    uint64_t first = (uint64_t)req.cfg.join_timeout_ms / 4;
    r->join_sent_ms = uv_now(a->cfg.loop);
    r->join_report_gap = first < AGENT_JOIN_REPORT_FIRST_MS ? first : AGENT_JOIN_REPORT_FIRST_MS;
    r->join_report_at = r->join_sent_ms + r->join_report_gap;
    if (rc == DDP_ECLOSED ||
        (rc < 0 && (r->link == LINK_RECONNECTING || r->link == LINK_CHECKING))) {
        /* The connection went (or is being made again): the JOIN goes out once it is back. */
        agent__link_lost(r, err.text[0] ? err.text : ddp_strerror(rc));
    } else if (rc < 0) {
        DDP_ERROR("unable to join rendezvous '%s': %s", job->run_id,
                  err.text[0] ? err.text : ddp_strerror(rc));
        emit(a, EV_RDZV_ERROR);
    }
}

static void on_fail_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                          const char *errtext) {
    struct agent_rdzv *r = arg;
    (void)errtext;
    if (status != 0)
        return; /* a lost store shows up on the watch connection */
    if (agent__reply_fenced(rep)) {
        /* Not counted: the store elected next hears of the failure through the JOIN that
         * follows the group's stop (its restarts as this node saw them). */
        if (r->link != LINK_STOPPED)
            agent__link_fenced(r, rep);
        return;
    }
    if (rep->fail.restarts_used > r->restarts_seen)
        r->restarts_seen = rep->fail.restarts_used;
    /* Only the first FAIL of a round counts: this node's failure is the round's root cause. */
    r->fail = rep->fail.status == RDZV_FAIL_IGNORED ? FAIL_IGNORED : FAIL_COUNTED;
    if (rep->fail.status == RDZV_FAIL_RUN_FAILED)
        DDP_WARN("rendezvous '%s': restarts spent (%lld of %lld): the job fails",
                 r->a->cfg.job->run_id, (long long)rep->fail.restarts_used,
                 (long long)rep->fail.max_restarts);
}

static void on_unfit_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return;
    if (status == 0 && agent__reply_fenced(rep)) {
        agent__link_fenced(r, rep);
        return;
    }
    /* Best effort: the store shows the node as unfit; a lost store is found by the next JOIN. */
    if (status != 0 || rep->status != 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_DEBUG("the store did not record this node as unfit: %s",
                  status != 0 ? agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc)
                              : "no such run yet");
    }
}

void agent__rdzv_report_unfit(agent_t *a, const char *reason) {
    struct agent_rdzv *r = a->rdzv;
    /* Only on a link that is up: a reconnection's new connections carry the next JOIN. */
    if (r == NULL || r->ctl == NULL || r->link != LINK_UP)
        return;
    rdzv_acall_unfit(r->ctl, a->cfg.job->run_id, r->host, reason, on_unfit_reply, r, NULL);
}

static void on_timing_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                            const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return;
    if (status != 0 || rep->status != 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_DEBUG("the store did not take this node's timing: %s",
                  status != 0 ? agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc)
                              : "no such run");
        return;
    }
    agent__straggler_told(r->a, (const char *)rep->text.data, rep->text.len);
}

void agent__rdzv_timing_send(agent_t *a, const char *text) {
    struct agent_rdzv *r = a->rdzv;
    if (r == NULL || r->ctl == NULL || r->link != LINK_UP)
        return;
    rdzv_acall_timing(r->ctl, a->cfg.job->run_id, a->as.round, text, on_timing_reply, r, NULL);
}

int agent__rdzv_root_cause(const agent_t *a, const char **store_says) {
    const struct agent_rdzv *r = a->rdzv;
    *store_says = r != NULL ? r->root_cause : "";
    /* Elsewhere when the store ignored this node's FAIL, or when this node sent none (its
     * workers failed after the round ended) and the store named the root cause; a FAIL that was
     * never answered leaves this node's own view. */
    return r == NULL || r->fail == FAIL_COUNTED || r->fail == FAIL_SENT ||
           (r->fail == FAIL_NONE && r->root_cause[0] == '\0');
}

void agent__rdzv_report_failure(agent_t *a, const char *what) {
    struct agent_rdzv *r = a->rdzv;
    ddp_err_t err;
    ddp_err_clear(&err);
    r->fail = FAIL_SENT;
    int rc = rdzv_acall_fail(r->ctl, a->cfg.job->run_id, a->as.round, what, on_fail_reply, r, &err);
    if (rc < 0)
        DDP_WARN("unable to report the failure to the rendezvous: %s",
                 err.text[0] ? err.text : ddp_strerror(rc));
}

static void on_abort_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return;
    if (status != 0)
        DDP_WARN("unable to stop rendezvous '%s' on the other nodes (they wait for this one "
                 "until join_timeout): %s",
                 r->a->cfg.job->run_id,
                 agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    else if (rep->status == 0)
        DDP_INFO("rendezvous '%s' stopped on every node", r->a->cfg.job->run_id);
    /* status 1: another node stopped the run first, or it had failed already */
    /* A node whose JOIN is on its way is refused with the reason only while the store is up. */
    agent__rdzv_leave(r, EV_ABORT_DONE, AGENT_HOST_LINGER_MS);
}

void agent__rdzv_abort(agent_t *a, const char *why) {
    struct agent_rdzv *r = a->rdzv;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_acall_abort(r->ctl, a->cfg.job->run_id, why, on_abort_reply, r, &err);
    if (rc < 0) {
        DDP_WARN("unable to stop rendezvous '%s' on the other nodes (they wait for this one "
                 "until join_timeout): %s",
                 a->cfg.job->run_id, err.text[0] ? err.text : ddp_strerror(rc));
        emit(a, EV_ABORT_DONE);
    }
}

static void on_progress_set(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)arg, (void)reply, (void)len;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status != 0) /* a lost store shows up through the connection's own callbacks */
        DDP_DEBUG("unable to report progress to the store: %s",
                  agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
}

/* With heartbeat supervision, this node's progress goes to the store just before each
 * keep-alive, for `ddprun status` (rdzv_proto.h): its step, its beats' age and, once a beat
 * came, its goodput so far. Only while a group of this round runs. */
void agent__rdzv_progress_send(struct agent_rdzv *r) {
    agent_t *a = r->a;
    rdzv_progress_t p = {.round = a->as.round};
    char key[RDZV_LAYOUT_KEY_MAX], val[RDZV_PROGRESS_VALUE_MAX];
    if ((a->sup.state != SUP_RUNNING && a->sup.state != SUP_CAPTURING) ||
        agent__hang_progress(a, &p.step, &p.beat_age_ms) < 0 ||
        rdzv_layout_progress_key(key, sizeof key, a->cfg.job->run_id, a->as.node_rank) < 0)
        return;
    agent_goodput_totals_t t;
    int restarts;
    if (agent__goodput_so_far(a, &t, &restarts) == 0) {
        p.has_goodput = 1;
        p.wall_ms = (int64_t)t.wall_ms;
        p.productive_ms = (int64_t)t.productive_ms;
        p.lost_ms = (int64_t)t.lost_ms;
        p.restarts = restarts;
    }
    int n = rdzv_progress_format(val, sizeof val, &p);
    if (n > 0)
        rdzv_aclient_set(r->ctl, key, val, (size_t)n, on_progress_set, r, NULL);
}

/* The run's status, asked for while this node's JOIN is parked: one line saying who is there. */
static void on_join_status(void *arg, int status, const rdzv_round_reply_t *rep,
                           const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED)
        return; /* a closed connection's: join_status_pending was reset */
    r->join_status_pending = 0;
    if (status != 0 || r->link == LINK_STOPPED || a->sup.state != SUP_JOINING)
        return; /* a lost store shows up through the connections' own callbacks */
    json_t *root = rep->status == 0 && rep->text.len > 0
                       ? json_loadb((const char *)rep->text.data, rep->text.len, 0, NULL)
                       : NULL;
    if (root == NULL)
        return;
    /* The counts alone (STATUS_PAGE, no member listed): every waiting node asks, so a reply
     * listing the members would cost the store O(nodes^2) per wave of questions. */
    json_t *nodes = json_object_get(root, "nodes");
    json_int_t total = json_integer_value(json_object_get(nodes, "total"));
    json_int_t joined = json_integer_value(json_object_get(nodes, "joining"));
    size_t joining = joined > 0 ? (size_t)joined : 0;
    const agent_job_t *job = a->cfg.job;
    size_t running = total > joined ? (size_t)(total - joined) : 0;
    char others[48] = "";
    if (running > 0)
        snprintf(others, sizeof others, ", %zu running the last round", running);
    DDP_WARN("rendezvous '%s' at %s:%d: waiting %llu s for nodes: %zu of min %d joined round %lld "
             "(max %d)%s; join_timeout %g s",
             job->run_id, r->addr, r->port,
             (unsigned long long)((uv_now(a->cfg.loop) - r->join_sent_ms) / 1000), joining,
             job->min_nodes, (long long)json_integer_value(json_object_get(root, "round")),
             job->max_nodes, others, job->rdzv.join_timeout_ms / 1000.0);
    json_decref(root);
}

/* Called on every heartbeat tick while joining: asks for the run's status when a line is due.
 * The watch connection carries it: during a JOIN it holds no WAIT. */
void agent__rdzv_join_progress(struct agent_rdzv *r) {
    uint64_t now = uv_now(r->a->cfg.loop);
    if (r->join_status_pending || r->watch == NULL || now < r->join_report_at)
        return;
    r->join_report_gap = r->join_report_gap * 2 < AGENT_JOIN_REPORT_MAX_MS
                             ? r->join_report_gap * 2
                             : AGENT_JOIN_REPORT_MAX_MS;
    r->join_report_at = now + r->join_report_gap;
    /* The counts alone (no member listed): see on_join_status. */
    if (rdzv_acall_status_page(r->watch, r->a->cfg.job->run_id, 0, 0, on_join_status, r, NULL) == 0)
        r->join_status_pending = 1;
}

static void on_linger(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    rdzv_server_stats_t st = {0};
    /* A store this agent no longer serves (its etcd lease lost) has nobody to wait for. */
    if (r->a->stores.store != NULL)
        rdzv_server_stats(r->a->stores.store, &st);
    /* Our own two connections stay until we close them. */
    if (st.conns > 2 && uv_now(r->a->cfg.loop) < r->linger_until)
        return;
    uv_timer_stop(t);
    agent__event(r->a, r->linger_done, NULL);
}

static void on_finish_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                            const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->link == LINK_STOPPED)
        return;
    if (status == 0 && agent__reply_fenced(rep)) {
        /* This node passed its exit barrier: following the election would only JOIN a store
         * that never knew the round. It leaves, saying that the run's end is not recorded. */
        char why[AGENT_STORE_TEXT_MAX];
        DDP_WARN("the rendezvous store at %s:%d no longer serves (%s): the run's end is not "
                 "recorded there; this node passed its exit barrier and leaves",
                 r->addr, r->port, agent__store_text(rep->text.data, rep->text.len, "", why));
    }
    /* Only the first node's FINISH counts (status 1 for the others); the node leaves either way. */
    agent__rdzv_leave(r, EV_BARRIER_DONE, AGENT_HOST_LINGER_MS);
}

void agent__rdzv_finish(struct agent_rdzv *r) {
    /* Its reply comes before this node closes ctl, so the store hears FINISH before the leave of
     * any member of the round: the round cannot end under the spares first. */
    if (r->link != LINK_UP || rdzv_acall_finish(r->ctl, r->a->cfg.job->run_id, r->a->as.round,
                                                on_finish_reply, r, NULL) < 0)
        agent__rdzv_leave(r, EV_BARRIER_DONE, AGENT_HOST_LINGER_MS);
}

/* The other nodes have their answer once they hang up: the exit barrier's end, or the refusal of
 * a stopped or failed run. */
void agent__rdzv_leave(struct agent_rdzv *r, agent_event_t done, uint64_t linger_ms) {
    agent_t *a = r->a;
    if (agent__rdzv_serving(r)) {
        r->linger_done = done;
        uint64_t now = uv_now(a->cfg.loop);
        r->linger_until = linger_ms > UINT64_MAX - now ? UINT64_MAX : now + linger_ms;
        if (uv_timer_start(&r->linger_timer, on_linger, 0, 10) == 0)
            return;
        /* Without the timer there is no lingering: leave at once. */
    }
    agent__event(a, done, NULL);
}

/* Serves this node's store on host:port (0: the kernel's pick) with the job's token, or without
 * authentication when the job has none. Returns agent__job_store_host's code (err says why). */
static int serve_store(struct agent_rdzv *r, const char *host, int port, ddp_err_t *err) {
    rdzv_server_opts_t so = {.host = host, .port = (uint16_t)port, .embedded = 1};
    if (r->token->len > 0) {
        so.token = r->token->data;
        so.token_len = r->token->len;
    } else {
        so.no_auth = 1;
    }
    ddp_err_clear(err);
    return agent__job_store_host(r->a, &so, err);
}

/* Hosts the store on the endpoint when it is this machine's (or --rdzv_conf is_host=1) and the
 * port is free; another agent on the same machine may already host it. Returns 0, or
 * DDP_EUSAGE (logged) when is_host=1 and the endpoint cannot be served. */
static int maybe_host(struct agent_rdzv *r) {
    agent_t *a = r->a;
    int is_host = a->cfg.job->rdzv.is_host;
    if (is_host == 0 || (is_host < 0 && !ddp_addr_is_local(r->addr)))
        return 0;
    ddp_err_t err;
    int rc = serve_store(r, r->addr, r->port, &err);
    if (rc == 0) {
        /* Port 0 (the first host of a job started over ssh): the kernel's pick, reported. */
        r->port = rdzv_server_port(a->stores.store);
        DDP_INFO("hosting the rendezvous store on %s:%d", r->addr, r->port);
        agent__store_nofile_log(a->stores.store);
        if (r->token->len == 0)
            DDP_WARN("no job token (" DDP_ENV_TOKEN_NAMES "): the rendezvous store on "
                     "%s:%d accepts any client",
                     r->addr, r->port);
        return 0;
    }
    if (is_host == 1) {
        DDP_ERROR("--rdzv_conf is_host=1: unable to serve %s:%d: %s", r->addr, r->port,
                  err.text[0] ? err.text : ddp_strerror(rc));
        return DDP_EUSAGE;
    }
    /* Busy: another agent here hosts it (c10d's rule); join as a client. */
    DDP_DEBUG("not hosting %s:%d (%s)", r->addr, r->port, err.text);
    return 0;
}

/* The etcd backend (rdzv_elect.c names the store): the store the link meets at is now
 * addr:port, said once per move; a link that is up with another store lets it go and reconnects
 * here (a stopped leader does not close its connections). */
static void store_moved(struct agent_rdzv *r, const char *addr, int port, const char *via) {
    agent_t *a = r->a;
    /* The same address again is news only when this node has come to serve it: a candidate of
     * etcd_stores started again where its previous agent's key still named it, now elected. */
    int same = r->elected && strcmp(r->leader_addr, addr) == 0 && r->port == port;
    if (same && (r->said_serving || !r->leading))
        return;
    r->said_serving = r->leading;
    int first = !r->elected;
    char prev_addr[RDZV_HOST_MAX + 1];
    int prev_port = r->port;
    snprintf(prev_addr, sizeof prev_addr, "%s", r->leader_addr);
    snprintf(r->leader_addr, sizeof r->leader_addr, "%s", addr);
    r->port = port;
    r->elected = 1;
    agent__job_store_at(a, r->leader_addr, r->port, r->token);
    char shown[RDZV_HOST_MAX + 16];
    rdzv_etcd_store_addr_format(shown, sizeof shown, addr, port);
    /* The first is the job's start; a move is a failover, said at the default level. */
    /* A follower's first store is a candidate's answer at the job's start (its candidates
     * were said). */
    int start = first || (r->follower && r->round_told < 0 && !r->spare_said);
    if (via != NULL)
        ddp_log(r->follow_quiet ? DDP_LOG_DEBUG
                : start         ? DDP_LOG_INFO
                                : DDP_LOG_WARN,
                "rendezvous store now at %s (named by the store candidate at %s)", shown, via);
    else
        ddp_log(start ? DDP_LOG_INFO : DDP_LOG_WARN,
                "rendezvous store now at %s%s (elected through etcd at %s)", shown,
                r->leading ? ", served by this node" : "", a->cfg.job->etcd.endpoints);
    agent__evlog(a, "rendezvous_store_elected", "{s:s, s:b}", "store", shown, "self", r->leading);
    if (same || first || r->ctl == NULL)
        return; /* same: the link meets this store already (its JOIN was told "not yet") */
    if (r->link == LINK_UP) {
        /* The link's line names the store it leaves; r->addr is the new one already. */
        rdzv_etcd_store_addr_format(r->moved_from, sizeof r->moved_from, prev_addr, prev_port);
        agent__link_lost(r, "a new leader was elected");
        r->moved_from[0] = '\0';
    } else if (r->link == LINK_RECONNECTING || r->link == LINK_CHECKING)
        agent__link_event(r, LINK_EV_RETRY, 0, NULL); /* at once, to the new address */
}

/* This node led and lost its lease (cut off from etcd, or stopped past the TTL): another may lead
 * now. The store closes at once and the node leaves the job. */
static void leadership_lost(struct agent_rdzv *r, const char *why) {
    agent_t *a = r->a;
    agent__job_store_drop(a);
    DDP_ERROR("lost the etcd lease of the rendezvous store (%s): stopped serving it; this node "
              "is out of the job",
              why != NULL ? why : "expired");
    agent__evlog(a, "rendezvous_leadership_lost", "{s:s}", "reason", why != NULL ? why : "");
    if (r->link != LINK_STOPPED) {
        agent__link_event(r, LINK_EV_STOP, 0, NULL);
        emit(a, EV_RDZV_ERROR);
    }
}

static const agent_elect_hooks_t elect_hooks = {.moved = store_moved, .lost = leadership_lost};

static int is_loopback(const char *addr) {
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0;
}

/* The etcd backend: serves this node's store on a port of its own (the kernel's pick, or its
 * etcd_stores address), so that its address is known before the campaign, then stands for election
 * (a follower serves none). Returns 0 or a negative code (logged). */
static int elect_start(struct agent_rdzv *r) {
    r->addr = r->leader_addr;
    agent__elect_host(r);
    int rc = agent__elect_roles(r);
    if (rc < 0)
        return rc;
    /* No store of its own where it is never elected: a follower; an observer of the daemons'
     * election (etcd_agents_campaign=0). */
    if (r->follower || r->a->cfg.job->etcd.follow_only)
        return agent__elect_start(r, NULL, 0, &elect_hooks);
    /* A candidate of etcd_stores serves at its address there; any other on the kernel's pick.
     * A name that this machine resolves to a loopback address while the cluster reaches it on
     * another (Debian's /etc/hosts maps the host's own name to 127.0.1.1) is served on the
     * address toward etcd instead, which is what the election publishes. */
    const char *host = r->host;
    int port = 0;
    if (r->store_index >= 0) {
        const char *want = r->stores[r->store_index].addr;
        if (!is_loopback(want) || is_loopback(r->host))
            host = want;
        port = r->stores[r->store_index].port;
    }
    ddp_err_t err;
    if ((rc = serve_store(r, host, port, &err)) < 0) {
        DDP_ERROR("unable to serve a rendezvous store on %s%s: %s", host,
                  r->store_index >= 0 ? " (its address in --rdzv_conf etcd_stores)" : "",
                  err.text[0] ? err.text : ddp_strerror(rc));
        /* An address the job names that this machine refuses is the job's setting's fault,
         * as is_host=1's endpoint. */
        return r->store_index >= 0 ? DDP_EUSAGE : rc;
    }
    return agent__elect_start(r, host, rdzv_server_port(r->a->stores.store), &elect_hooks);
}

int agent__rdzv_start(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    struct agent_rdzv *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    a->rdzv = r;
    r->a = a;
    r->watch_round = -1;
    r->round_told = -1;
    r->addr = job->rdzv_addr; /* agent_job_prepare resolved it */
    r->port = job->rdzv_port;
    r->token = &job->token;
    int rc;
    if (job->backend == AGENT_RDZV_ETCD) {
        if ((rc = uv_timer_init(a->cfg.loop, &r->join_retry_timer)) < 0)
            return rc;
        r->join_retry_timer.data = r;
        /* The election names the store (and sets addr, port and host). */
        if ((rc = elect_start(r)) < 0)
            return rc;
        /* etcd unreachable: the job fails as one whose store cannot be reached does, at its
         * first JOIN (exit 1). */
        r->elect_failed = rc > 0;
    } else {
        if (job->local_addr != NULL)
            snprintf(r->host, sizeof r->host, "%s", job->local_addr);
        else
            ddp_addr_route_source(r->addr, r->port, r->host, sizeof r->host);
        if ((rc = maybe_host(r)) < 0)
            return rc;
    }
    /* Served by every agent, used by the one that becomes group rank 0: its port goes with the
     * JOIN, so MASTER_PORT is bound before anyone is told it (no port race). */
    if (!job->worker_store_own &&
        (rc = agent__worker_store_start(a, r->host, 0, (size_t)job->nproc * (size_t)job->max_nodes,
                                        "this node's address, --local_addr")) < 0)
        return rc;
    agent__job_store_at(a, r->addr, r->port, r->token);
    if (r->elect_failed)
        return 0;
    /* The first JOIN is agent_run's to send, once the loop is fully set up: a JOIN refused here
     * would feed the state table before the agent is in SUP_JOINING. */
    return agent__link_start(r, (int)job->rdzv.join_timeout_ms);
}

int agent__rdzv_stop(agent_t *a, void (*done)(void *arg), void *arg) {
    if (a->rdzv == NULL)
        return 0;
    agent__link_event(a->rdzv, LINK_EV_STOP, 0, NULL);
    return agent__elect_stop(a->rdzv, done, arg);
}

/* Frees the state once the loop has closed every handle (agent_run calls it after uv_run). */
void agent__rdzv_free(agent_t *a) {
    if (a->rdzv == NULL)
        return;
    free(a->rdzv);
    a->rdzv = NULL;
}
