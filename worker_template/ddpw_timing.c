/* SPDX-License-Identifier: Apache-2.0
 * ddpw_timing.c: the worker's compute and collective-wait totals, published for the agent's
 * straggler detection. Every ddpw_timing_add adds to three process-wide atomic totals; at most
 * once per DDPW_TIMING_INTERVAL_MS one pwrite puts them, as the record of ddp_timing.h, at offset
 * 0 of the file named in DDPRUN_TIMING_FILE (an existing regular file the agent made). */
#include "ddpw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_timing.h"

enum { TM_UNOPENED = 0, TM_ON = 1, TM_OFF = 2 };

/* The fast path adds to the totals and reads mode and next_ns without a lock; opening and
 * writing hold mu, so the fd is never closed under a writer. Callers may be any thread: the
 * library's collectives, or a profiler plugin's callbacks. */
static struct {
    pthread_mutex_t mu;
    _Atomic int mode;            /* TM_*: OFF after an error or without the variable */
    _Atomic int64_t next_ns;     /* coarse monotonic time from which the next write may go */
    _Atomic int64_t interval_ns; /* DDPW_TIMING_INTERVAL_MS, or a test's value */
    _Atomic uint64_t compute_ns, wait_ns;
    _Atomic uint32_t steps;
    int fd; /* under mu */
} tm = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .mode = TM_UNOPENED,
    .interval_ns = DDPW_TIMING_INTERVAL_MS * 1000000LL,
    .fd = -1,
};

static int64_t coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Under mu: opens DDPRUN_TIMING_FILE, or turns publishing off (no variable, or a file that is a
 * link, not a regular file or cannot be opened: the totals still count, nothing is written). */
static void tm_open(void) {
    const char *path = getenv(DDP_ENV_TIMING_FILE);
    atomic_store(&tm.mode, TM_OFF);
    if (path == NULL || *path == '\0')
        return;
    /* O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever. */
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    tm.fd = fd;
    atomic_store(&tm.mode, TM_ON);
}

/* Under mu: one pwrite of the totals. A failed write turns publishing off for good: a job never
 * stops because of its timing. */
static void tm_write(int64_t now) {
    ddp_timing_t t = {atomic_load(&tm.compute_ns), atomic_load(&tm.wait_ns),
                      atomic_load(&tm.steps)};
    char rec[DDP_TIMING_LEN];
    ddp_timing_format(&t, rec);
    if (pwrite(tm.fd, rec, sizeof rec, 0) == (ssize_t)sizeof rec) {
        atomic_store_explicit(&tm.next_ns, now + atomic_load(&tm.interval_ns),
                              memory_order_relaxed);
        return;
    }
    close(tm.fd);
    tm.fd = -1;
    atomic_store(&tm.mode, TM_OFF);
}

/* The slow path: opens the file on first use, then writes when the interval has passed (another
 * thread may have written meanwhile) or, with force, at once. */
static void publish_locked(int force) {
    pthread_mutex_lock(&tm.mu);
    if (atomic_load(&tm.mode) == TM_UNOPENED)
        tm_open();
    if (atomic_load(&tm.mode) == TM_ON) {
        int64_t now = coarse_ns();
        if (force || now >= atomic_load(&tm.next_ns))
            tm_write(now);
    }
    pthread_mutex_unlock(&tm.mu);
}

void ddpw_timing_add(uint64_t compute_ns, uint64_t wait_ns, uint32_t steps) {
    atomic_fetch_add_explicit(&tm.compute_ns, compute_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&tm.wait_ns, wait_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&tm.steps, steps, memory_order_relaxed);
    int mode = atomic_load_explicit(&tm.mode, memory_order_acquire);
    if (mode == TM_OFF)
        return;
    /* The common case: written less than an interval ago. The totals wait for the next write. */
    if (mode == TM_ON && coarse_ns() < atomic_load_explicit(&tm.next_ns, memory_order_relaxed))
        return;
    publish_locked(0);
}

void ddpw_timing_flush(void) {
    if (atomic_load_explicit(&tm.mode, memory_order_acquire) != TM_OFF)
        publish_locked(1);
}

void ddpw__timing_set_interval_ns(int64_t ns) {
    atomic_store(&tm.interval_ns, ns < 0 ? 0 : ns);
    atomic_store(&tm.next_ns, 0);
}

void ddpw__timing_reset(void) {
    pthread_mutex_lock(&tm.mu);
    if (tm.fd >= 0)
        close(tm.fd);
    tm.fd = -1;
    atomic_store(&tm.compute_ns, 0);
    atomic_store(&tm.wait_ns, 0);
    atomic_store(&tm.steps, 0);
    atomic_store(&tm.next_ns, 0);
    atomic_store(&tm.interval_ns, DDPW_TIMING_INTERVAL_MS * 1000000LL);
    atomic_store(&tm.mode, TM_UNOPENED);
    pthread_mutex_unlock(&tm.mu);
}
