/* SPDX-License-Identifier: Apache-2.0
 * The blocking client's key-value calls against a store in the same process
 * (store_client_fixture.h): a connect that gets no answer and is made again, the commands and
 * their replies, timeouts, a wait released by another client, the errors callers are told, the
 * metrics' labels and the server's start-up errors. The store's other areas have files of their
 * own: test_rdzv_client_auth.c (tokens and the handshake), test_rdzv_client_queues.c (queues,
 * barriers and rounds in raw frames), test_rdzv_client_limits.c (admission and what a read
 * costs), test_rdzv_client_wstore.c (the workers' store). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_net.h"
#include "ddp_time.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "store_client_fixture.h"
#include "syn_blackhole.h"

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

/* A listener that never accepts: the kernel completes the connection, nothing answers (a stopped
 * store). handshake_timeout_ms bounds the whole handshake, io_timeout_ms being long. */
static void test_handshake_timeout(void **state) {
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    rdzv_client_opts_t o = {.host = "127.0.0.1",
                            .port = ntohs(sa.sin_port),
                            .connect_timeout_ms = 3000,
                            .io_timeout_ms = 20000,
                            .handshake_timeout_ms = 300};
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(rdzv_client_connect(&o, &c, &err), DDP_ETIMEOUT);
    uint64_t took = ddp_now_ms() - t0;
    assert_null(c);
    assert_true(took >= 290 && took < 5000);
    assert_non_null(strstr(err.text, "127.0.0.1:"));
    close(lfd);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_get_timeout),
        cmocka_unit_test(test_wait_released_by_other_client),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_metrics_label),
        cmocka_unit_test(test_server_start_errors),
        cmocka_unit_test(test_connect_unanswered_retried),
        cmocka_unit_test(test_handshake_timeout),
    };
    return cmocka_run_group_tests_name("rdzv_client", tests, NULL, NULL);
}
