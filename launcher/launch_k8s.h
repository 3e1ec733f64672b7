/* SPDX-License-Identifier: Apache-2.0
 * Kubernetes support for the launcher: the job's shape from the environment of a pod started by
 * the Kubeflow training operator (PyTorchJob), Kubeflow Trainer, an Indexed Job or a JobSet
 * (k8s.c; docs/kubernetes.md). Pure logic over a launch_getenv_fn. */
#ifndef LAUNCH_K8S_H
#define LAUNCH_K8S_H

#include "ddp_buf.h"
#include "ddp_err.h"
#include "launch_spec.h"

#define LAUNCH_K8S_MAX_LINES 8
#define LAUNCH_K8S_LINE_LEN 192

/* What launch_k8s_derive found, for --verbose. */
typedef struct launch_k8s {
    int detected;     /* KUBERNETES_SERVICE_HOST is set: this runs in a pod */
    const char *kind; /* "PyTorchJob", "Indexed Job", or NULL */
    int n_lines;      /* "nnodes=4 from WORLD_SIZE", ... */
    char lines[LAUNCH_K8S_MAX_LINES][LAUNCH_K8S_LINE_LEN];
} launch_k8s_t;

/* Fills the fields of spec that were not given (flags, PET_*) from a pod's environment:
 *   MASTER_ADDR + WORLD_SIZE + RANK (a non-elastic PyTorchJob): nnodes = WORLD_SIZE,
 *     node_rank = RANK, master_addr/port = MASTER_ADDR/MASTER_PORT, rdzv_backend static;
 *   else JOB_COMPLETION_INDEX (an Indexed Job, a JobSet): node_rank; a JobSet pod of replica
 *     JOB_INDEX > 0 needs --node_rank (DDP_EENV saying so).
 * Outside a pod (no KUBERNETES_SERVICE_HOST) it changes nothing. Returns 0, DDP_EENV naming the
 * variable whose value is wrong, or -ENOMEM. */
int launch_k8s_derive(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx, launch_k8s_t *out,
                      ddp_err_t *err);

/* Appends out's lines to buf, each "kubernetes <kind>: ..." and '\n'. 0 or -ENOMEM. */
int launch_k8s_describe(const launch_k8s_t *k, ddp_buf_t *buf);

#endif
