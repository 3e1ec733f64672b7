/* The orphan guard: a tiny forked process that outlives a SIGKILLed agent just long enough to
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
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"

#define GUARD_MAX_GROUPS 4096

static void guard_main(int fd, const agent_t *a) __attribute__((noreturn));

/* a is the guard's copy of the agent at fork time: the cgroup and run directory are known. */
static void guard_main(int fd, const agent_t *a) {
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
    if (a->cgroup_dir[0] != '\0')
        agent__cgroup_kill_dir(a->cgroup_dir);
    for (int i = 0; i < n; i++)
        kill(-groups[i], SIGKILL);
    if (a->cgroup_dir[0] != '\0')
        agent__cgroup_remove_dir(a->cgroup_dir);
    if (a->scratch_dir[0] != '\0')
        ddp_dir_remove(a->scratch_dir);
    if (a->run_dir_is_temp && !a->log_layout)
        ddp_dir_remove(a->run_dir);
    _exit(0);
}

int agent__guard_start(agent_t *a) {
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
        guard_main(keep, a);
    }
    close(fds[0]);
    a->guard_fd = fds[1];
    a->guard_pid = pid;
    return 0;
}

void agent__guard_update(agent_t *a, pid_t pgid, int add) {
    if (a->guard_fd < 0)
        return;
    uint8_t msg[5];
    int32_t v = (int32_t)pgid;
    msg[0] = add ? '+' : '-';
    memcpy(msg + 1, &v, sizeof v);
    /* 5 bytes are below PIPE_BUF: the write is atomic, and the guard reads quickly. */
    if (write(a->guard_fd, msg, sizeof msg) != (ssize_t)sizeof msg)
        DDP_WARN("unable to update the orphan guard: %s", strerror(errno));
}

void agent__guard_stop(agent_t *a) {
    if (a->guard_fd >= 0) {
        /* Everything is cleaned up: the guard need not do it again. */
        static const uint8_t bye[5] = {'q', 0, 0, 0, 0};
        if (write(a->guard_fd, bye, sizeof bye) != (ssize_t)sizeof bye)
            DDP_DEBUG("unable to say goodbye to the orphan guard: %s", strerror(errno));
        close(a->guard_fd);
    }
    a->guard_fd = -1;
}
