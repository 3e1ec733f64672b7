/* SPDX-License-Identifier: Apache-2.0
 * The exit barrier of a round as a phase x event -> action table: the nodes whose workers
 * succeeded leave together, within close_timeout, and only if every node of the round did. The
 * counter and its seal are rdzv_round_calls.h's (rdzv_acall_barrier_*): the last arrival before any
 * seal passes the barrier; a node that saw the round end while at the barrier seals it, and every
 * node reads the same verdict from its own ADD's reply.
 */
/* clang-format off */
/*
 * phase \ event     | ARRIVAL'S REPLY: COUNTED / LAST / LATE / FAILED | SETTLE        | WAIT, SET, SEAL
 * ------------------+-------------------------------------------------+---------------+--------------------
 * NONE              | -                                               | seal ->       | -
 *                   |                                                 | SETTLING      |
 * ARRIVING          | wait -> COUNTED / release -> COUNTED /          | -> ARRIVING_  | -
 *                   | broken -> COUNTED / lost                        | SETTLING      |
 * ARRIVING_SETTLING | seal -> COUNTED_SETTLING / release, broken ->   | -             | -
 *                   | COUNTED_SETTLING / lost                         |               |
 * COUNTED           | -                                               | seal ->       | SLICE_END: heart-
 *                   |                                                 | COUNTED_      | beat, wait again;
 *                   |                                                 | SETTLING      | TIMED_OUT, DONE:
 *                   |                                                 |               | leave
 * COUNTED_SETTLING  | -                                               | -             | SLICE_END,
 *                   |                                                 |               | TIMED_OUT: -;
 *                   |                                                 |               | DONE: leave;
 *                   |                                                 |               | PASSED: leave ->
 *                   |                                                 |               | COUNTED; BROKEN:
 *                   |                                                 |               | broken -> COUNTED;
 *                   |                                                 |               | SEAL_FAILED: lost
 * SETTLING          | -                                               | -             | PASSED: leave ->
 *                   |                                                 |               | NONE; BROKEN:
 *                   |                                                 |               | broken -> NONE;
 *                   |                                                 |               | SEAL_FAILED: lost
 */
/* clang-format on */

/* ENTER: every phase -> ARRIVING, ADD 1 (failing to send: lost). RESET: every phase -> NONE.
 * "wait": WAIT on the done key, close_timeout from now, in slices (barrier_wait). "release": the
 * last arrival SETs the done key. "leave": EV_BARRIER_DONE (after the hosting agent's linger).
 * "broken": EV_BARRIER_BROKEN, the supervisor re-joins. "lost": the link's loss (LINK_EV_CLOSED),
 * which may end the barrier itself (an agent's store gone after this node was counted). "seal"
 * after COUNTED goes behind the parked WAIT, so that a done key already on its way is read
 * first. Replies after agent__rdzv_stop, or cancelled with their connection, are dropped before
 * the table, and so is a seal's reply once the supervisor has left the barrier. */
#include "rdzv_int.h"

#include <limits.h>

#include "ddp_log.h"
#include "rdzv_round_calls.h"

typedef void (*barrier_action_t)(struct agent_rdzv *r, int status, const char *errtext);

/* A reply the barrier should no longer see: its connection was closed (by a reconnection, or
 * agent__rdzv_stop), or the link was stopped. */
static int reply_stale(const struct agent_rdzv *r, int status) {
    return status == DDP_ECANCELED || r->link == LINK_STOPPED;
}

static void on_arrived(void *arg, int status, const rdzv_barrier_count_t *count,
                       const char *errtext) {
    struct agent_rdzv *r = arg;
    if (reply_stale(r, status))
        return;
    agent_barrier_event_t ev = status != 0     ? BARRIER_EV_ARRIVE_FAILED
                               : count->sealed ? BARRIER_EV_LATE
                               : count->arrived >= r->a->as.group_world_size ? BARRIER_EV_LAST
                                                                             : BARRIER_EV_COUNTED;
    agent__barrier_event(r, ev, status, errtext);
}

static void on_sealed(void *arg, int status, const rdzv_barrier_count_t *count,
                      const char *errtext) {
    struct agent_rdzv *r = arg;
    if (reply_stale(r, status) || r->a->sup.state != SUP_BARRIER)
        return;
    agent_barrier_event_t ev = status != 0 ? BARRIER_EV_SEAL_FAILED
                               : count->arrived >= r->a->as.group_world_size ? BARRIER_EV_PASSED
                                                                             : BARRIER_EV_BROKEN;
    agent__barrier_event(r, ev, status, errtext);
}

/* The done key's WAIT: a slice that ran out before close_timeout, close_timeout, or the end. */
static void on_wait_done(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    if (reply_stale(r, status))
        return;
    agent_barrier_event_t ev = BARRIER_EV_DONE;
    if (status == DDP_ETIMEOUT)
        ev = uv_now(r->a->cfg.loop) < r->barrier_deadline ? BARRIER_EV_SLICE_END
                                                          : BARRIER_EV_TIMED_OUT;
    agent__barrier_event(r, ev, status, errtext);
}

/* The release's SET: done either way. */
static void on_released(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    if (!reply_stale(r, status))
        agent__barrier_event(r, BARRIER_EV_DONE, status, errtext);
}

/* The barrier did not pass cleanly (its time ran out, a request could not be sent or failed):
 * leave, saying why, and leave the run to the others. */
static void leave(struct agent_rdzv *r, int status, const char *errtext) {
    agent_t *a = r->a;
    if (status == DDP_ETIMEOUT)
        DDP_WARN("exit barrier: not every node arrived within close_timeout=%gs; leaving anyway",
                 a->cfg.job->rdzv.close_timeout_ms / 1000.0);
    else if (status != 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_DEBUG("exit barrier: %s",
                  agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    }
    agent__rdzv_leave(r, EV_BARRIER_DONE, AGENT_HOST_LINGER_MS);
}

/* TIMED_OUT: not every node arrived within close_timeout. */
static void timed_out(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status;
    leave(r, DDP_ETIMEOUT, errtext);
}

/* DONE: the done key was SET (status 0): every node arrived, the run is done: FINISH tells the
 * store (its spares leave), then this node leaves. Else the WAIT or SET failed: leave. */
static void done(struct agent_rdzv *r, int status, const char *errtext) {
    if (status != 0) {
        leave(r, status, errtext);
        return;
    }
    agent__rdzv_finish(r);
}

/* Waits on ctl for the exit barrier's done key, half a keep-alive interval at a time. A parked
 * WAIT holds back every later request on its connection, heartbeats included, and the server
 * declares a member silent for keep_alive_interval x keep_alive_max_attempt dead: waiting out
 * close_timeout in one piece ended the round under the nodes whose workers were still running,
 * so one node finishing 15 s before another failed the job. Each slice's end lets the
 * heartbeat out. When the WAIT cannot be sent, the node leaves. */
static void barrier_wait(struct agent_rdzv *r) {
    agent_t *a = r->a;
    uint64_t now = uv_now(a->cfg.loop);
    uint64_t left = r->barrier_deadline > now ? r->barrier_deadline - now : 1;
    /* Half an interval: a heartbeat queued behind the WAIT goes out at most that late. */
    uint64_t slice = (uint64_t)a->cfg.job->rdzv.keep_alive_interval_ms / 2;
    if (slice == 0 || slice > left)
        slice = left;
    if (slice > INT_MAX)
        slice = INT_MAX;
    int rc = rdzv_acall_barrier_wait(r->ctl, a->cfg.job->run_id, a->as.round, (int)slice,
                                     on_wait_done, r, NULL);
    if (rc < 0)
        leave(r, rc, "unable to send the exit barrier request");
}

/* ENTER: this node's workers succeeded. */
static void arrive(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_ARRIVING;
    if (rdzv_acall_barrier_arrive(r->ctl, r->a->cfg.job->run_id, r->a->as.round, on_arrived, r,
                                  NULL) < 0)
        agent__link_lost(r, "unable to reach the store at the exit barrier");
}

static void reset(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_NONE;
}

/* Seals the barrier; the seal's reply has the verdict. */
static void seal(struct agent_rdzv *r) {
    if (rdzv_acall_barrier_seal(r->ctl, r->a->cfg.job->run_id, r->a->as.round, on_sealed, r, NULL) <
        0)
        agent__link_lost(r, "unable to reach the store at the exit barrier");
}

/* NONE + SETTLE: the store was lost at the barrier and the link reconnected (which reset it):
 * the new store's counter decides; a store that forgot the run has none, and the node
 * re-joins. */
static void seal_new_store(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_SETTLING;
    seal(r);
}

static void settle_when_counted(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_ARRIVING_SETTLING;
}

/* COUNTED + SETTLE: behind the parked WAIT. */
static void seal_counted(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_COUNTED_SETTLING;
    seal(r);
}

/* ARRIVING + COUNTED: not the last; wait for the last to release us, close_timeout at most. */
static void wait_for_last(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_COUNTED;
    r->barrier_deadline = uv_now(r->a->cfg.loop) + (uint64_t)r->a->cfg.job->rdzv.close_timeout_ms;
    barrier_wait(r);
}

/* ARRIVING(_SETTLING) + LAST: the last node to arrive releases the others. */
static void release(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    if (r->barrier == BARRIER_ARRIVING_SETTLING)
        r->barrier = BARRIER_COUNTED_SETTLING;
    else
        r->barrier = BARRIER_COUNTED;
    int rc = rdzv_acall_barrier_release(r->ctl, r->a->cfg.job->run_id, r->a->as.round, on_released,
                                        r, NULL);
    if (rc < 0)
        leave(r, rc, "unable to send the exit barrier request");
}

static void broken(struct agent_rdzv *r) {
    agent_t *a = r->a;
    DDP_WARN("rendezvous '%s' round %lld ended before every node passed the exit barrier: "
             "re-joining (this node's workers run again, from the job's checkpoint if it keeps "
             "one)",
             a->cfg.job->run_id, (long long)a->as.round);
    agent__event(a, EV_BARRIER_BROKEN, NULL);
}

/* ARRIVING(_SETTLING) + LATE: a node saw the round end before everyone had arrived. */
static void arrived_late(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier =
        r->barrier == BARRIER_ARRIVING_SETTLING ? BARRIER_COUNTED_SETTLING : BARRIER_COUNTED;
    broken(r);
}

/* ARRIVING_SETTLING + COUNTED: the round ended while this arrival was on its way. */
static void seal_arrived(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = BARRIER_COUNTED_SETTLING;
    seal(r);
}

/* ARRIVE_FAILED, SEAL_FAILED: not even counted: this node lost the job before it could leave it
 * properly (or, reconnected, settles again). */
static void store_lost(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status;
    agent__link_lost(r, errtext);
}

/* COUNTED + SLICE_END: heartbeat (unless one is queued), wait again. */
static void next_slice(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    if (!r->hb_pending)
        agent__link_heartbeat(r);
    barrier_wait(r);
}

/* (COUNTED_)SETTLING + PASSED: the last node arrived before anyone sealed. */
static void passed(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = r->barrier == BARRIER_SETTLING ? BARRIER_NONE : BARRIER_COUNTED;
    DDP_DEBUG("exit barrier of round %lld passed by every node", (long long)r->a->as.round);
    agent__rdzv_finish(r);
}

/* (COUNTED_)SETTLING + BROKEN. */
static void seal_broken(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->barrier = r->barrier == BARRIER_SETTLING ? BARRIER_NONE : BARRIER_COUNTED;
    broken(r);
}

/* clang-format off */
static const barrier_action_t barrier_table[BARRIER_NPHASES][BARRIER_NEVENTS] = {
    [BARRIER_NONE] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_SETTLE] = seal_new_store,
    },
    [BARRIER_ARRIVING] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_SETTLE] = settle_when_counted,
        [BARRIER_EV_COUNTED] = wait_for_last,
        [BARRIER_EV_LAST] = release,
        [BARRIER_EV_LATE] = arrived_late,
        [BARRIER_EV_ARRIVE_FAILED] = store_lost,
    },
    [BARRIER_ARRIVING_SETTLING] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_COUNTED] = seal_arrived,
        [BARRIER_EV_LAST] = release,
        [BARRIER_EV_LATE] = arrived_late,
        [BARRIER_EV_ARRIVE_FAILED] = store_lost,
    },
    [BARRIER_COUNTED] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_SETTLE] = seal_counted,
        [BARRIER_EV_SLICE_END] = next_slice,
        [BARRIER_EV_TIMED_OUT] = timed_out,
        [BARRIER_EV_DONE] = done,
    },
    /* The WAIT's slices end ignored: the seal's verdict comes next on ctl. */
    [BARRIER_COUNTED_SETTLING] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_DONE] = done,
        [BARRIER_EV_PASSED] = passed,
        [BARRIER_EV_BROKEN] = seal_broken,
        [BARRIER_EV_SEAL_FAILED] = store_lost,
    },
    [BARRIER_SETTLING] = {
        [BARRIER_EV_ENTER] = arrive,
        [BARRIER_EV_RESET] = reset,
        [BARRIER_EV_PASSED] = passed,
        [BARRIER_EV_BROKEN] = seal_broken,
        [BARRIER_EV_SEAL_FAILED] = store_lost,
    },
};
/* clang-format on */

void agent__barrier_event(struct agent_rdzv *r, agent_barrier_event_t ev, int status,
                          const char *errtext) {
    barrier_action_t act = barrier_table[r->barrier][ev];
    if (act != NULL)
        act(r, status, errtext);
}

int agent__barrier_counted(const struct agent_rdzv *r) {
    return r->barrier == BARRIER_COUNTED || r->barrier == BARRIER_COUNTED_SETTLING;
}

void agent__rdzv_exit_barrier(agent_t *a) {
    agent__barrier_event(a->rdzv, BARRIER_EV_ENTER, 0, NULL);
}

/* The round ended, or the store was lost, while this node waited at the exit barrier: the job is
 * done only if every node arrived first. */
void agent__rdzv_barrier_settle(agent_t *a) {
    agent__barrier_event(a->rdzv, BARRIER_EV_SETTLE, 0, NULL);
}
