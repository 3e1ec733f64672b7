/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw's heartbeat file: no variable, no beat; the content (the step, in the form
 * the agent reads) and the mtime across beats; the rate limit (pwrite is wrapped by the linker,
 * module.mk, to count and fail writes); a smaller step after a larger one; refused files (a
 * symlink, a FIFO, a directory, a missing file) and a failed write, each reported once; beats
 * from several threads at once. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_time.h"
#include "ddpw_int.h"

/* pwrite, wrapped by the linker (module.mk): counts the calls and fails them with
 * g_pwrite_errno when that is set. */
ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off);
static _Atomic int g_pwrites, g_pwrite_errno;
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off) {
    g_pwrites++;
    if (g_pwrite_errno != 0) {
        errno = g_pwrite_errno;
        return -1;
    }
    return __real_pwrite(fd, buf, n, off);
}

static char g_hbdir[64];

/* path gets "<a fresh directory>/name"; the directory is made on the first call. */
static void hb_path(char *path, size_t cap, const char *name) {
    if (g_hbdir[0] == '\0') {
        snprintf(g_hbdir, sizeof g_hbdir, "/tmp/test_ddpw_hb.XXXXXX");
        assert_non_null(mkdtemp(g_hbdir));
    }
    snprintf(path, cap, "%s/%s", g_hbdir, name);
}

/* A heartbeat file as the agent makes it (empty, mode 0600), named in DDPRUN_HEARTBEAT_FILE,
 * with the heartbeat state reset so the next beat opens it. */
static void hb_setup(char *path, size_t cap, const char *name) {
    hb_path(path, cap, name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    setenv("DDPRUN_HEARTBEAT_FILE", path, 1);
    ddpw__heartbeat_reset();
}

static void hb_teardown(void) {
    unsetenv("DDPRUN_HEARTBEAT_FILE");
    ddpw__heartbeat_reset();
}

/* The step in the file, after checking the form the agent reads: at most 32 bytes, exactly 20
 * decimal digits and a newline. */
static int64_t hb_read(const char *path) {
    char buf[33];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, 32);
    close(fd);
    assert_int_equal(n, DDPW_HEARTBEAT_LEN);
    buf[n] = '\0';
    assert_int_equal(strspn(buf, "0123456789"), DDPW_HEARTBEAT_LEN - 1);
    assert_int_equal(buf[DDPW_HEARTBEAT_LEN - 1], '\n');
    return strtoll(buf, NULL, 10);
}

static int64_t mtime_ns(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

/* Sleeps well past DDPW_HEARTBEAT_INTERVAL_MS: the coarse clock lags by up to a tick. */
static void past_interval(void) {
    struct timespec ts = {0, (DDPW_HEARTBEAT_INTERVAL_MS + 50) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Without DDPRUN_HEARTBEAT_FILE every beat is a no-op; a negative step is a usage error. */
static void test_heartbeat_off(void **state) {
    (void)state;
    hb_teardown();
    int n0 = g_pwrites;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ddpw_heartbeat(1, &e), 0);
    assert_int_equal(ddpw_heartbeat(2, &e), 0);
    assert_int_equal(ddpw_heartbeat_flush(&e), 0);
    assert_int_equal(e.code, 0);
    assert_int_equal(g_pwrites, n0);
    assert_int_equal(ddpw_heartbeat(-1, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "negative"));
    setenv("DDPRUN_HEARTBEAT_FILE", "", 1); /* empty: off as well */
    ddpw__heartbeat_reset();
    assert_int_equal(ddpw_heartbeat(3, NULL), 0);
    assert_int_equal(g_pwrites, n0);
    hb_teardown();
}

/* A beat writes the step; beats an interval apart move the mtime and the step. */
static void test_heartbeat_file(void **state) {
    (void)state;
    char path[128];
    hb_setup(path, sizeof path, "beat");
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ddpw_heartbeat(7, &e), 0);
    assert_int_equal(hb_read(path), 7);
    int64_t m1 = mtime_ns(path);
    past_interval();
    assert_int_equal(ddpw_heartbeat(8, &e), 0);
    assert_int_equal(hb_read(path), 8);
    assert_true(mtime_ns(path) > m1);
    /* The same step an interval later is still a beat: the mtime moves. */
    int64_t m2 = mtime_ns(path);
    past_interval();
    assert_int_equal(ddpw_heartbeat(8, &e), 0);
    assert_true(mtime_ns(path) > m2);
    assert_int_equal(e.code, 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    hb_teardown();
}

/* 1000 beats in a tight loop write about once per interval; the newest step reaches the file
 * with the next beat after the interval, or at once with a flush. */
static void test_heartbeat_rate_limit(void **state) {
    (void)state;
    char path[128];
    hb_setup(path, sizeof path, "rate");
    int n0 = g_pwrites;
    uint64_t t0 = ddp_now_ns();
    for (int64_t i = 0; i < 1000; i++)
        assert_int_equal(ddpw_heartbeat(i, NULL), 0);
    uint64_t ms = (ddp_now_ns() - t0) / 1000000;
    int writes = g_pwrites - n0;
    assert_true(writes >= 1);
    assert_true((uint64_t)writes <= 2 + ms / DDPW_HEARTBEAT_INTERVAL_MS);
    assert_true(hb_read(path) < 1000);
    past_interval();
    assert_int_equal(ddpw_heartbeat(1000, NULL), 0);
    assert_int_equal(hb_read(path), 1000);
    /* A step right after a write waits; the flush writes it, and a second flush has nothing to
     * write. */
    assert_int_equal(ddpw_heartbeat(1001, NULL), 0);
    assert_int_equal(ddpw_heartbeat_flush(NULL), 0);
    assert_int_equal(hb_read(path), 1001);
    int n1 = g_pwrites;
    assert_int_equal(ddpw_heartbeat_flush(NULL), 0);
    assert_int_equal(g_pwrites, n1);
    hb_teardown();
}

/* A smaller step after a larger one leaves a valid number (fixed width, nothing left over). */
static void test_heartbeat_shorter(void **state) {
    (void)state;
    char path[128];
    hb_setup(path, sizeof path, "short");
    ddpw__heartbeat_set_interval_ns(0);
    assert_int_equal(ddpw_heartbeat(INT64_MAX, NULL), 0);
    assert_int_equal(hb_read(path), INT64_MAX);
    assert_int_equal(ddpw_heartbeat(123456789012, NULL), 0);
    assert_int_equal(hb_read(path), 123456789012);
    assert_int_equal(ddpw_heartbeat(7, NULL), 0);
    assert_int_equal(hb_read(path), 7);
    assert_int_equal(ddpw_heartbeat(0, NULL), 0);
    assert_int_equal(hb_read(path), 0);
    hb_teardown();
}

/* DDPRUN_HEARTBEAT_FILE at path gives rc with want and the path in the message, once; later
 * beats are no-ops that write nothing. */
static void hb_refused(const char *path, int rc, const char *want) {
    setenv("DDPRUN_HEARTBEAT_FILE", path, 1);
    ddpw__heartbeat_reset();
    int n0 = g_pwrites;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ddpw_heartbeat(1, &e), rc);
    if (strstr(e.text, want) == NULL || strstr(e.text, path) == NULL)
        fail_msg("heartbeat %s: '%s' lacks '%s' or the path", path, e.text, want);
    ddp_err_clear(&e);
    past_interval();
    assert_int_equal(ddpw_heartbeat(2, &e), 0);
    assert_int_equal(ddpw_heartbeat_flush(&e), 0);
    assert_int_equal(e.code, 0);
    assert_int_equal(g_pwrites, n0);
}

static void test_heartbeat_refused(void **state) {
    (void)state;
    char path[128], target[128];
    hb_path(target, sizeof target, "target");
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    hb_path(path, sizeof path, "link");
    unlink(path);
    assert_int_equal(symlink(target, path), 0);
    hb_refused(path, -ELOOP, "symbolic link");
    struct stat st;
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_size, 0); /* the link was not followed */
    hb_path(path, sizeof path, "fifo");
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    hb_refused(path, -EINVAL, "not a regular file"); /* no reader: the open never blocks */
    int rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    assert_true(rd >= 0);
    hb_refused(path, -EINVAL, "not a regular file"); /* with a reader: refused after fstat */
    close(rd);
    hb_refused(g_hbdir, -EINVAL, "not a regular file");
    hb_path(path, sizeof path, "missing");
    hb_refused(path, -ENOENT, "unable to open heartbeat file");
    hb_teardown();
}

/* A failed write is reported once; the job goes on without its heartbeat. */
static void test_heartbeat_write_error(void **state) {
    (void)state;
    char path[128];
    hb_setup(path, sizeof path, "eio");
    g_pwrite_errno = EIO;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ddpw_heartbeat(5, &e), -EIO);
    g_pwrite_errno = 0;
    if (strstr(e.text, "unable to write heartbeat file") == NULL || strstr(e.text, path) == NULL)
        fail_msg("'%s'", e.text);
    int n0 = g_pwrites;
    ddp_err_clear(&e);
    past_interval();
    assert_int_equal(ddpw_heartbeat(6, &e), 0);
    assert_int_equal(ddpw_heartbeat_flush(&e), 0);
    assert_int_equal(e.code, 0);
    assert_int_equal(g_pwrites, n0);
    hb_teardown();
    unlink(path);
}

/* Four threads beating at once: about one write per interval in all, and the file always holds
 * a whole step that one of them gave. */
static void *beat_thread(void *arg) {
    int64_t base = (int64_t)(intptr_t)arg * 1000000;
    for (int64_t i = 0; i < 200000; i++)
        if (ddpw_heartbeat(base + i, NULL) != 0)
            return (void *)1;
    return NULL;
}

static void test_heartbeat_threads(void **state) {
    (void)state;
    char path[128];
    hb_setup(path, sizeof path, "threads");
    int n0 = g_pwrites;
    uint64_t t0 = ddp_now_ns();
    pthread_t th[4];
    for (intptr_t k = 0; k < 4; k++)
        assert_int_equal(pthread_create(&th[k], NULL, beat_thread, (void *)(k + 1)), 0);
    for (int k = 0; k < 4; k++) {
        void *rv = NULL;
        assert_int_equal(pthread_join(th[k], &rv), 0);
        assert_null(rv);
    }
    uint64_t ms = (ddp_now_ns() - t0) / 1000000;
    int writes = g_pwrites - n0;
    assert_true(writes >= 1 && (uint64_t)writes <= 2 + ms / DDPW_HEARTBEAT_INTERVAL_MS);
    assert_int_equal(ddpw_heartbeat_flush(NULL), 0);
    int64_t v = hb_read(path);
    assert_true(v >= 1000000 && v < 5000000 && v % 1000000 < 200000);
    hb_teardown();
}

/* Removes what the heartbeat tests made (after the last of them). */
static void test_heartbeat_cleanup(void **state) {
    (void)state;
    const char *names[] = {"beat", "rate", "short", "target", "link", "fifo", "eio", "threads"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        hb_path(path, sizeof path, names[i]);
        unlink(path);
    }
    assert_int_equal(rmdir(g_hbdir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heartbeat_off),        cmocka_unit_test(test_heartbeat_file),
        cmocka_unit_test(test_heartbeat_rate_limit), cmocka_unit_test(test_heartbeat_shorter),
        cmocka_unit_test(test_heartbeat_refused),    cmocka_unit_test(test_heartbeat_write_error),
        cmocka_unit_test(test_heartbeat_threads),    cmocka_unit_test(test_heartbeat_cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
