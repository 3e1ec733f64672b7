/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw's environment and error file: torchrun's and ddprun's variables (defaults,
 * each bad value named), the error file's PyTorch shape (bytes that are not UTF-8 replaced) and its
 * exclusive temporary file (planted symlinks are never written through). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ddpw.h"

/* ---- environment ---- */
static const char *env_vars[] = {"RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE",
                                 "GROUP_RANK",
                                 "DDPRUN_STORE_ADDR",
                                 "DDPRUN_STORE_PORT",
                                 "DDPRUN_ROUND",
                                 "TORCHELASTIC_RESTART_COUNT",
                                 "DDPRUN_RUN_ID",
                                 "TORCHELASTIC_RUN_ID",
                                 "DDPRUN_STORE_TOKEN",
                                 "MASTER_ADDR",
                                 "TORCHELASTIC_USE_AGENT_STORE",
                                 "DDPRUN_LOCAL_RANK",
                                 "DDPRUN_COLL_TIMEOUT_MS"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof env_vars / sizeof *env_vars; i++)
        unsetenv(env_vars[i]);
}

static void set_world(const char *rank, const char *world) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world, 1);
    setenv("LOCAL_RANK", rank, 1);
    setenv("LOCAL_WORLD_SIZE", world, 1);
    setenv("GROUP_RANK", "0", 1);
    setenv("DDPRUN_STORE_ADDR", "127.0.0.1", 1);
    setenv("DDPRUN_STORE_PORT", "29400", 1);
}

static void test_env_single(void **state) {
    (void)state;
    clear_env();
    ddpw_env_t env;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ddpw_env_read(&env, &e), 0);
    assert_int_equal(env.world_size, 1);
    assert_int_equal(env.rank, 0);
    assert_int_equal(env.round, 0);
    assert_string_equal(env.run_id, "none");
    setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
    assert_int_equal(ddpw_env_read(&env, &e), 0);
    assert_int_equal(env.round, 3); /* the round follows the restart count by default */
    setenv("DDPRUN_ROUND", "7", 1);
    assert_int_equal(ddpw_env_read(&env, &e), 0);
    assert_int_equal(env.round, 7);
    clear_env();
}

/* Each bad environment gives DDP_EENV and a message naming the variable. */
static void test_env_errors(void **state) {
    (void)state;
    struct {
        const char *var, *val, *expect;
    } cases[] = {
        {"RANK", "abc", "RANK='abc'"},
        {"RANK", "2", "RANK='2'"},
        {"WORLD_SIZE", "0", "WORLD_SIZE='0'"},
        {"LOCAL_RANK", NULL, "LOCAL_RANK is not set"},
        {"LOCAL_WORLD_SIZE", "3", "LOCAL_WORLD_SIZE='3'"},
        {"DDPRUN_STORE_PORT", "70000", "DDPRUN_STORE_PORT='70000'"},
        {"DDPRUN_STORE_ADDR", NULL, "DDPRUN_STORE_ADDR is not set"},
        {"DDPRUN_ROUND", "-1", "DDPRUN_ROUND='-1'"},
        {"GROUP_RANK", "x", "GROUP_RANK='x'"},
        {"DDPRUN_LOCAL_RANK", "2", "DDPRUN_LOCAL_RANK='2'"}, /* LOCAL_WORLD_SIZE is 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        clear_env();
        set_world("1", "2");
        if (cases[i].val)
            setenv(cases[i].var, cases[i].val, 1);
        else
            unsetenv(cases[i].var);
        ddpw_env_t env;
        ddp_err_t e;
        ddp_err_clear(&e);
        assert_int_equal(ddpw_env_read(&env, &e), DDP_EENV);
        if (strstr(e.text, cases[i].expect) == NULL)
            fail_msg("case %zu: '%s' does not mention '%s'", i, e.text, cases[i].expect);
    }
    clear_env();
    set_world("1", "2");
    ddpw_env_t env;
    assert_int_equal(ddpw_env_read(&env, NULL), 0);
    assert_int_equal(env.rank, 1);
    assert_int_equal(env.store_port, 29400);
    assert_int_equal(env.node_local_rank, 1); /* LOCAL_RANK when DDPRUN_LOCAL_RANK is absent */
    /* --virtual_local_rank: LOCAL_RANK=0 names the one visible device, DDPRUN_LOCAL_RANK the
     * place on the node. */
    setenv("LOCAL_RANK", "0", 1);
    setenv("DDPRUN_LOCAL_RANK", "1", 1);
    assert_int_equal(ddpw_env_read(&env, NULL), 0);
    assert_int_equal(env.local_rank, 0);
    assert_int_equal(env.node_local_rank, 1);
    clear_env();
}

static void test_error_file(void **state) {
    (void)state;
    char path[] = "/tmp/ddpw-errXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ddpw_record_error_to(path, "rank 1: \"boom\"\n"), 0);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    assert_non_null(root);
    json_t *msg = json_object_get(root, "message");
    assert_true(json_is_object(msg));
    assert_string_equal(json_string_value(json_object_get(msg, "message")), "rank 1: \"boom\"\n");
    json_t *extra = json_object_get(msg, "extraInfo");
    assert_true(json_is_string(json_object_get(extra, "py_callstack")));
    const char *ts = json_string_value(json_object_get(extra, "timestamp"));
    assert_non_null(ts);
    assert_true(strtoll(ts, NULL, 10) > 1600000000);
    json_decref(root);
    /* Bytes that are not UTF-8 (a Latin-1 path, a truncated sequence) become '?': jansson would
     * refuse the whole message and the agent would show nothing. Valid UTF-8 is kept. */
    assert_int_equal(ddpw_record_error_to(path, "bad \xff\xe9t\xc3 ok \xc3\xa9"), 0);
    root = json_load_file(path, 0, &je);
    assert_non_null(root);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(root, "message"), "message")),
        "bad ??t? ok \xc3\xa9");
    json_decref(root);
    unsetenv("TORCHELASTIC_ERROR_FILE");
    assert_int_equal(ddpw_record_error("ignored"), 0);
    unlink(path);
}

/* The error file's temporary file is created exclusively: symlinks planted at the names a
 * "<path>.tmp.<pid>" scheme gives are never written through, and a symlink at the path itself is
 * replaced, not followed. */
static void test_error_file_symlinks(void **state) {
    (void)state;
    char dir[] = "/tmp/ddpw-errdir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], victim[128], link[160];
    snprintf(path, sizeof path, "%s/error.json", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious", f);
    fclose(f);
    for (long pid = getpid(); pid < getpid() + 4; pid++) {
        snprintf(link, sizeof link, "%s.tmp.%ld", path, pid);
        assert_int_equal(symlink(victim, link), 0);
    }
    assert_int_equal(ddpw_record_error_to(path, "rank 0: boom"), 0);
    unlink(path);
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(ddpw_record_error_to(path, "rank 0: boom again"), 0);
    char buf[32] = "";
    f = fopen(victim, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, "precious");
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_single),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_error_file),
        cmocka_unit_test(test_error_file_symlinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
