/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw's backend choice: the NCCL unique-id exchange through a real store across
 * ranks and rounds (skipped without CUDA in the build), --backend nccl without a GPU (named, never
 * a crash; AUTO falls back to the CPU), and the job's decision from every rank's vote (nodes that
 * differ, a shared GPU, different asks, an old driver) with the votes' text form. The store runs in
 * a thread of this process (ddpw_fixture.h). */
#include <stdlib.h>

#include "ddpw_fixture.h"

/* ---- NCCL id exchange through the store ---- */
#ifdef DDP_HAVE_CUDA
typedef struct id_arg {
    int64_t round;
    int fd; /* write end: each rank sends its 128 bytes */
} id_arg_t;

static int id_child(int rank, const void *arg) {
    const id_arg_t *a = arg;
    char run[64];
    snprintf(run, sizeof run, "nccl-%d", (int)getppid());
    ddpw_env_t env;
    env_for(&env, rank, 3, a->round, run);
    ddpw_t *w = cpu_init(&env, 10000, 0);
    if (w == NULL)
        return 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    unsigned char id[129];
    id[0] = (unsigned char)rank;
    int rc = ddpw__nccl_id_exchange(ddpw__ctx(w), id + 1, &e);
    if (rc != 0)
        fprintf(stderr, "rank %d: %s\n", rank, e.text);
    else if (write(a->fd, id, sizeof id) != (ssize_t)sizeof id)
        rc = -1;
    ddpw_free(w);
    return rc != 0;
}
#endif

static void test_nccl_id_exchange(void **state) {
    (void)state;
#ifndef DDP_HAVE_CUDA
    skip();
#else
    unsigned char ids[2][3][128];
    for (int round = 0; round < 2; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        id_arg_t a = {round, p[1]};
        assert_int_equal(run_ranks(3, id_child, &a), 0);
        close(p[1]);
        for (int k = 0; k < 3; k++) {
            unsigned char rec[129];
            assert_int_equal(read(p[0], rec, sizeof rec), (ssize_t)sizeof rec);
            assert_true(rec[0] < 3);
            memcpy(ids[round][rec[0]], rec + 1, 128);
        }
        close(p[0]);
        assert_memory_equal(ids[round][0], ids[round][1], 128);
        assert_memory_equal(ids[round][0], ids[round][2], 128);
    }
    /* A new round never sees the previous round's id. */
    assert_memory_not_equal(ids[0][0], ids[1][0], 128);
#endif
}

/* Without a GPU the NCCL backend says so, naming the rank, its node and why (never crashes); AUTO
 * takes the CPU backend without a word on a machine that has no GPU. */
static void test_nccl_without_gpu(void **state) {
    (void)state;
    ddpw_cuda_probe_t p;
    ddpw__cuda_probe(0, &p);
    if (p.count > 0)
        skip();
    ddpw_env_t env;
    env_for(&env, 0, 1, 0, "nogpu");
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_NCCL;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w = NULL;
    assert_int_equal(ddpw_init_env(&w, &env, &o, &e), DDP_ENOGPU);
    assert_non_null(strstr(e.text, "backend nccl: rank 0 on node 0 ("));
    if (strstr(e.text, "no CUDA device is visible") == NULL &&
        strstr(e.text, "no CUDA driver is installed") == NULL &&
        strstr(e.text, "this build has no CUDA support") == NULL)
        fail_msg("no reason in '%s'", e.text);
    o.backend = DDPW_BACKEND_AUTO; /* auto falls back to the CPU backend */
    assert_int_equal(ddpw_init_env(&w, &env, &o, NULL), 0);
    assert_int_equal(ddpw_backend(w), DDPW_BACKEND_CPU);
    if (p.count == 0 || p.driver == 0)
        assert_null(ddpw_backend_note(w));
    ddpw_free(w);
    /* A world of one bounds its waits by DDPRUN_COLL_TIMEOUT_MS too. */
    setenv("DDPRUN_COLL_TIMEOUT_MS", "1234", 1);
    assert_int_equal(ddpw_init_env(&w, &env, &o, NULL), 0);
    assert_int_equal(ddpw__ctx(w)->timeout_ms, 1234);
    unsetenv("DDPRUN_COLL_TIMEOUT_MS");
    ddpw_free(w);
}

/* A vote as the decision sees it: node g, host h, a device of its own (dev) or why not. */
static ddpw_vote_t vote(ddpw_backend_t asked, int g, const char *h, const char *dev,
                        const char *why, int failed) {
    ddpw_vote_t v;
    memset(&v, 0, sizeof v);
    v.asked = asked;
    v.group_rank = g;
    v.can_nccl = dev != NULL;
    v.cuda_failed = failed;
    snprintf(v.host, sizeof v.host, "%s", h);
    snprintf(v.device, sizeof v.device, "%s", dev ? dev : "");
    snprintf(v.why, sizeof v.why, "%s", why ? why : "");
    return v;
}

/* The job's backend is decided once from every rank's vote: nodes that differ give every rank
 * the CPU backend under AUTO (a note naming the rank that kept NCCL out) or the same error under
 * NCCL, never a split job; two ranks of one node on one GPU count as no GPU of their own; ranks
 * asking for different backends fail; a machine without GPUs says nothing; a failed device query
 * (an old driver) is said, with CUDA's error. Votes survive the store's text form. */
static void test_backend_decide(void **state) {
    (void)state;
    const ddpw_backend_t A = DDPW_BACKEND_AUTO, N = DDPW_BACKEND_NCCL;
    const char *fewer = "LOCAL_RANK=1 but only 1 CUDA device(s) are visible";
    ddpw_vote_t v[4];
    ddpw_backend_t b;
    char note[600];
    ddp_err_t e;
    for (int k = 0; k < 2; k++) { /* node 1 has one GPU for two ranks */
        ddpw_backend_t asked = k ? N : A;
        v[0] = vote(asked, 0, "a", "0000:01:00.0", NULL, 0);
        v[1] = vote(asked, 0, "a", "0000:02:00.0", NULL, 0);
        v[2] = vote(asked, 1, "b", "0000:01:00.0", NULL, 0);
        v[3] = vote(asked, 1, "b", NULL, fewer, 0);
        ddp_err_clear(&e);
        int rc = ddpw__backend_decide(v, 4, &b, note, sizeof note, &e);
        if (asked == A) {
            assert_int_equal(rc, 0);
            assert_int_equal(b, DDPW_BACKEND_CPU);
            assert_non_null(strstr(note, "the CPU backend for every rank"));
            assert_non_null(strstr(note, "rank 3 on node 1 (b): LOCAL_RANK=1 but only 1"));
        } else {
            assert_int_equal(rc, DDP_ENOGPU);
            assert_string_equal(e.text, "backend nccl: rank 3 on node 1 (b): LOCAL_RANK=1 but "
                                        "only 1 CUDA device(s) are visible");
        }
    }
    /* Every rank a device of its own: NCCL, for AUTO too, without a note. */
    v[3] = vote(A, 1, "b", "0000:02:00.0", NULL, 0);
    for (int r = 0; r < 3; r++)
        v[r].asked = A;
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, NULL), 0);
    assert_int_equal(b, DDPW_BACKEND_NCCL);
    assert_string_equal(note, "");
    /* One device for two ranks of node 1 (virtual local ranks pointing at one GPU). */
    v[3] = vote(A, 1, "b", "0000:01:00.0", NULL, 0);
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, NULL), 0);
    assert_int_equal(b, DDPW_BACKEND_CPU);
    assert_non_null(strstr(note, "ranks 2 and 3 on node 1 (b) would share GPU 0000:01:00.0"));
    for (int r = 0; r < 4; r++)
        v[r].asked = N;
    ddp_err_clear(&e);
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, &e), DDP_ENOGPU);
    assert_non_null(strstr(e.text, "would share GPU"));
    /* Different asks. */
    v[2].asked = A;
    ddp_err_clear(&e);
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "backend: rank 2 on node 1 (b) asked for auto, rank 0 for nccl");
    /* No GPU anywhere: CPU, nothing to say. An old driver: CPU, said with CUDA's error. */
    for (int r = 0; r < 4; r++)
        v[r] = vote(A, r / 2, "c", NULL, "no CUDA device is visible", 0);
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, NULL), 0);
    assert_int_equal(b, DDPW_BACKEND_CPU);
    assert_string_equal(note, "");
    v[1] = vote(A, 0, "c", NULL, "cudaGetDeviceCount: too old (driver 11.8, runtime 13.0)", 1);
    assert_int_equal(ddpw__backend_decide(v, 4, &b, note, sizeof note, NULL), 0);
    assert_int_equal(b, DDPW_BACKEND_CPU);
    assert_non_null(strstr(note, "rank 1 on node 0 (c): cudaGetDeviceCount: too old (driver 11.8"));
    /* The store's text form, both ways; a malformed one names the rank. */
    char text[DDPW_VOTE_MAX];
    ddpw_vote_t back;
    assert_true(ddpw__vote_encode(&v[1], text, sizeof text) > 0);
    assert_int_equal(ddpw__vote_decode(text, 1, &back, NULL), 0);
    assert_memory_equal(&back, &v[1], sizeof back);
    ddp_err_clear(&e);
    assert_int_equal(ddpw__vote_decode("v1\t9\t0", 5, &back, &e), DDP_EPROTO);
    assert_string_equal(e.text, "backend vote of rank 5 is malformed");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nccl_id_exchange),
        cmocka_unit_test(test_nccl_without_gpu),
        cmocka_unit_test(test_backend_decide),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
