/* SPDX-License-Identifier: Apache-2.0
 * ddpw_heartbeat.c: the worker's side of the agent's heartbeat. DDPRUN_HEARTBEAT_FILE is opened
 * once; a beat at least DDPW_HEARTBEAT_INTERVAL_MS after the previous write is one pwrite of the
 * step (20 zero-padded digits and a newline) at offset 0, which also moves the file's mtime. */
#include "ddpw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"

enum { HB_UNOPENED = 0, HB_ON = 1, HB_OFF = 2 };

/* The process's heartbeat: the agent gives each worker process its own file. The fast path reads
 * mode and next_ns and stores pending without a lock; opening, writing, closing and the test
 * hooks hold mu, so the fd is never closed under a writer. */
static struct {
    pthread_mutex_t mu;
    _Atomic int mode;            /* HB_*: OFF after an error or without the variable */
    _Atomic int64_t next_ns;     /* coarse monotonic time from which the next write may go */
    _Atomic int64_t pending;     /* the newest step given, -1 before the first */
    _Atomic int64_t interval_ns; /* DDPW_HEARTBEAT_INTERVAL_MS, or a test's value */
    int fd;                      /* under mu */
    int64_t written;             /* under mu: the step in the file, -1 before the first write */
    char path[96];               /* under mu: the start of the path, for messages */
} hb = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .mode = HB_UNOPENED,
    .pending = -1,
    .interval_ns = DDPW_HEARTBEAT_INTERVAL_MS * 1000000LL,
    .fd = -1,
    .written = -1,
};

/* CLOCK_MONOTONIC_COARSE is read from the vDSO (no system call) with tick resolution (1-10 ms),
 * plenty for a 100 ms interval. */
static int64_t coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Why path could not be opened (errno e): a symlink or a non-regular file is named as such
 * (O_NONBLOCK turns a FIFO without a reader into ENXIO, which says little). */
static int open_error(const char *path, int e, ddp_err_t *err) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        return ddp_err_set(err, -ELOOP, "heartbeat file %.96s is a symbolic link (not followed)",
                           path);
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ddp_err_set(err, -EINVAL, "heartbeat file %.96s is not a regular file", path);
    return ddp_err_set(err, -e, "unable to open heartbeat file %.96s: %s", path, strerror(e));
}

/* Under mu: opens DDPRUN_HEARTBEAT_FILE and sets mode ON, or OFF when the variable is unset or
 * empty (returns 0) or the file is refused (returns the error, the only report of it). */
static int hb_open(ddp_err_t *err) {
    const char *path = getenv(DDP_ENV_HEARTBEAT_FILE);
    atomic_store(&hb.mode, HB_OFF);
    if (path == NULL || *path == '\0')
        return 0;
    snprintf(hb.path, sizeof hb.path, "%s", path);
    /* O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever. */
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return open_error(path, errno, err);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ddp_err_set(err, -EINVAL, "heartbeat file %.96s is not a regular file", path);
    }
    hb.fd = fd;
    hb.written = -1;
    atomic_store(&hb.mode, HB_ON);
    return 0;
}

/* Under mu: one pwrite of step at offset 0. The text has a fixed width, so a smaller step never
 * leaves digits of a larger one behind. A failure closes the file (no writer can be using the
 * fd: they all hold mu), turns beats off and is returned this once. */
static int hb_write(int64_t step, int64_t now, ddp_err_t *err) {
    char text[DDPW_HEARTBEAT_LEN];
    uint64_t v = (uint64_t)step;
    text[DDPW_HEARTBEAT_LEN - 1] = '\n';
    for (int i = DDPW_HEARTBEAT_LEN - 2; i >= 0; i--, v /= 10)
        text[i] = (char)('0' + v % 10);
    ssize_t n = pwrite(hb.fd, text, sizeof text, 0);
    if (n == (ssize_t)sizeof text) {
        hb.written = step;
        atomic_store_explicit(&hb.next_ns, now + atomic_load(&hb.interval_ns),
                              memory_order_relaxed);
        return 0;
    }
    /* A short write to a regular file means the disk is full or the quota is spent. */
    int rc = n < 0 ? -errno : -ENOSPC;
    close(hb.fd);
    hb.fd = -1;
    atomic_store(&hb.mode, HB_OFF);
    return ddp_err_set(err, rc, "unable to write heartbeat file %s: %s", hb.path, strerror(-rc));
}

/* The slow path: opens the file on first use, then writes the newest step when the interval has
 * passed (another thread may have written meanwhile) or, with force, when the file does not hold
 * it yet. */
static int beat_locked(int force, ddp_err_t *err) {
    pthread_mutex_lock(&hb.mu);
    int rc = 0;
    if (atomic_load(&hb.mode) == HB_UNOPENED)
        rc = hb_open(err);
    if (rc == 0 && atomic_load(&hb.mode) == HB_ON) {
        int64_t now = coarse_ns(), step = atomic_load(&hb.pending);
        int due = force ? step != hb.written : now >= atomic_load(&hb.next_ns);
        if (step >= 0 && due)
            rc = hb_write(step, now, err);
    }
    pthread_mutex_unlock(&hb.mu);
    return rc;
}

int ddpw_heartbeat(int64_t step, ddp_err_t *err) {
    if (step < 0)
        return ddp_err_set(err, DDP_EUSAGE, "heartbeat step %lld is negative", (long long)step);
    int mode = atomic_load_explicit(&hb.mode, memory_order_acquire);
    if (mode == HB_OFF)
        return 0;
    atomic_store_explicit(&hb.pending, step, memory_order_relaxed);
    /* The common case: written less than an interval ago. The step waits in pending. */
    if (mode == HB_ON && coarse_ns() < atomic_load_explicit(&hb.next_ns, memory_order_relaxed))
        return 0;
    return beat_locked(0, err);
}

int ddpw_heartbeat_flush(ddp_err_t *err) {
    if (atomic_load_explicit(&hb.mode, memory_order_acquire) == HB_OFF)
        return 0;
    return beat_locked(1, err);
}

void ddpw__heartbeat_set_interval_ns(int64_t ns) {
    atomic_store(&hb.interval_ns, ns < 0 ? 0 : ns);
    atomic_store(&hb.next_ns, 0);
}

void ddpw__heartbeat_reset(void) {
    pthread_mutex_lock(&hb.mu);
    if (hb.fd >= 0)
        close(hb.fd);
    hb.fd = -1;
    hb.written = -1;
    hb.path[0] = '\0';
    atomic_store(&hb.pending, -1);
    atomic_store(&hb.next_ns, 0);
    atomic_store(&hb.interval_ns, DDPW_HEARTBEAT_INTERVAL_MS * 1000000LL);
    atomic_store(&hb.mode, HB_UNOPENED);
    pthread_mutex_unlock(&hb.mu);
}
