/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of libddpw: environment parsing, the error file, CPU collectives across forked
 * ranks (2 and 3, several sizes and chunkings, bitwise against a rank-order reference), bounded
 * waits, a dead peer, the TCP ring's bounded connect (refused, timed out), and the NCCL unique-id
 * exchange through a real store across rounds, and the heartbeat file (content, mtime, rate limit,
 * refused files, a failed write; pwrite is wrapped by the linker to count and fail writes). The
 * store runs in a thread of this process (rdzv_server on its own libuv loop, 127.0.0.1:0). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ddp_time.h"
#include "ddpw_int.h"
#include "rdzv_server.h"

/* ---- the store in a thread ---- */
static rdzv_server_thread_t *g_store;
static _Atomic int g_port;

static int group_setup(void **state) {
    (void)state;
    rdzv_server_opts_t o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.no_auth = 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    if (rdzv_server_thread_start(&o, &g_store, &e) != 0) {
        fprintf(stderr, "server: %s\n", e.text);
        return -1;
    }
    g_port = rdzv_server_thread_port(g_store);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    rdzv_server_thread_stop(g_store);
    return 0;
}

static void env_for(ddpw_env_t *env, int rank, int world, int64_t round, const char *run) {
    memset(env, 0, sizeof *env);
    env->rank = env->local_rank = env->node_local_rank = rank;
    env->world_size = env->local_world_size = world;
    env->round = round;
    env->have_store = 1;
    snprintf(env->store_host, sizeof env->store_host, "127.0.0.1");
    env->store_port = (uint16_t)g_port;
    snprintf(env->run_id, sizeof env->run_id, "%s", run);
}

/* ddpw_init_env on the CPU backend with timeout_ms and chunk bytes (0: the default); on failure
 * says why on stderr, naming the rank, and returns NULL. */
static ddpw_t *cpu_init(ddpw_env_t *env, int timeout_ms, size_t chunk) {
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    o.timeout_ms = timeout_ms;
    o.cpu_chunk_bytes = chunk;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w = NULL;
    if (ddpw_init_env(&w, env, &o, &e) != 0) {
        fprintf(stderr, "rank %d init: %s\n", env->rank, e.text);
        return NULL;
    }
    return w;
}

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

/* Forks world children running fn, waits (bounded) and returns how many failed. */
static int run_ranks(int world, int (*fn)(int, const void *), const void *arg) {
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(30);
            _exit(fn(r, arg));
        }
    }
    int failed = 0;
    uint64_t deadline = ddp_now_ms() + 40000;
    for (int r = 0; r < world; r++) {
        int st = 0;
        pid_t got;
        while ((got = waitpid(pids[r], &st, WNOHANG)) == 0 && ddp_now_ms() < deadline)
            usleep(2000);
        if (got == 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &st, 0);
            failed++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    return failed;
}

static int coll_child(int rank, const void *arg) {
    const coll_case_t *c = arg;
    char run[64];
    snprintf(run, sizeof run, "coll-%d-%zu-%zu-%d-%d-%d", c->world, c->count, c->chunk, c->op,
             c->nodes, (int)getppid());
    return child_collectives(rank, c, run);
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
    snprintf(key, sizeof key, "ddpw/%s/0/cpu/tcp/1", run);
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
    snprintf(key, sizeof key, "ddpw/%s/0/backend/vote/1", run);
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

/* ---- heartbeat ---- */

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
        cmocka_unit_test(test_env_single),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_error_file),
        cmocka_unit_test(test_error_file_symlinks),
        cmocka_unit_test(test_cpu_collectives),
        cmocka_unit_test(test_init_timeout),
        cmocka_unit_test(test_dead_peer),
        cmocka_unit_test(test_dead_node),
        cmocka_unit_test(test_segment_in_scratch_dir),
        cmocka_unit_test(test_nccl_id_exchange),
        cmocka_unit_test(test_nccl_without_gpu),
        cmocka_unit_test(test_backend_decide),
        cmocka_unit_test(test_ring_connect_refused),
        cmocka_unit_test(test_ring_connect_timeout),
        cmocka_unit_test(test_heartbeat_off),
        cmocka_unit_test(test_heartbeat_file),
        cmocka_unit_test(test_heartbeat_rate_limit),
        cmocka_unit_test(test_heartbeat_shorter),
        cmocka_unit_test(test_heartbeat_refused),
        cmocka_unit_test(test_heartbeat_write_error),
        cmocka_unit_test(test_heartbeat_threads),
        cmocka_unit_test(test_heartbeat_cleanup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
