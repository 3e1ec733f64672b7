/* SPDX-License-Identifier: Apache-2.0
 * How the launcher reads its environment: through a launch_getenv_fn, so that the tests of the
 * Slurm and Kubernetes derivations replay recorded environments, with an empty variable read as
 * no value. */
#include <stdlib.h>

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
