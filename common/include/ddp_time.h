/* SPDX-License-Identifier: Apache-2.0
 * Monotonic clock helpers: every deadline in ddprun is computed from these. */
#ifndef DDP_TIME_H
#define DDP_TIME_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC. */
static inline uint64_t ddp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Nanoseconds on CLOCK_MONOTONIC (benchmarks). */
static inline uint64_t ddp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
