/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the supervision table (agent/supervise.c): every state x event cell is fed to
 * agent__event, on one node and on several, and its side effects compared with what its action
 * must do (restart, fail, stop, ignore). The paths through the table are in
 * test_agent_supervise_restart.c and test_agent_supervise_rdzv.c; the stand-ins in
 * supervise_fixture.h. */
#include "supervise_fixture.h"

/* ---- the table, cell by cell ---- */

/* The action each cell must take (the names of supervise.c's functions). */
typedef enum {
    A_IGNORE = 0,
    A_FAIL_AND_STOP,
    A_NOTE_FAILURE,
    A_GROUP_SUCCEEDED,
    A_BEGIN_SHUTDOWN,
    A_KILL_ALL,
    A_RESTART_OR_FAIL,
    A_FINISH_SHUTDOWN,
    A_ESCALATE,
    A_JOINED,
    A_ROUND_ENDED,
    A_RDZV_FAILED,
    A_BARRIER_DONE,
    A_CAPTURE_BEGIN,
    A_CAPTURE_DONE,
    A_CAPTURE_ROUND_ENDED,
    A_CAPTURE_ABORT,
    A_CAPTURE_RDZV_FAILED,
    A_NO_PROGRESS_FAIL,
    A_STORE_LOST_STOP,
    A_REJOIN,
    A_BARRIER_SETTLE,
    A_BARRIER_BROKEN,
    A_CHECKED,
    A_CHECK_FAILED,
    A_CHECK_ABORT,
    A_CHECK_RDZV_FAILED,
    A_SPARE_RELEASED,
    A_RESTART_NOW,
    A_SPARE_CHECK,
} action_t;

static const char *const event_names[EV_NEVENTS] = {
    "WORKER_FAIL",    "GROUP_DOWN",   "SIGNAL",        "KILL_TIMER",  "JOINED",       "ROUND_END",
    "RDZV_ERROR",     "BARRIER_DONE", "WORKER_HUNG",   "STACKS_DONE", "ABORT_DONE",   "STORE_LOST",
    "BARRIER_BROKEN", "HEALTH_OK",    "HEALTH_FAILED", "RUN_DONE",    "GPU_RELEASED", "SPARE",
};

/* A cell not written is A_IGNORE: HEALTH_OK and HEALTH_FAILED outside CHECKING, for one. */
/* clang-format off */
static const action_t expected[SUP_NSTATES][EV_NEVENTS] = {
    /*                WORKER_FAIL      GROUP_DOWN          SIGNAL            KILL_TIMER
     *                JOINED     ROUND_END        RDZV_ERROR          BARRIER_DONE
     *                WORKER_HUNG      STACKS_DONE      ABORT_DONE
     *                STORE_LOST          BARRIER_BROKEN */
    [SUP_RUNNING] =   {A_FAIL_AND_STOP, A_GROUP_SUCCEEDED,  A_BEGIN_SHUTDOWN, A_IGNORE,
                       A_IGNORE, A_ROUND_ENDED,   A_RDZV_FAILED,      A_IGNORE,
                       A_CAPTURE_BEGIN, A_IGNORE,        A_IGNORE,
                       A_STORE_LOST_STOP,  A_IGNORE},
    [SUP_STOPPING] =  {A_NOTE_FAILURE,  A_RESTART_OR_FAIL,  A_BEGIN_SHUTDOWN, A_KILL_ALL,
                       A_IGNORE, A_IGNORE,        A_RDZV_FAILED,      A_IGNORE,
                       A_IGNORE,        A_IGNORE,        A_IGNORE,
                       A_IGNORE,           A_IGNORE,
                       [EV_GPU_RELEASED] = A_RESTART_NOW},
    [SUP_SHUTDOWN] =  {A_NOTE_FAILURE,  A_FINISH_SHUTDOWN,  A_ESCALATE,       A_KILL_ALL,
                       A_IGNORE, A_IGNORE,        A_IGNORE,           A_IGNORE,
                       A_IGNORE,        A_IGNORE,        A_IGNORE,
                       A_IGNORE,           A_IGNORE},
    [SUP_JOINING] =   {A_IGNORE,        A_IGNORE,           A_BEGIN_SHUTDOWN, A_IGNORE,
                       A_JOINED, A_IGNORE,        A_RDZV_FAILED,      A_IGNORE,
                       A_IGNORE,        A_IGNORE,        A_IGNORE,
                       A_REJOIN,           A_IGNORE,
                       [EV_RUN_DONE] = A_SPARE_RELEASED, [EV_SPARE] = A_SPARE_CHECK},
    [SUP_BARRIER] =   {A_IGNORE,        A_IGNORE,           A_BEGIN_SHUTDOWN, A_IGNORE,
                       A_IGNORE, A_BARRIER_SETTLE, A_RDZV_FAILED,     A_BARRIER_DONE,
                       A_IGNORE,        A_IGNORE,        A_IGNORE,
                       A_BARRIER_SETTLE,   A_BARRIER_BROKEN},
    [SUP_DONE] =      {A_IGNORE,        A_IGNORE,           A_IGNORE,         A_IGNORE,
                       A_IGNORE, A_IGNORE,        A_IGNORE,           A_IGNORE,
                       A_IGNORE,        A_IGNORE,        A_IGNORE,
                       A_IGNORE,           A_IGNORE},
    [SUP_CAPTURING] = {A_NOTE_FAILURE,  A_IGNORE,           A_CAPTURE_ABORT,  A_IGNORE,
                       A_IGNORE, A_CAPTURE_ROUND_ENDED, A_CAPTURE_RDZV_FAILED, A_IGNORE,
                       A_IGNORE,        A_CAPTURE_DONE,  A_IGNORE,
                       A_CAPTURE_ROUND_ENDED, A_IGNORE},
    [SUP_ABORTING] =  {A_IGNORE,        A_IGNORE,           A_BEGIN_SHUTDOWN, A_IGNORE,
                       A_IGNORE, A_IGNORE,        A_NO_PROGRESS_FAIL, A_IGNORE,
                       A_IGNORE,        A_IGNORE,        A_NO_PROGRESS_FAIL,
                       A_NO_PROGRESS_FAIL, A_IGNORE},
    [SUP_CHECKING] =  {[EV_SIGNAL] = A_CHECK_ABORT, [EV_RDZV_ERROR] = A_CHECK_RDZV_FAILED,
                       [EV_HEALTH_OK] = A_CHECKED, [EV_HEALTH_FAILED] = A_CHECK_FAILED},
};
/* clang-format on */

/* The effects an action has in the sweep's context: one of two workers still running, worker 0
 * exited with code 1, no restart spent of max 1, SIGTERM as the stop signal, nothing failed
 * before. want_state is the state after; the rest are the counters of effects_t. */
typedef struct outcome {
    agent_sup_state_t state;
    int sig0, nsigs; /* the signals sent to the group */
    int kill_timer_started, kill_timer_stopped;
    int restart_timer_started, restart_timer_stopped;
    int group_starts, summaries, loop_shutdowns, adopted_kills;
    int rdzv_joins, rdzv_reports, barriers, settles;
    int nfailures;
    int fatal, result_signal;
    int captures, capture_kills, hang_reports, gpu_cancels;
    int checks, check_cancels, unfit_reports, unfit;
} outcome_t;

static outcome_t outcome_of(action_t act, agent_sup_state_t st, int multi) {
    outcome_t o;
    memset(&o, 0, sizeof o);
    o.state = st;
    switch (act) {
    case A_IGNORE: break;
    case A_FAIL_AND_STOP:
        o.state = SUP_STOPPING;
        o.nfailures = 1;
        o.rdzv_reports = multi;
        o.sig0 = SIGTERM, o.nsigs = 1, o.kill_timer_started = 1;
        break;
    case A_NOTE_FAILURE:
        o.nfailures = 1; /* exit code 1 is a failure of its own, not the agent's stop */
        break;
    case A_GROUP_SUCCEEDED:
        o.adopted_kills = 1;
        o.state = multi ? SUP_BARRIER : SUP_DONE;
        o.barriers = multi;
        o.loop_shutdowns = !multi;
        break;
    case A_CHECK_ABORT:
        o.check_cancels = 1; /* the check's process group first, then the shutdown */
        __attribute__((fallthrough));
    case A_CAPTURE_ABORT:
        o.capture_kills = act == A_CAPTURE_ABORT; /* then the shutdown, as anywhere else */
        __attribute__((fallthrough));
    case A_BEGIN_SHUTDOWN:
        o.state = SUP_SHUTDOWN;
        o.gpu_cancels = 1;
        o.restart_timer_stopped = 1;
        o.sig0 = SIGTERM, o.nsigs = 1, o.kill_timer_started = 1;
        break;
    case A_KILL_ALL:
    case A_ESCALATE: o.sig0 = SIGKILL, o.nsigs = 1; break;
    case A_RESTART_OR_FAIL:
        o.kill_timer_stopped = 1;
        o.adopted_kills = 1;
        if (multi) /* the next JOIN follows the node's check */
            o.state = SUP_JOINING, o.rdzv_joins = 1, o.checks = 1;
        else
            o.restart_timer_started = 1; /* restart 1 of 1 is scheduled */
        break;
    case A_FINISH_SHUTDOWN:
        o.kill_timer_stopped = 1;
        o.adopted_kills = 1;
        o.state = SUP_DONE;
        o.loop_shutdowns = 1;
        o.result_signal = SIGTERM;
        break;
    case A_JOINED:
        o.state = SUP_RUNNING;
        o.group_starts = 1;
        break;
    case A_STORE_LOST_STOP: /* stopped as when the round ends; nothing is reported */
    case A_ROUND_ENDED:
        o.state = SUP_STOPPING;
        o.sig0 = SIGTERM, o.nsigs = 1, o.kill_timer_started = 1;
        break;
    case A_CHECK_RDZV_FAILED: o.check_cancels = 1; __attribute__((fallthrough));
    case A_CAPTURE_RDZV_FAILED:
        o.capture_kills = act == A_CAPTURE_RDZV_FAILED;
        __attribute__((fallthrough));
    case A_RDZV_FAILED:
        o.state = SUP_SHUTDOWN;
        o.fatal = 1;
        o.sig0 = SIGTERM, o.nsigs = 1, o.kill_timer_started = 1;
        break;
    case A_BARRIER_DONE:
    case A_SPARE_RELEASED: /* the run finished without this node: success, nothing ran */
        o.state = SUP_DONE;
        o.loop_shutdowns = 1;
        break;
    case A_CAPTURE_BEGIN: /* the hung worker is the root cause; nothing is signalled yet */
        o.state = SUP_CAPTURING;
        o.captures = 1;
        o.nfailures = 1;
        break;
    case A_CAPTURE_DONE: /* reported, then stopped as after a failure */
        o.state = SUP_STOPPING;
        o.hang_reports = 1;
        o.rdzv_reports = multi;
        o.sig0 = SIGTERM, o.nsigs = 1, o.kill_timer_started = 1;
        break;
    case A_CAPTURE_ROUND_ENDED: break;
    case A_SPARE_CHECK:    /* a spare's next JOIN, its keep-alive, follows the check too */
    case A_RESTART_NOW:    /* the restart the GPU memory wait held: as after the delay */
    case A_BARRIER_BROKEN: /* a JOIN like any other: the node's check, then the node's start */
        o.checks = 1;
        o.state = multi ? SUP_JOINING : SUP_RUNNING;
        o.rdzv_joins = multi;
        o.group_starts = !multi; /* (the barrier is multi-node's: no cell one node reaches) */
        break;
    case A_REJOIN: /* the same JOIN again, on the new connection (one node has no store) */
        o.state = SUP_JOINING;
        o.rdzv_joins = multi;
        break;
    case A_CHECKED: /* the first start: the group, or the JOIN */
        o.state = multi ? SUP_JOINING : SUP_RUNNING;
        o.group_starts = !multi;
        o.rdzv_joins = multi;
        break;
    case A_CHECK_FAILED: /* said; the next try waits out its back-off */ o.unfit_reports = 1; break;
    case A_BARRIER_SETTLE: o.settles = multi; break; /* one node has no barrier */
    case A_NO_PROGRESS_FAIL: /* the store took the stop (or is gone): the summary, then exit */
        o.state = SUP_DONE;
        o.summaries = 1;
        o.loop_shutdowns = 1;
        break;
    }
    return o;
}

static void sweep(int multi) {
    int bad = 0;
    for (int s = 0; s < SUP_NSTATES; s++) {
        for (int e = 0; e < EV_NEVENTS; e++) {
            agent_worker_t *w = setup((agent_sup_state_t)s, multi, 1, EXITED(1));
            /* agent.c records the first termination signal before feeding EV_SIGNAL; in
             * SHUTDOWN one has arrived already. */
            if (e == EV_SIGNAL || s == SUP_SHUTDOWN)
                ag.sup.stop_signal = SIGTERM;
            agent__event(&ag, (agent_event_t)e,
                         e == EV_WORKER_FAIL || e == EV_WORKER_HUNG ? w : NULL);
            outcome_t want = outcome_of(expected[s][e], (agent_sup_state_t)s, multi);
            outcome_t got = {
                .state = ag.sup.state,
                .sig0 = fx.nsigs > 0 ? fx.sigs[0] : 0,
                .nsigs = fx.nsigs,
                .kill_timer_started = fx.kill_timer_started,
                .kill_timer_stopped = fx.kill_timer_stopped,
                .restart_timer_started = fx.restart_timer_started,
                .restart_timer_stopped = fx.restart_timer_stopped,
                .group_starts = fx.group_starts,
                .summaries = fx.summaries,
                .loop_shutdowns = fx.loop_shutdowns,
                .adopted_kills = fx.adopted_kills,
                .rdzv_joins = fx.rdzv_joins,
                .rdzv_reports = fx.rdzv_reports,
                .barriers = fx.barriers,
                .settles = fx.settles,
                .nfailures = ag.grp.nfailures,
                .fatal = ag.sup.fatal,
                .result_signal = ag.sup.result.signal,
                .captures = fx.captures,
                .capture_kills = fx.capture_kills,
                .hang_reports = fx.hang_reports,
                .gpu_cancels = fx.gpu_cancels,
                .checks = fx.checks,
                .check_cancels = fx.check_cancels,
                .unfit_reports = fx.unfit_reports,
                .unfit = ag.sup.result.unfit,
            };
            if (memcmp(&want, &got, sizeof want) != 0) {
                print_error(
                    "%s x %s (%s): state %s (want %s), signals %d/%d (want %d/%d), "
                    "kill timer +%d -%d (want +%d -%d), restart timer +%d -%d (want +%d "
                    "-%d), starts %d (%d), summaries %d (%d), loop down %d (%d), "
                    "adopted %d (%d), joins %d (%d), reports %d (%d), barriers %d (%d), "
                    "failures %d (%d), fatal %d (%d), result.signal %d (%d), captures %d/%d/%d "
                    "(%d/%d/%d), checks %d/%d/%d (%d/%d/%d)\n",
                    state_names[s], event_names[e], multi ? "multi-node" : "one node",
                    state_names[got.state], state_names[want.state], got.sig0, got.nsigs, want.sig0,
                    want.nsigs, got.kill_timer_started, got.kill_timer_stopped,
                    want.kill_timer_started, want.kill_timer_stopped, got.restart_timer_started,
                    got.restart_timer_stopped, want.restart_timer_started,
                    want.restart_timer_stopped, got.group_starts, want.group_starts, got.summaries,
                    want.summaries, got.loop_shutdowns, want.loop_shutdowns, got.adopted_kills,
                    want.adopted_kills, got.rdzv_joins, want.rdzv_joins, got.rdzv_reports,
                    want.rdzv_reports, got.barriers, want.barriers, got.nfailures, want.nfailures,
                    got.fatal, want.fatal, got.result_signal, want.result_signal, got.captures,
                    got.capture_kills, got.hang_reports, want.captures, want.capture_kills,
                    want.hang_reports, got.checks, got.check_cancels, got.unfit_reports,
                    want.checks, want.check_cancels, want.unfit_reports);
                bad++;
            }
        }
    }
    assert_int_equal(bad, 0);
}

static void test_every_cell_one_node(void **state) {
    (void)state;
    sweep(0);
}

static void test_every_cell_multi_node(void **state) {
    (void)state;
    sweep(1);
}

int main(void) {
    ddp_log_init("agent", DDP_LOG_ERROR);
    ddp_log_set_level(DDP_LOG_ERROR - 1); /* the actions' log lines are not under test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cell_one_node),
        cmocka_unit_test(test_every_cell_multi_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
