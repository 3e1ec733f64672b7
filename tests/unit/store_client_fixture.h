/* SPDX-License-Identifier: Apache-2.0
 * The fixture of the blocking client's tests (test_rdzv_client*.c): client and server in one
 * process. The server runs on its own libuv loop in a thread, on 127.0.0.1 and a free port; the
 * tests drive it with rdzv_client from the main thread (and helper threads for waits released by
 * other clients and for barriers), or with raw connections for frame sequences rdzv_client does
 * not make.
 *
 * Functions are static inline so that a test file that uses only some of them builds without
 * warnings. */
#ifndef STORE_CLIENT_FIXTURE_H
#define STORE_CLIENT_FIXTURE_H

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
#include <poll.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

/* The store token of the tests that use one (unused in the others). */
static const char good_token[] __attribute__((unused)) = "0123456789abcdef-test-token";

typedef struct server_thread {
    rdzv_server_thread_t *t;
    uint16_t port;
} server_thread_t;

/* The server of o (host and port filled in here: 127.0.0.1, a free port) on a thread. */
static inline server_thread_t *server_up_with(rdzv_server_opts_t *o) {
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

static inline server_thread_t *server_up(const void *token, size_t token_len, size_t max_out_buf,
                                         int auth_idle_ms) {
    rdzv_server_opts_t o = {0};
    o.token = token;
    o.token_len = token_len;
    o.no_auth = token == NULL;
    o.max_out_buf = max_out_buf;
    o.auth_idle_ms = auth_idle_ms;
    return server_up_with(&o);
}

static inline void server_down(server_thread_t *st) {
    rdzv_server_thread_stop(st->t);
    free(st);
}

/* Connects with token (len bytes; NULL: none), naming run (NULL: none) in the handshake. */
static inline int connect_run(uint16_t port, const void *token, size_t len, const char *run,
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

static inline int connect_to(uint16_t port, const void *token, size_t token_len, rdzv_client_t **c,
                             ddp_err_t *err) {
    return connect_run(port, token, token_len, NULL, c, err);
}

static inline rdzv_client_t *must_connect(uint16_t port, const void *token, size_t token_len) {
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    if (connect_to(port, token, token_len, &c, &err) < 0)
        fail_msg("connect: %s", err.text);
    return c;
}

static inline void mark_closed(void *arg) {
    *(int *)arg = 1;
}

/* ---- raw connections, for frame sequences rdzv_client does not make ---- */

/* A TCP connection to port that sends nothing yet (PyTorch <= 2.0's clients send no VALIDATE). */
static inline int raw_connect_bare(uint16_t port) {
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
static inline int raw_connect(uint16_t port) {
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
static inline size_t raw_send_sync(int fd, ddp_buf_t *b) {
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
static inline int raw_closed(int fd) {
    uint8_t x;
    ssize_t r = read(fd, &x, 1);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

static inline void join_frame(ddp_buf_t *b, const char *host) {
    rdzv_join_req_t q = {0};
    snprintf(q.run_id, sizeof q.run_id, "r");
    snprintf(q.host, sizeof q.host, "%s", host);
    q.want_node_rank = -1;
    q.nproc = 1;
    q.cfg.min_nodes = q.cfg.max_nodes = 1;
    assert_int_equal(rdzv_join_req_encode(b, &q), 0);
}

/* One named counter from STATS (a line "name value"). */
static inline long long stat_of(rdzv_client_t *c, const char *name) {
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

static inline void put_key_cmd(ddp_buf_t *b, uint8_t cmd, const char *key) {
    assert_int_equal(rdzv__put_u8(b, cmd), 0);
    assert_int_equal(rdzv__put_blob(b, key, strlen(key)), 0);
}

static inline void put_push(ddp_buf_t *b, const char *key, const char *val) {
    put_key_cmd(b, RDZV_CMD_QUEUE_PUSH, key);
    assert_int_equal(rdzv__put_blob(b, val, strlen(val)), 0);
}

/* Reads exactly n reply bytes from fd (SO_RCVTIMEO bounds it). */
static inline void raw_read(int fd, uint8_t *out, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, out + got, n - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

/* 1 when the server has sent nothing and not closed fd (no wait). */
static inline int raw_still_open(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

static inline void send_all(int fd, ddp_buf_t *b) {
    assert_int_equal(write(fd, b->data, b->len), (ssize_t)b->len);
    ddp_buf_reset(b);
}

/* Turns loop until fd has a byte to read or is closed (at most 5 s). */
static inline void loop_until_readable(uv_loop_t *loop, int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int i = 0; i < 5000; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (poll(&p, 1, 1) > 0)
            return;
    }
    fail_msg("no reply within 5 s");
}

#endif
