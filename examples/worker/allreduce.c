/* SPDX-License-Identifier: Apache-2.0
 * A minimal worker on libddpw: every rank contributes its rank + 1, allreduces the sum and checks
 * it against the world size's triangle number. Build it against an installed libddpw-dev:
 *
 *   cc -o allreduce allreduce.c $(pkg-config --cflags --libs ddpw)
 *   ddprun --standalone --nproc_per_node=2 ./allreduce
 */
#include <stdio.h>

#include "ddpw.h"

int main(void) {
    ddp_err_t err;
    ddp_err_clear(&err);
    ddpw_t *w;
    if (ddpw_init(&w, NULL, &err) != 0) {
        fprintf(stderr, "allreduce: %s\n", err.text);
        ddpw_record_error(err.text); /* the agent's failure summary shows it */
        return 1;
    }
    int rank = ddpw_rank(w), world = ddpw_world_size(w);
    float value = (float)(rank + 1);
    int rc = ddpw_allreduce(w, &value, 1, DDPW_SUM, &err);
    if (rc == 0)
        rc = ddpw_barrier(w, &err);
    if (rc != 0) {
        fprintf(stderr, "allreduce: rank %d: %s\n", rank, err.text);
        ddpw_record_error(err.text);
        ddpw_free(w);
        return 1;
    }
    float expect = (float)world * (float)(world + 1) / 2.0f;
    printf("rank %d/%d: %s allreduce sum %g (expected %g)\n", rank, world,
           ddpw_backend_name(ddpw_backend(w)), value, expect);
    ddpw_free(w);
    return value == expect ? 0 : 1;
}
