/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round: the rendezvous runs' round machines as pure logic: events and the time come in,
 * actions go out (rdzv_round.h). These are the commands' entry points: each checks its
 * arguments, finds the run and the member it concerns, and feeds the run's phase x event table
 * (rdzv_round_table.c) one event; rdzv_runs_tick feeds it the deadlines that passed. The wire
 * codec of the rendezvous commands is rdzv_proto.c.
 *
 * The files of the round machine, each calling only those after it: rdzv_round.c (here),
 * rdzv_round_table.c (the table, its drawing and its actions), rdzv_round_steps.c (closing and
 * ending rounds, the joiners' bounds, liveness), rdzv_round_hosts.c (what a run keeps per host),
 * rdzv_runs.c (the registry of runs and members, the action list); rdzv_round_status.c (STATUS)
 * reads the records (rdzv_run.h). */
#include "rdzv_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks a join's fields. Returns 0 or DDP_EUSAGE with err naming the field. */
static int join_validate(const rdzv_join_req_t *q, ddp_err_t *err) {
    const rdzv_round_cfg_t *c = &q->cfg;
    const char *id = q->run_id;
    if (id[0] == '\0' || memchr(id, '\0', sizeof q->run_id) == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous join: empty or unterminated run id");
    if (q->host[0] == '\0' || memchr(q->host, '\0', sizeof q->host) == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': empty or unterminated host", id);
    if (q->nproc < 1 || q->nproc > RDZV_ROUND_MAX_NPROC)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': nproc %lld out of range 1..%d", id,
                           (long long)q->nproc, RDZV_ROUND_MAX_NPROC);
    if (q->want_node_rank < -1 || q->want_node_rank >= RDZV_ROUND_MAX_NODES)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': node rank %lld out of range", id,
                           (long long)q->want_node_rank);
    if (q->master_port < 0 || q->master_port > 65535)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': master port %lld out of range", id,
                           (long long)q->master_port);
    if (c->min_nodes < 1 || c->max_nodes < c->min_nodes || c->max_nodes > RDZV_ROUND_MAX_NODES)
        return ddp_err_set(err, DDP_EUSAGE,
                           "rendezvous '%s': nnodes %lld:%lld invalid (need 1 <= min <= max <= %d)",
                           id, (long long)c->min_nodes, (long long)c->max_nodes,
                           RDZV_ROUND_MAX_NODES);
    /* 24 days bounds every timeout, so that interval x attempts cannot overflow. */
    const int64_t day24 = (int64_t)24 * 24 * 3600 * 1000;
    if (c->last_call_timeout_ms < 0 || c->last_call_timeout_ms > day24 || c->join_timeout_ms < 0 ||
        c->join_timeout_ms > day24 || c->keep_alive_interval_ms < 0 ||
        c->keep_alive_interval_ms > day24 || c->keep_alive_max_attempt < 0 ||
        c->keep_alive_max_attempt > 1000)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': a timeout is out of range", id);
    if (c->max_restarts < 0 || c->max_restarts > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': max_restarts %lld out of range", id,
                           (long long)c->max_restarts);
    if (c->max_node_failures < 0 || c->max_node_failures > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': max_node_failures %lld out of range",
                           id, (long long)c->max_node_failures);
    if (q->min_round < 0 || q->min_round > RDZV_ROUND_MAX_ROUND || q->restarts_used < 0 ||
        q->restarts_used > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE,
                           "rendezvous '%s': carried round %lld or restarts %lld out of range", id,
                           (long long)q->min_round, (long long)q->restarts_used);
    return 0;
}

static rdzv_round_cfg_t cfg_defaults(rdzv_round_cfg_t c) {
    if (c.last_call_timeout_ms == 0)
        c.last_call_timeout_ms = RDZV_DEFAULT_LAST_CALL_TIMEOUT_MS;
    if (c.join_timeout_ms == 0)
        c.join_timeout_ms = RDZV_DEFAULT_JOIN_TIMEOUT_MS;
    if (c.keep_alive_interval_ms == 0)
        c.keep_alive_interval_ms = RDZV_DEFAULT_KEEP_ALIVE_INTERVAL_MS;
    if (c.keep_alive_max_attempt == 0)
        c.keep_alive_max_attempt = RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT;
    return c;
}

int rdzv_runs_join(rdzv_runs_t *rs, uint64_t member, const rdzv_join_req_t *req, uint64_t now_ms,
                   rdzv_actions_t *out, ddp_err_t *err) {
    int rc = join_validate(req, err);
    if (rc < 0)
        return rc;
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m != NULL && strcmp(m->run->id, req->run_id) != 0)
        return ddp_err_set(err, -EBUSY, "rendezvous '%s': this connection is a member of '%s'",
                           req->run_id, m->run->id);
    if (m != NULL && m->state == MEMBER_JOINING && !m->answered)
        return ddp_err_set(err, -EALREADY, "rendezvous '%s': this connection already waits to join",
                           req->run_id);
    rdzv_round_cfg_t cfg = cfg_defaults(req->cfg);
    rdzv_run_t *r = m != NULL ? m->run : rdzv__run_find(rs, req->run_id);
    int created = 0;
    if (r == NULL) {
        rc = rdzv__run_create(rs, req->run_id, &cfg, &r, err);
        if (rc < 0)
            return rc;
        created = 1;
    } else if (r->cfg_unset) {
        /* A restored run: its first JOIN fixes its configuration, as for a new one. */
        r->cfg = cfg;
        r->cfg_unset = 0;
    }
    rdzv_event_t ev = {.kind = RDZV_EV_JOIN,
                       .now_ms = now_ms,
                       .conn = member,
                       .m = m,
                       .req = req,
                       .cfg = &cfg,
                       .created = created,
                       .out = out,
                       .err = err};
    return rdzv__run_event(rs, r, &ev);
}

int rdzv_runs_heartbeat(rdzv_runs_t *rs, const char *run_id, uint64_t member, uint64_t now_ms,
                        int64_t *round, int *state) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL || (run_id != NULL && strcmp(m->run->id, run_id) != 0))
        return -ENOENT;
    rdzv_event_t ev = {.kind = RDZV_EV_HEARTBEAT, .now_ms = now_ms, .m = m};
    rdzv__run_event(rs, m->run, &ev);
    if (round != NULL)
        *round = m->run->round;
    if (state != NULL)
        *state = (int)m->run->state;
    return 0;
}

int rdzv_runs_beat_for(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t key,
                       uint64_t now_ms, int64_t *round, int *state) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL || m->key != key)
        return -ENOENT;
    return rdzv_runs_heartbeat(rs, run_id, member, now_ms, round, state);
}

int rdzv_runs_fail(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                   const char *what, uint64_t now_ms, rdzv_actions_t *out, rdzv_fail_reply_t *rep) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    memset(rep, 0, sizeof *rep);
    rep->status = RDZV_FAIL_IGNORED;
    if (r == NULL)
        return -ENOENT;
    rdzv_event_t ev = {.kind = RDZV_EV_FAIL,
                       .now_ms = now_ms,
                       .m = rdzv__member_find(rs, member),
                       .round = round,
                       .text = what,
                       .out = out,
                       .rep = rep};
    rdzv__run_event(rs, r, &ev);
    rep->round = r->round;
    rep->restarts_used = r->restarts_used;
    rep->max_restarts = r->cfg.max_restarts;
    return 0;
}

int rdzv_runs_abort(rdzv_runs_t *rs, const char *run_id, uint64_t member, const char *why,
                    uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (r == NULL || m == NULL || m->run != r)
        return -ENOENT;
    rdzv_event_t ev = {.kind = RDZV_EV_ABORT, .now_ms = now_ms, .m = m, .text = why, .out = out};
    return rdzv__run_event(rs, r, &ev);
}

int rdzv_runs_unfit(rdzv_runs_t *rs, const char *run_id, uint64_t member, const char *host,
                    const char *reason, uint64_t now_ms) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    if (r == NULL || host == NULL || host[0] == '\0')
        return -ENOENT;
    rdzv_member_t *m = rdzv__member_find(rs, member);
    rdzv_event_t ev = {.kind = RDZV_EV_UNFIT,
                       .now_ms = now_ms,
                       .m = m != NULL && m->run == r ? m : NULL,
                       .host = host,
                       .text = reason};
    return rdzv__run_event(rs, r, &ev);
}

int rdzv_runs_timing(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                     const char *text, uint64_t now_ms, rdzv_actions_t *out, char *log,
                     size_t cap) {
    if (cap > 0)
        log[0] = '\0';
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (r == NULL || m == NULL || m->run != r || cap == 0)
        return -ENOENT;
    rdzv_event_t ev = {.kind = RDZV_EV_TIMING,
                       .now_ms = now_ms,
                       .m = m,
                       .round = round,
                       .text = text,
                       .out = out,
                       .log = log,
                       .log_cap = cap};
    return rdzv__run_event(rs, r, &ev);
}

int rdzv_runs_finish(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                     uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (r == NULL || m == NULL || m->run != r)
        return -ENOENT;
    rdzv_event_t ev = {
        .kind = RDZV_EV_FINISH, .now_ms = now_ms, .m = m, .round = round, .out = out};
    return rdzv__run_event(rs, r, &ev);
}

int rdzv_runs_leave(rdzv_runs_t *rs, uint64_t member, uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL)
        return 0;
    rdzv_event_t ev = {.kind = RDZV_EV_LEAVE, .now_ms = now_ms, .m = m, .out = out};
    return rdzv__run_event(rs, m->run, &ev);
}

/* The run a restore writes into: run_id's, or a new empty one whose first JOIN gives its
 * configuration. Returns 0 with *out, or an error with err set. */
static int restore_run(rdzv_runs_t *rs, const char *run_id, uint64_t now_ms, rdzv_run_t **out,
                       ddp_err_t *err) {
    ddp_err_t why;
    if (run_id == NULL || rdzv_run_id_check(run_id, &why) < 0)
        return ddp_err_set(err, DDP_EUSAGE, "restore: run id not valid");
    *out = rdzv__run_find(rs, run_id);
    if (*out != NULL)
        return 0;
    rdzv_round_cfg_t none;
    memset(&none, 0, sizeof none);
    int rc = rdzv__run_create(rs, run_id, &none, out, err);
    if (rc < 0)
        return rc;
    (*out)->cfg_unset = 1;
    (*out)->empty_since_ms = now_ms;
    return 0;
}

int rdzv_runs_restore_done(rdzv_runs_t *rs, const char *run_id, int64_t round, uint64_t now_ms,
                           ddp_err_t *err) {
    if (round < 0 || round > RDZV_ROUND_MAX_ROUND)
        return ddp_err_set(err, DDP_EUSAGE, "restore of rendezvous '%s': round %lld out of range",
                           run_id, (long long)round);
    rdzv_run_t *r;
    int rc = restore_run(rs, run_id, now_ms, &r, err);
    if (rc < 0)
        return rc;
    if (r->state == RDZV_RUN_FAILED)
        return 0; /* stopped for good already: a FAILED run stays one */
    if (r->round < round)
        r->round = round;
    if (r->min_round < round)
        r->min_round = round;
    /* A store restores before it serves: the run has no joiner to refuse. */
    r->state = RDZV_RUN_DONE;
    return 0;
}

int rdzv_runs_restore_host(rdzv_runs_t *rs, const char *run_id, const char *host, int64_t failures,
                           int excluded, const char *last_failure, uint64_t now_ms,
                           ddp_err_t *err) {
    if (host == NULL || host[0] == '\0' || strlen(host) > RDZV_HOST_MAX || failures < 0 ||
        failures > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE,
                           "restore of rendezvous '%s': a host record out of range",
                           run_id != NULL ? run_id : "");
    rdzv_run_t *r;
    int rc = restore_run(rs, run_id, now_ms, &r, err);
    if (rc < 0)
        return rc;
    if (rdzv__host_restore(rs, r, host, failures, excluded, last_failure, now_ms) < 0) {
        if (r->cfg_unset && r->nhosts == 0 && r->state != RDZV_RUN_DONE)
            rdzv__run_free(rs, r); /* made for this record alone */
        return ddp_err_set(err, DDP_ETOOBIG, "restore of rendezvous '%s': host records full",
                           run_id);
    }
    return 0;
}

int rdzv_runs_failed_text(const rdzv_runs_t *rs, const char *run_id, char *out, size_t cap) {
    const rdzv_run_t *r = rdzv__run_find(rs, run_id);
    if (r == NULL || r->state != RDZV_RUN_FAILED)
        return -ENOENT;
    rdzv__failed_text(r, out, cap);
    return 0;
}

/* Feeds run r each of its deadlines that has passed, in the order the table expects them: the
 * joiners' bound, the last call, the silence check (which may end the round: it comes last, so
 * that the next round's deadlines wait for the next tick). Each is read after the event before
 * it: a round closed by its last call has its silence check a keep-alive bound away. */
static void run_deadlines(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_event_t ev = {.now_ms = now_ms, .out = out};
    if (rdzv__joiners_due(r, now_ms) > 0) {
        ev.kind = RDZV_EV_JOIN_BOUND;
        rdzv__run_event(rs, r, &ev);
    }
    if (r->last_call_ms <= now_ms) {
        ev.kind = RDZV_EV_LAST_CALL;
        rdzv__run_event(rs, r, &ev);
    }
    if (r->live_check_ms <= now_ms) {
        ev.kind = RDZV_EV_LIVE_CHECK;
        rdzv__run_event(rs, r, &ev);
    }
}

int rdzv_runs_tick(rdzv_runs_t *rs, uint64_t now_ms, rdzv_actions_t *out) {
    for (rdzv_run_t *r = rs->runs, *next; r != NULL; r = next) {
        next = r->next_all;
        if (r->nmembers == 0) {
            if (r->empty_since_ms + rs->empty_keep_ms <= now_ms)
                rdzv__run_free(rs, r);
            continue;
        }
        if (rdzv__event_reserve(r, 0, out) < 0)
            continue; /* try again on the next tick */
        run_deadlines(rs, r, now_ms, out);
        rdzv__run_trim(r); /* the last joiners expired, or the last members went silent */
    }
    return 0;
}

uint64_t rdzv_runs_next_deadline(const rdzv_runs_t *rs) {
    uint64_t t = UINT64_MAX;
    for (const rdzv_run_t *r = rs->runs; r != NULL; r = r->next_all) {
        uint64_t d = UINT64_MAX;
        if (r->nmembers == 0) {
            d = r->empty_since_ms + rs->empty_keep_ms;
        } else if (r->state == RDZV_RUN_LAST_CALL) {
            d = r->last_call_ms;
        } else {
            if (r->njoin > 0)
                d = r->joiners[0]->join_ms + rdzv__joiner_bound(r);
            if (r->state == RDZV_RUN_RUNNING && r->live_check_ms < d)
                d = r->live_check_ms;
        }
        if (d < t)
            t = d;
    }
    return t;
}
