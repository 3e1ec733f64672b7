/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the exit barrier's machine (agent/rdzv_barrier.c) without a socket: every phase x
 * event cell is fed to agent__barrier_event and its effects compared with what its action must
 * do (arrive, seal, wait, release, leave, re-join, lose the store, ignore), then the replies as
 * the typed barrier calls deliver them (which event each becomes, which are dropped), the WAIT's
 * slices against close_timeout, requests that cannot be sent, and whole barriers: passed, sealed
 * first, and settled by the round's end while counted.
 *
 * rdzv_barrier.c is linked alone: the barrier calls (rdzv_acall_barrier_*) and the agent
 * functions it calls (the link's loss and heartbeat, rdzv.c's leave, the supervisor's
 * agent__event) are defined here as recorders, and the loop's clock is replaced through the
 * linker (-Wl,--wrap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_int.h"
#include "rdzv_round_calls.h"
#include "uv_now_fixture.h"

/* ---- what rdzv_barrier.c did, recorded by the stand-ins below ---- */

typedef struct effects {
    int arrives, seals, releases, waits;
    int wait_ms; /* the last WAIT's slice */
    int64_t round;
    int losses; /* agent__link_event(LINK_EV_CLOSED) */
    char loss_text[128];
    int heartbeats;
    int leaves;   /* agent__rdzv_leave(EV_BARRIER_DONE) */
    int finishes; /* agent__rdzv_finish: the barrier passed, the run is done */
    int broken;   /* agent__event(EV_BARRIER_BROKEN) */
} effects_t;

static effects_t fx;
static int send_rc; /* what the next barrier call returns */
/* The last callbacks the calls were given. */
static rdzv_acall_count_cb arrive_cb, seal_cb;
static rdzv_acall_done_cb release_cb, wait_cb;
static void *cb_arg;

static int sent(const char *run_id, int64_t round, void *arg) {
    assert_string_equal(run_id, "job7");
    fx.round = round;
    cb_arg = arg;
    return send_rc;
}

int rdzv_acall_barrier_arrive(rdzv_aclient_t *c, const char *run_id, int64_t round,
                              rdzv_acall_count_cb cb, void *arg, ddp_err_t *err) {
    (void)c, (void)err;
    fx.arrives++;
    arrive_cb = cb;
    return sent(run_id, round, arg);
}

int rdzv_acall_barrier_seal(rdzv_aclient_t *c, const char *run_id, int64_t round,
                            rdzv_acall_count_cb cb, void *arg, ddp_err_t *err) {
    (void)c, (void)err;
    fx.seals++;
    seal_cb = cb;
    return sent(run_id, round, arg);
}

int rdzv_acall_barrier_release(rdzv_aclient_t *c, const char *run_id, int64_t round,
                               rdzv_acall_done_cb cb, void *arg, ddp_err_t *err) {
    (void)c, (void)err;
    fx.releases++;
    release_cb = cb;
    return sent(run_id, round, arg);
}

int rdzv_acall_barrier_wait(rdzv_aclient_t *c, const char *run_id, int64_t round, int timeout_ms,
                            rdzv_acall_done_cb cb, void *arg, ddp_err_t *err) {
    (void)c, (void)err;
    fx.waits++;
    fx.wait_ms = timeout_ms;
    wait_cb = cb;
    return sent(run_id, round, arg);
}

void agent__link_event(struct agent_rdzv *r, agent_link_event_t ev, int status,
                       const char *errtext) {
    (void)r, (void)status;
    assert_int_equal(ev, LINK_EV_CLOSED); /* the only one the barrier sends */
    fx.losses++;
    snprintf(fx.loss_text, sizeof fx.loss_text, "%s", errtext ? errtext : "");
}

void agent__link_heartbeat(struct agent_rdzv *r) {
    (void)r;
    fx.heartbeats++;
}

void agent__rdzv_leave(struct agent_rdzv *r, agent_event_t done, uint64_t linger_ms) {
    (void)r;
    assert_int_equal(done, EV_BARRIER_DONE);
    assert_int_equal(linger_ms, AGENT_HOST_LINGER_MS); /* bounded: the others have their answer */
    fx.leaves++;
}

void agent__rdzv_finish(struct agent_rdzv *r) {
    (void)r;
    fx.finishes++;
}

void agent__event(agent_t *a, agent_event_t ev, agent_worker_t *w) {
    (void)a, (void)w;
    assert_int_equal(ev, EV_BARRIER_BROKEN); /* the only one the barrier sends itself */
    fx.broken++;
}

static struct agent_rdzv rz;
static agent_t ag;
static agent_job_t job;

/* Node of a three-node round 5 in barrier phase p, the supervisor at the barrier; close_timeout
 * 10 s, keep-alive 2 s; the barrier's close_timeout runs out at t=20 s. */
static void setup(agent_barrier_phase_t p) {
    memset(&fx, 0, sizeof fx);
    memset(&rz, 0, sizeof rz);
    memset(&ag, 0, sizeof ag);
    memset(&job, 0, sizeof job);
    send_rc = 0;
    now_ms = 15000;
    arrive_cb = seal_cb = NULL;
    release_cb = wait_cb = NULL;
    job.run_id = "job7";
    job.rdzv.close_timeout_ms = 10000;
    job.rdzv.keep_alive_interval_ms = 2000;
    ag.cfg.job = &job;
    ag.sup.state = SUP_BARRIER;
    ag.as.round = 5;
    ag.as.group_world_size = 3;
    ag.rdzv = &rz;
    rz.a = &ag;
    rz.barrier = p;
    rz.barrier_deadline = 20000;
}

/* ---- the table, cell by cell ---- */

typedef enum {
    A_IGNORE = 0,
    A_ARRIVE,       /* ADD 1 -> ARRIVING */
    A_RESET,        /* -> NONE */
    A_SEAL,         /* a seal sent */
    A_SETTLE_LATER, /* -> ARRIVING_SETTLING, nothing sent */
    A_WAIT,         /* a WAIT for close_timeout from now */
    A_RELEASE,      /* the done key SET */
    A_BROKEN,       /* EV_BARRIER_BROKEN */
    A_LOST,         /* the link's loss */
    A_SLICE,        /* a heartbeat and the next WAIT */
    A_LEAVE,        /* EV_BARRIER_DONE through the linger */
    A_FINISH,       /* passed: FINISH tells the store the run is done, then the linger */
} action_t;

typedef struct cell {
    action_t act;
    agent_barrier_phase_t next;
} cell_t;

static const char *const phase_names[BARRIER_NPHASES] = {
    "NONE", "ARRIVING", "ARRIVING_SETTLING", "COUNTED", "COUNTED_SETTLING", "SETTLING"};
static const char *const event_names[BARRIER_NEVENTS] = {
    "ENTER",     "RESET",     "SETTLE", "COUNTED", "LAST",   "LATE",       "ARRIVE_FAILED",
    "SLICE_END", "TIMED_OUT", "DONE",   "PASSED",  "BROKEN", "SEAL_FAILED"};
static const char *const action_names[] = {"ignore",       "arrive",     "reset",   "seal",
                                           "settle later", "wait",       "release", "broken",
                                           "lost",         "next slice", "leave",   "finish"};

#define C(a, n)                                                                                    \
    { a, BARRIER_##n }
#define ALWAYS [BARRIER_EV_ENTER] = C(A_ARRIVE, ARRIVING), [BARRIER_EV_RESET] = C(A_RESET, NONE)

/* clang-format off */
static const cell_t expected[BARRIER_NPHASES][BARRIER_NEVENTS] = {
    [BARRIER_NONE] = {ALWAYS,
        [BARRIER_EV_SETTLE] = C(A_SEAL, SETTLING)},
    [BARRIER_ARRIVING] = {ALWAYS,
        [BARRIER_EV_SETTLE] = C(A_SETTLE_LATER, ARRIVING_SETTLING),
        [BARRIER_EV_COUNTED] = C(A_WAIT, COUNTED),
        [BARRIER_EV_LAST] = C(A_RELEASE, COUNTED),
        [BARRIER_EV_LATE] = C(A_BROKEN, COUNTED),
        [BARRIER_EV_ARRIVE_FAILED] = C(A_LOST, ARRIVING)},
    [BARRIER_ARRIVING_SETTLING] = {ALWAYS,
        [BARRIER_EV_COUNTED] = C(A_SEAL, COUNTED_SETTLING),
        [BARRIER_EV_LAST] = C(A_RELEASE, COUNTED_SETTLING),
        [BARRIER_EV_LATE] = C(A_BROKEN, COUNTED_SETTLING),
        [BARRIER_EV_ARRIVE_FAILED] = C(A_LOST, ARRIVING_SETTLING)},
    [BARRIER_COUNTED] = {ALWAYS,
        [BARRIER_EV_SETTLE] = C(A_SEAL, COUNTED_SETTLING),
        [BARRIER_EV_SLICE_END] = C(A_SLICE, COUNTED),
        [BARRIER_EV_TIMED_OUT] = C(A_LEAVE, COUNTED),
        [BARRIER_EV_DONE] = C(A_FINISH, COUNTED)},
    [BARRIER_COUNTED_SETTLING] = {ALWAYS,
        [BARRIER_EV_DONE] = C(A_FINISH, COUNTED_SETTLING),
        [BARRIER_EV_PASSED] = C(A_FINISH, COUNTED),
        [BARRIER_EV_BROKEN] = C(A_BROKEN, COUNTED),
        [BARRIER_EV_SEAL_FAILED] = C(A_LOST, COUNTED_SETTLING)},
    [BARRIER_SETTLING] = {ALWAYS,
        [BARRIER_EV_PASSED] = C(A_FINISH, NONE),
        [BARRIER_EV_BROKEN] = C(A_BROKEN, NONE),
        [BARRIER_EV_SEAL_FAILED] = C(A_LOST, SETTLING)},
};
/* clang-format on */

static void test_every_cell(void **state) {
    (void)state;
    for (int p = 0; p < BARRIER_NPHASES; p++) {
        for (int ev = 0; ev < BARRIER_NEVENTS; ev++) {
            setup((agent_barrier_phase_t)p);
            cell_t want = expected[p][ev];
            if (want.act == A_IGNORE)
                want.next = (agent_barrier_phase_t)p;
            agent__barrier_event(&rz, (agent_barrier_event_t)ev, 0, "test");
            effects_t w;
            memset(&w, 0, sizeof w);
            switch (want.act) {
            case A_ARRIVE: w.arrives = 1; break;
            case A_SEAL: w.seals = 1; break;
            case A_WAIT: w.waits = 1; break;
            case A_RELEASE: w.releases = 1; break;
            case A_BROKEN: w.broken = 1; break;
            case A_LOST: w.losses = 1; break;
            case A_SLICE: w.heartbeats = w.waits = 1; break;
            case A_LEAVE: w.leaves = 1; break;
            case A_FINISH: w.finishes = 1; break;
            default: break;
            }
            char cell[96];
            snprintf(cell, sizeof cell, "%s + %s (%s)", phase_names[p], event_names[ev],
                     action_names[want.act]);
            if (rz.barrier != want.next)
                fail_msg("%s: phase %s, want %s", cell, phase_names[rz.barrier],
                         phase_names[want.next]);
            if (fx.arrives != w.arrives || fx.seals != w.seals || fx.waits != w.waits ||
                fx.releases != w.releases || fx.broken != w.broken || fx.losses != w.losses ||
                fx.heartbeats != w.heartbeats || fx.leaves != w.leaves || fx.finishes != w.finishes)
                fail_msg("%s: arrive %d/%d seal %d/%d wait %d/%d release %d/%d broken %d/%d "
                         "lost %d/%d heartbeat %d/%d leave %d/%d finish %d/%d",
                         cell, fx.arrives, w.arrives, fx.seals, w.seals, fx.waits, w.waits,
                         fx.releases, w.releases, fx.broken, w.broken, fx.losses, w.losses,
                         fx.heartbeats, w.heartbeats, fx.leaves, w.leaves, fx.finishes, w.finishes);
            if (w.arrives + w.seals + w.waits + w.releases > 0)
                assert_int_equal(fx.round, 5); /* the keys of this node's round */
            if (want.act == A_WAIT)
                assert_int_equal(rz.barrier_deadline, now_ms + 10000);
            if (want.act == A_LOST)
                assert_string_equal(fx.loss_text, "test");
        }
    }
}

/* ---- replies, as the typed calls deliver them ---- */

static const rdzv_barrier_count_t counted = {.arrived = 1}, last = {.arrived = 3},
                                  late = {.arrived = 2, .sealed = 1},
                                  passed_count = {.arrived = 3, .sealed = 1};

/* The arrival's count picks the event: not the last, the last, or after a seal; a failure is the
 * store's loss; a reply cancelled with its connection, or after the link stopped, is dropped. */
static void test_arrival_replies(void **state) {
    (void)state;
    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    assert_int_equal(rz.barrier, BARRIER_ARRIVING);
    assert_ptr_equal(cb_arg, &rz);
    arrive_cb(cb_arg, 0, &counted, NULL);
    assert_int_equal(rz.barrier, BARRIER_COUNTED);
    assert_int_equal(fx.waits, 1);
    assert_int_equal(fx.wait_ms, 1000); /* half a keep-alive interval */

    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, 0, &last, NULL);
    assert_int_equal(fx.releases, 1);
    release_cb(cb_arg, 0, NULL);
    assert_int_equal(fx.finishes, 1); /* passed: the run is done */
    assert_int_equal(fx.leaves, 0);   /* the leave follows FINISH's reply (rdzv.c) */

    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, 0, &late, NULL);
    assert_int_equal(fx.broken, 1);

    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, DDP_EPROTO, NULL, "malformed reply at the exit barrier");
    assert_int_equal(fx.losses, 1);
    assert_string_equal(fx.loss_text, "malformed reply at the exit barrier");

    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, DDP_ECANCELED, NULL, "closed");
    rz.link = LINK_STOPPED;
    arrive_cb(cb_arg, 0, &counted, NULL);
    assert_int_equal(rz.barrier, BARRIER_ARRIVING);
    assert_int_equal(fx.losses + fx.waits, 0);
}

/* The WAIT's slices: heartbeat (unless one is pending) and wait again until close_timeout, the
 * last slice only what is left; then leave, said. While settling, slices end unheard. */
static void test_wait_slices(void **state) {
    (void)state;
    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, 0, &counted, NULL); /* deadline 25 s */
    now_ms = 24500;
    wait_cb(cb_arg, DDP_ETIMEOUT, "timed out");
    assert_int_equal(fx.heartbeats, 1);
    assert_int_equal(fx.waits, 2);
    assert_int_equal(fx.wait_ms, 500);
    rz.hb_pending = 1;
    now_ms = 24900;
    wait_cb(cb_arg, DDP_ETIMEOUT, "timed out");
    assert_int_equal(fx.heartbeats, 1); /* one queued already */
    assert_int_equal(fx.wait_ms, 100);
    now_ms = 25000;
    wait_cb(cb_arg, DDP_ETIMEOUT, "timed out");
    assert_int_equal(fx.leaves, 1);
    assert_int_equal(fx.waits, 3);

    setup(BARRIER_COUNTED);
    agent__rdzv_barrier_settle(&ag);
    assert_int_equal(rz.barrier, BARRIER_COUNTED_SETTLING);
    agent__barrier_event(&rz, BARRIER_EV_SLICE_END, DDP_ETIMEOUT, NULL);
    agent__barrier_event(&rz, BARRIER_EV_TIMED_OUT, DDP_ETIMEOUT, NULL);
    assert_int_equal(fx.waits + fx.leaves, 0);
}

/* A request that cannot be sent: the arrival or the seal is the store's loss; the WAIT and the
 * release leave (this node's part is done). */
static void test_send_failures(void **state) {
    (void)state;
    setup(BARRIER_NONE);
    send_rc = DDP_ECLOSED;
    agent__rdzv_exit_barrier(&ag);
    assert_int_equal(fx.losses, 1);
    assert_string_equal(fx.loss_text, "unable to reach the store at the exit barrier");
    setup(BARRIER_COUNTED);
    send_rc = DDP_ECLOSED;
    agent__rdzv_barrier_settle(&ag);
    assert_int_equal(fx.losses, 1);
    setup(BARRIER_ARRIVING);
    send_rc = DDP_ECLOSED;
    agent__barrier_event(&rz, BARRIER_EV_COUNTED, 0, NULL);
    assert_int_equal(fx.leaves, 1);
    setup(BARRIER_ARRIVING);
    send_rc = DDP_ECLOSED;
    agent__barrier_event(&rz, BARRIER_EV_LAST, 0, NULL);
    assert_int_equal(fx.leaves, 1);
}

/* The round ends while this node's arrival is on its way: it seals once counted, and the seal's
 * verdict decides; a seal's reply is dropped once the supervisor has left the barrier. */
static void test_settled_barriers(void **state) {
    (void)state;
    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    agent__rdzv_barrier_settle(&ag);
    assert_int_equal(fx.seals, 0);
    agent__rdzv_barrier_settle(&ag); /* said once */
    arrive_cb(cb_arg, 0, &counted, NULL);
    assert_int_equal(fx.seals, 1);
    assert_int_equal(fx.waits, 0);
    seal_cb(cb_arg, 0, &late, NULL); /* 2 of 3 arrived before the seal: broken */
    assert_int_equal(fx.broken, 1);
    assert_int_equal(rz.barrier, BARRIER_COUNTED);

    /* Counted and waiting: the seal goes behind the WAIT; every node had arrived: passed. */
    setup(BARRIER_NONE);
    agent__rdzv_exit_barrier(&ag);
    arrive_cb(cb_arg, 0, &counted, NULL);
    agent__rdzv_barrier_settle(&ag);
    wait_cb(cb_arg, DDP_ETIMEOUT, "timed out");
    assert_int_equal(fx.waits, 1);
    seal_cb(cb_arg, 0, &passed_count, NULL);
    assert_int_equal(fx.finishes, 1);
    assert_int_equal(fx.broken, 0);

    /* After a reconnection (NONE): sealed on the new store, whose verdict decides. */
    setup(BARRIER_NONE);
    agent__rdzv_barrier_settle(&ag);
    assert_int_equal(rz.barrier, BARRIER_SETTLING);
    ag.sup.state = SUP_DONE;
    seal_cb(cb_arg, 0, &passed_count, NULL);
    assert_int_equal(fx.leaves + fx.finishes, 0);
    ag.sup.state = SUP_BARRIER;
    seal_cb(cb_arg, DDP_ECLOSED, NULL, "connection closed");
    assert_int_equal(fx.losses, 1);
    assert_int_equal(rz.barrier, BARRIER_SETTLING);
    seal_cb(cb_arg, 0, &counted, NULL);
    assert_int_equal(fx.broken, 1);
    assert_int_equal(rz.barrier, BARRIER_NONE);
}

/* A counted arrival is what the link asks about when an agent's store goes away. */
static void test_counted(void **state) {
    (void)state;
    for (int p = 0; p < BARRIER_NPHASES; p++) {
        setup((agent_barrier_phase_t)p);
        assert_int_equal(agent__barrier_counted(&rz),
                         p == BARRIER_COUNTED || p == BARRIER_COUNTED_SETTLING);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cell),       cmocka_unit_test(test_arrival_replies),
        cmocka_unit_test(test_wait_slices),      cmocka_unit_test(test_send_failures),
        cmocka_unit_test(test_settled_barriers), cmocka_unit_test(test_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
