/* SPDX-License-Identifier: Apache-2.0
 * A worker's life, from its start to its failure record (libuv's process.c and tini's spawn and
 * reap are the model). Its states (agent_worker_state_t), for each attempt:
 *
 *   NONE     not started yet (the table is zeroed before the first attempt)
 *   RUNNING  agent__worker_start: its directory and error file made for the attempt, its own
 *            environment added to the group's, its streams routed, then a git-style spawn
 *            (argv and envp built before it, only async-signal-safe calls in the child, which
 *            runs on clone(CLONE_VM | CLONE_VFORK) like posix_spawn); it leads its own process
 *            group, which the orphan guard is told about. A failed exec is noted here
 *            (exec_errno) and the child exits 126 or 127. While RUNNING, hang.c may find it
 *            hung (hung_for_ms, its stacks captured: stacks_pid, stacks_file); it stays RUNNING
 *            until it is stopped and reaped like any other.
 *   EXITED   agent__worker_exited, from agent.c's SIGCHLD handler (the only waitpid): its wait
 *            status and time, its process group killed and forgotten by the guard, its streams
 *            drained, its error file bounded; a failed exit feeds EV_WORKER_FAIL (an exit 0 feeds
 * no event: the group's end, EV_GROUP_DOWN, says that every worker succeeded).
 *
 * The next attempt starts every worker again from EXITED. A failure (an exit the agent did not
 * cause, or a hang) is copied into the attempt's failure list by agent__worker_failure_record,
 * for the summary; the worker itself is reused by the next attempt. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_signal.h"

/* Nonzero for the codes that mean a limit of the process or the machine ran out. */
static int is_exhaustion(int rc) {
    return rc == -EMFILE || rc == -ENFILE || rc == -EAGAIN || rc == -ENOMEM;
}

/* The one line for worker w that could not start because a resource ran out (rc), naming the
 * resource, its limit and what to do. */
static void exhaustion_log(agent_t *a, agent_worker_t *w, int rc) {
    struct rlimit rl;
    int res = rc == -EMFILE ? RLIMIT_NOFILE : rc == -EAGAIN ? RLIMIT_NPROC : -1;
    char limit[64] = "";
    if (res >= 0 && getrlimit(res, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(limit, sizeof limit, " (%s unlimited)",
                     res == RLIMIT_NOFILE ? "RLIMIT_NOFILE" : "RLIMIT_NPROC");
        else
            snprintf(limit, sizeof limit, " (%s %llu)",
                     res == RLIMIT_NOFILE ? "RLIMIT_NOFILE" : "RLIMIT_NPROC",
                     (unsigned long long)rl.rlim_cur);
    }
    int n = w->local_rank + 1;
    if (rc == -EMFILE)
        DDP_ERROR("too many open files starting worker %d of %d%s: raise `ulimit -n`", n,
                  a->cfg.nproc, limit);
    else if (rc == -ENFILE)
        DDP_ERROR("too many open files on this machine starting worker %d of %d "
                  "(fs.file-max): close files or raise it",
                  n, a->cfg.nproc);
    else if (rc == -EAGAIN)
        DDP_ERROR("too many processes starting worker %d of %d%s: raise `ulimit -u`", n,
                  a->cfg.nproc, limit);
    else
        DDP_ERROR("out of memory starting worker %d of %d", n, a->cfg.nproc);
}

/* Opens dir/name (below the run directory) for appending worker output, refusing what another
 * user may have planted there (ddp_file_open). Returns the fd or a negative code (logged). */
static int open_log(agent_t *a, const char *dir, const char *name) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ddp_err_t err = {0};
    int fd = ddp_file_open(path, strlen(a->cfg.run_dir), DDP_FILE_APPEND, 0644, &err);
    if (fd < 0) {
        /* Running out of a resource is said once by agent__worker_start, naming the limit. */
        if (!is_exhaustion(fd))
            DDP_ERROR("unable to open %s", err.text);
        return fd;
    }
    /* The worker writes its own log file with blocking writes, as it would without ddprun. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static int rank_shown(const agent_job_t *job, int local_rank) {
    if (job->ranks_shown == NULL)
        return 1;
    for (int i = 0; i < job->n_ranks_shown; i++)
        if (job->ranks_shown[i] == local_rank)
            return 1;
    return 0;
}

/* Where one stream of a worker goes, decided before fork. */
typedef struct stream_plan {
    int child_fd; /* what the child dup2s onto 1 or 2; -1 = inherit */
    int pipe_rd;  /* our read end, or -1 */
    int file_fd;  /* tee file the agent writes, or -1 */
    int console;  /* console fd for the agent's copy, or -1 */
    int tag;
} stream_plan_t;

static void plan_close(stream_plan_t *p) {
    if (p->child_fd >= 0)
        close(p->child_fd);
    if (p->pipe_rd >= 0)
        close(p->pipe_rd);
    if (p->file_fd >= 0)
        close(p->file_fd);
}

/* Decides the routing of stream std (1 = stdout, 2 = stderr) of worker w. Returns 0 or -errno. */
static int plan_stream(agent_t *a, agent_worker_t *w, const char *dir, int std, stream_plan_t *p) {
    const agent_job_t *job = a->cfg.job;
    int bit = std == 1 ? AGENT_STD_OUT : AGENT_STD_ERR;
    int redirect = agent_std_for(&job->redirects, w->local_rank) & bit;
    int tee = agent_std_for(&job->tee, w->local_rank) & bit;
    const char *name = std == 1 ? "stdout.log" : "stderr.log";
    *p = (stream_plan_t){-1, -1, -1, -1, tee || job->console_tag_all ? 1 : 0};
    int file_only = redirect && !tee;
    /* A line counts as a beat only if the agent sees it: with --heartbeat_on_output every
     * stream passes through the agent, a file-only one too (the agent writes the file). */
    int watched = job->heartbeat_on_output && job->heartbeat_timeout_ms > 0;
    /* --timestamp_output: only the agent can stamp the lines of a file. */
    if (file_only && !watched && !job->timestamp_output) {
        /* The worker writes the file directly; the agent never touches the bytes. */
        p->child_fd = open_log(a, dir, name);
        return p->child_fd < 0 ? p->child_fd : 0;
    }
    if (file_only || tee) {
        p->file_fd = open_log(a, dir, name);
        if (p->file_fd < 0)
            return p->file_fd;
    }
    p->console = rank_shown(job, w->local_rank) && !file_only ? std : -1;
    int fds[2] = {-1, -1};
    if (p->console < 0 && p->file_fd < 0 && !watched)
        fds[1] = open("/dev/null", O_WRONLY | O_CLOEXEC);
    else if (pipe2(fds, O_CLOEXEC) < 0) /* so that lines reach the console whole, tagged */
        fds[1] = -1;
    if (fds[1] < 0) {
        int rc = -errno;
        if (!is_exhaustion(rc)) /* else agent__worker_start says which limit */
            DDP_ERROR("unable to route the %s of rank %d: %s", std == 1 ? "stdout" : "stderr",
                      w->rank, strerror(-rc));
        return rc;
    }
    p->pipe_rd = fds[0];
    p->child_fd = fds[1];
    return 0;
}

/* What the child needs; it shares the parent's memory (CLONE_VM), so a failed exec is reported
 * by writing exec_errno here before _exit, which the parent reads once it resumes. */
typedef struct child_args {
    agent_t *a;
    int out_fd, err_fd;
    int cgroup_fd; /* the job cgroup's cgroup.procs, or -1 */
    pid_t parent;
    char *const *envp;
    volatile int exec_errno;
    volatile int cgroup_errno; /* moving into the job's cgroup failed */
    int local_rank;
    volatile int bind_errno; /* --numa_binding: sched_setaffinity failed */
} child_args_t;

/* set_mempolicy's modes (linux/mempolicy.h): one preferred node; several (Linux 5.15). */
#define DDP_MPOL_PREFERRED 1
#define DDP_MPOL_PREFERRED_MANY 5

/* --numa_binding in the child, by system calls only: the CPUs (inherited by every thread the
 * program starts) and a preference for the NUMA nodes' memory. */
static void child_bind(child_args_t *c) {
    const agent_job_t *job = c->a->cfg.job;
    if (sched_setaffinity(0, sizeof(cpu_set_t), &job->bind_cpus[c->local_rank]) != 0)
        c->bind_errno = errno;
    unsigned long mask = (unsigned long)job->bind_mems[c->local_rank];
    if (mask == 0)
        return;
    int many = (mask & (mask - 1)) != 0;
    if (syscall(SYS_set_mempolicy, many ? DDP_MPOL_PREFERRED_MANY : DDP_MPOL_PREFERRED, &mask,
                (unsigned long)sizeof mask * 8 + 1) != 0 &&
        many) {
        mask &= ~(mask - 1); /* an older kernel: the first of the nodes */
        syscall(SYS_set_mempolicy, DDP_MPOL_PREFERRED, &mask, (unsigned long)sizeof mask * 8 + 1);
    }
}

/* The child side: async-signal-safe calls only, and no write to memory but the args' *_errno
 * fields (the parent's memory is shared until exec). Never returns. */
static int child_main(void *arg) {
    child_args_t *c = arg;
    /* Handlers installed by libuv must not run here; exec would reset them anyway, but a signal
     * could arrive before it. Ignored signals (SIGPIPE) must not stay ignored in the worker.
     * Without CLONE_SIGHAND these changes stay in the child. */
    ddp_signals_default(0);
    setpgid(0, 0);
    if (c->a->cfg.nofile_saved)
        setrlimit(RLIMIT_NOFILE, &c->a->cfg.nofile);
    if (c->a->cfg.job->bind_cpus != NULL)
        child_bind(c);
    /* Into the job's cgroup before anything of the program runs: whatever it starts, wherever
     * that goes (setsid, double fork), is born there and is killed with the cgroup. "0" moves
     * the writer itself. */
    if (c->cgroup_fd >= 0 && write(c->cgroup_fd, "0", 1) != 1)
        c->cgroup_errno = errno;
    /* If the agent dies (even by SIGKILL), the worker dies with it. The getppid check closes the
     * race where the agent died before prctl ran. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != c->parent)
        _exit(128 + SIGKILL);
    if ((c->out_fd >= 0 && dup2(c->out_fd, 1) < 0) || (c->err_fd >= 0 && dup2(c->err_fd, 2) < 0))
        goto fail;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(c->a->cfg.job->path, c->a->cfg.job->argv, c->envp);
fail:
    c->exec_errno = errno;
    _exit(errno == ENOENT ? 127 : 126);
}

/* The stack the child runs on until exec. CLONE_VFORK suspends the agent until then, so one
 * static stack serves every spawn. */
static char child_stack[64 * 1024] __attribute__((aligned(64)));

/* clone3(2)'s argument block (linux/sched.h's struct clone_args, up to its cgroup field). */
struct spawn_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};
#define SPAWN_CLONE_INTO_CGROUP 0x200000000ULL

#if defined(__x86_64__)
/* clone3(ca, size) whose child calls fn(arg) on ca->stack and exits with what it returns; glibc
 * has no clone3 wrapper, and a child on a new stack cannot return through C frames. Returns the
 * child's pid in the parent, or -errno. fn and arg travel in callee-saved registers, which the
 * child starts with too. */
long spawn_clone3_run(struct spawn_clone_args *ca, size_t size, int (*fn)(void *), void *arg);
__asm__(".text\n"
        ".type spawn_clone3_run,@function\n"
        "spawn_clone3_run:\n"
        "    push %r12\n"
        "    push %r13\n"
        "    mov %rdx, %r12\n"
        "    mov %rcx, %r13\n"
        "    mov $435, %eax\n" /* SYS_clone3 (rdi, rsi: ca, size) */
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    pop %r13\n"
        "    pop %r12\n"
        "    ret\n"
        "1:  xor %ebp, %ebp\n" /* the child, on the new stack */
        "    mov %r13, %rdi\n"
        "    and $-16, %rsp\n"
        "    call *%r12\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n" /* SYS_exit */
        "    syscall\n"
        "    hlt\n"
        ".size spawn_clone3_run, .-spawn_clone3_run\n");
#endif

/* Starts child_main(args) as clone(CLONE_VM | CLONE_VFORK) does, born in the job's cgroup when
 * there is one: clone3's CLONE_INTO_CGROUP costs nothing, where moving a process afterwards
 * (cgroup.procs) waits for an RCU grace period, milliseconds per worker. Where clone3 is missing
 * (another architecture, an older kernel, a seccomp filter) the child moves itself
 * (args->cgroup_fd). Returns the pid, or -1 with errno set. */
static pid_t spawn_clone(agent_t *a, child_args_t *args) {
#if defined(__x86_64__)
    static int no_clone3;
    if (a->cgroup.dir_fd >= 0 && !no_clone3) {
        struct spawn_clone_args ca = {
            .flags = CLONE_VM | CLONE_VFORK | SPAWN_CLONE_INTO_CGROUP,
            .exit_signal = SIGCHLD,
            .stack = (uint64_t)(uintptr_t)child_stack,
            .stack_size = sizeof child_stack,
            .cgroup = (uint64_t)a->cgroup.dir_fd,
        };
        int fd = args->cgroup_fd;
        args->cgroup_fd = -1; /* born there: nothing to move */
        long rc = spawn_clone3_run(&ca, sizeof ca, child_main, args);
        if (rc > 0)
            return (pid_t)rc;
        if (rc == -EAGAIN || rc == -ENOMEM) {
            errno = (int)-rc;
            return -1;
        }
        DDP_DEBUG("clone3 into cgroup %s: %s; workers move themselves", a->cgroup.dir,
                  strerror((int)-rc));
        no_clone3 = 1;
        args->cgroup_fd = fd;
    }
#else
    (void)a;
#endif
    return clone(child_main, child_stack + sizeof child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                 args);
}

/* The worker's directory (dir, cap bytes) and error file, created and emptied for this attempt.
 * Returns 0 or -errno (logged). */
static int worker_files(agent_t *a, agent_worker_t *w, char *dir, size_t cap) {
    int rc;
    snprintf(dir, cap, "%s/attempt_%d/%d", a->cfg.run_dir, a->as.attempt, w->local_rank);
    if (a->cfg.log_layout) {
        /* torchrun's layout: <log_dir>/attempt_N/<local_rank>/{stdout,stderr}.log, error.json */
        rc = agent__attempt_dirs_make(a, dir);
        if (rc < 0)
            return rc;
        snprintf(w->error_file, sizeof w->error_file, "%s/error.json", dir);
    } else {
        /* Only error files, in the private run directory: no directory per worker to create. */
        snprintf(w->error_file, sizeof w->error_file, "%s/error.%d.%d.json", a->cfg.run_dir,
                 a->as.attempt, w->local_rank);
    }
    unlink(w->error_file);
    rc = agent__straggler_worker_file(a, w, dir);
    return rc < 0 ? rc : agent__hang_worker_file(a, w, dir);
}

/* The worker's environment: the round's shared entries, borrowed from base_env (which holds
 * none of these names: they are in group.c's owned_vars), then its own, kept in own. Returns the
 * envp (caller frees the array, not the strings; free own after it), or NULL with *rcp set. */
static char **worker_envp(agent_t *a, agent_worker_t *w, ddp_strv_t *own, int *rcp) {
    int rc = ddp_strv_pushf(own, DDP_ENV_RANK "=%d", w->rank);
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_ROLE_RANK "=%d", w->rank);
    int local_rank_env = a->cfg.job->virtual_local_rank ? 0 : w->local_rank;
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_LOCAL_RANK "=%d", local_rank_env);
    /* The worker's place on the node, also when LOCAL_RANK is virtual (worker_template/ddpw.h). */
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_REAL_LOCAL_RANK "=%d", w->local_rank);
    if (rc == 0 && a->cfg.job->bind_cpus_text != NULL) {
        rc = ddp_strv_pushf(own, DDP_ENV_CPU_BINDING "=%s",
                            a->cfg.job->bind_cpus_text[w->local_rank]);
        rc = rc ? rc
                : ddp_strv_pushf(own, DDP_ENV_NUMA_NODE "=%s",
                                 a->cfg.job->bind_nodes_text[w->local_rank]);
    }
    if (rc == 0 && a->cfg.job->virtual_local_rank) {
        /* Each worker sees only its own device, as device 0 (torchrun's virtual local rank). */
        char dev[256]; /* an entry may be a GPU or MIG UUID */
        rc = agent__worker_device(a->cfg.job, w->local_rank, dev, sizeof dev);
        rc = rc ? rc : ddp_strv_pushf(own, "CUDA_VISIBLE_DEVICES=%s", dev);
        if (rc == 0 && strcmp(a->cfg.job->devices_var, "HIP_VISIBLE_DEVICES") == 0)
            rc = ddp_strv_pushf(own, "HIP_VISIBLE_DEVICES=%s", dev);
    }
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_RESTART_COUNT "=%d", a->as.attempt);
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_ERROR_FILE "=%s", w->error_file);
    rc = rc ? rc : ddp_strv_pushf(own, DDP_ENV_ROUND "=%lld", (long long)a->as.round);
    if (rc == 0 && w->hb_file[0] != '\0')
        rc = ddp_strv_pushf(own, DDP_ENV_HEARTBEAT_FILE "=%s", w->hb_file);
    if (rc == 0 && w->tm_file[0] != '\0')
        rc = ddp_strv_pushf(own, DDP_ENV_TIMING_FILE "=%s", w->tm_file);
    char **envp = rc ? NULL : malloc((a->grp.base_env.n + own->n + 1) * sizeof *envp);
    if (envp == NULL) {
        *rcp = rc ? rc : -ENOMEM;
        return NULL;
    }
    memcpy(envp, a->grp.base_env.v, a->grp.base_env.n * sizeof *envp);
    memcpy(envp + a->grp.base_env.n, own->v, (own->n + 1) * sizeof *envp); /* with the NULL */
    return envp;
}

/* Long: the clone and the hand-over of its fds read best in one piece, with one fail path. */
int agent__worker_start(agent_t *a, agent_worker_t *w) {
    char dir[AGENT_ATTEMPT_DIR_MAX];
    int rc = worker_files(a, w, dir, sizeof dir);
    if (rc < 0)
        return rc;
    ddp_strv_t own = DDP_STRV_INIT;
    char **envp = worker_envp(a, w, &own, &rc);
    if (envp == NULL) {
        ddp_strv_free(&own);
        return rc;
    }

    stream_plan_t out = {-1, -1, -1, -1, 0}, err = {-1, -1, -1, -1, 0};
    if ((rc = plan_stream(a, w, dir, 1, &out)) < 0 || (rc = plan_stream(a, w, dir, 2, &err)) < 0)
        goto fail;

    /* posix_spawn's technique: clone(CLONE_VM | CLONE_VFORK) copies no page tables and resumes
     * the agent once the child has exec'd. Signals stay blocked across it so that no libuv
     * handler runs in the child before it resets them; the child clears its mask before exec. */
    child_args_t args = {
        a, out.child_fd, err.child_fd, a->cgroup.procs_fd, getpid(), envp, 0, 0, w->local_rank, 0};
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t pid = spawn_clone(a, &args);
    int clone_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        rc = -clone_errno;
        if (!is_exhaustion(rc))
            DDP_ERROR("unable to start worker rank %d: %s", w->rank, strerror(clone_errno));
        goto fail;
    }
    /* Also from the parent: a signal sent to -pid before the child ran setpgid must not miss
     * (EACCES once it has exec'd is fine: it did it itself). */
    setpgid(pid, pid);
    w->pid = pid;
    w->state = WORKER_RUNNING;
    w->status = 0;
    w->exec_errno = args.exec_errno;
    a->grp.running++;
    agent__guard_update(a, pid, 1);
    agent__count(a, AGENT_COUNT_WORKER_STARTS, 1);
    agent__evlog(a, "worker_started", "{s:i, s:i, s:i}", "rank", w->rank, "local_rank",
                 w->local_rank, "pid", (int)pid);
    if (args.cgroup_errno != 0) {
        /* The others would fail the same way: they run without it, as where there is none. */
        DDP_WARN("unable to move rank %d into cgroup %s: %s; running the job without it", w->rank,
                 a->cgroup.dir, strerror(args.cgroup_errno));
        agent__cgroup_procs_drop(a);
    }
    if (args.bind_errno != 0)
        DDP_WARN("--numa_binding: unable to bind rank %d to CPUs %s: %s", w->rank,
                 a->cfg.job->bind_cpus_text[w->local_rank], strerror(args.bind_errno));
    if (w->exec_errno != 0)
        DDP_ERROR("unable to exec %s for rank %d: %s", a->cfg.job->path, w->rank,
                  strerror(w->exec_errno));

    if (out.child_fd >= 0)
        close(out.child_fd);
    if (err.child_fd >= 0)
        close(err.child_fd);
    w->out = out.pipe_rd >= 0
                 ? agent__stream_open(a, out.pipe_rd, w->rank, 1, out.console, out.tag, out.file_fd)
                 : NULL;
    w->err = err.pipe_rd >= 0
                 ? agent__stream_open(a, err.pipe_rd, w->rank, 2, err.console, err.tag, err.file_fd)
                 : NULL;
    if (a->cfg.job->heartbeat_on_output && a->cfg.job->heartbeat_timeout_ms > 0) {
        if (w->out != NULL)
            w->out->beat_ms = &w->out_beat_ms;
        if (w->err != NULL)
            w->err->beat_ms = &w->out_beat_ms;
    }
    free(envp);
    ddp_strv_free(&own);
    DDP_DEBUG("started rank %d (local %d) pid %d", w->rank, w->local_rank, (int)pid);
    return 0;

fail:
    if (is_exhaustion(rc))
        exhaustion_log(a, w, rc);
    plan_close(&out);
    plan_close(&err);
    free(envp);
    ddp_strv_free(&own);
    return rc;
}

agent_worker_t *agent__worker_by_pid(agent_t *a, pid_t pid) {
    for (int i = 0; i < a->cfg.nproc; i++)
        if (a->grp.workers[i].state == WORKER_RUNNING && a->grp.workers[i].pid == pid)
            return &a->grp.workers[i];
    return NULL;
}

void agent__worker_exited(agent_t *a, agent_worker_t *w, int status) {
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
    a->grp.running--;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    agent__error_file_bound(w->error_file);
    if (ok) {
        DDP_DEBUG("rank %d (pid %d) exited 0", w->rank, (int)w->pid);
    } else if (WIFSIGNALED(status)) {
        DDP_DEBUG("rank %d (pid %d) killed by %s", w->rank, (int)w->pid,
                  ddp_signal_name(WTERMSIG(status)));
    } else {
        DDP_DEBUG("rank %d (pid %d) exited %d", w->rank, (int)w->pid, WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status))
        agent__evlog(a, "worker_exited", "{s:i, s:i, s:i, s:n, s:s}", "rank", w->rank, "local_rank",
                     w->local_rank, "pid", (int)w->pid, "exit_code", "signal",
                     ddp_signal_name(WTERMSIG(status)));
    else
        agent__evlog(a, "worker_exited", "{s:i, s:i, s:i, s:i, s:n}", "rank", w->rank, "local_rank",
                     w->local_rank, "pid", (int)w->pid, "exit_code", WEXITSTATUS(status), "signal");
    if (!ok)
        agent__event(a, EV_WORKER_FAIL, w);
}

void agent__worker_abandoned(agent_t *a, agent_worker_t *w) {
    w->state = WORKER_EXITED;
    agent__stream_finish(w->out);
    agent__stream_finish(w->err);
    a->grp.running--;
}

void agent__worker_hang_record(agent_t *a, const agent_worker_t *w) {
    agent__worker_failure_record(a, w);
    agent_failure_t *f = &a->grp.failures[a->grp.nfailures - 1];
    f->hung = 1;
    f->when = time(NULL); /* found now; the worker has not exited (exit_wall is 0) */
    f->hung_for_ms = w->hung_for_ms;
    f->step = w->step;
}

void agent__worker_failure_stacks(agent_t *a) {
    agent_failure_t *f = &a->grp.failures[0];
    snprintf(f->stacks_file, sizeof f->stacks_file, "%s",
             a->grp.workers[f->local_rank].stacks_file);
}

void agent__worker_failure_record(agent_t *a, const agent_worker_t *w) {
    /* A hung worker may also fail on its own while its stacks are taken: one slot per worker. */
    if (a->grp.nfailures >= a->cfg.nproc)
        return;
    agent_failure_t *f = &a->grp.failures[a->grp.nfailures++];
    memset(f, 0, sizeof *f);
    f->step = -1;
    f->rank = w->rank;
    f->local_rank = w->local_rank;
    f->pid = w->pid;
    f->status = w->status;
    f->exec_errno = w->exec_errno;
    f->when = w->exit_wall;
    snprintf(f->error_file, sizeof f->error_file, "%s", w->error_file);
}
