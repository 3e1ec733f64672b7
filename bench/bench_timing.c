/* SPDX-License-Identifier: Apache-2.0
 * bench_timing: what the worker library's collective timing adds to each collective: two reads
 * of CLOCK_MONOTONIC (before and after the collective) and one ddpw_timing_add (three atomic adds
 * and a coarse-clock read; one pwrite per 100 ms into a real DDPRUN_TIMING_FILE), in ns per
 * collective, median of RUNS runs of CALLS calls.
 * Usage: bench_timing DIR [CALLS [RUNS]] (defaults 10000000, 5): the file is made in DIR and
 * removed at the end. Prints one markdown table row. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "ddp_time.h"
#include "ddpw_int.h"

#define MAX_RUNS 31

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_timing DIR [CALLS [RUNS]]\n");
        return 2;
    }
    long calls = argc > 2 ? atol(argv[2]) : 10000000;
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    if (calls <= 0 || runs <= 0 || runs > MAX_RUNS) {
        fprintf(stderr, "bench_timing: CALLS > 0 and RUNS in 1..%d\n", MAX_RUNS);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_timing.file", argv[1]);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench_timing: %s: %s\n", path, strerror(errno));
        return 1;
    }
    close(fd);
    setenv("DDPRUN_TIMING_FILE", path, 1);
    ddpw__timing_reset();
    double v[MAX_RUNS];
    uint64_t last_end = ddp_now_ns();
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = ddp_now_ns();
        for (long i = 0; i < calls; i++) {
            /* As ddpw.c's coll_timed around a collective that takes no time. */
            uint64_t a = ddp_now_ns(), b = ddp_now_ns();
            ddpw_timing_add(a - last_end, b - a, 1);
            last_end = b;
        }
        v[r] = (double)(ddp_now_ns() - t0) / (double)calls;
    }
    ddpw_timing_flush();
    unlink(path);
    printf("| collective timing (%ld calls, median of %d) | %.1f ns per collective |\n", calls,
           runs, bench_median(v, runs));
    return 0;
}
