/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw's CPU collectives across forked ranks: allreduce, broadcast and barrier
 * for 2 to 6 ranks on one node (shared memory) and on 2 or 3 "nodes" of this machine joined by the
 * TCP ring, several sizes and chunkings, bitwise against a rank-order reference on one node; the
 * bounded waits (a missing peer at init, the ring's connect to a refusing port and to a full
 * accept queue), a dead local peer and a dead node named quickly, and the segment made in
 * DDPRUN_SHM_DIR. The store runs in a thread of this process (ddpw_fixture.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "ddp_timing.h"
#include "ddpw_fixture.h"

/* ---- collectives across forked ranks ---- */
static float input_value(int rank, size_t i) {
    /* Values whose sums round, so that summation order matters. */
    return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 100003) / 7.0 + 0.1 * rank);
}

typedef struct coll_case {
    int world;
    size_t count;
    size_t chunk;
    ddpw_op_t op;
    int nodes; /* 0 or 1: one node; more: "nodes" on this machine joined by the TCP ring */
} coll_case_t;

/* Child body: returns 0 when every check passes. */
static int child_collectives(int rank, const coll_case_t *c, const char *run) {
    ddpw_env_t env;
    env_for(&env, rank, c->world, 0, run);
    int nodes = c->nodes > 1 ? c->nodes : 1;
    env.local_world_size = c->world / nodes;
    env.local_rank = env.node_local_rank = rank % env.local_world_size;
    env.group_rank = rank / env.local_world_size;
    ddpw_t *w = cpu_init(&env, 20000, c->chunk);
    if (w == NULL)
        return 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    float *buf = malloc(c->count * sizeof(float) + 1);
    int bad = 0;
    for (int rep = 0; rep < 3 && !bad; rep++) {
        for (size_t i = 0; i < c->count; i++)
            buf[i] = input_value(rank, i + (size_t)rep);
        if (ddpw_allreduce(w, buf, c->count, c->op, &e) != 0) {
            fprintf(stderr, "rank %d allreduce: %s\n", rank, e.text);
            bad = 1;
            break;
        }
        for (size_t i = 0; i < c->count; i++) {
            float acc = input_value(0, i + (size_t)rep) + input_value(1, i + (size_t)rep);
            for (int r = 2; r < c->world; r++)
                acc += input_value(r, i + (size_t)rep);
            if (c->op == DDPW_AVG)
                acc /= (float)c->world;
            /* One node sums in rank order, bit for bit; across nodes the ring's order differs
             * (still fixed for a fixed world), so compare with a tolerance there. */
            int same = nodes == 1 ? memcmp(&acc, &buf[i], sizeof acc) == 0
                                  : fabsf(acc - buf[i]) <= 1e-6f * fabsf(acc) + 1e-6f;
            if (!same) {
                fprintf(stderr, "rank %d rep %d: [%zu] = %.9g, expected %.9g\n", rank, rep, i,
                        buf[i], acc);
                bad = 1;
                break;
            }
        }
    }
    /* Broadcast from the last rank, then a barrier. */
    size_t blen = c->count * sizeof(float) + 1;
    unsigned char *b = (unsigned char *)buf;
    for (size_t i = 0; i < blen; i++)
        b[i] = rank == c->world - 1 ? (unsigned char)(i * 7) : 0xEE;
    if (!bad && ddpw_broadcast(w, buf, blen, c->world - 1, &e) != 0) {
        fprintf(stderr, "rank %d broadcast: %s\n", rank, e.text);
        bad = 1;
    }
    for (size_t i = 0; !bad && i < blen; i++)
        if (b[i] != (unsigned char)(i * 7)) {
            fprintf(stderr, "rank %d broadcast byte %zu wrong\n", rank, i);
            bad = 1;
        }
    if (!bad && ddpw_barrier(w, &e) != 0) {
        fprintf(stderr, "rank %d barrier: %s\n", rank, e.text);
        bad = 1;
    }
    free(buf);
    ddpw_free(w);
    return bad;
}

static int coll_child(int rank, const void *arg) {
    const coll_case_t *c = arg;
    char run[64];
    snprintf(run, sizeof run, "coll-%d-%zu-%zu-%d-%d-%d", c->world, c->count, c->chunk, c->op,
             c->nodes, (int)getppid());
    return child_collectives(rank, c, run);
}

static void test_cpu_collectives(void **state) {
    (void)state;
    coll_case_t cases[] = {
        {2, 1, 0, DDPW_SUM, 1},
        {2, 1000, 0, DDPW_SUM, 1},
        {2, 1 << 20, 0, DDPW_AVG, 1},
        {2, 100003, 4096, DDPW_SUM, 1},
        {3, 7, 0, DDPW_SUM, 1},
        {3, 250001, 8192, DDPW_SUM, 1},
        {3, 1 << 18, 0, DDPW_AVG, 1},
        {4, 33333, 1024, DDPW_AVG, 1},
        /* Several nodes on one machine: shared memory inside, the TCP ring between leaders. */
        {2, 100003, 0, DDPW_SUM, 2},
        {3, 77777, 4096, DDPW_AVG, 3},
        {4, 1 << 18, 0, DDPW_SUM, 2},
        {6, 5, 0, DDPW_SUM, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int f = run_ranks(cases[i].world, coll_child, &cases[i]);
        if (f != 0)
            fail_msg("case %zu (world %d, %zu floats, chunk %zu): %d rank(s) failed", i,
                     cases[i].world, cases[i].count, cases[i].chunk, f);
    }
}

/* A missing peer: init of a world of 2 with only rank 0 gives DDP_ETIMEOUT, within bounds. */
static void test_init_timeout(void **state) {
    (void)state;
    ddpw_env_t env;
    env_for(&env, 0, 2, 0, "lonely");
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    o.timeout_ms = 400;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w = NULL;
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(ddpw_init_env(&w, &env, &o, &e), DDP_ETIMEOUT);
    assert_null(w);
    assert_true(ddp_now_ms() - t0 < 5000);
}

/* Rank 1 exits after init; rank 0's next collective names it instead of waiting forever. */
static int dead_child(int rank, const void *arg) {
    (void)arg;
    ddpw_env_t env;
    char run[64];
    snprintf(run, sizeof run, "dead-%d", (int)getppid());
    env_for(&env, rank, 2, 0, run);
    ddpw_t *w = cpu_init(&env, 20000, 0);
    if (w == NULL)
        return 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    if (rank == 1)
        _exit(0);
    float x[64] = {0};
    usleep(100000);
    uint64_t t0 = ddp_now_ms();
    int rc = ddpw_allreduce(w, x, 64, DDPW_SUM, &e);
    int ok =
        rc == DDP_ECLOSED && strstr(e.text, "local rank 1") != NULL && ddp_now_ms() - t0 < 5000;
    if (!ok)
        fprintf(stderr, "dead peer: rc %d '%s'\n", rc, e.text);
    return ok ? 0 : 1;
}

static void test_dead_peer(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, dead_child, NULL), 0);
}

/* Under ddprun the segment is a file in DDPRUN_SHM_DIR, which the agent empties when a group
 * stops. Rank 1 is set up differently (its chunk), so it refuses the segment's size, naming it:
 * the name must be in the directory. Rank 0 waits for it until its timeout, then unlinks. */
static int scratch_child(int rank, const void *arg) {
    const char *dir = arg;
    ddpw_env_t env;
    char run[64];
    snprintf(run, sizeof run, "scratch-%d", (int)getppid());
    env_for(&env, rank, 2, 0, run);
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    o.timeout_ms = rank == 0 ? 1500 : 10000;
    o.cpu_chunk_bytes = rank == 0 ? 0 : (size_t)1 << 20;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w = NULL;
    int rc = ddpw_init_env(&w, &env, &o, &e);
    int ok = rc != 0 && w == NULL;
    if (rank == 1) {
        char want[512]; /* the name goes on with rank 0's pid and a nonce */
        snprintf(want, sizeof want, "shared memory %s/ddpw-", dir);
        ok = ok && rc == DDP_EPROTO && strstr(e.text, want) != NULL;
    }
    if (!ok)
        fprintf(stderr, "scratch rank %d: rc %d '%s'\n", rank, rc, e.text);
    return ok ? 0 : 1;
}

static void test_segment_in_scratch_dir(void **state) {
    (void)state;
    char dir[] = "/tmp/ddpw-scratch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("DDPRUN_SHM_DIR", dir, 1);
    int failed = run_ranks(2, scratch_child, dir);
    unsetenv("DDPRUN_SHM_DIR");
    int left = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d != NULL && (de = readdir(d)) != NULL;)
        left += de->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    rmdir(dir);
    assert_int_equal(failed, 0);
    assert_int_equal(left, 0); /* rank 0 unlinked it once its wait ended */
}

/* Two "nodes" of one rank: node 1's leader exits; node 0's next collective reports the closed
 * ring connection instead of waiting for the timeout. */
static int dead_node_child(int rank, const void *arg) {
    (void)arg;
    ddpw_env_t env;
    char run[64];
    snprintf(run, sizeof run, "deadnode-%d", (int)getppid());
    env_for(&env, rank, 2, 0, run);
    env.local_world_size = 1;
    env.local_rank = env.node_local_rank = 0;
    env.group_rank = rank;
    ddpw_t *w = cpu_init(&env, 20000, 0);
    if (w == NULL)
        return 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    float x[1000] = {0};
    if (ddpw_allreduce(w, x, 1000, DDPW_SUM, &e) != 0)
        return 1;
    if (rank == 1)
        _exit(0);
    uint64_t t0 = ddp_now_ms();
    int rc = ddpw_allreduce(w, x, 1000, DDPW_SUM, &e);
    int ok = rc == DDP_ECLOSED && strstr(e.text, "node 1") != NULL && ddp_now_ms() - t0 < 5000;
    if (!ok)
        fprintf(stderr, "dead node: rc %d '%s'\n", rc, e.text);
    ddpw_free(w);
    return ok ? 0 : 1;
}

static void test_dead_node(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, dead_node_child, NULL), 0);
}

/* ---- the ring's connect is bounded ---- */
/* Rank 0 of two one-rank "nodes" reads node 1's backend vote and leader address from the store
 * (the test puts a CPU vote and "127.0.0.1 port" there) and must give up within its 400 ms timeout
 * with DDP_ETIMEOUT and one line naming node 1, its rank, its address and `want` ("refused" or
 * "timed out"). */
static void ring_connect_fails(const char *what, uint16_t port, const char *want) {
    char run[64], key[DDPW_KEY_MAX], val[64], addr[32];
    snprintf(run, sizeof run, "ringconn-%s-%d", what, (int)getpid());
    assert_int_equal(ddpw__key_round(key, sizeof key, run, 0, ddpw__key_ring(1).s), 0);
    snprintf(val, sizeof val, "127.0.0.1 %u", port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    rdzv_client_opts_t co = {.host = "127.0.0.1", .port = (uint16_t)g_port};
    rdzv_client_t *c = NULL;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(rdzv_client_connect(&co, &c, &e), 0);
    assert_int_equal(rdzv_client_set(c, key, val, strlen(val), &e), 0);
    ddpw_vote_t v = {.asked = DDPW_BACKEND_CPU, .group_rank = 1, .host = "node1"};
    char vt[DDPW_VOTE_MAX];
    int vn = ddpw__vote_encode(&v, vt, sizeof vt);
    assert_int_equal(ddpw__key_round(key, sizeof key, run, 0, ddpw__key_vote(1).s), 0);
    assert_int_equal(rdzv_client_set(c, key, vt, (size_t)vn, &e), 0);
    rdzv_client_free(c);

    ddpw_env_t env;
    env_for(&env, 0, 2, 0, run);
    env.local_world_size = 1; /* two nodes of one rank: rank 0 leads node 0 */
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    o.timeout_ms = 400;
    ddpw_t *w = NULL;
    uint64_t t0 = ddp_now_ms();
    int rc = ddpw_init_env(&w, &env, &o, &e);
    uint64_t took = ddp_now_ms() - t0;
    if (rc != DDP_ETIMEOUT || took < 350 || took > 3000 || strstr(e.text, "node 1") == NULL ||
        strstr(e.text, "(rank 1)") == NULL || strstr(e.text, addr) == NULL ||
        strstr(e.text, want) == NULL || strchr(e.text, '\n') != NULL)
        fail_msg("%s: rc %d after %llu ms: '%s'", what, rc, (unsigned long long)took, e.text);
    assert_null(w);
}

/* A bound 127.0.0.1 TCP socket; listening with backlog when backlog >= 0. Returns its port. */
static uint16_t loopback_socket(int *fd, int backlog) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(*fd >= 0);
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof a), 0);
    if (backlog >= 0)
        assert_int_equal(listen(*fd, backlog), 0);
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &al), 0);
    return ntohs(a.sin_port);
}

/* Refused: a port that is bound (so nobody else takes it) but not listening answers RST. */
static void test_ring_connect_refused(void **state) {
    (void)state;
    int fd;
    uint16_t port = loopback_socket(&fd, -1);
    ring_connect_fails("refused", port, "refused");
    close(fd);
}

/* Timed out: a listener whose accept queue is full drops SYNs, so without the poll deadline the
 * connect would wait for the kernel's SYN retries (about two minutes). */
static void test_ring_connect_timeout(void **state) {
    (void)state;
    int lfd, fill[8], n = 0, pending = 0;
    uint16_t port = loopback_socket(&lfd, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* Connect (never accepted) until one connect stays pending: the queue is then full. */
    while (!pending && n < 8) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        assert_true(fd >= 0);
        fill[n++] = fd;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            continue;
        assert_int_equal(errno, EINPROGRESS);
        struct pollfd p = {fd, POLLOUT, 0};
        pending = poll(&p, 1, 100) == 0;
    }
    if (!pending)
        fail_msg("could not fill the accept queue of a loopback listener (%d connects)", n);
    ring_connect_fails("timeout", port, "timed out");
    for (int i = 0; i < n; i++)
        close(fill[i]);
    close(lfd);
}

/* The CPU collectives time themselves (ddpw_timing_add): rank 1 computes 20 ms more before
 * each of 10 allreduces; its file shows that as compute, rank 0's as time waited, 10 steps each. */
static int timed_child(int rank, const void *arg) {
    const char *dir = arg;
    char path[256], run[64];
    snprintf(path, sizeof path, "%s/timing.%d", dir, rank);
    setenv("DDPRUN_TIMING_FILE", path, 1);
    ddpw__timing_reset();
    snprintf(run, sizeof run, "timed-%d", (int)getppid());
    ddpw_env_t env;
    env_for(&env, rank, 2, 0, run);
    ddpw_t *w = cpu_init(&env, 10000, 0);
    if (w == NULL)
        return 1;
    float x[64] = {0};
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++) {
        if (rank == 1)
            usleep(20000);
        rc = ddpw_allreduce(w, x, 64, DDPW_SUM, &e);
    }
    ddpw_timing_flush();
    ddpw_free(w);
    return rc == 0 ? 0 : 1;
}

static void read_timing(const char *dir, int rank, ddp_timing_t *t) {
    char path[256], buf[DDP_TIMING_LEN];
    snprintf(path, sizeof path, "%s/timing.%d", dir, rank);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(path);
    assert_int_equal(ddp_timing_parse(buf, n, t), 0);
}

static void test_collectives_timed(void **state) {
    (void)state;
    char dir[] = "/tmp/ddpw-timed-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int r = 0; r < 2; r++) {
        char path[256];
        snprintf(path, sizeof path, "%s/timing.%d", dir, r);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    int failed = run_ranks(2, timed_child, dir);
    ddp_timing_t t0, t1;
    read_timing(dir, 0, &t0);
    read_timing(dir, 1, &t1);
    rmdir(dir);
    assert_int_equal(failed, 0);
    assert_int_equal(t0.steps, 10);
    assert_int_equal(t1.steps, 10);
    /* Nine gaps of 20 ms between rank 1's allreduces (the first has no previous one). */
    if (t1.compute_ns < 170000000ull || t0.wait_ns < 150000000ull ||
        t0.compute_ns > t1.compute_ns / 2)
        fail_msg("rank 0: compute %llu ns wait %llu ns; rank 1: compute %llu ns wait %llu ns",
                 (unsigned long long)t0.compute_ns, (unsigned long long)t0.wait_ns,
                 (unsigned long long)t1.compute_ns, (unsigned long long)t1.wait_ns);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_collectives),
        cmocka_unit_test(test_init_timeout),
        cmocka_unit_test(test_dead_peer),
        cmocka_unit_test(test_dead_node),
        cmocka_unit_test(test_segment_in_scratch_dir),
        cmocka_unit_test(test_ring_connect_refused),
        cmocka_unit_test(test_ring_connect_timeout),
        cmocka_unit_test(test_collectives_timed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
