/* SPDX-License-Identifier: Apache-2.0
 * bench_rdzv_join: N simulated agents (rdzv_sim.h) join one rendezvous run on a ddp-rendezvous
 * daemon started with --no-auth; reports the time from the last JOIN sent to the last reply
 * received (the round closes at once when max_nodes = N have joined).
 * Usage: bench_rdzv_join PORT N [RUNS]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_stats.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "rdzv_sim.h"

/* One run: returns ms from the last JOIN written to the last reply read, or -1. */
static double run_once(uint16_t port, int n, int run) {
    rdzv_join_req_t req;
    memset(&req, 0, sizeof req);
    snprintf(req.run_id, sizeof req.run_id, "bench-%d-%d-%d", (int)getpid(), n, run);
    req.want_node_rank = -1;
    req.nproc = 8;
    req.master_port = 29500;
    req.cfg.min_nodes = req.cfg.max_nodes = n;
    req.cfg.join_timeout_ms = 60000;
    rdzv_sim_t s;
    double t = -1;
    if (rdzv_sim_init(&s, port, &req, 0, 0) == 0 && rdzv_sim_add(&s, (size_t)n) >= 0) {
        rdzv_sim_expect(&s, 0);
        if (rdzv_sim_join(&s, 0, (size_t)n) == 0) {
            uint64_t t0 = ddp_now_ns();
            if (rdzv_sim_wait_assigned(&s, (size_t)n, t0 + 30000000000ull) == 0)
                t = (double)(s.last_assigned_ns - t0) / 1e6;
        }
    }
    if (t < 0)
        fprintf(stderr, "bench_rdzv_join: %s\n", s.err);
    rdzv_sim_free(&s);
    return t;
}

int main(int argc, char **argv) {
    int64_t port, n, runs = 5;
    if (argc < 3 || ddp_parse_i64(argv[1], 1, 65535, &port) < 0 ||
        ddp_parse_i64(argv[2], 1, 65536, &n) < 0 ||
        (argc > 3 && ddp_parse_i64(argv[3], 1, 1000, &runs) < 0)) {
        fprintf(stderr, "usage: bench_rdzv_join PORT N [RUNS]\n");
        return 2;
    }
    rdzv_sim_raise_nofile();
    double *v = calloc((size_t)runs, sizeof *v);
    for (int r = 0; r < runs; r++) {
        v[r] = run_once((uint16_t)port, (int)n, r);
        if (v[r] < 0) {
            fprintf(stderr, "bench_rdzv_join: run %d failed\n", r);
            return 1;
        }
    }
    double best = v[0];
    for (int r = 1; r < runs; r++)
        best = v[r] < best ? v[r] : best;
    printf("| %d agents join one run: last JOIN -> every reply | %.2f ms median of %d (min %.2f) "
           "| target < 1000 ms |\n",
           (int)n, bench_median(v, (int)runs), (int)runs, best);
    free(v);
    return 0;
}
