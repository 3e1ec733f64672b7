/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw's store keys (ddpw_keys.h): the exact names for a few ranks, nodes and
 * numbers and at the numbers' extremes (each within DDPW_NAME_MAX), the whole key under the round
 * prefix and its bound, and the keys the library's own flows leave in a real store (two ranks of
 * one node, two one-rank nodes, a store barrier, a program's key), read back by their spelled-out
 * names: those are what other programs read, so they are checked here apart from the builders. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "ddp_buf.h"
#include "ddpw_fixture.h"
#include "rdzv_proto.h"

/* Each name, exactly; the longest of every kind fits DDPW_NAME_MAX. */
static void test_key_names(void **state) {
    (void)state;
    assert_string_equal(ddpw__key_vote(0).s, "backend/vote/0");
    assert_string_equal(ddpw__key_vote(3).s, "backend/vote/3");
    assert_string_equal(ddpw__key_vote(1048575).s, "backend/vote/1048575");
    assert_string_equal(ddpw__key_vote(INT_MAX).s, "backend/vote/2147483647");
    assert_string_equal(ddpw__key_vote(INT_MIN).s, "backend/vote/-2147483648");
    assert_string_equal(ddpw__key_shm(0).s, "cpu/shm/0");
    assert_string_equal(ddpw__key_shm(12).s, "cpu/shm/12");
    assert_string_equal(ddpw__key_shm(INT_MIN).s, "cpu/shm/-2147483648");
    assert_string_equal(ddpw__key_shm_ready(3).s, "cpu/ready/3");
    assert_string_equal(ddpw__key_shm_ready(INT_MIN).s, "cpu/ready/-2147483648");
    assert_string_equal(ddpw__key_ring(1).s, "cpu/tcp/1");
    assert_string_equal(ddpw__key_ring(INT_MIN).s, "cpu/tcp/-2147483648");
    assert_string_equal(ddpw__key_barrier(0).s, "barrier/0");
    assert_string_equal(ddpw__key_barrier(41).s, "barrier/41");
    assert_string_equal(ddpw__key_barrier(UINT64_MAX).s, "barrier/18446744073709551615");
    assert_string_equal(ddpw__key_train_sync(2).s, "train/sync/2");
    /* The longest name of all: 31 bytes and its NUL. */
    ddpw_name_t n = ddpw__key_train_sync(UINT64_MAX);
    assert_string_equal(n.s, "train/sync/18446744073709551615");
    assert_true(strlen(n.s) < DDPW_NAME_MAX);
    assert_string_equal(DDPW_KEY_DECISION, "backend/decision");
    assert_string_equal(DDPW_KEY_NCCL_ID, "nccl/id");
    assert_string_equal(DDPW_KEY_TRAIN_RESUME, "train/resume");
}

/* The whole key: "ddpw/<run_id>/<round>/<name>", the longest run id, round and name within
 * DDPW_KEY_MAX, and -EINVAL for no room, a negative round or a run id over its bound. */
static void test_key_round(void **state) {
    (void)state;
    char key[DDPW_KEY_MAX], want[DDPW_KEY_MAX], run[sizeof(((ddpw_env_t *)0)->run_id)];
    assert_int_equal(ddpw__key_round(key, sizeof key, "job", 0, ddpw__key_vote(3).s), 0);
    assert_string_equal(key, "ddpw/job/0/backend/vote/3");
    assert_int_equal(ddpw__key_round(key, sizeof key, "run-7", 12, ddpw__key_ring(1).s), 0);
    assert_string_equal(key, "ddpw/run-7/12/cpu/tcp/1");
    assert_int_equal(ddpw__key_round(key, sizeof key, "none", 1, DDPW_KEY_NCCL_ID), 0);
    assert_string_equal(key, "ddpw/none/1/nccl/id");

    memset(run, 'r', sizeof run - 1);
    run[sizeof run - 1] = '\0';
    ddpw_name_t n = ddpw__key_train_sync(UINT64_MAX);
    assert_int_equal(ddpw__key_round(key, sizeof key, run, INT64_MAX, n.s), 0);
    snprintf(want, sizeof want, "ddpw/%s/9223372036854775807/train/sync/18446744073709551615", run);
    assert_string_equal(key, want);
    size_t len = strlen(key);
    assert_true(len < DDPW_KEY_MAX);
    assert_int_equal(ddpw__key_round(key, len, run, INT64_MAX, n.s), -EINVAL);
    assert_int_equal(ddpw__key_round(key, len + 1, run, INT64_MAX, n.s), 0);

    assert_int_equal(ddpw__key_round(key, sizeof key, "job", -1, "nccl/id"), -EINVAL);
    char long_run[RDZV_RUN_ID_MAX + 2];
    memset(long_run, 'x', sizeof long_run - 1);
    long_run[sizeof long_run - 1] = '\0';
    assert_int_equal(ddpw__key_round(key, sizeof key, long_run, 0, "nccl/id"), -EINVAL);
}

/* A child of keys_flows: rank rank of two on one node (nodes 1) or of two one-rank nodes
 * (nodes 2), which inits the CPU backend, passes a barrier and, on rank 0, SETs a program's key. */
typedef struct flow_arg {
    const char *run;
    int nodes;
} flow_arg_t;

static int flow_child(int rank, const void *arg) {
    const flow_arg_t *a = arg;
    ddpw_env_t env;
    env_for(&env, rank, 2, 2, a->run);
    if (a->nodes == 2) {
        env.local_world_size = 1;
        env.local_rank = env.node_local_rank = 0;
        env.group_rank = rank;
    }
    ddpw_t *w = cpu_init(&env, 10000, 0);
    if (w == NULL)
        return 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = ddpw_barrier(w, &e);
    if (rc == 0 && rank == 0)
        rc = ddpw_store_set(w, "user/x", "v", 1, &e);
    if (rc != 0)
        fprintf(stderr, "rank %d: %s\n", rank, e.text);
    ddpw_free(w);
    return rc != 0;
}

/* The value of key (spelled out by the caller) in the fixture's store into v (NUL-terminated);
 * fails the test when the key is absent. */
static void store_value(rdzv_client_t *c, const char *key, char *v, size_t cap) {
    ddp_buf_t b = DDP_BUF_INIT;
    ddp_err_t e;
    ddp_err_clear(&e);
    if (rdzv_client_get(c, key, 2000, &b, &e) != 0)
        fail_msg("key '%s' is not in the store: %s", key, e.text);
    snprintf(v, cap, "%.*s", (int)b.len, b.len ? (const char *)b.data : "");
    ddp_buf_free(&b);
}

/* What the library's flows leave in the store, under "ddpw/<run>/2/": the votes and the decision,
 * a node's segment name and its ready barrier, the ring's addresses, a program's key; a store
 * barrier's keys; and a program's name too long for the prefix refused, naming it. */
static void test_keys_in_store(void **state) {
    (void)state;
    char one[64], two[64], key[256], v[256];
    snprintf(one, sizeof one, "keys-one-%d", (int)getpid());
    snprintf(two, sizeof two, "keys-two-%d", (int)getpid());
    flow_arg_t a1 = {one, 1}, a2 = {two, 2};
    assert_int_equal(run_ranks(2, flow_child, &a1), 0);
    assert_int_equal(run_ranks(2, flow_child, &a2), 0);

    rdzv_client_opts_t co = {.host = "127.0.0.1", .port = (uint16_t)g_port};
    rdzv_client_t *c = NULL;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(rdzv_client_connect(&co, &c, &e), 0);
    const char *both[] = {"backend/vote/0", "backend/vote/1", "backend/decision", "user/x"};
    for (size_t i = 0; i < sizeof both / sizeof *both; i++) {
        snprintf(key, sizeof key, "ddpw/%s/2/%s", one, both[i]);
        store_value(c, key, v, sizeof v);
        snprintf(key, sizeof key, "ddpw/%s/2/%s", two, both[i]);
        store_value(c, key, v, sizeof v);
    }
    snprintf(key, sizeof key, "ddpw/%s/2/cpu/shm/0", one);
    store_value(c, key, v, sizeof v);
    assert_non_null(strstr(v, "/ddpw-"));
    snprintf(key, sizeof key, "ddpw/%s/2/cpu/ready/0/done", one);
    store_value(c, key, v, sizeof v);
    assert_string_equal(v, "1");
    for (int node = 0; node < 2; node++) {
        snprintf(key, sizeof key, "ddpw/%s/2/cpu/tcp/%d", two, node);
        store_value(c, key, v, sizeof v);
        assert_memory_equal(v, "127.0.0.1 ", 10);
    }

    /* The store barrier and the store services, on a context of this process's own. */
    ddpw_ctx_t ctx;
    memset(&ctx, 0, sizeof ctx);
    env_for(&ctx.env, 0, 1, 2, one);
    ctx.timeout_ms = 2000;
    ctx.store = c;
    assert_int_equal(ddpw__store_barrier(&ctx, ddpw__key_barrier(5).s, 1, &e), 0);
    snprintf(key, sizeof key, "ddpw/%s/2/barrier/5/done", one);
    store_value(c, key, v, sizeof v);
    assert_string_equal(v, "1");
    char name[DDPW_KEY_MAX];
    memset(name, 'k', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    ddp_err_clear(&e);
    assert_int_equal(ddpw__store_set(&ctx, name, "v", 1, &e), -EINVAL);
    assert_non_null(strstr(e.text, "store key 'kkkk"));
    assert_non_null(strstr(e.text, "longer than 511 bytes"));
    rdzv_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_names),
        cmocka_unit_test(test_key_round),
        cmocka_unit_test(test_keys_in_store),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
