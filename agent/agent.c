/* agent_run: sets up the node (subreaper, orphan guard, embedded store, token, log directory,
 * signal handling), runs the supervision loop and tears everything down. Worker exits arrive as
 * SIGCHLD on the loop (uv_signal), and this file holds the only waitpid of ddprun. */
#include "agent_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_log.h"
#include "ddp_signal.h"
#include "ddp_time.h"
#include "rdzv_client.h"
#include "rdzv_server.h"

static agent_worker_t *worker_by_pid(agent_t *a, pid_t pid) {
    for (int i = 0; i < a->nproc; i++)
        if (a->workers[i].state == WORKER_RUNNING && a->workers[i].pid == pid)
            return &a->workers[i];
    return NULL;
}

/* Records the exit of worker w and feeds the state table. */
static void worker_exited(agent_t *a, agent_worker_t *w, int status) {
    w->state = WORKER_EXITED;
    w->status = status;
    w->exit_wall = time(NULL);
    /* Its process group goes with it, now: what the worker left there is orphaned, and the
     * pgid must never be signalled later, when the number may belong to another process. */
    kill(-w->pid, SIGKILL);
    agent__guard_update(a, w->pid, 0);
    agent__stream_finish(w->out);
    agent__stream_finish(w->err);
    w->out = w->err = NULL;
    a->running--;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) {
        DDP_DEBUG("rank %d (pid %d) exited 0", w->rank, (int)w->pid);
    } else if (WIFSIGNALED(status)) {
        DDP_DEBUG("rank %d (pid %d) killed by %s", w->rank, (int)w->pid,
                  ddp_signal_name(WTERMSIG(status)));
    } else {
        DDP_DEBUG("rank %d (pid %d) exited %d", w->rank, (int)w->pid, WEXITSTATUS(status));
    }
    agent__event(a, ok ? EV_WORKER_OK : EV_WORKER_FAIL, w);
}

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
        agent_worker_t *w = worker_by_pid(a, pid);
        if (w != NULL) {
            worker_exited(a, w, status);
            any_worker = 1;
        } else if (pid == a->guard_pid) {
            a->guard_pid = 0;
        } else {
            DDP_DEBUG("reaped adopted orphan pid %d", (int)pid);
        }
    }
    if (any_worker && a->running == 0 && a->state != SUP_DONE)
        agent__event(a, EV_GROUP_DOWN, NULL);
}

static void on_signal(uv_signal_t *h, int sig) {
    agent_t *a = h->data;
    if (!agent__is_termination_signal(sig)) {
        /* SIGUSR1/SIGUSR2 and the like are messages for the workers (e.g. Slurm's --signal
         * warning before the time limit): forward them and carry on. */
        DDP_INFO("forwarding %s to the workers", ddp_signal_name(sig));
        agent__group_signal(a, sig);
        return;
    }
    if (a->stop_signal == 0)
        a->stop_signal = sig;
    agent__event(a, EV_SIGNAL, NULL);
}

void agent__on_kill_timer(uv_timer_t *t) {
    agent__event(t->data, EV_KILL_TIMER, NULL);
}

void agent__kill_adopted(agent_t *a) {
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
            if (pid == a->guard_pid || worker_by_pid(a, pid) != NULL)
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

void agent__shutdown_loop(agent_t *a) {
    agent__rdzv_stop(a);
    if (a->store != NULL) {
        rdzv_server_close(a->store, NULL, NULL);
        a->store = NULL;
    }
    uv_walk(a->loop, close_walk_cb, NULL);
}

/* Picks a free TCP port on addr for MASTER_PORT (the workers' own store). Returns it, or -errno.
 * Like torchrun, the port is free when chosen; a race with another program is possible but the
 * kernel hands out recently-closed ephemeral ports last. */
int agent__pick_free_port(const char *addr) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
        rc = -errno;
    close(fd);
    return rc < 0 ? rc : ntohs(sin.sin_port);
}

/* rm -rf for the private run directory (only ever a mkdtemp directory of ours). */
static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(sub);
            else
                unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

static int uses_log_files(const launch_spec_t *sp) {
    return sp->redirects.dflt || sp->redirects.n || sp->tee.dflt || sp->tee.n;
}

/* The run directory holds attempt_N/<local_rank>/{stdout.log,stderr.log,error.json}. */
static int run_dir_setup(agent_t *a) {
    const launch_spec_t *sp = a->spec;
    a->log_layout = sp->log_dir != NULL || uses_log_files(sp);
    if (sp->log_dir != NULL) {
        if (strlen(sp->log_dir) >= sizeof a->run_dir - 64) {
            DDP_ERROR("--log_dir: path too long: %.64s...", sp->log_dir);
            return -ENAMETOOLONG;
        }
        snprintf(a->run_dir, sizeof a->run_dir, "%s", sp->log_dir);
        if (mkdir(a->run_dir, 0755) < 0 && errno != EEXIST) {
            DDP_ERROR("--log_dir: unable to create %s: %s", a->run_dir, strerror(errno));
            return -errno;
        }
        if (access(a->run_dir, W_OK | X_OK) < 0) {
            DDP_ERROR("--log_dir: %s is not writable: %s", a->run_dir, strerror(errno));
            return -errno;
        }
        return 0;
    }
    /* Without log files the directory holds only error files: tmpfs (/dev/shm) makes its
     * creation and removal nearly free, where a disk file system costs a measurable share of a
     * short job's start. TMPDIR, when set, wins. */
    const char *tmp = getenv("TMPDIR");
    if ((tmp == NULL || *tmp == '\0') && !uses_log_files(sp) && access("/dev/shm", W_OK) == 0)
        tmp = "/dev/shm";
    /* The run id is the user's text: keep only characters that are safe in a file name. */
    char id[64];
    size_t n = 0;
    for (const char *p = sp->rdzv_id; *p && n < sizeof id - 1; p++)
        id[n++] = (isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.') ? *p : '_';
    id[n] = '\0';
    snprintf(a->run_dir, sizeof a->run_dir, "%s/ddprun-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", id);
    if (mkdtemp(a->run_dir) == NULL) {
        DDP_ERROR("unable to create a run directory %s: %s", a->run_dir, strerror(errno));
        return -errno;
    }
    a->run_dir_is_temp = 1;
    if (uses_log_files(sp))
        DDP_WARN("no --log_dir given: worker logs go to %s", a->run_dir);
    return 0;
}

/* One node: the job store on 127.0.0.1 with a fresh token only our workers receive, and a free
 * MASTER_PORT for PyTorch workers. Returns 0 or an exit code (logged). */
static int local_store_start(agent_t *a, ddp_err_t *err) {
    const launch_spec_t *sp = a->spec;
    int rc;
    ddp_buf_t token = DDP_BUF_INIT, hex = DDP_BUF_INIT;
    if ((rc = rdzv_token_generate(&token, 32, err)) < 0 ||
        (rc = rdzv_token_to_hex(token.data, token.len, &hex)) < 0) {
        DDP_ERROR("unable to generate the job token: %s",
                  err->text[0] ? err->text : ddp_strerror(rc));
        ddp_buf_free(&token);
        return AGENT_EXIT_INTERNAL;
    }
    snprintf(a->token_hex, sizeof a->token_hex, "%s", (char *)hex.data);
    ddp_buf_free(&hex);
    rdzv_server_opts_t so = {
        .host = "127.0.0.1", .port = 0, .token = token.data, .token_len = token.len};
    rc = rdzv_server_start(a->loop, &so, &a->store, err);
    ddp_buf_free(&token); /* the server keeps its own copy */
    if (rc < 0) {
        DDP_ERROR("unable to start the job store: %s", err->text[0] ? err->text : ddp_strerror(rc));
        return AGENT_EXIT_INTERNAL;
    }
    a->store_port = rdzv_server_port(a->store);

    snprintf(a->master_addr, sizeof a->master_addr, "%s", sp->master_addr);
    a->master_port = sp->master_port;
    if (a->master_port < 0 || sp->standalone) {
        a->master_port = agent__pick_free_port(a->master_addr);
        if (a->master_port < 0) {
            DDP_ERROR("unable to pick a free MASTER_PORT on %s: %s", a->master_addr,
                      strerror(-a->master_port));
            return AGENT_EXIT_INTERNAL;
        }
    }

    snprintf(a->store_addr, sizeof a->store_addr, "127.0.0.1");
    /* -EINVAL: --virtual_local_rank with too few visible devices (logged), a usage error. */
    if ((rc = agent__base_env_build(a)) < 0)
        return rc == -EINVAL ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL;
    return 0;
}

/* Everything before the first worker starts. Returns 0 or an exit code (logged). */
static int agent_setup(agent_t *a, ddp_err_t *err) {
    const launch_spec_t *sp = a->spec;
    int rc;
    a->nproc = sp->nproc_per_node;
    a->node_rank = sp->node_rank;
    a->world_size = sp->max_nodes * a->nproc;
    a->group_world_size = sp->max_nodes;
    a->rank_base = a->node_rank * a->nproc;
    gethostname(a->hostname, sizeof a->hostname - 1);
    /* Orphans of our workers are re-parented to us, so we can reap and kill them. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        DDP_WARN("unable to become a subreaper: %s", strerror(errno));
    signal(SIGPIPE, SIG_IGN);

    a->workers = calloc((size_t)a->nproc, sizeof *a->workers);
    a->failures = calloc((size_t)a->nproc, sizeof *a->failures);
    if (a->workers == NULL || a->failures == NULL)
        return -ENOMEM;
    if ((rc = run_dir_setup(a)) < 0)
        return AGENT_EXIT_USAGE;
    /* Before any libuv signal handler and any socket exists, so the guard inherits neither. */
    if ((rc = agent__guard_start(a)) < 0)
        DDP_WARN("unable to start the orphan guard: %s", strerror(-rc));

    if (agent__rdzv_wanted(sp)) {
        /* Multi-node: the store, the ranks and the master come from the rendezvous. */
        if ((rc = agent__rdzv_start(a)) != 0)
            return rc;
    } else if ((rc = local_store_start(a, err)) != 0) {
        return rc;
    }
    a->sigchld.data = a;
    if (uv_signal_init(a->loop, &a->sigchld) < 0 ||
        uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD) < 0)
        return AGENT_EXIT_INTERNAL;
    for (int i = 0; i < sp->n_signals && i < LAUNCH_MAX_SIGNALS; i++) {
        uv_signal_t *h = &a->sigs[a->nsigs];
        h->data = a;
        if (uv_signal_init(a->loop, h) < 0 || uv_signal_start(h, on_signal, sp->signals[i]) < 0) {
            DDP_WARN("--signals_to_handle: unable to handle signal %d", sp->signals[i]);
            continue;
        }
        a->nsigs++;
    }
    uv_timer_init(a->loop, &a->kill_timer);
    uv_timer_init(a->loop, &a->restart_timer);
    a->kill_timer.data = a->restart_timer.data = a;
    return 0;
}

int agent_run(const launch_spec_t *spec, const char *path, char *const *worker_argv) {
    agent_t agent;
    memset(&agent, 0, sizeof agent);
    agent_t *a = &agent;
    a->spec = spec;
    a->path = path;
    a->argv = worker_argv;
    a->guard_fd = -1;
    a->exit_code = AGENT_EXIT_INTERNAL;
    uv_loop_t loop;
    if (uv_loop_init(&loop) < 0) {
        DDP_ERROR("unable to create the event loop");
        return AGENT_EXIT_INTERNAL;
    }
    a->loop = &loop;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = agent_setup(a, &err);
    if (rc == 0) {
        a->state = a->rdzv ? SUP_JOINING : SUP_RUNNING;
        if (a->state == SUP_JOINING)
            agent__rdzv_join(a);
        else if (agent__group_start(a) < 0) {
            agent__group_signal(a, SIGKILL);
            a->exit_code = AGENT_EXIT_INTERNAL;
            a->state = SUP_DONE;
        }
    } else {
        a->exit_code = rc > 0 ? rc : AGENT_EXIT_INTERNAL;
        a->state = SUP_DONE;
    }
    if (a->state == SUP_DONE) {
        /* Setup failed: reap what started, then close the loop. */
        while (a->running > 0) {
            int status;
            pid_t pid = waitpid(-1, &status, 0);
            if (pid < 0)
                break;
            agent_worker_t *w = worker_by_pid(a, pid);
            if (w != NULL) {
                w->state = WORKER_EXITED;
                agent__stream_finish(w->out);
                agent__stream_finish(w->err);
                a->running--;
            }
        }
        agent__shutdown_loop(a);
    }
    uv_run(a->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(a->loop) != 0)
        DDP_DEBUG("event loop closed with handles still open");
    agent__guard_stop(a);
    /* A private run directory holding only error files goes away after success; after a
     * failure it stays, since the summary points at the files in it. */
    if (a->run_dir_is_temp && !a->log_layout && a->exit_code == AGENT_EXIT_OK)
        remove_tree(a->run_dir);
    agent__rdzv_free(a);
    ddp_strv_free(&a->base_env);
    free(a->workers);
    free(a->failures);
    return a->exit_code;
}
