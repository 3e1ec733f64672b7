/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the supervision table's paths on one node (agent/supervise.c): max_restarts
 * accounting and the restart delays, the GPU memory wait before a restart, the shutdown timer, a
 * termination signal in every state, failures of the agent's own steps, and success. The
 * stand-ins are in supervise_fixture.h. */
#include "supervise_fixture.h"

static void test_max_restarts_spent(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 2;
    for (int attempt = 1; attempt <= 2; attempt++) {
        fail_group(EXITED(3));
        /* Only the root cause counts: the worker the agent stopped is not a failure. */
        assert_int_equal(ag.grp.nfailures, 1);
        assert_int_equal(failures[0].rank, 0);
        assert_int_equal(ag.sup.state, SUP_STOPPING);
        assert_int_equal(ag.as.attempt, attempt);
        assert_int_equal(ag.as.round, attempt);
        assert_int_equal(fx.env_builds, attempt); /* each round applied in one place */
        assert_int_equal(fx.restart_timer_started, attempt);
        assert_int_equal(fx.summaries, 0);
        fire_restart_timer();
        assert_int_equal(ag.sup.state, SUP_RUNNING);
        assert_int_equal(fx.group_starts, attempt);
        ag.grp.nfailures = 0; /* group.c starts each attempt with an empty failure list */
    }
    fail_group(EXITED(3));
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.sup.result.failed, 1);
    assert_int_equal(ag.sup.result.signal, 0);
    assert_int_equal(ag.sup.error, 0);
    assert_int_equal(fx.restart_timer_started, 2);
    assert_int_equal(fx.loop_shutdowns, 1);
}

static void test_no_restarts(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 0;
    fail_group(EXITED(1));
    assert_failed_without_restart();
    assert_int_equal(fx.kill_timer_started, 1);
    assert_int_equal(fx.kill_timer_stopped, 1);
}

/* Restarts wait AGENT_RESTART_FLOOR_MS, doubling per restart up to AGENT_RESTART_CAP_MS. */
static void test_restart_delays(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 20;
    uint64_t want = AGENT_RESTART_FLOOR_MS;
    for (int attempt = 1; attempt <= 14; attempt++) {
        fail_group(EXITED(1));
        assert_int_equal(ag.as.attempt, attempt);
        assert_int_equal(fx.restart_delay_ms, want);
        fire_restart_timer();
        ag.grp.nfailures = 0;
        want = want * 2 > AGENT_RESTART_CAP_MS ? AGENT_RESTART_CAP_MS : want * 2;
    }
    assert_int_equal(fx.restart_delay_ms, AGENT_RESTART_CAP_MS);
}

/* A worker killed by SIGTERM that the agent did not send: the job-wide signal may follow. */
static void test_external_term_waits(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    fail_group(SIGNALED(SIGTERM));
    assert_int_equal(ag.grp.nfailures, 1);
    assert_int_equal(fx.restart_delay_ms, AGENT_EXTERNAL_TERM_GRACE_MS);
    /* The signal arrives during the delay: no restart, the job ends by it. */
    ag.sup.stop_signal = SIGTERM;
    agent__event(&ag, EV_SIGNAL, NULL);
    assert_int_equal(fx.restart_timer_stopped, 1);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.signal, SIGTERM);
    assert_int_equal(fx.group_starts, 0);
}

/* A program that cannot be executed fails the same way again: no restart, whatever is left. */
static void test_exec_failure_not_retried(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    workers[0].exec_errno = ENOENT;
    job.max_restarts = 5;
    fail_group(EXITED(127));
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(fx.restart_timer_started, 0);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.sup.result.exec_errno, ENOENT);
    assert_int_equal(ag.sup.result.failed, 0);
}

/* Workers the agent stopped (SIGTERM, SIGKILL, the stop signal, or their shell's 143/137) are
 * not failures of their own; any other end is. */
static void test_note_failure_filters(void **state) {
    (void)state;
    static const struct {
        int status, recorded;
    } cases[] = {
        {SIGNALED(SIGTERM), 0}, {SIGNALED(SIGKILL), 0}, {SIGNALED(SIGINT), 1},  {EXITED(143), 0},
        {EXITED(137), 0},       {EXITED(1), 1},         {SIGNALED(SIGSEGV), 1}, {EXITED(130), 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int st = SUP_STOPPING; st <= SUP_SHUTDOWN; st++) {
            agent_worker_t *w = setup((agent_sup_state_t)st, 0, 1, cases[i].status);
            agent__event(&ag, EV_WORKER_FAIL, w);
            if (ag.grp.nfailures != cases[i].recorded)
                print_error("case %zu in %s\n", i, state_names[st]);
            assert_int_equal(ag.grp.nfailures, cases[i].recorded);
            assert_int_equal(ag.sup.state, st);
            assert_int_equal(fx.nsigs, 0);
        }
    }
    /* The signal that started a shutdown is the agent's too (SIGINT forwarded on Ctrl-C). */
    agent_worker_t *w = setup(SUP_SHUTDOWN, 0, 1, SIGNALED(SIGINT));
    ag.sup.stop_signal = SIGINT;
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_int_equal(ag.grp.nfailures, 0);
}

/* The shutdown timer: armed with --shutdown_timeout, SIGKILL when it runs out, stopped once the
 * group is down. */
static void test_shutdown_timer(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.shutdown_timeout_ms = 1234;
    ag.sup.stop_signal = SIGINT;
    agent__event(&ag, EV_SIGNAL, NULL);
    assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
    assert_int_equal(fx.nsigs, 1);
    assert_int_equal(fx.sigs[0], SIGINT);
    assert_int_equal(fx.kill_timer_started, 1);
    assert_int_equal(fx.kill_timer_ms, 1234);
    agent__on_kill_timer(&ag.sup.kill_timer);
    assert_int_equal(fx.nsigs, 2);
    assert_int_equal(fx.sigs[1], SIGKILL);
    assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
    ag.grp.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(fx.kill_timer_stopped, 1);
    assert_int_equal(ag.sup.result.signal, SIGINT);
    assert_int_equal(ag.sup.result.failed, 0);
    assert_int_equal(fx.summaries, 0);
}

/* Without the timer a worker ignoring SIGTERM would hold the job: SIGKILL at once instead. */
static void test_kill_timer_unavailable(void **state) {
    (void)state;
    agent_worker_t *w = setup(SUP_RUNNING, 0, 1, EXITED(1));
    timer_start_rc = UV_ENOMEM;
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_int_equal(ag.sup.state, SUP_STOPPING);
    assert_int_equal(fx.nsigs, 2);
    assert_int_equal(fx.sigs[0], SIGTERM);
    assert_int_equal(fx.sigs[1], SIGKILL);
}

/* A restart that cannot be scheduled or started ends the run with the agent's error. */
static void test_restart_failures(void **state) {
    (void)state;
    setup(SUP_STOPPING, 0, 0, EXITED(1));
    ag.grp.failures[ag.grp.nfailures++].rank = 0;
    timer_start_rc = UV_ENOMEM;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.error, UV_ENOMEM);

    setup(SUP_STOPPING, 0, 0, EXITED(1));
    ag.grp.failures[ag.grp.nfailures++].rank = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    group_start_rc = -EAGAIN;
    fire_restart_timer();
    assert_int_equal(fx.group_starts, 1);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.error, -EAGAIN);
    assert_int_equal(fx.sigs[fx.nsigs - 1], SIGKILL);
}

/* A termination signal in every state: forwarded while workers run, the end of the job when none
 * does, SIGKILL when it is the second one, nothing once the loop winds down. */
static void test_signal_in_every_state(void **state) {
    (void)state;
    for (int st = 0; st < SUP_NSTATES; st++) {
        for (int running = 0; running <= 1; running++) {
            setup((agent_sup_state_t)st,
                  st == SUP_JOINING || st == SUP_BARRIER || st == SUP_ABORTING, running, 0);
            ag.sup.stop_signal = SIGHUP;
            agent__event(&ag, EV_SIGNAL, NULL);
            switch (st) {
            case SUP_RUNNING:
            case SUP_STOPPING:
            case SUP_JOINING:
            case SUP_BARRIER:
            case SUP_ABORTING:
                assert_int_equal(fx.restart_timer_stopped, 1);
                if (running) {
                    assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
                    assert_int_equal(fx.nsigs, 1);
                    assert_int_equal(fx.sigs[0], SIGHUP);
                    assert_int_equal(fx.kill_timer_started, 1);
                } else {
                    assert_int_equal(ag.sup.state, SUP_DONE);
                    assert_int_equal(ag.sup.result.signal, SIGHUP);
                    assert_int_equal(fx.nsigs, 0);
                    assert_int_equal(fx.loop_shutdowns, 1);
                }
                break;
            case SUP_SHUTDOWN:
                assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
                assert_int_equal(fx.nsigs, 1);
                assert_int_equal(fx.sigs[0], SIGKILL);
                break;
            case SUP_CAPTURING:
                /* The capture helpers go first; then the shutdown as anywhere else. */
                assert_int_equal(fx.capture_kills, 1);
                assert_int_equal(ag.sup.state, running ? SUP_SHUTDOWN : SUP_DONE);
                break;
            case SUP_CHECKING:
                /* The check's process group and its back-off go; no start, no JOIN. */
                assert_int_equal(fx.check_cancels, 1);
                assert_int_equal(ag.sup.state, running ? SUP_SHUTDOWN : SUP_DONE);
                assert_int_equal(ag.sup.result.signal, running ? 0 : SIGHUP);
                assert_int_equal(fx.group_starts + fx.rdzv_joins, 0);
                break;
            default:
                assert_int_equal(ag.sup.state, SUP_DONE);
                assert_int_equal(fx.nsigs, 0);
                assert_int_equal(fx.loop_shutdowns, 0);
                break;
            }
        }
    }
}

/* Success on one node ends the run; on several it waits at the exit barrier first. */
static void test_success_paths(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.failed, 0);
    assert_int_equal(ag.sup.result.signal, 0);
    assert_int_equal(ag.sup.error, 0);

    setup(SUP_RUNNING, 1, 0, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_BARRIER);
    assert_int_equal(fx.barriers, 1);
    agent__event(&ag, EV_BARRIER_DONE, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.result.failed, 0);
}

/* A worker that somehow still runs when its attempt ends is killed with its process group. */
static void test_sweep_kills_running_groups(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    workers[1].state = WORKER_RUNNING;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(fx.pg_kills, 1);
    assert_int_equal(fx.adopted_kills, 1);
}

/* A first group that cannot start after some of its workers did: they are killed, and the run
 * ends with the agent's error once they are down (their pipes close as they are reaped). */
static void test_start_failure_waits_for_started(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    group_start_rc = -EMFILE;
    group_start_partial = 1;
    assert_int_equal(ag.cfg.ops->begin(&ag), 0);
    assert_int_equal(ag.sup.state, SUP_SHUTDOWN);
    assert_int_equal(fx.sigs[fx.nsigs - 1], SIGKILL);
    assert_int_equal(fx.loop_shutdowns, 0);
    ag.grp.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(ag.sup.error, -EMFILE);
    assert_int_equal(fx.loop_shutdowns, 1);
}

/* A GPU memory wait defers the restart: the restart timer starts nothing by itself then. */
static void test_gpu_wait_defers_restart(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    fail_group(EXITED(1));
    gpu_wait = 1;
    fire_restart_timer();
    assert_int_equal(fx.group_starts, 0);
    agent__event(&ag, EV_GPU_RELEASED, NULL); /* gpu_wait.c: the memory is free */
    assert_int_equal(fx.group_starts, 1);
    assert_int_equal(ag.sup.state, SUP_RUNNING);
}

int main(void) {
    ddp_log_init("agent", DDP_LOG_ERROR);
    ddp_log_set_level(DDP_LOG_ERROR - 1); /* the actions' log lines are not under test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_restarts_spent),
        cmocka_unit_test(test_no_restarts),
        cmocka_unit_test(test_restart_delays),
        cmocka_unit_test(test_external_term_waits),
        cmocka_unit_test(test_exec_failure_not_retried),
        cmocka_unit_test(test_note_failure_filters),
        cmocka_unit_test(test_shutdown_timer),
        cmocka_unit_test(test_kill_timer_unavailable),
        cmocka_unit_test(test_restart_failures),
        cmocka_unit_test(test_signal_in_every_state),
        cmocka_unit_test(test_success_paths),
        cmocka_unit_test(test_sweep_kills_running_groups),
        cmocka_unit_test(test_start_failure_waits_for_started),
        cmocka_unit_test(test_gpu_wait_defers_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
