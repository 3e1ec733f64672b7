/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the timing record (ddp_timing.h) and of libddpw's publisher (ddpw_timing.c):
 * the codec's round trip and what it refuses (a torn record, a wrong hash, a short read); no
 * variable, no write; the totals in the file as the agent reads them; the rate limit and the
 * flush; a link refused; adds from several threads at once, none lost. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_timing.h"
#include "ddpw_int.h"

static char g_dir[64];

static void tm_path(char *path, size_t cap, const char *name) {
    if (g_dir[0] == '\0') {
        snprintf(g_dir, sizeof g_dir, "/tmp/test_ddpw_tm.XXXXXX");
        assert_non_null(mkdtemp(g_dir));
    }
    snprintf(path, cap, "%s/%s", g_dir, name);
}

/* A timing file as the agent makes it (empty, mode 0600), named in DDPRUN_TIMING_FILE. */
static void tm_setup(char *path, size_t cap, const char *name) {
    tm_path(path, cap, name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    setenv("DDPRUN_TIMING_FILE", path, 1);
    ddpw__timing_reset();
}

/* The file's record, as the agent reads it; -1 when it holds none (empty). */
static int tm_read(const char *path, ddp_timing_t *t) {
    char buf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n == 0)
        return -1;
    assert_int_equal(n, DDP_TIMING_LEN);
    assert_int_equal(ddp_timing_parse(buf, (size_t)n, t), 0);
    return 0;
}

static void test_codec(void **state) {
    (void)state;
    char rec[DDP_TIMING_LEN + 1];
    ddp_timing_t in = {UINT64_MAX, 123456789, UINT32_MAX}, out;
    ddp_timing_format(&in, rec);
    rec[DDP_TIMING_LEN] = '\0';
    assert_int_equal(strncmp(rec, "t1 18446744073709551615 00000000000123456789 4294967295 ", 56),
                     0);
    assert_int_equal(rec[DDP_TIMING_LEN - 1], '\n');
    assert_int_equal(ddp_timing_parse(rec, DDP_TIMING_LEN, &out), 0);
    assert_true(out.compute_ns == UINT64_MAX && out.wait_ns == 123456789 &&
                out.steps == UINT32_MAX);
    /* Short read, another version, a digit changed (a read that met a write) and a hash
     * changed are all refused. */
    assert_int_equal(ddp_timing_parse(rec, DDP_TIMING_LEN - 1, &out), -EINVAL);
    char bad[DDP_TIMING_LEN];
    memcpy(bad, rec, sizeof bad);
    bad[1] = '2';
    assert_int_equal(ddp_timing_parse(bad, sizeof bad, &out), -EINVAL);
    memcpy(bad, rec, sizeof bad);
    bad[30] = bad[30] == '9' ? '8' : '9';
    assert_int_equal(ddp_timing_parse(bad, sizeof bad, &out), -EINVAL);
    memcpy(bad, rec, sizeof bad);
    bad[60] = bad[60] == 'f' ? 'e' : 'f';
    assert_int_equal(ddp_timing_parse(bad, sizeof bad, &out), -EINVAL);
    /* A half-new, half-old record: the old one's tail after the new one's head. */
    ddp_timing_t in2 = {5, 6, 7};
    char rec2[DDP_TIMING_LEN];
    ddp_timing_format(&in2, rec2);
    memcpy(bad, rec2, 30);
    memcpy(bad + 30, rec + 30, sizeof bad - 30);
    assert_int_equal(ddp_timing_parse(bad, sizeof bad, &out), -EINVAL);
    assert_int_equal(ddp_timing_parse("", 0, &out), -EINVAL);
}

/* Without DDPRUN_TIMING_FILE the adds count and nothing is written anywhere. */
static void test_off(void **state) {
    (void)state;
    unsetenv("DDPRUN_TIMING_FILE");
    ddpw__timing_reset();
    ddpw_timing_add(1, 2, 3);
    ddpw_timing_flush();
    char path[128];
    tm_setup(path, sizeof path, "late");
    unsetenv("DDPRUN_TIMING_FILE");
    ddpw_timing_add(1, 2, 3); /* the variable is read at the first add after a reset */
    ddpw_timing_flush();
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 0);
}

/* The first add writes at once; later adds within the interval only count; a flush writes the
 * totals whatever the interval. */
static void test_totals_and_rate(void **state) {
    (void)state;
    char path[128];
    tm_setup(path, sizeof path, "totals");
    ddp_timing_t t;
    assert_int_equal(tm_read(path, &t), -1);
    ddpw__timing_set_interval_ns(60LL * 1000000000LL);
    ddpw_timing_add(1000, 20, 1);
    assert_int_equal(tm_read(path, &t), 0);
    assert_true(t.compute_ns == 1000 && t.wait_ns == 20 && t.steps == 1);
    for (int i = 0; i < 100; i++)
        ddpw_timing_add(1000, 20, 1);
    assert_int_equal(tm_read(path, &t), 0);
    assert_int_equal(t.steps, 1); /* within the interval: not written */
    ddpw_timing_flush();
    assert_int_equal(tm_read(path, &t), 0);
    assert_true(t.compute_ns == 101000 && t.wait_ns == 2020 && t.steps == 101);
    /* A zero interval writes every add. */
    ddpw__timing_set_interval_ns(0);
    ddpw_timing_add(0, 5, 0);
    assert_int_equal(tm_read(path, &t), 0);
    assert_true(t.wait_ns == 2025 && t.steps == 101);
    unsetenv("DDPRUN_TIMING_FILE");
    ddpw__timing_reset();
}

/* A symbolic link in place of the file is not followed; nothing is written through it. */
static void test_link_refused(void **state) {
    (void)state;
    char path[128], target[128];
    tm_path(target, sizeof target, "target");
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    tm_path(path, sizeof path, "link");
    unlink(path);
    assert_int_equal(symlink(target, path), 0);
    setenv("DDPRUN_TIMING_FILE", path, 1);
    ddpw__timing_reset();
    ddpw_timing_add(1, 1, 1);
    ddpw_timing_flush();
    struct stat st;
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_size, 0);
    unsetenv("DDPRUN_TIMING_FILE");
    ddpw__timing_reset();
}

#define THREADS 4
#define ADDS 20000

static void *adder(void *arg) {
    (void)arg;
    for (int i = 0; i < ADDS; i++)
        ddpw_timing_add(3, 2, 1);
    return NULL;
}

/* Four threads adding at once (with writes between): the flushed totals lose no add, and every
 * record read meanwhile is whole. */
static void test_threads(void **state) {
    (void)state;
    char path[128];
    tm_setup(path, sizeof path, "threads");
    ddpw__timing_set_interval_ns(1000000); /* 1 ms: many writes while the threads add */
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, adder, NULL), 0);
    ddp_timing_t t;
    for (int i = 0; i < 50; i++) {
        if (tm_read(path, &t) == 0)
            assert_true(t.steps <= THREADS * ADDS);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    ddpw_timing_flush();
    assert_int_equal(tm_read(path, &t), 0);
    assert_int_equal(t.steps, THREADS * ADDS);
    assert_true(t.compute_ns == 3ull * THREADS * ADDS && t.wait_ns == 2ull * THREADS * ADDS);
    unsetenv("DDPRUN_TIMING_FILE");
    ddpw__timing_reset();
}

static void test_cleanup(void **state) {
    (void)state;
    const char *names[] = {"late", "totals", "target", "link", "threads"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        tm_path(path, sizeof path, names[i]);
        unlink(path);
    }
    assert_int_equal(rmdir(g_dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),           cmocka_unit_test(test_off),
        cmocka_unit_test(test_totals_and_rate), cmocka_unit_test(test_link_refused),
        cmocka_unit_test(test_threads),         cmocka_unit_test(test_cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
