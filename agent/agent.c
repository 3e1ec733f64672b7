/* SPDX-License-Identifier: Apache-2.0
 * agent_run: sets up the node (subreaper, orphan guard, the stores of store.c, log directory,
 * signal handling), runs the supervision loop and tears everything down. Worker exits arrive as
 * SIGCHLD on the loop (uv_signal), and this file holds the only waitpid of ddprun. */
#include "agent_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_signal.h"
#include "ddp_time.h"
#include "rdzv_server.h"

/* SIGCHLD: reap everything that has exited: workers, the guard, adopted orphans. */
static void on_sigchld(uv_signal_t *h, int sig) {
    (void)sig;
    agent_t *a = h->data;
    int any_worker = 0;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            break;
        agent_worker_t *w = agent__worker_by_pid(a, pid);
        if (w != NULL) {
            agent__worker_exited(a, w, status);
            any_worker = 1;
        } else if (agent__guard_reaped(a, pid)) {
            continue; /* it exits once its pipe closes (agent__guard_stop) */
        } else if (agent__hang_helper_reaped(a, pid)) {
            DDP_DEBUG("stack capture helper pid %d done", (int)pid);
        } else if (agent__node_check_reaped(a, pid, status)) {
            DDP_DEBUG("health check pid %d done", (int)pid);
        } else {
            DDP_DEBUG("reaped adopted orphan pid %d", (int)pid);
        }
    }
    if (any_worker && a->grp.running == 0 && a->sup.state != SUP_DONE)
        agent__event(a, EV_GROUP_DOWN, NULL);
}

void agent__signal_take(agent_t *a, int sig) {
    if (!agent_signal_stops_job(sig)) {
        /* SIGUSR1/SIGUSR2 and the like are messages for the workers (e.g. Slurm's --signal
         * warning before the time limit): forward them and carry on. */
        DDP_INFO("forwarding %s to the workers", ddp_signal_name(sig));
        agent__group_signal(a, sig);
        return;
    }
    agent__stop_take(a, sig);
}

static void on_signal(uv_signal_t *h, int sig) {
    agent__signal_take(h->data, sig);
}

void agent__on_kill_timer(uv_timer_t *t) {
    agent__event(t->data, EV_KILL_TIMER, NULL);
}

void agent__kill_adopted(agent_t *a) {
    /* The job's cgroup holds every descendant of the workers, also those that left the process
     * groups and whose parent still lives (so they were not re-parented to us). */
    agent__cgroup_kill(a);
    /* Children of the agent that are neither workers nor the guard are orphans reparented to
     * us as subreaper (a worker's child that outlived it). */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)getpid());
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char cpath[384];
        snprintf(cpath, sizeof cpath, "%s/%s/children", path, de->d_name);
        FILE *f = fopen(cpath, "re");
        if (f == NULL)
            continue;
        int pid;
        while (fscanf(f, "%d", &pid) == 1) {
            if (pid == a->guard.pid || agent__worker_by_pid(a, pid) != NULL ||
                agent__hang_is_helper(a, pid) || pid == agent__node_check_pid(a))
                continue;
            DDP_DEBUG("killing orphan pid %d left by a worker", pid);
            kill(pid, SIGKILL);
        }
        fclose(f);
    }
    closedir(d);
}

static void close_walk_cb(uv_handle_t *h, void *arg) {
    (void)arg;
    /* Worker output streams close themselves when their worker is reaped. */
    if (!uv_is_closing(h) && h->type != UV_NAMED_PIPE)
        uv_close(h, NULL);
}

static void shutdown_rest(void *arg) {
    agent_t *a = arg;
    agent__stores_close(a);
    agent__metrics_stop(a);
    uv_walk(a->cfg.loop, close_walk_cb, NULL);
}

/* A leader of the etcd election resigns first (bounded): its store stays open meanwhile,
 * refusing the rendezvous (its check says it no longer leads), and the rest closes after. */
void agent__shutdown_loop(agent_t *a) {
    if (agent__rdzv_stop(a, shutdown_rest, a) == 0)
        shutdown_rest(a);
}

void agent__file_safe(const char *text, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = text; *p && n < cap - 1; p++)
        out[n++] = (isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.') ? *p : '_';
    out[n] = '\0';
}

static int uses_log_files(const agent_job_t *job) {
    return job->redirects.dflt || job->redirects.n || job->tee.dflt || job->tee.n;
}

/* --log_dir: the directory must exist or be creatable, and writable. Returns 0 or DDP_EUSAGE
 * (logged): the flag's value is what is wrong. */
static int log_dir_setup(agent_t *a, const char *dir) {
    if (strlen(dir) >= sizeof a->cfg.run_dir - 64) {
        DDP_ERROR("--log_dir: path too long: %.64s...", dir);
        return DDP_EUSAGE;
    }
    snprintf(a->cfg.run_dir, sizeof a->cfg.run_dir, "%s", dir);
    if (mkdir(a->cfg.run_dir, 0755) < 0 && errno != EEXIST) {
        DDP_ERROR("--log_dir: unable to create %s: %s", a->cfg.run_dir, strerror(errno));
        return DDP_EUSAGE;
    }
    if (access(a->cfg.run_dir, W_OK | X_OK) < 0) {
        DDP_ERROR("--log_dir: %s is not writable: %s", a->cfg.run_dir, strerror(errno));
        return DDP_EUSAGE;
    }
    return 0;
}

/* The run directory holds attempt_N/<local_rank>/{stdout.log,stderr.log,error.json}: log_dir, or
 * a private one. Returns 0 or DDP_EUSAGE (logged; TMPDIR or --log_dir is unusable). */
static int run_dir_setup(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    a->cfg.log_layout = job->log_dir != NULL || uses_log_files(job);
    if (job->log_dir != NULL)
        return log_dir_setup(a, job->log_dir);
    /* Without log files the directory holds only error files: tmpfs (/dev/shm) makes its
     * creation and removal nearly free, where a disk file system costs a measurable share of a
     * short job's start. TMPDIR, when set, wins. */
    const char *tmp = getenv("TMPDIR");
    if ((tmp == NULL || *tmp == '\0') && !uses_log_files(job) && access("/dev/shm", W_OK) == 0)
        tmp = "/dev/shm";
    char id[64];
    const char *parent = tmp && *tmp ? tmp : "/tmp";
    agent__file_safe(job->run_id, id, sizeof id);
    snprintf(a->cfg.run_dir, sizeof a->cfg.run_dir, "%s/ddprun-%s-XXXXXX", parent, id);
    agent__private_dirs_sweep(parent);
    if (mkdtemp(a->cfg.run_dir) == NULL) {
        DDP_ERROR("unable to create a run directory %s: %s", a->cfg.run_dir, strerror(errno));
        return DDP_EUSAGE;
    }
    /* Removed at exit when it holds only error files: marked, so that a later agent removes
     * it if this one dies with its orphan guard. One that keeps worker logs stays unmarked. */
    a->cfg.run_dir_lock = uses_log_files(job) ? -1 : agent__private_dir_hold(a->cfg.run_dir);
    a->cfg.run_dir_is_temp = 1;
    if (uses_log_files(job))
        DDP_WARN("no --log_dir given: worker logs go to %s", a->cfg.run_dir);
    return 0;
}

/* Signal handling on the loop: SIGCHLD (reaping) and the job's --signals_to_handle. Returns 0 or
 * a negative libuv code (logged). A signal that cannot be handled is only warned about. */
static int signals_start(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    a->cfg.sigchld.data = a;
    int rc = uv_signal_init(a->cfg.loop, &a->cfg.sigchld);
    if (rc == 0)
        rc = uv_signal_start(&a->cfg.sigchld, on_sigchld, SIGCHLD);
    if (rc < 0) {
        DDP_ERROR("unable to watch SIGCHLD: %s", uv_strerror(rc));
        return rc;
    }
    for (int i = 0; i < job->n_signals && i < AGENT_MAX_SIGNALS; i++) {
        uv_signal_t *h = &a->cfg.sigs[a->cfg.nsigs];
        h->data = a;
        if ((rc = uv_signal_init(a->cfg.loop, h)) < 0)
            return rc;
        a->cfg.nsigs++; /* initialised: closed with the loop even when it does not start */
        if ((rc = uv_signal_start(h, on_signal, job->signals[i])) < 0)
            DDP_WARN("--signals_to_handle: unable to handle %s: %s",
                     ddp_signal_name(job->signals[i]), uv_strerror(rc));
    }
    return 0;
}

/* Everything before the first worker starts. Returns 0 or a negative code (logged). */
static int agent_setup(agent_t *a, ddp_err_t *err) {
    const agent_job_t *job = a->cfg.job;
    int rc;
    /* The one place that asks which kind of job this is (agent_node_ops_t). */
    a->cfg.ops = agent__rdzv_wanted(job) ? &agent__rdzv_ops : &agent__local_ops;
    a->cfg.nproc = job->nproc;
    agent__assignment_init(a);
    gethostname(a->cfg.hostname, sizeof a->cfg.hostname - 1);
    /* Orphans of our workers are re-parented to us, so we can reap and kill them. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        DDP_WARN("unable to become a subreaper: %s", strerror(errno));
    signal(SIGPIPE, SIG_IGN);

    if ((rc = agent__group_init(a)) < 0)
        return rc;
    if ((rc = run_dir_setup(a)) < 0)
        return rc;
    agent__scratch_start(a);
    agent__cgroup_start(a); /* without one the job runs all the same (said at -v) */
    /* Before any libuv signal handler and any socket exists, so the guard inherits neither; after
     * the run directory and the cgroup, which it removes if the agent dies. */
    if ((rc = agent__guard_start(a)) < 0)
        DDP_WARN("unable to start the orphan guard: %s", strerror(-rc));
    /* Multi-node: the store, the ranks and the master come from the rendezvous. */
    rc = agent__rdzv_wanted(job) ? agent__rdzv_start(a) : agent__local_store_start(a, err);
    if (rc < 0 || (rc = signals_start(a)) < 0)
        return rc;
    if (job->ssh_session) {
        if ((rc = agent__session_start(a)) < 0)
            return rc;
        /* The launching ddprun waits for this line (the first host's tells it where the store
         * is). stdout is the ssh session's; no worker has written to it yet. */
        int v6 = strchr(a->stores.addr, ':') != NULL;
        if (dprintf(1, "%s %s%s%s:%d\n", AGENT_SSH_READY, v6 ? "[" : "", a->stores.addr,
                    v6 ? "]" : "", (int)a->stores.port) < 0)
            DDP_WARN("unable to report to the launching ddprun: %s", strerror(errno));
    }
    if ((rc = agent__sup_init(a)) < 0)
        return rc;
    if (job->metrics_host != NULL && (rc = agent__metrics_start(a)) < 0)
        return rc;
    if ((rc = agent__hang_init(a)) < 0 || (rc = agent__node_check_init(a)) < 0 ||
        (rc = agent__straggler_init(a)) < 0)
        return rc;
    return agent__gpu_wait_init(a);
}

/* Setup failed, or the first group could not start (error): reap what started, then close the
 * loop (uv_run returns once the handles are closed). */
static void abandon(agent_t *a, int error) {
    while (a->grp.running > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0)
            break;
        agent_worker_t *w = agent__worker_by_pid(a, pid);
        if (w != NULL)
            agent__worker_abandoned(a, w);
    }
    agent__sup_abandon(a, error);
    agent__shutdown_loop(a);
}

/* Sets the job going: the first JOIN, or the first group. Returns 0 or a negative code. */
static int agent_begin(agent_t *a) {
    return a->cfg.ops->begin(a);
}

/* The agent's log lines go through the console (console.c), which never blocks the loop. */
static void log_to_console(void *ctx, const char *line, size_t len) {
    agent__console_write(ctx, 2, line, len, 0);
}

/* What agent_run leaves behind: nothing of the job's processes (its cgroup killed and removed),
 * no private run directory, no guard; then the memory. */
static void agent_teardown(agent_t *a) {
    agent__cgroup_stop(a);
    agent__scratch_stop(a);
    /* A private run directory holds only error files, whose messages the summary has printed:
     * it goes away however the job ended, since it may be on RAM-backed /dev/shm. */
    if (a->cfg.run_dir_is_temp && !a->cfg.log_layout && !a->hang.stacks_kept)
        ddp_dir_remove(a->cfg.run_dir);
    else if (a->hang.stacks_kept)
        DDP_WARN("keeping %s: it holds the stacks of hung workers", a->cfg.run_dir);
    if (a->cfg.run_dir_is_temp && a->cfg.run_dir_lock >= 0)
        close(a->cfg.run_dir_lock);
    a->cfg.run_dir_lock = -1;
    agent__evlog_lost_say(a);
    agent__log_lost_say(a);
    agent__gpu_wait_free(a);
    agent__straggler_fini(a);
    agent__guard_stop(a);
    agent__rdzv_free(a);
    agent__group_free(a);
    ddp_log_set_writer(NULL, NULL);
    agent__console_stop(a); /* last: what was said above still goes out */
}

int agent_run(const agent_job_t *job, agent_result_t *res) {
    /* Every part starts empty, its descriptors -1 ("none"). */
    agent_t agent = {.cfg.job = job, .guard.fd = -1, .cgroup = {.procs_fd = -1, .dir_fd = -1}};
    memset(res, 0, sizeof *res);
    agent_t *a = &agent;
    /* The store may raise the soft open-file limit for its connections (rdzv_server_start);
     * workers get the limit ddprun was started with, as they would without it. */
    a->cfg.nofile_saved = getrlimit(RLIMIT_NOFILE, &a->cfg.nofile) == 0;
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) {
        DDP_ERROR("unable to create the event loop: %s", uv_strerror(rc));
        return rc;
    }
    a->cfg.loop = &loop;
    agent__goodput_begin(a);
    ddp_err_t err;
    ddp_err_clear(&err);
    agent__console_start(a, agent__streams_resume);
    ddp_log_set_writer(log_to_console, a);
    if ((rc = agent_setup(a, &err)) < 0 || (rc = agent_begin(a)) < 0)
        abandon(a, rc);
    if ((rc = uv_run(a->cfg.loop, UV_RUN_DEFAULT)) != 0)
        DDP_DEBUG("event loop stopped with %d handle(s) active", rc);
    if (uv_loop_close(a->cfg.loop) != 0)
        DDP_DEBUG("event loop closed with handles still open");
    agent_teardown(a);
    *res = a->sup.result;
    return a->sup.error;
}
