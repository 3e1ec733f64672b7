/* SPDX-License-Identifier: Apache-2.0
 * The node health check (agent/health.c) with real processes on a libuv loop, reaped the way the
 * agent reaps (one waitpid(-1) on SIGCHLD that hands the check its pid): healthy and failing
 * checks, the last lines of output (of a long output too) escaped, the environment given to the
 * check, a signal, the timeout, a descendant left behind (killed with the check's group) and a
 * cancelled check. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "health.h"

#define GUARD_MS 15000

typedef struct env {
    uv_loop_t loop;
    uv_signal_t sigchld;
    uv_timer_t guard;
    agent_health_t *h;
    int called;
    agent_health_result_t res;
} env_t;

static void on_guard(uv_timer_t *t) {
    (void)t;
    fail_msg("test exceeded its %d ms guard", GUARD_MS);
}

static void on_sigchld(uv_signal_t *s, int sig) {
    (void)sig;
    env_t *e = s->data;
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        agent__health_reaped(e->h, pid, status);
}

static void on_result(void *arg, const agent_health_result_t *res) {
    env_t *e = arg;
    e->called++;
    e->res = *res;
    e->h = NULL;
}

static int setup(void **state) {
    env_t *e = calloc(1, sizeof *e);
    assert_non_null(e);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(uv_signal_init(&e->loop, &e->sigchld), 0);
    e->sigchld.data = e;
    /* Referenced, as the agent's is: between the end of a check's output and its exit the
     * check holds no active handle of its own. */
    assert_int_equal(uv_signal_start(&e->sigchld, on_sigchld, SIGCHLD), 0);
    assert_int_equal(uv_timer_init(&e->loop, &e->guard), 0);
    assert_int_equal(uv_timer_start(&e->guard, on_guard, GUARD_MS, 0), 0);
    uv_unref((uv_handle_t *)&e->guard);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env_t *e = *state;
    uv_close((uv_handle_t *)&e->sigchld, NULL);
    uv_close((uv_handle_t *)&e->guard, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    free(e);
    return 0;
}

/* Runs cmd to its result. */
static void check(env_t *e, const char *cmd, const char *const *extra, int timeout_ms) {
    e->called = 0;
    assert_int_equal(agent__health_start(&e->loop, cmd, extra, timeout_ms, on_result, e, &e->h), 0);
    assert_true(agent__health_pid(e->h) > 0);
    while (!e->called)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_int_equal(e->called, 1);
}

static void test_healthy(void **state) {
    env_t *e = *state;
    check(e, "echo all good", NULL, 5000);
    assert_int_equal(e->res.healthy, 1);
    assert_string_equal(e->res.reason, "");
    assert_string_equal(e->res.tail, "all good");
}

static void test_failing_keeps_last_lines(void **state) {
    env_t *e = *state;
    check(e, "for i in 1 2 3 4 5 6 7; do echo line $i; done; echo 'bad ECC on GPU 3' >&2; exit 3",
          NULL, 5000);
    assert_int_equal(e->res.healthy, 0);
    assert_int_equal(e->res.timed_out, 0);
    assert_string_equal(e->res.reason, "exit status 3");
    assert_string_equal(e->res.tail, "line 4 | line 5 | line 6 | line 7 | bad ECC on GPU 3");
}

static void test_long_output(void **state) {
    env_t *e = *state;
    check(e, "seq 1 50000; exit 1", NULL, 5000); /* far past the ring: only the end is kept */
    assert_string_equal(e->res.tail, "49996 | 49997 | 49998 | 49999 | 50000");
}

static void test_output_escaped(void **state) {
    env_t *e = *state;
    check(e, "printf 'a\\033[2Jb\\n'; exit 1", NULL, 5000);
    assert_int_equal(e->res.healthy, 0);
    assert_null(strchr(e->res.tail, '\033'));
    assert_string_equal(e->res.tail, "a\\e[2Jb");
}

static void test_environment(void **state) {
    env_t *e = *state;
    assert_int_equal(setenv("DDPRUN_HEALTH_TEST", "from the agent", 1), 0);
    assert_int_equal(setenv("DDPRUN_HEALTH_KEPT", "kept", 1), 0);
    const char *extra[] = {"DDPRUN_HEALTH_TEST=given", "DDPRUN_LOCAL_WORLD_SIZE=4", NULL};
    check(e,
          "test \"$DDPRUN_HEALTH_TEST\" = given && test \"$DDPRUN_LOCAL_WORLD_SIZE\" = 4 && "
          "test \"$DDPRUN_HEALTH_KEPT\" = kept",
          extra, 5000);
    assert_int_equal(e->res.healthy, 1);
    unsetenv("DDPRUN_HEALTH_TEST");
    unsetenv("DDPRUN_HEALTH_KEPT");
}

static void test_signal(void **state) {
    env_t *e = *state;
    check(e, "kill -SEGV $$", NULL, 5000);
    assert_int_equal(e->res.healthy, 0);
    assert_string_equal(e->res.reason, "killed by SIGSEGV");
}

static void test_timeout(void **state) {
    env_t *e = *state;
    check(e, "echo checking; exec sleep 30", NULL, 200);
    assert_int_equal(e->res.healthy, 0);
    assert_int_equal(e->res.timed_out, 1);
    assert_string_equal(e->res.reason, "timed out after 0.2 s (killed)");
    assert_string_equal(e->res.tail, "checking");
}

/* Nonzero while pid exists and is not a zombie. */
static int alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren != NULL && close_paren[1] == ' ' && close_paren[2] != 'Z';
}

static void test_descendant_killed(void **state) {
    env_t *e = *state;
    /* The background sleep keeps the output pipe open after the check exits 0. */
    check(e, "sleep 30 & echo $!", NULL, 5000);
    assert_int_equal(e->res.healthy, 1);
    pid_t bg = (pid_t)atoi(e->res.tail);
    assert_true(bg > 0);
    for (int i = 0; i < 500 && alive(bg); i++)
        usleep(10000);
    assert_false(alive(bg));
}

static void test_cancel(void **state) {
    env_t *e = *state;
    e->called = 0;
    assert_int_equal(
        agent__health_start(&e->loop, "exec sleep 30", NULL, 5000, on_result, e, &e->h), 0);
    pid_t pid = agent__health_pid(e->h);
    agent__health_cancel(e->h);
    e->h = NULL;
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_int_equal(e->called, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failing_keeps_last_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_escaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_descendant_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
