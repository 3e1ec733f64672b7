/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/nproc.c: --nproc_per_node N|cpu|gpu|auto. The GPU count goes through a
 * fake libcuda (libfakecuda.so next to this binary) and through the real libcuda.so.1, which on a
 * machine without a GPU must give DDP_ENOGPU with a clear message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_int.h"
#include "launch_spec.h"

static char fake_lib[PATH_MAX + 32];

static int setup(void **state) {
    (void)state;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    *slash = '\0';
    snprintf(fake_lib, sizeof fake_lib, "%s/libfakecuda.so", exe);
    return access(fake_lib, R_OK);
}

static int teardown(void **state) {
    (void)state;
    launch__nproc_set_cuda_lib(NULL);
    return 0;
}

static int resolve(launch_nproc_kind_t kind, int *n, ddp_err_t *e) {
    launch_spec_t s;
    memset(&s, 0, sizeof s);
    s.nproc_kind = kind;
    s.nproc_per_node = kind == LAUNCH_NPROC_NUM ? 5 : 0;
    ddp_err_clear(e);
    int rc = launch_nproc_resolve(&s, e);
    *n = s.nproc_per_node;
    return rc;
}

static int expected_cpus(void) {
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

static void test_num_and_cpu(void **state) {
    (void)state;
    int n;
    ddp_err_t e;
    assert_int_equal(resolve(LAUNCH_NPROC_NUM, &n, &e), 0);
    assert_int_equal(n, 5);
    assert_int_equal(resolve(LAUNCH_NPROC_CPU, &n, &e), 0);
    assert_int_equal(n, expected_cpus());
    assert_true(n >= 1);
    assert_int_equal(launch_cpu_count(), n);
    launch_spec_t s;
    memset(&s, 0, sizeof s);
    assert_int_equal(launch_nproc_resolve(&s, &e), DDP_EUSAGE); /* NUM with 0 */
}

static void test_gpu_no_driver(void **state) {
    (void)state;
    int n;
    ddp_err_t e;
    launch__nproc_set_cuda_lib("/nonexistent/libcuda.so.1");
    assert_int_equal(resolve(LAUNCH_NPROC_GPU, &n, &e), DDP_ENOGPU);
    assert_non_null(strstr(e.text, "--nproc_per_node=gpu: no CUDA device visible ("));
    assert_non_null(strstr(e.text, "no NVIDIA driver"));
    /* auto falls back to the CPUs. */
    assert_int_equal(resolve(LAUNCH_NPROC_AUTO, &n, &e), 0);
    assert_int_equal(n, expected_cpus());
}

static void test_gpu_fake_driver(void **state) {
    (void)state;
    int n;
    ddp_err_t e;
    launch__nproc_set_cuda_lib(fake_lib);
    setenv("FAKE_CUDA_COUNT", "2", 1);
    setenv("FAKE_CUDA_INIT", "0", 1);
    assert_int_equal(resolve(LAUNCH_NPROC_GPU, &n, &e), 0);
    assert_int_equal(n, 2);
    setenv("FAKE_CUDA_COUNT", "3", 1);
    assert_int_equal(resolve(LAUNCH_NPROC_AUTO, &n, &e), 0);
    assert_int_equal(n, 3);
    setenv("FAKE_CUDA_COUNT", "0", 1);
    assert_int_equal(resolve(LAUNCH_NPROC_GPU, &n, &e), DDP_ENOGPU);
    assert_non_null(strstr(e.text, "0 devices"));
    assert_int_equal(resolve(LAUNCH_NPROC_AUTO, &n, &e), 0);
    assert_int_equal(n, expected_cpus());
    /* CUDA_VISIBLE_DEVICES="" makes the real driver fail cuInit with CUDA_ERROR_NO_DEVICE. */
    setenv("FAKE_CUDA_INIT", "100", 1);
    assert_int_equal(resolve(LAUNCH_NPROC_GPU, &n, &e), DDP_ENOGPU);
    assert_non_null(strstr(e.text, "cuInit: CUDA_ERROR_NO_DEVICE (100)"));
    unsetenv("FAKE_CUDA_INIT");
    unsetenv("FAKE_CUDA_COUNT");
}

/* The real driver: a count on a GPU machine, DDP_ENOGPU with the message everywhere else. */
static void test_gpu_real_driver(void **state) {
    (void)state;
    int n;
    ddp_err_t e;
    launch__nproc_set_cuda_lib(NULL);
    int rc = resolve(LAUNCH_NPROC_GPU, &n, &e);
    if (rc == 0) {
        print_message("real driver: %d CUDA device(s)\n", n);
        assert_true(n >= 1);
    } else {
        print_message("real driver: %s\n", e.text);
        assert_int_equal(rc, DDP_ENOGPU);
        assert_non_null(strstr(e.text, "--nproc_per_node=gpu: no CUDA device visible ("));
    }
    char why[128];
    int g = launch_gpu_count(why, sizeof why);
    assert_true(g == 0 ? why[0] != '\0' : g == n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_num_and_cpu),
        cmocka_unit_test_teardown(test_gpu_no_driver, teardown),
        cmocka_unit_test_teardown(test_gpu_fake_driver, teardown),
        cmocka_unit_test_teardown(test_gpu_real_driver, teardown),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
