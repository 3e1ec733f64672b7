/* SPDX-License-Identifier: Apache-2.0
 * Supervision of the worker group as a state x event -> action table (s6-supervise style).
 *
 * States:
 *   RUNNING   the group is up; workers that exit 0 are counted, the first failure stops the rest
 *   STOPPING  a worker failed (or, multi-node, the round ended): the others got SIGTERM (SIGKILL
 *             after --shutdown_timeout); once the group is down the agent restarts it (one node)
 *             or re-joins the rendezvous (several), or prints the summary when restarts are spent
 *   SHUTDOWN  a termination signal arrived (or the rendezvous failed): it was forwarded, the agent
 *             exits once the group is down
 *   JOINING   multi-node: waiting for the rendezvous round to close (then RUNNING)
 *   BARRIER   multi-node: our workers succeeded; waiting for the other nodes at the exit barrier
 *   DONE      handles are closing; nothing more happens
 *   CAPTURING a worker stopped beating (--heartbeat_timeout): the stacks of every running
 *             worker's process group are being written, before anything is killed; then the
 *             group is stopped and restarted (or the job fails) as after a failure
 *   ABORTING  multi-node: --max_no_progress_restarts ran out; the store is told to stop the run
 *             on every node (the others would wait for this one), then the agent fails
 *   CHECKING  before each start of the group (one node) and each JOIN (several): the node's
 *             health check runs (node_check.c), or its next try waits out a back-off; a pass
 *             starts or joins, a node still failing at join_timeout exits unfit
 * Events: a worker failed, the group is down, a termination signal, the kill timer, and
 * for multi-node jobs: joined a round, the round ended, rendezvous error, exit barrier passed, the
 * daemon's store lost (reconnecting), the exit barrier broken; for hang detection: a worker
 * hung, the stack capture finished, the store took the stop; the health check passed or
 * failed; the GPU memory wait before a restart ended; and, for a spare, the run is full. A cell the
 * table leaves out is ignored.
 */
#include "agent_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_signal.h"
#include "ddp_time.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

typedef void (*sup_action_t)(agent_t *a, agent_worker_t *w);

static void start_kill_timer(agent_t *a) {
    uint64_t ms = (uint64_t)a->cfg.job->shutdown_timeout_ms;
    int rc = uv_timer_start(&a->sup.kill_timer, agent__on_kill_timer, ms, 0);
    if (rc < 0) {
        /* Without the bound a worker that ignores SIGTERM would hold the job forever. */
        DDP_WARN("unable to start the shutdown timer (%s): sending SIGKILL now", uv_strerror(rc));
        agent__group_signal(a, SIGKILL);
    }
}

/* The running group failed or must stop: goodput gets its last beats, then the moment. */
static void goodput_failed(agent_t *a) {
    agent__hang_beats_look(a);
    agent__goodput_failed(a);
}

/* The failure summary; the goodput line is in it, and not said again at the end. */
static void summary_print(agent_t *a) {
    agent__summary_print(a);
    a->sup.summarized = 1;
}

/* RUNNING + a failure: remember it as the root cause and stop the rest of the group. */
static void fail_and_stop(agent_t *a, agent_worker_t *w) {
    goodput_failed(a);
    agent__worker_failure_record(a, w);
    a->sup.state = SUP_STOPPING;
    char what[RDZV_WHAT_MAX + 1];
    if (WIFSIGNALED(w->status))
        snprintf(what, sizeof what, "rank %d (%.64s) killed by %s", w->rank, a->cfg.hostname,
                 ddp_signal_name(WTERMSIG(w->status)));
    else
        snprintf(what, sizeof what, "rank %d (%.64s) exited with code %d", w->rank, a->cfg.hostname,
                 WEXITSTATUS(w->status));
    a->cfg.ops->report_failure(a, what);
    if (a->grp.running > 0) {
        DDP_INFO("rank %d failed; stopping the %d other worker(s)", w->rank, a->grp.running);
        agent__group_signal(a, SIGTERM);
        start_kill_timer(a);
    }
}

/* A worker that the agent itself stopped is not a failure of its own. */
static void note_failure(agent_t *a, agent_worker_t *w) {
    int st = w->status;
    if (WIFSIGNALED(st) &&
        (WTERMSIG(st) == SIGTERM || WTERMSIG(st) == SIGKILL || WTERMSIG(st) == a->sup.stop_signal))
        return;
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 128 + SIGTERM || WEXITSTATUS(st) == 128 + SIGKILL))
        return;
    agent__worker_failure_record(a, w);
}

/* Kills whatever is left of the attempt: process groups (grandchildren) and orphans the agent
 * adopted as subreaper, so that no process of one attempt survives into the next. */
static void sweep_leftovers(agent_t *a) {
    /* Reaped workers took their process groups with them (worker.c, agent__worker_exited); a worker
     * still running here would be a bug, but its group is not left behind either. */
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w->state == WORKER_RUNNING && w->pid > 0) {
            kill(-w->pid, SIGKILL);
            agent__guard_update(a, w->pid, 0);
        }
    }
    agent__kill_adopted(a);
    agent__scratch_clear(a); /* what a killed worker had not unlinked yet */
}

/* Ends the run. a->sup.result already says how the job ended; error < 0 when the agent itself
 * failed (agent_run returns it). */
static void finish(agent_t *a, int error) {
    const char *how = error != 0                 ? "error"
                      : a->sup.result.failed     ? "failed"
                      : a->sup.result.signal     ? "signal"
                      : a->sup.result.exec_errno ? "failed"
                      : a->sup.result.unfit      ? "unfit"
                                                 : "succeeded";
    /* Several nodes: the root cause the store named when it refused the failed run, the same on
     * every node (null when none). */
    const char *store_says = "";
    a->cfg.ops->root_cause(a, &store_says);
    const char *cause = store_says[0] != '\0' ? store_says : NULL;
    /* The goodput record closes first: its last restart_cost event comes before the shutdown,
     * which is each agent's last event and carries the totals. */
    agent__hang_beats_look(a);
    agent__goodput_end(a, a->sup.summarized);
    if (a->sup.result.signal)
        agent__evlog(a, "shutdown", "{s:s, s:s, s:s?, s:o}", "result", how, "signal",
                     ddp_signal_name(a->sup.result.signal), "root_cause", cause, "goodput",
                     agent__goodput_json(a));
    else
        agent__evlog(a, "shutdown", "{s:s, s:n, s:s?, s:o}", "result", how, "signal", "root_cause",
                     cause, "goodput", agent__goodput_json(a));
    a->sup.error = error;
    a->sup.state = SUP_DONE;
    agent__shutdown_loop(a);
}

void agent__check_enter(agent_t *a) {
    a->sup.state = SUP_CHECKING;
    agent__node_check_begin(a);
}

/* The next attempt (after the restart delay and the GPU wait): the node's health check first. */
static void restart_now(agent_t *a) {
    agent__check_enter(a);
}

static void on_restart_timer(uv_timer_t *t) {
    agent_t *a = t->data;
    /* The old group's GPU memory first, or the new workers fail to allocate theirs: the wait
     * ends in EV_GPU_RELEASED. */
    if (agent__gpu_wait_start(a))
        return;
    restart_now(a);
}

/* STOPPING + the GPU memory wait ended: the restart it held goes on. */
static void gpu_released(agent_t *a, agent_worker_t *w) {
    (void)w;
    restart_now(a);
}

/* One node, the node passed its check: the first group, or the next attempt. A group that
 * cannot start ends the run with the agent's error, once the workers that did start are down
 * (their output pipes close as they are reaped). */
static void local_start(agent_t *a) {
    if (a->as.attempt > 0)
        DDP_WARN("worker group failed (rank %d: see above); restarting, attempt %d of %d",
                 a->grp.failures[0].rank, a->as.attempt, a->cfg.job->max_restarts);
    a->sup.state = SUP_RUNNING;
    int rc = agent__group_start(a);
    if (rc == 0)
        return;
    if (a->as.attempt > 0) /* the first start's failure is its one line (agent__group_start's) */
        DDP_ERROR("unable to restart the worker group: %s", ddp_strerror(rc));
    agent__group_signal(a, SIGKILL);
    if (a->grp.running == 0) {
        finish(a, rc);
        return;
    }
    a->sup.error = rc;
    a->sup.stop_signal = SIGKILL;
    a->sup.state = SUP_SHUTDOWN;
}

/* --max_no_progress_restarts ran out (ABORTING: the store took the stop, or could not): fail
 * with the summary. */
static void no_progress_fail(agent_t *a, agent_worker_t *w) {
    (void)w;
    summary_print(a);
    a->sup.result.failed = 1;
    finish(a, 0);
}

/* STOPPING + group down: restart while restarts remain, else print the summary and fail. */
static void restart_or_fail(agent_t *a, agent_worker_t *w) {
    (void)w;
    uv_timer_stop(&a->sup.kill_timer);
    sweep_leftovers(a);
    agent__goodput_down(a);
    if (a->grp.nfailures > 0) {
        const agent_failure_t *f = &a->grp.failures[0];
        int cause = f->hung                  ? AGENT_CAUSE_HUNG
                    : f->exec_errno          ? AGENT_CAUSE_EXEC
                    : WIFSIGNALED(f->status) ? AGENT_CAUSE_SIGNAL
                                             : AGENT_CAUSE_EXIT;
        agent__count(a, AGENT_COUNT_GROUP_FAILED + cause, 1);
        agent__evlog(a, "worker_group_failed", "{s:i, s:i, s:s}", "rank", f->rank, "local_rank",
                     f->local_rank, "cause", agent__cause_names[cause]);
    }
    if (a->grp.nfailures > 0 && a->grp.failures[0].exec_errno != 0) {
        /* The program cannot be executed: restarting would fail the same way. */
        summary_print(a);
        a->sup.result.exec_errno = a->grp.failures[0].exec_errno;
        finish(a, 0);
        return;
    }
    char why[RDZV_WHAT_MAX + 1];
    if (agent__hang_progress_stop(a, why, sizeof why)) {
        /* Another attempt would stop at the same step again. */
        DDP_ERROR("%s: not restarting", why);
        a->sup.no_progress_stop = 1;
        a->cfg.ops->give_up(a, why);
        return;
    }
    a->cfg.ops->restart(a);
}

/* One node: the failed group is down; the next attempt after a back-off while restarts remain,
 * else the summary and exit 1. */
static void local_restart(agent_t *a) {
    if (a->as.attempt >= a->cfg.job->max_restarts) {
        summary_print(a);
        a->sup.result.failed = 1;
        finish(a, 0);
        return;
    }
    /* One node's next round: the next attempt, in the same place. */
    agent_assignment_t next;
    agent__assignment_get(a, &next);
    next.round = ++next.attempt;
    if (agent__assignment_apply(a, &next) < 0) {
        finish(a, -ENOMEM);
        return;
    }
    uint64_t delay = AGENT_RESTART_FLOOR_MS;
    for (int i = 1; i < a->as.attempt && delay < AGENT_RESTART_CAP_MS; i++)
        delay *= 2;
    if (delay > AGENT_RESTART_CAP_MS)
        delay = AGENT_RESTART_CAP_MS;
    int st = a->grp.failures[0].status;
    if (WIFSIGNALED(st) && agent_signal_stops_job(WTERMSIG(st)) &&
        delay < AGENT_EXTERNAL_TERM_GRACE_MS)
        delay = AGENT_EXTERNAL_TERM_GRACE_MS;
    /* The restart itself is announced when it happens: a signal may still cancel it. */
    DDP_INFO("worker group failed (rank %d); restart %d of %d in %d ms", a->grp.failures[0].rank,
             a->as.attempt, a->cfg.job->max_restarts, (int)delay);
    int rc = uv_timer_start(&a->sup.restart_timer, on_restart_timer, delay, 0);
    if (rc < 0) {
        DDP_ERROR("unable to schedule the restart: %s", uv_strerror(rc));
        finish(a, rc);
    }
}

/* RUNNING + group down: every worker exited 0. */
static void group_succeeded(agent_t *a, agent_worker_t *w) {
    (void)w;
    sweep_leftovers(a);
    a->cfg.ops->succeeded(a);
}

static void local_succeeded(agent_t *a) {
    DDP_INFO("all %d workers finished successfully", a->cfg.nproc);
    finish(a, 0);
}

/* A termination signal: forward it and wind down (the caller set a->sup.stop_signal). */
static void begin_shutdown(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->sup.state = SUP_SHUTDOWN;
    /* Between two attempts no worker runs to forward the signal to: say that the restart will
     * not happen, or the job would end with 128+N and no word. */
    if (a->grp.running == 0 && agent__gpu_wait_active(a)) {
        char waited[32], limit[32];
        DDP_WARN(
            "received %s while waiting for the stopped workers' GPU memory (%s s of up to "
            "%s s): the job stops, no new attempt",
            ddp_signal_name(a->sup.stop_signal),
            ddp_seconds_text((int64_t)(ddp_now_ms() - a->gpu.wait_start_ms), waited, sizeof waited),
            ddp_seconds_text(a->cfg.job->gpu_memory_reclaim_timeout_ms, limit, sizeof limit));
    } else if (a->grp.running == 0 && uv_is_active((uv_handle_t *)&a->sup.restart_timer)) {
        DDP_WARN("received %s between two attempts: the job stops, no new attempt",
                 ddp_signal_name(a->sup.stop_signal));
    }
    uv_timer_stop(&a->sup.restart_timer);
    agent__gpu_wait_cancel(a);
    if (a->grp.running == 0) {
        sweep_leftovers(a);
        a->sup.result.signal = a->sup.stop_signal;
        finish(a, 0);
        return;
    }
    DDP_WARN("received %s: forwarding it to %d worker(s)", ddp_signal_name(a->sup.stop_signal),
             a->grp.running);
    agent__group_signal(a, a->sup.stop_signal);
    start_kill_timer(a);
}

/* SHUTDOWN + another termination signal: a second Ctrl-C means now. */
static void escalate(agent_t *a, agent_worker_t *w) {
    (void)w;
    DDP_WARN("second signal: killing %d worker(s) now", a->grp.running);
    agent__group_signal(a, SIGKILL);
}

static void kill_all(agent_t *a, agent_worker_t *w) {
    (void)w;
    char secs[32];
    DDP_WARN("%d worker(s) still running after --shutdown_timeout=%ss: sending SIGKILL",
             a->grp.running, ddp_seconds_text(a->cfg.job->shutdown_timeout_ms, secs, sizeof secs));
    agent__group_signal(a, SIGKILL);
}

static void finish_shutdown(agent_t *a, agent_worker_t *w) {
    (void)w;
    uv_timer_stop(&a->sup.kill_timer);
    sweep_leftovers(a);
    if (a->sup.fatal && a->grp.nfailures > 0)
        summary_print(a);
    if (a->sup.fatal)
        a->sup.result.failed = 1;
    else
        a->sup.result.signal = a->sup.stop_signal;
    finish(a, a->sup.error); /* < 0: a group that could not start (local_start) */
}

/* JOINING + the round closed: start this node's workers with the round's ranks. */
static void joined(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->sup.state = SUP_RUNNING;
    if (agent__group_start(a) < 0) { /* it empties the failure list first */
        DDP_ERROR("unable to start the worker group");
        agent__group_signal(a, SIGKILL);
        a->sup.fatal = 1;
        a->sup.stop_signal = SIGKILL;
        a->sup.state = SUP_SHUTDOWN;
        /* When not even the first worker started, no GROUP_DOWN will come to end the shutdown,
         * and the rendezvous connections would keep the loop (and the job) waiting forever. */
        if (a->grp.running == 0)
            finish_shutdown(a, NULL);
    }
}

/* RUNNING + the round ended elsewhere (a failure, a death, a node joining): stop and re-join. */
static void round_ended(agent_t *a, agent_worker_t *w) {
    (void)w;
    agent__evlog(a, "rendezvous_round_ended", "{s:I}", "round", (json_int_t)a->as.round);
    goodput_failed(a);
    a->sup.state = SUP_STOPPING;
    if (a->grp.running == 0) {
        restart_or_fail(a, NULL);
        return;
    }
    DDP_INFO("rendezvous round %lld ended: stopping %d worker(s) to re-join",
             (long long)a->as.round, a->grp.running);
    agent__group_signal(a, SIGTERM);
    start_kill_timer(a);
}

/* RUNNING + the daemon's store was lost: rdzv.c reconnects; the group stops as when the round
 * ends, and the node JOINs again once it is down (a store that forgot the run forms a new round;
 * a lost store is no restart of the job). */
static void store_lost_stop(agent_t *a, agent_worker_t *w) {
    (void)w;
    goodput_failed(a);
    a->sup.state = SUP_STOPPING;
    if (a->grp.running == 0) {
        restart_or_fail(a, NULL);
        return;
    }
    DDP_INFO("stopping %d worker(s) to re-join once the store is back", a->grp.running);
    agent__group_signal(a, SIGTERM);
    start_kill_timer(a);
}

/* JOINING + the daemon's store was lost: the parked JOIN went with the connection; send it
 * again on the new one (it waits there until the connection is made). */
static void rejoin(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->sup.state = SUP_JOINING;
    a->cfg.ops->rejoin(a);
}

/* BARRIER + the round ended, or the store was lost: done only if every node arrived. */
static void barrier_settle(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->cfg.ops->barrier_settle(a);
}

/* BARRIER + not every node passed it: another node's group failed (or a node was lost) after
 * this one's finished. The job is not done: run with the others again, once the node's check
 * passes as before any JOIN. */
static void rejoin_after_barrier(agent_t *a, agent_worker_t *w) {
    (void)w;
    agent__evlog(a, "rendezvous_round_ended", "{s:I}", "round", (json_int_t)a->as.round);
    agent__check_enter(a);
}

/* The rendezvous refused us (max_restarts spent, join timeout, ...) or the store is gone: the
 * message was logged; stop what runs and exit 1. */
static void rdzv_failed(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->sup.fatal = 1;
    if (a->sup.stop_signal == 0)
        a->sup.stop_signal = SIGTERM;
    if (a->grp.running == 0) {
        finish_shutdown(a, NULL);
        return;
    }
    a->sup.state = SUP_SHUTDOWN;
    agent__group_signal(a, SIGTERM);
    start_kill_timer(a);
}

/* JOINING + the run is at max_nodes: this node waits as a spare; its next JOIN (its keep-alive)
 * follows the node's health check, as every JOIN does. */
static void spare_check(agent_t *a, agent_worker_t *w) {
    (void)w;
    agent__check_enter(a);
}

/* JOINING + the run finished without this node (a spare): nothing ran here, nothing failed. */
static void spare_released(agent_t *a, agent_worker_t *w) {
    (void)w;
    DDP_INFO("the job finished without this node: nothing to do");
    finish(a, 0);
}

static void barrier_done(agent_t *a, agent_worker_t *w) {
    (void)w;
    DDP_INFO("all %d workers finished successfully", a->cfg.nproc);
    finish(a, 0);
}

/* CAPTURING + the capture finished (or ran out of time): say where the hung worker is, then
 * stop the group as after a failure; its own death by SIGTERM is not a second failure. */
static void capture_done(agent_t *a, agent_worker_t *w) {
    (void)w;
    agent__worker_failure_stacks(a);
    const agent_failure_t *f = &a->grp.failures[0];
    agent__hang_report(a, f);
    a->sup.state = SUP_STOPPING;
    if (!a->sup.round_ended) {
        /* Every node stops its group: the round ends as after a worker's failure. */
        char text[96], what[RDZV_WHAT_MAX + 1];
        agent__hang_text(f, text, sizeof text);
        snprintf(what, sizeof what, "rank %d (%.64s) %s", f->rank, a->cfg.hostname, text);
        a->cfg.ops->report_failure(a, what);
    }
    if (a->grp.running == 0) {
        restart_or_fail(a, NULL);
        return;
    }
    DDP_INFO("rank %d hung; stopping the %d worker(s)", f->rank, a->grp.running);
    agent__group_signal(a, SIGTERM);
    start_kill_timer(a);
}

/* RUNNING + a worker hung: it is the root cause; capture every worker's stacks before any of
 * them is signalled (a SIGTERM handler would change what they are doing). */
static void capture_begin(agent_t *a, agent_worker_t *w) {
    goodput_failed(a);
    agent__worker_hang_record(a, w);
    a->sup.state = SUP_CAPTURING;
    a->sup.round_ended = 0;
    if (agent__hang_capture_start(a) == 0)
        capture_done(a, w);
}

/* CAPTURING + the round ended elsewhere: our stop follows the capture, without a report. */
static void capture_round_ended(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->sup.round_ended = 1;
}

/* CAPTURING + a termination signal: the stacks are not worth a delayed shutdown. */
static void capture_abort(agent_t *a, agent_worker_t *w) {
    agent__hang_capture_kill(a);
    begin_shutdown(a, w);
}

static void capture_rdzv_failed(agent_t *a, agent_worker_t *w) {
    agent__hang_capture_kill(a);
    rdzv_failed(a, w);
}

/* CHECKING + the check passed: start the group, or JOIN. */
static void checked(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->cfg.ops->start(a);
}

/* CHECKING + the check failed: said where the job's state is kept, then another try after the
 * back-off, or, with join_timeout spent, exit unfit (ddprun's exit code 4) with nothing run. */
static void check_failed(agent_t *a, agent_worker_t *w) {
    (void)w;
    a->cfg.ops->report_unfit(a, a->check.reason);
    if (agent__node_check_failed(a) == 0)
        return;
    a->sup.result.unfit = 1;
    finish(a, 0);
}

/* CHECKING + a termination signal: the check and its process group go, and the job ends as
 * between two attempts. */
static void check_abort(agent_t *a, agent_worker_t *w) {
    DDP_WARN("received %s during the node's health check: the job stops",
             ddp_signal_name(a->sup.stop_signal));
    agent__node_check_cancel(a);
    begin_shutdown(a, w);
}

static void check_rdzv_failed(agent_t *a, agent_worker_t *w) {
    agent__node_check_cancel(a);
    rdzv_failed(a, w);
}

/* Cells left out do nothing (the event is ignored in that state). */
/* clang-format off */
static const sup_action_t sup_table[SUP_NSTATES][EV_NEVENTS] = {
    [SUP_RUNNING] = {
        [EV_WORKER_FAIL] = fail_and_stop,
        [EV_GROUP_DOWN] = group_succeeded,
        [EV_SIGNAL] = begin_shutdown,
        [EV_ROUND_END] = round_ended,
        [EV_RDZV_ERROR] = rdzv_failed,
        [EV_WORKER_HUNG] = capture_begin,
        [EV_STORE_LOST] = store_lost_stop,
    },
    /* Once the group is down, restart_or_fail JOINs on whichever connection is current. */
    [SUP_STOPPING] = {
        [EV_WORKER_FAIL] = note_failure,
        [EV_GROUP_DOWN] = restart_or_fail,
        [EV_SIGNAL] = begin_shutdown,
        [EV_KILL_TIMER] = kill_all,
        [EV_RDZV_ERROR] = rdzv_failed,
        [EV_GPU_RELEASED] = gpu_released,
    },
    [SUP_SHUTDOWN] = {
        [EV_WORKER_FAIL] = note_failure,
        [EV_GROUP_DOWN] = finish_shutdown,
        [EV_SIGNAL] = escalate,
        [EV_KILL_TIMER] = kill_all,
    },
    [SUP_JOINING] = {
        [EV_SIGNAL] = begin_shutdown,
        [EV_JOINED] = joined,
        [EV_RUN_DONE] = spare_released,
        [EV_SPARE] = spare_check,
        [EV_RDZV_ERROR] = rdzv_failed,
        [EV_STORE_LOST] = rejoin,
    },
    /* A round that ends at the barrier (another node failed or was lost after this one's
     * workers finished) is settled by the barrier's done key: pass, or re-join. */
    [SUP_BARRIER] = {
        [EV_SIGNAL] = begin_shutdown,
        [EV_ROUND_END] = barrier_settle,
        [EV_RDZV_ERROR] = rdzv_failed,
        [EV_BARRIER_DONE] = barrier_done,
        [EV_STORE_LOST] = barrier_settle,
        [EV_BARRIER_BROKEN] = rejoin_after_barrier,
    },
    [SUP_DONE] = {0}, /* handles are closing: nothing happens */
    /* A worker that exits during the capture is recorded; the group being down is handled
     * when the capture ends (capture_done restarts at once then). A lost store ends the round
     * like a round end does. */
    [SUP_CAPTURING] = {
        [EV_WORKER_FAIL] = note_failure,
        [EV_SIGNAL] = capture_abort,
        [EV_ROUND_END] = capture_round_ended,
        [EV_RDZV_ERROR] = capture_rdzv_failed,
        [EV_STACKS_DONE] = capture_done,
        [EV_STORE_LOST] = capture_round_ended,
    },
    /* No worker runs: a signal ends the wait for the store's answer, and so does its loss. */
    [SUP_ABORTING] = {
        [EV_SIGNAL] = begin_shutdown,
        [EV_RDZV_ERROR] = no_progress_fail,
        [EV_ABORT_DONE] = no_progress_fail,
        [EV_STORE_LOST] = no_progress_fail,
    },
    /* No worker runs; the store may come and go meanwhile (rdzv.c sends the JOIN on the
     * connection that is current then). */
    [SUP_CHECKING] = {
        [EV_HEALTH_OK] = checked,
        [EV_HEALTH_FAILED] = check_failed,
        [EV_SIGNAL] = check_abort,
        [EV_RDZV_ERROR] = check_rdzv_failed,
    },
};
/* clang-format on */

void agent__event(agent_t *a, agent_event_t ev, agent_worker_t *w) {
    sup_action_t act = sup_table[a->sup.state][ev];
    if (act != NULL)
        act(a, w);
}

/* ---- what the other parts ask of supervision ---- */

int agent__sup_init(agent_t *a) {
    int rc;
    if ((rc = uv_timer_init(a->cfg.loop, &a->sup.kill_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &a->sup.restart_timer)) < 0)
        return rc;
    a->sup.kill_timer.data = a->sup.restart_timer.data = a;
    return 0;
}

void agent__stop_take(agent_t *a, int sig) {
    if (a->sup.stop_signal == 0)
        a->sup.stop_signal = sig;
    agent__event(a, EV_SIGNAL, NULL);
}

void agent__sup_abandon(agent_t *a, int error) {
    a->sup.error = error;
    a->sup.state = SUP_DONE;
}

void agent__result_unfit(agent_t *a) {
    a->sup.result.unfit = 1;
}

/* ---- one node: the operations of agent_node_ops_t ---- */

static int local_begin(agent_t *a) {
    agent__check_enter(a);
    return 0;
}

static void local_report_failure(agent_t *a, const char *what) {
    (void)a, (void)what; /* nobody else to tell: this node restarts alone */
}

static void local_give_up(agent_t *a, const char *why) {
    (void)why; /* said by the caller */
    no_progress_fail(a, NULL);
}

/* One node: its failures are the root cause, and no store names another. */
static int local_root_cause(const agent_t *a, const char **store_says) {
    (void)a;
    *store_says = "";
    return 1;
}

/* One node has no store to lose and no exit barrier: the events that call these never come. */
static void local_no_store(agent_t *a) {
    (void)a;
}

const agent_node_ops_t agent__local_ops = {
    .begin = local_begin,
    .group_prepare = agent__local_group_prepare,
    .report_failure = local_report_failure,
    .restart = local_restart,
    .give_up = local_give_up,
    .succeeded = local_succeeded,
    .start = local_start,
    .report_unfit = agent__node_check_say,
    .rejoin = local_no_store,
    .barrier_settle = local_no_store,
    .root_cause = local_root_cause,
};
