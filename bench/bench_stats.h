/* bench_stats.h: the statistics the benchmark programs share (header only: each bench is one
 * source file linked on its own). */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stdlib.h>

static inline int bench_cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of v[0..n) (n > 0); sorts v. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
