/* SPDX-License-Identifier: Apache-2.0
 * The agent's side of a multi-node rendezvous (docs/ARCHITECTURE.md): host the store
 * when the endpoint is this machine's, JOIN rounds, watch for the end of the running round, send
 * heartbeats, report failures, and leave through a bounded exit barrier. Everything is
 * asynchronous on the agent's loop (rdzv_aclient), so signals are handled during a rendezvous.
 *
 * Two connections: "ctl" carries JOIN (parked until the round closes), HEARTBEAT, FAIL and the
 * exit barrier; "watch" holds a parked WAIT on __rdzv/<run>/end/<round>, which the server SETs
 * when the round ends (a failure, a death, a node joining).
 *
 * A lost store that is not an agent's (the ddp-rendezvous daemon, restarted by systemd or by
 * hand; or a link that was down) is reconnected to for up to store_reconnect_timeout: the group
 * stops (EV_STORE_LOST) and the node JOINs again, carrying the newest round it was told and the
 * restarts it saw counted, so that a daemon that forgot the run numbers its rounds on and keeps
 * the count. An agent's store ends with that agent: losing it ends the job at once. */
#include "agent_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ddp_addr.h"
#include "ddp_contract.h"
#include "ddp_escape.h"
#include "ddp_log.h"
#include "rdzv_acall.h"
#include "rdzv_aclient.h"
#include "rdzv_client.h"
#include "rdzv_layout.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

/* Between two tries to reach a lost store when one failed past its connect (a dying daemon's
 * listener can still accept, then close). */
#define AGENT_RECONNECT_RETRY_MS 100
/* An agent's store that closed the connection is given this long to answer again: it is still
 * there when its server closed a node it had declared dead (this agent was stopped, or cut off),
 * and gone for good when its agent died (nobody serves the address again: refused at once). */
#define AGENT_EMBEDDED_CHECK_MS 2000
/* Slack on top of join_timeout for the parked JOIN: the server answers at join_timeout itself. */
#define AGENT_JOIN_SLACK_MS 10000
/* The hosting agent keeps the store up after the exit barrier, after stopping the run, or after
 * a JOIN refused (the run failed), until the other nodes have hung up (they have their answer
 * then), for at most this long. */
#define AGENT_HOST_LINGER_MS 2000
/* While a JOIN is parked, a line now and then says who has joined, so that a rendezvous waiting
 * for a missing node is not silent for all of join_timeout (600 s by default): first after
 * min(10 s, join_timeout / 4), then at doubling gaps up to a minute. */
#define AGENT_JOIN_REPORT_FIRST_MS 10000
#define AGENT_JOIN_REPORT_MAX_MS 60000
/* Room for one text from the store escaped for the log (a reply's error text is at most 1024
 * bytes; a longer escape is cut). */
#define AGENT_STORE_TEXT_MAX 1536

struct agent_rdzv {
    agent_t *a;
    rdzv_aclient_t *ctl, *watch;
    const char *addr; /* the endpoint, numeric (the job's rdzv_addr) */
    int port;
    char host[RDZV_HOST_MAX + 1]; /* this node as the others reach it */
    const ddp_buf_t *token;       /* the job's; may be empty */
    uv_timer_t hb_timer;
    uv_timer_t linger_timer;
    uint64_t linger_until;
    agent_event_t linger_done; /* emitted when the lingering ends */
    int hb_pending;
    uint64_t hb_sent_ms;
    /* The spare heartbeat path. A control connection that lost a heartbeat to a network outage
     * retransmits it on TCP's exponential backoff: seconds after the link is back, past the
     * keep-alive bound. When a heartbeat goes unanswered for 1.5 intervals, BEAT_FOR goes on a
     * fresh connection (no backoff), naming this node's member and key, until the control
     * connection answers again. */
    int64_t member, member_key; /* from the last JOIN reply; member 0: none yet */
    rdzv_aclient_t *spare;      /* the fresh connection, or NULL */
    int spare_pending;          /* a BEAT_FOR on it awaits its reply */
    uint64_t spare_sent_ms;     /* uv_now() of that BEAT_FOR */
    uint64_t spare_answered_ms; /* uv_now() of the last BEAT_FOR the store counted */
    uint64_t spare_since_ms;    /* uv_now() when the spare path opened (for the log line) */
    int barrier_phase;          /* 0 none, 1 ADD sent, 2 ADD answered: waiting for the others */
    uint64_t barrier_deadline;  /* uv_now() ms when the exit barrier's close_timeout runs out */
    int64_t watch_round;        /* the round the newest watch WAIT is for, -1 none */
    int watch_waits;            /* watch WAITs sent and not answered yet (FIFO: newest last) */
    uint64_t join_sent_ms;      /* uv_now() when the parked JOIN was sent */
    uint64_t join_report_at;    /* uv_now() of the next waiting line */
    uint64_t join_report_gap;
    int join_status_pending; /* an RDZV_STATUS for the waiting line is on the watch connection */
    int lost;                /* the store was lost (said once) */
    int spare_said;          /* waiting as a spare was logged (until the next round joined) */
    int stopping;
    /* Carried across a lost store (rdzv_join_req_t): */
    int joined;            /* a JOIN reply came: a->round is a round this node was told */
    int embedded;          /* that reply said the store is an agent's (RDZV_STORE_EMBEDDED) */
    int64_t restarts_seen; /* the most restarts_used any reply said */
    /* Reconnecting to a lost store: */
    int reconnecting;             /* connections not both re-made yet */
    int reconnect_pending;        /* of the two, how many have not connected */
    uint64_t reconnect_since_ms;  /* uv_now() when the store was lost */
    uint64_t reconnect_window_ms; /* how long to try: store_reconnect_timeout, or the check below */
    int reconnect_check;          /* an agent's store closed: only checking it still serves */
    uv_timer_t reconnect_timer;   /* the next try after one that failed */
    int settling;                 /* a barrier_settle GET is queued: the barrier WAIT stops */
};

/* Text that came from the store (a reply's error text, a key's value, a client error quoting the
 * server), escaped for the log: whoever runs or reaches the store cannot put control bytes on the
 * operator's terminal or forge log lines. len (size_t)-1: s is NUL-terminated (NULL reads as
 * dflt). Borrowed: valid until buf is reused. */
static const char *store_text(const void *s, size_t len, const char *dflt, char *buf) {
    if (s == NULL)
        s = dflt, len = (size_t)-1;
    if (len == (size_t)-1)
        len = strlen(s);
    ddp_str_escape(buf, AGENT_STORE_TEXT_MAX, s, len);
    return buf;
}

int agent__rdzv_wanted(const agent_job_t *job) {
    return job->max_nodes > 1;
}

/* The flag that names the endpoint of job's backend, for messages. */
static const char *endpoint_flag(const agent_job_t *job) {
    return job->backend == AGENT_RDZV_STATIC ? "--master_addr" : "--rdzv_endpoint";
}

int agent__rdzv_prepare(agent_job_t *job, ddp_err_t *err) {
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

static int rdzv_connect(struct agent_rdzv *r, int connect_timeout_ms);

/* How this agent connects to the store: its endpoint and token, trying for connect_timeout_ms. */
static rdzv_client_opts_t store_opts(const struct agent_rdzv *r, int connect_timeout_ms) {
    rdzv_client_opts_t co = {
        .host = r->addr,
        .port = (uint16_t)r->port,
        .token = r->token->len ? r->token->data : NULL,
        .token_len = r->token->len,
        .connect_timeout_ms = connect_timeout_ms,
        .io_timeout_ms = (int)r->a->job->rdzv.read_timeout_ms,
    };
    return co;
}

/* Closes the spare heartbeat connection, if any (its pending BEAT_FOR completes cancelled). */
static void spare_close(struct agent_rdzv *r) {
    rdzv_aclient_close(r->spare, NULL, NULL);
    r->spare = NULL;
    r->spare_pending = 0;
}

/* Drops both connections and opens new ones, trying until the reconnect window closes (requests
 * queue on them meanwhile), then tells the supervisor, which stops the group (or settles the
 * exit barrier) and JOINs again on the new ones. Returns 0 or a negative code. */
static int reconnect_try(struct agent_rdzv *r) {
    agent_t *a = r->a;
    uint64_t end = r->reconnect_since_ms + r->reconnect_window_ms;
    uint64_t now = uv_now(a->loop);
    uint64_t left = end > now ? end - now : 1;
    /* Whatever was pending on the old connections completes with DDP_ECANCELED, later: the
     * callbacks ignore that status before touching any of the state reset here. */
    rdzv_aclient_close(r->ctl, NULL, NULL);
    rdzv_aclient_close(r->watch, NULL, NULL);
    r->ctl = r->watch = NULL;
    r->hb_pending = 0;
    spare_close(r);
    r->member = 0; /* the store that forgot the run forgot the member too */
    r->watch_round = -1;
    r->watch_waits = 0;
    r->join_status_pending = 0;
    r->barrier_phase = 0;
    r->settling = 0;
    r->reconnecting = 1;
    r->reconnect_pending = 2;
    int rc = rdzv_connect(r, left > INT_MAX ? INT_MAX : (int)left);
    if (rc < 0)
        return rc;
    emit(a, EV_STORE_LOST);
    return 0;
}

static void on_reconnect_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (r->stopping || !r->reconnecting)
        return;
    if (reconnect_try(r) < 0) {
        r->lost = 1;
        agent__rdzv_stop(r->a);
        emit(r->a, EV_RDZV_ERROR);
    }
}

/* One of the new connections failed (refused past its connect, or lost after it): both are made
 * again AGENT_RECONNECT_RETRY_MS later, while the window lasts. Returns 0, or -ETIMEDOUT when
 * the window is over (the caller ends the job). */
static int reconnect_again(struct agent_rdzv *r) {
    if (uv_is_active((uv_handle_t *)&r->reconnect_timer))
        return 0;
    if (uv_now(r->a->loop) + AGENT_RECONNECT_RETRY_MS >=
        r->reconnect_since_ms + r->reconnect_window_ms)
        return -ETIMEDOUT;
    return uv_timer_start(&r->reconnect_timer, on_reconnect_timer, AGENT_RECONNECT_RETRY_MS, 0);
}

/* The store went away: reconnect for up to store_reconnect_timeout, or, check (an agent's store
 * that closed the connection), for AGENT_EMBEDDED_CHECK_MS. Returns 0, or a negative code when
 * not even that could start. */
static int reconnect_begin(struct agent_rdzv *r, const char *why, int check) {
    agent_t *a = r->a;
    r->reconnect_check = check;
    r->reconnect_window_ms =
        check ? AGENT_EMBEDDED_CHECK_MS : (uint64_t)a->job->rdzv.store_reconnect_timeout_ms;
    if (check)
        DDP_WARN("the rendezvous store at %s:%d (served by the agent of another node) closed the "
                 "connection: %s; reconnecting if it still serves",
                 r->addr, r->port, why);
    else
        DDP_WARN("lost the rendezvous store at %s:%d: %s; reconnecting for up to %gs "
                 "(--rdzv_conf store_reconnect_timeout)",
                 r->addr, r->port, why, r->reconnect_window_ms / 1000.0);
    agent__evlog(a, "rendezvous_store_lost", "{s:I}", "round", (json_int_t)a->round);
    r->reconnect_since_ms = uv_now(a->loop);
    return reconnect_try(r);
}

/* A connection to the store failed or was lost while it mattered. silent: the store did not
 * answer heartbeats for the keep-alive bound, rather than close: this node's network is as
 * likely as the store to be at fault, so even an agent's store is tried for as long as the
 * daemon's. An agent's store that closed the connection is only checked (reconnect_begin). */
static void store_lost_how(struct agent_rdzv *r, const char *errtext, int silent) {
    agent_t *a = r->a;
    char esc[AGENT_STORE_TEXT_MAX];
    /* Every request still pending on the connection fails with it: one loss, said once. */
    if (r->stopping || r->lost)
        return;
    /* While reconnecting, only the new connections report (the old ones were closed): one that
     * connected and was lost again (a daemon killed twice) is made again with the other, or
     * a JOIN sent on it would be lost with it. */
    if (r->reconnecting) {
        if (reconnect_again(r) == 0)
            return;
        r->lost = 1;
        DDP_ERROR("unable to reach the rendezvous store at %s:%d again within %gs: %s; this "
                  "node is out of the job",
                  r->addr, r->port, r->reconnect_window_ms / 1000.0,
                  store_text(errtext, (size_t)-1, "connection closed", esc));
        agent__rdzv_stop(a);
        emit(a, EV_RDZV_ERROR);
        return;
    }
    const char *why = store_text(errtext, (size_t)-1, "connection closed", esc);
    if (a->state == SUP_BARRIER && r->barrier_phase == 2 && r->embedded) {
        /* Our arrival was counted; the hosting agent left once everyone had arrived. */
        DDP_DEBUG("store gone after the exit barrier: %s", why);
        emit(a, EV_BARRIER_DONE);
        return;
    }
    /* One this agent serves cannot be lost at all. Before the first JOIN reply nobody knows
     * whose it is: the daemon's, as far as this node can tell. */
    if (a->store == NULL && a->job->rdzv.store_reconnect_timeout_ms > 0 &&
        reconnect_begin(r, why, r->embedded && !silent) == 0)
        return;
    r->lost = 1;
    DDP_ERROR("lost the rendezvous store at %s:%d%s: %s; this node is out of the job", r->addr,
              r->port, r->embedded ? " (served by the agent of another node)" : "", why);
    emit(a, EV_RDZV_ERROR);
}

static void store_lost(struct agent_rdzv *r, const char *errtext) {
    store_lost_how(r, errtext, 0);
}

static void on_connected(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status == 0) {
        /* With a retry pending (the other connection failed), this one is closed soon. */
        if (r->reconnecting && !uv_is_active((uv_handle_t *)&r->reconnect_timer) &&
            --r->reconnect_pending == 0) {
            r->reconnecting = 0;
            DDP_WARN("reconnected to the rendezvous store at %s:%d after %.1f s", r->addr, r->port,
                     (uv_now(r->a->loop) - r->reconnect_since_ms) / 1000.0);
            agent__evlog(r->a, "rendezvous_store_reconnected", "{s:I}", "down_ms",
                         (json_int_t)(uv_now(r->a->loop) - r->reconnect_since_ms));
        }
        return;
    }
    char esc[AGENT_STORE_TEXT_MAX];
    if (r->reconnecting && reconnect_again(r) == 0) {
        /* Reached but refused (a daemon dying or still starting): try again while time is
         * left; the other connection's outcome no longer matters. */
        DDP_DEBUG("the rendezvous store at %s:%d is not back yet: %s", r->addr, r->port,
                  store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
        return;
    }
    if (r->reconnecting && r->reconnect_check)
        DDP_ERROR("lost the rendezvous store at %s:%d (served by the agent of another node, "
                  "which is gone): %s; this node is out of the job",
                  r->addr, r->port, store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    else if (r->reconnecting)
        DDP_ERROR("unable to reach the rendezvous store at %s:%d again within "
                  "store_reconnect_timeout=%gs: %s; this node is out of the job",
                  r->addr, r->port, r->reconnect_window_ms / 1000.0,
                  store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    else
        DDP_ERROR("unable to join the rendezvous store at %s:%d: %s%s", r->addr, r->port,
                  store_text(errtext, (size_t)-1, ddp_strerror(status), esc),
                  r->token->len == 0 ? " (agents read the job token from " DDP_ENV_TOKEN_NAMES ")"
                                     : "");
    /* Stop first, so the other connection's failure does not log the same thing again. */
    agent__rdzv_stop(r->a);
    emit(r->a, EV_RDZV_ERROR);
}

static void on_conn_lost(void *arg, int status, const char *errtext) {
    (void)status;
    store_lost(arg, errtext);
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

static void leave_after_linger(struct agent_rdzv *r, agent_event_t done);

/* The key the server SETs when round `round` ends (its value says why). The run id was checked
 * (agent_job_prepare) and rounds are never negative: it fits RDZV_LAYOUT_KEY_MAX. */
static void end_key(const struct agent_rdzv *r, int64_t round, char *key, size_t cap) {
    rdzv_layout_end_key(key, cap, r->a->job->run_id, round);
}

static void on_round_reason(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)arg;
    (void)errtext;
    char esc[AGENT_STORE_TEXT_MAX];
    /* The key's value: the server's reason, or whatever a client of the store SET there. */
    if (status == 0 && len > 0)
        DDP_WARN("%s; re-joining", store_text(reply, len, "", esc));
}

static void on_round_end(void *arg, int status, const uint8_t *reply, size_t len,
                         const char *errtext) {
    (void)reply;
    (void)len;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->stopping)
        return; /* a closed connection's: its count was reset */
    r->watch_waits--;
    if (status != 0) {
        store_lost(r, errtext);
        return;
    }
    /* The end of an earlier round: this node ended it itself (a failure, a hang) and joined the
     * next one before the key's reply came back; the next round's WAIT is queued behind this
     * one on the same connection, so the reply is for the newest round only when no other is
     * pending. Taking it for the newest round's end would stop a group that just started. */
    if (r->watch_waits > 0 || r->watch_round != r->a->round)
        return;
    /* The server stored why the round ended (a failure, a lost node, a scale-up) as the key's
     * value: say it, for the user watching this node. */
    char key[RDZV_LAYOUT_KEY_MAX];
    end_key(r, r->watch_round, key, sizeof key);
    if (r->a->state == SUP_RUNNING)
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
        store_lost(r, err.text);
    else
        r->watch_waits++;
}

static void on_join(void *arg, int status, const rdzv_round_reply_t *rep, const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == DDP_ECLOSED || status == DDP_EPROTO) {
        /* The connection, not the rendezvous, failed: a lost store (or one not back yet), or
         * one that answers what no store of ours would. */
        store_lost(r, errtext);
        return;
    }
    if (status != 0) {
        DDP_ERROR("rendezvous '%s' at %s:%d failed: %s", a->job->run_id, r->addr, r->port,
                  store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
        emit(a, EV_RDZV_ERROR);
        return;
    }
    if (rep->status != 0 && rep->code == DDP_ERDZV_SPARE) {
        /* The run is at max_nodes: this node waits for a place (a node excluded or lost). The
         * store answers a spare now and then; its JOIN again is the spare's keep-alive. */
        if (!r->spare_said) {
            DDP_INFO("%s", store_text(rep->text.data, rep->text.len, "waiting as a spare", esc));
            agent__evlog(a, "rendezvous_spare", "{s:I}", "max_nodes",
                         (json_int_t)a->job->max_nodes);
            r->spare_said = 1;
        }
        agent__rdzv_join(a);
        return;
    }
    if (rep->status != 0) {
        const char *why =
            rep->text.len > 0 ? store_text(rep->text.data, rep->text.len, "", esc) : "refused";
        if (rep->code == DDP_ERDZV_EXCLUDED) {
            /* A sick node kept out of the run: exit 4 (unfit), so that a scheduler replaces it
             * and an ssh launch goes on without it. */
            agent__evlog(a, "node_excluded", "{s:s}", "reason", why);
            a->result.unfit = 1;
        }
        if (strncmp(why, "rendezvous '", 12) == 0) /* the server's text names the run */
            DDP_ERROR("%s", why);
        else
            DDP_ERROR("rendezvous '%s': %s", a->job->run_id, why);
        /* The run failed (or was stopped): when this agent hosts the store, the node whose
         * failure ended it may still be on its way to the same refusal, after which it prints
         * its summary. Gone with the store, it would learn only that the store is lost. */
        leave_after_linger(r, EV_RDZV_ERROR);
        return;
    }
    const rdzv_join_result_t *j = &rep->join;
    const char *bad = join_result_check(j, a->nproc, a->job->max_nodes);
    if (bad != NULL) {
        DDP_ERROR("rendezvous '%s' at %s:%d: the JOIN reply is out of range (%s)", a->job->run_id,
                  r->addr, r->port, bad);
        emit(a, EV_RDZV_ERROR);
        return;
    }
    r->joined = 1;
    r->spare_said = 0;
    r->member = j->member;
    r->member_key = j->member_key;
    r->embedded = (j->store_flags & RDZV_STORE_EMBEDDED) != 0;
    if (j->restarts_used > r->restarts_seen)
        r->restarts_seen = j->restarts_used;
    /* Every node's workers use group rank 0's store: its limits follow the world size, which
     * the start could only guess (this node's nproc times --nnodes' maximum). */
    rdzv_server_set_workers(a->wstore, (size_t)j->world_size);
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
             a->job->run_id, (long long)a->round, a->node_rank, a->group_world_size, a->rank_base,
             a->rank_base + a->nproc - 1, a->world_size,
             store_text(a->master_addr, (size_t)-1, "", esc), a->master_port);
    agent__evlog(a, "rendezvous_joined", "{s:I, s:i, s:i, s:i, s:s, s:i}", "round",
                 (json_int_t)a->round, "nnodes", a->group_world_size, "world_size", a->world_size,
                 "rank_base", a->rank_base, "master_addr", a->master_addr, "master_port",
                 a->master_port);
    watch_round(r, a->round);
    emit(a, EV_JOINED);
}

void agent__rdzv_join(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    const agent_job_t *job = a->job;
    rdzv_join_req_t req;
    memset(&req, 0, sizeof req);
    snprintf(req.run_id, sizeof req.run_id, "%s", job->run_id);
    snprintf(req.host, sizeof req.host, "%s", r->host);
    req.want_node_rank = job->node_rank;
    req.nproc = a->nproc;
    if (a->wstore != NULL) {
        /* None of this node's workers runs, and the next group cannot start anywhere before
         * this JOIN is in the round: the previous group's keys go now. */
        rdzv_server_reset(a->wstore);
        req.master_port = rdzv_server_port(a->wstore);
    } else {
        int port = agent__pick_free_port(r->host);
        req.master_port = port > 0 ? port : AGENT_DEFAULT_MASTER_PORT;
    }
    r->barrier_phase = 0;
    r->settling = 0;
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
    req.min_round = r->joined ? a->round + 1 : 0;
    req.restarts_used = r->restarts_seen > a->attempt ? r->restarts_seen : a->attempt;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_acall_join(r->ctl, &req, (int)req.cfg.join_timeout_ms + AGENT_JOIN_SLACK_MS,
                             on_join, r, &err);
    uint64_t first = (uint64_t)req.cfg.join_timeout_ms / 4;
    r->join_sent_ms = uv_now(a->loop);
    r->join_report_gap = first < AGENT_JOIN_REPORT_FIRST_MS ? first : AGENT_JOIN_REPORT_FIRST_MS;
    r->join_report_at = r->join_sent_ms + r->join_report_gap;
    if (rc == DDP_ECLOSED || (rc < 0 && r->reconnecting)) {
        /* The connection went (or is being made again): the JOIN goes out once it is back. */
        store_lost(r, err.text[0] ? err.text : ddp_strerror(rc));
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
    if (rep->fail.restarts_used > r->restarts_seen)
        r->restarts_seen = rep->fail.restarts_used;
    if (rep->fail.status == RDZV_FAIL_RUN_FAILED)
        DDP_WARN("rendezvous '%s': restarts spent (%lld of %lld): the job fails", r->a->job->run_id,
                 (long long)rep->fail.restarts_used, (long long)rep->fail.max_restarts);
}

static void on_unfit_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    /* Best effort: the store shows the node as unfit; a lost store is found by the next JOIN. */
    if (status != 0 || rep->status != 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_DEBUG("the store did not record this node as unfit: %s",
                  status != 0 ? store_text(errtext, (size_t)-1, ddp_strerror(status), esc)
                              : "no such run yet");
    }
}

void agent__rdzv_report_unfit(agent_t *a, const char *reason) {
    struct agent_rdzv *r = a->rdzv;
    if (r == NULL || r->ctl == NULL || r->reconnecting || r->stopping)
        return;
    rdzv_acall_unfit(r->ctl, a->job->run_id, r->host, reason, on_unfit_reply, r, NULL);
}

void agent__rdzv_report_failure(agent_t *a, const char *what) {
    struct agent_rdzv *r = a->rdzv;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_acall_fail(r->ctl, a->job->run_id, a->round, what, on_fail_reply, r, &err);
    if (rc < 0)
        DDP_WARN("unable to report the failure to the rendezvous: %s",
                 err.text[0] ? err.text : ddp_strerror(rc));
}

static void on_abort_reply(void *arg, int status, const rdzv_round_reply_t *rep,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status != 0)
        DDP_WARN("unable to stop rendezvous '%s' on the other nodes (they wait for this one "
                 "until join_timeout): %s",
                 r->a->job->run_id, store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    else if (rep->status == 0)
        DDP_INFO("rendezvous '%s' stopped on every node", r->a->job->run_id);
    /* status 1: another node stopped the run first, or it had failed already */
    /* A node whose JOIN is on its way is refused with the reason only while the store is up. */
    leave_after_linger(r, EV_ABORT_DONE);
}

void agent__rdzv_abort(agent_t *a, const char *why) {
    struct agent_rdzv *r = a->rdzv;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_acall_abort(r->ctl, a->job->run_id, why, on_abort_reply, r, &err);
    if (rc < 0) {
        DDP_WARN("unable to stop rendezvous '%s' on the other nodes (they wait for this one "
                 "until join_timeout): %s",
                 a->job->run_id, err.text[0] ? err.text : ddp_strerror(rc));
        emit(a, EV_ABORT_DONE);
    }
}

static void on_heartbeat(void *arg, int status, const rdzv_round_reply_t *rep,
                         const char *errtext) {
    (void)rep;
    (void)errtext;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED)
        return;        /* a closed connection's: hb_pending was reset */
    r->hb_pending = 0; /* a lost store shows up on the watch connection */
    if (r->spare != NULL) {
        DDP_INFO("the rendezvous store answers on the control connection again after %.1f s; "
                 "heartbeats went on a spare connection meanwhile",
                 (uv_now(r->a->loop) - r->spare_since_ms) / 1000.0);
        spare_close(r);
    }
}

static void on_spare_beat(void *arg, int status, const rdzv_round_reply_t *rep,
                          const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED)
        return; /* closed: spare_pending was reset */
    r->spare_pending = 0;
    /* Status 1: not a member (its round is over, or another store): nothing was counted. */
    if (status == 0 && rep->status == 0)
        r->spare_answered_ms = uv_now(r->a->loop);
}

static void on_spare_connected(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == 0 || status == DDP_ECANCELED)
        return;
    /* Not reached yet (the link is still down): the next tick makes another. */
    DDP_DEBUG("spare heartbeat connection to %s:%d: %s", r->addr, r->port,
              store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    spare_close(r);
}

static void on_spare_lost(void *arg, int status, const char *errtext) {
    (void)status, (void)errtext;
    spare_close(arg); /* the control connection decides whether the store is lost */
}

/* The spare path (see struct agent_rdzv): a BEAT_FOR on a fresh connection, made again when the
 * last one is itself stuck. A failure here is never the store's loss: the control connection
 * and the keep-alive bound decide that. */
static void spare_beat(struct agent_rdzv *r) {
    agent_t *a = r->a;
    uint64_t now = uv_now(a->loop);
    uint64_t stuck = (uint64_t)a->job->rdzv.keep_alive_interval_ms * 3 / 2;
    if (r->spare != NULL && r->spare_pending && now - r->spare_sent_ms >= stuck)
        spare_close(r);
    if (r->spare == NULL) {
        rdzv_client_opts_t co = store_opts(r, (int)stuck);
        if (rdzv_aclient_connect(a->loop, &co, on_spare_connected, r, &r->spare, NULL) < 0) {
            r->spare = NULL;
            return;
        }
        rdzv_aclient_on_close(r->spare, on_spare_lost, r);
        if (r->spare_since_ms < r->hb_sent_ms)
            r->spare_since_ms = now;
    }
    if (r->spare_pending)
        return;
    if (rdzv_acall_beat_for(r->spare, a->job->run_id, r->member, r->member_key, on_spare_beat, r,
                            NULL) == 0) {
        r->spare_pending = 1;
        r->spare_sent_ms = now;
    }
}

static void on_progress_set(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)arg, (void)reply, (void)len;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status != 0) /* a lost store shows up through the connection's own callbacks */
        DDP_DEBUG("unable to report progress to the store: %s",
                  store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
}

/* With heartbeat supervision, this node's progress goes to the store just before each
 * keep-alive, for `ddprun status` (rdzv_proto.h). Only while a group of this round runs. */
static void progress_send(struct agent_rdzv *r) {
    agent_t *a = r->a;
    rdzv_progress_t p = {.round = a->round};
    char key[RDZV_LAYOUT_KEY_MAX], val[RDZV_PROGRESS_VALUE_MAX];
    if ((a->state != SUP_RUNNING && a->state != SUP_CAPTURING) ||
        agent__hang_progress(a, &p.step, &p.beat_age_ms) < 0 ||
        rdzv_layout_progress_key(key, sizeof key, a->job->run_id, a->node_rank) < 0)
        return;
    int n = rdzv_progress_format(val, sizeof val, &p);
    if (n > 0)
        rdzv_aclient_set(r->ctl, key, val, (size_t)n, on_progress_set, r, NULL);
}

/* Queues one RDZV_HEARTBEAT on the control connection. */
static void heartbeat_send(struct agent_rdzv *r) {
    if (rdzv_acall_heartbeat(r->ctl, r->a->job->run_id, on_heartbeat, r, NULL) == 0) {
        r->hb_pending = 1;
        r->hb_sent_ms = uv_now(r->a->loop);
    }
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
    if (status != 0 || r->stopping || a->state != SUP_JOINING)
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
    const agent_job_t *job = a->job;
    size_t running = total > joined ? (size_t)(total - joined) : 0;
    char others[48] = "";
    if (running > 0)
        snprintf(others, sizeof others, ", %zu running the last round", running);
    DDP_WARN("rendezvous '%s' at %s:%d: waiting %llu s for nodes: %zu of min %d joined round %lld "
             "(max %d)%s; join_timeout %g s",
             job->run_id, r->addr, r->port,
             (unsigned long long)((uv_now(a->loop) - r->join_sent_ms) / 1000), joining,
             job->min_nodes, (long long)json_integer_value(json_object_get(root, "round")),
             job->max_nodes, others, job->rdzv.join_timeout_ms / 1000.0);
    json_decref(root);
}

/* Called on every heartbeat tick while joining: asks for the run's status when a line is due.
 * The watch connection carries it: during a JOIN it holds no WAIT. */
static void join_progress(struct agent_rdzv *r) {
    uint64_t now = uv_now(r->a->loop);
    if (r->join_status_pending || r->watch == NULL || now < r->join_report_at)
        return;
    r->join_report_gap = r->join_report_gap * 2 < AGENT_JOIN_REPORT_MAX_MS
                             ? r->join_report_gap * 2
                             : AGENT_JOIN_REPORT_MAX_MS;
    r->join_report_at = now + r->join_report_gap;
    /* The counts alone (no member listed): see on_join_status. */
    if (rdzv_acall_status_page(r->watch, r->a->job->run_id, 0, 0, on_join_status, r, NULL) == 0)
        r->join_status_pending = 1;
}

static void on_hb_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    agent_t *a = r->a;
    const agent_job_t *job = a->job;
    /* While reconnecting, heartbeats would only queue (the new connections carry the JOIN). */
    if (r->stopping || r->reconnecting)
        return;
    /* Behind a parked JOIN a heartbeat would only queue; joiners are not checked anyway. */
    if (a->state == SUP_JOINING) {
        join_progress(r);
        return;
    }
    if (r->hb_pending) {
        /* The server declares a node dead after this much silence: a node that hears nothing
         * back for as long is cut off (network, a stopped store) and must not go on alone. */
        uint64_t bound =
            (uint64_t)job->rdzv.keep_alive_interval_ms * (uint64_t)job->rdzv.keep_alive_max_attempt;
        uint64_t now = uv_now(a->loop);
        /* A BEAT_FOR the store counted since then: it hears this node. */
        uint64_t heard =
            r->spare_answered_ms > r->hb_sent_ms ? r->spare_answered_ms : r->hb_sent_ms;
        uint64_t waited = now - heard;
        if (waited > bound) {
            char why[96];
            snprintf(why, sizeof why, "no answer to heartbeats for %llu ms",
                     (unsigned long long)waited);
            store_lost_how(r, why, 1);
        } else if (r->member != 0 &&
                   now - r->hb_sent_ms >= (uint64_t)job->rdzv.keep_alive_interval_ms * 3 / 2) {
            spare_beat(r);
        }
        return;
    }
    progress_send(r);
    heartbeat_send(r);
}

static void on_linger(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    rdzv_server_stats_t st;
    rdzv_server_stats(r->a->store, &st);
    /* Our own two connections stay until we close them. */
    if (st.conns > 2 && uv_now(r->a->loop) < r->linger_until)
        return;
    uv_timer_stop(t);
    emit(r->a, r->linger_done);
}

/* Emits done now, or, when this agent hosts the store, once the other nodes have hung up (they
 * have their answer then: the exit barrier's end, or the refusal of a stopped or failed run) or
 * AGENT_HOST_LINGER_MS has passed, whichever comes first. */
static void leave_after_linger(struct agent_rdzv *r, agent_event_t done) {
    agent_t *a = r->a;
    if (a->store != NULL) {
        r->linger_done = done;
        r->linger_until = uv_now(a->loop) + AGENT_HOST_LINGER_MS;
        if (uv_timer_start(&r->linger_timer, on_linger, 0, 10) == 0)
            return;
        /* Without the timer there is no lingering: leave at once. */
    }
    emit(a, done);
}

static void on_barrier_done(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)reply;
    (void)len;
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status == DDP_ETIMEOUT)
        DDP_WARN("exit barrier: not every node arrived within close_timeout=%gs; leaving anyway",
                 a->job->rdzv.close_timeout_ms / 1000.0);
    else if (status != 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_DEBUG("exit barrier: %s", store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    }
    leave_after_linger(r, EV_BARRIER_DONE);
}

/* The exit barrier's counter of this round, or (done) the key its last arrival SETs. */
static void barrier_key(agent_t *a, int done, char *key, size_t cap) {
    if (done)
        rdzv_layout_exit_done_key(key, cap, a->job->run_id, a->round);
    else
        rdzv_layout_exit_key(key, cap, a->job->run_id, a->round);
}

static void on_barrier_wait(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext);

/* Waits on ctl for the exit barrier's done key, half a keep-alive interval at a time. A parked
 * WAIT holds back every later request on its connection, heartbeats included, and the server
 * declares a member silent for keep_alive_interval x keep_alive_max_attempt dead: waiting out
 * close_timeout in one piece ended the round under the nodes whose workers were still running,
 * so one node finishing 15 s before another failed the job. Each slice's end lets the
 * heartbeat out. Returns 0 or a negative code (on_barrier_wait will not run). */
static int barrier_wait(struct agent_rdzv *r) {
    agent_t *a = r->a;
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_key(a, 1, key, sizeof key);
    const char *keys[1] = {key};
    uint64_t now = uv_now(a->loop);
    uint64_t left = r->barrier_deadline > now ? r->barrier_deadline - now : 1;
    /* Half an interval: a heartbeat queued behind the WAIT goes out at most that late. */
    uint64_t slice = (uint64_t)a->job->rdzv.keep_alive_interval_ms / 2;
    if (slice == 0 || slice > left)
        slice = left;
    if (slice > INT_MAX)
        slice = INT_MAX;
    return rdzv_aclient_wait(r->ctl, keys, 1, (int)slice, on_barrier_wait, r, NULL);
}

static void on_barrier_wait(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED)
        return; /* a closed connection's */
    if (status == DDP_ETIMEOUT && r->settling)
        return; /* barrier_settle's ADD decides now */
    if (status == DDP_ETIMEOUT && !r->stopping && uv_now(r->a->loop) < r->barrier_deadline) {
        /* A slice ran out, not close_timeout: heartbeat (unless one is queued), wait again. */
        if (!r->hb_pending)
            heartbeat_send(r);
        int rc = barrier_wait(r);
        if (rc == 0)
            return;
        status = rc;
        errtext = "unable to send the exit barrier request";
    }
    on_barrier_done(arg, status, reply, len, errtext);
}

/* The exit barrier's counter holds arrivals (+1 each) and, once a node has seen the round end
 * before the barrier completed, one BARRIER_SEAL per such node. The store applies ADDs one at a
 * time, so every node reads the same verdict from the value its own ADD returns: the barrier
 * passed if and only if the last arrival came before the first seal. Arrivals below a seal
 * re-join; nodes that seal after the last arrival pass. */
#define BARRIER_SEAL ((int64_t)1 << 32)

static void on_settle(void *arg, int status, const uint8_t *reply, size_t len, const char *errtext);

/* Seals the barrier (see BARRIER_SEAL); on_settle reads the verdict. */
static void barrier_seal(struct agent_rdzv *r) {
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_key(r->a, 0, key, sizeof key);
    if (rdzv_aclient_add(r->ctl, key, BARRIER_SEAL, on_settle, r, NULL) < 0)
        store_lost(r, "unable to reach the store at the exit barrier");
}

static void barrier_broken(struct agent_rdzv *r) {
    agent_t *a = r->a;
    DDP_WARN("rendezvous '%s' round %lld ended before every node passed the exit barrier: "
             "re-joining (this node's workers run again, from the job's checkpoint if it keeps "
             "one)",
             a->job->run_id, (long long)a->round);
    emit(a, EV_BARRIER_BROKEN);
}

static void on_barrier_add(void *arg, int status, const uint8_t *reply, size_t len,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    int64_t n = 0;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status != 0 || rdzv_aclient_reply_i64(reply, len, &n) < 0) {
        /* Not even counted: this node lost the job before it could leave it properly. */
        store_lost(r, errtext ? errtext : "malformed reply at the exit barrier");
        return;
    }
    r->barrier_phase = 2;
    if (n >= BARRIER_SEAL) {
        /* A node saw the round end before everyone had arrived: this arrival is too late. */
        barrier_broken(r);
        return;
    }
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_key(a, 1, key, sizeof key);
    int rc;
    if (n >= a->group_world_size) {
        /* The last node to arrive releases the others. */
        rc = rdzv_aclient_set(r->ctl, key, "1", 1, on_barrier_done, r, NULL);
    } else if (r->settling) {
        /* The round ended while this arrival was on its way. */
        barrier_seal(r);
        return;
    } else {
        r->barrier_deadline = uv_now(a->loop) + (uint64_t)a->job->rdzv.close_timeout_ms;
        rc = barrier_wait(r);
    }
    if (rc < 0)
        on_barrier_done(r, rc, NULL, 0, "unable to send the exit barrier request");
}

void agent__rdzv_exit_barrier(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_key(a, 0, key, sizeof key);
    r->barrier_phase = 1;
    r->settling = 0;
    if (rdzv_aclient_add(r->ctl, key, 1, on_barrier_add, r, NULL) < 0)
        store_lost(r, "unable to reach the store at the exit barrier");
}

static void on_settle(void *arg, int status, const uint8_t *reply, size_t len,
                      const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    int64_t n = 0;
    if (status == DDP_ECANCELED || r->stopping || a->state != SUP_BARRIER)
        return;
    if (status != 0 || rdzv_aclient_reply_i64(reply, len, &n) < 0) {
        store_lost(r, errtext ? errtext : "malformed reply at the exit barrier");
        return; /* settled again once reconnected */
    }
    r->settling = 0;
    if (n % BARRIER_SEAL >= a->group_world_size) {
        /* The last node arrived before anyone sealed: every group succeeded. */
        DDP_DEBUG("exit barrier of round %lld passed by every node", (long long)a->round);
        leave_after_linger(r, EV_BARRIER_DONE);
        return;
    }
    barrier_broken(r);
}

/* The round ended, or the store was lost, while this node waited at the exit barrier: the job is
 * done only if every node arrived first. An arrival still unanswered seals on its reply (it may
 * be the last one); otherwise the seal goes now, behind a parked barrier WAIT on ctl, so that a
 * done reply already on its way is read first. After a reconnection the counter is the new
 * connection's store's: a store that forgot the run has none, and the node re-joins. */
void agent__rdzv_barrier_settle(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    if (r->settling)
        return;
    r->settling = 1;
    if (r->barrier_phase != 1)
        barrier_seal(r);
}

/* Hosts the store on the endpoint when it is this machine's (or --rdzv_conf is_host=1) and the
 * port is free; another agent on the same machine may already host it. Returns 0, or
 * DDP_EUSAGE (logged) when is_host=1 and the endpoint cannot be served. */
static int maybe_host(struct agent_rdzv *r) {
    agent_t *a = r->a;
    int is_host = a->job->rdzv.is_host;
    if (is_host == 0 || (is_host < 0 && !ddp_addr_is_local(r->addr)))
        return 0;
    rdzv_server_opts_t so = {.host = r->addr, .port = (uint16_t)r->port, .embedded = 1};
    if (r->token->len > 0) {
        so.token = r->token->data;
        so.token_len = r->token->len;
    } else {
        so.no_auth = 1;
    }
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_server_start(a->loop, &so, &a->store, &err);
    if (rc == 0) {
        /* Port 0 (the first host of a job started over ssh): the kernel's pick, reported. */
        r->port = rdzv_server_port(a->store);
        DDP_INFO("hosting the rendezvous store on %s:%d", r->addr, r->port);
        agent__store_nofile_log(a->store);
        if (so.no_auth)
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

/* Opens the two connections to the store (ctl and watch), trying for connect_timeout_ms.
 * Returns 0 or a negative code (logged). */
static int rdzv_connect(struct agent_rdzv *r, int connect_timeout_ms) {
    agent_t *a = r->a;
    rdzv_client_opts_t co = store_opts(r, connect_timeout_ms);
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_aclient_connect(a->loop, &co, on_connected, r, &r->ctl, &err);
    if (rc == 0)
        rc = rdzv_aclient_connect(a->loop, &co, on_connected, r, &r->watch, &err);
    if (rc < 0) {
        DDP_ERROR("unable to connect to the rendezvous at %s:%d: %s", r->addr, r->port,
                  err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    rdzv_aclient_on_close(r->ctl, on_conn_lost, r);
    rdzv_aclient_on_close(r->watch, on_conn_lost, r);
    return 0;
}

/* The heartbeat and linger timers, once per agent. Returns 0 or a negative code (logged). */
static int rdzv_timers_start(struct agent_rdzv *r) {
    agent_t *a = r->a;
    int rc;
    r->hb_timer.data = r->linger_timer.data = r->reconnect_timer.data = r;
    uint64_t hb = (uint64_t)a->job->rdzv.keep_alive_interval_ms;
    if ((rc = uv_timer_init(a->loop, &r->hb_timer)) < 0 ||
        (rc = uv_timer_init(a->loop, &r->linger_timer)) < 0 ||
        (rc = uv_timer_init(a->loop, &r->reconnect_timer)) < 0 ||
        (rc = uv_timer_start(&r->hb_timer, on_hb_timer, hb, hb)) < 0)
        DDP_ERROR("unable to start the heartbeat timer: %s", uv_strerror(rc));
    return rc;
}

int agent__rdzv_start(agent_t *a) {
    const agent_job_t *job = a->job;
    struct agent_rdzv *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    a->rdzv = r;
    r->a = a;
    r->watch_round = -1;
    r->addr = job->rdzv_addr; /* agent_job_prepare resolved it */
    r->port = job->rdzv_port;
    r->token = &job->token;
    if (r->token->len > 0) {
        ddp_buf_t hex = DDP_BUF_INIT;
        if (rdzv_token_to_hex(r->token->data, r->token->len, &hex) == 0)
            snprintf(a->token_hex, sizeof a->token_hex, "%s", (char *)hex.data);
        ddp_buf_free(&hex);
    }
    if (job->local_addr != NULL)
        snprintf(r->host, sizeof r->host, "%s", job->local_addr);
    else
        ddp_addr_route_source(r->addr, r->port, r->host, sizeof r->host);
    int rc = maybe_host(r);
    if (rc < 0)
        return rc;
    /* Served by every agent, used by the one that becomes group rank 0: its port goes with the
     * JOIN, so MASTER_PORT is bound before anyone is told it (no port race). */
    if (!job->worker_store_own &&
        (rc = agent__worker_store_start(a, r->host, 0, (size_t)job->nproc * (size_t)job->max_nodes,
                                        "this node's address, --local_addr")) < 0)
        return rc;
    snprintf(a->store_addr, sizeof a->store_addr, "%s", r->addr);
    a->store_port = (uint16_t)r->port;
    /* The first JOIN is agent_run's to send, once the loop is fully set up: a JOIN refused here
     * would feed the state table before the agent is in SUP_JOINING. */
    rc = rdzv_connect(r, (int)job->rdzv.join_timeout_ms);
    return rc < 0 ? rc : rdzv_timers_start(r);
}

void agent__rdzv_stop(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    if (r == NULL || r->stopping)
        return;
    r->stopping = 1;
    uv_timer_stop(&r->hb_timer);
    uv_timer_stop(&r->linger_timer);
    uv_timer_stop(&r->reconnect_timer);
    rdzv_aclient_close(r->ctl, NULL, NULL);
    rdzv_aclient_close(r->watch, NULL, NULL);
    r->ctl = r->watch = NULL;
    spare_close(r);
}

/* Frees the state once the loop has closed every handle (agent_run calls it after uv_run). */
void agent__rdzv_free(agent_t *a) {
    if (a->rdzv == NULL)
        return;
    free(a->rdzv);
    a->rdzv = NULL;
}
