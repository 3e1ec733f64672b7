/* SPDX-License-Identifier: Apache-2.0
 * The worker group of an attempt: the environment its workers share (torchrun's, plus
 * DDPRUN_*), its directories, its start (each worker's is worker.c's) and the signals sent to
 * it. */
#include "agent_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ddp_contract.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "rdzv_server.h"

extern char **environ;

/* Variables the agent owns: any value inherited from the parent is replaced. */
static const char *const owned_vars[] = {DDP_ENV_RANK,
                                         DDP_ENV_LOCAL_RANK,
                                         DDP_ENV_GROUP_RANK,
                                         DDP_ENV_ROLE_RANK,
                                         DDP_ENV_ROLE_NAME,
                                         DDP_ENV_LOCAL_WORLD_SIZE,
                                         DDP_ENV_WORLD_SIZE,
                                         DDP_ENV_GROUP_WORLD_SIZE,
                                         DDP_ENV_ROLE_WORLD_SIZE,
                                         DDP_ENV_MASTER_ADDR,
                                         DDP_ENV_MASTER_PORT,
                                         DDP_ENV_RESTART_COUNT,
                                         DDP_ENV_MAX_RESTARTS,
                                         DDP_ENV_TE_RUN_ID,
                                         DDP_ENV_USE_AGENT_STORE,
                                         DDP_ENV_ERROR_FILE,
                                         DDP_ENV_STORE_ADDR,
                                         DDP_ENV_STORE_PORT,
                                         DDP_ENV_STORE_TOKEN,
                                         DDP_ENV_ROUND,
                                         DDP_ENV_REAL_LOCAL_RANK,
                                         DDP_ENV_CPU_BINDING,
                                         DDP_ENV_NUMA_NODE,
                                         DDP_ENV_RUN_ID,
                                         DDP_ENV_HEARTBEAT_FILE,
                                         DDP_ENV_TIMING_FILE,
                                         DDP_ENV_SHM_DIR,
                                         NULL};

static int is_owned(const char *entry) {
    for (const char *const *v = owned_vars; *v; v++) {
        size_t n = strlen(*v);
        if (strncmp(entry, *v, n) == 0 && entry[n] == '=')
            return 1;
    }
    return 0;
}

/* Nonzero for the visible-device variables a worker gets its own value of under
 * --virtual_local_rank: CUDA's, and HIP's when that is the list in use (hip). */
static int is_virtual_owned(int hip, const char *entry) {
    return strncmp(entry, "CUDA_VISIBLE_DEVICES=", 21) == 0 ||
           (hip && strncmp(entry, "HIP_VISIBLE_DEVICES=", 20) == 0);
}

/* The environment every worker shares (agent_int.h). Returns 0 or -ENOMEM. */
int agent__base_env_build(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    ddp_strv_t *e = &a->grp.base_env;
    int rc = 0;
    /* Under --virtual_local_rank each worker gets its own entry of the list in use. */
    int hip = job->devices != NULL && strcmp(job->devices_var, "HIP_VISIBLE_DEVICES") == 0;
    /* Rebuilt for every rendezvous round: sizes, ranks and the master change with membership. */
    ddp_strv_free(e);
    for (char **p = environ; p && *p && rc == 0; p++)
        if (!is_owned(*p) && !(job->virtual_local_rank && is_virtual_owned(hip, *p)))
            rc = ddp_strv_push(e, *p);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_LOCAL_WORLD_SIZE, "%d", a->cfg.nproc);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_WORLD_SIZE, "%d", a->as.world_size);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_ROLE_WORLD_SIZE, "%d", a->as.world_size);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_GROUP_RANK, "%d", a->as.node_rank);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_GROUP_WORLD_SIZE, "%d", a->as.group_world_size);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_ROLE_NAME, "%s", job->role);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_MASTER_ADDR, "%s", a->as.master_addr);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_MASTER_PORT, "%d", a->as.master_port);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_MAX_RESTARTS, "%d", job->max_restarts);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_TE_RUN_ID, "%s", job->run_id);
    /* init_process_group(env://) connects every rank to the agent's store at
     * MASTER_ADDR:MASTER_PORT when this is True (the workers' store of group rank 0's agent),
     * as under torchrun 2.x; with --worker_store=own rank 0 hosts a TCPStore there. */
    rc = rc ? rc
            : ddp_strv_setenv(e, DDP_ENV_USE_AGENT_STORE, "%s",
                              job->worker_store_own ? DDP_USE_AGENT_STORE_NO
                                                    : DDP_USE_AGENT_STORE_YES);
    if (rc == 0 && getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL)
        rc = ddp_strv_setenv(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    if (rc == 0 && getenv("OMP_NUM_THREADS") == NULL && a->cfg.nproc > 1) {
        static int warned; /* once per run, not once per rendezvous round */
        if (!warned++)
            DDP_WARN("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the machine; "
                     "set it yourself to tune");
        rc = ddp_strv_setenv(e, "OMP_NUM_THREADS", "1");
    }
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_STORE_ADDR, "%s", a->stores.addr);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_STORE_PORT, "%u", (unsigned)a->stores.port);
    if (rc == 0 && a->stores.token_hex[0] != '\0')
        rc = ddp_strv_setenv(e, DDP_ENV_STORE_TOKEN, "%s", a->stores.token_hex);
    rc = rc ? rc : ddp_strv_setenv(e, DDP_ENV_RUN_ID, "%s", job->run_id);
    if (rc == 0 && a->scratch.dir[0] != '\0')
        rc = ddp_strv_setenv(e, DDP_ENV_SHM_DIR, "%s", a->scratch.dir);
    return rc;
}

int agent__attempt_dirs_make(agent_t *a, const char *path) {
    ddp_err_t err = {0};
    int rc = ddp_dir_make(path, strlen(a->cfg.run_dir), 0755, &err);
    if (rc < 0)
        DDP_ERROR("unable to create %s", err.text);
    return rc;
}

/* --duplicate_std{out,err}_filters: each attempt starts attempt_N/filtered_std{out,err}.log
 * empty, as torchrun does; the streams append to it (agent/output.c). Only in the log layout:
 * without log files there is no tee'd line to duplicate. Returns 0 or -errno (logged). */
static int filtered_files_reset(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    if (!a->cfg.log_layout || (job->dup_stdout_filters == NULL && job->dup_stderr_filters == NULL))
        return 0;
    char dir[AGENT_ATTEMPT_DIR_MAX];
    snprintf(dir, sizeof dir, "%s/attempt_%d", a->cfg.run_dir, a->as.attempt);
    int rc = agent__attempt_dirs_make(a, dir);
    if (rc < 0)
        return rc;
    for (int std = 1; std <= 2; std++) {
        if ((std == 1 ? job->dup_stdout_filters : job->dup_stderr_filters) == NULL)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/filtered_%s.log", dir, std == 1 ? "stdout" : "stderr");
        ddp_err_t err = {0};
        int fd = ddp_file_open(path, strlen(a->cfg.run_dir), DDP_FILE_REPLACE, 0644, &err);
        if (fd < 0) {
            DDP_ERROR("unable to open %s", err.text);
            return fd;
        }
        close(fd);
    }
    return 0;
}

void agent__local_group_prepare(agent_t *a) {
    /* The workers' store (if any) empties for the next group here, as none of this node's
     * workers runs; several nodes empty theirs before joining (agent__rdzv_join).
     * rdzv_server_reset(NULL) does nothing. */
    rdzv_server_reset(a->stores.wstore);
    /* The earlier attempts' worker keys in the job store (their workers are gone); a multi-node
     * store drops them itself when a round closes. */
    rdzv_server_forget_rounds(a->stores.store, a->cfg.job->run_id, DDP_WORKER_KEY_PREFIX,
                              a->as.round);
}

int agent__group_init(agent_t *a) {
    a->grp.workers = calloc((size_t)a->cfg.nproc, sizeof *a->grp.workers);
    a->grp.failures = calloc((size_t)a->cfg.nproc, sizeof *a->grp.failures);
    return a->grp.workers == NULL || a->grp.failures == NULL ? -ENOMEM : 0;
}

void agent__group_free(agent_t *a) {
    ddp_strv_free(&a->grp.base_env);
    free(a->grp.workers);
    free(a->grp.failures);
    a->grp.workers = NULL;
    a->grp.failures = NULL;
}

int agent__group_start(agent_t *a) {
    a->grp.running = 0;
    a->cfg.ops->group_prepare(a);
    a->grp.nfailures = 0;
    int frc = filtered_files_reset(a);
    if (frc < 0)
        return frc;
    agent__cgroup_group_begin(a);
    agent__goodput_spawn(a);
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        w->local_rank = i;
        w->rank = a->as.rank_base + i;
        int rc = agent__worker_start(a, w);
        if (rc < 0)
            return rc;
    }
    agent__hang_arm(a);
    agent__count(a, AGENT_COUNT_GROUP_STARTS, 1);
    agent__evlog(a, "worker_group_started", "{s:I, s:i, s:i, s:i}", "round",
                 (json_int_t)a->as.round, "nproc", a->cfg.nproc, "rank_base", a->as.rank_base,
                 "world_size", a->as.world_size);
    return 0;
}

void agent__group_signal(agent_t *a, int sig) {
    /* SIGKILL is for everything of the job: the cgroup has also what left the groups. */
    if (sig == SIGKILL)
        agent__cgroup_kill(a);
    /* A stopped process (SIGSTOP, Ctrl-Z, a debugger) acts on a termination signal only once it
     * runs again: continue the group, or it holds the shutdown for the whole grace period. */
    int cont = agent_signal_stops_job(sig);
    for (int i = 0; i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (w->state != WORKER_RUNNING)
            continue;
        pid_t target = -w->pid;
        if (kill(target, sig) < 0 && errno == ESRCH) {
            target = w->pid; /* not yet its own group leader: signal the process itself */
            kill(target, sig);
        }
        if (cont)
            kill(target, SIGCONT);
    }
}
