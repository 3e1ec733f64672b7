/* SPDX-License-Identifier: Apache-2.0
 * Hangs: the heartbeat file of each worker (DDPRUN_HEARTBEAT_FILE), one timer at the earliest
 * heartbeat deadline of the running workers, the stack capture of a hung group (agent/stacks.c)
 * with its budget, and the progress record behind --max_no_progress_restarts. The table in
 * supervise.c decides what follows (the wait for a stopped group's GPU memory is gpu_wait.c's). */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_escape.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "stacks.h"

/* The most of a heartbeat file read for its progress counter: a decimal int64 and a newline. */
#define HANG_STEP_BYTES 32
/* A capture helper that outlives its budget by this much is killed (stacks.h asks for it). */
#define HANG_STACKS_GRACE_MS 1000
/* While a group has not beaten yet, or redoes the steps of the group before it, its files are
 * looked at this often: the first beat ends a restart's start, passing the old step its redo
 * (goodput.c). */
#define HANG_GOODPUT_LOOK_MS 100
/* Lines of the hung worker's stacks quoted in the log when it is found. */
#define HANG_LOG_LINES 12

int agent__hang_init(agent_t *a) {
    int rc;
    if ((rc = uv_timer_init(a->cfg.loop, &a->hang.hb_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &a->hang.stacks_timer)) < 0)
        return rc;
    a->hang.hb_timer.data = a->hang.stacks_timer.data = a;
    a->hang.best_step = -1;
    return 0;
}

int agent__hang_worker_file(agent_t *a, agent_worker_t *w, const char *dir) {
    w->hb_file[0] = '\0';
    w->hb_beaten = 0;
    w->out_beat_ms = 0;
    w->out_fed_ms = 0;
    w->step = -1;
    w->stacks_pid = 0;
    w->stacks_file[0] = '\0';
    if (a->cfg.job->heartbeat_timeout_ms <= 0)
        return 0;
    if (a->cfg.log_layout)
        snprintf(w->hb_file, sizeof w->hb_file, "%s/heartbeat", dir);
    else
        snprintf(w->hb_file, sizeof w->hb_file, "%s/heartbeat.%d.%d", a->cfg.run_dir, a->as.attempt,
                 w->local_rank);
    /* A file left by an earlier run in the same --log_dir is replaced: a fresh file proves it
     * is ours, and no link (planted for it or for a directory above it) sends the worker's
     * beats elsewhere. */
    ddp_err_t err = {0};
    int fd = ddp_file_open(w->hb_file, strlen(a->cfg.run_dir), DDP_FILE_REPLACE, 0600, &err);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = fd < 0 ? fd : -errno;
        if (fd < 0)
            DDP_ERROR("unable to create the heartbeat file %s", err.text);
        else
            DDP_ERROR("unable to create the heartbeat file %s: %s", w->hb_file, strerror(-e));
        if (fd >= 0)
            close(fd);
        w->hb_file[0] = '\0';
        return e;
    }
    close(fd);
    w->hb_mtime = st.st_mtim;
    w->hb_checked_ms = ddp_now_ms();
    w->hb_last_ms = w->hb_checked_ms;
    return 0;
}

/* The progress counter in the heartbeat file: decimal digits, optionally a newline. */
static void step_read(agent_worker_t *w) {
    int fd = open(w->hb_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[HANG_STEP_BYTES + 1];
    ssize_t n = read(fd, buf, HANG_STEP_BYTES);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    if (buf[n - 1] == '\n')
        buf[--n] = '\0';
    int64_t v;
    /* A half-written or foreign content keeps the last good value. */
    if (n > 0 && ddp_parse_i64(buf, 0, INT64_MAX, &v) == 0)
        w->step = (long long)v;
}

/* Looks at w's heartbeat file: a new mtime is a beat. The mtime is wall-clock time; the beat is
 * placed on the monotonic clock between the previous look and now, so a clock step can neither
 * hide a hang nor invent one. */
static void beat_read(agent_t *a, agent_worker_t *w, uint64_t now_ms) {
    struct stat st;
    /* Output lines are beats without a step: goodput gets the newest one it has not had. */
    if (w->out_beat_ms > w->out_fed_ms) {
        w->out_fed_ms = w->out_beat_ms;
        agent__goodput_beat(a, w->out_beat_ms, -1);
    }
    if (w->hb_file[0] == '\0' || stat(w->hb_file, &st) < 0)
        return;
    uint64_t prev = w->hb_checked_ms;
    w->hb_checked_ms = now_ms;
    if (st.st_mtim.tv_sec == w->hb_mtime.tv_sec && st.st_mtim.tv_nsec == w->hb_mtime.tv_nsec)
        return;
    w->hb_mtime = st.st_mtim;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t ago = (int64_t)(rt.tv_sec - st.st_mtim.tv_sec) * 1000 +
                  (rt.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
    uint64_t at = ago <= 0 ? now_ms : now_ms - (uint64_t)ago;
    if (ago > 0 && (uint64_t)ago > now_ms - prev)
        at = prev;
    if (at > w->hb_last_ms || !w->hb_beaten)
        w->hb_last_ms = at;
    w->hb_beaten = 1;
    step_read(w);
    agent__goodput_beat(a, at, w->step);
}

/* The time of w's last beat, file or output line; 0 when it has not beaten yet. */
static uint64_t last_beat(const agent_worker_t *w) {
    uint64_t t = w->hb_beaten ? w->hb_last_ms : 0;
    return w->out_beat_ms > t ? w->out_beat_ms : t;
}

/* Since when w has been silent: its last beat, or the group's start when it has not beaten. */
static uint64_t silent_since(const agent_t *a, const agent_worker_t *w) {
    uint64_t last = last_beat(w);
    return last != 0 ? last : a->hang.group_start_ms;
}

/* When w counts as hung: a timeout after its last beat, or the initial timeout after the start.
 * *check is when to look again: the deadline, or, before the first beat, after one heartbeat
 * timeout at the latest (a worker that beats once and stops must not get the initial timeout). */
static uint64_t deadline_of(const agent_t *a, const agent_worker_t *w, uint64_t now,
                            uint64_t *check) {
    const agent_job_t *job = a->cfg.job;
    uint64_t last = last_beat(w);
    if (last != 0) {
        *check = last + (uint64_t)job->heartbeat_timeout_ms;
        return *check;
    }
    uint64_t d = a->hang.group_start_ms + (uint64_t)job->initial_heartbeat_timeout_ms;
    uint64_t soon = now + (uint64_t)job->heartbeat_timeout_ms;
    *check = soon < d ? soon : d;
    return d;
}

static void on_hb_timer(uv_timer_t *t);

static void hb_arm(agent_t *a, uint64_t delay_ms) {
    int rc = uv_timer_start(&a->hang.hb_timer, on_hb_timer, delay_ms, 0);
    if (rc < 0)
        DDP_WARN("unable to arm the heartbeat timer (%s): hangs go undetected in this attempt",
                 uv_strerror(rc));
}

/* Stopped (T, t: SIGSTOP, a debugger) or in uninterruptible sleep (D: a driver, a file system). */
static int stuck_state(char st) {
    return st == 'T' || st == 't' || st == 'D';
}

/* Ranks waiting in a collective go silent together with the rank they wait for, and the first
 * past its deadline may be a waiter. When hung is not stuck itself but another worker silent for
 * at least half the timeout is, that one is the likelier culprit and is named instead. */
static agent_worker_t *likelier_culprit(agent_t *a, agent_worker_t *hung, uint64_t now) {
    if (stuck_state(agent__stacks_proc_state(hung->pid)))
        return hung;
    uint64_t half = (uint64_t)a->cfg.job->heartbeat_timeout_ms / 2;
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w == hung || w->state != WORKER_RUNNING || w->hb_file[0] == '\0')
            continue;
        if (now - silent_since(a, w) >= half && stuck_state(agent__stacks_proc_state(w->pid)))
            return w;
    }
    return hung;
}

/* At the earliest deadline: the most silent worker past its deadline is hung; else the timer
 * moves to the next deadline. A group that is stopping is not watched any more. */
static void on_hb_timer(uv_timer_t *t) {
    agent_t *a = t->data;
    if (a->sup.state != SUP_RUNNING)
        return;
    uint64_t now = ddp_now_ms(), next = UINT64_MAX, worst = UINT64_MAX;
    agent_worker_t *hung = NULL;
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w->state != WORKER_RUNNING || w->hb_file[0] == '\0')
            continue;
        beat_read(a, w, now);
        uint64_t check, d = deadline_of(a, w, now, &check);
        if (d <= now && d < worst) {
            worst = d;
            hung = w;
        }
        if (check < next)
            next = check;
    }
    if (hung != NULL)
        hung = likelier_culprit(a, hung, now);
    if (agent__goodput_watching(a) && next != UINT64_MAX && now + HANG_GOODPUT_LOOK_MS < next)
        next = now + HANG_GOODPUT_LOOK_MS;
    if (hung != NULL) {
        hung->hung_for_ms = now - silent_since(a, hung);
        /* Said at once: the capture may take --stacks_timeout before anything else is logged. */
        DDP_WARN("rank %d (local %d, pid %d) hung: no heartbeat for %.1f s; taking the stacks of "
                 "the group before it is stopped",
                 hung->rank, hung->local_rank, (int)hung->pid, hung->hung_for_ms / 1000.0);
        if (hung->step >= 0)
            agent__evlog(a, "worker_hung", "{s:i, s:i, s:i, s:I, s:I}", "rank", hung->rank,
                         "local_rank", hung->local_rank, "pid", (int)hung->pid, "silent_ms",
                         (json_int_t)hung->hung_for_ms, "step", (json_int_t)hung->step);
        else
            agent__evlog(a, "worker_hung", "{s:i, s:i, s:i, s:I, s:n}", "rank", hung->rank,
                         "local_rank", hung->local_rank, "pid", (int)hung->pid, "silent_ms",
                         (json_int_t)hung->hung_for_ms, "step");
        agent__event(a, EV_WORKER_HUNG, hung);
        return;
    }
    if (next != UINT64_MAX)
        hb_arm(a, next > now ? next - now : 1);
}

int agent__hang_progress(agent_t *a, int64_t *step, int64_t *beat_age_ms) {
    if (a->cfg.job->heartbeat_timeout_ms <= 0)
        return -ENOENT;
    uint64_t now = ddp_now_ms(), oldest = UINT64_MAX;
    long long best = -1;
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w->state != WORKER_RUNNING || w->hb_file[0] == '\0')
            continue;
        beat_read(a, w, now);
        uint64_t last = silent_since(a, w);
        if (last < oldest)
            oldest = last;
        if (w->step > best)
            best = w->step;
    }
    if (oldest == UINT64_MAX)
        return -ENOENT;
    *step = best;
    *beat_age_ms = now > oldest ? (int64_t)(now - oldest) : 0;
    return 0;
}

int agent__hang_beat_age(agent_t *a, agent_worker_t *w, uint64_t now_ms, uint64_t *age_ms) {
    if (a->cfg.job->heartbeat_timeout_ms <= 0 || w->state != WORKER_RUNNING ||
        w->hb_file[0] == '\0')
        return -ENOENT;
    beat_read(a, w, now_ms);
    uint64_t since = silent_since(a, w);
    *age_ms = now_ms > since ? now_ms - since : 0;
    return 0;
}

void agent__hang_arm(agent_t *a) {
    if (a->cfg.job->heartbeat_timeout_ms <= 0)
        return;
    a->hang.group_start_ms = ddp_now_ms();
    uint64_t first = (uint64_t)a->cfg.job->heartbeat_timeout_ms;
    if ((uint64_t)a->cfg.job->initial_heartbeat_timeout_ms < first)
        first = (uint64_t)a->cfg.job->initial_heartbeat_timeout_ms;
    if (agent__goodput_watching(a) && first > HANG_GOODPUT_LOOK_MS)
        first = HANG_GOODPUT_LOOK_MS;
    hb_arm(a, first);
}

/* Where the stacks of w's group go: next to its logs, or in the run directory. */
static void stacks_path(agent_t *a, agent_worker_t *w) {
    if (a->cfg.log_layout)
        snprintf(w->stacks_file, sizeof w->stacks_file, "%s/attempt_%d/%d/stacks.txt",
                 a->cfg.run_dir, a->as.attempt, w->local_rank);
    else
        snprintf(w->stacks_file, sizeof w->stacks_file, "%s/stacks.%d.%d.txt", a->cfg.run_dir,
                 a->as.attempt, w->local_rank);
}

static void on_stacks_timer(uv_timer_t *t) {
    agent_t *a = t->data;
    if (a->sup.state != SUP_CAPTURING)
        return;
    DDP_WARN("stack capture still running after --stacks_timeout=%gs: stopping it",
             a->cfg.job->stacks_timeout_ms / 1000.0);
    agent__hang_capture_kill(a);
    agent__event(a, EV_STACKS_DONE, NULL);
}

int agent__hang_capture_start(agent_t *a) {
    int n = 0;
    int budget = (int)(a->cfg.job->stacks_timeout_ms > INT32_MAX ? INT32_MAX
                                                                 : a->cfg.job->stacks_timeout_ms);
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w->state != WORKER_RUNNING)
            continue;
        stacks_path(a, w);
        pid_t pid = agent__stacks_start(w->pid, w->stacks_file, strlen(a->cfg.run_dir), budget, 0);
        if (pid < 0) {
            DDP_WARN("unable to capture the stacks of rank %d: %s", w->rank, strerror(-pid));
            w->stacks_file[0] = '\0';
            continue;
        }
        w->stacks_pid = pid;
        n++;
    }
    if (n == 0)
        return 0;
    /* Without --log_dir the run directory is removed at the end: not with stacks in it. */
    if (a->cfg.run_dir_is_temp && !a->cfg.log_layout && !a->hang.stacks_kept) {
        a->hang.stacks_kept = 1;
        agent__private_dir_keep(a->cfg.run_dir_lock); /* no later agent sweeps it away */
    }
    int rc = uv_timer_start(&a->hang.stacks_timer, on_stacks_timer,
                            (uint64_t)budget + HANG_STACKS_GRACE_MS, 0);
    if (rc < 0)
        DDP_WARN("unable to bound the stack capture: %s", uv_strerror(rc));
    return n;
}

void agent__hang_capture_kill(agent_t *a) {
    uv_timer_stop(&a->hang.stacks_timer);
    /* Only helpers not yet reaped: their pids cannot have been reused. */
    for (int i = 0; i < a->cfg.nproc; i++)
        if (a->grp.workers[i].stacks_pid > 0)
            kill(a->grp.workers[i].stacks_pid, SIGKILL);
}

int agent__hang_is_helper(agent_t *a, pid_t pid) {
    for (int i = 0; i < a->cfg.nproc; i++)
        if (a->grp.workers[i].stacks_pid == pid)
            return 1;
    return 0;
}

int agent__hang_helper_reaped(agent_t *a, pid_t pid) {
    if (pid <= 0 || !agent__hang_is_helper(a, pid))
        return 0;
    int left = 0;
    for (int i = 0; i < a->cfg.nproc; i++) {
        if (a->grp.workers[i].stacks_pid == pid)
            a->grp.workers[i].stacks_pid = 0;
        left += a->grp.workers[i].stacks_pid > 0;
    }
    if (left == 0 && a->sup.state == SUP_CAPTURING) {
        uv_timer_stop(&a->hang.stacks_timer);
        agent__event(a, EV_STACKS_DONE, NULL);
    }
    return 1;
}

void agent__hang_report(agent_t *a, const agent_failure_t *f) {
    (void)a;
    char text[96];
    agent__hang_text(f, text, sizeof text);
    DDP_WARN("rank %d (local %d, pid %d) %s; stacks in %s", f->rank, f->local_rank, (int)f->pid,
             text, f->stacks_file[0] ? f->stacks_file : "<none>");
    char head[4096];
    if (f->stacks_file[0] == '\0' ||
        agent__stacks_head(f->stacks_file, HANG_LOG_LINES, head, sizeof head) <= 0)
        return;
    /* The lines name the worker's threads and command line: its text, shown escaped. */
    for (char *line = strtok(head, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char esc[4 * 256 + 16];
        ddp_str_escape(esc, sizeof esc, line, strnlen(line, 256));
        DDP_WARN("  | %s", esc);
    }
}

int agent__hang_progress_stop(agent_t *a, char *why, size_t cap) {
    int limit = a->cfg.job->max_no_progress_restarts;
    if (limit <= 0 || a->cfg.job->heartbeat_timeout_ms <= 0)
        return 0;
    long long best = -1;
    uint64_t now = ddp_now_ms();
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        beat_read(a, w, now); /* the last counter a worker wrote before it stopped */
        if (w->step > best)
            best = w->step;
    }
    if (best > a->hang.best_step) {
        a->hang.best_step = best;
        a->hang.no_progress = 0;
        return 0;
    }
    if (++a->hang.no_progress < limit)
        return 0;
    snprintf(why, cap,
             "%d attempt(s) in a row ended without passing step %lld "
             "(--max_no_progress_restarts=%d)",
             a->hang.no_progress, a->hang.best_step, limit);
    return 1;
}

void agent__hang_beats_look(agent_t *a) {
    if (a->cfg.job->heartbeat_timeout_ms <= 0)
        return;
    uint64_t now = ddp_now_ms();
    for (int i = 0; i < a->cfg.nproc; i++)
        beat_read(a, &a->grp.workers[i], now);
}
