/* SPDX-License-Identifier: Apache-2.0
 * The fixture of the async-client tests (test_rdzv_async_client.c, test_rdzv_round_calls.c): one
 * libuv loop under a guard timer, the embedded store server, clients of it, and a scripted server
 * for replies the real one never gives. Each test gets a fresh env_t in *state: its loop with the
 * guard timer (setup_loop); also the store server, with good_token (setup_server) or without a
 * token (setup_open_server); also a client of that server, connected and authenticated, in e->c
 * (setup_client). A test body closes what it made itself (timers and listeners in its frame,
 * clients whose callbacks point at its locals) before it returns. The teardown closes the
 * fixture's client and server, runs the loop until nothing is left and checks
 * uv_loop_close() == 0, which proves that the client released every handle.
 *
 * Functions are static inline so that a test file that uses only some of them builds without
 * warnings. */
#ifndef ASYNC_CLIENT_FIXTURE_H
#define ASYNC_CLIENT_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_async_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

#define GUARD_MS 10000

static const char good_token[] = "0123456789abcdef-test-token";
static int g_seq; /* order in which callbacks ran, across all clients of a test */

/* What a callback saw. */
typedef struct res {
    int called, status, seq;
    size_t len;
    char val[256];
    char text[400];
} res_t;

static inline void rec_cb(void *arg, int status, const uint8_t *reply, size_t len,
                          const char *errtext) {
    res_t *r = arg;
    r->called++;
    r->status = status;
    r->seq = ++g_seq;
    r->len = len;
    r->val[0] = 0;
    if (reply != NULL) {
        size_t n = len < sizeof r->val - 1 ? len : sizeof r->val - 1;
        memcpy(r->val, reply, n);
        r->val[n] = 0;
    }
    snprintf(r->text, sizeof r->text, "%s", errtext ? errtext : "");
    if (status < 0)
        assert_non_null(errtext);
    else
        assert_null(errtext);
}

static inline int64_t res_i64(const res_t *r) {
    int64_t v = 0;
    assert_int_equal(rdzv_aclient_reply_i64((const uint8_t *)r->val, r->len, &v), 0);
    return v;
}

/* One test's loop, guard timer, server and client (the fixture's, or NULL). */
typedef struct env {
    uv_loop_t loop;
    uv_timer_t guard;
    rdzv_server_t *srv;
    uint16_t port;
    int srv_closed;
    rdzv_aclient_t *c;
    int body_done; /* the test body returned (see TEST) */
} env_t;

static inline void on_guard(uv_timer_t *t) {
    (void)t;
    fail_msg("test exceeded its %d ms guard", GUARD_MS);
}

static inline void env_init(env_t *e) {
    memset(e, 0, sizeof *e);
    g_seq = 0;
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(uv_timer_init(&e->loop, &e->guard), 0);
    assert_int_equal(uv_timer_start(&e->guard, on_guard, GUARD_MS, 0), 0);
    uv_unref((uv_handle_t *)&e->guard);
}

static inline void srv_start(env_t *e, const char *token, uint16_t port) {
    rdzv_server_opts_t o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = port;
    o.token = token;
    o.token_len = token ? strlen(token) : 0;
    o.no_auth = token == NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_server_start(&e->loop, &o, &e->srv, &err) < 0)
        fail_msg("server start: %s", err.text);
    e->port = rdzv_server_port(e->srv);
    assert_true(e->port > 0);
}

static inline void set_flag(void *arg) {
    *(int *)arg += 1;
}

/* Runs the loop until *flag becomes non-zero (the guard bounds it). */
static inline void run_until(env_t *e, const int *flag) {
    while (!*flag)
        uv_run(&e->loop, UV_RUN_ONCE);
}

static inline void srv_stop(env_t *e) {
    if (e->srv == NULL)
        return;
    rdzv_server_close(e->srv, set_flag, &e->srv_closed);
    e->srv = NULL;
    run_until(e, &e->srv_closed);
}

static inline void env_done(env_t *e) {
    srv_stop(e);
    uv_close((uv_handle_t *)&e->guard, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
}

/* A connect outcome or an on_close notification: same callback shape. */
typedef struct status_res {
    int called, status, seq;
    char text[400];
} status_res_t;

static inline void on_status(void *arg, int status, const char *errtext) {
    status_res_t *r = arg;
    r->called++;
    r->status = status;
    r->seq = ++g_seq;
    snprintf(r->text, sizeof r->text, "%s", errtext ? errtext : "");
}

static inline rdzv_client_opts_t opts_for(uint16_t port, const char *token, int connect_ms,
                                          int io_ms) {
    rdzv_client_opts_t o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = port;
    o.token = token;
    o.token_len = token ? strlen(token) : 0;
    o.connect_timeout_ms = connect_ms;
    o.io_timeout_ms = io_ms;
    return o;
}

static inline rdzv_aclient_t *start_client(env_t *e, const rdzv_client_opts_t *o,
                                           status_res_t *cr) {
    rdzv_aclient_t *c = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    memset(cr, 0, sizeof *cr);
    if (rdzv_aclient_connect(&e->loop, o, on_status, cr, &c, &err) < 0)
        fail_msg("connect: %s", err.text);
    assert_non_null(c);
    return c;
}

/* Connects to the test's server and waits until ready. */
static inline rdzv_aclient_t *client_up(env_t *e, const char *token) {
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, token, 3000, 3000);
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    run_until(e, &cr.called);
    if (cr.status != 0)
        fail_msg("connect: %s", cr.text);
    return c;
}

static inline void client_close(env_t *e, rdzv_aclient_t *c) {
    int closed = 0;
    rdzv_aclient_close(c, set_flag, &closed);
    run_until(e, &closed);
}

static inline void on_handle_closed(uv_handle_t *h) {
    *(int *)h->data = 1;
}

/* Closes a handle that lives in the test body's frame and runs the loop until libuv is done with
 * it, so that nothing refers to it once the body returns. */
static inline void close_now(env_t *e, void *handle) {
    uv_handle_t *h = handle;
    int closed = 0;
    h->data = &closed;
    uv_close(h, on_handle_closed);
    run_until(e, &closed);
}

/* Closes the fixture's client before the teardown would (a test that checks what closing did). */
static inline void env_client_close(env_t *e) {
    client_close(e, e->c);
    e->c = NULL;
}

static inline int setup_loop(void **state) {
    env_t *e = calloc(1, sizeof *e);
    assert_non_null(e);
    env_init(e);
    *state = e;
    return 0;
}

static inline int setup_server(void **state) {
    setup_loop(state);
    srv_start(*state, good_token, 0);
    return 0;
}

static inline int setup_open_server(void **state) {
    setup_loop(state);
    srv_start(*state, NULL, 0);
    return 0;
}

static inline int setup_client(void **state) {
    setup_server(state);
    env_t *e = *state;
    e->c = client_up(e, good_token);
    return 0;
}

static inline int teardown(void **state) {
    env_t *e = *state;
    /* After a failed assertion the body's frame is gone, and with it what its handles and
     * callbacks point at: the loop is left as it is (the test has failed already). */
    if (!e->body_done)
        return 0;
    if (e->c != NULL)
        env_client_close(e);
    env_done(e);
    free(e);
    return 0;
}

/* TEST(name) { ... }: a test body over the fixture's env_t *e. The cmocka test name() runs it and
 * notes that it returned, which the teardown needs to know. */
#define TEST(name)                                                                                 \
    static void name##_body(env_t *e);                                                             \
    static void name(void **state) {                                                               \
        env_t *env_ = *state;                                                                      \
        name##_body(env_);                                                                         \
        env_->body_done = 1;                                                                       \
    }                                                                                              \
    static void name##_body(env_t *e)

/* A free TCP port on 127.0.0.1: bound once by the kernel's choice, then released. */
static inline uint16_t free_port(env_t *e) {
    uv_tcp_t t;
    struct sockaddr_in a;
    assert_int_equal(uv_tcp_init(&e->loop, &t), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    assert_int_equal(uv_tcp_bind(&t, (const struct sockaddr *)&a, 0), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    assert_int_equal(uv_tcp_getsockname(&t, (struct sockaddr *)&ss, &len), 0);
    uint16_t port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    return port;
}

/* A scripted server (no token): it parses requests with the store's own codec, echoes PINGs,
 * parks GET_WAIT/WAIT, and answers CANCEL_WAIT as if the wait had been released just before
 * ("0 + value, 1" or "0, 1"), the race the client must absorb. A NOWAIT GET_WAIT gets a bad
 * status byte.
 * A rendezvous request (JOIN...BEAT_FOR) is answered with the bytes in round_reply, whatever
 * it asked (a reply the real store never gives). */
typedef struct fake {
    uv_tcp_t lis, peer;
    ddp_buf_t in;
    int parked; /* 0 none, RDZV_CMD_GET_WAIT or RDZV_CMD_WAIT */
    ddp_buf_t round_reply;
    int peer_open;
} fake_t;

static inline void fake_write(fake_t *f, const void *p, size_t n) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    assert_true(uv_try_write((uv_stream_t *)&f->peer, &b, 1) == (int)n);
}

static inline void fake_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
    fake_t *f = h->data;
    (void)sz;
    assert_int_equal(ddp_buf_reserve(&f->in, 4096), 0);
    *b = uv_buf_init((char *)f->in.data + f->in.len, 4096);
}

static inline void fake_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    fake_t *f = s->data;
    (void)b;
    if (nread <= 0)
        return;
    f->in.len += (size_t)nread;
    rdzv_frame_limits_t lim = {RDZV_MAX_KEY_LEN, RDZV_MAX_VALUE_LEN, RDZV_MAX_KEYS_PER_REQ,
                               RDZV_MAX_FRAME_LEN};
    for (;;) {
        rdzv_req_t q;
        size_t need;
        if (f->in.len > 0 && f->in.data[0] >= RDZV_CMD_RDZV_FIRST &&
            f->in.data[0] <= RDZV_CMD_RDZV_LAST) {
            rdzv_round_req_t rq;
            long n = rdzv_round_req_parse(f->in.data, f->in.len, &rq, &need, NULL);
            assert_true(n >= 0);
            if (n == 0)
                break;
            fake_write(f, f->round_reply.data, f->round_reply.len);
            ddp_buf_consume(&f->in, (size_t)n);
            continue;
        }
        long n = rdzv__frame_parse(f->in.data, f->in.len, &lim, &q, &need, NULL);
        assert_true(n >= 0);
        if (n == 0)
            break;
        static const uint8_t bad = 7, zero = 0, one = 1;
        static const uint8_t late[] = {0, 4, 0, 0, 0, 0, 0, 0, 0, 'l', 'a', 't', 'e', 1};
        switch (q.cmd) {
        case RDZV_CMD_PING: fake_write(f, &q.u32, 4); break;
        case RDZV_CMD_GET_WAIT:
            if (q.mode == RDZV_GETW_NOWAIT)
                fake_write(f, &bad, 1);
            else
                f->parked = RDZV_CMD_GET_WAIT;
            break;
        case RDZV_CMD_WAIT: f->parked = RDZV_CMD_WAIT; break;
        case RDZV_CMD_CANCEL_WAIT:
            if (f->parked == RDZV_CMD_GET_WAIT) {
                fake_write(f, late, sizeof late);
            } else {
                fake_write(f, &zero, 1);
                fake_write(f, &one, 1);
            }
            f->parked = 0;
            break;
        default: break;
        }
        ddp_buf_consume(&f->in, (size_t)n);
    }
}

static inline void fake_conn(uv_stream_t *s, int status) {
    fake_t *f = s->data;
    assert_int_equal(status, 0);
    assert_int_equal(uv_tcp_init(s->loop, &f->peer), 0);
    f->peer.data = f;
    f->peer_open = 1;
    assert_int_equal(uv_accept(s, (uv_stream_t *)&f->peer), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&f->peer, fake_alloc, fake_read), 0);
}

static inline uint16_t fake_start(env_t *e, fake_t *f) {
    memset(f, 0, sizeof *f);
    struct sockaddr_in a;
    assert_int_equal(uv_tcp_init(&e->loop, &f->lis), 0);
    f->lis.data = f;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    assert_int_equal(uv_tcp_bind(&f->lis, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&f->lis, 8, fake_conn), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    assert_int_equal(uv_tcp_getsockname(&f->lis, (struct sockaddr *)&ss, &len), 0);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static inline void fake_stop(env_t *e, fake_t *f) {
    if (f->peer_open)
        close_now(e, &f->peer);
    close_now(e, &f->lis);
    ddp_buf_free(&f->in);
    ddp_buf_free(&f->round_reply);
}

#endif
