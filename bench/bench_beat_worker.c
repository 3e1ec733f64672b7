/* SPDX-License-Identifier: Apache-2.0
 * bench_beat_worker: the worker of bench/hang.sh. It beats the agent's heartbeat at a fixed rate
 * for a while, then either exits 0 or stops beating and waits to be killed:
 *
 *   bench_beat_worker file RATE_HZ RUN_MS     utimensat($DDPRUN_HEARTBEAT_FILE) RATE_HZ times a
 *                                             second for RUN_MS, then exit 0
 *   bench_beat_worker line RATE_HZ RUN_MS     one line on stdout per beat instead (for
 *                                             --heartbeat_on_output), then exit 0
 *   bench_beat_worker none RATE_HZ RUN_MS     sleeps RUN_MS (the reference: no beats at all)
 *   bench_beat_worker hang RATE_HZ RUN_MS OUT file beats for RUN_MS, writes the CLOCK_REALTIME of
 *                                             its last beat to OUT (seconds.nanoseconds), then
 *                                             sleeps until killed (at most 600 s)
 *
 * Without DDPRUN_HEARTBEAT_FILE (supervision off: the reference runs) the file beats go to
 * $BEAT_DIR/beat.$LOCAL_RANK, created here, so the workers do the same work either way.
 * Beats are paced on CLOCK_MONOTONIC with absolute sleeps, so the rate holds under load. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void add_ns(struct timespec *t, long ns) {
    t->tv_nsec += ns;
    while (t->tv_nsec >= 1000000000L) {
        t->tv_nsec -= 1000000000L;
        t->tv_sec++;
    }
}

static int before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "hang") == 0 && argc < 5)) {
        fprintf(stderr, "usage: bench_beat_worker file|line|none|hang RATE_HZ RUN_MS [OUT]\n");
        return 2;
    }
    const char *mode = argv[1];
    long rate = strtol(argv[2], NULL, 10), run_ms = strtol(argv[3], NULL, 10);
    if (rate <= 0 || rate > 1000000 || run_ms < 0) {
        fprintf(stderr, "bench_beat_worker: bad RATE_HZ or RUN_MS\n");
        return 2;
    }
    int beats_file = strcmp(mode, "file") == 0 || strcmp(mode, "hang") == 0;
    int beats_line = strcmp(mode, "line") == 0;
    const char *hb = getenv("DDPRUN_HEARTBEAT_FILE");
    char own[4096];
    if (beats_file && (hb == NULL || *hb == '\0')) {
        const char *dir = getenv("BEAT_DIR"), *lr = getenv("LOCAL_RANK");
        if (dir == NULL || *dir == '\0') {
            fprintf(stderr,
                    "bench_beat_worker: neither DDPRUN_HEARTBEAT_FILE nor BEAT_DIR is set\n");
            return 2;
        }
        snprintf(own, sizeof own, "%s/beat.%s", dir, lr != NULL ? lr : "0");
        int fd = open(own, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            fprintf(stderr, "bench_beat_worker: %s: %s\n", own, strerror(errno));
            return 1;
        }
        close(fd);
        hb = own;
    }
    struct timespec now, end, next;
    clock_gettime(CLOCK_MONOTONIC, &now);
    end = next = now;
    add_ns(&end, run_ms * 1000000L);
    if (!beats_file && !beats_line) {
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL);
        return 0;
    }
    long period = 1000000000L / rate;
    struct timespec last_beat = {0, 0};
    unsigned long n = 0;
    while (before(&next, &end)) {
        if (beats_file) {
            if (utimensat(AT_FDCWD, hb, NULL, 0) < 0) {
                fprintf(stderr, "bench_beat_worker: %s: %s\n", hb, strerror(errno));
                return 1;
            }
            clock_gettime(CLOCK_REALTIME, &last_beat);
        } else {
            printf("beat %lu\n", n);
            fflush(stdout);
        }
        n++;
        add_ns(&next, period);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
    }
    if (strcmp(mode, "hang") != 0)
        return 0;
    FILE *f = fopen(argv[4], "w");
    if (f == NULL) {
        fprintf(stderr, "bench_beat_worker: %s: %s\n", argv[4], strerror(errno));
        return 1;
    }
    fprintf(f, "%lld.%09ld\n", (long long)last_beat.tv_sec, last_beat.tv_nsec);
    fclose(f);
    sleep(600);
    return 0;
}
