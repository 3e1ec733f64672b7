/* SPDX-License-Identifier: Apache-2.0
 * Where a hung worker is: every thread's stack of every process in its process group, written to a
 * file before the group is stopped. Tools (py-spy, gdb, eu-stack) run as children with deadlines;
 * the kernel's view from /proc is always written. agent__stacks_start runs it all in a forked
 * helper so that the agent's loop only waits for one child's exit. */
#include "stacks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_proc.h"
#include "ddp_signal.h"
#include "ddp_time.h"

extern char **environ;

/* Time kept back from the tools for the kernel's view that follows them (it reads only /proc). */
#define PROC_RESERVE_MS 200
/* How long a SIGKILLed tool may take to be reaped before it is left to the subreaper. */
#define KILL_REAP_MS 1000
/* A cmdline longer than this is cut in the process header. */
#define CMDLINE_MAX 1024

/* One capture in progress. */
typedef struct cap {
    int fd; /* the stacks file; the tools write into it directly */
    int devnull;
    int flags;
    int budget_ms;
    uint64_t start, deadline, tool_deadline;
    char py_spy[PATH_MAX], gdb[PATH_MAX], eu_stack[PATH_MAX]; /* "" when not installed */
    char **envp; /* environ without DEBUGINFOD_URLS (owned array, borrowed strings) */
} cap_t;

static int elapsed_ms(const cap_t *c) {
    return (int)(ddp_now_ms() - c->start);
}

static int cmp_pid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* Numeric name of a /proc directory entry, or 0. */
static pid_t dirent_pid(const struct dirent *de) {
    char *end;
    long v = strtol(de->d_name, &end, 10);
    return (*end == '\0' && v > 0 && v <= INT_MAX) ? (pid_t)v : 0;
}

int agent__stacks_group_pids(pid_t pgid, pid_t *out, int cap) {
    DIR *d = opendir("/proc");
    if (d == NULL)
        return -errno;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        pid_t pid = dirent_pid(de);
        if (pid == 0)
            continue;
        ddp_proc_stat_t st;
        if (ddp_proc_stat(pid, 0, &st) < 0 || st.pgrp != pgid)
            continue;
        if (n < cap)
            out[n] = pid;
        n++;
    }
    closedir(d);
    qsort(out, (size_t)(n < cap ? n : cap), sizeof *out, cmp_pid);
    return n;
}

char agent__stacks_proc_state(pid_t pid) {
    ddp_proc_stat_t st;
    return ddp_proc_stat(pid, 0, &st) < 0 ? '?' : st.state;
}

/* Finds an executable called name in $PATH; out gets its path, or "" when there is none. Only
 * absolute entries count: an empty entry, "." or any relative one names the working directory
 * (or one below it), where another user may have left a "gdb" that the agent, often root, would
 * run. */
static void find_on_path(const char *name, char *out, size_t cap) {
    out[0] = '\0';
    const char *path = getenv("PATH");
    if (path == NULL)
        return;
    while (*path) {
        size_t len = strcspn(path, ":");
        if (path[0] == '/' && (size_t)snprintf(out, cap, "%.*s/%s", (int)len, path, name) < cap &&
            access(out, X_OK) == 0)
            return;
        path += len;
        if (*path == ':')
            path++;
    }
    out[0] = '\0';
}

/* The tools inherit the environment minus DEBUGINFOD_URLS: gdb and eu-stack would otherwise
 * download debug information, which costs the whole budget on a slow or offline network. Returns
 * 0 or -ENOMEM. */
static int tool_env_build(cap_t *c) {
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    c->envp = calloc(n + 1, sizeof *c->envp);
    if (c->envp == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DEBUGINFOD_URLS=", 16) != 0)
            c->envp[k++] = environ[i];
    return 0;
}

/* Waits for child until deadline (CLOCK_MONOTONIC ms), through a pidfd where the kernel has them
 * and short sleeps otherwise. Returns 0 once it is reaped, DDP_ETIMEOUT at the deadline. */
static int reap_until(pid_t child, uint64_t deadline) {
    int pfd = -1;
#ifdef SYS_pidfd_open
    pfd = (int)syscall(SYS_pidfd_open, child, 0);
#endif
    int rc = DDP_ETIMEOUT;
    for (;;) {
        int status;
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child || (r < 0 && errno != EINTR)) {
            rc = 0;
            break;
        }
        uint64_t now = ddp_now_ms();
        if (now >= deadline)
            break;
        int wait_ms = (int)(deadline - now);
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            poll(&p, 1, wait_ms);
        } else {
            struct timespec ts = {0, (wait_ms < 10 ? wait_ms : 10) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (pfd >= 0)
        close(pfd);
    return rc;
}

/* The tool's side of the fork: its own process group (so that a cut kills whatever it started),
 * death with the capture (parent), stdout and stderr into the stacks file. Async-signal-safe calls
 * only. */
static void tool_child(const cap_t *c, char *const argv[], pid_t parent) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The capture died between the fork and the prctl: no signal will come, so go now (a tool
     * left attached to a stopped worker would outlive the agent). */
    if (getppid() != parent)
        _exit(1);
    dup2(c->devnull, 0);
    dup2(c->fd, 1);
    dup2(c->fd, 2);
    execve(argv[0], argv, c->envp);
    static const char msg[] = "unable to execute the tool\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
}

/* fork() without the atfork handlers. libuv's child handler (linked into the agent) closes and
 * re-creates its signal-lock pipe by descriptor number; in the capture helper, which closed every
 * inherited descriptor, those numbers name the stacks file by now, so after a plain fork the tool
 * would write into a pipe and its output would be lost. The child only calls async-signal-safe
 * functions before execve, which is all _Fork allows. */
static pid_t fork_without_handlers(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return _Fork();
#else
    return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
}

/* Runs argv (argv[0] an absolute path) with its output going into the file, until it exits or
 * deadline passes; then SIGKILLs its process group and says in the file that it was cut. */
static void tool_run(cap_t *c, char *const argv[], const char *label, uint64_t deadline) {
    dprintf(c->fd, "--- %s\n", label);
    pid_t self = getpid();
    pid_t child = fork_without_handlers();
    if (child < 0) {
        dprintf(c->fd, "unable to start %s: %s\n", argv[0], strerror(errno));
        return;
    }
    if (child == 0)
        tool_child(c, argv, self);
    /* Set from both sides: a kill aimed at the group must not race the child's own setpgid. */
    setpgid(child, child);
    uint64_t t0 = ddp_now_ms();
    if (reap_until(child, deadline) == 0)
        return;
    kill(-child, SIGKILL);
    kill(child, SIGKILL);
    if (reap_until(child, ddp_now_ms() + KILL_REAP_MS) < 0)
        dprintf(c->fd, "\n(%s did not exit after SIGKILL)\n", label);
    dprintf(c->fd, "\n--- %s: cut after %d ms (its share of the %d ms budget)\n", label,
            (int)(ddp_now_ms() - t0), c->budget_ms);
}

/* A Python interpreter: its executable's name starts with "python" (PyTorch renames the main
 * thread, so comm alone is not enough). */
static int is_python(pid_t pid, const char *comm) {
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *base = strrchr(exe, '/');
        return strncmp(base != NULL ? base + 1 : exe, "python", 6) == 0;
    }
    return strncmp(comm, "python", 6) == 0;
}

/* The best installed tool for one process, run until deadline. */
static void tool_for(cap_t *c, pid_t pid, const char *comm, uint64_t deadline) {
    char pidtxt[16];
    snprintf(pidtxt, sizeof pidtxt, "%d", (int)pid);
    if (c->py_spy[0] && is_python(pid, comm)) {
        char *const argv[] = {c->py_spy, "dump", "--pid", pidtxt, NULL};
        tool_run(c, argv, "py-spy dump", deadline);
    } else if (c->gdb[0]) {
        char *const argv[] = {c->gdb,
                              "-p",
                              pidtxt,
                              "-batch",
                              "-nx",
                              "-ex",
                              "set pagination off",
                              "-ex",
                              "thread apply all bt",
                              NULL};
        tool_run(c, argv, "gdb thread apply all bt", deadline);
    } else if (c->eu_stack[0]) {
        char *const argv[] = {c->eu_stack, "-p", pidtxt, NULL};
        tool_run(c, argv, "eu-stack", deadline);
    }
}

/* Names of the system calls a stuck worker usually sits in (numbers differ per architecture). */
static const char *syscall_name(long nr) {
    static const struct {
        long nr;
        const char *name;
    } names[] = {
#ifdef SYS_futex
        {SYS_futex, "futex"},
#endif
#ifdef SYS_nanosleep
        {SYS_nanosleep, "nanosleep"},
#endif
#ifdef SYS_clock_nanosleep
        {SYS_clock_nanosleep, "clock_nanosleep"},
#endif
#ifdef SYS_poll
        {SYS_poll, "poll"},
#endif
#ifdef SYS_ppoll
        {SYS_ppoll, "ppoll"},
#endif
#ifdef SYS_select
        {SYS_select, "select"},
#endif
#ifdef SYS_pselect6
        {SYS_pselect6, "pselect6"},
#endif
#ifdef SYS_epoll_wait
        {SYS_epoll_wait, "epoll_wait"},
#endif
#ifdef SYS_epoll_pwait
        {SYS_epoll_pwait, "epoll_pwait"},
#endif
        {SYS_read, "read"},
        {SYS_write, "write"},
        {SYS_ioctl, "ioctl"},
        {SYS_recvfrom, "recvfrom"},
        {SYS_recvmsg, "recvmsg"},
        {SYS_sendto, "sendto"},
        {SYS_sendmsg, "sendmsg"},
        {SYS_connect, "connect"},
        {SYS_accept4, "accept4"},
        {SYS_wait4, "wait4"},
        {SYS_sched_yield, "sched_yield"},
        {SYS_rt_sigsuspend, "rt_sigsuspend"},
        {SYS_rt_sigtimedwait, "rt_sigtimedwait"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].nr == nr)
            return names[i].name;
    return NULL;
}

/* "230 (clock_nanosleep)" from /proc/.../syscall, whose first word is the number, "running", or
 * -1 (blocked outside a system call). */
static void syscall_text(const char *dir, char *out, size_t cap) {
    char path[128], buf[256];
    snprintf(path, sizeof path, "%s/syscall", dir);
    ssize_t n = ddp_proc_read(path, buf, sizeof buf);
    if (n <= 0) {
        /* Reading it takes ptrace rights over the process (Yama's ptrace_scope applies). */
        snprintf(out, cap, "unreadable (%s)", n < 0 ? strerror((int)-n) : "empty");
        return;
    }
    buf[strcspn(buf, " \n")] = '\0';
    char *end;
    long nr = strtol(buf, &end, 10);
    const char *name = (*end == '\0' && end != buf) ? syscall_name(nr) : NULL;
    snprintf(out, cap, "%.24s%s%s%s", buf, name ? " (" : "", name ? name : "", name ? ")" : "");
}

/* The kernel stack of one thread, indented; /proc/.../stack is readable by root only. */
static void kernel_stack(cap_t *c, const char *dir) {
    char path[128], buf[4096];
    snprintf(path, sizeof path, "%s/stack", dir);
    ssize_t n = ddp_proc_read(path, buf, sizeof buf);
    if (n < 0) {
        dprintf(c->fd, "    kernel stack: unreadable (%s needs root): %s\n", path,
                strerror((int)-n));
        return;
    }
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        dprintf(c->fd, "    %s\n", line);
}

/* One thread's line (comm, state, wchan, system call) and its kernel stack. */
static void thread_write(cap_t *c, pid_t pid, pid_t tid) {
    char dir[64], path[128], wchan[128] = "?", sys[64];
    ddp_proc_stat_t st;
    snprintf(dir, sizeof dir, "/proc/%d/task/%d", (int)pid, (int)tid);
    if (ddp_proc_stat(pid, tid, &st) < 0) {
        dprintf(c->fd, "thread %d: gone\n", (int)tid);
        return;
    }
    snprintf(path, sizeof path, "%s/wchan", dir);
    if (ddp_proc_read(path, wchan, sizeof wchan) < 0)
        snprintf(wchan, sizeof wchan, "?");
    wchan[strcspn(wchan, "\n")] = '\0';
    syscall_text(dir, sys, sizeof sys);
    dprintf(c->fd, "thread %d (%s) state %c wchan %s syscall %s\n", (int)tid, st.comm, st.state,
            wchan[0] ? wchan : "0", sys);
    kernel_stack(c, dir);
}

/* The kernel's view of every thread of pid, cut at the overall deadline. */
static void threads_write(cap_t *c, pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    dprintf(c->fd, "--- threads (kernel view, %s)\n", path);
    DIR *d = opendir(path);
    if (d == NULL) {
        dprintf(c->fd, "unable to read %s: %s\n", path, strerror(errno));
        return;
    }
    int n = 0, skipped = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        pid_t tid = dirent_pid(de);
        if (tid == 0)
            continue;
        if (n >= AGENT_STACKS_MAX_THREADS || ddp_now_ms() >= c->deadline) {
            skipped++;
            continue;
        }
        thread_write(c, pid, tid);
        n++;
    }
    closedir(d);
    if (skipped > 0 && ddp_now_ms() >= c->deadline)
        dprintf(c->fd, "cut after %d ms: %d more threads not shown\n", elapsed_ms(c), skipped);
    else if (skipped > 0)
        dprintf(c->fd, "%d more threads not shown\n", skipped);
}

/* The process header: pid, comm, state and command line. Returns 0, or -ESRCH once it is gone. */
static int process_header(cap_t *c, pid_t pid, char *comm, size_t comm_cap) {
    char path[64], cmd[CMDLINE_MAX];
    ddp_proc_stat_t st;
    if (ddp_proc_stat(pid, 0, &st) < 0) {
        dprintf(c->fd, "=== process %d: gone\n", (int)pid);
        return -ESRCH;
    }
    snprintf(comm, comm_cap, "%s", st.comm);
    dprintf(c->fd, "=== process %d (%s) state %c\n", (int)pid, comm, st.state);
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    ssize_t n = ddp_proc_read(path, cmd, sizeof cmd);
    /* The arguments are NUL-separated; the last NUL ends the list. */
    for (ssize_t i = 0; i < n; i++)
        if (cmd[i] == '\0')
            cmd[i] = ' ';
    while (n > 0 && cmd[n - 1] == ' ')
        cmd[--n] = '\0';
    dprintf(c->fd, "cmdline: %s\n", n > 0 ? cmd : "(none)");
    return 0;
}

/* One process: header, the tool's stacks within its share of what is left of the tools' time,
 * and the kernel's view of its threads. */
static void process_write(cap_t *c, pid_t pid, int procs_left) {
    char comm[64];
    if (process_header(c, pid, comm, sizeof comm) < 0)
        return;
    int have_tool = c->py_spy[0] || c->gdb[0] || c->eu_stack[0];
    uint64_t now = ddp_now_ms();
    if (have_tool && now < c->tool_deadline)
        tool_for(c, pid, comm, now + (c->tool_deadline - now) / (uint64_t)procs_left);
    else if (have_tool)
        dprintf(c->fd, "--- tools: cut after %d ms (budget %d ms)\n", elapsed_ms(c), c->budget_ms);
    threads_write(c, pid);
}

/* The file's first line: the group, its size, the tools in use, the budget and the time. */
static void file_header(cap_t *c, pid_t pgid, int nprocs) {
    char when[32];
    struct tm tm;
    time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    dprintf(c->fd,
            "# ddprun stacks of process group %d: %d process%s; tools:%s%s%s%s; budget %d ms; %s\n",
            (int)pgid, nprocs, nprocs == 1 ? "" : "es", c->py_spy[0] ? " py-spy" : "",
            c->gdb[0] ? " gdb" : "", c->eu_stack[0] ? " eu-stack" : "",
            (c->py_spy[0] || c->gdb[0] || c->eu_stack[0]) ? ", /proc" : " /proc only", c->budget_ms,
            when);
}

/* Opens the file and finds the tools. Returns 0 or -errno (err names the file). */
static int cap_open(cap_t *c, const char *out_path, size_t trusted, int budget_ms, int flags,
                    ddp_err_t *err) {
    memset(c, 0, sizeof *c);
    c->flags = flags;
    c->budget_ms = budget_ms > 0 ? budget_ms : 0;
    c->start = ddp_now_ms();
    c->deadline = c->start + (uint64_t)c->budget_ms;
    int reserve = c->budget_ms / 4 < PROC_RESERVE_MS ? c->budget_ms / 4 : PROC_RESERVE_MS;
    c->tool_deadline = c->deadline - (uint64_t)reserve;
    if (!(flags & AGENT_STACKS_PROC_ONLY)) {
        find_on_path("py-spy", c->py_spy, sizeof c->py_spy);
        find_on_path("gdb", c->gdb, sizeof c->gdb);
        find_on_path("eu-stack", c->eu_stack, sizeof c->eu_stack);
    }
    if (tool_env_build(c) < 0)
        return ddp_err_set(err, -ENOMEM, "unable to capture stacks: out of memory");
    c->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (c->devnull < 0) {
        int e = -errno;
        free(c->envp);
        return ddp_err_set(err, e, "unable to capture stacks: /dev/null: %s", strerror(-e));
    }
    /* A fresh file of ours: nothing planted under its name (a link to a file of root's) is
     * truncated or written through. */
    ddp_err_t open_err = {0};
    c->fd = ddp_file_open(out_path, trusted, DDP_FILE_REPLACE, 0644, &open_err);
    if (c->fd < 0) {
        close(c->devnull);
        free(c->envp);
        return ddp_err_set(err, c->fd, "unable to create %s", open_err.text);
    }
    /* The capture writes with dprintf: a regular file never blocks, but be plain about it. */
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
    return 0;
}

int agent__stacks_capture(pid_t pgid, const char *out_path, size_t trusted, int budget_ms,
                          int flags, ddp_err_t *err) {
    if (pgid < 2)
        return ddp_err_set(err, -EINVAL, "unable to capture stacks: %d is no process group",
                           (int)pgid);
    pid_t pids[AGENT_STACKS_MAX_PROCS];
    int n = agent__stacks_group_pids(pgid, pids, AGENT_STACKS_MAX_PROCS);
    if (n < 0)
        return ddp_err_set(err, n, "unable to read /proc: %s", strerror(-n));
    if (n == 0)
        return ddp_err_set(err, -ESRCH, "unable to capture stacks: process group %d is empty",
                           (int)pgid);
    cap_t c;
    int rc = cap_open(&c, out_path, trusted, budget_ms, flags, err);
    if (rc < 0)
        return rc;
    file_header(&c, pgid, n);
    int shown = n < AGENT_STACKS_MAX_PROCS ? n : AGENT_STACKS_MAX_PROCS;
    for (int i = 0; i < shown; i++) {
        /* Attaching a debugger to ourselves or to the agent would stop the capture itself. */
        if (pids[i] == getpid() || pids[i] == getppid()) {
            dprintf(c.fd, "=== process %d: not inspected (the capturing process)\n", (int)pids[i]);
            continue;
        }
        if (ddp_now_ms() >= c.deadline) {
            dprintf(c.fd, "# cut after %d ms: %d processes not captured\n", elapsed_ms(&c),
                    shown - i);
            break;
        }
        process_write(&c, pids[i], shown - i);
    }
    if (n > shown)
        dprintf(c.fd, "# %d more processes in the group not captured\n", n - shown);
    dprintf(c.fd, "# end of capture after %d ms\n", elapsed_ms(&c));
    close(c.fd);
    close(c.devnull);
    free(c.envp);
    return 0;
}

/* The helper's side of the fork: a plain single-threaded process again. The agent's signal
 * handlers (libuv's) would write into the agent's own signal pipe, and its descriptors include the
 * orphan guard's pipe, whose EOF must not wait for the helper. */
static void helper_reset(pid_t parent) {
    ddp_signals_default(1);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
        close(fd);
}

pid_t agent__stacks_start(pid_t pgid, const char *out_path, size_t trusted, int budget_ms,
                          int flags) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* glibc resets its allocator's locks in the child of fork, so the capture may allocate
         * even though the agent has other threads (libuv's pool). */
        helper_reset(parent);
        ddp_err_t err = {0};
        if (agent__stacks_capture(pgid, out_path, trusted, budget_ms, flags, &err) == 0)
            _exit(0);
        DDP_WARN("%s", err.text);
        _exit(1);
    }
    return pid;
}

/* gdb's chatter while attaching, which says nothing about where the threads are. */
static int is_chatter(const char *line, size_t len) {
    static const char *const prefixes[] = {"[New LWP",          "[New Thread",
                                           "[Thread debugging", "Using host libthread_db",
                                           "[Inferior",         "Download failed"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t pl = strlen(prefixes[i]);
        if (len >= pl && memcmp(line, prefixes[i], pl) == 0)
            return 1;
    }
    return 0;
}

int agent__stacks_head(const char *path, int max_lines, char *out, size_t cap) {
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    char *line = NULL;
    size_t line_cap = 0, used = 0;
    ssize_t len;
    int n = 0;
    out[0] = '\0';
    while (n < max_lines && (len = getline(&line, &line_cap, f)) > 0) {
        if (is_chatter(line, (size_t)len))
            continue;
        if (used + (size_t)len >= cap) {
            /* Cut at the buffer's end; the caller quotes what fits. */
            snprintf(out + used, cap - used, "%s", line);
            n++;
            break;
        }
        memcpy(out + used, line, (size_t)len + 1);
        used += (size_t)len;
        n++;
    }
    free(line);
    fclose(f);
    return n;
}
