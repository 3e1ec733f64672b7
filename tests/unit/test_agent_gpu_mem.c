/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for agent/gpu_mem.c through a fake NVML (libfakenvml.so next to this binary, driven
 * by FAKENVML_* variables): memory released after about a second, a device that never releases
 * it (named once the wait times out), other processes' memory ignored, a member of an old
 * worker's process group, the baseline for drivers that list no processes, the backoff, and no
 * NVML at all (skip). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_err.h"
#include "ddp_time.h"
#include "gpu_mem.h"

/* Upper bound of a wait that should end at about one second: generous, it only catches a wait
 * that never ends. */
#define WAIT_BOUND_MS 20000

static char fake_lib[PATH_MAX + 32];

static void env_clear(void) {
    static const char *const vars[] = {"FAKENVML_INIT",
                                       "FAKENVML_DEVICES",
                                       "FAKENVML_BUSY_UNTIL_MS",
                                       "FAKENVML_BUSY_DEVICE",
                                       "FAKENVML_PIDS",
                                       "FAKENVML_NO_PROCS",
                                       "FAKENVML_USED_MB",
                                       "FAKENVML_LOST",
                                       "FAKENVML_RETIRED_PENDING",
                                       "FAKENVML_REMAP_PENDING",
                                       "FAKENVML_REMAP_FAILED",
                                       "FAKENVML_ECC_DEVICE",
                                       "FAKENVML_ECC_UNCORRECTED",
                                       "FAKENVML_NO_HEALTH"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static int setup(void **state) {
    (void)state;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(fake_lib, sizeof fake_lib, "%s/libfakenvml.so", exe);
    return access(fake_lib, R_OK);
}

static int each_setup(void **state) {
    (void)state;
    env_clear();
    agent__gpu_mem_set_lib(fake_lib);
    return 0;
}

static int each_teardown(void **state) {
    (void)state;
    env_clear();
    agent__gpu_mem_set_lib(NULL);
    return 0;
}

static agent_gpu_mem_t *open_fake(void) {
    agent_gpu_mem_t *g = NULL;
    char why[128];
    assert_int_equal(agent__gpu_mem_new(&g, why, sizeof why), 0);
    assert_non_null(g);
    return g;
}

static void setenv_int(const char *name, long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    setenv(name, buf, 1);
}

/* No NVML, a failing nvmlInit, no device: skip, quietly, with the reason for the debug log. */
static void test_skip(void **state) {
    (void)state;
    agent_gpu_mem_t *g = (agent_gpu_mem_t *)1;
    char why[128];
    agent__gpu_mem_set_lib("/nonexistent/libnvidia-ml.so.1");
    assert_int_equal(agent__gpu_mem_new(&g, why, sizeof why), AGENT_GPU_MEM_SKIP);
    assert_null(g);
    assert_non_null(strstr(why, "/nonexistent/libnvidia-ml.so.1 not loadable"));
    pid_t pid = 1234;
    agent_gpu_watch_t w = {.pids = &pid, .n_pids = 1};
    assert_int_equal(agent__gpu_mem_wait(NULL, &w, 1000, NULL), AGENT_GPU_MEM_SKIP);
    assert_int_equal(agent__gpu_mem_busy(NULL, &w, NULL), AGENT_GPU_MEM_SKIP);
    uint64_t used;
    assert_int_equal(agent__gpu_mem_used(NULL, NULL, 1, &used), AGENT_GPU_MEM_SKIP);
    agent__gpu_mem_free(NULL);

    agent__gpu_mem_set_lib(fake_lib);
    setenv("FAKENVML_INIT", "9", 1);
    assert_int_equal(agent__gpu_mem_new(&g, why, sizeof why), AGENT_GPU_MEM_SKIP);
    assert_string_equal(why, "nvmlInit_v2: Driver Not Loaded (9)");
    setenv("FAKENVML_INIT", "0", 1);
    setenv("FAKENVML_DEVICES", "0", 1);
    assert_int_equal(agent__gpu_mem_new(&g, why, sizeof why), AGENT_GPU_MEM_SKIP);
    assert_non_null(strstr(why, "no device"));
    assert_null(g);
}

/* The old worker's memory goes away about a second after the check starts: the wait ends then,
 * not before. */
static void test_released_after_a_second(void **state) {
    (void)state;
    setenv("FAKENVML_DEVICES", "2", 1);
    setenv("FAKENVML_BUSY_UNTIL_MS", "1000", 1);
    setenv("FAKENVML_PIDS", "999999,4242", 1);
    uint64_t t0 = ddp_now_ms();
    agent_gpu_mem_t *g = open_fake();
    assert_int_equal(agent__gpu_mem_count(g), 2);
    pid_t old = 4242;
    agent_gpu_watch_t w = {.pids = &old, .n_pids = 1};
    agent_gpu_busy_t b;
    assert_int_equal(agent__gpu_mem_busy(g, &w, &b), AGENT_GPU_MEM_BUSY);
    assert_int_equal(b.device, 0);
    assert_int_equal(b.pid, 4242);
    assert_int_equal(b.used, 1ull << 30);
    assert_int_equal(agent__gpu_mem_wait(g, &w, WAIT_BOUND_MS, NULL), AGENT_GPU_MEM_FREE);
    uint64_t took = ddp_now_ms() - t0;
    assert_true(took >= 1000);
    assert_true(took < WAIT_BOUND_MS);
    assert_int_equal(agent__gpu_mem_busy(g, &w, NULL), AGENT_GPU_MEM_FREE);
    agent__gpu_mem_free(g);
}

/* Device 1 never releases it: the wait times out naming device 1. */
static void test_never_released(void **state) {
    (void)state;
    setenv("FAKENVML_DEVICES", "2", 1);
    setenv("FAKENVML_BUSY_UNTIL_MS", "-1", 1);
    setenv("FAKENVML_BUSY_DEVICE", "1", 1);
    setenv("FAKENVML_PIDS", "4242", 1);
    agent_gpu_mem_t *g = open_fake();
    pid_t old = 4242;
    agent_gpu_watch_t w = {.pids = &old, .n_pids = 1};
    agent_gpu_busy_t b;
    memset(&b, 0, sizeof b);
    assert_int_equal(agent__gpu_mem_wait(g, &w, 300, &b), DDP_ETIMEOUT);
    assert_int_equal(b.device, 1);
    assert_int_equal(b.pid, 4242);
    char text[256];
    agent__gpu_mem_describe(&b, 300, text, sizeof text);
    assert_string_equal(text, "GPU 1 still holds 1.0 GiB of pid 4242 (a previous worker) after "
                              "300 ms");
    agent__gpu_mem_holder(&b, text, sizeof text);
    assert_string_equal(text, "GPU 1 holds 1.0 GiB of pid 4242 (a previous worker)");
    /* Watching device 0 only, nothing is busy. */
    int dev0 = 0;
    w.devices = &dev0;
    w.n_devices = 1;
    assert_int_equal(agent__gpu_mem_busy(g, &w, NULL), AGENT_GPU_MEM_FREE);
    /* An index NVML does not have cannot hold anything up. */
    int dev7 = 7;
    w.devices = &dev7;
    assert_int_equal(agent__gpu_mem_busy(g, &w, NULL), AGENT_GPU_MEM_FREE);
    agent__gpu_mem_free(g);
}

/* Another tenant's process on the device is not ours to wait for. */
static void test_other_processes_ignored(void **state) {
    (void)state;
    setenv("FAKENVML_BUSY_UNTIL_MS", "-1", 1);
    setenv("FAKENVML_PIDS", "999999", 1);
    agent_gpu_mem_t *g = open_fake();
    pid_t old = 4242;
    agent_gpu_watch_t w = {.pids = &old, .n_pids = 1};
    assert_int_equal(agent__gpu_mem_wait(g, &w, 5000, NULL), AGENT_GPU_MEM_FREE);
    agent__gpu_mem_free(g);
}

/* A process the old worker forked (same process group) still holds memory: busy. */
static void test_group_member(void **state) {
    (void)state;
    pid_t leader = fork();
    assert_true(leader >= 0);
    if (leader == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    setpgid(leader, leader);
    /* The member: a second child placed in the first child's group. */
    pid_t member = fork();
    assert_true(member >= 0);
    if (member == 0) {
        setpgid(0, leader);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    setpgid(member, leader);
    setenv("FAKENVML_BUSY_UNTIL_MS", "-1", 1);
    setenv_int("FAKENVML_PIDS", member);
    agent_gpu_mem_t *g = open_fake();
    agent_gpu_watch_t w = {.pids = &leader, .n_pids = 1};
    agent_gpu_busy_t b;
    int rc = agent__gpu_mem_busy(g, &w, &b);
    agent__gpu_mem_free(g);
    kill(member, SIGKILL);
    kill(leader, SIGKILL);
    waitpid(member, NULL, 0);
    waitpid(leader, NULL, 0);
    assert_int_equal(rc, AGENT_GPU_MEM_BUSY);
    assert_int_equal(b.pid, member);
}

/* A driver that lists no processes: used memory back to the baseline is the release. */
static void test_baseline(void **state) {
    (void)state;
    setenv("FAKENVML_DEVICES", "2", 1);
    setenv("FAKENVML_NO_PROCS", "1", 1);
    agent_gpu_mem_t *g = open_fake();
    uint64_t base[2];
    assert_int_equal(agent__gpu_mem_used(g, NULL, 2, base), 0);
    assert_int_equal(base[0], 10ull << 20);
    agent__gpu_mem_free(g);
    setenv("FAKENVML_BUSY_UNTIL_MS", "500", 1);
    g = open_fake();
    pid_t old = 4242;
    agent_gpu_watch_t w = {.pids = &old, .n_pids = 1, .baseline = base};
    agent_gpu_busy_t b;
    assert_int_equal(agent__gpu_mem_busy(g, &w, &b), AGENT_GPU_MEM_BUSY);
    assert_int_equal(b.pid, 0);
    assert_int_equal(b.used, 4096ull << 20);
    char text[256];
    agent__gpu_mem_describe(&b, 10, text, sizeof text);
    assert_string_equal(text, "GPU 0 still has 4.0 GiB in use (10 MiB before the workers started) "
                              "after 10 ms");
    agent__gpu_mem_holder(&b, text, sizeof text);
    assert_string_equal(text, "GPU 0 has 4.0 GiB in use (10 MiB before the workers started)");
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(agent__gpu_mem_wait(g, &w, WAIT_BOUND_MS, NULL), AGENT_GPU_MEM_FREE);
    assert_true(ddp_now_ms() - t0 < WAIT_BOUND_MS);
    /* Without a baseline such a driver gives nothing to wait for. */
    setenv("FAKENVML_BUSY_UNTIL_MS", "-1", 1);
    w.baseline = NULL;
    assert_int_equal(agent__gpu_mem_busy(g, &w, NULL), AGENT_GPU_MEM_FREE);
    agent__gpu_mem_free(g);
}

static void test_backoff(void **state) {
    (void)state;
    int d = agent__gpu_mem_next_delay(0);
    assert_int_equal(d, AGENT_GPU_MEM_POLL_FIRST_MS);
    static const int want[] = {100, 200, 400, 500, 500};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        d = agent__gpu_mem_next_delay(d);
        assert_int_equal(d, want[i]);
    }
}

/* The built-in health check: each fault is named with its GPU and counter; corrected errors, an
 * old lifetime ECC count, working remapped rows and unsupported counters are not faults; only
 * the devices asked about are checked. */
static void test_health(void **state) {
    (void)state;
    char why[256];
    assert_int_equal(agent__gpu_health(NULL, NULL, 0, why, sizeof why), AGENT_GPU_MEM_SKIP);
    setenv("FAKENVML_DEVICES", "4", 1);
    agent_gpu_mem_t *g = open_fake();
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 0);

    setenv("FAKENVML_ECC_DEVICE", "3", 1);
    setenv("FAKENVML_ECC_UNCORRECTED", "2", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 1);
    assert_string_equal(
        why, "GPU 3: 2 uncorrectable ECC errors since the driver loaded (volatile ECC count)");
    const int first_two[] = {0, 1}, three[] = {3};
    assert_int_equal(agent__gpu_health(g, first_two, 2, why, sizeof why), 0);
    assert_int_equal(agent__gpu_health(g, three, 1, why, sizeof why), 1);
    unsetenv("FAKENVML_ECC_DEVICE");

    setenv("FAKENVML_RETIRED_PENDING", "1", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 1);
    assert_string_equal(why, "GPU 1 has retired pages pending (a reboot retires them)");
    unsetenv("FAKENVML_RETIRED_PENDING");

    setenv("FAKENVML_REMAP_PENDING", "2", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 1);
    assert_string_equal(
        why, "GPU 2 has a row remap pending (remapped rows: pending; a GPU reset applies it)");
    unsetenv("FAKENVML_REMAP_PENDING");
    setenv("FAKENVML_REMAP_FAILED", "0", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 1);
    assert_string_equal(why, "GPU 0: a row remap failed (remapped rows: failure)");
    unsetenv("FAKENVML_REMAP_FAILED");

    setenv("FAKENVML_LOST", "2", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 1);
    assert_string_equal(why, "GPU 2 does not answer (nvmlDeviceGetMemoryInfo: GPU is lost)");
    unsetenv("FAKENVML_LOST");

    /* A GPU that is not there at all (an index past NVML's count). */
    const int missing[] = {7};
    assert_int_equal(agent__gpu_health(g, missing, 1, why, sizeof why), 1);
    assert_non_null(strstr(why, "GPU 7 does not answer (nvmlDeviceGetHandleByIndex"));

    /* Counters this GPU does not report are not checked. */
    setenv("FAKENVML_NO_HEALTH", "1", 1);
    setenv("FAKENVML_ECC_DEVICE", "0", 1);
    assert_int_equal(agent__gpu_health(g, NULL, 0, why, sizeof why), 0);
    agent__gpu_mem_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_skip, each_setup, each_teardown),
        cmocka_unit_test_setup_teardown(test_released_after_a_second, each_setup, each_teardown),
        cmocka_unit_test_setup_teardown(test_never_released, each_setup, each_teardown),
        cmocka_unit_test_setup_teardown(test_other_processes_ignored, each_setup, each_teardown),
        cmocka_unit_test_setup_teardown(test_group_member, each_setup, each_teardown),
        cmocka_unit_test_setup_teardown(test_baseline, each_setup, each_teardown),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test_setup_teardown(test_health, each_setup, each_teardown),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
