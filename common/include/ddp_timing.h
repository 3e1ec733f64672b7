/* SPDX-License-Identifier: Apache-2.0
 * ddp_timing: the record in which a worker publishes where its steps go (compute against waiting
 * in collectives), written by the worker library (worker_template/ddpw_timing.c) and read by the
 * agent (agent/straggler.c) from the file named in DDPRUN_TIMING_FILE.
 *
 * The file holds one record of DDP_TIMING_LEN bytes at offset 0, rewritten in place by pwrite:
 *   "t1 CCCCCCCCCCCCCCCCCCCC WWWWWWWWWWWWWWWWWWWW SSSSSSSSSS HHHHHHHH\n"
 * t1 is the format's version; C the compute time and W the time waited in collectives, both in
 * nanoseconds (20 zero-padded decimal digits), S the steps timed (10 digits), all three monotonic
 * totals since the process started; H the FNV-1a hash (32 bits, 8 lowercase hex digits) of the
 * 53 bytes before it. The width is fixed, so a rewrite never leaves bytes of the previous one
 * behind; the hash refuses a read that met a write halfway (the reader keeps its last good
 * record). */
#ifndef DDP_TIMING_H
#define DDP_TIMING_H

#include <stddef.h>
#include <stdint.h>

#define DDP_TIMING_LEN 65

typedef struct ddp_timing {
    uint64_t compute_ns; /* time spent between collectives */
    uint64_t wait_ns;    /* time spent inside collectives */
    uint32_t steps;      /* steps these totals cover */
} ddp_timing_t;

/* Writes t as one record into out (exactly DDP_TIMING_LEN bytes, no terminator). Totals past
 * the field widths wrap (a reader works on differences). */
void ddp_timing_format(const ddp_timing_t *t, char out[DDP_TIMING_LEN]);

/* Reads one record from the len bytes at s (a file's head). Returns 0, or -EINVAL for anything
 * but a whole, well-formed record whose hash matches. */
int ddp_timing_parse(const char *s, size_t len, ddp_timing_t *t);

#endif
