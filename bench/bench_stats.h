/* SPDX-License-Identifier: Apache-2.0
 * bench_stats.h: the statistics the benchmark programs share, and their reading of another
 * process's memory (header only: each bench is one source file linked on its own). */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int bench_cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of v[0..n) (n > 0); sorts v. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A "Vm...:" field of /proc/PID/status (e.g. "VmRSS"), in KiB, or -1. */
static inline long bench_proc_kib(int pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            v = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return v;
}

#endif
