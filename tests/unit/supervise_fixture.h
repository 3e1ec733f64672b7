/* SPDX-License-Identifier: Apache-2.0
 * The fixture of the supervision table's tests (test_agent_supervise*.c), one test program each:
 * supervise.c is linked with worker.c, whose failure records it keeps: the functions they call in
 * agent.c, group.c, rdzv.c, guard.c, node_check.c and summary.c are defined here as recorders
 * (those only a worker's start or exit calls fail the test if called), and uv_timer_start,
 * uv_timer_stop and kill are replaced through the linker (-Wl,--wrap), so no process is signalled
 * and no loop runs. setup() gives each test a fresh agent in a state of its choice; fail_group
 * and fire_restart_timer feed what agent.c and the loop would.
 *
 * Its helpers are static inline so that a test file that uses only some of them builds without
 * warnings; the stand-ins are defined once in each test program that includes it. */
#ifndef SUPERVISE_FIXTURE_H
#define SUPERVISE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "agent_int.h"
#include "ddp_log.h"

/* ---- what supervise.c did, recorded by the stand-ins below ---- */

#define MAX_SIGS 16

typedef struct effects {
    int sigs[MAX_SIGS]; /* agent__group_signal, in order */
    int nsigs;
    int kill_timer_started;
    uint64_t kill_timer_ms;
    int kill_timer_stopped;
    int restart_timer_started;
    uint64_t restart_delay_ms;
    uv_timer_cb restart_cb;
    int restart_timer_stopped;
    int group_starts;
    int summaries;
    int env_builds; /* workers' environments built (one per applied round) */
    int loop_shutdowns;
    int adopted_kills;
    int rdzv_joins;
    int rdzv_reports;
    char rdzv_what[256];
    int rdzv_aborts; /* agent__rdzv_abort */
    char abort_why[256];
    int barriers;
    int settles;       /* agent__rdzv_barrier_settle */
    int pg_kills;      /* kill(-pgid, SIGKILL) of a worker still marked running */
    int captures;      /* agent__hang_capture_start */
    int capture_kills; /* agent__hang_capture_kill */
    int hang_reports;  /* agent__hang_report */
    int gpu_cancels;   /* agent__gpu_wait_cancel */
    int checks;        /* agent__node_check_begin */
    int check_cancels; /* agent__node_check_cancel */
    int unfit_reports; /* agent__node_check_say, through the operations' report_unfit */
    char unfit_reason[256];
    int store_unfit; /* agent__rdzv_report_unfit: the store told (several nodes only) */
} effects_t;

static effects_t fx;
/* What the next agent__group_start and uv_timer_start return. */
static int group_start_rc;
static int group_start_running; /* workers it leaves running on success */
static int timer_start_rc;
/* What the hang stand-ins return: helpers started, the progress verdict, a GPU wait begun. */
static int capture_helpers;
static int progress_stop;
static int gpu_wait;
/* The health check stand-in: passes at once (as with no check to run) unless check_held, and
 * agent__node_check_failed says join_timeout is spent when check_spent. */
static int check_held;
static int check_spent;
/* A group start that fails leaves this many workers running (started before the one that
 * could not). */
static int group_start_partial;

void agent__node_check_begin(agent_t *a) {
    fx.checks++;
    assert_int_equal(a->sup.state, SUP_CHECKING); /* supervise.c entered it (agent__check_enter) */
    if (!check_held)
        agent__event(a, EV_HEALTH_OK, NULL);
}

int agent__node_check_failed(agent_t *a) {
    (void)a;
    return check_spent;
}

void agent__node_check_cancel(agent_t *a) {
    (void)a;
    fx.check_cancels++;
}

void agent__node_check_say(agent_t *a, const char *reason) {
    (void)a;
    fx.unfit_reports++;
    snprintf(fx.unfit_reason, sizeof fx.unfit_reason, "%s", reason);
}

int agent__hang_capture_start(agent_t *a) {
    (void)a;
    fx.captures++;
    return capture_helpers;
}

void agent__hang_capture_kill(agent_t *a) {
    (void)a;
    fx.capture_kills++;
}

void agent__hang_report(agent_t *a, const agent_failure_t *f) {
    (void)a;
    (void)f;
    fx.hang_reports++;
}

void agent__hang_beats_look(agent_t *a) {
    (void)a;
}

int agent__hang_progress_stop(agent_t *a, char *why, size_t cap) {
    (void)a;
    if (progress_stop)
        snprintf(why, cap, "2 attempt(s) in a row ended without passing step 5");
    return progress_stop;
}

int agent__gpu_wait_start(agent_t *a) {
    (void)a;
    return gpu_wait;
}

int agent__gpu_wait_active(agent_t *a) {
    (void)a;
    return 0;
}

void agent__gpu_wait_cancel(agent_t *a) {
    (void)a;
    fx.gpu_cancels++;
}

void agent__group_signal(agent_t *a, int sig) {
    (void)a;
    if (fx.nsigs < MAX_SIGS)
        fx.sigs[fx.nsigs++] = sig;
}

int agent__group_start(agent_t *a) {
    fx.group_starts++;
    a->grp.nfailures = 0; /* group.c empties the failure list first */
    if (group_start_rc < 0) {
        a->grp.running = group_start_partial;
        return group_start_rc;
    }
    a->grp.running = group_start_running;
    return 0;
}

void agent__guard_update(agent_t *a, pid_t pgid, int add) {
    (void)a;
    (void)pgid;
    (void)add;
}

void agent__kill_adopted(agent_t *a) {
    (void)a;
    fx.adopted_kills++;
}

void agent__scratch_clear(agent_t *a) {
    (void)a;
}

void agent__shutdown_loop(agent_t *a) {
    (void)a;
    fx.loop_shutdowns++;
}

void agent__summary_print(agent_t *a) {
    (void)a;
    fx.summaries++;
}

/* group.c's part of one node's operations: emptying the stores before a group. */
void agent__local_group_prepare(agent_t *a) {
    (void)a;
}

/* assignment.c rebuilds the workers' environment with each round; these workers need none. */
int agent__base_env_build(agent_t *a) {
    (void)a;
    fx.env_builds++;
    return 0;
}

/* events.c writes an event on stderr through the console; these tests ask for no events. */
int agent__console_write(agent_t *a, int std, const void *p, size_t n, int can_wait) {
    (void)a, (void)std, (void)p, (void)n, (void)can_wait;
    fail_msg("no event goes to stderr in these tests");
    return 0;
}

void agent__rdzv_join(agent_t *a) {
    (void)a;
    fx.rdzv_joins++;
}

int agent__rdzv_root_cause(const agent_t *a, const char **store_says) {
    (void)a;
    *store_says = "";
    return 1;
}

void agent__rdzv_report_failure(agent_t *a, const char *what) {
    (void)a;
    fx.rdzv_reports++;
    snprintf(fx.rdzv_what, sizeof fx.rdzv_what, "%s", what);
}

void agent__rdzv_timing_send(agent_t *a, const char *text) {
    (void)a, (void)text;
    fail_msg("a timing report was sent");
}

void agent__rdzv_report_unfit(agent_t *a, const char *reason) {
    (void)a;
    (void)reason;
    fx.store_unfit++;
}

void agent__rdzv_abort(agent_t *a, const char *why) {
    (void)a;
    fx.rdzv_aborts++;
    snprintf(fx.abort_why, sizeof fx.abort_why, "%s", why);
}

void agent__rdzv_exit_barrier(agent_t *a) {
    (void)a;
    fx.barriers++;
}

void agent__rdzv_barrier_settle(agent_t *a) {
    (void)a;
    fx.settles++;
}

void agent__on_kill_timer(uv_timer_t *t) {
    agent__event(t->data, EV_KILL_TIMER, NULL);
}

/* What only a worker's start and exit (worker.c) call: never here, where no worker starts. */
agent_stream_t *agent__stream_open(agent_t *a, int fd, int rank, int std, int console_fd, int tag,
                                   int file_fd) {
    (void)a, (void)fd, (void)rank, (void)std, (void)console_fd, (void)tag, (void)file_fd;
    fail_msg("a stream was opened");
    return NULL;
}

void agent__stream_finish(agent_stream_t *s) {
    (void)s;
    fail_msg("a stream was finished");
}

void agent__error_file_bound(const char *path) {
    fail_msg("error file %s bounded", path);
}

int agent__hang_worker_file(agent_t *a, agent_worker_t *w, const char *dir) {
    (void)a, (void)w, (void)dir;
    fail_msg("a heartbeat file was made");
    return -1;
}

int agent__straggler_worker_file(agent_t *a, agent_worker_t *w, const char *dir) {
    (void)a, (void)w, (void)dir;
    fail_msg("a timing file was made");
    return -1;
}

int agent__worker_device(const agent_job_t *j, int local_rank, char *out, size_t cap) {
    (void)j, (void)local_rank, (void)out, (void)cap;
    fail_msg("a device was picked");
    return -1;
}

int agent_std_for(const agent_std_map_t *m, int local_rank) {
    (void)m, (void)local_rank;
    fail_msg("a stream was routed");
    return 0;
}

void agent__cgroup_procs_drop(agent_t *a) {
    (void)a;
    fail_msg("a cgroup was given up");
}

int agent__attempt_dirs_make(agent_t *a, const char *path) {
    (void)a;
    fail_msg("%s was made", path);
    return -1;
}

int __wrap_uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat);
int __wrap_uv_timer_stop(uv_timer_t *t);
int __wrap_kill(pid_t pid, int sig);

/* The agent under test: its timers are told apart by address. */
static agent_t ag;
static agent_job_t job;
static agent_worker_t workers[4];
static agent_failure_t failures[4];
/* A stand-in for the multi-node rendezvous state: supervise.c only tests it for NULL. */
static char rdzv_dummy;

int __wrap_uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat) {
    (void)repeat;
    if (timer_start_rc < 0)
        return timer_start_rc;
    if (t == &ag.sup.kill_timer) {
        fx.kill_timer_started++;
        fx.kill_timer_ms = timeout;
    } else if (t == &ag.sup.restart_timer) {
        fx.restart_timer_started++;
        fx.restart_delay_ms = timeout;
        fx.restart_cb = cb;
    } else {
        fail_msg("uv_timer_start on an unknown timer");
    }
    return 0;
}

int __wrap_uv_timer_stop(uv_timer_t *t) {
    if (t == &ag.sup.kill_timer)
        fx.kill_timer_stopped++;
    else if (t == &ag.sup.restart_timer)
        fx.restart_timer_stopped++;
    else
        fail_msg("uv_timer_stop on an unknown timer");
    return 0;
}

int __wrap_kill(pid_t pid, int sig) {
    assert_true(pid < 0); /* only process groups, and never for real here */
    assert_int_equal(sig, SIGKILL);
    fx.pg_kills++;
    return 0;
}

/* A fresh agent of nproc workers in state st: worker 0 has just exited with status, the others
 * are still running (running of them); multi selects the rendezvous path. */
static inline agent_worker_t *setup(agent_sup_state_t st, int multi, int running, int status) {
    memset(&fx, 0, sizeof fx);
    memset(&ag, 0, sizeof ag);
    memset(&job, 0, sizeof job);
    memset(workers, 0, sizeof workers);
    memset(failures, 0, sizeof failures);
    group_start_rc = 0;
    capture_helpers = 2;
    progress_stop = 0;
    gpu_wait = 0;
    check_held = 0;
    check_spent = 0;
    group_start_partial = 0;
    group_start_running = 2;
    timer_start_rc = 0;
    job.nproc = 2;
    job.max_restarts = 1;
    job.shutdown_timeout_ms = 30000;
    ag.cfg.job = &job;
    ag.cfg.nproc = 2;
    ag.sup.state = st;
    ag.grp.running = running;
    ag.grp.workers = workers;
    ag.grp.failures = failures;
    ag.sup.kill_timer.data = &ag;
    ag.sup.restart_timer.data = &ag;
    ag.rdzv = multi ? (struct agent_rdzv *)(void *)&rdzv_dummy : NULL;
    ag.cfg.ops = multi ? &agent__rdzv_ops : &agent__local_ops;
    snprintf(ag.cfg.hostname, sizeof ag.cfg.hostname, "node7");
    for (int i = 0; i < 2; i++) {
        workers[i].local_rank = workers[i].rank = i;
        workers[i].pid = 100000 + i;
        workers[i].state = WORKER_RUNNING;
    }
    workers[0].state = WORKER_EXITED;
    workers[0].status = status;
    if (running == 0)
        workers[1].state = WORKER_EXITED;
    return &workers[0];
}

/* Wait statuses as waitpid reports them. */
#define EXITED(code) (((code)&0xff) << 8)
#define SIGNALED(sig) (sig)

__attribute__((unused)) static const char *const state_names[SUP_NSTATES] = {
    "RUNNING", "STOPPING",  "SHUTDOWN", "JOINING", "BARRIER",
    "DONE",    "CAPTURING", "ABORTING", "CHECKING"};

/* ---- paths through the table ---- */

/* Feeds a failure of worker 0 (status) with the other worker then exiting by the agent's SIGTERM,
 * then the group's end, as agent.c does. */
static inline void fail_group(int status) {
    workers[0].state = WORKER_EXITED;
    workers[0].status = status;
    ag.grp.running--;
    agent__event(&ag, EV_WORKER_FAIL, &workers[0]);
    workers[1].state = WORKER_EXITED;
    workers[1].status = SIGNALED(SIGTERM);
    ag.grp.running--;
    agent__event(&ag, EV_WORKER_FAIL, &workers[1]);
    assert_int_equal(ag.grp.running, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
}

/* The job ended failed, with one summary and no restart scheduled. */
static inline void assert_failed_without_restart(void) {
    assert_int_equal(ag.sup.state, SUP_DONE);
    assert_int_equal(fx.restart_timer_started, 0);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.sup.result.failed, 1);
}

/* The restart timer fires (its callback is supervise.c's own). */
static inline void fire_restart_timer(void) {
    assert_non_null(fx.restart_cb);
    uv_timer_cb cb = fx.restart_cb;
    fx.restart_cb = NULL;
    for (int i = 0; i < 2; i++)
        workers[i].state = WORKER_RUNNING;
    cb(&ag.sup.restart_timer);
}

#endif
