/* SPDX-License-Identifier: Apache-2.0
 * launch_k8s_derive: the job's shape from the environment Kubernetes' ways of launching torchrun
 * give a pod, as Slurm's is derived from SLURM_* (launch_k8s.h). Elastic launches (the Kubeflow
 * training operator's elasticPolicy, Kubeflow Trainer's torch runtime) set PET_* variables, which
 * the flag parser reads already; this covers the rest:
 *   - a PyTorchJob with a Master replica (non-elastic): MASTER_ADDR, MASTER_PORT, WORLD_SIZE (the
 *     number of pods) and RANK (this pod's: master 0, worker i at i + 1), which torchrun's users
 *     pass as --nnodes/--node_rank/--master_addr/--master_port;
 *   - an Indexed Job or a JobSet: JOB_COMPLETION_INDEX is this pod's node rank.
 * Pure logic over a launch_getenv_fn, so tests replay the operators' documented environments. */
#include "launch_k8s.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ddp_contract.h"
#include "ddp_parse.h"
#include "launch_int.h"

static void line(launch_k8s_t *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(launch_k8s_t *k, const char *fmt, ...) {
    if (k->n_lines >= LAUNCH_K8S_MAX_LINES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->lines[k->n_lines++], LAUNCH_K8S_LINE_LEN, fmt, ap);
    va_end(ap);
}

/* Sets option id from var unless the user gave it; records the derivation. */
static int derive(launch_spec_t *spec, launch_k8s_t *k, launch_opt_t id, const char *flag,
                  const char *var, const char *val, ddp_err_t *err) {
    if (LAUNCH_GIVEN(spec, id)) {
        line(k, "%s given: %s=%.64s not used", flag, var, val);
        return 0;
    }
    int rc = launch__opt_from_env(spec, id, var, val, err);
    if (rc == DDP_EUSAGE) { /* the variable's value is wrong, not a flag */
        err->code = DDP_EENV;
        return DDP_EENV;
    }
    if (rc < 0)
        return rc;
    line(k, "%s=%.64s from %s", flag, val, var);
    return 0;
}

int launch_k8s_derive(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx, launch_k8s_t *out,
                      ddp_err_t *err) {
    launch_k8s_t local = {0};
    launch_k8s_t *k = out != NULL ? out : &local;
    memset(k, 0, sizeof *k);
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    if (launch__env(getenv_fn, ctx, "KUBERNETES_SERVICE_HOST") == NULL)
        return 0; /* not in a pod */
    k->detected = 1;
    const char *maddr = launch__env(getenv_fn, ctx, DDP_ENV_MASTER_ADDR);
    const char *mport = launch__env(getenv_fn, ctx, DDP_ENV_MASTER_PORT);
    const char *world = launch__env(getenv_fn, ctx, DDP_ENV_WORLD_SIZE);
    const char *rank = launch__env(getenv_fn, ctx, DDP_ENV_RANK);
    const char *index = launch__env(getenv_fn, ctx, "JOB_COMPLETION_INDEX");
    int rc = 0;
    if (maddr != NULL && world != NULL && rank != NULL) {
        /* The training operator's non-elastic PyTorchJob: one ddprun per pod, the pods are the
         * nodes, the master pod hosts the static rendezvous at MASTER_ADDR:MASTER_PORT. */
        k->kind = "PyTorchJob";
        rc = derive(spec, k, LAUNCH_OPT_NNODES, "nnodes", DDP_ENV_WORLD_SIZE, world, err);
        if (rc == 0)
            rc = derive(spec, k, LAUNCH_OPT_NODE_RANK, "node_rank", DDP_ENV_RANK, rank, err);
        if (rc == 0 && spec->node_rank >= spec->max_nodes)
            rc =
                ddp_err_set(err, DDP_EENV, "%s=%d is not below %s=%d",
                            LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK) ? "--node_rank" : DDP_ENV_RANK,
                            spec->node_rank,
                            LAUNCH_GIVEN(spec, LAUNCH_OPT_NNODES) ? "--nnodes" : DDP_ENV_WORLD_SIZE,
                            spec->max_nodes);
        if (rc == 0)
            rc = derive(spec, k, LAUNCH_OPT_MASTER_ADDR, "master_addr", DDP_ENV_MASTER_ADDR, maddr,
                        err);
        if (rc == 0 && mport != NULL)
            rc = derive(spec, k, LAUNCH_OPT_MASTER_PORT, "master_port", DDP_ENV_MASTER_PORT, mport,
                        err);
        if (rc == 0 && !LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_BACKEND) &&
            (rc = launch__opt_from_env(spec, LAUNCH_OPT_RDZV_BACKEND, "rdzv_backend", "static",
                                       err)) == 0)
            line(k,
                 "rdzv_backend=static (the master pod hosts the store at " DDP_ENV_MASTER_ADDR ")");
    } else if (index != NULL) {
        /* An Indexed Job (or a JobSet's): the completion index is the pod's place. */
        k->kind = "Indexed Job";
        const char *job_index = launch__env(getenv_fn, ctx, "JOB_INDEX");
        int64_t ji = 0;
        if (job_index != NULL && ddp_parse_i64(job_index, 0, INT32_MAX, &ji) == 0 && ji > 0 &&
            !LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK))
            return ddp_err_set(
                err, DDP_EENV,
                "JOB_INDEX=%.32s: this pod is in a JobSet's replica %lld, whose pods' "
                "count ddprun cannot see; pass --node_rank (e.g. "
                "JOB_INDEX * pods per job + JOB_COMPLETION_INDEX)",
                job_index, (long long)ji);
        int from_index = !LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK);
        rc = derive(spec, k, LAUNCH_OPT_NODE_RANK, "node_rank", "JOB_COMPLETION_INDEX", index, err);
        /* The flag parser checked a given --node_rank against the node count; an index past the
         * job's nodes would start workers with RANK >= WORLD_SIZE (an Indexed Job whose
         * completions outnumber --nnodes), so it gets the same check. */
        if (rc == 0 && from_index && spec->node_rank >= spec->max_nodes)
            rc = ddp_err_set(err, DDP_EENV,
                             "JOB_COMPLETION_INDEX=%d is not below the node count %d (--nnodes)",
                             spec->node_rank, spec->max_nodes);
    } else {
        line(k, "in a pod, without " DDP_ENV_MASTER_ADDR "/" DDP_ENV_WORLD_SIZE "/" DDP_ENV_RANK
                " or JOB_COMPLETION_INDEX: the "
                "flags and PET_* variables alone set the job");
    }
    return rc;
}

int launch_k8s_describe(const launch_k8s_t *k, ddp_buf_t *buf) {
    for (int i = 0; i < k->n_lines; i++) {
        int rc = ddp_buf_printf(buf, "kubernetes%s%s: %s\n", k->kind ? " " : "",
                                k->kind ? k->kind : "", k->lines[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}
