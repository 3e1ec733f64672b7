/* SPDX-License-Identifier: Apache-2.0
 * ncclprof_int.h: the inside of libnccl-profiler-ddprun.so, NCCL's profiler plugin that times a
 * PyTorch (or any NCCL) job's collectives per rank for the agent's straggler detection.
 *   ncclprof_acct.c: the accounting, pure: busy intervals of the GPU in, compute and wait out.
 *   ncclprof.c: the NCCL side: ncclProfiler_v5, one operation per collective or p2p event,
 *     its channels' GPU timestamps, handed to the accounting when the operation is complete. */
#ifndef NCCLPROF_INT_H
#define NCCLPROF_INT_H

#include <stdint.h>

#include "nccl_profiler.h"

/* ---- ncclprof_acct.c ---- */

/* How often the counters go to the agent, in GPU time: the agent compares ranks over windows of
 * seconds, and one publication per 100 ms keeps the cost per collective at a few adds. */
#define NCCLPROF_PUBLISH_INTERVAL_NS 100000000ULL

/* Where the counters go: ddpw_timing_add in the plugin, a recorder in the unit tests. */
typedef void (*ncclprof_publish_fn)(uint64_t compute_ns, uint64_t wait_ns, uint32_t steps);

/* The GPU timeline of one rank as its collectives cut it: wait is the time inside a collective
 * (the union of their intervals), compute the time between the end of one and the start of the
 * next. Every time is the GPU's globaltimer, in ns. One operation is one step. Not thread-safe:
 * its owner (the accounted communicator) serialises the calls. */
typedef struct ncclprof_acct {
    uint64_t last_end_ns;     /* end of the newest busy interval; 0 before the first operation */
    uint64_t published_at_ns; /* last_end_ns at the last publication */
    uint64_t interval_ns;     /* NCCLPROF_PUBLISH_INTERVAL_NS, or a test's value */
    uint64_t compute_ns, wait_ns;
    uint32_t steps; /* not yet published */
    uint64_t total_compute_ns, total_wait_ns, total_steps;
    ncclprof_publish_fn publish;
} ncclprof_acct_t;

/* Sets up *a (caller memory) to publish through publish every interval_ns of GPU time. */
void ncclprof__acct_init(ncclprof_acct_t *a, uint64_t interval_ns, ncclprof_publish_fn publish);

/* One operation that kept the GPU in a collective from start_ns to end_ns, in completion order.
 * An operation that overlaps the previous one (collectives of one group, a late completion) adds
 * only its time past the previous end; an operation without timestamps (0) is ignored. Publishes
 * when the interval has passed since the last publication. */
void ncclprof__acct_op(ncclprof_acct_t *a, uint64_t start_ns, uint64_t end_ns);

/* Publishes what is not yet published (at the communicator's end), if anything. */
void ncclprof__acct_flush(ncclprof_acct_t *a);

/* ---- ncclprof.c ---- */

/* The plugin's entry points as NCCL finds them (the library exports these symbols alone):
 * NCCL looks for the newest version it knows first. */
extern ncclProfiler_v5_t ncclProfiler_v5;
extern ncclProfiler_v4_t ncclProfiler_v4;

/* Where the plugin publishes (NULL: ddpw_timing_add); the unit tests give a recorder. */
void ncclprof__set_publish(ncclprof_publish_fn publish, uint64_t interval_ns);

#endif
