/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round_table: a run's round as a phase x event -> (action, next phases) table. A run
 * collects joiners for round r, closes the round (assigns group ranks and answers every parked
 * JOIN), runs it, and ends it on a FAIL report, a member's death or a scale-up; round r+1 then
 * collects the survivors, who re-join after seeing the END_ROUND key. The phases are the run's
 * states (rdzv_run_state_t), the events rdzv_run_event_t (rdzv_run.h): the commands' entry points
 * (rdzv_round.c) check a command's arguments, find its run and member and feed it here; so does
 * rdzv_runs_tick for each deadline that passed. The actions are below, built of the steps of
 * rdzv_round_steps.c.
 */
/* clang-format off */
/*
 * event \ phase | JOINING             | LAST_CALL           | RUNNING               | FAILED / DONE
 * --------------+---------------------+---------------------+-----------------------+-------------
 * JOIN          | join_collect: park; | join_collect: park; | join_running: a group | join_refuse_
 *               | n>=min: LAST_CALL;  | at max: close ->    | member: end r; group  | failed:
 *               | at max: close ->    | RUNNING             | < max: end r (scale-  | CLOSED /
 *               | RUNNING             |                     | up); at max: a spare  | join_refuse_
 *               |                     |                     |                       | done: DONE,
 *               |                     |                     |                       | REUSED
 * HEARTBEAT     | refresh             | refresh             | refresh               | refresh
 * FAIL(r)       | ignore              | ignore              | fail_count: r current,| ignore
 *               |                     |                     | from a member: end r; |
 *               |                     |                     | > max_restarts:       |
 *               |                     |                     | -> FAILED             |
 * ABORT(why)    | abort_collecting:   | abort_collecting:   | abort_running: from a | not_now
 *               | from a node that ran| from a node that ran| node that ran in a    | (-ENOENT)
 *               | in a group: ->      | in a group: ->      | group: end r ->       |
 *               | FAILED, joiners     | FAILED, joiners     | FAILED, joiners       |
 *               | refused             | refused             | refused               |
 * UNFIT(host)   | unfit_record        | unfit_record        | unfit_running: not    | unfit_record
 *               |                     |                     | from a non-member for |
 *               |                     |                     | a host of the group   |
 * FINISH(r)     | not_now (-ENOENT)   | not_now (-ENOENT)   | finish: r current,    | not_now
 *               |                     |                     | from a member: ->     | (-ENOENT)
 *               |                     |                     | DONE, spares refused  |
 * LEAVE         | leave_drop; an idle | leave_drop; n<min:  | leave_running: a      | leave_drop
 *               | one's: the round    | -> JOINING          | member: end r naming  |
 *               | re-evaluated        |                     | it; else leave_drop   |
 * JOIN_BOUND    | time_out_joiners:   | ignore (n>=min: the | answer_spares: ERDZV_ | answer_spares
 *               | ETIMEOUT "n of min  | last call closes    | SPARE, answered (it   | (all answered:
 *               | joined; lost: .."   | the round)          | JOINs again); an      | dropped)
 *               |                     |                     | answered one: dropped |
 * LAST_CALL     | ignore              | close_round ->      | ignore                | ignore
 *               |                     | RUNNING             |                       |
 * LIVE_CHECK    | ignore              | ignore              | check_live: CLOSE +   | ignore
 *               |                     |                     | end r naming the      |
 *               |                     |                     | silent members        |
 * TIMING(r)     | not_now (-ENOENT)   | not_now (-ENOENT)   | timing_running: r     | not_now
 *               |                     |                     | current, from a member| (-ENOENT)
 *               |                     |                     | : added; a window's   |
 *               |                     |                     | straggler, exclude +  |
 *               |                     |                     | a spare: host         |
 *               |                     |                     | excluded, end r       |
 */
/* clang-format on */

/* n: joiners with a JOIN parked. "close" and "end r" are rdzv_round_steps.c's: after "end r"
 * round r+1 is re-evaluated at once (rdzv__run_check: n>=min: LAST_CALL; at max, with no member
 * of the ended round still to come back (run->nidle) and past run->not_before_ms: close). The
 * last call bounds the wait for the members of the ended round at max, and no close comes before
 * run->not_before_ms (the crash loop's back-off after a FAIL). "ignore" answers 0 and changes
 * nothing; "not_now" answers -ENOENT and changes nothing (the event names a round or a run that
 * is not there to act on).
 *
 * Members: JOINING (a JOIN is parked; in run->joiners, join order), RUNNING (in run->group, by
 * group rank), IDLE (was in an ended round, has not re-joined yet; dropped when the next round
 * closes). Spares are joiners that arrived while the run was RUNNING at max_nodes; one answered
 * at its keep-alive bound stays in run->joiners, "answered" (no JOIN parked), until it JOINs
 * again or another bound passes. Only FAIL reports spend max_restarts; the count lives in the
 * run, so a node that reconnects cannot reset it. After a FAIL the next round closes no sooner
 * than the crash loop's back-off (restart_backoff), run->not_before_ms.
 *
 * A JOIN from an excluded host is refused with DDP_ERDZV_EXCLUDED in JOINING, LAST_CALL and
 * RUNNING (rdzv_round_hosts.c), and so is one asking for other nnodes (DDP_EUSAGE); a FAILED run
 * refuses every JOIN with DDP_ERDZV_CLOSED; a DONE run (its round passed its exit barrier) one of
 * its own nodes' with DDP_ERDZV_DONE and a new node's with DDP_ERDZV_REUSED. The spares' bound is
 * keep_alive_interval x keep_alive_max_attempt. HEARTBEAT comes on the member's own connection,
 * or as a BEAT_FOR from any connection that carries the key the member's JOIN reply carried; it
 * never changes a phase. ABORT's why becomes the run's last failure, which every later JOIN's
 * refusal names. UNFIT records the host's failed health check (shown by STATUS), from its own
 * member, or from a connection that is no member of the run (while RUNNING, not for a host of the
 * group).
 *
 * Costs: a heartbeat is O(1) (member hash), a cell's lookup O(1); the steps say theirs. */
#include "rdzv_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* How long after the FAIL that spent restart k the next round may close (see
 * RDZV_RESTART_BACKOFF_FIRST_MS): 0, then the first back-off doubling up to the cap. */
static uint64_t restart_backoff(int64_t k) {
    if (k <= 1)
        return 0;
    uint64_t ms = RDZV_RESTART_BACKOFF_FIRST_MS;
    for (int64_t i = 2; i < k && ms < RDZV_RESTART_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < RDZV_RESTART_BACKOFF_MAX_MS ? ms : RDZV_RESTART_BACKOFF_MAX_MS;
}

/* ---- JOIN ---- */

/* A member's BEAT_FOR key: random, so that a member id another store handed out (ids restart
 * with the store) or a stray number never beats for this member. */
static int64_t member_key_make(void) {
    uint64_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts;
    }
    return (int64_t)(k >> 1); /* non-negative: it reads the same in every language's i64 */
}

/* What a JOIN to a run that takes joiners does first: refuses an excluded host's and one asking
 * for other nnodes; else makes room, makes the member when the connection is new and takes the
 * JOIN's fields. Returns 0 with *mp the member, or the refusal with ev->err set (a run made for
 * this JOIN is freed again when out of memory). */
static int join_admit(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev, rdzv_member_t **mp) {
    const rdzv_join_req_t *req = ev->req;
    rdzv_member_t *m = ev->m;
    char excluded[RDZV_ROUND_TEXT_MAX];
    if (rdzv__host_join(r, req->host, ev->now_ms, excluded, sizeof excluded)) {
        /* A member of the ended round that is excluded will not come back: the round stops
         * waiting for it (it is a connection of the store, no longer a member). */
        if (m != NULL && m->state == MEMBER_IDLE) {
            rdzv_event_t leave = {
                .kind = RDZV_EV_LEAVE, .now_ms = ev->now_ms, .m = m, .out = ev->out};
            rdzv__run_event(rs, r, &leave);
        }
        return ddp_err_set(ev->err, DDP_ERDZV_EXCLUDED, "%s", excluded);
    }
    const rdzv_round_cfg_t *cfg = ev->cfg;
    if (cfg->min_nodes != r->cfg.min_nodes || cfg->max_nodes != r->cfg.max_nodes)
        return ddp_err_set(ev->err, DDP_EUSAGE,
                           "rendezvous '%s': this node asks for nnodes %lld:%lld but the run was "
                           "started with %lld:%lld",
                           r->id, (long long)cfg->min_nodes, (long long)cfg->max_nodes,
                           (long long)r->cfg.min_nodes, (long long)r->cfg.max_nodes);
    if (rdzv__event_reserve(r, m == NULL ? 1 : 0, ev->out) < 0 ||
        (m == NULL && (m = calloc(1, sizeof *m)) == NULL)) {
        if (ev->created)
            rdzv__run_free(rs, r);
        return ddp_err_set(ev->err, -ENOMEM, "rendezvous '%s': out of memory", req->run_id);
    }
    if (m->run == NULL) {
        rdzv__member_link(rs, r, m, ev->conn);
        m->key = member_key_make();
    }
    rdzv__copy_str(m->host, sizeof m->host, req->host);
    m->want_rank = req->want_node_rank;
    m->nproc = req->nproc;
    m->master_port = req->master_port;
    m->carried_round = req->min_round;
    /* An answered spare keeps its place in the joiners (and the bound counted from its answer):
     * they stay in the order of their bounds. */
    if (!m->answered)
        m->join_ms = ev->now_ms;
    m->last_seen_ms = ev->now_ms;
    /* What the node carries past a store that forgot the run: the rounds go on after the newest
     * it was told (only a round nobody has been told is renumbered; a running round's successor
     * is, when it ends), and the restarts it saw counted stay counted. */
    if (req->min_round > r->min_round)
        r->min_round = req->min_round;
    if (r->state != RDZV_RUN_RUNNING && r->round < r->min_round)
        r->round = r->min_round;
    if (req->restarts_used > r->restarts_used)
        r->restarts_used = req->restarts_used;
    *mp = m;
    return 0;
}

/* Parks m's JOIN: a spare answered at its bound has its JOIN parked again in its place; anyone
 * else joins the end of the joiners. */
static void joiner_park(rdzv_run_t *r, rdzv_member_t *m) {
    if (m->answered) {
        m->answered = 0;
        r->nanswered--;
        return;
    }
    if (m->state == MEMBER_IDLE)
        r->nidle--;
    m->state = MEMBER_JOINING;
    r->joiners[r->njoin++] = m;
}

/* JOINING, LAST_CALL + JOIN: parked, and the round re-evaluated (it may close). */
static int join_collect(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m;
    int rc = join_admit(rs, r, ev, &m);
    if (rc < 0)
        return rc;
    joiner_park(r, m);
    rdzv__run_check(rs, r, ev->now_ms, ev->out);
    return 0;
}

/* RUNNING + JOIN: a member of the running group joining again has left it (a membership change:
 * the round ends); anyone else ends the round when the group has room (a scale-up), else waits
 * as a spare for the next round. */
static int join_running(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m;
    int rc = join_admit(rs, r, ev, &m);
    if (rc < 0)
        return rc;
    char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX];
    if (m->state == MEMBER_RUNNING) {
        rdzv__node_name(who, sizeof who, m->group_rank, m->host);
        rdzv__group_remove(r, m);
        m->state = MEMBER_JOINING;
        r->joiners[r->njoin++] = m;
        snprintf(why, sizeof why, "%s joined again", who);
        rdzv__round_end(rs, r, why, 0, ev->now_ms, ev->out);
        return 0;
    }
    joiner_park(r, m);
    if ((int64_t)r->ngroup < r->cfg.max_nodes) {
        rdzv__node_name(who, sizeof who, -1, m->host);
        snprintf(why, sizeof why, "scale-up: %s wants to join (%zu of max %lld nodes)", who,
                 r->ngroup, (long long)r->cfg.max_nodes);
        rdzv__round_end(rs, r, why, 0, ev->now_ms, ev->out);
    }
    return 0;
}

/* FAILED + JOIN: refused, naming the last failure (the entry point's caller gets the whole text
 * from rdzv_runs_failed_text). */
static int join_refuse_failed(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    (void)rs;
    char text[RDZV_ROUND_TEXT_MAX];
    rdzv__failed_text(r, text, sizeof text);
    return ddp_err_set(ev->err, DDP_ERDZV_CLOSED, "%s", text);
}

/* DONE + JOIN: a node of this run (a member, a spare, or one told a round of it) learns that the
 * job finished without it; a new node must not take that for its own job's success. */
static int join_refuse_done(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    char text[RDZV_ROUND_TEXT_MAX];
    if (ev->m != NULL || ev->req->min_round > 0 || ev->req->restarts_used > 0) {
        rdzv__done_text(r, text, sizeof text);
        return ddp_err_set(ev->err, DDP_ERDZV_DONE, "%s", text);
    }
    rdzv__reused_text(rs, r, ev->now_ms, text, sizeof text);
    return ddp_err_set(ev->err, DDP_ERDZV_REUSED, "%s", text);
}

/* ---- the other commands ---- */

/* Every phase + HEARTBEAT: the member is alive. */
static int refresh(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    (void)rs, (void)r;
    if (ev->now_ms > ev->m->last_seen_ms)
        ev->m->last_seen_ms = ev->now_ms;
    return 0;
}

static int ignore(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    (void)rs, (void)r, (void)ev;
    return 0;
}

static int not_now(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    (void)rs, (void)r, (void)ev;
    return -ENOENT;
}

/* RUNNING + FAIL: a member's report on the running round ends it, spends a restart and counts
 * against the host (the first FAIL of a round is its root cause); past max_restarts the run is
 * FAILED. A report on another round, or from no member of the group, is ignored; so is one the
 * store has no memory for (it is reported again, or the end key tells). */
static int fail_count(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m = ev->m;
    int current = ev->round == r->round && m != NULL && m->run == r && m->state == MEMBER_RUNNING;
    if (!current || rdzv__event_reserve(r, 0, ev->out) < 0)
        return 0;
    char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX], note[RDZV_ROUND_TEXT_MAX];
    const char *how = ev->text != NULL && ev->text[0] != '\0' ? ev->text : "worker group failed";
    rdzv__node_name(who, sizeof who, m->group_rank, m->host);
    r->restarts_used++;
    rdzv__textf(r->last_failure, sizeof r->last_failure, "%s round %lld: %.255s", who,
                (long long)ev->round, how);
    rdzv__host_failed(rs, r, m, ev->round, how, ev->now_ms, note, sizeof note);
    const rdzv_host_rec_t *h = rdzv__host_find(r, m->host);
    if (h != NULL)
        rdzv__host_record_action(r, h, ev->out);
    int failed = r->restarts_used > r->cfg.max_restarts;
    r->not_before_ms = ev->now_ms + restart_backoff(r->restarts_used);
    rdzv__textf(why, sizeof why, "worker group failed on %s (restart %lld of max %lld)%s",
                r->last_failure, (long long)r->restarts_used, (long long)r->cfg.max_restarts, note);
    rdzv__round_end(rs, r, why, failed, ev->now_ms, ev->out);
    ev->rep->status = failed ? RDZV_FAIL_RUN_FAILED : RDZV_FAIL_COUNTED;
    return 0;
}

/* What ABORT does in every phase that takes it: a node that has run in a group of the run names
 * itself and why as the run's last failure. Returns 0, -EPERM (a spare or a first-time joiner has
 * nothing to stop yet) or -ENOMEM; on an error nothing changed. */
static int abort_blame(rdzv_run_t *r, const rdzv_event_t *ev) {
    const rdzv_member_t *m = ev->m;
    if (m->group_round < 0)
        return -EPERM;
    if (rdzv__event_reserve(r, 0, ev->out) < 0)
        return -ENOMEM;
    char who[RDZV_HOST_MAX + 64];
    /* A member between rounds has no rank now: the one it had names it. */
    rdzv__node_name(who, sizeof who, m->group_rank >= 0 ? m->group_rank : m->prev_rank, m->host);
    rdzv__textf(r->last_failure, sizeof r->last_failure, "%s: %.255s", who,
                ev->text != NULL && ev->text[0] != '\0' ? ev->text : "aborted");
    r->aborted = 1;
    return 0;
}

/* JOINING, LAST_CALL + ABORT: the run is FAILED, its joiners refused. */
static int abort_collecting(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    int rc = abort_blame(r, ev);
    if (rc < 0)
        return rc;
    char text[RDZV_ROUND_TEXT_MAX];
    r->state = RDZV_RUN_FAILED;
    rdzv__failed_text(r, text, sizeof text);
    rdzv__joiners_refuse(rs, r, DDP_ERDZV_CLOSED, text, ev->now_ms, ev->out);
    rdzv__run_trim(r);
    return 0;
}

/* RUNNING + ABORT: the round ends and the run is FAILED, the waiters refused. */
static int abort_running(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    int rc = abort_blame(r, ev);
    if (rc < 0)
        return rc;
    char why[RDZV_ROUND_TEXT_MAX];
    rdzv__textf(why, sizeof why, "the run was stopped by %s", r->last_failure);
    rdzv__round_end(rs, r, why, 1, ev->now_ms, ev->out);
    return 0;
}

/* JOINING, LAST_CALL, FAILED, DONE + UNFIT: recorded; a member speaks for its own host alone
 * (ev->m is the sender when it is a member of the run). */
static int unfit_record(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    if (ev->m != NULL && strcmp(ev->m->host, ev->host) != 0)
        return -EPERM;
    return rdzv__host_unfit(rs, r, ev->host, ev->text, ev->now_ms);
}

/* RUNNING + UNFIT: as unfit_record, and a connection that is no member may not report a host
 * that runs in the group. O(group). */
static int unfit_running(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    if (ev->m == NULL)
        for (size_t i = 0; i < r->ngroup; i++)
            if (r->group[i] != NULL && strcmp(r->group[i]->host, ev->host) == 0)
                return -EPERM;
    return unfit_record(rs, r, ev);
}

/* RUNNING + FINISH: a member of the running round's group says it passed its exit barrier: the
 * run is DONE and its spares are refused with DDP_ERDZV_DONE (they leave with success). */
static int finish(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    if (ev->round != r->round || ev->m->state != MEMBER_RUNNING)
        return -ENOENT;
    if (rdzv__event_reserve(r, 0, ev->out) < 0)
        return -ENOMEM;
    char text[RDZV_ROUND_TEXT_MAX];
    r->state = RDZV_RUN_DONE;
    rdzv_action_t *a = rdzv__action_add(ev->out, RDZV_ACT_RUN_DONE, 0);
    rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
    a->round = r->round;
    rdzv__done_text(r, text, sizeof text);
    rdzv__joiners_refuse(rs, r, DDP_ERDZV_DONE, text, ev->now_ms, ev->out);
    return 0;
}

/* Every phase + LEAVE, but a running group's member in RUNNING: the member is dropped. A joiner
 * gone may bring a collecting round below min (back to JOINING, no action); the last member of
 * the ended round not back being gone, the round may close at max now. */
static int leave_drop(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m = ev->m;
    if (m->state == MEMBER_RUNNING)
        rdzv__group_remove(r, m); /* RUNNING out of memory: the silence check ends the round */
    if (m->state == MEMBER_JOINING)
        rdzv__joiners_remove(r, m);
    int was_idle = m->state == MEMBER_IDLE;
    if (was_idle)
        r->nidle--;
    rdzv__member_free(rs, m, ev->now_ms);
    if (was_idle ? rdzv__event_reserve(r, 0, ev->out) == 0 : r->state == RDZV_RUN_LAST_CALL)
        rdzv__run_check(rs, r, ev->now_ms, ev->out);
    rdzv__run_trim(r);
    return 0;
}

/* RUNNING + LEAVE: a member of the group lost ends the round naming it. */
static int leave_running(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m = ev->m;
    if (m->state != MEMBER_RUNNING || rdzv__event_reserve(r, 0, ev->out) < 0)
        return leave_drop(rs, r, ev);
    char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX];
    rdzv__node_name(who, sizeof who, m->group_rank, m->host);
    snprintf(why, sizeof why, "%s lost: connection closed", who);
    rdzv__group_remove(r, m);
    rdzv__member_free(rs, m, ev->now_ms);
    rdzv__round_end(rs, r, why, 0, ev->now_ms, ev->out);
    rdzv__run_trim(r);
    return 0;
}

/* "rank 5 on node 2 (10.0.0.3): 1.52x the median compute per step (31.2 ms against 20.5 ms)
 * since 12.0 s ago" into out. */
static void straggler_text(const rdzv_run_t *r, int64_t rank, uint64_t now_ms, char *out,
                           size_t cap) {
    const rdzv_strag_rank_t *k = &r->strag.v[rank];
    const rdzv_member_t *m =
        k->group_rank >= 0 && (size_t)k->group_rank < r->ngroup ? r->group[k->group_rank] : NULL;
    char who[RDZV_HOST_MAX + 64];
    rdzv__node_name(who, sizeof who, k->group_rank, m != NULL ? m->host : "?");
    double med = k->ratio > 0 ? k->per_step_us / k->ratio : 0;
    rdzv__textf(out, cap,
                "rank %lld on %s: %.2fx the median compute per step (%.1f ms against %.1f ms) "
                "since %.1f s ago",
                (long long)rank, who, k->ratio, k->per_step_us / 1000.0, med / 1000.0,
                (double)(now_ms - k->since_ms) / 1000.0);
}

/* RUNNING + TIMING: a member of the running round's group reports its ranks; a window that
 * closes may name or clear stragglers (lines for the log), and with exclude a named one's host
 * is excluded when a spare can take its place: the round ends (not a restart). */
static int timing_running(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv_member_t *m = ev->m;
    if (m == NULL || m->state != MEMBER_RUNNING || ev->round != r->round)
        return -ENOENT;
    rdzv_strag_t *st = &r->strag;
    if (st->round != r->round)
        rdzv__strag_reset(st, r->round, ev->now_ms);
    rdzv_strag_entry_t e[RDZV_STRAG_ENTRIES_MAX];
    rdzv_strag_cfg_t cfg;
    int ne = rdzv__strag_parse(ev->text != NULL ? ev->text : "", &cfg, e, RDZV_STRAG_ENTRIES_MAX);
    /* A node speaks for its own ranks alone: another's would let it make a healthy rank look
     * slow. The report is taken whole or not at all. */
    for (int i = 0; i < ne; i++)
        if (e[i].rank < m->rank_base || e[i].rank >= m->rank_base + m->nproc)
            ne = -EINVAL;
    if (ne < 0)
        return ne;
    st->cfg = cfg;
    for (int i = 0; i < ne; i++) {
        int rc =
            rdzv__strag_add(st, e[i].rank, m->group_rank, m->host, e[i].compute_us, e[i].steps);
        if (rc < 0)
            return rc;
    }
    rdzv_strag_change_t ch[16];
    size_t n = rdzv__strag_window(st, ev->now_ms, ch, sizeof ch / sizeof *ch);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char text[RDZV_ROUND_TEXT_MAX], note[RDZV_ROUND_TEXT_MAX];
        rdzv_strag_rank_t *k = &st->v[ch[i].rank];
        if (!ch[i].named) {
            len += rdzv__textf(ev->log + len, ev->log_cap - len,
                               "%sstraggler cleared: rank %lld on node %lld (%.2fx the median)",
                               len ? "\n" : "", (long long)ch[i].rank, (long long)k->group_rank,
                               k->ratio);
            continue;
        }
        straggler_text(r, ch[i].rank, ev->now_ms, text, sizeof text);
        len +=
            rdzv__textf(ev->log + len, ev->log_cap - len, "%sstraggler: %s", len ? "\n" : "", text);
        const rdzv_member_t *sm = k->group_rank >= 0 && (size_t)k->group_rank < r->ngroup
                                      ? r->group[k->group_rank]
                                      : NULL;
        if (!st->cfg.exclude || sm == NULL)
            continue;
        char why[RDZV_ROUND_TEXT_MAX];
        rdzv__textf(why, sizeof why, "straggler: %s", text);
        int ex = rdzv__host_straggler(rs, r, sm->host, why, ev->now_ms, note, sizeof note);
        /* Kept: every node's line says why (the reply carries it). */
        rdzv__textf(st->v[ch[i].rank].kept, sizeof st->v[ch[i].rank].kept, "%s",
                    ex == 1 ? "" : note);
        len += rdzv__textf(ev->log + len, ev->log_cap - len, "\n%s", note);
        if (ex == 1 && rdzv__event_reserve(r, 0, ev->out) == 0) {
            /* The exclusion outlives this store as a failure's does (RDZV_ACT_HOST_RECORD). */
            const rdzv_host_rec_t *h = rdzv__host_find(r, sm->host);
            if (h != NULL)
                rdzv__host_record_action(r, h, ev->out);
            char end[RDZV_ROUND_TEXT_MAX];
            rdzv__textf(end, sizeof end, "%.200s excluded as a straggler", sm->host);
            rdzv__round_end(rs, r, end, 0, ev->now_ms, ev->out);
            break; /* the round is over: its other ranks are judged no more */
        }
    }
    return 0;
}

/* ---- deadlines ---- */

/* JOINING + JOIN_BOUND: the joiners that waited join_timeout are answered DDP_ETIMEOUT. */
static int time_out_joiners(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    size_t k = rdzv__joiners_due(r, ev->now_ms);
    if (k > 0)
        rdzv__joiners_time_out(rs, r, k, ev->now_ms, ev->out);
    return 0;
}

/* RUNNING, FAILED, DONE + JOIN_BOUND: the spares whose bound passed are answered, or dropped
 * when answered already. */
static int answer_spares(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    size_t k = rdzv__joiners_due(r, ev->now_ms);
    if (k > 0)
        rdzv__spares_answer(rs, r, k, ev->now_ms, ev->out);
    return 0;
}

/* LAST_CALL + LAST_CALL: the round closes with the joiners it has. */
static int close_round(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv__round_close(rs, r, ev->now_ms, ev->out);
    return 0;
}

/* RUNNING + LIVE_CHECK: the silent members are dead and the round ends, or the next check is
 * set. */
static int check_live(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    rdzv__group_check_live(rs, r, ev->now_ms, ev->out);
    return 0;
}

/* ---- the table ---- */

#define TO(p) RDZV_PHASE(RDZV_RUN_##p)
/* The round re-evaluated (rdzv__run_check): still collecting, or closed. */
#define CHECKED (TO(JOINING) | TO(LAST_CALL) | TO(RUNNING))

/* clang-format off */
static const rdzv_cell_t run_table[RDZV_RUN_NPHASES][RDZV_NEVENTS] = {
    [RDZV_RUN_JOINING] = {
        [RDZV_EV_JOIN] =       {join_collect, CHECKED},
        [RDZV_EV_HEARTBEAT] =  {refresh, TO(JOINING)},
        [RDZV_EV_FAIL] =       {ignore, TO(JOINING)},
        [RDZV_EV_ABORT] =      {abort_collecting, TO(JOINING) | TO(FAILED)},
        [RDZV_EV_UNFIT] =      {unfit_record, TO(JOINING)},
        [RDZV_EV_FINISH] =     {not_now, TO(JOINING)},
        [RDZV_EV_LEAVE] =      {leave_drop, CHECKED},
        [RDZV_EV_JOIN_BOUND] = {time_out_joiners, TO(JOINING)},
        [RDZV_EV_LAST_CALL] =  {ignore, TO(JOINING)},
        [RDZV_EV_LIVE_CHECK] = {ignore, TO(JOINING)},
        [RDZV_EV_TIMING] =     {not_now, TO(JOINING)},
    },
    [RDZV_RUN_LAST_CALL] = {
        [RDZV_EV_JOIN] =       {join_collect, TO(LAST_CALL) | TO(RUNNING)},
        [RDZV_EV_HEARTBEAT] =  {refresh, TO(LAST_CALL)},
        [RDZV_EV_FAIL] =       {ignore, TO(LAST_CALL)},
        [RDZV_EV_ABORT] =      {abort_collecting, TO(LAST_CALL) | TO(FAILED)},
        [RDZV_EV_UNFIT] =      {unfit_record, TO(LAST_CALL)},
        [RDZV_EV_FINISH] =     {not_now, TO(LAST_CALL)},
        [RDZV_EV_LEAVE] =      {leave_drop, CHECKED},
        [RDZV_EV_JOIN_BOUND] = {ignore, TO(LAST_CALL)},
        [RDZV_EV_LAST_CALL] =  {close_round, TO(RUNNING)},
        [RDZV_EV_LIVE_CHECK] = {ignore, TO(LAST_CALL)},
        [RDZV_EV_TIMING] =     {not_now, TO(LAST_CALL)},
    },
    [RDZV_RUN_RUNNING] = {
        [RDZV_EV_JOIN] =       {join_running, CHECKED},
        [RDZV_EV_HEARTBEAT] =  {refresh, TO(RUNNING)},
        [RDZV_EV_FAIL] =       {fail_count, CHECKED | TO(FAILED)},
        [RDZV_EV_ABORT] =      {abort_running, TO(RUNNING) | TO(FAILED)},
        [RDZV_EV_UNFIT] =      {unfit_running, TO(RUNNING)},
        [RDZV_EV_FINISH] =     {finish, TO(RUNNING) | TO(DONE)},
        [RDZV_EV_LEAVE] =      {leave_running, CHECKED},
        [RDZV_EV_JOIN_BOUND] = {answer_spares, TO(RUNNING)},
        [RDZV_EV_LAST_CALL] =  {ignore, TO(RUNNING)},
        [RDZV_EV_LIVE_CHECK] = {check_live, CHECKED},
        [RDZV_EV_TIMING] =     {timing_running, CHECKED},
    },
    [RDZV_RUN_FAILED] = {
        [RDZV_EV_JOIN] =       {join_refuse_failed, TO(FAILED)},
        [RDZV_EV_HEARTBEAT] =  {refresh, TO(FAILED)},
        [RDZV_EV_FAIL] =       {ignore, TO(FAILED)},
        [RDZV_EV_ABORT] =      {not_now, TO(FAILED)},
        [RDZV_EV_UNFIT] =      {unfit_record, TO(FAILED)},
        [RDZV_EV_FINISH] =     {not_now, TO(FAILED)},
        [RDZV_EV_LEAVE] =      {leave_drop, TO(FAILED)},
        [RDZV_EV_JOIN_BOUND] = {answer_spares, TO(FAILED)},
        [RDZV_EV_LAST_CALL] =  {ignore, TO(FAILED)},
        [RDZV_EV_LIVE_CHECK] = {ignore, TO(FAILED)},
        [RDZV_EV_TIMING] =     {not_now, TO(FAILED)},
    },
    [RDZV_RUN_DONE] = {
        [RDZV_EV_JOIN] =       {join_refuse_done, TO(DONE)},
        [RDZV_EV_HEARTBEAT] =  {refresh, TO(DONE)},
        [RDZV_EV_FAIL] =       {ignore, TO(DONE)},
        [RDZV_EV_ABORT] =      {not_now, TO(DONE)},
        [RDZV_EV_UNFIT] =      {unfit_record, TO(DONE)},
        [RDZV_EV_FINISH] =     {not_now, TO(DONE)},
        [RDZV_EV_LEAVE] =      {leave_drop, TO(DONE)},
        [RDZV_EV_JOIN_BOUND] = {answer_spares, TO(DONE)},
        [RDZV_EV_LAST_CALL] =  {ignore, TO(DONE)},
        [RDZV_EV_LIVE_CHECK] = {ignore, TO(DONE)},
        [RDZV_EV_TIMING] =     {not_now, TO(DONE)},
    },
};
/* clang-format on */

const rdzv_cell_t *rdzv__run_cell(rdzv_run_state_t p, rdzv_run_event_t ev) {
    return &run_table[p][ev];
}

int rdzv__run_event(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev) {
    return run_table[r->state][ev->kind].action(rs, r, ev);
}
