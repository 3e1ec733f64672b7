/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the supervision table (agent/supervise.c): every state x event cell is fed to
 * agent__event and its side effects compared with what its action must do (restart, fail, stop,
 * ignore), then the paths through the table: max_restarts accounting and the restart delays, the
 * shutdown timer, a termination signal in every state, failures of the agent's own steps, and a
 * hang (capture, then stop and restart), --max_no_progress_restarts, the GPU memory wait, and
 * the node's health check before each start and JOIN (its back-off and its end at join_timeout).
 *
 * supervise.c is linked with worker.c, whose failure records it keeps: the functions they call in
 * agent.c, group.c, rdzv.c, guard.c, node_check.c and summary.c are defined here as recorders
 * (those only a worker's start or exit calls fail the test if called), and uv_timer_start,
 * uv_timer_stop and kill are replaced through the linker (-Wl,--wrap), so no process is signalled
 * and no loop runs. */
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
    a->state = SUP_CHECKING;
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
    if (group_start_rc < 0) {
        a->running = group_start_partial;
        return group_start_rc;
    }
    a->running = group_start_running;
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
    if (t == &ag.kill_timer) {
        fx.kill_timer_started++;
        fx.kill_timer_ms = timeout;
    } else if (t == &ag.restart_timer) {
        fx.restart_timer_started++;
        fx.restart_delay_ms = timeout;
        fx.restart_cb = cb;
    } else {
        fail_msg("uv_timer_start on an unknown timer");
    }
    return 0;
}

int __wrap_uv_timer_stop(uv_timer_t *t) {
    if (t == &ag.kill_timer)
        fx.kill_timer_stopped++;
    else if (t == &ag.restart_timer)
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
static agent_worker_t *setup(agent_sup_state_t st, int multi, int running, int status) {
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
    ag.job = &job;
    ag.nproc = 2;
    ag.state = st;
    ag.running = running;
    ag.workers = workers;
    ag.failures = failures;
    ag.kill_timer.data = &ag;
    ag.restart_timer.data = &ag;
    ag.rdzv = multi ? (struct agent_rdzv *)(void *)&rdzv_dummy : NULL;
    ag.ops = multi ? &agent__rdzv_ops : &agent__local_ops;
    snprintf(ag.hostname, sizeof ag.hostname, "node7");
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
} action_t;

static const char *const state_names[SUP_NSTATES] = {"RUNNING",   "STOPPING", "SHUTDOWN",
                                                     "JOINING",   "BARRIER",  "DONE",
                                                     "CAPTURING", "ABORTING", "CHECKING"};
static const char *const event_names[EV_NEVENTS] = {
    "WORKER_FAIL",    "GROUP_DOWN",   "SIGNAL",        "KILL_TIMER",  "JOINED",       "ROUND_END",
    "RDZV_ERROR",     "BARRIER_DONE", "WORKER_HUNG",   "STACKS_DONE", "ABORT_DONE",   "STORE_LOST",
    "BARRIER_BROKEN", "HEALTH_OK",    "HEALTH_FAILED", "RUN_DONE",    "GPU_RELEASED",
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
                       [EV_RUN_DONE] = A_SPARE_RELEASED},
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
                ag.stop_signal = SIGTERM;
            agent__event(&ag, (agent_event_t)e,
                         e == EV_WORKER_FAIL || e == EV_WORKER_HUNG ? w : NULL);
            outcome_t want = outcome_of(expected[s][e], (agent_sup_state_t)s, multi);
            outcome_t got = {
                .state = ag.state,
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
                .nfailures = ag.nfailures,
                .fatal = ag.fatal,
                .result_signal = ag.result.signal,
                .captures = fx.captures,
                .capture_kills = fx.capture_kills,
                .hang_reports = fx.hang_reports,
                .gpu_cancels = fx.gpu_cancels,
                .checks = fx.checks,
                .check_cancels = fx.check_cancels,
                .unfit_reports = fx.unfit_reports,
                .unfit = ag.result.unfit,
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

/* ---- paths through the table ---- */

/* Feeds a failure of worker 0 (status) with the other worker then exiting by the agent's SIGTERM,
 * then the group's end, as agent.c does. */
static void fail_group(int status) {
    workers[0].state = WORKER_EXITED;
    workers[0].status = status;
    ag.running--;
    agent__event(&ag, EV_WORKER_FAIL, &workers[0]);
    workers[1].state = WORKER_EXITED;
    workers[1].status = SIGNALED(SIGTERM);
    ag.running--;
    agent__event(&ag, EV_WORKER_FAIL, &workers[1]);
    assert_int_equal(ag.running, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
}

/* The job ended failed, with one summary and no restart scheduled. */
static void assert_failed_without_restart(void) {
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(fx.restart_timer_started, 0);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.result.failed, 1);
}

/* The restart timer fires (its callback is supervise.c's own). */
static void fire_restart_timer(void) {
    assert_non_null(fx.restart_cb);
    uv_timer_cb cb = fx.restart_cb;
    fx.restart_cb = NULL;
    for (int i = 0; i < 2; i++)
        workers[i].state = WORKER_RUNNING;
    cb(&ag.restart_timer);
}

static void test_max_restarts_spent(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.max_restarts = 2;
    for (int attempt = 1; attempt <= 2; attempt++) {
        fail_group(EXITED(3));
        /* Only the root cause counts: the worker the agent stopped is not a failure. */
        assert_int_equal(ag.nfailures, 1);
        assert_int_equal(failures[0].rank, 0);
        assert_int_equal(ag.state, SUP_STOPPING);
        assert_int_equal(ag.attempt, attempt);
        assert_int_equal(ag.round, attempt);
        assert_int_equal(fx.env_builds, attempt); /* each round applied in one place */
        assert_int_equal(fx.restart_timer_started, attempt);
        assert_int_equal(fx.summaries, 0);
        fire_restart_timer();
        assert_int_equal(ag.state, SUP_RUNNING);
        assert_int_equal(fx.group_starts, attempt);
        ag.nfailures = 0; /* group.c starts each attempt with an empty failure list */
    }
    fail_group(EXITED(3));
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.result.failed, 1);
    assert_int_equal(ag.result.signal, 0);
    assert_int_equal(ag.error, 0);
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
        assert_int_equal(ag.attempt, attempt);
        assert_int_equal(fx.restart_delay_ms, want);
        fire_restart_timer();
        ag.nfailures = 0;
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
    assert_int_equal(ag.nfailures, 1);
    assert_int_equal(fx.restart_delay_ms, AGENT_EXTERNAL_TERM_GRACE_MS);
    /* The signal arrives during the delay: no restart, the job ends by it. */
    ag.stop_signal = SIGTERM;
    agent__event(&ag, EV_SIGNAL, NULL);
    assert_int_equal(fx.restart_timer_stopped, 1);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.signal, SIGTERM);
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
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(fx.restart_timer_started, 0);
    assert_int_equal(fx.summaries, 1);
    assert_int_equal(ag.result.exec_errno, ENOENT);
    assert_int_equal(ag.result.failed, 0);
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
            if (ag.nfailures != cases[i].recorded)
                print_error("case %zu in %s\n", i, state_names[st]);
            assert_int_equal(ag.nfailures, cases[i].recorded);
            assert_int_equal(ag.state, st);
            assert_int_equal(fx.nsigs, 0);
        }
    }
    /* The signal that started a shutdown is the agent's too (SIGINT forwarded on Ctrl-C). */
    agent_worker_t *w = setup(SUP_SHUTDOWN, 0, 1, SIGNALED(SIGINT));
    ag.stop_signal = SIGINT;
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_int_equal(ag.nfailures, 0);
}

/* The shutdown timer: armed with --shutdown_timeout, SIGKILL when it runs out, stopped once the
 * group is down. */
static void test_shutdown_timer(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 2, 0);
    workers[0].state = WORKER_RUNNING;
    job.shutdown_timeout_ms = 1234;
    ag.stop_signal = SIGINT;
    agent__event(&ag, EV_SIGNAL, NULL);
    assert_int_equal(ag.state, SUP_SHUTDOWN);
    assert_int_equal(fx.nsigs, 1);
    assert_int_equal(fx.sigs[0], SIGINT);
    assert_int_equal(fx.kill_timer_started, 1);
    assert_int_equal(fx.kill_timer_ms, 1234);
    agent__on_kill_timer(&ag.kill_timer);
    assert_int_equal(fx.nsigs, 2);
    assert_int_equal(fx.sigs[1], SIGKILL);
    assert_int_equal(ag.state, SUP_SHUTDOWN);
    ag.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(fx.kill_timer_stopped, 1);
    assert_int_equal(ag.result.signal, SIGINT);
    assert_int_equal(ag.result.failed, 0);
    assert_int_equal(fx.summaries, 0);
}

/* Without the timer a worker ignoring SIGTERM would hold the job: SIGKILL at once instead. */
static void test_kill_timer_unavailable(void **state) {
    (void)state;
    agent_worker_t *w = setup(SUP_RUNNING, 0, 1, EXITED(1));
    timer_start_rc = UV_ENOMEM;
    agent__event(&ag, EV_WORKER_FAIL, w);
    assert_int_equal(ag.state, SUP_STOPPING);
    assert_int_equal(fx.nsigs, 2);
    assert_int_equal(fx.sigs[0], SIGTERM);
    assert_int_equal(fx.sigs[1], SIGKILL);
}

/* A restart that cannot be scheduled or started ends the run with the agent's error. */
static void test_restart_failures(void **state) {
    (void)state;
    setup(SUP_STOPPING, 0, 0, EXITED(1));
    ag.failures[ag.nfailures++].rank = 0;
    timer_start_rc = UV_ENOMEM;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.error, UV_ENOMEM);

    setup(SUP_STOPPING, 0, 0, EXITED(1));
    ag.failures[ag.nfailures++].rank = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    group_start_rc = -EAGAIN;
    fire_restart_timer();
    assert_int_equal(fx.group_starts, 1);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.error, -EAGAIN);
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
            ag.stop_signal = SIGHUP;
            agent__event(&ag, EV_SIGNAL, NULL);
            switch (st) {
            case SUP_RUNNING:
            case SUP_STOPPING:
            case SUP_JOINING:
            case SUP_BARRIER:
            case SUP_ABORTING:
                assert_int_equal(fx.restart_timer_stopped, 1);
                if (running) {
                    assert_int_equal(ag.state, SUP_SHUTDOWN);
                    assert_int_equal(fx.nsigs, 1);
                    assert_int_equal(fx.sigs[0], SIGHUP);
                    assert_int_equal(fx.kill_timer_started, 1);
                } else {
                    assert_int_equal(ag.state, SUP_DONE);
                    assert_int_equal(ag.result.signal, SIGHUP);
                    assert_int_equal(fx.nsigs, 0);
                    assert_int_equal(fx.loop_shutdowns, 1);
                }
                break;
            case SUP_SHUTDOWN:
                assert_int_equal(ag.state, SUP_SHUTDOWN);
                assert_int_equal(fx.nsigs, 1);
                assert_int_equal(fx.sigs[0], SIGKILL);
                break;
            case SUP_CAPTURING:
                /* The capture helpers go first; then the shutdown as anywhere else. */
                assert_int_equal(fx.capture_kills, 1);
                assert_int_equal(ag.state, running ? SUP_SHUTDOWN : SUP_DONE);
                break;
            case SUP_CHECKING:
                /* The check's process group and its back-off go; no start, no JOIN. */
                assert_int_equal(fx.check_cancels, 1);
                assert_int_equal(ag.state, running ? SUP_SHUTDOWN : SUP_DONE);
                assert_int_equal(ag.result.signal, running ? 0 : SIGHUP);
                assert_int_equal(fx.group_starts + fx.rdzv_joins, 0);
                break;
            default:
                assert_int_equal(ag.state, SUP_DONE);
                assert_int_equal(fx.nsigs, 0);
                assert_int_equal(fx.loop_shutdowns, 0);
                break;
            }
        }
    }
}

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
    assert_int_equal(ag.state, SUP_CAPTURING);
    assert_int_equal(fx.captures, 1);
    assert_int_equal(fx.nsigs, 0); /* nothing is signalled while the stacks are taken */
    assert_int_equal(ag.nfailures, 1);
    assert_int_equal(failures[0].hung, 1);
    assert_int_equal(failures[0].rank, 1);
    assert_int_equal(failures[0].step, 1234);
    agent__event(&ag, EV_STACKS_DONE, NULL);
    assert_int_equal(fx.hang_reports, 1);
    assert_string_equal(failures[0].stacks_file, "/x/stacks.txt");
    assert_int_equal(ag.state, SUP_STOPPING);
    assert_int_equal(fx.sigs[0], SIGTERM);
    /* Both die by the agent's SIGTERM: the hung worker's death is not a failure of its own. */
    fail_group(SIGNALED(SIGTERM));
    assert_int_equal(ag.nfailures, 1);
    assert_int_equal(fx.restart_timer_started, 1);
    fire_restart_timer();
    assert_int_equal(fx.group_starts, 1);
    assert_int_equal(ag.state, SUP_RUNNING);
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
    assert_int_equal(ag.state, SUP_STOPPING);
    assert_int_equal(fx.rdzv_reports, 1);
    assert_string_equal(fx.rdzv_what, "rank 0 (node7) hung: no heartbeat for 1.5 s");
    /* A round that ended during the capture is not reported again. */
    setup(SUP_RUNNING, 1, 2, 0);
    workers[0].state = WORKER_RUNNING;
    agent__event(&ag, EV_WORKER_HUNG, &workers[0]);
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.state, SUP_CAPTURING);
    agent__event(&ag, EV_STACKS_DONE, NULL);
    assert_int_equal(fx.rdzv_reports, 0);
    assert_int_equal(ag.state, SUP_STOPPING);
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
    assert_int_equal(ag.no_progress_stop, 1);
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
    assert_int_equal(ag.state, SUP_ABORTING);
    assert_int_equal(fx.rdzv_aborts, 1);
    assert_string_equal(fx.abort_why, "2 attempt(s) in a row ended without passing step 5");
    assert_int_equal(fx.rdzv_joins, 0);
    assert_int_equal(fx.summaries, 0);
    agent__event(&ag, EV_ROUND_END, NULL); /* the round this node ended: nothing more */
    assert_int_equal(ag.state, SUP_ABORTING);
    agent__event(&ag, EV_ABORT_DONE, NULL);
    assert_failed_without_restart();
    assert_int_equal(ag.no_progress_stop, 1);
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
    assert_int_equal(ag.state, SUP_RUNNING);
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
    ag.running = 0;
    agent__event(&ag, EV_WORKER_FAIL, &workers[1]);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    assert_int_equal(fx.restart_timer_started, 0);
    /* The next round: the failure list starts empty. */
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.state, SUP_RUNNING);
    assert_int_equal(ag.nfailures, 0);
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
    assert_int_equal(ag.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    assert_int_equal(fx.nsigs, 0);
}

/* The rendezvous refuses us: exit 1, with the summary when a worker failed. */
static void test_rdzv_failure_paths(void **state) {
    (void)state;
    setup(SUP_JOINING, 1, 0, 0);
    ag.failures[ag.nfailures++].rank = 3;
    agent__event(&ag, EV_RDZV_ERROR, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.failed, 1);
    assert_int_equal(ag.result.signal, 0);
    assert_int_equal(fx.summaries, 1);

    /* With workers running: stopped first, then the same end once they are down. */
    setup(SUP_RUNNING, 1, 2, 0);
    agent__event(&ag, EV_RDZV_ERROR, NULL);
    assert_int_equal(ag.state, SUP_SHUTDOWN);
    assert_int_equal(ag.stop_signal, SIGTERM);
    ag.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.failed, 1);
    assert_int_equal(fx.summaries, 0);

    /* A first group that cannot start leaves nothing to wait for. */
    setup(SUP_JOINING, 1, 0, 0);
    group_start_rc = -EMFILE;
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.failed, 1);
    assert_int_equal(ag.fatal, 1);
}

/* Success on one node ends the run; on several it waits at the exit barrier first. */
static void test_success_paths(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.failed, 0);
    assert_int_equal(ag.result.signal, 0);
    assert_int_equal(ag.error, 0);

    setup(SUP_RUNNING, 1, 0, 0);
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_BARRIER);
    assert_int_equal(fx.barriers, 1);
    agent__event(&ag, EV_BARRIER_DONE, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.result.failed, 0);
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

/* One node: the node's check comes before the first group and before every restart; a failed
 * check starts nothing and is reported as the node's unfitness; a pass starts the group. */
static void test_check_before_every_start(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    job.max_restarts = 1;
    check_held = 1;
    snprintf(ag.check_reason, sizeof ag.check_reason, "--health_check: exit status 3");
    assert_int_equal(ag.ops->begin(&ag), 0);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 1);
    agent__event(&ag, EV_HEALTH_FAILED, NULL);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.unfit_reports, 1);
    assert_string_equal(fx.unfit_reason, "--health_check: exit status 3");
    assert_int_equal(fx.group_starts, 0);
    assert_int_equal(fx.loop_shutdowns, 0);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(ag.state, SUP_RUNNING);
    assert_int_equal(fx.group_starts, 1);
    /* A failure: after the restart delay, the check again, and the group only once it passes. */
    fail_group(EXITED(1));
    fire_restart_timer();
    assert_int_equal(fx.checks, 2);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.group_starts, 1);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.group_starts, 2);
    assert_int_equal(ag.state, SUP_RUNNING);
    assert_int_equal(ag.attempt, 1);
}

/* join_timeout spent with the check still failing: the node is unfit, nothing started or
 * joined, no summary (no worker ran). */
static void test_check_spent_exits_unfit(void **state) {
    (void)state;
    for (int multi = 0; multi <= 1; multi++) {
        setup(SUP_RUNNING, multi, 0, 0);
        check_held = 1;
        assert_int_equal(ag.ops->begin(&ag), 0);
        check_spent = 1;
        agent__event(&ag, EV_HEALTH_FAILED, NULL);
        assert_int_equal(ag.state, SUP_DONE);
        assert_int_equal(ag.result.unfit, 1);
        assert_int_equal(ag.result.failed, 0);
        assert_int_equal(ag.error, 0);
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
    assert_int_equal(ag.ops->begin(&ag), 0);
    assert_int_equal(ag.state, SUP_CHECKING);
    agent__event(&ag, EV_STORE_LOST, NULL);
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.rdzv_joins, 0);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(ag.state, SUP_JOINING);
    assert_int_equal(fx.rdzv_joins, 1);
    agent__event(&ag, EV_JOINED, NULL);
    assert_int_equal(ag.state, SUP_RUNNING);
    ag.running = 0;
    agent__event(&ag, EV_ROUND_END, NULL);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 2);
    assert_int_equal(fx.rdzv_joins, 1);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.rdzv_joins, 2);
    agent__event(&ag, EV_JOINED, NULL);
    ag.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_BARRIER);
    agent__event(&ag, EV_BARRIER_BROKEN, NULL);
    assert_int_equal(ag.state, SUP_CHECKING);
    assert_int_equal(fx.checks, 3);
    assert_int_equal(fx.rdzv_joins, 2);
    agent__event(&ag, EV_HEALTH_OK, NULL);
    assert_int_equal(fx.rdzv_joins, 3);
}

/* A first group that cannot start after some of its workers did: they are killed, and the run
 * ends with the agent's error once they are down (their pipes close as they are reaped). */
static void test_start_failure_waits_for_started(void **state) {
    (void)state;
    setup(SUP_RUNNING, 0, 0, 0);
    group_start_rc = -EMFILE;
    group_start_partial = 1;
    assert_int_equal(ag.ops->begin(&ag), 0);
    assert_int_equal(ag.state, SUP_SHUTDOWN);
    assert_int_equal(fx.sigs[fx.nsigs - 1], SIGKILL);
    assert_int_equal(fx.loop_shutdowns, 0);
    ag.running = 0;
    agent__event(&ag, EV_GROUP_DOWN, NULL);
    assert_int_equal(ag.state, SUP_DONE);
    assert_int_equal(ag.error, -EMFILE);
    assert_int_equal(fx.loop_shutdowns, 1);
}

int main(void) {
    ddp_log_init("agent", DDP_LOG_ERROR);
    ddp_log_set_level(DDP_LOG_ERROR - 1); /* the actions' log lines are not under test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cell_one_node),
        cmocka_unit_test(test_every_cell_multi_node),
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
        cmocka_unit_test(test_multi_node_failure_reported),
        cmocka_unit_test(test_round_end_group_down),
        cmocka_unit_test(test_rdzv_failure_paths),
        cmocka_unit_test(test_success_paths),
        cmocka_unit_test(test_sweep_kills_running_groups),
        cmocka_unit_test(test_hang_capture_then_restart),
        cmocka_unit_test(test_hang_without_capture_multi_node),
        cmocka_unit_test(test_no_progress_stops),
        cmocka_unit_test(test_no_progress_stops_every_node),
        cmocka_unit_test(test_gpu_wait_defers_restart),
        cmocka_unit_test(test_check_before_every_start),
        cmocka_unit_test(test_check_spent_exits_unfit),
        cmocka_unit_test(test_check_before_every_join),
        cmocka_unit_test(test_start_failure_waits_for_started),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
