/* SPDX-License-Identifier: Apache-2.0
 * How the launcher reads its environment: through a launch_getenv_fn, so that the tests of the
 * Slurm and Kubernetes derivations replay recorded environments, with an empty variable read as
 * no value; and what a pod's environment says before it is derived (the parser's checks ask, and
 * k8s.c, which derives through the parser, need not be asked). */
#include <stdlib.h>

#include "ddp_contract.h"
#include "launch_int.h"
#include "launch_spec.h"

const char *launch_getenv_process(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

const char *launch__env(launch_getenv_fn fn, void *ctx, const char *name) {
    const char *v = fn(ctx, name);
    return v != NULL && *v != '\0' ? v : NULL;
}

int launch__k8s_sets_nnodes(launch_getenv_fn getenv_fn, void *ctx) {
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    return launch__env(getenv_fn, ctx, "KUBERNETES_SERVICE_HOST") != NULL &&
           launch__env(getenv_fn, ctx, DDP_ENV_MASTER_ADDR) != NULL &&
           launch__env(getenv_fn, ctx, DDP_ENV_WORLD_SIZE) != NULL &&
           launch__env(getenv_fn, ctx, DDP_ENV_RANK) != NULL;
}
