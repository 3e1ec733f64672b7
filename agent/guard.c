/* SPDX-License-Identifier: Apache-2.0
 * The orphan guard: a tiny forked process that outlives a SIGKILLed agent just long enough to
 * clean up after it. Workers die with the agent through PR_SET_PDEATHSIG, but their own children
 * (data loaders, shells) do not. When its pipe from the agent reaches EOF without a goodbye, the
 * guard kills the job's cgroup (everything the workers started, wherever it went) where there is
 * one, and the workers' process groups, then removes the cgroup, the workers' scratch directory
 * and the private run directory.
 * Messages: 1 byte '+' or '-' and a native int32 pgid; 'q' (and 4 ignored bytes) says the agent
 * has cleaned up itself. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"

#define GUARD_MAX_GROUPS 4096

/* What the guard removes when the agent dies without saying goodbye, known before it starts
 * ("" for none). */
typedef struct guard_paths {
    char cgroup_dir[PATH_MAX];  /* the job's cgroup, killed first, removed last */
    char scratch_dir[PATH_MAX]; /* the workers' scratch directory */
    char run_dir[PATH_MAX];     /* the private run directory (never a --log_dir) */
} guard_paths_t;

static void guard_main(int fd, const guard_paths_t *p) __attribute__((noreturn));

static void guard_main(int fd, const guard_paths_t *p) {
    static pid_t groups[GUARD_MAX_GROUPS];
    int n = 0;
    /* Only EOF ends the guard: signals aimed at the agent's group (Ctrl-C) are the agent's. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        uint8_t msg[5];
        size_t got = 0;
        while (got < sizeof msg) {
            ssize_t r = read(fd, msg + got, sizeof msg - got);
            if (r > 0)
                got += (size_t)r;
            else if (r < 0 && errno == EINTR)
                continue;
            else
                goto agent_gone;
        }
        int32_t pgid;
        memcpy(&pgid, msg + 1, sizeof pgid);
        if (msg[0] == 'q')
            _exit(0);
        if (msg[0] == '+' && n < GUARD_MAX_GROUPS) {
            groups[n++] = pgid;
        } else if (msg[0] == '-') {
            for (int i = 0; i < n; i++)
                if (groups[i] == pgid) {
                    groups[i] = groups[--n];
                    break;
                }
        }
    }
agent_gone:
    if (p->cgroup_dir[0] != '\0')
        agent__cgroup_kill_dir(p->cgroup_dir);
    for (int i = 0; i < n; i++)
        kill(-groups[i], SIGKILL);
    if (p->cgroup_dir[0] != '\0')
        agent__cgroup_remove_dir(p->cgroup_dir);
    if (p->scratch_dir[0] != '\0')
        ddp_dir_remove(p->scratch_dir);
    if (p->run_dir[0] != '\0')
        ddp_dir_remove(p->run_dir);
    _exit(0);
}

int agent__guard_start(agent_t *a) {
    /* What the guard may have to remove: its own copy (on this stack, which fork copies), and
     * all it sees of the agent. */
    guard_paths_t paths;
    snprintf(paths.cgroup_dir, sizeof paths.cgroup_dir, "%s", a->cgroup.dir);
    snprintf(paths.scratch_dir, sizeof paths.scratch_dir, "%s", a->scratch.dir);
    snprintf(paths.run_dir, sizeof paths.run_dir, "%s",
             a->cfg.run_dir_is_temp && !a->cfg.log_layout ? a->cfg.run_dir : "");
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return -e;
    }
    if (pid == 0) {
        /* Its own process group, so that a kill aimed at the agent's group spares it. Keep only
         * the pipe and stderr open. */
        setpgid(0, 0);
        close(fds[1]);
        int keep = fds[0];
        if (keep > 3)
            close_range(3, (unsigned)keep - 1, 0);
        close_range((unsigned)keep + 1, ~0U, 0);
        guard_main(keep, &paths);
    }
    close(fds[0]);
    a->guard.fd = fds[1];
    a->guard.pid = pid;
    return 0;
}

void agent__guard_update(agent_t *a, pid_t pgid, int add) {
    if (a->guard.fd < 0)
        return;
    uint8_t msg[5];
    int32_t v = (int32_t)pgid;
    msg[0] = add ? '+' : '-';
    memcpy(msg + 1, &v, sizeof v);
    /* 5 bytes are below PIPE_BUF: the write is atomic, and the guard reads quickly. */
    if (write(a->guard.fd, msg, sizeof msg) != (ssize_t)sizeof msg)
        DDP_WARN("unable to update the orphan guard: %s", strerror(errno));
}

int agent__guard_reaped(agent_t *a, pid_t pid) {
    if (pid != a->guard.pid || pid == 0)
        return 0;
    a->guard.pid = 0;
    return 1;
}

void agent__guard_stop(agent_t *a) {
    if (a->guard.fd >= 0) {
        /* Everything is cleaned up: the guard need not do it again. */
        static const uint8_t bye[5] = {'q', 0, 0, 0, 0};
        if (write(a->guard.fd, bye, sizeof bye) != (ssize_t)sizeof bye)
            DDP_DEBUG("unable to say goodbye to the orphan guard: %s", strerror(errno));
        close(a->guard.fd);
    }
    a->guard.fd = -1;
}
