/* SPDX-License-Identifier: Apache-2.0
 * ncclprof_acct.c: one rank's GPU time cut by its collectives into compute (between them) and
 * wait (inside them), counted and published in batches. Pure: no clock, no lock, no I/O. */
#include "ncclprof_int.h"

#include <string.h>

void ncclprof__acct_init(ncclprof_acct_t *a, uint64_t interval_ns, ncclprof_publish_fn publish) {
    memset(a, 0, sizeof *a);
    a->interval_ns = interval_ns;
    a->publish = publish;
}

void ncclprof__acct_flush(ncclprof_acct_t *a) {
    if (a->steps == 0 && a->compute_ns == 0 && a->wait_ns == 0)
        return;
    if (a->publish != NULL)
        a->publish(a->compute_ns, a->wait_ns, a->steps);
    a->compute_ns = a->wait_ns = 0;
    a->steps = 0;
    a->published_at_ns = a->last_end_ns;
}

void ncclprof__acct_op(ncclprof_acct_t *a, uint64_t start_ns, uint64_t end_ns) {
    if (start_ns == 0 || end_ns == 0)
        return;
    if (end_ns < start_ns)
        end_ns = start_ns;
    uint64_t compute = 0, wait;
    if (a->last_end_ns == 0) {
        /* The first operation: the time before it (model set-up, data loading) is not a step's
         * compute, and the same on every rank anyway. */
        wait = end_ns - start_ns;
        a->published_at_ns = end_ns;
    } else if (start_ns >= a->last_end_ns) {
        compute = start_ns - a->last_end_ns;
        wait = end_ns - start_ns;
    } else {
        /* Overlapping the previous interval: only the part past its end is new waiting. */
        wait = end_ns > a->last_end_ns ? end_ns - a->last_end_ns : 0;
    }
    if (end_ns > a->last_end_ns)
        a->last_end_ns = end_ns;
    a->compute_ns += compute;
    a->wait_ns += wait;
    a->steps++;
    a->total_compute_ns += compute;
    a->total_wait_ns += wait;
    a->total_steps++;
    if (a->last_end_ns - a->published_at_ns >= a->interval_ns)
        ncclprof__acct_flush(a);
}
