/* SPDX-License-Identifier: Apache-2.0
 * Async store client against the embedded server, both on ONE libuv loop (as in the agent):
 * connect/auth, pipelining, waits, timeouts, connection loss, close and connect retries.
 * Every test runs its loop under a guard timer, and ends with uv_loop_close() == 0, which
 * proves that the client released every handle. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_net.h"
#include "ddp_time.h"
#include "rdzv_async_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_server.h"
#include "syn_blackhole.h"

#include "async_client_fixture.h"

/* ---- tests ---- */

TEST(test_connect_auth_ok) {
    rdzv_aclient_t *c = e->c;
    assert_int_equal(rdzv_aclient_authenticated(c), 1);
    res_t r = {0};
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &r, NULL), 0);
    assert_int_equal(r.called, 0); /* never synchronous */
    run_until(e, &r.called);
    assert_int_equal(r.status, 0);
    assert_int_equal(rdzv_aclient_pending(c), 0);
}

TEST(test_connect_no_auth) {
    rdzv_aclient_t *c = client_up(e, NULL);
    assert_int_equal(rdzv_aclient_authenticated(c), 0);
    /* A client with a token refuses a server without one (it cannot prove it is the job's
     * store); by name, through getaddrinfo ("localhost" may try ::1 first, which refuses: next
     * address), and the error names that endpoint. */
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, good_token, 3000, 3000);
    o.host = "localhost";
    rdzv_aclient_t *c2 = start_client(e, &o, &cr);
    run_until(e, &cr.called);
    assert_int_equal(cr.status, DDP_EAUTH_PEER);
    assert_int_equal(strncmp(cr.text, "localhost:", 10), 0);
    assert_non_null(strstr(cr.text, "the store has no token (--no-auth)"));
    assert_int_equal(rdzv_aclient_authenticated(c2), 0);
    /* A request queued on the refused client fails; nothing reaches the store. */
    res_t r = {0};
    if (rdzv_aclient_set(c2, "k", "v", 1, rec_cb, &r, NULL) == 0) {
        run_until(e, &r.called);
        assert_true(r.status < 0);
    }
    res_t g = {0};
    assert_int_equal(rdzv_aclient_get(c, "k", 50, rec_cb, &g, NULL), 0);
    run_until(e, &g.called);
    assert_int_equal(g.status, DDP_ETIMEOUT); /* never set */
    client_close(e, c);
    client_close(e, c2);
}

TEST(test_wrong_token) {
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, "wrong-token-wrong-token", 3000, 3000);
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    res_t r = {0};
    assert_int_equal(rdzv_aclient_add(c, "x", 1, rec_cb, &r, NULL), 0); /* queued meanwhile */
    run_until(e, &cr.called);
    assert_int_equal(cr.status, DDP_EAUTH);
    assert_non_null(strstr(cr.text, "refused the token"));
    run_until(e, &r.called);
    assert_int_equal(r.status, DDP_ECLOSED);
    assert_true(r.seq > cr.seq);
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &r, &err), DDP_ECLOSED);
    assert_non_null(strstr(err.text, "127.0.0.1:"));
    client_close(e, c);
    assert_int_equal(r.called, 1);
    assert_int_equal(cr.called, 1);

    /* No token at all against a server that needs one. */
    o = opts_for(e->port, NULL, 3000, 3000);
    c = start_client(e, &o, &cr);
    run_until(e, &cr.called);
    assert_int_equal(cr.status, DDP_EAUTH);
    assert_non_null(strstr(cr.text, "DDPRUN_STORE_TOKEN"));
    client_close(e, c);
}

#define NPIPE 1000

TEST(test_pipelined) {
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, good_token, 3000, 3000);
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    res_t *r = calloc(3 * NPIPE, sizeof *r);
    assert_non_null(r);
    /* Submitted before the handshake ends: queued, then all sent in one burst. */
    for (int i = 0; i < NPIPE; i++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "v%d", i);
        assert_int_equal(rdzv_aclient_set(c, key, val, strlen(val), rec_cb, &r[3 * i], NULL), 0);
        assert_int_equal(rdzv_aclient_add(c, "ctr", 1, rec_cb, &r[3 * i + 1], NULL), 0);
        assert_int_equal(rdzv_aclient_get(c, key, 0, rec_cb, &r[3 * i + 2], NULL), 0);
    }
    assert_int_equal(rdzv_aclient_pending(c), 3 * NPIPE);
    run_until(e, &r[3 * NPIPE - 1].called);
    assert_int_equal(cr.status, 0);
    for (int i = 0; i < 3 * NPIPE; i++) {
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, 0);
        assert_int_equal(r[i].seq, i + 2); /* connect callback first, then strictly in order */
    }
    for (int i = 0; i < NPIPE; i++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", i);
        assert_int_equal(res_i64(&r[3 * i + 1]), i + 1);
        assert_string_equal(r[3 * i + 2].val, val);
    }
    assert_int_equal(rdzv_aclient_pending(c), 0);
    free(r);
    client_close(e, c);
}

TEST(test_get_timeout) {
    rdzv_aclient_t *c = e->c;
    res_t g = {0}, w = {0}, s = {0}, g2 = {0};
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(rdzv_aclient_get(c, "absent", 150, rec_cb, &g, NULL), 0);
    run_until(e, &g.called);
    uint64_t took = ddp_now_ms() - t0;
    assert_int_equal(g.status, DDP_ETIMEOUT);
    assert_true(took >= 140 && took < 3000);
    char want[128];
    snprintf(want, sizeof want, "127.0.0.1:%u: timed out after 150 ms waiting for key 'absent'",
             e->port);
    assert_string_equal(g.text, want);
    /* WAIT times out the same way; the connection stays usable afterwards. */
    const char *keys[] = {"nokey"};
    assert_int_equal(rdzv_aclient_wait(c, keys, 1, 50, rec_cb, &w, NULL), 0);
    assert_int_equal(rdzv_aclient_set(c, "absent", "here", 4, rec_cb, &s, NULL), 0);
    assert_int_equal(rdzv_aclient_get(c, "absent", 1000, rec_cb, &g2, NULL), 0);
    run_until(e, &g2.called);
    assert_int_equal(w.status, DDP_ETIMEOUT);
    assert_int_equal(s.status, 0);
    assert_int_equal(g2.status, 0);
    assert_string_equal(g2.val, "here");
    assert_true(w.seq < s.seq && s.seq < g2.seq);
}

/* Sets keys "a" and "b" from a second client after a delay. */
typedef struct setter {
    uv_timer_t t;
    rdzv_aclient_t *c;
    res_t ra, rb;
} setter_t;

static void on_setter(uv_timer_t *t) {
    setter_t *st = t->data;
    assert_int_equal(rdzv_aclient_set(st->c, "a", "A", 1, rec_cb, &st->ra, NULL), 0);
    assert_int_equal(rdzv_aclient_set(st->c, "b", "B", 1, rec_cb, &st->rb, NULL), 0);
}

TEST(test_wait_released_by_other_client) {
    rdzv_aclient_t *watch = client_up(e, good_token);
    setter_t st;
    memset(&st, 0, sizeof st);
    st.c = client_up(e, good_token);
    res_t w = {0}, g = {0}, a = {0};
    const char *keys[] = {"a", "b"};
    assert_int_equal(rdzv_aclient_wait(watch, keys, 2, 5000, rec_cb, &w, NULL), 0);
    /* Held behind the parked WAIT (the server would answer them first otherwise). */
    assert_int_equal(rdzv_aclient_get(watch, "b", 5000, rec_cb, &g, NULL), 0);
    assert_int_equal(rdzv_aclient_add(watch, "n", 5, rec_cb, &a, NULL), 0);
    assert_int_equal(uv_timer_init(&e->loop, &st.t), 0);
    st.t.data = &st;
    assert_int_equal(uv_timer_start(&st.t, on_setter, 50, 0), 0);
    run_until(e, &a.called);
    assert_int_equal(w.status, 0);
    assert_int_equal(g.status, 0);
    assert_string_equal(g.val, "B");
    assert_int_equal(a.status, 0);
    assert_int_equal(res_i64(&a), 5);
    assert_true(w.seq < g.seq && g.seq < a.seq);
    assert_true(st.ra.called == 1 && st.rb.called == 1);
    close_now(e, &st.t);
    client_close(e, watch);
    client_close(e, st.c);
}

static void on_kill_server(uv_timer_t *t) {
    env_t *e = t->data;
    rdzv_server_close(e->srv, set_flag, &e->srv_closed);
    e->srv = NULL;
}

TEST(test_server_closed_mid_request) {
    rdzv_aclient_t *c = e->c;
    status_res_t l = {0};
    rdzv_aclient_on_close(c, on_status, &l);
    res_t r[5];
    memset(r, 0, sizeof r);
    assert_int_equal(rdzv_aclient_add(c, "x", 1, rec_cb, &r[0], NULL), 0);
    assert_int_equal(rdzv_aclient_get(c, "never", -1, rec_cb, &r[1], NULL), 0);
    assert_int_equal(rdzv_aclient_set(c, "q", "1", 1, rec_cb, &r[2], NULL), 0);
    assert_int_equal(rdzv_aclient_add(c, "q2", 1, rec_cb, &r[3], NULL), 0);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &r[4], NULL), 0);
    uv_timer_t kill;
    assert_int_equal(uv_timer_init(&e->loop, &kill), 0);
    kill.data = e;
    assert_int_equal(uv_timer_start(&kill, on_kill_server, 50, 0), 0);
    run_until(e, &l.called);
    assert_int_equal(r[0].status, 0);
    for (int i = 1; i < 5; i++) {
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, DDP_ECLOSED);
        assert_true(r[i].seq < l.seq);
        assert_non_null(strstr(r[i].text, "connection closed by the server"));
    }
    assert_non_null(strstr(r[1].text, "key 'never'"));
    assert_int_equal(l.status, DDP_ECLOSED);
    assert_int_equal(rdzv_aclient_pending(c), 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    res_t late = {0};
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &late, &err), DDP_ECLOSED);
    run_until(e, &e->srv_closed);
    close_now(e, &kill);
    env_client_close(e);
    for (int i = 0; i < 5; i++)
        assert_int_equal(r[i].called, 1);
    assert_int_equal(l.called, 1);
    assert_int_equal(late.called, 0);
}

/* Closes a client from a timer and records when close_cb ran. */
typedef struct closer {
    uv_timer_t t;
    rdzv_aclient_t *c;
    int closed, close_seq;
} closer_t;

static void on_closed(void *arg) {
    closer_t *cl = arg;
    cl->closed++;
    cl->close_seq = ++g_seq;
}

static void on_closer(uv_timer_t *t) {
    closer_t *cl = t->data;
    rdzv_aclient_close(cl->c, on_closed, cl);
    rdzv_aclient_close(cl->c, on_closed, cl); /* a second call is ignored */
}

TEST(test_close_while_pending) {
    closer_t cl;
    memset(&cl, 0, sizeof cl);
    cl.c = client_up(e, good_token);
    res_t r[4];
    memset(r, 0, sizeof r);
    assert_int_equal(rdzv_aclient_get(cl.c, "never", -1, rec_cb, &r[0], NULL), 0);
    assert_int_equal(rdzv_aclient_add(cl.c, "n", 1, rec_cb, &r[1], NULL), 0);
    assert_int_equal(rdzv_aclient_set(cl.c, "s", "1", 1, rec_cb, &r[2], NULL), 0);
    assert_int_equal(rdzv_aclient_ping(cl.c, rec_cb, &r[3], NULL), 0);
    assert_int_equal(uv_timer_init(&e->loop, &cl.t), 0);
    cl.t.data = &cl;
    assert_int_equal(uv_timer_start(&cl.t, on_closer, 30, 0), 0);
    run_until(e, &cl.closed);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, DDP_ECANCELED);
        assert_true(r[i].seq < cl.close_seq);
    }
    assert_non_null(strstr(r[0].text, "key 'never'"));
    /* Nothing runs after close_cb. */
    close_now(e, &cl.t);
    assert_int_equal(cl.closed, 1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(r[i].called, 1);

    /* Closing while still connecting: the connect callback gets DDP_ECANCELED first. */
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(free_port(e), NULL, 3000, 3000);
    memset(&cl, 0, sizeof cl);
    cl.c = start_client(e, &o, &cr);
    res_t q = {0};
    assert_int_equal(rdzv_aclient_ping(cl.c, rec_cb, &q, NULL), 0);
    rdzv_aclient_close(cl.c, on_closed, &cl);
    assert_int_equal(cr.called, 0);
    run_until(e, &cl.closed);
    assert_int_equal(cr.status, DDP_ECANCELED);
    assert_int_equal(q.status, DDP_ECANCELED);
    assert_true(cr.seq < q.seq && q.seq < cl.close_seq);
}

/* A callback that closes its own client. */
typedef struct self_close {
    rdzv_aclient_t *c;
    closer_t cl;
    res_t r;
} self_close_t;

static void close_from_cb(void *arg, int status, const uint8_t *reply, size_t len,
                          const char *errtext) {
    self_close_t *sc = arg;
    rec_cb(&sc->r, status, reply, len, errtext);
    rdzv_aclient_close(sc->c, on_closed, &sc->cl);
    res_t dummy = {0};
    assert_int_equal(rdzv_aclient_ping(sc->c, rec_cb, &dummy, NULL), DDP_ECANCELED);
}

TEST(test_close_in_callback) {
    self_close_t sc;
    memset(&sc, 0, sizeof sc);
    sc.c = client_up(e, NULL);
    res_t r[2];
    memset(r, 0, sizeof r);
    assert_int_equal(rdzv_aclient_add(sc.c, "n", 1, close_from_cb, &sc, NULL), 0);
    assert_int_equal(rdzv_aclient_add(sc.c, "n", 1, rec_cb, &r[0], NULL), 0);
    assert_int_equal(rdzv_aclient_get(sc.c, "never", 5000, rec_cb, &r[1], NULL), 0);
    run_until(e, &sc.cl.closed);
    assert_int_equal(sc.r.status, 0);
    /* The second ADD's reply may already be in the same read: it is canceled all the same. */
    assert_int_equal(r[0].called, 1);
    assert_int_equal(r[1].called, 1);
    assert_int_equal(r[1].status, DDP_ECANCELED);
    assert_true(r[1].seq < sc.cl.close_seq);
}

static void on_start_server(uv_timer_t *t) {
    env_t *e = t->data;
    srv_start(e, good_token, e->port);
}

/* Connects to e->port, where a server comes 100 ms later (on_later starts it, with data);
 * returns the connected client and, in *took, the milliseconds the connect took. */
static rdzv_aclient_t *connect_served_later(env_t *e, uv_timer_cb on_later, void *data,
                                            uint64_t *took) {
    uv_timer_t later;
    assert_int_equal(uv_timer_init(&e->loop, &later), 0);
    later.data = data;
    assert_int_equal(uv_timer_start(&later, on_later, 100, 0), 0);
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, good_token, 5000, 3000);
    uint64_t t0 = ddp_now_ms();
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    run_until(e, &cr.called);
    *took = ddp_now_ms() - t0;
    if (cr.status != 0)
        fail_msg("connect: %s", cr.text);
    close_now(e, &later);
    return c;
}

TEST(test_connect_retry) {
    e->port = free_port(e);
    uint64_t took;
    rdzv_aclient_t *c = connect_served_later(e, on_start_server, e, &took);
    assert_true(took >= 90 && took < 3000);
    assert_int_equal(rdzv_aclient_authenticated(c), 1);
    res_t r = {0};
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &r, NULL), 0);
    run_until(e, &r.called);
    assert_int_equal(r.status, 0);
    client_close(e, c);
}

typedef struct blackhole {
    env_t *e;
    int lfd, filler;
} blackhole_t;

/* The store comes where nothing answered: the blackhole goes, a server takes its port. */
static void on_blackhole_to_server(uv_timer_t *t) {
    blackhole_t *b = t->data;
    close(b->filler);
    close(b->lfd);
    srv_start(b->e, good_token, b->e->port);
}

/* A connect that gets no answer is abandoned after DDP_CONNECT_TRY_FIRST_MS and made again on a
 * new socket: the store that answers from 100 ms on is reached on the next try, not when the
 * kernel sends the lost SYN again (1 s later). Before, an agent whose link came back waited for
 * the kernel's backoff (1 s, 3 s, 7 s, ...). */
TEST(test_connect_unanswered_retried) {
    blackhole_t b = {.e = e};
    e->port = syn_blackhole(&b.lfd, &b.filler);
    uint64_t took;
    rdzv_aclient_t *c = connect_served_later(e, on_blackhole_to_server, &b, &took);
    print_message("connected after %llu ms\n", (unsigned long long)took);
    assert_true(took >= DDP_CONNECT_TRY_FIRST_MS - 10 && took < 800);
    client_close(e, c);
}

TEST(test_connect_timeout) {
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(free_port(e), good_token, 300, 3000);
    uint64_t t0 = ddp_now_ms();
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    res_t r = {0};
    assert_int_equal(rdzv_aclient_set(c, "k", "v", 1, rec_cb, &r, NULL), 0);
    run_until(e, &r.called);
    uint64_t took = ddp_now_ms() - t0;
    assert_int_equal(cr.status, DDP_ETIMEOUT);
    assert_true(took >= 290 && took < 3000);
    assert_non_null(strstr(cr.text, "unable to connect after"));
    assert_non_null(strstr(cr.text, "in 300 ms"));
    assert_int_equal(r.status, DDP_ECLOSED);
    assert_non_null(strstr(r.text, "key 'k'"));
    client_close(e, c);
    assert_int_equal(cr.called, 1);
}

/* A listener that accepts and never answers: the handshake must time out. */
typedef struct silent {
    uv_tcp_t lis, peer;
    int accepted;
} silent_t;

static void on_silent_conn(uv_stream_t *s, int status) {
    silent_t *si = s->data;
    assert_int_equal(status, 0);
    assert_int_equal(uv_tcp_init(s->loop, &si->peer), 0);
    assert_int_equal(uv_accept(s, (uv_stream_t *)&si->peer), 0);
    si->accepted = 1;
}

/* Starts si listening on a loopback port of its own; returns the port. */
static uint16_t silent_listen(env_t *e, silent_t *si) {
    memset(si, 0, sizeof *si);
    struct sockaddr_in a;
    assert_int_equal(uv_tcp_init(&e->loop, &si->lis), 0);
    si->lis.data = si;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    assert_int_equal(uv_tcp_bind(&si->lis, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&si->lis, 8, on_silent_conn), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    assert_int_equal(uv_tcp_getsockname(&si->lis, (struct sockaddr *)&ss, &len), 0);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* Connects (connect budget 3 s) to a silent listener with io_ms and handshake_ms: the connect
 * fails with DDP_ETIMEOUT saying want, after bound_ms (less 10 ms) and before max_ms. */
static void silent_handshake_times_out(env_t *e, int io_ms, int handshake_ms, const char *want,
                                       uint64_t bound_ms, uint64_t max_ms) {
    silent_t si;
    uint16_t port = silent_listen(e, &si);
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(port, good_token, 3000, io_ms);
    o.handshake_timeout_ms = handshake_ms;
    uint64_t t0 = ddp_now_ms();
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    run_until(e, &cr.called);
    uint64_t took = ddp_now_ms() - t0;
    assert_int_equal(cr.status, DDP_ETIMEOUT);
    assert_non_null(strstr(cr.text, want));
    assert_true(took >= bound_ms - 10 && took < max_ms);
    assert_int_equal(si.accepted, 1);
    client_close(e, c);
    close_now(e, &si.peer);
    close_now(e, &si.lis);
}

TEST(test_handshake_timeout) {
    silent_handshake_times_out(e, 200, 0, "no reply within 200 ms to AUTH_HELLO", 200, 3000);
}

/* The same silent listener with a long io_timeout and a short handshake_timeout_ms: that bounds
 * the whole handshake (a stopped server's kernel still accepts). */
TEST(test_handshake_timeout_whole) {
    silent_handshake_times_out(e, 20000, 300,
                               "connected, but the handshake did not end within 300 ms", 300, 5000);
}

/* A parser for a PING's 4-byte echo. */
static long parse_u32(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    (void)buf;
    if (len >= 4)
        return 4;
    *need = 4;
    return 0;
}

/* A parser that wants more than the server will ever send. */
static long parse_greedy(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    (void)buf;
    if (len >= 64)
        return 64;
    *need = 64;
    return 0;
}

TEST(test_raw) {
    rdzv_aclient_t *c = e->c;
    ddp_buf_t f = DDP_BUF_INIT;
    res_t st = {0}, pg = {0};
    assert_int_equal(rdzv__put_u8(&f, RDZV_CMD_STATS), 0);
    assert_int_equal(
        rdzv_aclient_raw(c, &f, rdzv_aclient_parse_blob, 0, -1, "STATS", rec_cb, &st, NULL), 0);
    ddp_buf_reset(&f);
    assert_int_equal(rdzv__put_u8(&f, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&f, 0xfeedbeefu), 0);
    assert_int_equal(rdzv_aclient_raw(c, &f, parse_u32, 0, -1, NULL, rec_cb, &pg, NULL), 0);
    run_until(e, &pg.called);
    assert_int_equal(st.status, 0);
    const uint8_t *p;
    size_t n;
    assert_int_equal(rdzv_aclient_reply_blob((const uint8_t *)st.val, st.len, &p, &n), 0);
    assert_true(n > 0 && memmem(p, n, "conns", 5) != NULL);
    assert_int_equal(pg.status, 0);
    assert_int_equal(pg.len, 4);
    assert_int_equal(rdzv__get_u32((const uint8_t *)pg.val), 0xfeedbeefu);

    /* COMPARE_SET and DELETE through the typed calls. */
    res_t cas = {0}, d1 = {0}, d2 = {0}, gn = {0};
    assert_int_equal(rdzv_aclient_compare_set(c, "cas", "", 0, "new", 3, rec_cb, &cas, NULL), 0);
    assert_int_equal(rdzv_aclient_delete(c, "cas", rec_cb, &d1, NULL), 0);
    assert_int_equal(rdzv_aclient_delete(c, "cas", rec_cb, &d2, NULL), 0);
    assert_int_equal(rdzv_aclient_get(c, "cas", 0, rec_cb, &gn, NULL), 0);
    run_until(e, &gn.called);
    assert_string_equal(cas.val, "new");
    assert_int_equal(res_i64(&d1), 1);
    assert_int_equal(res_i64(&d2), 0);
    assert_int_equal(gn.status, DDP_ENOKEY);
    assert_non_null(strstr(gn.text, "no key 'cas'"));
    ddp_buf_free(&f);
}

TEST(test_io_timeout) {
    status_res_t cr;
    rdzv_client_opts_t o = opts_for(e->port, good_token, 3000, 200);
    rdzv_aclient_t *c = start_client(e, &o, &cr);
    status_res_t l = {0};
    rdzv_aclient_on_close(c, on_status, &l);
    ddp_buf_t f = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&f, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&f, 7), 0);
    res_t g = {0}, after = {0};
    assert_int_equal(rdzv_aclient_raw(c, &f, parse_greedy, 0, -1, "GREEDY", rec_cb, &g, NULL), 0);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &after, NULL), 0);
    run_until(e, &l.called);
    assert_int_equal(g.status, DDP_ETIMEOUT);
    assert_non_null(strstr(g.text, "no reply within 200 ms to request GREEDY"));
    assert_int_equal(after.status, DDP_ECLOSED);
    assert_int_equal(l.status, DDP_ETIMEOUT);
    assert_true(g.seq < after.seq && after.seq < l.seq);
    ddp_buf_free(&f);
    client_close(e, c);
}

TEST(test_cancel_race_and_bad_reply) {
    fake_t f;
    e->port = fake_start(e, &f);
    rdzv_aclient_t *c = client_up(e, NULL);
    status_res_t l = {0};
    rdzv_aclient_on_close(c, on_status, &l);
    res_t g = {0}, w = {0}, p = {0}, bad = {0}, after = {0};
    const char *keys[] = {"k1", "k2"};
    /* Released just as the timeout struck: the value wins over DDP_ETIMEOUT. */
    assert_int_equal(rdzv_aclient_get(c, "slow", 50, rec_cb, &g, NULL), 0);
    assert_int_equal(rdzv_aclient_wait(c, keys, 2, 50, rec_cb, &w, NULL), 0);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &p, NULL), 0);
    run_until(e, &p.called);
    assert_int_equal(g.status, 0);
    assert_string_equal(g.val, "late");
    assert_int_equal(w.status, 0);
    assert_int_equal(p.status, 0);
    /* A reply that breaks the protocol: that request gets DDP_EPROTO, the rest DDP_ECLOSED. */
    assert_int_equal(rdzv_aclient_get(c, "x", 0, rec_cb, &bad, NULL), 0);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &after, NULL), 0);
    run_until(e, &l.called);
    assert_int_equal(bad.status, DDP_EPROTO);
    assert_non_null(strstr(bad.text, "malformed reply to GET key 'x'"));
    assert_int_equal(after.status, DDP_ECLOSED);
    assert_int_equal(l.status, DDP_EPROTO);
    client_close(e, c);
    fake_stop(e, &f);
}

/* A raw request the server parks (here a WAIT frame) with a client-side timeout. */
TEST(test_raw_parked_timeout) {
    rdzv_aclient_t *c = e->c;
    status_res_t l = {0};
    rdzv_aclient_on_close(c, on_status, &l);
    ddp_buf_t f = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&f, RDZV_CMD_WAIT), 0);
    assert_int_equal(rdzv__put_u64(&f, 1), 0);
    assert_int_equal(rdzv__put_blob(&f, "gone", 4), 0);
    res_t r = {0}, held = {0};
    uint64_t t0 = ddp_now_ms();
    assert_int_equal(rdzv_aclient_raw(c, &f, rdzv_aclient_parse_u8, RDZV_ACLIENT_PARKS, 100,
                                      "JOIN-like", rec_cb, &r, NULL),
                     0);
    assert_int_equal(rdzv_aclient_ping(c, rec_cb, &held, NULL), 0); /* held behind it */
    run_until(e, &l.called);
    uint64_t took = ddp_now_ms() - t0;
    assert_int_equal(r.status, DDP_ETIMEOUT);
    assert_non_null(strstr(r.text, "timed out after 100 ms waiting for the reply to JOIN-like"));
    assert_true(took >= 90 && took < 3000);
    assert_int_equal(held.status, DDP_ECLOSED);
    assert_int_equal(l.status, DDP_ETIMEOUT);
    ddp_buf_free(&f);
    env_client_close(e); /* l is in this frame */
}

TEST(test_limits) {
    rdzv_aclient_t *c = e->c;
    rdzv_aclient_set_out_limit(c, 1000);
    char big[4000];
    memset(big, 'x', sizeof big);
    res_t r = {0}, held = {0};
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_aclient_set(c, "big", big, sizeof big, rec_cb, &r, &err), -ENOBUFS);
    assert_non_null(strstr(err.text, "key 'big'"));
    /* Held requests count too: fill the queue behind a parked GET. */
    assert_int_equal(rdzv_aclient_get(c, "never", -1, rec_cb, &held, NULL), 0);
    int accepted = 0, rc = 0;
    res_t *many = calloc(100, sizeof *many);
    assert_non_null(many);
    while (accepted < 100 &&
           (rc = rdzv_aclient_set(c, "k", big, 100, rec_cb, &many[accepted], NULL)) == 0)
        accepted++;
    assert_int_equal(rc, -ENOBUFS);
    assert_true(accepted > 0 && accepted < 100);
    char *key = malloc(RDZV_MAX_KEY_LEN + 2);
    assert_non_null(key);
    memset(key, 'k', RDZV_MAX_KEY_LEN + 1);
    key[RDZV_MAX_KEY_LEN + 1] = 0;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_aclient_add(c, key, 1, rec_cb, &r, &err), DDP_ETOOBIG);
    assert_non_null(strstr(err.text, "limit 8192"));
    free(key);
    assert_int_equal(rdzv_aclient_pending(c), (size_t)accepted + 1);
    env_client_close(e);
    assert_int_equal(r.called, 0);
    assert_int_equal(held.status, DDP_ECANCELED);
    for (int i = 0; i < accepted; i++)
        assert_int_equal(many[i].status, DDP_ECANCELED);
    free(many);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_connect_auth_ok, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_connect_no_auth, setup_open_server, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_token, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_get_timeout, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_wait_released_by_other_client, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_server_closed_mid_request, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_close_while_pending, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_close_in_callback, setup_open_server, teardown),
        cmocka_unit_test_setup_teardown(test_connect_retry, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_connect_unanswered_retried, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_handshake_timeout, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_handshake_timeout_whole, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_raw, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_io_timeout, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_race_and_bad_reply, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_raw_parked_timeout, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup_client, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
