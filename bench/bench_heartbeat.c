/* SPDX-License-Identifier: Apache-2.0
 * bench_heartbeat: the cost of ddpw_heartbeat, each figure against a reference measured in the
 * same run, in interleaved runs (median of RUNS):
 *   rate-limited  ns per ddpw_heartbeat call at the default interval (100 ms: nearly every call
 *                 only reads the coarse clock) vs a bare clock_gettime(CLOCK_MONOTONIC_COARSE)
 *   every beat    ns per call with the interval set to 0 (each beat is one pwrite) vs a bare
 *                 pwrite of the same 21 bytes at offset 0 of another file in the same directory
 * Usage: bench_heartbeat DIR [CALLS [WRITES [RUNS]]] (defaults 10000000, 1000000, 5): the files
 * are made in DIR and removed at the end. Prints markdown table rows. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "ddpw_int.h"

#define MAX_RUNS 31

static volatile int64_t g_sink; /* keeps the bare loops from being optimized away */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_heartbeat: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ns per ddpw_heartbeat call over n calls with steps from 0. */
static double time_beats(long n) {
    ddp_err_t e;
    ddp_err_clear(&e);
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        if (ddpw_heartbeat(i, &e) != 0) {
            fprintf(stderr, "bench_heartbeat: %s\n", e.text);
            exit(1);
        }
    return (now_ns() - t0) / (double)n;
}

static double time_clock(long n) {
    struct timespec ts;
    int64_t sum = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        sum += ts.tv_nsec;
    }
    g_sink = sum;
    return (now_ns() - t0) / (double)n;
}

static double time_pwrite(int fd, long n) {
    char text[DDPW_HEARTBEAT_LEN];
    memset(text, '0', sizeof text);
    text[sizeof text - 1] = '\n';
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        text[sizeof text - 2] = (char)('0' + i % 10);
        if (pwrite(fd, text, sizeof text, 0) != (ssize_t)sizeof text)
            die("pwrite");
    }
    return (now_ns() - t0) / (double)n;
}

/* The file system of dir, for the table ("tmpfs", "ext4", ...). */
static const char *fs_name(const char *dir) {
    struct statfs s;
    if (statfs(dir, &s) != 0)
        return "unknown";
    switch ((unsigned long)s.f_type) {
    case 0x01021994: return "tmpfs";
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlayfs";
    default: return "other";
    }
}

/* An empty 0600 file at path, as the agent makes it; returns a descriptor open for writing. */
static int make_file(const char *path) {
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        die(path);
    return fd;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_heartbeat DIR [CALLS [WRITES [RUNS]]]\n");
        return 2;
    }
    long calls = argc > 2 ? atol(argv[2]) : 10000000, writes = argc > 3 ? atol(argv[3]) : 1000000;
    int runs = argc > 4 ? atoi(argv[4]) : 5;
    if (calls < 1 || writes < 1 || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "bench_heartbeat: CALLS and WRITES >= 1, RUNS in [1, %d]\n", MAX_RUNS);
        return 2;
    }
    char hb[4096], ref[4096];
    snprintf(hb, sizeof hb, "%s/heartbeat", argv[1]);
    snprintf(ref, sizeof ref, "%s/reference", argv[1]);
    close(make_file(hb));
    int rfd = make_file(ref);
    setenv("DDPRUN_HEARTBEAT_FILE", hb, 1);
    double beat[MAX_RUNS], clk[MAX_RUNS], wbeat[MAX_RUNS], wref[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        ddpw__heartbeat_reset();
        beat[r] = time_beats(calls);
        clk[r] = time_clock(calls);
        ddpw__heartbeat_set_interval_ns(0);
        wbeat[r] = time_beats(writes);
        wref[r] = time_pwrite(rfd, writes);
    }
    ddpw__heartbeat_reset();
    close(rfd);
    unlink(hb);
    unlink(ref);
    double b = bench_median(beat, runs), c = bench_median(clk, runs);
    double wb = bench_median(wbeat, runs), wr = bench_median(wref, runs);
    printf("| ddpw_heartbeat, rate-limited (%ld calls, at most 1 write per %d ms) | %.1f ns | "
           "bare clock_gettime(CLOCK_MONOTONIC_COARSE): %.1f ns | %.2fx |\n",
           calls, DDPW_HEARTBEAT_INTERVAL_MS, b, c, b / c);
    printf("| ddpw_heartbeat, interval 0 (%ld calls, each one pwrite, %s) | %.1f ns | "
           "bare pwrite of %d bytes at offset 0: %.1f ns | %.2fx |\n",
           writes, fs_name(argv[1]), wb, DDPW_HEARTBEAT_LEN, wr, wb / wr);
    return 0;
}
