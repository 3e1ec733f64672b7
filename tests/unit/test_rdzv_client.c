/* SPDX-License-Identifier: Apache-2.0
 * Client + server in one process: the server runs on its own libuv loop in a thread, on
 * 127.0.0.1 port 0; the tests drive it with rdzv_client from the main thread (and helper
 * threads for waits released by other clients and for barriers). */
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
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_net.h"
#include "ddp_sockdiag.h"
#include "ddp_time.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "rdzv_server_int.h"
#include "syn_blackhole.h"

static const char good_token[] = "0123456789abcdef-test-token";

typedef struct server_thread {
    rdzv_server_thread_t *t;
    uint16_t port;
} server_thread_t;

/* The server of o (host and port filled in here: 127.0.0.1, a free port) on a thread. */
static server_thread_t *server_up_with(rdzv_server_opts_t *o) {
    server_thread_t *st = calloc(1, sizeof *st);
    assert_non_null(st);
    o->host = "127.0.0.1";
    o->port = 0;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_server_thread_start(o, &st->t, &err) < 0)
        fail_msg("server start: %s", err.text);
    st->port = rdzv_server_thread_port(st->t);
    assert_true(st->port > 0);
    return st;
}

static server_thread_t *server_up(const void *token, size_t token_len, size_t max_out_buf,
                                  int auth_idle_ms) {
    rdzv_server_opts_t o = {0};
    o.token = token;
    o.token_len = token_len;
    o.no_auth = token == NULL;
    o.max_out_buf = max_out_buf;
    o.auth_idle_ms = auth_idle_ms;
    return server_up_with(&o);
}

static void server_down(server_thread_t *st) {
    rdzv_server_thread_stop(st->t);
    free(st);
}

/* Connects with token (len bytes; NULL: none), naming run (NULL: none) in the handshake. */
static int connect_run(uint16_t port, const void *token, size_t len, const char *run,
                       rdzv_client_t **c, ddp_err_t *err) {
    rdzv_client_opts_t o = {0};
    o.host = "127.0.0.1";
    o.port = port;
    o.token = token;
    o.token_len = len;
    o.run_id = run;
    o.connect_timeout_ms = 2000;
    o.io_timeout_ms = 5000;
    ddp_err_clear(err);
    *c = NULL;
    return rdzv_client_connect(&o, c, err);
}

static int connect_to(uint16_t port, const void *token, size_t token_len, rdzv_client_t **c,
                      ddp_err_t *err) {
    return connect_run(port, token, token_len, NULL, c, err);
}

static rdzv_client_t *must_connect(uint16_t port, const void *token, size_t token_len) {
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    if (connect_to(port, token, token_len, &c, &err) < 0)
        fail_msg("connect: %s", err.text);
    return c;
}

static void mark_closed(void *arg) {
    *(int *)arg = 1;
}

typedef struct blackhole {
    int lfd, filler;
    uint16_t port;
    rdzv_server_thread_t *srv;
} blackhole_t;

/* 100 ms later the blackhole goes and a store takes its port. */
static void *blackhole_to_server(void *arg) {
    blackhole_t *b = arg;
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    close(b->filler);
    close(b->lfd);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .port = b->port, .no_auth = 1};
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_server_thread_start(&o, &b->srv, &err) < 0)
        b->srv = NULL;
    return NULL;
}

/* A connect that gets no answer is abandoned after DDP_CONNECT_TRY_FIRST_MS and made again on a
 * new socket: the store that answers from 100 ms on is reached on the next try, not when the
 * kernel sends the lost SYN again (1 s later). Before, a worker whose link flapped during its
 * start-up waited for the kernel's backoff past --heartbeat_timeout. */
static void test_connect_unanswered_retried(void **state) {
    (void)state;
    blackhole_t b = {0};
    b.port = syn_blackhole(&b.lfd, &b.filler);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blackhole_to_server, &b), 0);
    rdzv_client_opts_t o = {.host = "127.0.0.1", .port = b.port, .connect_timeout_ms = 5000};
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    uint64_t t0 = ddp_now_ms();
    int rc = rdzv_client_connect(&o, &c, &err);
    uint64_t took = ddp_now_ms() - t0;
    pthread_join(th, NULL);
    if (rc < 0)
        fail_msg("connect: %s", err.text);
    print_message("connected after %llu ms\n", (unsigned long long)took);
    assert_true(took >= DDP_CONNECT_TRY_FIRST_MS - 10 && took < 800);
    rdzv_client_free(c);
    assert_non_null(b.srv);
    rdzv_server_thread_stop(b.srv);
}

static void test_commands(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_authenticated(c), 0);
    assert_int_equal(rdzv_client_set(c, "a", "hello", 5, &err), 0);
    assert_int_equal(rdzv_client_get(c, "a", 1000, &v, &err), 0);
    assert_int_equal(v.len, 5);
    assert_memory_equal(v.data, "hello", 5);
    assert_int_equal(rdzv_client_set(c, "empty", "", 0, &err), 0);
    assert_int_equal(rdzv_client_get(c, "empty", 0, &v, &err), 0);
    assert_int_equal(v.len, 0);

    int64_t n = 0;
    assert_int_equal(rdzv_client_add(c, "cnt", 5, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_int_equal(rdzv_client_add(c, "cnt", -7, &n, &err), 0);
    assert_int_equal(n, -2);
    assert_int_equal(rdzv_client_get(c, "cnt", 0, &v, &err), 0);
    assert_int_equal(v.len, 2);
    assert_memory_equal(v.data, "-2", 2);

    const char *ks[] = {"a", "cnt"};
    const char *ks_missing[] = {"a", "nope"};
    int ready = -1;
    assert_int_equal(rdzv_client_check(c, ks, 2, &ready, &err), 0);
    assert_int_equal(ready, 1);
    assert_int_equal(rdzv_client_check(c, ks_missing, 2, &ready, &err), 0);
    assert_int_equal(ready, 0);
    assert_int_equal(rdzv_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 3);

    /* COMPARE_SET: absent + empty expected sets; mismatch returns the current value; absent +
     * non-empty expected returns the expected value (TCPStore's behaviour). */
    assert_int_equal(rdzv_client_compare_set(c, "cas", "", 0, "one", 3, &v, &err), 0);
    assert_memory_equal(v.data, "one", 3);
    assert_int_equal(rdzv_client_compare_set(c, "cas", "xxx", 3, "two", 3, &v, &err), 0);
    assert_memory_equal(v.data, "one", 3);
    assert_int_equal(rdzv_client_compare_set(c, "cas", "one", 3, "two", 3, &v, &err), 0);
    assert_memory_equal(v.data, "two", 3);
    assert_int_equal(rdzv_client_compare_set(c, "nocas", "exp", 3, "new", 3, &v, &err), 0);
    assert_memory_equal(v.data, "exp", 3);
    assert_int_equal(rdzv_client_get(c, "nocas", 0, &v, &err), DDP_ENOKEY);
    ddp_err_clear(&err);

    assert_int_equal(rdzv_client_append(c, "log", "ab", 2, &err), 0);
    assert_int_equal(rdzv_client_append(c, "log", "cd", 2, &err), 0);
    assert_int_equal(rdzv_client_get(c, "log", 0, &v, &err), 0);
    assert_int_equal(v.len, 4);
    assert_memory_equal(v.data, "abcd", 4);

    const char *mk[] = {"m1", "m2", "m3"};
    const void *mv[] = {"x", "yy", ""};
    size_t ml[] = {1, 2, 0};
    assert_int_equal(rdzv_client_multi_set(c, mk, mv, ml, 3, &err), 0);
    ddp_buf_t vals[3] = {DDP_BUF_INIT, DDP_BUF_INIT, DDP_BUF_INIT};
    assert_int_equal(rdzv_client_multi_get(c, mk, 3, 1000, vals, &err), 0);
    assert_int_equal(vals[0].len, 1);
    assert_int_equal(vals[1].len, 2);
    assert_memory_equal(vals[1].data, "yy", 2);
    assert_int_equal(vals[2].len, 0);
    for (int i = 0; i < 3; i++)
        ddp_buf_free(&vals[i]);

    int deleted = -1;
    assert_int_equal(rdzv_client_delete(c, "a", &deleted, &err), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(rdzv_client_delete(c, "a", &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(rdzv_client_ping(c, &err), 0);

    ddp_buf_t stats = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_stats(c, &stats, &err), 0);
    assert_non_null(strstr((char *)stats.data, "conns 1\n"));
    ddp_buf_free(&stats);
    assert_int_equal(err.code, 0);
    assert_int_equal(strncmp(rdzv_client_peer(c), "127.0.0.1:", 10), 0);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);
}

static void test_get_timeout(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(c, "missing", 0, &v, &err), DDP_ENOKEY);
    ddp_err_clear(&err);
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(rdzv_client_get(c, "r1/nccl/0", 150, &v, &err), DDP_ETIMEOUT);
    uint64_t dt = ddp_now_ms() - t0;
    assert_true(dt >= 140 && dt < 2000);
    assert_non_null(strstr(err.text, "waiting for key 'r1/nccl/0'"));
    assert_non_null(strstr(err.text, "127.0.0.1:"));
    /* The client stays usable after CANCEL_WAIT. */
    ddp_err_clear(&err);
    const char *k[] = {"w1", "w2"};
    assert_int_equal(rdzv_client_wait(c, k, 2, 50, &err), DDP_ETIMEOUT);
    assert_non_null(strstr(err.text, "2 keys"));
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_set(c, "x", "1", 1, &err), 0);
    assert_int_equal(rdzv_client_get(c, "x", 100, &v, &err), 0);
    assert_int_equal(rdzv_client_ping(c, &err), 0);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);
}

typedef struct setter_arg {
    uint16_t port;
    int delay_ms;
    const char *key;
} setter_arg_t;

static void *setter(void *p) {
    setter_arg_t *a = p;
    struct timespec ts = {0, (long)a->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    rdzv_client_t *c = must_connect(a->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    rdzv_client_set(c, a->key, "ncclid", 6, &err);
    rdzv_client_free(c);
    return NULL;
}

static void test_wait_released_by_other_client(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    setter_arg_t a = {st->port, 100, "r0/id"};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, setter, &a), 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    ddp_buf_t v = DDP_BUF_INIT;
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(rdzv_client_get(c, "r0/id", 5000, &v, &err), 0);
    assert_true(ddp_now_ms() - t0 >= 90);
    assert_memory_equal(v.data, "ncclid", 6);
    pthread_join(th, NULL);
    /* WAIT on several keys, one of which arrives later. */
    setter_arg_t b = {st->port, 50, "late"};
    assert_int_equal(pthread_create(&th, NULL, setter, &b), 0);
    const char *k[] = {"r0/id", "late"};
    assert_int_equal(rdzv_client_wait(c, k, 2, 5000, &err), 0);
    pthread_join(th, NULL);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);
}

typedef struct barrier_arg {
    uint16_t port;
    int rc;
} barrier_arg_t;

static void *barrier_rank(void *p) {
    barrier_arg_t *a = p;
    rdzv_client_t *c = must_connect(a->port, good_token, strlen(good_token));
    ddp_err_t err;
    ddp_err_clear(&err);
    a->rc = rdzv_client_barrier(c, "r3/bar", 8, 5000, &err);
    rdzv_client_free(c);
    return NULL;
}

/* A client that holds a token refuses a store without one: such a store cannot prove it is the
 * job's, and whoever answered first on the endpoint would run the rendezvous. The error names the
 * endpoint; a client without a token is served as before. */
static void test_token_refuses_unauthenticated_store(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    assert_int_equal(connect_to(st->port, good_token, strlen(good_token), &c, &err),
                     DDP_EAUTH_PEER);
    assert_null(c);
    char peer[32];
    snprintf(peer, sizeof peer, "127.0.0.1:%u: ", (unsigned)st->port);
    assert_int_equal(strncmp(err.text, peer, strlen(peer)), 0);
    assert_non_null(strstr(err.text, "the store has no token (--no-auth)"));
    assert_null(strchr(err.text, '\n'));
    c = must_connect(st->port, NULL, 0);
    assert_int_equal(rdzv_client_authenticated(c), 0);
    rdzv_client_free(c);
    server_down(st);
}

/* A run token (rdzv_run_token) authenticates for its run alone, and reaches the keys
 * <prefix>/<run>/... alone: any other key, a key-less listing, and the store's token or another
 * run's token in its place are refused. The store's token, naming any run, reaches everything. */
static void test_run_token_scope(void **state) {
    (void)state;
    server_thread_t *st = server_up(good_token, strlen(good_token), 0, 0);
    ddp_buf_t hex = DDP_BUF_INIT, ka = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_run_token(good_token, strlen(good_token), "a", &hex, &err), 0);
    assert_int_equal(strlen((const char *)hex.data), 64);
    assert_int_equal(rdzv_token_from_hex((const char *)hex.data, &ka, &err), 0);
    assert_int_equal(rdzv_run_token(good_token, strlen(good_token), "", &hex, &err), -EINVAL);
    assert_int_equal(rdzv_run_token(NULL, 0, "a", &hex, &err), DDP_EUSAGE);

    rdzv_client_t *c = NULL;
    /* The run token names its run, or it is just a wrong token. */
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "b", &c, &err), DDP_EAUTH);
    assert_int_equal(connect_run(st->port, ka.data, ka.len, NULL, &c, &err), DDP_EAUTH);
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
    assert_int_equal(rdzv_client_authenticated(c), 1);
    assert_int_equal(rdzv_client_set(c, "__rdzv/a/x", "1", 1, &err), 0);
    assert_int_equal(rdzv_client_set(c, "ddpw/a/0/k", "2", 1, &err), 0);
    int64_t v = 0;
    assert_int_equal(rdzv_client_add(c, "ddpw/a/n", 5, &v, &err), 0);
    assert_int_equal(v, 5);
    rdzv_client_free(c);
    /* Every key outside the run closes the connection. */
    static const char *const outside[] = {"__rdzv/b/x", "__rdzv/ab/x", "__rdzv/a", "x",
                                          "/a/x",       "a/x",         "x/y/a/z",  "ddpw/A/x"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
        ddp_err_clear(&err);
        int rc = rdzv_client_set(c, outside[i], "v", 1, &err);
        if (rc == 0) /* the SET has no reply: the close shows on the next request */
            rc = rdzv_client_ping(c, &err);
        if (rc >= 0)
            fail_msg("key '%s' was served to run a's token", outside[i]);
        rdzv_client_free(c);
    }
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
    int64_t nkeys = 0;
    assert_true(rdzv_client_num_keys(c, &nkeys, &err) < 0);
    rdzv_client_free(c);
    /* The store's token, naming a run or not, reaches every key. */
    assert_int_equal(connect_run(st->port, good_token, strlen(good_token), "b", &c, &err), 0);
    assert_int_equal(rdzv_client_set(c, "__rdzv/b/x", "3", 1, &err), 0);
    ddp_buf_t val = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(c, "__rdzv/a/x", 0, &val, &err), 0);
    assert_int_equal(val.len, 1);
    assert_int_equal(rdzv_client_num_keys(c, &nkeys, &err), 0);
    assert_int_equal(nkeys, 4);
    rdzv_client_free(c);
    ddp_buf_free(&val);
    ddp_buf_free(&hex);
    ddp_buf_free(&ka);
    server_down(st);
}

static void test_auth_and_barrier(void **state) {
    (void)state;
    server_thread_t *st = server_up(good_token, strlen(good_token), 0, 0);
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    assert_int_equal(connect_to(st->port, "wrong-token", 11, &c, &err), DDP_EAUTH);
    assert_null(c);
    assert_non_null(strstr(err.text, "refused the token"));
    assert_int_equal(connect_to(st->port, NULL, 0, &c, &err), DDP_EAUTH);
    assert_non_null(strstr(err.text, "DDPRUN_STORE_TOKEN"));
    c = must_connect(st->port, good_token, strlen(good_token));
    assert_int_equal(rdzv_client_authenticated(c), 1);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_set(c, "k", "v", 1, &err), 0);
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(c, "k", 0, &v, &err), 0);

    barrier_arg_t args[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        args[i].port = st->port;
        args[i].rc = -1;
        assert_int_equal(pthread_create(&th[i], NULL, barrier_rank, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].rc, 0);
    }
    /* A ninth arrival is an error, not a hang. */
    assert_int_equal(rdzv_client_barrier(c, "r3/bar", 8, 1000, &err), DDP_EPROTO);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);
}

/* A label holds any host or run id whole, every byte escaped; a short buffer cuts between
 * escapes, never inside one. */
static void test_metrics_label(void **state) {
    (void)state;
    char host[RDZV_HOST_MAX + 1], out[RDZV_LABEL_MAX];
    memset(host, '"', RDZV_HOST_MAX);
    host[RDZV_HOST_MAX] = '\0';
    rdzv_metrics_label(host, out, sizeof out);
    assert_int_equal(strlen(out), 2 * RDZV_HOST_MAX);
    rdzv_metrics_label("a\\b\"c\nd", out, sizeof out);
    assert_string_equal(out, "a\\\\b\\\"c\\nd");
    char small[4];
    assert_string_equal(rdzv_metrics_label("a\"b", small, sizeof small), "a\\\"");
    assert_string_equal(rdzv_metrics_label("ab\"", small, sizeof small), "ab");
    assert_string_equal(rdzv_metrics_label("\"bc", small, sizeof small), "\\\"b");
}

static void test_errors(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    char *big = malloc(9000);
    assert_non_null(big);
    memset(big, 'k', 8999);
    big[8999] = 0;
    assert_int_equal(rdzv_client_set(c, big, "v", 1, &err), DDP_ETOOBIG);
    assert_non_null(strstr(err.text, "8999 bytes"));
    free(big);
    /* ADD on a non-integer closes this connection only. */
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_set(c, "str", "abc", 3, &err), 0);
    assert_int_equal(rdzv_client_add(c, "str", 1, NULL, &err), DDP_ECLOSED);
    assert_non_null(strstr(err.text, "'str'"));
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_ping(c, &err), DDP_ECLOSED);
    rdzv_client_free(c);
    c = must_connect(st->port, NULL, 0);
    ddp_buf_t v = DDP_BUF_INIT;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_get(c, "str", 0, &v, &err), 0);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);

    /* Nobody listening: bounded retries, then DDP_ETIMEOUT naming the peer. */
    rdzv_client_opts_t o = {0};
    o.host = "127.0.0.1";
    o.port = 1; /* nothing listens on port 1 */
    o.connect_timeout_ms = 200;
    uint64_t t0 = ddp_now_ms();
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_connect(&o, &c, &err), DDP_ETIMEOUT);
    assert_true(ddp_now_ms() - t0 < 2000);
    assert_non_null(strstr(err.text, "127.0.0.1:1"));
}

static void test_tokens(void **state) {
    (void)state;
    ddp_buf_t t = DDP_BUF_INIT, hex = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_from_hex("00ff10Ab", &t, &err), 0);
    assert_int_equal(t.len, 4);
    assert_memory_equal(t.data, "\x00\xff\x10\xab", 4);
    assert_int_equal(rdzv_token_to_hex(t.data, t.len, &hex), 0);
    assert_string_equal((char *)hex.data, "00ff10ab");
    assert_int_equal(rdzv_token_from_hex(NULL, &t, &err), 0);
    assert_int_equal(t.len, 0);
    assert_int_equal(rdzv_token_from_hex("abc", &t, &err), DDP_EENV);
    assert_non_null(strstr(err.text, "DDPRUN_STORE_TOKEN"));
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_from_hex("zz", &t, &err), DDP_EENV);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_generate(&t, 32, &err), 0);
    assert_int_equal(t.len, 32);

    char path[] = "/tmp/rdzv_token_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "secret-token-bytes\n", 19), 19);
    close(fd);
    assert_int_equal(rdzv_token_from_file(path, &t, &err), 0);
    assert_int_equal(t.len, 18);
    assert_memory_equal(t.data, "secret-token-bytes", 18);
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    assert_int_equal(rdzv_token_from_file(path, &t, &err), DDP_EUSAGE);
    unlink(path);
    ddp_err_clear(&err);
    assert_true(rdzv_token_from_file(path, &t, &err) == -ENOENT);
    assert_non_null(strstr(err.text, path));
    ddp_buf_free(&t);
    ddp_buf_free(&hex);
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* rdzv_token_load from the environment (with file as --token-file when not NULL); returns the
 * error text it gave (static), "" on success. */
static const char *load_error(const char *file) {
    static ddp_err_t err;
    ddp_buf_t t = DDP_BUF_INIT;
    ddp_err_clear(&err);
    int rc = rdzv_token_load(file, &t, NULL, &err);
    ddp_buf_free(&t);
    return rc < 0 ? err.text : "";
}

/* Every token error names its one source once (variable, --token-file or the file's variable
 * with its path), says what is expected, and never shows the value. */
static void test_token_messages(void **state) {
    (void)state;
    unsetenv("DDPRUN_TOKEN");
    unsetenv("DDPRUN_TOKEN_FILE");
    unsetenv("DDPRUN_STORE_TOKEN");
    const char *hexvars[] = {"DDPRUN_TOKEN", "DDPRUN_STORE_TOKEN"};
    const char *values[] = {"secretzz", "abc", NULL};
    char big[3001];
    memset(big, 'a', 3000);
    big[3000] = '\0';
    values[2] = big;
    for (size_t v = 0; v < 2; v++) {
        for (size_t i = 0; i < 3; i++) {
            setenv(hexvars[v], values[i], 1);
            const char *e = load_error(NULL);
            print_message("%s=%.8s: %s\n", hexvars[v], values[i], e);
            assert_int_equal(strncmp(e, hexvars[v], strlen(hexvars[v])), 0);
            assert_int_equal(e[strlen(hexvars[v])], ':');
            assert_int_equal(count_of(e, "DDPRUN_"), 1);
            assert_non_null(strstr(e, "expected an even number of hex digits (0-9a-f)"));
            assert_null(strstr(e, "secret"));
            assert_null(strstr(e, "aaaa"));
            unsetenv(hexvars[v]);
        }
    }
    setenv("DDPRUN_TOKEN", "0q", 1);
    assert_non_null(strstr(load_error(NULL), "character 2 of 2 is not a hex digit"));
    unsetenv("DDPRUN_TOKEN");

    char path[] = "/tmp/rdzv_token_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char want[128];
    /* Empty, from the variable and from the flag. */
    setenv("DDPRUN_TOKEN_FILE", path, 1);
    const char *e = load_error(NULL);
    print_message("%s\n", e);
    snprintf(want, sizeof want, "DDPRUN_TOKEN_FILE=%s: the token is 0 bytes: expected 1..1024",
             path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, "DDPRUN_"), 1);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_TOKEN_FILE");
    setenv("DDPRUN_STORE_TOKEN", "00ff", 1); /* the flag wins over any variable */
    e = load_error(path);
    snprintf(want, sizeof want, "--token-file %s: the token is 0 bytes", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, "DDPRUN_"), 0);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_STORE_TOKEN");
    /* Too long. */
    fd = open(path, O_WRONLY | O_TRUNC);
    char chunk[2000];
    memset(chunk, 'k', sizeof chunk);
    assert_int_equal(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk);
    close(fd);
    e = load_error(path);
    snprintf(want, sizeof want, "--token-file %s: more than 1024 bytes: expected 1..1024", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_null(strstr(e, "kkkk"));
    /* Missing. */
    unlink(path);
    setenv("DDPRUN_TOKEN_FILE", path, 1);
    e = load_error(NULL);
    snprintf(want, sizeof want, "DDPRUN_TOKEN_FILE=%s: unable to open: ", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_TOKEN_FILE");
    /* A directory. */
    e = load_error("/tmp");
    assert_string_equal(e, "--token-file /tmp: not a regular file: expected a regular file of "
                           "mode 600");
    /* A path with control bytes is escaped. */
    e = load_error("/nonexistent/\x1b[2Jx");
    const char *esc = "--token-file /nonexistent/\\e[2Jx: unable to open";
    assert_int_equal(strncmp(e, esc, strlen(esc)), 0);
}

static void test_server_start_errors(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), DDP_EUSAGE);
    assert_non_null(strstr(err.text, "no token"));
    o.token = good_token;
    o.token_len = strlen(good_token);
    o.no_auth = 1;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), DDP_EUSAGE);
    o.token = NULL;
    o.token_len = 0;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    char want[32];
    snprintf(want, sizeof want, "127.0.0.1:%u", rdzv_server_port(s));
    assert_string_equal(rdzv_server_addr(s), want);
    rdzv_server_stats_t st;
    rdzv_server_stats(s, &st);
    assert_int_equal(st.conns, 0);
    /* The same port again: the error names the address. */
    rdzv_server_t *s2 = NULL;
    o.port = rdzv_server_port(s);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s2, &err), -EADDRINUSE);
    assert_null(s2);
    assert_non_null(strstr(err.text, want));
    o.host = "no-such-host.invalid";
    o.port = 0;
    ddp_err_clear(&err);
    assert_true(rdzv_server_start(&loop, &o, &s2, &err) < 0);
    int closed = 0;
    rdzv_server_close(s, mark_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- raw connections, for frame sequences rdzv_client does not make ---- */

/* A TCP connection to port that sends nothing yet (PyTorch <= 2.0's clients send no VALIDATE). */
static int raw_connect_bare(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* A connection to port that has sent VALIDATE (today's numbering). */
static int raw_connect(uint16_t port) {
    int fd = raw_connect_bare(port);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_VALIDATE), 0);
    assert_int_equal(rdzv__put_u32(&b, RDZV_VALIDATE_MAGIC), 0);
    assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
    ddp_buf_free(&b);
    return fd;
}

/* Sends b plus a PING and reads replies up to the PING's: the server has then run b. Returns
 * the bytes read before the PING's 4 (b's replies). */
static size_t raw_send_sync(int fd, ddp_buf_t *b) {
    assert_int_equal(rdzv__put_u8(b, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(b, 0x5a5a5a5au), 0);
    assert_int_equal(write(fd, b->data, b->len), (ssize_t)b->len);
    ddp_buf_reset(b);
    uint8_t in[4096];
    size_t n = 0;
    while (n < 4 || rdzv__get_u32(in + n - 4) != 0x5a5a5a5au) {
        ssize_t r = read(fd, in + n, sizeof in - n);
        assert_true(r > 0);
        n += (size_t)r;
    }
    return n - 4;
}

/* 1 when the server has closed fd (EOF or reset), 0 when data came. */
static int raw_closed(int fd) {
    uint8_t x;
    ssize_t r = read(fd, &x, 1);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

static void join_frame(ddp_buf_t *b, const char *host) {
    rdzv_join_req_t q = {0};
    snprintf(q.run_id, sizeof q.run_id, "r");
    snprintf(q.host, sizeof q.host, "%s", host);
    q.want_node_rank = -1;
    q.nproc = 1;
    q.cfg.min_nodes = q.cfg.max_nodes = 1;
    assert_int_equal(rdzv_join_req_encode(b, &q), 0);
}

/* One named counter from STATS (a line "name value"). */
static long long stat_of(rdzv_client_t *c, const char *name) {
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_stats(c, &out, &err), 0);
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s ", name);
    ddp_buf_t nl = DDP_BUF_INIT;
    assert_int_equal(ddp_buf_printf(&nl, "\n%.*s", (int)out.len, out.data), 0);
    const char *at = strstr((const char *)nl.data, pat);
    assert_non_null(at);
    long long v = strtoll(at + strlen(pat), NULL, 10);
    ddp_buf_free(&nl);
    ddp_buf_free(&out);
    return v;
}

static void put_key_cmd(ddp_buf_t *b, uint8_t cmd, const char *key) {
    assert_int_equal(rdzv__put_u8(b, cmd), 0);
    assert_int_equal(rdzv__put_blob(b, key, strlen(key)), 0);
}

static void put_push(ddp_buf_t *b, const char *key, const char *val) {
    put_key_cmd(b, RDZV_CMD_QUEUE_PUSH, key);
    assert_int_equal(rdzv__put_blob(b, val, strlen(val)), 0);
}

static void put_wait1(ddp_buf_t *b, const char *key) {
    assert_int_equal(rdzv__put_u8(b, RDZV_CMD_WAIT), 0);
    assert_int_equal(rdzv__put_u64(b, 1), 0);
    assert_int_equal(rdzv__put_blob(b, key, strlen(key)), 0);
}

/* Reads exactly n reply bytes from fd (SO_RCVTIMEO bounds it). */
static void raw_read(int fd, uint8_t *out, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, out + got, n - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

/* 1 when nothing arrives on fd within ms. */
static int raw_quiet(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 0;
}

/* Queues as TCPStore keeps them: FIFO, beside the key's value (GETNUMKEYS and DELETE_KEY see
 * values only, CHECK and WAIT count a non-empty queue as ready), and a push answers the oldest
 * parked WAIT on its key only. Popped items leave the memory account. */
static void test_queues(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    stat_of(c, "mem_used"); /* its reply buffer is on the account from the next one on */
    long long mem0 = stat_of(c, "mem_used");
    int w1 = raw_connect(st->port), w2 = raw_connect(st->port), p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_wait1(&b, "/q");
    assert_int_equal(raw_send_sync(w1, &b), 0); /* w1 parks first, */
    put_wait1(&b, "/q");
    assert_int_equal(raw_send_sync(w2, &b), 0); /* then w2 */
    assert_int_equal(stat_of(c, "waiting"), 2);
    put_push(&b, "/q", "one");
    put_key_cmd(&b, RDZV_CMD_QUEUE_LEN, "/q");
    assert_int_equal(raw_send_sync(p, &b), 8); /* the push has no reply; QUEUE_LEN's i64 */
    uint8_t r[64];
    raw_read(w1, r, 1);
    assert_int_equal(r[0], RDZV_WAIT_STOP_WAITING);
    assert_true(raw_quiet(w2, 100)); /* one item, one waiter released */
    put_push(&b, "/q", "two");
    assert_int_equal(raw_send_sync(p, &b), 0);
    raw_read(w2, r, 1);
    assert_int_equal(r[0], RDZV_WAIT_STOP_WAITING);
    assert_int_equal(stat_of(c, "queued"), 2);
    assert_int_equal(stat_of(c, "waiting"), 0);

    /* A queue is not a value, but it makes its key ready. */
    int64_t nkeys = -1;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_num_keys(c, &nkeys, &err), 0);
    assert_int_equal(nkeys, 0);
    const char *qk[] = {"/q"};
    int ready = 0;
    assert_int_equal(rdzv_client_check(c, qk, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    put_key_cmd(&b, RDZV_CMD_DELETE_KEY, "/q");
    assert_int_equal(raw_send_sync(p, &b), 8);
    put_wait1(&b, "/q"); /* ready at once */
    assert_int_equal(raw_send_sync(p, &b), 1);

    /* FIFO pops, each answered with the length before it; then 0 for empty or unknown. */
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_LEN, "/nothing");
    assert_int_equal(raw_send_sync(p, &b), (8 + 8 + 3) * 2 + 8 + 8);
    ready = 1;
    assert_int_equal(rdzv_client_check(c, qk, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    assert_int_equal(stat_of(c, "queued"), 0);
    close(w1);
    close(w2);
    close(p);
    /* Every item and the queue itself freed: back to the account before, once the server has
     * closed the three connections (their buffers are on it too). */
    long long mem = -1;
    for (int i = 0; i < 100 && (mem = stat_of(c, "mem_used")) != mem0; i++)
        usleep(10000);
    assert_int_equal(mem, mem0);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* The replies of the pops above, checked byte for byte, and LIST_KEYS listing values only. */
static void test_queue_pop_and_list_replies(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    int p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_push(&b, "/q", "a");
    put_push(&b, "/q", "bc");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    ddp_buf_t want = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_i64(&want, 2), 0);
    assert_int_equal(rdzv__put_blob(&want, "a", 1), 0);
    assert_int_equal(rdzv__put_i64(&want, 1), 0);
    assert_int_equal(rdzv__put_blob(&want, "bc", 2), 0);
    assert_int_equal(rdzv__put_i64(&want, 0), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&b, 7), 0);
    assert_int_equal(write(p, b.data, b.len), (ssize_t)b.len);
    uint8_t r[64];
    raw_read(p, r, want.len + 4);
    assert_memory_equal(r, want.data, want.len);
    ddp_buf_reset(&b);
    ddp_buf_reset(&want);
    /* One value and one queue: LIST_KEYS names the value only. */
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_SET), 0);
    assert_int_equal(rdzv__put_blob(&b, "/k", 2), 0);
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    put_push(&b, "/q2", "x");
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_LIST_KEYS), 0);
    assert_int_equal(rdzv__put_i64(&want, 1), 0);
    assert_int_equal(rdzv__put_blob(&want, "/k", 2), 0);
    assert_int_equal(raw_send_sync(p, &b), want.len);
    close(p);
    ddp_buf_free(&b);
    ddp_buf_free(&want);
    server_down(st);
}

/* BARRIER parks every arrival but the last, which answers all of them; the count is the key's
 * value. A BARRIER given up with CANCEL_WAIT leaves the count as it is (TCPStore's behaviour). */
static void test_barrier(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int a = raw_connect(st->port), d = raw_connect(st->port), e = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(d, &b), 0);
    put_wait1(&b, "/bar"); /* the key has a value (the count): a WAIT returns at once */
    assert_int_equal(raw_send_sync(e, &b), 1);
    assert_int_equal(stat_of(c, "waiting"), 2);
    ddp_buf_t v = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_get(c, "/bar", 0, &v, &err), 0);
    assert_int_equal(v.len, 1);
    assert_memory_equal(v.data, "2", 1);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(e, &b), 1); /* the last one: answered at once */
    uint8_t r[4];
    raw_read(a, r, 1);
    raw_read(d, r + 1, 1);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    assert_int_equal(stat_of(c, "waiting"), 0);
    /* Alone at a barrier of 2, then given up. */
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/b2");
    assert_int_equal(rdzv__put_i64(&b, 2), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_CANCEL_WAIT), 0);
    assert_int_equal(raw_send_sync(a, &b), 1);
    assert_int_equal(stat_of(c, "waiting"), 0);
    assert_int_equal(rdzv_client_get(c, "/b2", 0, &v, &err), 0);
    assert_memory_equal(v.data, "1", 1);
    /* A barrier on a key that is not a count closes that connection alone. */
    assert_int_equal(rdzv_client_set(c, "/text", "abc", 3, &err), 0);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/text");
    assert_int_equal(rdzv__put_i64(&b, 2), 0);
    assert_int_equal(write(d, b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    assert_true(raw_closed(d));
    assert_int_equal(rdzv_client_ping(c, &err), 0);
    close(a);
    close(d);
    close(e);
    ddp_buf_free(&v);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* A server without a token and with max_total_mem (0: the default). */
static server_thread_t *server_up_mem(size_t max_total_mem) {
    rdzv_server_opts_t o = {0};
    o.no_auth = 1;
    o.max_total_mem = max_total_mem;
    return server_up_with(&o);
}

/* Writes all of b to fd, or as much as the server takes before it closes fd; empties b. */
static void write_until_closed(int fd, ddp_buf_t *b) {
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    ddp_buf_reset(b);
}

/* Queues are bounded: their bytes by max_total_mem and their length by RDZV_MAX_QUEUE_LEN. The
 * pushing connection is closed there; the store keeps serving, its items intact. */
static void test_queue_bounds(void **state) {
    (void)state;
    server_thread_t *st = server_up_mem(8u << 20);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    char *big = malloc(1 << 20);
    assert_non_null(big);
    memset(big, 'x', 1 << 20);
    big[(1 << 20) - 1] = '\0';
    for (int i = 0; i < 12; i++) /* 12 MiB into an 8 MiB store */
        put_push(&b, "/big", big);
    write_until_closed(p, &b);
    assert_true(raw_closed(p));
    close(p);
    long long kept = stat_of(c, "queued");
    if (kept < 4 || kept >= 8)
        fail_msg("%lld items of 1 MiB kept in an 8 MiB store", kept);
    assert_int_equal(stat_of(c, "mem_refused"), 1);
    free(big);
    rdzv_client_free(c);
    server_down(st);

    /* RDZV_MAX_QUEUE_LEN empty items fit (the default memory limit); one more does not. */
    st = server_up_mem(0);
    c = must_connect(st->port, NULL, 0);
    p = raw_connect(st->port);
    for (size_t i = 0; i <= RDZV_MAX_QUEUE_LEN; i++)
        put_push(&b, "/n", "");
    write_until_closed(p, &b);
    assert_true(raw_closed(p));
    close(p);
    assert_int_equal(stat_of(c, "queued"), RDZV_MAX_QUEUE_LEN);
    assert_int_equal(stat_of(c, "mem_refused"), 0);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* Reentrancy: waking a key answers member A, whose reply is over the output cap, so A is closed;
 * A's death ends its round, the next round closes at once with the waiting joiner C, and C's
 * JOIN reply is over the cap too, so C is closed while its WAIT on the same key is the next
 * waiter wake() would visit. The server must unlink C's waiter, not use it after freeing it
 * (ASan build), and keep serving. */
static void test_close_members_inside_wake(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 100, 0);
    ddp_buf_t b = DDP_BUF_INIT;
    int a = raw_connect(st->port), c = raw_connect(st->port);
    join_frame(&b, "a"); /* its reply (91 bytes) fits in 100 */
    assert_int_equal(raw_send_sync(a, &b), 91);
    char host_c[61];
    memset(host_c, 'c', 60);
    host_c[60] = '\0';
    join_frame(&b, host_c); /* the run is at max_nodes=1: C waits for the next round */
    assert_int_equal(raw_send_sync(c, &b), 0);
    /* C waits on K first, A last: A's waiter is at the head, C's is the next one. */
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_WAIT), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "K", 1), 0);
    assert_int_equal(raw_send_sync(c, &b), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_GET_WAIT), 0);
    assert_int_equal(rdzv__put_blob(&b, "K", 1), 0);
    assert_int_equal(rdzv__put_u8(&b, 0), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);

    rdzv_client_t *d = must_connect(st->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    char big[200];
    memset(big, 'v', sizeof big);
    assert_int_equal(rdzv_client_set(d, "K", big, sizeof big, &err), 0);
    assert_int_equal(rdzv_client_ping(d, &err), 0);
    assert_true(raw_closed(a));
    assert_true(raw_closed(c));
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(d, "__rdzv/r/end/0", 0, &v, &err), 0);
    assert_non_null(memmem(v.data, v.len, "round 0 ended: node 0 (a) lost", 30));
    /* K and two end keys: C ran round 1 alone, and its closing ended that round too. */
    int64_t nkeys = 0;
    assert_int_equal(rdzv_client_num_keys(d, &nkeys, &err), 0);
    assert_int_equal(nkeys, 3);
    const char *end1[] = {"__rdzv/r/end/1"}; /* its value names C: over the cap to read */
    int ready = 0;
    assert_int_equal(rdzv_client_check(d, end1, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    ddp_buf_free(&v);
    ddp_buf_free(&b);
    rdzv_client_free(d);
    close(a);
    close(c);
    server_down(st);
}

/* A round of 20 members closes in one batch of answers (the server looks the connections up in
 * a sorted index then, not the list): every member gets its own answer, and connections that
 * are not members, opened in between, get nothing. */
static void test_round_answers_by_member(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    enum { N = 20 };
    int fd[N], other[N];
    ddp_buf_t b = DDP_BUF_INIT;
    for (int i = 0; i < N; i++) {
        other[i] = raw_connect(st->port);
        fd[i] = raw_connect(st->port);
        char host[16];
        snprintf(host, sizeof host, "n%d", i);
        rdzv_join_req_t q = {0};
        snprintf(q.run_id, sizeof q.run_id, "many");
        snprintf(q.host, sizeof q.host, "%s", host);
        q.want_node_rank = N - 1 - i; /* ranks in the reverse of the join order */
        q.nproc = 1;
        q.cfg.min_nodes = q.cfg.max_nodes = N;
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        if (i < N - 1)
            assert_int_equal(raw_send_sync(fd[i], &b), 0);
        else
            assert_int_equal(write(fd[i], b.data, b.len), (ssize_t)b.len);
        ddp_buf_reset(&b);
    }
    int seen[N] = {0};
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    for (int i = 0; i < N; i++) {
        uint8_t in[256];
        size_t n = 0, need = 0;
        long rn = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        while ((rn = rdzv_round_reply_parse(in, n, &rep, &need, &err)) == 0) {
            ssize_t r = read(fd[i], in + n, need - n);
            assert_true(r > 0);
            n += (size_t)r;
        }
        assert_true(rn > 0);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
        assert_int_equal(rep.status, 0);
        assert_int_equal(rep.join.group_rank, N - 1 - i);
        assert_int_equal(rep.join.group_world_size, N);
        assert_string_equal(rep.join.master_addr, "n19");
        seen[rep.join.group_rank]++;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    /* A HEARTBEAT from a connection that is no member: status 1, round and state 0. */
    assert_int_equal(rdzv_heartbeat_req_encode(&b, "many"), 0);
    assert_int_equal(write(other[0], b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    uint8_t hb[18];
    size_t got = 0;
    while (got < sizeof hb) {
        ssize_t r = read(other[0], hb + got, sizeof hb - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_int_equal(hb[0], RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(hb[1], 1);
    assert_int_equal(rdzv__get_u64(hb + 2), 0);
    assert_int_equal(rdzv__get_u64(hb + 10), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(raw_send_sync(other[i], &b), 0); /* nothing came before the PING's */
        close(other[i]);
        close(fd[i]);
    }
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
    server_down(st);
}

/* ---- admission: the handshake cap, eviction, refusal, the open-file limit ---- */

/* A token server on its own thread with the given connection caps (0 = default). */
static server_thread_t *server_up_conns(size_t max_conns, size_t max_unauth) {
    server_thread_t *st = calloc(1, sizeof *st);
    assert_non_null(st);
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    o.token = good_token;
    o.token_len = strlen(good_token);
    o.max_conns = max_conns;
    o.max_unauth_conns = max_unauth;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_server_thread_start(&o, &st->t, &err) < 0)
        fail_msg("server start: %s", err.text);
    st->port = rdzv_server_thread_port(st->t);
    return st;
}

/* 1 when the server has sent nothing and not closed fd (no wait). */
static int raw_still_open(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* Sockets that stop after VALIDATE never authenticate: each newcomer past the handshake cap
 * evicts the oldest, a token holder always gets in, and a newcomer is refused only once every
 * slot holds an authenticated connection. Accepts follow the listen backlog's order, so which
 * sockets go is known. */
static void test_idle_handshakes_evicted(void **state) {
    (void)state;
    server_thread_t *st = server_up_conns(4, 2);
    int fd[6];
    for (int i = 0; i < 6; i++)
        fd[i] = raw_connect(st->port);
    rdzv_client_t *c[5] = {NULL};
    c[0] = must_connect(st->port, good_token, strlen(good_token));
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_ping(c[0], &err), 0);
    for (int i = 0; i < 5; i++)
        assert_true(raw_closed(fd[i])); /* the four idle ones past the cap, then c[0]'s turn */
    assert_true(raw_still_open(fd[5]));
    /* Two more authenticated clients fill max_conns with fd[5]; a fourth evicts fd[5]. */
    for (int i = 1; i < 4; i++)
        c[i] = must_connect(st->port, good_token, strlen(good_token));
    assert_true(raw_closed(fd[5]));
    /* Every slot authenticated: the newcomer is refused, the others keep working. */
    assert_true(connect_to(st->port, good_token, strlen(good_token), &c[4], &err) < 0);
    assert_null(c[4]);
    ddp_buf_t text = DDP_BUF_INIT;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_stats(c[1], &text, &err), 0);
    assert_int_equal(ddp_buf_append(&text, "", 1), 0);
    assert_non_null(strstr((char *)text.data, "hs_evicted 6\n"));
    assert_non_null(strstr((char *)text.data, "conns_refused 1\n"));
    ddp_buf_free(&text);
    for (int i = 0; i < 6; i++)
        close(fd[i]);
    for (int i = 0; i < 4; i++)
        rdzv_client_free(c[i]);
    server_down(st);
}

/* ---- the workers' store (rdzv_server_opts_t.worker_store) ---- */

static server_thread_t *server_up_workers(int auth_idle_ms) {
    rdzv_server_opts_t o = {0};
    o.no_auth = 1;
    o.worker_store = 1;
    o.auth_idle_ms = auth_idle_ms;
    return server_up_with(&o);
}

static void send_all(int fd, ddp_buf_t *b) {
    assert_int_equal(write(fd, b->data, b->len), (ssize_t)b->len);
    ddp_buf_reset(b);
}

static int64_t read_i64(int fd) {
    uint8_t r[8];
    raw_read(fd, r, 8);
    return (int64_t)rdzv__get_u64(r);
}

/* PyTorch <= 2.0's numbering, byte for byte as its client sends it (SET 0, COMPARE_SET 1, GET
 * 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, DELETE_KEY 8; no VALIDATE), on a connection whose
 * first frame is not VALIDATE; WATCH_KEY (7) closes the connection. Today's numbering works on
 * the same store beside it, and a connection that never sends stays open past the handshake
 * deadline of the authenticated store (PyTorch <= 2.0's callback connection does that). */
static void test_worker_store_legacy_numbering(void **state) {
    (void)state;
    server_thread_t *st = server_up_workers(100);
    int idle = raw_connect_bare(st->port);
    int fd = raw_connect_bare(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, 0, "/a"); /* SET /a = "one" */
    assert_int_equal(rdzv__put_blob(&b, "one", 3), 0);
    put_key_cmd(&b, 3, "/n"); /* ADD /n 5 -> 5 */
    assert_int_equal(rdzv__put_u64(&b, 5), 0);
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 5);
    put_key_cmd(&b, 2, "/a"); /* GET /a -> "one" */
    send_all(fd, &b);
    uint8_t r[16];
    assert_int_equal(read_i64(fd), 3);
    raw_read(fd, r, 3);
    assert_memory_equal(r, "one", 3);
    put_key_cmd(&b, 1, "/a"); /* COMPARE_SET /a one -> two */
    assert_int_equal(rdzv__put_blob(&b, "one", 3), 0);
    assert_int_equal(rdzv__put_blob(&b, "two", 3), 0);
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 3);
    raw_read(fd, r, 3);
    assert_memory_equal(r, "two", 3);
    for (uint8_t cmd = 4; cmd <= 5; cmd++) { /* CHECK, then WAIT, on /a and /n: ready */
        assert_int_equal(rdzv__put_u8(&b, cmd), 0);
        assert_int_equal(rdzv__put_u64(&b, 2), 0);
        assert_int_equal(rdzv__put_blob(&b, "/a", 2), 0);
        assert_int_equal(rdzv__put_blob(&b, "/n", 2), 0);
        send_all(fd, &b);
        raw_read(fd, r, 1);
        assert_int_equal(r[0], 0);
    }
    assert_int_equal(rdzv__put_u8(&b, 6), 0); /* GETNUMKEYS -> 2 */
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 2);
    put_key_cmd(&b, 8, "/a"); /* DELETE_KEY /a -> 1 */
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 1);
    /* Today's numbering on another connection: /n is 5, /a is gone. */
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int64_t v = 0;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_add(c, "/n", 1, &v, &err), 0);
    assert_int_equal(v, 6);
    int ready = 1;
    const char *ka[] = {"/a"};
    assert_int_equal(rdzv_client_check(c, ka, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    usleep(300 * 1000); /* three handshake deadlines */
    assert_true(raw_still_open(idle));
    put_key_cmd(&b, 7, "/a"); /* WATCH_KEY: not served */
    send_all(fd, &b);
    assert_true(raw_closed(fd));
    assert_true(raw_still_open(idle));
    assert_int_equal(stat_of(c, "idle_closed"), 0);
    close(fd);
    close(idle);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* The workers' store serves no rendezvous command (a JOIN closes the connection, the store
 * keeps serving) and cannot be started with a token. */
static void test_worker_store_refuses_rendezvous(void **state) {
    (void)state;
    server_thread_t *st = server_up_workers(0);
    int fd = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    join_frame(&b, "127.0.0.1");
    send_all(fd, &b);
    ddp_buf_free(&b);
    assert_true(raw_closed(fd));
    close(fd);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    assert_int_equal(stat_of(c, "bad_frames"), 1);
    rdzv_client_free(c);
    server_down(st);
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    o.token = good_token;
    o.token_len = strlen(good_token);
    o.worker_store = 1;
    rdzv_server_thread_t *t = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_thread_start(&o, &t, &err), DDP_EUSAGE);
    assert_null(t);
    assert_non_null(strstr(err.text, "cannot present a token"));
}

/* Turns loop until fd has a byte to read or is closed (at most 5 s). */
static void loop_until_readable(uv_loop_t *loop, int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int i = 0; i < 5000; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (poll(&p, 1, 1) > 0)
            return;
    }
    fail_msg("no reply within 5 s");
}

/* rdzv_server_reset, on the server's own loop (this thread): every connection is closed (a
 * parked WAIT too), every key and queue dropped, the memory account back where it started, and
 * the same port serves the next group, which sees none of the previous group's keys. */
static void test_worker_store_reset(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    uint16_t port = rdzv_server_port(s);
    rdzv_server_stats_t st0, st1;
    rdzv_server_stats(s, &st0);
    /* w: PyTorch <= 2.0's numbering, a SET and a WAIT that parks; q: today's, a queue item;
     * a: a GETNUMKEYS once those ran. */
    int a = raw_connect_bare(port), w = raw_connect_bare(port), q = raw_connect(port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, 0, "/worker/attempt_0/k");
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    assert_int_equal(rdzv__put_u8(&b, 5), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "/never", 6), 0);
    send_all(w, &b);
    put_push(&b, "/q", "item");
    send_all(q, &b);
    for (int i = 0; i < 50; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(rdzv__put_u8(&b, 6), 0);
    send_all(a, &b);
    loop_until_readable(&loop, a);
    assert_int_equal(read_i64(a), 1);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, 1);
    assert_int_equal(st1.queued, 1);
    assert_int_equal(st1.waiting, 1);
    rdzv_server_reset(s);
    loop_until_readable(&loop, a);
    assert_true(raw_closed(a));
    loop_until_readable(&loop, w);
    assert_true(raw_closed(w));
    loop_until_readable(&loop, q);
    assert_true(raw_closed(q));
    for (int i = 0; i < 10; i++) /* the close callbacks */
        uv_run(&loop, UV_RUN_NOWAIT);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.conns, 0);
    assert_int_equal(st1.keys, 0);
    assert_int_equal(st1.queued, 0);
    assert_int_equal(st1.waiting, 0);
    assert_int_equal(st1.mem_used, st0.mem_used);
    close(a);
    close(w);
    close(q);
    /* The next group, on the same port: CHECK of the old key is not ready. */
    a = raw_connect_bare(port);
    assert_int_equal(rdzv__put_u8(&b, 4), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "/worker/attempt_0/k", 19), 0);
    send_all(a, &b);
    loop_until_readable(&loop, a);
    uint8_t r;
    raw_read(a, &r, 1);
    assert_int_equal(r, RDZV_CHECK_NOT_READY);
    close(a);
    ddp_buf_free(&b);
    rdzv_server_close(s, NULL, NULL);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    }
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A metric line's value from rdzv_server_metrics (-1 when missing). */
static long long metric_of(const rdzv_server_t *s, const char *name) {
    ddp_buf_t m = DDP_BUF_INIT;
    assert_int_equal(rdzv_server_metrics(s, &m), 0);
    assert_int_equal(ddp_buf_append(&m, "", 1), 0);
    char want[160];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr((const char *)m.data, want);
    long long v = at ? strtoll(at + strlen(want), NULL, 10) : -1;
    ddp_buf_free(&m);
    return v;
}

/* The workers' store's default limits follow the workers it serves (RDZV_WSTORE_*), at start
 * and through rdzv_server_set_workers; limits the caller chose stay as given. */
static void test_worker_store_limits_follow_workers(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .workers = 2};
    rdzv_server_t *s = NULL, *fixed = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 2 * 16);
    assert_int_equal(metric_of(s, "ddprun_store_memory_limit_bytes"), (64 + 2 * 16) << 20);
    rdzv_server_set_workers(s, 8);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    assert_int_equal(metric_of(s, "ddprun_store_memory_limit_bytes"), (64LL + 8 * 16) << 20);
    rdzv_server_set_workers(s, 0); /* unknown: unchanged */
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    /* 16,000 nodes x 8 ranks: every worker keeps a connection to group rank 0's store, so the
     * limit passes the shared store's 65,536 (2 a worker), as far as the open-file limit allows
     * (the note names the limit it clipped). */
    rdzv_server_set_workers(s, 128000);
    long long lim = metric_of(s, "ddprun_store_connections_limit");
    if (lim != 64 + 2 * 128000)
        assert_non_null(strstr(s->nofile_note, "connection limit 256064 clipped"));
    rdzv_server_set_workers(s, 8);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    o.max_conns = 10;
    o.max_total_mem = 1 << 20;
    assert_int_equal(rdzv_server_start(&loop, &o, &fixed, &err), 0);
    rdzv_server_set_workers(fixed, 1000);
    assert_int_equal(metric_of(fixed, "ddprun_store_connections_limit"), 10);
    assert_int_equal(metric_of(fixed, "ddprun_store_memory_limit_bytes"), 1 << 20);
    rdzv_server_close(fixed, NULL, NULL);
    rdzv_server_close(s, NULL, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ddp_tcp_peer_owner, wrapped by the linker (module.mk): answers with lookup_fail when it is
 * set, otherwise asks the kernel. */
int __wrap_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out);
int __real_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out);
static int lookup_fail;
int __wrap_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out) {
    if (lookup_fail != 0)
        return lookup_fail;
    return __real_ddp_tcp_peer_owner(peer, local, timeout_ms, out);
}

/* setsockopt, wrapped by the linker (module.mk): counts the ACKs pushed with TCP_QUICKACK = 2
 * (the store's ack_now), then does the call. */
int __wrap_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int __real_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
static atomic_int acks_pushed;
int __wrap_setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
    if (level == IPPROTO_TCP && name == TCP_QUICKACK && len == sizeof(int) &&
        *(const int *)val == 2)
        atomic_fetch_add(&acks_pushed, 1);
    return __real_setsockopt(fd, level, name, val, len);
}

/* A read whose commands were answered gets no ACK of its own (the reply carries it), even when
 * the reply was written before the read's handling ended, as rendezvous replies are: at 16,000
 * nodes every keep-alive paid a fourth system call for it. A read answered by nothing (a SET)
 * still has its ACK pushed. */
static void test_answered_reads_push_no_ack(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    int fd = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    raw_send_sync(fd, &b); /* the handshake is over */
    atomic_store(&acks_pushed, 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(rdzv_heartbeat_req_encode(&b, "no-such-run"), 0);
        assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
        ddp_buf_reset(&b);
        uint8_t rep[18]; /* 0x51, status 1 (not a member), i64 round, i64 state */
        raw_read(fd, rep, sizeof rep);
        assert_int_equal(rep[0], RDZV_CMD_RDZV_HEARTBEAT);
        assert_int_equal(rep[1], 1);
    }
    assert_int_equal(atomic_load(&acks_pushed), 0);
    put_key_cmd(&b, RDZV_CMD_SET, "k");
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    for (int i = 0; i < 200 && atomic_load(&acks_pushed) == 0; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&acks_pushed), 1);
    ddp_buf_free(&b);
    close(fd);
    server_down(st);
}

/* owner_only fails closed: a loopback peer whose socket the lookup does not find, or whose
 * lookup fails, is refused (the job's own connection too); a server whose start-up lookup of its
 * own listener fails does not start, and says why. */
static void test_worker_store_owner_fails_closed(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .owner_only = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    int fails[] = {-ENOENT, -ETIMEDOUT};
    for (size_t i = 0; i < 2; i++) {
        lookup_fail = fails[i];
        int fd = raw_connect_bare(rdzv_server_port(s));
        loop_until_readable(&loop, fd);
        assert_true(raw_closed(fd));
        close(fd);
        lookup_fail = 0;
        rdzv_server_stats_t st;
        rdzv_server_stats(s, &st);
        assert_int_equal(st.owner_refused, i + 1);
    }
    rdzv_server_close(s, NULL, NULL);
    lookup_fail = -ENOENT;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), -ENOENT);
    lookup_fail = 0;
    assert_non_null(strstr(err.text, "unable to check who owns the peers of 127.0.0.1:"));
    assert_non_null(strstr(err.text, "tcp_diag"));
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A child that drops to uid 65534, connects to port, sends VALIDATE and PING, and exits 0 when
 * the store closes the connection unanswered, 1 when it answers, 2 when it cannot run. Plain
 * syscalls only: it must not return into cmocka. */
static void stranger_child(int family, uint16_t port) {
    if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
        setresuid(65534, 65534, 65534) < 0)
        _exit(2);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 sa6 = {
        .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int rc = family == AF_INET6 ? connect(fd, (struct sockaddr *)&sa6, sizeof sa6)
                                : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (fd < 0 || rc < 0)
        _exit(2);
    uint8_t req[10] = {RDZV_CMD_VALIDATE, 0, 0, 0, 0, RDZV_CMD_PING, 1, 2, 3, 4}, r[4];
    uint32_t magic = RDZV_VALIDATE_MAGIC;
    memcpy(req + 1, &magic, 4); /* little-endian hosts only, as the store's wire format */
    if (write(fd, req, sizeof req) != (ssize_t)sizeof req) /* a reset already: refused */
        _exit(0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1)
        _exit(2);
    ssize_t n = read(fd, r, sizeof r);
    _exit(n <= 0 ? 0 : 1);
}

/* Runs stranger_child(family, port) and turns loop until it exits; returns its exit status. */
static int stranger_run(uv_loop_t *loop, int family, uint16_t port) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        stranger_child(family, port);
    int status = -1;
    for (int i = 0; i < 10000 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* owner_only: the server's own user is served; run as root, a client of uid 65534 is refused
 * at once (counted in owner_refused, STATS and metrics) and the store serves on; the same on
 * ::1 where the host has IPv6. */
static void test_worker_store_owner_only(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {
        .host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .workers = 1, .owner_only = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    uint16_t port = rdzv_server_port(s);
    int fd = raw_connect(port);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&b, 7), 0); /* GETNUMKEYS */
    send_all(fd, &b);
    loop_until_readable(&loop, fd);
    assert_int_equal(read_i64(fd), 0);
    if (geteuid() == 0) {
        assert_int_equal(stranger_run(&loop, AF_INET, port), 0);
        rdzv_server_stats_t st;
        rdzv_server_stats(s, &st);
        assert_int_equal(st.owner_refused, 1);
        assert_int_equal(
            metric_of(s, "ddprun_store_connections_closed_total{reason=\"peer_owner\"}"), 1);
        /* The job's own connection carries on. */
        assert_int_equal(rdzv__put_u8(&b, 7), 0);
        send_all(fd, &b);
        loop_until_readable(&loop, fd);
        assert_int_equal(read_i64(fd), 0);
        rdzv_server_t *s6 = NULL;
        o.host = "::1";
        if (rdzv_server_start(&loop, &o, &s6, &err) == 0) {
            assert_int_equal(stranger_run(&loop, AF_INET6, rdzv_server_port(s6)), 0);
            rdzv_server_stats(s6, &st);
            assert_int_equal(st.owner_refused, 1);
            rdzv_server_close(s6, NULL, NULL);
        }
    }
    ddp_buf_free(&b);
    close(fd);
    rdzv_server_close(s, NULL, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* SETs key=value on fd (today's numbering, after VALIDATE) and turns loop until the store ran it
 * (a PING's answer). */
static void loop_set(uv_loop_t *loop, int fd, const char *key) {
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, RDZV_CMD_SET, key);
    assert_int_equal(rdzv__put_blob(&b, "value", 5), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&b, 7), 0);
    send_all(fd, &b);
    ddp_buf_free(&b);
    loop_until_readable(loop, fd);
    uint8_t r[4];
    raw_read(fd, r, 4);
}

/* Old rounds' keys go (rdzv_server_forget_rounds): the round keys under the prefix the caller
 * names ("ddpw/<run>/<round>/" here) and the round-end keys of rounds below the given one, of
 * that run only; everything else stays, and the memory account comes back to what the kept keys
 * hold. The store knows no prefix of its own: under another one, or none, the same "ddpw/" keys
 * stay and only the end keys go. */
static void test_forget_rounds(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    int fd = raw_connect(rdzv_server_port(s));
    static const char *kept[] = {"ddpw/r/2/c",          "ddpw/rx/0/d",    "ddpw/r/x/e",
                                 "__rdzv/r/end/2",      "other",          "ddpw/r",
                                 "__rdzv/r/progress/0", "__rdzv/rx/end/0"};
    static const char *dropped[] = {"ddpw/r/0/a", "ddpw/r/1/b", "ddpw/r/1/nested/key",
                                    "__rdzv/r/end/0", "__rdzv/r/end/1"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        loop_set(&loop, fd, kept[i]);
    rdzv_server_stats_t st0, st1;
    rdzv_server_stats(s, &st0);
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        loop_set(&loop, fd, dropped[i]);
    /* Another layer's prefix, then none: only the end keys of old rounds go. */
    rdzv_server_forget_rounds(s, "r", "lib/", 2);
    rdzv_server_forget_rounds(s, "r", NULL, 2);
    rdzv_server_forget_rounds(s, "r", "", 2);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, st0.keys + 3);
    rdzv_server_forget_rounds(s, "r", "ddpw/", 2);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, st0.keys);
    assert_int_equal(st1.mem_used, st0.mem_used);
    /* Which ones: CHECK each. */
    for (int pass = 0; pass < 2; pass++) {
        const char **list = pass ? dropped : kept;
        size_t n = pass ? sizeof dropped / sizeof dropped[0] : sizeof kept / sizeof kept[0];
        for (size_t i = 0; i < n; i++) {
            ddp_buf_t b = DDP_BUF_INIT;
            assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_CHECK), 0);
            assert_int_equal(rdzv__put_u64(&b, 1), 0);
            assert_int_equal(rdzv__put_blob(&b, list[i], strlen(list[i])), 0);
            send_all(fd, &b);
            ddp_buf_free(&b);
            loop_until_readable(&loop, fd);
            uint8_t r;
            raw_read(fd, &r, 1);
            if (r != (pass ? RDZV_CHECK_NOT_READY : RDZV_CHECK_READY))
                fail_msg("%s: %s", list[i], pass ? "still there" : "gone");
        }
    }
    close(fd);
    rdzv_server_close(s, NULL, NULL);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    }
    assert_int_equal(uv_loop_close(&loop), 0);
}

typedef struct log_capture {
    int lines, evicted, summary;
    char last[512];
} log_capture_t;

static void capture_log(void *arg, int level, const char *msg) {
    log_capture_t *lc = arg;
    (void)level;
    lc->lines++;
    lc->evicted += strstr(msg, ": evicted, unauthenticated after ") != NULL;
    lc->summary += strstr(msg, "3 more connections refused, evicted or idle on") != NULL;
    snprintf(lc->last, sizeof lc->last, "%s", msg);
}

/* Reads one rendezvous reply from fd into rep (SO_RCVTIMEO bounds each read). */
static void raw_round_reply(int fd, rdzv_round_reply_t *rep) {
    uint8_t in[512];
    size_t n = 0, need = 0;
    long rn;
    while ((rn = rdzv_round_reply_parse(in, n, rep, &need, NULL)) == 0) {
        assert_true(need <= sizeof in);
        ssize_t r = read(fd, in + n, need - n);
        assert_true(r > 0);
        n += (size_t)r;
    }
    assert_true(rn > 0);
}

/* The prefix of the round keys reaches the store with the run's first JOIN: when round 2 closes
 * the store drops round 0's keys under that prefix ("lib/" here) and keeps the same shape under
 * any other ("ddpw/"): it holds no prefix of its own. */
static void test_join_round_keys(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int fd = raw_connect(st->port);
    ddp_err_t err;
    ddp_err_clear(&err);
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    ddp_buf_t b = DDP_BUF_INIT;
    for (int64_t round = 0; round <= 2; round++) {
        rdzv_join_req_t q = {0};
        snprintf(q.run_id, sizeof q.run_id, "r");
        snprintf(q.host, sizeof q.host, "n0");
        q.want_node_rank = -1;
        q.nproc = 1;
        q.cfg.min_nodes = q.cfg.max_nodes = 1;
        q.cfg.max_restarts = 5;
        snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "lib/");
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        send_all(fd, &b);
        ddp_buf_reset(&b);
        raw_round_reply(fd, &rep);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
        assert_int_equal(rep.status, 0);
        assert_int_equal(rep.join.round, round);
        if (round == 0) {
            assert_int_equal(rdzv_client_set(c, "lib/r/0/a", "x", 1, &err), 0);
            assert_int_equal(rdzv_client_set(c, "ddpw/r/0/a", "x", 1, &err), 0);
        }
        if (round == 2)
            break;
        /* Round r failed: the next JOIN closes round r + 1. */
        assert_int_equal(rdzv_fail_req_encode(&b, "r", round, "test"), 0);
        send_all(fd, &b);
        ddp_buf_reset(&b);
        raw_round_reply(fd, &rep);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_FAIL);
        assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
    }
    const char *dropped[] = {"lib/r/0/a"}, *kept[] = {"ddpw/r/0/a"};
    int ready = -1;
    assert_int_equal(rdzv_client_check(c, dropped, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    assert_int_equal(rdzv_client_check(c, kept, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
    close(fd);
    rdzv_client_free(c);
    server_down(st);
}

/* A burst of evictions logs one line naming both peers; the timer then says how many lines were
 * left out, once a second has passed (bounded: 5 s). */
static void test_admission_log_rate_limited(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .token = good_token};
    o.token_len = strlen(good_token);
    o.max_unauth_conns = 1;
    o.auth_idle_ms = 60000;
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    log_capture_t lc = {0};
    rdzv_server_set_log(s, 1 /* warn */, capture_log, &lc);
    int fd[5];
    for (int i = 0; i < 5; i++)
        fd[i] = raw_connect(rdzv_server_port(s));
    rdzv_server_stats_t st = {0};
    uint64_t deadline = ddp_now_ms() + 5000;
    while (lc.summary == 0 && ddp_now_ms() < deadline) {
        uv_run(&loop, UV_RUN_ONCE);
        rdzv_server_stats(s, &st);
    }
    assert_int_equal(st.hs_evicted, 4);
    assert_int_equal(lc.evicted, 1);
    assert_int_equal(lc.summary, 1);
    assert_int_equal(lc.lines, 2);
    for (int i = 0; i < 5; i++)
        close(fd[i]);
    int closed = 0;
    rdzv_server_close(s, mark_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* max_conns against RLIMIT_NOFILE: raised when the hard limit allows, else the file limit wins
 * with a reserve of at most a quarter of it. */
static void test_nofile_plan(void **state) {
    (void)state;
    uint64_t want = 0;
    assert_int_equal(rdzv__nofile_plan(1000, 4096, 4096, &want), 1000);
    assert_int_equal(want, 4096);
    assert_int_equal(rdzv__nofile_plan(1000, 1024, 1048576, &want), 1000);
    assert_int_equal(want, 1000 + RDZV_NOFILE_RESERVE);
    assert_int_equal(rdzv__nofile_plan(65536, 1024, (uint64_t)RLIM_INFINITY, &want), 65536);
    assert_int_equal(want, 65536 + RDZV_NOFILE_RESERVE);
    assert_int_equal(rdzv__nofile_plan(65536, 1024, 20000, &want), 20000 - RDZV_NOFILE_RESERVE);
    assert_int_equal(want, 20000);
    assert_int_equal(rdzv__nofile_plan(1000, 64, 64, &want), 48);
    assert_int_equal(want, 64);
    assert_int_equal(rdzv__nofile_plan(1000, 2, 2, &want), 2);
    assert_int_equal(rdzv__nofile_plan(1000, 0, 0, &want), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_get_timeout),
        cmocka_unit_test(test_wait_released_by_other_client),
        cmocka_unit_test(test_token_refuses_unauthenticated_store),
        cmocka_unit_test(test_run_token_scope),
        cmocka_unit_test(test_auth_and_barrier),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_metrics_label),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_token_messages),
        cmocka_unit_test(test_server_start_errors),
        cmocka_unit_test(test_queues),
        cmocka_unit_test(test_queue_pop_and_list_replies),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_queue_bounds),
        cmocka_unit_test(test_close_members_inside_wake),
        cmocka_unit_test(test_round_answers_by_member),
        cmocka_unit_test(test_idle_handshakes_evicted),
        cmocka_unit_test(test_admission_log_rate_limited),
        cmocka_unit_test(test_nofile_plan),
        cmocka_unit_test(test_worker_store_legacy_numbering),
        cmocka_unit_test(test_worker_store_refuses_rendezvous),
        cmocka_unit_test(test_worker_store_reset),
        cmocka_unit_test(test_worker_store_limits_follow_workers),
        cmocka_unit_test(test_worker_store_owner_only),
        cmocka_unit_test(test_worker_store_owner_fails_closed),
        cmocka_unit_test(test_answered_reads_push_no_ack),
        cmocka_unit_test(test_forget_rounds),
        cmocka_unit_test(test_join_round_keys),
        cmocka_unit_test(test_connect_unanswered_retried),
    };
    return cmocka_run_group_tests_name("rdzv_client", tests, NULL, NULL);
}
