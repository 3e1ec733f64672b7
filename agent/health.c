/* SPDX-License-Identifier: Apache-2.0
 * The node health check: see health.h. */
#include "health.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_escape.h"
#include "ddp_signal.h"
#include "ddp_time.h"

extern char **environ;

struct agent_health {
    uv_loop_t *loop;
    agent_health_cb cb;
    void *arg;
    pid_t pid;  /* 0 once reaped */
    int status; /* its wait status, once reaped */
    int timeout_ms;
    int timed_out;       /* the timeout killed it */
    int cancelled;       /* agent__health_cancel: no callback */
    int eof;             /* the pipe reached its end */
    int closing;         /* handles are closing: the result is on its way */
    int open_handles;    /* of pipe and timer, not closed yet */
    uint64_t started_ms; /* uv_now() at the start */
    uint64_t exited_ms;  /* uv_now() at the reap */
    uv_pipe_t out;       /* the read end of the check's stdout and stderr */
    uv_timer_t timer;    /* the timeout, then the drain bound after the exit */
    /* The last AGENT_HEALTH_TAIL_BYTES of output, as a ring. */
    char ring[AGENT_HEALTH_TAIL_BYTES];
    size_t ring_len; /* bytes ever written (the ring holds the last min(len, size)) */
};

/* The child: async-signal-safe calls only, then /bin/sh -c cmd. Never returns. */
static void child_exec(pid_t parent, int out_fd, char *const argv[], char *const envp[]) {
    ddp_signals_default(0);
    setpgid(0, 0);
    /* The check does not outlive the agent that waits for it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(128 + SIGKILL);
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0)
        _exit(127);
#ifdef SYS_close_range
    syscall(SYS_close_range, 3u, ~0u, 0u);
#endif
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(argv[0], argv, envp);
    static const char msg[] = "unable to run /bin/sh\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
}

/* environ with extra's entries added, an entry of the same name replaced. The strings are
 * borrowed; the array is the caller's to free. */
static char **env_merge(const char *const *extra) {
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env] != NULL)
        n_env++;
    while (extra != NULL && extra[n_extra] != NULL)
        n_extra++;
    char **envp = calloc(n_env + n_extra + 1, sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < n_env; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name_len = eq != NULL ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
        int replaced = 0;
        for (size_t j = 0; j < n_extra && !replaced; j++)
            replaced = strncmp(extra[j], environ[i], name_len) == 0;
        if (!replaced)
            envp[n++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++)
        envp[n++] = (char *)extra[j];
    return envp;
}

static void ring_put(agent_health_t *h, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h->ring[(h->ring_len + i) % sizeof h->ring] = p[i];
    h->ring_len += n;
}

/* The last AGENT_HEALTH_TAIL_LINES non-empty lines of the ring, escaped, joined by " | ". */
static void tail_text(const agent_health_t *h, char *out, size_t cap) {
    size_t have = h->ring_len < sizeof h->ring ? h->ring_len : sizeof h->ring;
    char flat[AGENT_HEALTH_TAIL_BYTES] = {0};
    for (size_t i = 0; i < have; i++)
        flat[i] = h->ring[(h->ring_len - have + i) % sizeof h->ring];
    /* Walk back over at most AGENT_HEALTH_TAIL_LINES lines. */
    size_t start = have, lines = 0;
    while (start > 0 && lines < AGENT_HEALTH_TAIL_LINES) {
        size_t end = start;
        while (end > 0 && flat[end - 1] == '\n')
            end--;
        if (end == 0)
            break;
        start = end;
        while (start > 0 && flat[start - 1] != '\n')
            start--;
        lines++;
    }
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = start; i < have && used + 1 < cap;) {
        size_t e = i;
        while (e < have && flat[e] != '\n')
            e++;
        if (e > i) {
            if (used > 0 && used + 4 < cap) {
                memcpy(out + used, " | ", 3);
                used += 3;
                out[used] = '\0';
            }
            ddp_str_escape(out + used, cap - used, flat + i, e - i);
            used += strlen(out + used); /* what fitted */
        }
        i = e + 1;
    }
}

static void on_closed(uv_handle_t *handle) {
    agent_health_t *h = handle->data;
    if (--h->open_handles > 0)
        return;
    if (!h->cancelled) {
        agent_health_result_t res;
        memset(&res, 0, sizeof res);
        res.status = h->status;
        res.timed_out = h->timed_out;
        res.elapsed_ms = (int64_t)(h->exited_ms - h->started_ms);
        int st = h->status;
        if (h->timed_out)
            snprintf(res.reason, sizeof res.reason, "timed out after %g s (killed)",
                     h->timeout_ms / 1000.0);
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            res.healthy = 1;
        else if (WIFEXITED(st))
            snprintf(res.reason, sizeof res.reason, "exit status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            snprintf(res.reason, sizeof res.reason, "killed by %s", ddp_signal_name(WTERMSIG(st)));
        else
            snprintf(res.reason, sizeof res.reason, "wait status 0x%x", st);
        tail_text(h, res.tail, sizeof res.tail);
        h->cb(h->arg, &res);
    }
    free(h);
}

/* The check is over (reaped and its output read, or cancelled): close, then report. */
static void finish(agent_health_t *h) {
    if (h->closing)
        return;
    h->closing = 1;
    uv_close((uv_handle_t *)&h->out, on_closed);
    uv_close((uv_handle_t *)&h->timer, on_closed);
}

/* Kills the running check and its process group. */
static void kill_check(agent_health_t *h) {
    if (h->pid > 0) {
        kill(-h->pid, SIGKILL);
        kill(h->pid, SIGKILL); /* in case it was not yet the leader of its group */
    }
}

static void on_timer(uv_timer_t *t) {
    agent_health_t *h = t->data;
    if (h->pid != 0) {
        /* The timeout: kill it; its reap finishes the check. */
        h->timed_out = 1;
        kill_check(h);
        return;
    }
    finish(h); /* the drain bound after its exit: take the output read so far */
}

static void on_alloc(uv_handle_t *handle, size_t size, uv_buf_t *buf) {
    (void)handle;
    static char chunk[4096];
    (void)size;
    *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    agent_health_t *h = s->data;
    if (n > 0) {
        ring_put(h, buf->base, (size_t)n);
        return;
    }
    if (n == 0)
        return;
    h->eof = 1; /* UV_EOF, or an error: nothing more will come either way */
    uv_read_stop(s);
    if (h->pid == 0)
        finish(h);
}

int agent__health_start(uv_loop_t *loop, const char *cmd, const char *const *extra_env,
                        int timeout_ms, agent_health_cb cb, void *arg, agent_health_t **out) {
    *out = NULL;
    agent_health_t *h = calloc(1, sizeof *h);
    char **envp = env_merge(extra_env);
    if (h == NULL || envp == NULL) {
        free(h);
        free(envp);
        return -ENOMEM;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        int rc = -errno;
        free(h);
        free(envp);
        return rc;
    }
    char *const argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(parent, fds[1], argv, envp);
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    free(envp);
    if (pid < 0) {
        close(fds[0]);
        free(h);
        return -fork_errno;
    }
    /* From both sides: a kill aimed at the group must not race the child's own setpgid. */
    setpgid(pid, pid);
    h->loop = loop;
    h->cb = cb;
    h->arg = arg;
    h->pid = pid;
    h->timeout_ms = timeout_ms;
    h->started_ms = uv_now(loop);
    uv_pipe_init(loop, &h->out, 0);
    uv_timer_init(loop, &h->timer);
    h->out.data = h->timer.data = h;
    h->open_handles = 2;
    /* Without the pipe there is no output to wait for: the reap alone ends the check. */
    if (uv_pipe_open(&h->out, fds[0]) < 0) {
        close(fds[0]);
        h->eof = 1;
    } else if (uv_read_start((uv_stream_t *)&h->out, on_alloc, on_read) < 0) {
        h->eof = 1;
    }
    uv_timer_start(&h->timer, on_timer, (uint64_t)timeout_ms, 0);
    *out = h;
    return 0;
}

int agent__health_reaped(agent_health_t *h, pid_t pid, int status) {
    if (h == NULL || h->pid == 0 || pid != h->pid)
        return 0;
    h->pid = 0;
    h->status = status;
    h->exited_ms = uv_now(h->loop);
    /* What it started and left in its group goes with it (the group outlives its leader while a
     * member lives, so the id still names it); its output is read until the pipe ends or the
     * drain bound runs out. */
    kill(-pid, SIGKILL);
    if (h->closing)
        return 1;
    if (h->eof) {
        finish(h);
        return 1;
    }
    uv_timer_start(&h->timer, on_timer, AGENT_HEALTH_DRAIN_MS, 0);
    return 1;
}

pid_t agent__health_pid(const agent_health_t *h) {
    return h != NULL ? h->pid : 0;
}

void agent__health_cancel(agent_health_t *h) {
    if (h == NULL)
        return;
    h->cancelled = 1;
    kill_check(h);
    finish(h);
}
