/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the supervision table's paths through what the agent watches and the rendezvous
 * (agent/supervise.c): a hang (capture, then stop and restart), --max_no_progress_restarts on one
 * node and on several, the node's health check before each start and JOIN (its back-off and its
 * end at join_timeout), and a multi-node job's failures, round ends and refusals. The stand-ins
 * are in supervise_fixture.h. */
#include "supervise_fixture.h"

/* A hang: the stacks are captured before anything is signalled, then the group is stopped and
 * restarted like after a failure, with the hung worker as the root cause. */
static void test_hang_capture_then_restart(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    workers[1].hung_for_ms = 62000;
    workers[1].step = 1234;
    snprintf(workers[1].stacks_file, sizeof workers[1].stacks_file, "/x/stacks.txt");
    agent__event(&ag, EV_WORKER_HUNG, &workers[1]);
    assert_int_equal(ag.sup.state, SUP_CAPTURING);
    assert_int_equal(fx.captures, 1);
    assert_int_equal(fx.nsigs, 0); /* nothing is signalled while the stacks are taken */
    assert_int_equal(ag.grp.nfailures, 1);
    assert_int_equal(failures[0].hung, 1);
    assert_int_equal(failures[0].rank, 1);
    assert_int_equal(failures[0].step, 1234);
    agent__event(&ag, EV_STACKS_DONE, NULL);
    assert_int_equal(fx.hang_reports, 1);
    assert_string_equal(failures[0].stacks_file, "/x/stacks.txt");
    assert_int_equal(ag.sup.state, SUP_STOPPING);
    assert_int_equal(fx.sigs[0], SIGTERM);
    /* Both die by the agent's SIGTERM: the hung worker's death is not a failure of its own. */
    fail_group(SIGNALED(SIGTERM));
    assert_int_equal(ag.grp.nfailures, 1);
    assert_int_equal(fx.restart_timer_started, 1);
    fire_restart_timer();
    assert_int_equal(fx.group_starts, 1);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
}

/* No helper could start: the capture is over at once. Multi-node: the hang ends the round. */
static void test_hang_without_capture_multi_node(void **state) {
    (void)state;
    setup(SUP_RUNNING, 1, 2, 0);
    workers[0].state = WORKER_RUNNING;
    workers[0].hung_for_ms = 1500;
    workers[0].step = -1;
    capture_helpers = 0;
    agent__event(&ag, EV_WORKER_HUNG, &workers[0]);
    assert_int_equal(ag.sup.state, SUP_STOPPING);
    assert_int_equal(fx.rdzv_reports, 1);
    assert_string_equal(fx.rdzv_what, "rank 0 (node7) hung: no heartbeat for 1.5 s");
    /* A round that ended during the capture is not reported again. */
    setup(SUP_RUNNING, 1, 2, 0);
    workers[0].state = WORKER_RUNNING;
    agent__event(&ag, EV_WORKER_HUNG, &workers[0]);
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.sup.state, SUP_CAPTURING);
    agent__event(&ag, EV_STACKS_DONE, NULL);
    assert_int_equal(fx.rdzv_reports, 0);
    assert_int_equal(ag.sup.state, SUP_STOPPING);
}

/* --max_no_progress_restarts: the verdict stops restarts with restarts left, after the summary. */
static void test_no_progress_stops(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 5;
    progress_stop = 1;
    fail_group(EXITED(1));
    assert_failed_without_restart();
    assert_int_equal(ag.sup.no_progress_stop, 1);
}

/* --max_no_progress_restarts on several nodes: instead of re-joining, the node stops the run
 * for every node (ABORT with the reason) and fails once the store has answered. */
static void test_no_progress_stops_every_node(void **state) {
    (void)state;
    setup(SUP_RUNNING, 1, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 5;
    progress_stop = 1;
    fail_group(EXITED(1));
    assert_int_equal(ag.sup.state, SUP_ABORTING);
    assert_int_equal(fx.rdzv_aborts, 1);
    assert_string_equal(fx.abort_why, "2 attempt(s) in a row ended without passing step 5");
    assert_int_equal(fx.rdzv_joins, 0);
    assert_int_equal(fx.summaries, 0);
    agent__event(&ag, EV_ROUND_END, NULL); /* the round this node ended: nothing more */
    assert_int_equal(ag.sup.state, SUP_ABORTING);
    agent__event(&ag, EV_ABORT_DONE, NULL);
    assert_failed_without_restart();
    assert_int_equal(ag.sup.no_progress_stop, 1);
}

/* Multi-node: a failure is reported to the rendezvous, which decides about restarts. */
static void test_multi_node_failure_reported(void **state) {
    (void)state;
    agent_worker_t *w = setup(SUP_RUNNING, 1, 1, SIGNALED(SIGSEGV));
    w->rank = 5;
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_int_equal(fx.rdzv_reports, 1);
    assert_string_equal(fx.rdzv_what, "rank 5 (node7) killed by SIGSEGV");
    workers[1].state = WORKER_EXITED;
    workers[1].status = SIGNALED(SIGTERM);
    ag.grp.running = 0;
    agent__event(&ag, EV_WORKER_FAIL, &workers[1]);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    assert_int_equal(fx.restart_timer_started, 0);
    /* The next round: the failure list starts empty. */
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
    assert_int_equal(ag.grp.nfailures, 0);
    assert_int_equal(fx.group_starts, 1);

    w = setup(SUP_RUNNING, 1, 1, EXITED(7));
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_string_equal(fx.rdzv_what, "rank 0 (node7) exited with code 7");
}

/* The round ends with nothing running: straight to the next JOIN. */
static void test_round_end_group_down(void **state) {
    (void)state;
    setup(SUP_RUNNING, 1, 0, 0);
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.sup.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    assert_int_equal(fx.nsigs, 0);
}

/* The rendezvous refuses us: exit 1, with the summary when a worker failed. */
static void test_rdzv_failure_paths(void **state) {
    (void)state;
    setup(SUP_JOINING, 1, 0, 0);
    ag.grp.failures[ag.grp.nfailures++].rank = 3;
    agent__event(&ag, EV_RDZV_ERROR, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.failed, 1);
    assert_int_equal(ag.sup.result.signal, 0);
    assert_int_equal(fx.summaries, 1);

    /* With workers running: stopped first, then the same end once they are down. */
    setup(SUP_RUNNING, 1, 2, 0);
    agent__event(&ag, EV_RDZV_ERROR, NULL);
    assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
    assert_int_equal(ag.sup.stop_signal, SIGTERM);
    ag.grp.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.failed, 1);
    assert_int_equal(fx.summaries, 0);

    /* A first group that cannot start leaves nothing to wait for. */
    setup(SUP_JOINING, 1, 0, 0);
    group_start_rc = -EMFILE;
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.failed, 1);
    assert_int_equal(ag.sup.fatal, 1);
}

/* One node: the node's check comes before the first group and before every restart; a failed
 * check starts nothing and is reported as the node's unfitness; a pass starts the group. */
static void test_check_before_every_start(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    job.max_restarts = 1;
    check_held = 1;
    snprintf(ag.check.reason, sizeof ag.check.reason, "--health_check: exit status 3");
    assert_int_equal(ag.cfg.ops->begin(&ag), 0);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 1);
    agent__event(&ag, EV_HEALTH_FAILED, NULL);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.unfit_reports, 1);
    assert_string_equal(fx.unfit_reason, "--health_check: exit status 3");
    assert_int_equal(fx.group_starts, 0);
    assert_int_equal(fx.loop_shutdowns, 0);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
    assert_int_equal(fx.group_starts, 1);
    /* A failure: after the restart delay, the check again, and the group only once it passes. */
    fail_group(EXITED(1));
    fire_restart_timer();
    assert_int_equal(fx.checks, 2);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.group_starts, 1);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.group_starts, 2);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
    assert_int_equal(ag.as.attempt, 1);
}

/* join_timeout spent with the check still failing: the node is unfit, nothing started or
 * joined, no summary (no worker ran). */
static void test_check_spent_exits_unfit(void **state) {
    (void)state;
    for (int multi = 0; multi <= 1; multi++) {
        setup(SUP_RUNNING, multi, 0, 0);
        check_held = 1;
        assert_int_equal(ag.cfg.ops->begin(&ag), 0);
        check_spent = 1;
        agent__event(&ag, EV_HEALTH_FAILED, NULL);
        assert_int_equal(ag.sup.state, SUP_DONE);
        assert_int_equal(ag.sup.result.unfit, 1);
        assert_int_equal(ag.sup.result.failed, 0);
        assert_int_equal(ag.sup.error, 0);
        assert_int_equal(fx.unfit_reports, 1);
        assert_int_equal(fx.store_unfit, multi); /* the store records it on several nodes */
        assert_int_equal(fx.loop_shutdowns, 1);
        assert_int_equal(fx.group_starts + fx.rdzv_joins + fx.summaries, 0);
    }
}

/* Several nodes: the first JOIN, the re-join after a round and the one after a broken exit
 * barrier each wait for the node's check; what the store says meanwhile starts nothing. */
static void test_check_before_every_join(void **state) {
    (void)state;
    setup(SUP_RUNNING, 1, 0, 0);
    check_held = 1;
    assert_int_equal(ag.cfg.ops->begin(&ag), 0);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    agent__event(&ag, EV_STORE_LOST, NULL);
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.rdzv_joins, 0);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(ag.sup.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
    ag.grp.running = 0;
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 2);
    assert_int_equal(fx.rdzv_joins, 1);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.rdzv_joins, 2);
    agent__event(&ag, EV_JOINED, NULL);
    ag.grp.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_BARRIER);
    agent__event(&ag, EV_BARRIER_BROKEN, NULL);
    assert_int_equal(ag.sup.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 3);
    assert_int_equal(fx.rdzv_joins, 2);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.rdzv_joins, 3);
}

int main(void) {
    ddp_log_init("agent", DDP_LOG_ERROR);
    ddp_log_set_level(DDP_LOG_ERROR - 1); /* the actions' log lines are not under test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hang_capture_then_restart),
        cmocka_unit_test(test_hang_without_capture_multi_node),
        cmocka_unit_test(test_no_progress_stops),
        cmocka_unit_test(test_no_progress_stops_every_node),
        cmocka_unit_test(test_multi_node_failure_reported),
        cmocka_unit_test(test_round_end_group_down),
        cmocka_unit_test(test_rdzv_failure_paths),
        cmocka_unit_test(test_check_before_every_start),
        cmocka_unit_test(test_check_spent_exits_unfit),
        cmocka_unit_test(test_check_before_every_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
