/* SPDX-License-Identifier: Apache-2.0
 * Slurm step detection and the derivation of nnodes, node rank, rendezvous id/backend/endpoint and
 * nproc from SLURM_*, for `srun --ntasks-per-node=1 ddprun program` with no other flag.
 * Every read goes through a launch_getenv_fn, so tests replay recorded environments. */
#include "launch_slurm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_devices.h"
#include "ddp_parse.h"
#include "launch_int.h"

#define EQ 32 /* environment values are quoted up to this many characters */

/* The first of two spellings that is set (Slurm exports both SLURM_JOB_ID and SLURM_JOBID). */
static const char *env2(launch_getenv_fn fn, void *ctx, const char *a, const char *b,
                        const char **which) {
    const char *v = launch__env(fn, ctx, a);
    *which = a;
    if (v == NULL) {
        v = launch__env(fn, ctx, b);
        *which = b;
    }
    return v;
}

static void line(launch_slurm_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(launch_slurm_t *s, const char *fmt, ...) {
    if (s->n_lines >= LAUNCH_SLURM_MAX_LINES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->lines[s->n_lines++], LAUNCH_SLURM_LINE_LEN, fmt, ap);
    va_end(ap);
}

static int env_int(const char *var, const char *v, int64_t min, int64_t max, int *out,
                   ddp_err_t *err) {
    int64_t x;
    int rc = ddp_parse_i64(v, min, max, &x);
    if (rc == -ERANGE)
        return ddp_err_set(err, DDP_EENV, "%s: '%.*s' is out of range (%lld..%lld)", var, EQ, v,
                           (long long)min, (long long)max);
    if (rc < 0)
        return ddp_err_set(err, DDP_EENV, "%s: '%.*s' is not a number in %lld..%lld", var, EQ, v,
                           (long long)min, (long long)max);
    *out = (int)x;
    return 0;
}

int launch_slurm_port(uint64_t job_id, int have_step, uint64_t step_id) {
    uint64_t slot = have_step ? step_id % LAUNCH_SLURM_STEP_SLOTS : LAUNCH_SLURM_STEP_SLOTS - 1;
    return LAUNCH_SLURM_PORT_BASE +
           (int)(LAUNCH_SLURM_STEP_SLOTS * (job_id % LAUNCH_SLURM_JOB_SLOTS) + slot);
}

int launch_slurm_detect(launch_getenv_fn getenv_fn, void *ctx) {
    const char *w;
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    if (env2(getenv_fn, ctx, "SLURM_JOB_ID", "SLURM_JOBID", &w) == NULL)
        return 0;
    return env2(getenv_fn, ctx, "SLURM_STEP_ID", "SLURM_STEPID", &w) != NULL ||
           launch__env(getenv_fn, ctx, "SLURM_NODEID") != NULL;
}

/* Refuses more than one ddprun task on a node: each would start its own workers on the same GPUs.
 * The step's own count list is preferred: SLURM_NTASKS_PER_NODE may be inherited from an sbatch
 * --ntasks-per-node while this srun step runs one task per node. */
static int check_one_task(launch_getenv_fn fn, void *ctx, const launch_slurm_t *s, int step_nodes,
                          ddp_err_t *err) {
    const char *var = "SLURM_STEP_TASKS_PER_NODE";
    const char *v = launch__env(fn, ctx, var);
    int most = 1;
    if (v != NULL) {
        launch_counts_t c;
        ddp_err_t e = {0};
        if (launch_counts_parse(v, &c, &e) < 0)
            return ddp_err_set(err, DDP_EENV, "%s: %s", var, e.text);
        for (size_t i = 0; i < c.n; i++)
            most = c.v[i] > most ? c.v[i] : most;
        launch_counts_free(&c);
    } else if ((v = launch__env(fn, ctx, var = "SLURM_NTASKS_PER_NODE")) != NULL) {
        if (env_int(var, v, 0, 1 << 20, &most, err) < 0)
            return DDP_EENV;
    }
    if (most <= 1 || !s->in_step)
        return 0;
    char nflag[24] = "", ntasks[80] = "";
    if (step_nodes > 0) {
        snprintf(nflag, sizeof nflag, "-N%d ", step_nodes);
        /* Inside an allocation made with more tasks per node, srun cannot honour
         * --ntasks-per-node=1 alone: the task count must be given too. */
        snprintf(ntasks, sizeof ntasks, " (in such an allocation: srun -N%d -n%d ddprun ...)",
                 step_nodes, step_nodes);
    }
    return ddp_err_set(err, DDP_EUSAGE,
                       "%d ddprun tasks on a node (%s=%.16s); ddprun starts the workers itself, "
                       "run one per node: srun %s--ntasks-per-node=1 ddprun ...%s",
                       most, var, v, nflag, ntasks);
}

static int derive_nnodes(launch_spec_t *spec, launch_getenv_fn fn, void *ctx, launch_slurm_t *s,
                         size_t listed, ddp_err_t *err) {
    static const char *const vars[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                       "SLURM_JOB_NUM_NODES"};
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_NNODES)) {
        line(s, "nnodes=%d:%d kept (given explicitly)", spec->min_nodes, spec->max_nodes);
        return 0;
    }
    if (!s->in_step) {
        /* The batch script runs on the first node only: one ddprun there is a one-node job. */
        spec->min_nodes = spec->max_nodes = 1;
        line(s, "nnodes=1: batch step (no SLURM_STEP_ID) runs on one node; use srun "
                "--ntasks-per-node=1 ddprun for all nodes");
        return 0;
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = launch__env(fn, ctx, vars[i]);
        if (v == NULL)
            continue;
        /* Bounded as --nnodes is: a count no job has would pass here and fail only at the
         * rendezvous, as a job failure rather than a usage error. */
        int64_t x;
        int rc = ddp_parse_i64(v, 1, INT64_MAX, &x);
        if (rc == 0 && x > LAUNCH_MAX_NODES)
            return ddp_err_set(err, DDP_EENV,
                               "%s: %.*s nodes is more than a job may have (at most %d, as "
                               "--nnodes)",
                               vars[i], EQ, v, LAUNCH_MAX_NODES);
        int n = 0;
        if (env_int(vars[i], v, 1, LAUNCH_MAX_NODES, &n, err) < 0)
            return DDP_EENV;
        spec->min_nodes = spec->max_nodes = n;
        line(s, "nnodes=%d from %s=%s", n, vars[i], v);
        return 0;
    }
    if (listed > 0) {
        spec->min_nodes = spec->max_nodes = (int)listed;
        line(s, "nnodes=%zu from the length of the step's nodelist", listed);
    }
    return 0;
}

static int derive_node_rank(launch_spec_t *spec, launch_getenv_fn fn, void *ctx, launch_slurm_t *s,
                            ddp_err_t *err) {
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK)) {
        line(s, "node_rank=%d kept (given explicitly)", spec->node_rank);
    } else {
        const char *v = launch__env(fn, ctx, "SLURM_NODEID");
        if (v != NULL) {
            if (env_int("SLURM_NODEID", v, 0, INT32_MAX - 1, &spec->node_rank, err) < 0)
                return DDP_EENV;
            line(s, "node_rank=%d from SLURM_NODEID=%s", spec->node_rank, v);
        }
    }
    if (spec->node_rank >= spec->max_nodes)
        return ddp_err_set(err, DDP_EENV,
                           "node rank %d (SLURM_NODEID or --node_rank) is not below "
                           "the node count %d",
                           spec->node_rank, spec->max_nodes);
    return 0;
}

static int derive_rdzv(launch_spec_t *spec, launch_slurm_t *s, const char *step_var,
                       const char *nl_var, const char *nl, ddp_err_t *err) {
    int rc;
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ID)) {
        line(s, "rdzv_id=%.64s kept (given explicitly)", spec->rdzv_id);
    } else {
        char id[72];
        snprintf(id, sizeof id, "%s.%s", s->job_id, s->step_id);
        if ((rc = launch__str_set(&spec->rdzv_id, id)) < 0)
            return rc;
        if (s->in_step)
            line(s, "rdzv_id=%s from SLURM_JOB_ID=%s and %s=%s", id, s->job_id, step_var,
                 s->step_id);
        else
            line(s, "rdzv_id=%s from SLURM_JOB_ID=%s and the batch step", id, s->job_id);
    }
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_BACKEND)) {
        line(s, "rdzv_backend=%s kept (given explicitly)", spec->rdzv_backend);
    } else {
        if ((rc = launch__str_set(&spec->rdzv_backend, "c10d")) < 0)
            return rc;
        line(s, "rdzv_backend=c10d (the Slurm default)");
    }
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ENDPOINT)) {
        /* As given: an IPv6 address in brackets, the port only when there was one; a list of
         * etcd members as it was written. */
        const char *h = spec->rdzv_host ? spec->rdzv_host : "";
        int v6 = strchr(h, ':') != NULL && strchr(h, ',') == NULL;
        char port[16] = "";
        if (spec->rdzv_port >= 0)
            snprintf(port, sizeof port, ":%d", spec->rdzv_port);
        line(s, "rdzv_endpoint=%s%.96s%s%s kept (given explicitly)", v6 ? "[" : "", h,
             v6 ? "]" : "", port);
        return 0;
    }
    if (nl == NULL)
        return ddp_err_set(err, DDP_EENV,
                           "SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are unset: "
                           "no rendezvous host (give --rdzv_endpoint)");
    if ((rc = launch__str_set(&spec->rdzv_host, s->head)) < 0)
        return rc;
    spec->rdzv_port = s->port;
    line(s,
         "rdzv_endpoint=%.64s:%d from the first host of %s=%.40s, port %d+%d*(job %% %d)+step slot",
         s->head, s->port, nl_var, nl, LAUNCH_SLURM_PORT_BASE, LAUNCH_SLURM_STEP_SLOTS,
         LAUNCH_SLURM_JOB_SLOTS);
    return 0;
}

static int derive_nproc(launch_spec_t *spec, launch_getenv_fn fn, void *ctx, launch_slurm_t *s,
                        ddp_err_t *err) {
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_NPROC_PER_NODE)) {
        line(s, "nproc_per_node kept (given explicitly)");
        return 0;
    }
    const char *v = launch__env(fn, ctx, "SLURM_GPUS_ON_NODE");
    int n = 0;
    if (v != NULL && env_int("SLURM_GPUS_ON_NODE", v, 0, 65536, &n, err) < 0)
        return DDP_EENV;
    if (n > 0) {
        line(s, "nproc_per_node=%d from SLURM_GPUS_ON_NODE=%s", n, v);
    } else {
        /* Slurm's gres plugin sets the list: one worker per device it makes visible. */
        const char *var;
        v = ddp_devices_select(launch__env(fn, ctx, "HIP_VISIBLE_DEVICES"),
                               launch__env(fn, ctx, "CUDA_VISIBLE_DEVICES"), &var);
        n = ddp_devices_count(v);
        if (n > 0)
            line(s, "nproc_per_node=%d from %s=%.64s", n, var, v);
    }
    if (n > 0) {
        spec->nproc_kind = LAUNCH_NPROC_NUM;
        spec->nproc_per_node = n;
    } else {
        line(s, "nproc_per_node unchanged (no SLURM_GPUS_ON_NODE or CUDA_VISIBLE_DEVICES)");
    }
    return 0;
}

/* --rdzv_backend=etcd with --rdzv_conf etcd_candidates=K and no etcd_stores: the store candidates
 * are the first K hosts of the step's node list (node ranks 0..K-1, SLURM_NODEID) at the port this
 * job step's c10d store would use, so the other agents follow them without asking etcd
 * (docs/ARCHITECTURE.md "Candidates at known addresses"). The names are resolved by each agent. */
static int derive_etcd_stores(launch_spec_t *spec, launch_slurm_t *s, const launch_hostlist_t *hl,
                              const char *nl_var) {
    launch_rdzv_conf_t *c = &spec->rdzv_opts;
    if (spec->rdzv_backend == NULL || strcmp(spec->rdzv_backend, "etcd") != 0)
        return 0;
    if (c->etcd_stores[0]) {
        line(s, "etcd_stores kept (given explicitly)");
        return 0;
    }
    if (c->etcd_candidates <= 0 || hl->n == 0)
        return 0;
    size_t k = (size_t)c->etcd_candidates < hl->n ? (size_t)c->etcd_candidates : hl->n;
    if (k > AGENT_ETCD_STORES_MAX)
        k = AGENT_ETCD_STORES_MAX;
    char list[LAUNCH_ETCD_STORES_TEXT_MAX];
    size_t off = 0;
    for (size_t i = 0; i < k; i++) {
        int n =
            snprintf(list + off, sizeof list - off, "%s%s:%d", i ? "+" : "", hl->hosts[i], s->port);
        if (n < 0 || (size_t)n >= sizeof list - off) {
            line(s, "etcd_stores not derived: the first %zu hosts' names are too long", k);
            return 0;
        }
        off += (size_t)n;
    }
    memcpy(c->etcd_stores, list, off + 1);
    c->etcd_candidates = (int)k;
    line(s, "etcd_stores=%.96s from the first %zu hosts of %s (etcd_candidates), port %d", list, k,
         nl_var, s->port);
    return 0;
}

/* Long: the derivation steps in their documented order, one line each. */
int launch_slurm_derive(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                        launch_slurm_t *out, ddp_err_t *err) {
    launch_slurm_t local = {0};
    launch_slurm_t *s = out != NULL ? out : &local;
    launch_hostlist_t hl = {0};
    memset(s, 0, sizeof *s);
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    if (!launch_slurm_detect(getenv_fn, ctx))
        return 0;
    s->detected = 1;

    const char *job_var, *step_var;
    const char *job = env2(getenv_fn, ctx, "SLURM_JOB_ID", "SLURM_JOBID", &job_var);
    const char *step = env2(getenv_fn, ctx, "SLURM_STEP_ID", "SLURM_STEPID", &step_var);
    int64_t job_num, step_num = 0;
    if (ddp_parse_i64(job, 0, INT64_MAX, &job_num) < 0 || strlen(job) >= sizeof s->job_id)
        return ddp_err_set(err, DDP_EENV, "%s: '%.*s' is not a job number", job_var, EQ, job);
    snprintf(s->job_id, sizeof s->job_id, "%s", job);
    s->in_step = step != NULL;
    if (step != NULL) {
        if (ddp_parse_i64(step, 0, INT64_MAX, &step_num) < 0 || strlen(step) >= sizeof s->step_id)
            return ddp_err_set(err, DDP_EENV, "%s: '%.*s' is not a step number", step_var, EQ,
                               step);
        snprintf(s->step_id, sizeof s->step_id, "%s", step);
    } else {
        snprintf(s->step_id, sizeof s->step_id, "batch");
    }
    s->port = launch_slurm_port((uint64_t)job_num, s->in_step, (uint64_t)step_num);
    const char *rc_v = launch__env(getenv_fn, ctx, "SLURM_RESTART_COUNT");
    if (rc_v != NULL &&
        env_int("SLURM_RESTART_COUNT", rc_v, 0, INT32_MAX, &s->restart_count, err) < 0)
        return DDP_EENV;

    /* The head is the step's first node: a step may run on a subset of the job's nodes. */
    const char *nl_var = "SLURM_STEP_NODELIST";
    const char *nl = s->in_step ? launch__env(getenv_fn, ctx, nl_var) : NULL;
    if (nl == NULL)
        nl = launch__env(getenv_fn, ctx, nl_var = "SLURM_JOB_NODELIST");
    if (nl == NULL)
        nl = launch__env(getenv_fn, ctx, nl_var = "SLURM_NODELIST");
    int rc;
    if (nl != NULL) {
        ddp_err_t e = {0};
        if ((rc = launch_hostlist_parse(nl, &hl, &e)) < 0) {
            if (rc == -ENOMEM)
                return rc;
            return ddp_err_set(err, DDP_EENV, "%s: %s", nl_var, e.text);
        }
        snprintf(s->head, sizeof s->head, "%s", hl.hosts[0]);
    }

    if ((rc = derive_nnodes(spec, getenv_fn, ctx, s, hl.n, err)) < 0)
        goto out;
    if ((rc = check_one_task(getenv_fn, ctx, s, s->in_step ? spec->max_nodes : 0, err)) < 0)
        goto out;
    if ((rc = derive_node_rank(spec, getenv_fn, ctx, s, err)) < 0)
        goto out;
    if ((rc = derive_rdzv(spec, s, step_var, nl_var, nl, err)) < 0)
        goto out;
    if ((rc = derive_etcd_stores(spec, s, &hl, nl_var)) < 0)
        goto out;
    if ((rc = derive_nproc(spec, getenv_fn, ctx, s, err)) < 0)
        goto out;
    if (s->restart_count > 0)
        line(s, "requeued %d times (SLURM_RESTART_COUNT, visible to the workers)",
             s->restart_count);
out:
    launch_hostlist_free(&hl);
    if (rc == -ENOMEM)
        ddp_err_set(err, rc, "unable to derive the Slurm settings: %s", ddp_strerror(rc));
    return rc;
}

int launch_slurm_describe(const launch_slurm_t *s, ddp_buf_t *buf) {
    for (int i = 0; i < s->n_lines; i++) {
        int rc = ddp_buf_printf(buf, "slurm: %s\n", s->lines[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}
