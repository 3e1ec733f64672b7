/* SPDX-License-Identifier: Apache-2.0
 * rdzv_async_client: the asynchronous store client's connection, from rdzv_aclient_connect to the
 * free after rdzv_aclient_close (rdzv_async_client.h; the states and timers are described in
 * rdzv_async_int.h). It resolves and connects with retries under one budget, runs the
 * VALIDATE/HMAC handshake through the request queue's own lists, reports the end of the connect
 * phase and the loss of an established connection, and releases the handles. Apart from the
 * queue (rdzv_async_queue.c) because a connection's life is a state machine of its own (states
 * in rdzv_async_int.h), while the queue only asks whether the connection is up; the queue reports
 * handshake replies and failures through the events installed here (rdzv_aconn_events_t), so
 * calls run one way, from this file to the queue. */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ddp_contract.h"
#include "ddp_net.h"
#include "rdzv_async_int.h"
#include "rdzv_auth_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"

#define DEFAULT_CONNECT_MS 30000
#define DEFAULT_IO_MS 60000
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000

static void connect_fail(rdzv_aclient_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void start_attempt(rdzv_aclient_t *c);
static void on_tcp_closed(uv_handle_t *h);
static void maybe_finish(rdzv_aclient_t *c);
static void on_conn_timer(uv_timer_t *t);

/* ---- handshake ---- */

static req_t *internal_req(int kind, const char *cmd) {
    req_t *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->kind = (uint8_t)kind;
        r->cmd = cmd;
        r->timeout_ms = -1;
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "(handshake)");
    }
    return r;
}

/* Sends an internal request whose frame is in r->frame, ahead of every queued request. */
static void send_internal(rdzv_aclient_t *c, req_t *r) {
    if (ddp_buf_append(&c->wq, r->frame.data, r->frame.len) < 0) {
        rdzv__aclient_req_free(r);
        connect_fail(c, -ENOMEM, "out of memory for the handshake");
        return;
    }
    ddp_buf_free(&r->frame);
    rdzv__aclient_list_push(&c->inflight, &c->inflight_tail, r);
    rdzv__aclient_flush(c);
    rdzv__aclient_io_update(c);
}

static void start_handshake(rdzv_aclient_t *c) {
    int with_token = c->token_len > 0;
    req_t *r = internal_req(with_token ? K_HELLO : K_HSPING, with_token ? "AUTH_HELLO" : "PING");
    if (r == NULL) {
        connect_fail(c, -ENOMEM, "out of memory for the handshake");
        return;
    }
    /* Without a token, like PyTorch's client: VALIDATE, then a PING proves the server accepted
     * us (reply_len checks the echo against r->nonce). */
    r->nonce = ++c->ping_seq;
    c->hs = (rdzv_handshake_t){
        .token = c->token, .token_len = c->token_len, .run_id = c->run_id, .ping_nonce = r->nonce};
    int rc = rdzv__handshake_hello_encode(&c->hs, &r->frame);
    if (rc < 0) {
        rdzv__aclient_req_free(r);
        connect_fail(c, rc,
                     rc == DDP_EAUTH    ? "libcrypto has no randomness"
                     : rc == DDP_EUSAGE ? "the run id is empty or too long"
                                        : "out of memory for the handshake");
        return;
    }
    send_internal(c, r);
}

/* The connection is ready: report it, then send what was queued meanwhile. */
static void handshake_done(rdzv_aclient_t *c) {
    timer_stop(&c->t_conn);
    c->state = S_READY;
    rdzv_aconnect_cb cb = c->conn_cb;
    c->conn_cb = NULL;
    if (cb != NULL)
        cb(c->conn_arg, 0, NULL);
    rdzv__aclient_pump(c);
}

/* rdzv_aconn_events_t.handshake_reply */
static void handshake_reply(rdzv_aclient_t *c, req_t *r, const uint8_t *buf, size_t n) {
    int kind = r->kind;
    rdzv__aclient_req_free(r);
    (void)n;
    if (kind == K_HSPING) {
        handshake_done(c); /* reply_len checked the echo */
        return;
    }
    if (kind == K_HELLO) {
        if (buf[0] == RDZV_AUTH_NOT_NEEDED) {
            connect_fail(c, DDP_EAUTH_PEER, RDZV_NO_AUTH_REFUSED);
            return;
        }
        if (buf[0] != RDZV_AUTH_CHALLENGE) {
            connect_fail(c, DDP_EPROTO, "unexpected AUTH_HELLO status %u", buf[0]);
            return;
        }
        req_t *p = internal_req(K_PROOF, "AUTH_PROOF");
        int rc = p ? rdzv__handshake_proof_encode(&c->hs, buf + 1, &p->frame) : -ENOMEM;
        if (rc < 0) {
            if (p != NULL)
                rdzv__aclient_req_free(p);
            connect_fail(c, rc,
                         rc == DDP_EAUTH ? "libcrypto failed to compute a MAC"
                                         : "out of memory for the handshake");
            return;
        }
        send_internal(c, p);
        return;
    }
    /* K_PROOF */
    if (buf[0] == RDZV_AUTH_REFUSED) {
        connect_fail(c, DDP_EAUTH, "the server refused the token");
        return;
    }
    if (buf[0] != RDZV_AUTH_OK) {
        connect_fail(c, DDP_EPROTO, "unexpected AUTH_PROOF status %u", buf[0]);
        return;
    }
    if (!rdzv__auth_equal(buf + 1, c->hs.smac)) {
        connect_fail(c, DDP_EAUTH_PEER, "the server could not prove it holds the token");
        return;
    }
    c->authed = 1;
    handshake_done(c);
}

/* ---- connection phase ---- */

/* Stops every timer and releases the socket (asynchronously); the client stays allocated. */
static void shutdown_io(rdzv_aclient_t *c) {
    timer_stop(&c->t_conn);
    timer_stop(&c->t_retry);
    timer_stop(&c->t_io);
    timer_stop(&c->t_wait);
    c->io_armed = 0;
    if (c->gai_pending) {
        /* When the lookup already runs, cancel fails and on_resolved comes later: fine. */
        int rc = uv_cancel((uv_req_t *)&c->gai);
        (void)rc;
    }
    if (c->tcp_live) {
        c->tcp_live = 0;
        uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
    }
}

static void connect_fail(rdzv_aclient_t *c, int code, const char *fmt, ...) {
    if (c->state == S_FAILED || c->state == S_CLOSING || c->state == S_READY)
        return;
    char reason[TEXT_LEN], line[TEXT_LEN + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    c->state = S_FAILED;
    shutdown_io(c);
    rdzv_aconnect_cb cb = c->conn_cb;
    c->conn_cb = NULL;
    rdzv__aclient_msgf(line, sizeof line, "%s: %s", c->peer, reason);
    if (cb != NULL)
        cb(c->conn_arg, code, line);
    char why[TEXT_LEN];
    rdzv__aclient_msgf(why, sizeof why, "not connected: %s", reason);
    rdzv__aclient_fail_all(c, DDP_ECLOSED, NULL, DDP_ECLOSED, why);
}

/* rdzv_aconn_events_t.lost */
static void lost(rdzv_aclient_t *c, int code, req_t *culprit, const char *reason) {
    if (c->state == S_HANDSHAKE) {
        req_t *h = c->inflight;
        int hk = h ? h->kind : -1;
        if (code == DDP_ECLOSED && hk == K_PROOF)
            connect_fail(c, DDP_EAUTH, "the server refused the token");
        else if (code == DDP_ECLOSED && hk == K_HSPING)
            connect_fail(c, DDP_EAUTH,
                         "server closed the connection at PING: it requires a token (%s) or is "
                         "at its connection limit",
                         DDP_ENV_TOKEN_NAMES);
        else
            connect_fail(c, code, "%s", reason);
        return;
    }
    if (c->state != S_READY)
        return;
    c->state = S_FAILED;
    shutdown_io(c);
    rdzv__aclient_fail_all(c, code, culprit, DDP_ECLOSED, reason);
    if (c->state == S_FAILED && c->lost_cb != NULL) {
        char line[TEXT_LEN + 8];
        rdzv__aclient_msgf(line, sizeof line, "%s: %s", c->peer, reason);
        c->lost_cb(c->lost_arg, code, line);
    }
}

static const rdzv_aconn_events_t conn_events = {.lost = lost, .handshake_reply = handshake_reply};

static int retryable(int uvcode) {
    return uvcode == UV_ECONNREFUSED || uvcode == UV_ETIMEDOUT || uvcode == UV_ENETUNREACH ||
           uvcode == UV_EHOSTUNREACH || uvcode == UV_EAGAIN || uvcode == UV_ECONNRESET ||
           uvcode == UV_EADDRNOTAVAIL;
}

static void on_retry(uv_timer_t *t) {
    start_attempt(t->data);
}

/* Waits (exponential backoff with jitter) before the next attempt; t_conn ends it all. */
static void schedule_retry(rdzv_aclient_t *c) {
    c->state = S_BACKOFF;
    uint64_t b = c->backoff_ms;
    uint64_t nap = b / 2 + (uint64_t)rand() % (b / 2 + 1);
    c->backoff_ms = b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2;
    if (uv_timer_start(&c->t_retry, on_retry, nap, 0) < 0)
        connect_fail(c, DDP_EPROTO, "unable to start the retry timer");
}

static void on_connected(uv_connect_t *req, int status);

/* A connect got no answer within its bound (ddp_net.h): abandon it (on_tcp_closed goes on with the
 * next address, or backs off) and allow the next one longer. */
static void on_attempt_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    if (c->state != S_CONNECTING || !c->tcp_live)
        return;
    c->last_err = UV_ETIMEDOUT;
    c->attempt_ms =
        c->attempt_ms * 2 > DDP_CONNECT_TRY_MAX_MS ? DDP_CONNECT_TRY_MAX_MS : c->attempt_ms * 2;
    c->tcp_live = 0;
    uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
}

/* Tries the next resolved address, or backs off when none is left. */
static void next_addr(rdzv_aclient_t *c) {
    while (c->addr_i < c->naddrs) {
        const struct sockaddr *sa = (const struct sockaddr *)&c->addrs[c->addr_i++];
        int rc = uv_tcp_init(c->loop, &c->tcp);
        if (rc < 0) {
            connect_fail(c, rc, "unable to create a socket: %s", uv_strerror(rc));
            return;
        }
        c->open_handles++;
        c->tcp_live = 1;
        c->tcp.data = c;
        c->state = S_CONNECTING;
        rc = uv_tcp_connect(&c->creq, &c->tcp, sa, on_connected);
        if (rc == 0) {
            if (uv_timer_start(&c->t_retry, on_attempt_timer, c->attempt_ms, 0) < 0)
                connect_fail(c, DDP_EPROTO, "unable to start the connect timer");
            return;
        }
        c->last_err = rc;
        c->tcp_live = 0;
        uv_close((uv_handle_t *)&c->tcp, on_tcp_closed); /* on_tcp_closed goes on */
        if (!retryable(rc))
            connect_fail(c, rc, "unable to connect: %s", uv_strerror(rc));
        return;
    }
    schedule_retry(c);
}

static void on_connected(uv_connect_t *req, int status) {
    rdzv_aclient_t *c = req->data;
    if (c->state != S_CONNECTING || !c->tcp_live)
        return; /* canceled: the budget ran out, the client is closing, or the try timed out */
    timer_stop(&c->t_retry);
    uv_os_fd_t fd;
    if (status == 0 && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ddp_tcp_is_self_connected(fd))
        status = UV_ECONNREFUSED; /* nothing listens yet (ddp_net.h): retried like a refusal */
    if (status < 0) {
        c->last_err = status;
        c->tcp_live = 0;
        uv_close((uv_handle_t *)&c->tcp, on_tcp_closed); /* then the next address */
        if (!retryable(status))
            connect_fail(c, status, "unable to connect: %s", uv_strerror(status));
        return;
    }
    /* t_conn bounds the whole handshake from now on when asked to (handshake_timeout_ms):
     * a server whose kernel accepts while the process does not answer (stopped, hung) holds
     * the connect that long, not io_timeout_ms a reply. */
    timer_stop(&c->t_conn);
    if (c->handshake_ms > 0 &&
        uv_timer_start(&c->t_conn, on_conn_timer, (uint64_t)c->handshake_ms, 0) < 0) {
        connect_fail(c, DDP_EPROTO, "unable to start the handshake timer");
        return;
    }
    c->state = S_HANDSHAKE;
    int rc = uv_tcp_nodelay(&c->tcp, 1);
    rc = rc ? rc : rdzv__aclient_read_start(c);
    if (rc < 0) {
        connect_fail(c, rc, "unable to read from the socket: %s", uv_strerror(rc));
        return;
    }
    start_handshake(c);
}

static void on_tcp_closed(uv_handle_t *h) {
    rdzv_aclient_t *c = h->data;
    c->open_handles--;
    if (c->state == S_CONNECTING)
        next_addr(c);
    else
        maybe_finish(c);
}

/* Keeps at most MAX_ADDRS stream addresses of res. */
static void take_addrs(rdzv_aclient_t *c, const struct addrinfo *res) {
    c->naddrs = c->addr_i = 0;
    for (const struct addrinfo *ai = res; ai != NULL && c->naddrs < MAX_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof c->addrs[0])
            continue;
        memcpy(&c->addrs[c->naddrs++], ai->ai_addr, ai->ai_addrlen);
    }
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
    rdzv_aclient_t *c = g->data;
    c->gai_pending = 0;
    if (c->state != S_RESOLVING) {
        uv_freeaddrinfo(res);
        maybe_finish(c);
        return;
    }
    if (status < 0) {
        c->last_err = status;
        c->gai_failed = 1;
        schedule_retry(c);
        return;
    }
    c->gai_failed = 0;
    take_addrs(c, res);
    uv_freeaddrinfo(res);
    next_addr(c);
}

/* One attempt: numeric addresses directly, names through the libuv thread pool. */
static void start_attempt(rdzv_aclient_t *c) {
    c->state = S_RESOLVING;
    c->tries++;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&c->addrs[0];
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&c->addrs[0];
    if (uv_ip4_addr(c->host, c->port, a4) == 0 || uv_ip6_addr(c->host, c->port, a6) == 0) {
        c->naddrs = 1;
        c->addr_i = 0;
        next_addr(c);
        return;
    }
    char ps[8];
    rdzv__aclient_msgf(ps, sizeof ps, "%u", c->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    c->gai.data = c;
    int rc = uv_getaddrinfo(c->loop, &c->gai, on_resolved, c->host, ps, &hints);
    if (rc < 0) {
        c->last_err = rc;
        c->gai_failed = 1;
        schedule_retry(c);
        return;
    }
    c->gai_pending = 1;
}

static void on_conn_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    if (c->state == S_HANDSHAKE)
        connect_fail(c, DDP_ETIMEOUT, "connected, but the handshake did not end within %d ms",
                     c->handshake_ms);
    else if (c->gai_failed)
        connect_fail(c, DDP_ETIMEOUT, "unable to resolve host after %d tries: %s", c->tries,
                     uv_strerror(c->last_err));
    else
        connect_fail(c, DDP_ETIMEOUT, "unable to connect after %d tries in %d ms: %s", c->tries,
                     c->connect_ms, c->last_err ? uv_strerror(c->last_err) : "no attempt ended");
}

/* ---- close ---- */

/* Frees the client once it is closing and libuv holds nothing of it any more. */
static void maybe_finish(rdzv_aclient_t *c) {
    if (c->state != S_CLOSING || c->open_handles > 0 || c->gai_pending || c->finished)
        return;
    c->finished = 1;
    rdzv_aconnect_cb cb = c->conn_cb;
    c->conn_cb = NULL;
    if (cb != NULL) {
        char line[TEXT_LEN + 8];
        rdzv__aclient_msgf(line, sizeof line, "%s: connect canceled: the client was closed",
                           c->peer);
        cb(c->conn_arg, DDP_ECANCELED, line);
    }
    rdzv__aclient_fail_all(c, DDP_ECANCELED, NULL, DDP_ECANCELED,
                           "canceled: the client was closed");
    if (c->close_cb != NULL)
        c->close_cb(c->close_arg);
    ddp_buf_free(&c->in);
    ddp_buf_free(&c->wq);
    ddp_buf_free(&c->wbuf);
    if (c->token != NULL) {
        memset(c->token, 0, c->token_len);
        free(c->token);
    }
    free(c->run_id);
    free(c->host);
    free(c);
}

static void on_timer_closed(uv_handle_t *h) {
    rdzv_aclient_t *c = h->data;
    c->open_handles--;
    maybe_finish(c);
}

/* ---- public API ---- */

/* Initialises c's four timers. On failure the ones already initialised are closed, c is freed
 * once they are (the connect callback is dropped, as documented) and the error is returned. */
static int timers_init(rdzv_aclient_t *c, uv_loop_t *loop, ddp_err_t *err) {
    uv_timer_t *timers[4] = {&c->t_conn, &c->t_retry, &c->t_io, &c->t_wait};
    for (int i = 0; i < 4; i++) {
        int rc = uv_timer_init(loop, timers[i]); /* cannot fail in libuv 1.x; checked anyway */
        if (rc < 0) {
            /* Handles already initialised must be closed before c is freed: do it the normal
             * way, through close (the connect callback is dropped, as documented). */
            ddp_err_set(err, rc, "%s: unable to create a timer: %s", c->peer, uv_strerror(rc));
            c->conn_cb = NULL;
            c->state = S_CLOSING;
            for (int j = 0; j < i; j++)
                uv_close((uv_handle_t *)timers[j], on_timer_closed);
            if (i == 0)
                maybe_finish(c); /* frees c */
            return rc;
        }
        timers[i]->data = c;
        c->open_handles++;
    }
    return 0;
}

int rdzv_aclient_connect(uv_loop_t *loop, const rdzv_client_opts_t *opts, rdzv_aconnect_cb cb,
                         void *arg, rdzv_aclient_t **out, ddp_err_t *err) {
    *out = NULL;
    if (loop == NULL || opts == NULL || opts->host == NULL || opts->port == 0 || cb == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "store client: loop, host, port and callback needed");
    if (opts->token != NULL && opts->token_len > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EUSAGE, "%s:%u: token longer than %zu bytes", opts->host,
                           opts->port, RDZV_TOKEN_MAX_LEN);
    rdzv_aclient_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->host = strdup(opts->host)) == NULL)
        goto nomem;
    if (opts->token != NULL && opts->token_len > 0) {
        if ((c->token = malloc(opts->token_len)) == NULL)
            goto nomem;
        memcpy(c->token, opts->token, opts->token_len);
        c->token_len = opts->token_len;
    }
    if (opts->run_id != NULL && (c->run_id = strdup(opts->run_id)) == NULL)
        goto nomem;
    c->loop = loop;
    c->events = &conn_events;
    c->port = opts->port;
    rdzv__aclient_msgf(c->peer, sizeof c->peer, strchr(opts->host, ':') ? "[%s]:%u" : "%s:%u",
                       opts->host, opts->port);
    c->connect_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DEFAULT_CONNECT_MS;
    c->io_ms = opts->io_timeout_ms > 0 ? opts->io_timeout_ms : DEFAULT_IO_MS;
    c->handshake_ms = opts->handshake_timeout_ms > 0 ? opts->handshake_timeout_ms : 0;
    c->backoff_ms = BACKOFF_FIRST_MS;
    c->attempt_ms = DDP_CONNECT_TRY_FIRST_MS;
    c->out_limit = RDZV_ACLIENT_OUT_LIMIT;
    c->conn_cb = cb;
    c->conn_arg = arg;
    c->creq.data = c->wreq.data = c->gai.data = c;
    int rc = timers_init(c, loop, err);
    if (rc < 0)
        return rc;
    rc = uv_timer_start(&c->t_conn, on_conn_timer, (uint64_t)c->connect_ms, 0);
    if (rc < 0) {
        rdzv_aclient_close(c, NULL, NULL);
        return ddp_err_set(err, rc, "%s: unable to start a timer", c->peer);
    }
    start_attempt(c);
    *out = c;
    return 0;
nomem:
    if (c != NULL) {
        free(c->host);
        free(c);
    }
    return ddp_err_set(err, -ENOMEM, "%s:%u: out of memory for a store client", opts->host,
                       opts->port);
}

void rdzv_aclient_close(rdzv_aclient_t *c, void (*close_cb)(void *arg), void *arg) {
    if (c == NULL || c->state == S_CLOSING)
        return;
    c->state = S_CLOSING;
    c->close_cb = close_cb;
    c->close_arg = arg;
    shutdown_io(c);
    uv_close((uv_handle_t *)&c->t_conn, on_timer_closed);
    uv_close((uv_handle_t *)&c->t_retry, on_timer_closed);
    uv_close((uv_handle_t *)&c->t_io, on_timer_closed);
    uv_close((uv_handle_t *)&c->t_wait, on_timer_closed);
}

void rdzv_aclient_on_close(rdzv_aclient_t *c, rdzv_aclose_notify_cb cb, void *arg) {
    c->lost_cb = cb;
    c->lost_arg = arg;
}

const char *rdzv_aclient_peer(const rdzv_aclient_t *c) {
    return c->peer;
}

int rdzv_aclient_authenticated(const rdzv_aclient_t *c) {
    return c->authed;
}
