/* SPDX-License-Identifier: Apache-2.0
 * rdzv_aclient: the asynchronous store client on a libuv loop (rdzv_aclient.h). It owns one
 * uv_tcp_t and four timers embedded in it (STYLE 17); requests sit in two FIFO lists: queued
 * (not sent yet) and inflight (sent, reply awaited, matched in order).
 *
 * Connection states:
 *   RESOLVING -> CONNECTING -> HANDSHAKE -> READY        (success)
 *   RESOLVING/CONNECTING -> BACKOFF -> RESOLVING ...     (refused, unreachable: retry)
 *   any -> FAILED  (connect budget spent, handshake failed, connection lost)
 *   any -> CLOSING (rdzv_aclient_close; the client is freed once every handle is released)
 * Timers: t_conn bounds the whole connect phase, t_retry is the backoff (and, while CONNECTING,
 * the bound on one unanswered connect), t_io fires when a reply or a write makes no progress for
 * io_timeout_ms, t_wait ends the one parked request's wait. */
#include "rdzv_aclient.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ddp_contract.h"
#include "ddp_net.h"
#include "rdzv_auth_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"

#define DEFAULT_CONNECT_MS 30000
#define DEFAULT_IO_MS 60000
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000
#define READ_CHUNK ((size_t)64 * 1024)
#define MAX_ADDRS 8
#define TEXT_LEN 256
/* A reply is at most one maximal blob plus a few status bytes; a larger need is hostile. */
#define MAX_REPLY_LEN (RDZV_MAX_FRAME_LEN + 64)
/* A read or write buffer bigger than this is freed once drained rather than kept for reuse. */
#define KEEP_WBUF ((size_t)1024 * 1024)

enum state { S_RESOLVING, S_CONNECTING, S_BACKOFF, S_HANDSHAKE, S_READY, S_FAILED, S_CLOSING };

/* Request kinds; HELLO, PROOF and HSPING are the handshake's own (no user callback). */
enum kind {
    K_SET,
    K_GET,
    K_GETNOW,
    K_ADD,
    K_WAIT,
    K_CAS,
    K_DELETE,
    K_PING,
    K_RAW,
    K_HELLO,
    K_PROOF,
    K_HSPING
};

typedef struct req req_t;
struct req {
    req_t *next;
    uint8_t kind;
    uint8_t parks;     /* the server may answer later requests first */
    uint8_t canceling; /* CANCEL_WAIT sent after the wait ran out */
    int timeout_ms;    /* parked requests: < 0 none */
    uint64_t deadline; /* uv_now() ms at which a parked request's wait ends */
    uint32_t nonce;    /* PING echo expected (SET carries a PING too) */
    rdzv_reply_parser_fn parse;
    rdzv_acb_t cb;
    void *arg;
    ddp_buf_t frame;   /* the encoded request until it is moved to the write queue */
    const char *cmd;   /* "GET", "ADD", ... for messages */
    char subject[120]; /* "key 'x'", "3 keys (first 'x')" or the raw request's name */
};

struct rdzv_aclient {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_timer_t t_conn, t_retry, t_io, t_wait;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_getaddrinfo_t gai;
    enum state state;
    int open_handles; /* initialised and not yet closed; the client is freed at 0 */
    int tcp_live;     /* tcp initialised and uv_close not yet called */
    int gai_pending, writing, io_armed, finished, authed;
    int connect_ms, io_ms, tries, last_err, gai_failed, deferred_code;
    uint64_t backoff_ms, attempt_ms;
    uint16_t port;
    char *host;
    uint8_t *token;
    size_t token_len;
    rdzv_handshake_t hs; /* the handshake in progress (nonces, the server's expected MAC) */
    uint32_t ping_seq;
    struct sockaddr_storage addrs[MAX_ADDRS];
    int naddrs, addr_i;
    req_t *queued, *queued_tail, *inflight, *inflight_tail, *parked;
    size_t held_bytes, out_limit, npending;
    ddp_buf_t in, wq, wbuf;
    rdzv_aconnect_cb conn_cb;
    void *conn_arg;
    rdzv_aclose_notify_cb lost_cb;
    void *lost_arg;
    void (*close_cb)(void *arg);
    void *close_arg;
    char deferred_text[TEXT_LEN];
    char peer[300];
};

static void conn_lost(rdzv_aclient_t *c, int code, req_t *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void connect_fail(rdzv_aclient_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void start_attempt(rdzv_aclient_t *c);
static void pump(rdzv_aclient_t *c);

/* ---- small helpers ---- */

/* snprintf for messages: a long host name or key may cut the text, which is fine. */
static void msgf(char *dst, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void msgf(char *dst, size_t cap, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(dst, cap, f, ap);
    va_end(ap);
}

/* uv_timer_stop cannot fail in libuv 1.x (it always returns 0); this keeps that in one place. */
static void timer_stop(uv_timer_t *t) {
    int rc = uv_timer_stop(t);
    (void)rc;
}

/* Maps a libuv/errno code seen on the socket to what callers are told. */
static int io_code(int uvcode) {
    if (uvcode == UV_EOF || uvcode == UV_ECONNRESET || uvcode == UV_EPIPE)
        return DDP_ECLOSED;
    return uvcode;
}

static const char *code_text(int code) {
    if (code == DDP_ECLOSED)
        return "connection closed by the server";
    return ddp_strerror(code);
}

static void list_push(req_t **head, req_t **tail, req_t *r) {
    r->next = NULL;
    if (*tail != NULL)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static req_t *list_pop(req_t **head, req_t **tail) {
    req_t *r = *head;
    if (r != NULL) {
        *head = r->next;
        if (*head == NULL)
            *tail = NULL;
        r->next = NULL;
    }
    return r;
}

static void req_free(req_t *r) {
    ddp_buf_free(&r->frame);
    free(r);
}

/* Runs r's callback (user requests only) and frees r. text is the reason without the peer. */
static void complete(rdzv_aclient_t *c, req_t *r, int status, const uint8_t *reply, size_t len,
                     const char *text) {
    if (r->cb != NULL) {
        char line[2 * TEXT_LEN];
        if (status < 0)
            msgf(line, sizeof line, "%s: %s", c->peer, text ? text : ddp_strerror(status));
        c->npending--;
        r->cb(r->arg, status, status < 0 ? NULL : reply, status < 0 ? 0 : len,
              status < 0 ? line : NULL);
    }
    req_free(r);
}

/* Completes every queued and in-flight request: culprit with code and reason, the others with
 * other_code ("CMD subject failed: reason"). The lists are detached first, so callbacks that
 * submit or close see an empty client. */
static void fail_all(rdzv_aclient_t *c, int code, req_t *culprit, int other_code,
                     const char *reason) {
    req_t *lists[2] = {c->inflight, c->queued};
    c->inflight = c->inflight_tail = c->queued = c->queued_tail = c->parked = NULL;
    c->held_bytes = 0;
    for (int i = 0; i < 2; i++) {
        for (req_t *r = lists[i], *next; r != NULL; r = next) {
            next = r->next;
            if (r == culprit) {
                complete(c, r, code, NULL, 0, reason);
                continue;
            }
            char text[TEXT_LEN];
            msgf(text, sizeof text, "%s %s failed: %s", r->cmd, r->subject, reason);
            complete(c, r, other_code, NULL, 0, text);
        }
    }
}

/* ---- timers and output ---- */

static void on_io_timer(uv_timer_t *t);
static void on_wait_timer(uv_timer_t *t);

/* (Re)starts t_io for io_ms (also on progress: a read or a finished write). uv_timer_start
 * fails only for a closing handle, which is never armed; the check keeps STYLE 17's rule. A
 * deferred failure keeps its zero delay. */
static void io_start(rdzv_aclient_t *c) {
    if (c->deferred_code != 0)
        return;
    if (uv_timer_start(&c->t_io, on_io_timer, (uint64_t)c->io_ms, 0) == 0)
        c->io_armed = 1;
}

/* Arms t_io while a reply or a write is due, stops it otherwise. A parked request waiting
 * (not canceling) is not due: its own t_wait bounds it. */
static void io_update(rdzv_aclient_t *c) {
    if ((c->state != S_HANDSHAKE && c->state != S_READY) || c->deferred_code != 0)
        return;
    req_t *h = c->inflight;
    int due = c->writing || (h != NULL && (!h->parks || h->canceling));
    if (due && !c->io_armed) {
        io_start(c);
    } else if (!due && c->io_armed) {
        timer_stop(&c->t_io);
        c->io_armed = 0;
    }
}

/* Fails the connection from the loop rather than inside an API call, so that no callback ever
 * runs synchronously from rdzv_aclient_*: t_io fires at once and reports code. */
static void defer_failure(rdzv_aclient_t *c, int code, const char *text) {
    if (c->deferred_code == 0) {
        c->deferred_code = code;
        msgf(c->deferred_text, sizeof c->deferred_text, "%s", text);
    }
    if (uv_timer_start(&c->t_io, on_io_timer, 0, 0) == 0)
        c->io_armed = 1;
}

static void on_written(uv_write_t *w, int status);

/* Hands the write queue to libuv when no write is in progress. */
static void flush(rdzv_aclient_t *c) {
    if (c->writing || c->wq.len == 0 || !c->tcp_live)
        return;
    ddp_buf_t t = c->wbuf;
    c->wbuf = c->wq;
    c->wq = t;
    ddp_buf_reset(&c->wq);
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc < 0) {
        defer_failure(c, io_code(rc), "unable to write to the server");
        return;
    }
    c->writing = 1;
}

static void on_written(uv_write_t *w, int status) {
    rdzv_aclient_t *c = w->data;
    c->writing = 0;
    ddp_buf_reset(&c->wbuf);
    if (c->wbuf.cap > KEEP_WBUF)
        ddp_buf_free(&c->wbuf);
    if (status == UV_ECANCELED || (c->state != S_HANDSHAKE && c->state != S_READY))
        return;
    if (status < 0) {
        conn_lost(c, io_code(status), NULL, "unable to write to the server: %s",
                  code_text(io_code(status)));
        return;
    }
    flush(c);
    if (c->io_armed)
        io_start(c); /* progress: the io bound starts again */
    io_update(c);
}

/* ---- replies ---- */

/* Length of a u64-prefixed blob at buf[off..len): > 0 total length from 0, 0 with *need, or
 * DDP_EPROTO. */
static long blob_end(const uint8_t *buf, size_t len, size_t off, size_t *need) {
    if (len < off + 8) {
        *need = off + 8;
        return 0;
    }
    uint64_t n = rdzv__get_u64(buf + off);
    if (n > RDZV_MAX_FRAME_LEN)
        return DDP_EPROTO;
    if (len < off + 8 + n) {
        *need = off + 8 + (size_t)n;
        return 0;
    }
    return (long)(off + 8 + n);
}

static long fixed(size_t n, size_t len, size_t *need) {
    if (len >= n)
        return (long)n;
    *need = n;
    return 0;
}

/* How long r's reply at buf is (see rdzv_reply_parser_fn). */
static long reply_len(req_t *r, const uint8_t *buf, size_t len, size_t *need) {
    switch (r->kind) {
    case K_SET:
    case K_PING:
    case K_HSPING:
        if (len < 4) {
            *need = 4;
            return 0;
        }
        return rdzv__get_u32(buf) == r->nonce ? 4 : DDP_EPROTO; /* PING echoes its nonce */
    case K_ADD:
    case K_DELETE: return fixed(8, len, need);
    case K_CAS: return blob_end(buf, len, 0, need);
    case K_RAW: return r->parse(r->arg, buf, len, need);
    default: break;
    }
    if (len < 1) {
        *need = 1;
        return 0;
    }
    uint8_t st = buf[0];
    switch (r->kind) {
    case K_GETNOW:
        if (st == RDZV_GETW_ABSENT)
            return 1;
        return st == RDZV_GETW_FOUND ? blob_end(buf, len, 1, need) : DDP_EPROTO;
    case K_GET:
        if (r->canceling && st == RDZV_WAIT_CANCELED)
            return 1;
        if (st != RDZV_GETW_FOUND)
            return DDP_EPROTO;
        if (!r->canceling)
            return blob_end(buf, len, 1, need);
        /* Released just before CANCEL_WAIT arrived: the value, then the cancel's own reply. */
        long n = blob_end(buf, len, 1, need);
        return n <= 0 ? n : fixed((size_t)n + 1, len, need);
    case K_WAIT:
        if (r->canceling && st == RDZV_WAIT_CANCELED)
            return 1;
        if (st != RDZV_WAIT_STOP_WAITING)
            return DDP_EPROTO;
        return r->canceling ? fixed(2, len, need) : 1;
    case K_HELLO: return st == RDZV_AUTH_CHALLENGE ? fixed(RDZV_HELLO_REPLY_LEN, len, need) : 1;
    case K_PROOF: return st == RDZV_AUTH_OK ? fixed(RDZV_PROOF_REPLY_LEN, len, need) : 1;
    default: return DDP_EPROTO;
    }
}

static void handshake_reply(rdzv_aclient_t *c, req_t *r, const uint8_t *buf, size_t n);

/* Delivers r's complete reply buf[0..n) (r already left the in-flight list). */
static void deliver(rdzv_aclient_t *c, req_t *r, const uint8_t *buf, size_t n) {
    switch (r->kind) {
    case K_SET:
    case K_PING: complete(c, r, 0, NULL, 0, NULL); return;
    case K_ADD:
    case K_DELETE:
    case K_RAW: complete(c, r, 0, buf, n, NULL); return;
    case K_CAS: complete(c, r, 0, buf + 8, n - 8, NULL); return;
    case K_GETNOW:
    case K_GET:
        if (buf[0] == RDZV_GETW_FOUND) {
            complete(c, r, 0, buf + 9, (size_t)rdzv__get_u64(buf + 1), NULL);
            return;
        }
        break;
    case K_WAIT:
        if (buf[0] == RDZV_WAIT_STOP_WAITING) {
            complete(c, r, 0, NULL, 0, NULL);
            return;
        }
        break;
    default: handshake_reply(c, r, buf, n); return;
    }
    char text[TEXT_LEN];
    if (r->kind == K_GETNOW)
        msgf(text, sizeof text, "no %s", r->subject);
    else
        msgf(text, sizeof text, "timed out after %d ms waiting for %s", r->timeout_ms, r->subject);
    complete(c, r, r->kind == K_GETNOW ? DDP_ENOKEY : DDP_ETIMEOUT, NULL, 0, text);
}

/* Matches the bytes read so far to the in-flight requests, in order. */
static void process_input(rdzv_aclient_t *c) {
    size_t off = 0;
    while ((c->state == S_HANDSHAKE || c->state == S_READY) && off < c->in.len) {
        req_t *r = c->inflight;
        if (r == NULL) {
            conn_lost(c, DDP_EPROTO, NULL, "%zu unexpected bytes from the server", c->in.len - off);
            break;
        }
        size_t need = 0;
        long n = reply_len(r, c->in.data + off, c->in.len - off, &need);
        if (n == 0 && need > MAX_REPLY_LEN)
            n = DDP_ETOOBIG;
        if (n == 0)
            break;
        if (n < 0 || (size_t)n > c->in.len - off) {
            conn_lost(c, n < 0 ? (int)n : DDP_EPROTO, r, "malformed reply to %s %s: %s", r->cmd,
                      r->subject, ddp_strerror(n < 0 ? (int)n : DDP_EPROTO));
            break;
        }
        list_pop(&c->inflight, &c->inflight_tail);
        const uint8_t *rep = c->in.data + off;
        off += (size_t)n;
        int was_parked = r == c->parked;
        if (was_parked) {
            c->parked = NULL;
            timer_stop(&c->t_wait);
        }
        deliver(c, r, rep, (size_t)n);
        if (was_parked)
            pump(c);
        if (c->state == S_READY || c->state == S_HANDSHAKE) {
            if (c->io_armed)
                io_start(c);
            io_update(c);
        }
    }
    if (c->state == S_HANDSHAKE || c->state == S_READY)
        ddp_buf_consume(&c->in, off);
    else
        ddp_buf_reset(&c->in);
    if (c->in.len == 0 && c->in.cap > KEEP_WBUF)
        ddp_buf_free(&c->in); /* after a large value: do not keep megabytes per idle client */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    rdzv_aclient_t *c = h->data;
    (void)suggested;
    if (ddp_buf_reserve(&c->in, READ_CHUNK) < 0) {
        *b = uv_buf_init(NULL, 0); /* libuv then reports UV_ENOBUFS to on_read */
        return;
    }
    *b = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    rdzv_aclient_t *c = s->data;
    (void)b;
    if (nread == 0)
        return;
    if (nread < 0) {
        int code = nread == UV_ENOBUFS ? -ENOMEM : io_code((int)nread);
        conn_lost(c, code, NULL, "%s",
                  code == DDP_ECLOSED ? "connection closed by the server" : code_text(code));
        return;
    }
    c->in.len += (size_t)nread;
    if (c->io_armed)
        io_start(c); /* progress */
    process_input(c);
}

/* ---- sending ---- */

/* Moves queued requests to the write queue in order, stopping after a parked one. */
static void pump(rdzv_aclient_t *c) {
    if (c->state != S_READY)
        return;
    while (c->queued != NULL && c->parked == NULL) {
        req_t *r = c->queued;
        if (ddp_buf_append(&c->wq, r->frame.data, r->frame.len) < 0) {
            defer_failure(c, -ENOMEM, "out of memory for the write queue");
            break;
        }
        list_pop(&c->queued, &c->queued_tail);
        c->held_bytes -= r->frame.len;
        ddp_buf_free(&r->frame);
        list_push(&c->inflight, &c->inflight_tail, r);
        if (r->parks) {
            c->parked = r;
            if (r->timeout_ms >= 0) {
                uint64_t now = uv_now(c->loop);
                uint64_t left = r->deadline > now ? r->deadline - now : 0;
                if (uv_timer_start(&c->t_wait, on_wait_timer, left, 0) < 0)
                    defer_failure(c, DDP_EPROTO, "unable to start a wait timer");
            }
        }
    }
    flush(c);
    io_update(c);
}

static int refuse(rdzv_aclient_t *c, req_t *r, int code, ddp_err_t *err, const char *why) {
    ddp_err_set(err, code, "%s: %s %s refused: %s", c ? c->peer : "store", r ? r->cmd : "request",
                r ? r->subject : "", why);
    if (r != NULL)
        req_free(r);
    return code;
}

/* Accepts r (frame encoded) or frees it and returns the reason. */
static int submit(rdzv_aclient_t *c, req_t *r, int rc, ddp_err_t *err) {
    if (rc < 0)
        return refuse(c, r, rc, err, "out of memory");
    if (c->state == S_CLOSING)
        return refuse(c, r, DDP_ECANCELED, err, "the client is closing");
    if (c->state == S_FAILED)
        return refuse(c, r, DDP_ECLOSED, err, "the connection is lost");
    if (r->frame.len > RDZV_MAX_FRAME_LEN)
        return refuse(c, r, DDP_ETOOBIG, err, "frame over the 32 MiB limit");
    size_t out = c->held_bytes + c->wq.len + (c->writing ? c->wbuf.len : 0);
    if (out + r->frame.len > c->out_limit) {
        char why[96];
        msgf(why, sizeof why, "%zu bytes already queued (limit %zu)", out, c->out_limit);
        return refuse(c, r, -ENOBUFS, err, why);
    }
    if (r->parks && r->timeout_ms >= 0)
        r->deadline = uv_now(c->loop) + (uint64_t)r->timeout_ms;
    list_push(&c->queued, &c->queued_tail, r);
    c->held_bytes += r->frame.len;
    c->npending++;
    pump(c);
    return 0;
}

/* Makes a request of kind for key (NULL: none) in *out. Returns 0, or -EINVAL, -ENOMEM,
 * DDP_ETOOBIG (key too long) described in err. */
static int req_new(rdzv_aclient_t *c, int kind, const char *cmd, const char *key, rdzv_acb_t cb,
                   void *arg, req_t **out, ddp_err_t *err) {
    *out = NULL;
    if (c == NULL || cb == NULL) {
        ddp_err_set(err, -EINVAL, "store client: NULL client or callback");
        return -EINVAL;
    }
    if (key == NULL && kind != K_WAIT && kind != K_PING && kind != K_RAW) {
        ddp_err_set(err, -EINVAL, "%s: %s with a NULL key", c->peer, cmd);
        return -EINVAL;
    }
    req_t *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ddp_err_set(err, -ENOMEM, "%s: out of memory for %s", c->peer, cmd);
        return -ENOMEM;
    }
    r->kind = (uint8_t)kind;
    r->cmd = cmd;
    r->cb = cb;
    r->arg = arg;
    r->timeout_ms = -1;
    if (key != NULL) {
        char kr[100];
        size_t n = strlen(key);
        msgf(r->subject, sizeof r->subject, "key '%s'", rdzv__key_repr(key, n, kr, sizeof kr));
        if (n > RDZV_MAX_KEY_LEN) {
            char why[64];
            msgf(why, sizeof why, "key of %zu bytes (limit %zu)", n, RDZV_MAX_KEY_LEN);
            refuse(c, r, DDP_ETOOBIG, err, why);
            return DDP_ETOOBIG;
        }
    }
    *out = r;
    return 0;
}

/* ---- handshake ---- */

static req_t *internal_req(int kind, const char *cmd) {
    req_t *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->kind = (uint8_t)kind;
        r->cmd = cmd;
        r->timeout_ms = -1;
        msgf(r->subject, sizeof r->subject, "(handshake)");
    }
    return r;
}

/* Sends an internal request whose frame is in r->frame, ahead of every queued request. */
static void send_internal(rdzv_aclient_t *c, req_t *r) {
    if (ddp_buf_append(&c->wq, r->frame.data, r->frame.len) < 0) {
        req_free(r);
        connect_fail(c, -ENOMEM, "out of memory for the handshake");
        return;
    }
    ddp_buf_free(&r->frame);
    list_push(&c->inflight, &c->inflight_tail, r);
    flush(c);
    io_update(c);
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
    c->hs =
        (rdzv_handshake_t){.token = c->token, .token_len = c->token_len, .ping_nonce = r->nonce};
    int rc = rdzv__handshake_hello_encode(&c->hs, &r->frame);
    if (rc < 0) {
        req_free(r);
        connect_fail(c, rc,
                     rc == DDP_EAUTH ? "libcrypto has no randomness"
                                     : "out of memory for the handshake");
        return;
    }
    send_internal(c, r);
}

/* The connection is ready: report it, then send what was queued meanwhile. */
static void handshake_done(rdzv_aclient_t *c) {
    c->state = S_READY;
    rdzv_aconnect_cb cb = c->conn_cb;
    c->conn_cb = NULL;
    if (cb != NULL)
        cb(c->conn_arg, 0, NULL);
    pump(c);
}

static void handshake_reply(rdzv_aclient_t *c, req_t *r, const uint8_t *buf, size_t n) {
    int kind = r->kind;
    req_free(r);
    (void)n;
    if (kind == K_HSPING) {
        handshake_done(c); /* reply_len checked the echo */
        return;
    }
    if (kind == K_HELLO) {
        if (buf[0] == RDZV_AUTH_NOT_NEEDED) {
            handshake_done(c); /* the server runs without authentication */
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
                req_free(p);
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
        connect_fail(c, DDP_EAUTH, "the server could not prove it holds the token");
        return;
    }
    c->authed = 1;
    handshake_done(c);
}

/* ---- connection phase ---- */

static void on_tcp_closed(uv_handle_t *h);
static void maybe_finish(rdzv_aclient_t *c);

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
    msgf(line, sizeof line, "%s: %s", c->peer, reason);
    if (cb != NULL)
        cb(c->conn_arg, code, line);
    char why[TEXT_LEN];
    msgf(why, sizeof why, "not connected: %s", reason);
    fail_all(c, DDP_ECLOSED, NULL, DDP_ECLOSED, why);
}

/* An established (or handshaking) connection broke. culprit, when set, is the request whose
 * reply caused it and gets code; every other pending request gets DDP_ECLOSED. */
static void conn_lost(rdzv_aclient_t *c, int code, req_t *culprit, const char *fmt, ...) {
    char reason[TEXT_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
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
    fail_all(c, code, culprit, DDP_ECLOSED, reason);
    if (c->state == S_FAILED && c->lost_cb != NULL) {
        char line[TEXT_LEN + 8];
        msgf(line, sizeof line, "%s: %s", c->peer, reason);
        c->lost_cb(c->lost_arg, code, line);
    }
}

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
    timer_stop(&c->t_conn);
    c->state = S_HANDSHAKE;
    int rc = uv_tcp_nodelay(&c->tcp, 1);
    rc = rc ? rc : uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
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
    msgf(ps, sizeof ps, "%u", c->port);
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
    if (c->gai_failed)
        connect_fail(c, DDP_ETIMEOUT, "unable to resolve host after %d tries: %s", c->tries,
                     uv_strerror(c->last_err));
    else
        connect_fail(c, DDP_ETIMEOUT, "unable to connect after %d tries in %d ms: %s", c->tries,
                     c->connect_ms, c->last_err ? uv_strerror(c->last_err) : "no attempt ended");
}

static void on_io_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    c->io_armed = 0;
    if (c->deferred_code != 0) {
        int code = c->deferred_code;
        c->deferred_code = 0;
        conn_lost(c, code, NULL, "%s", c->deferred_text);
        return;
    }
    req_t *h = c->inflight;
    if (h == NULL)
        conn_lost(c, DDP_ETIMEOUT, NULL, "unable to send within %d ms", c->io_ms);
    else
        conn_lost(c, DDP_ETIMEOUT, h, "no reply within %d ms to %s %s", c->io_ms, h->cmd,
                  h->subject);
}

/* The parked request's wait ran out: WAIT and GET send CANCEL_WAIT and complete when its reply
 * comes; a raw parked request cannot be resynced, so the connection is dropped. */
static void on_wait_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    req_t *r = c->parked;
    if (r == NULL || r->canceling || c->state != S_READY)
        return;
    if (r->kind == K_RAW) {
        conn_lost(c, DDP_ETIMEOUT, r, "timed out after %d ms waiting for the reply to %s",
                  r->timeout_ms, r->subject);
        return;
    }
    r->canceling = 1;
    if (rdzv__put_u8(&c->wq, RDZV_CMD_CANCEL_WAIT) < 0) {
        conn_lost(c, -ENOMEM, NULL, "out of memory for CANCEL_WAIT");
        return;
    }
    flush(c);
    io_update(c);
}

/* Frees the client once it is closing and libuv holds nothing of it any more. */
static void maybe_finish(rdzv_aclient_t *c) {
    if (c->state != S_CLOSING || c->open_handles > 0 || c->gai_pending || c->finished)
        return;
    c->finished = 1;
    rdzv_aconnect_cb cb = c->conn_cb;
    c->conn_cb = NULL;
    if (cb != NULL) {
        char line[TEXT_LEN + 8];
        msgf(line, sizeof line, "%s: connect canceled: the client was closed", c->peer);
        cb(c->conn_arg, DDP_ECANCELED, line);
    }
    fail_all(c, DDP_ECANCELED, NULL, DDP_ECANCELED, "canceled: the client was closed");
    if (c->close_cb != NULL)
        c->close_cb(c->close_arg);
    ddp_buf_free(&c->in);
    ddp_buf_free(&c->wq);
    ddp_buf_free(&c->wbuf);
    if (c->token != NULL) {
        memset(c->token, 0, c->token_len);
        free(c->token);
    }
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
    c->loop = loop;
    c->port = opts->port;
    msgf(c->peer, sizeof c->peer, strchr(opts->host, ':') ? "[%s]:%u" : "%s:%u", opts->host,
         opts->port);
    c->connect_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DEFAULT_CONNECT_MS;
    c->io_ms = opts->io_timeout_ms > 0 ? opts->io_timeout_ms : DEFAULT_IO_MS;
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

void rdzv_aclient_set_out_limit(rdzv_aclient_t *c, size_t bytes) {
    c->out_limit = bytes > 0 ? bytes : RDZV_ACLIENT_OUT_LIMIT;
}

const char *rdzv_aclient_peer(const rdzv_aclient_t *c) {
    return c->peer;
}

int rdzv_aclient_authenticated(const rdzv_aclient_t *c) {
    return c->authed;
}

size_t rdzv_aclient_pending(const rdzv_aclient_t *c) {
    return c->npending;
}

/* Starts r's frame: the command byte, then the key blob. */
static int put_cmd_key(req_t *r, uint8_t cmd, const char *key) {
    int rc = rdzv__put_u8(&r->frame, cmd);
    return rc ? rc : rdzv__put_blob(&r->frame, key, strlen(key));
}

static int value_ok(rdzv_aclient_t *c, req_t *r, size_t len, ddp_err_t *err) {
    if (len <= RDZV_MAX_VALUE_LEN)
        return 0;
    char why[80];
    msgf(why, sizeof why, "value of %zu bytes (limit %zu)", len, RDZV_MAX_VALUE_LEN);
    return refuse(c, r, DDP_ETOOBIG, err, why);
}

int rdzv_aclient_set(rdzv_aclient_t *c, const char *key, const void *val, size_t len, rdzv_acb_t cb,
                     void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_SET, "SET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = value_ok(c, r, len, err);
    if (rc < 0)
        return rc;
    r->nonce = ++c->ping_seq;
    rc = put_cmd_key(r, RDZV_CMD_SET, key);
    rc = rc ? rc : rdzv__put_blob(&r->frame, val, len);
    /* SET has no reply; the PING behind it is answered only after the SET was applied. */
    rc = rc ? rc : rdzv__put_u8(&r->frame, RDZV_CMD_PING);
    rc = rc ? rc : rdzv__put_u32(&r->frame, r->nonce);
    return submit(c, r, rc, err);
}

int rdzv_aclient_get(rdzv_aclient_t *c, const char *key, int timeout_ms, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, timeout_ms == 0 ? K_GETNOW : K_GET, "GET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    r->parks = timeout_ms != 0;
    r->timeout_ms = timeout_ms;
    rc = put_cmd_key(r, RDZV_CMD_GET_WAIT, key);
    rc = rc ? rc : rdzv__put_u8(&r->frame, timeout_ms == 0 ? RDZV_GETW_NOWAIT : RDZV_GETW_BLOCK);
    return submit(c, r, rc, err);
}

int rdzv_aclient_add(rdzv_aclient_t *c, const char *key, int64_t delta, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_ADD, "ADD", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_ADD, key);
    rc = rc ? rc : rdzv__put_i64(&r->frame, delta);
    return submit(c, r, rc, err);
}

int rdzv_aclient_wait(rdzv_aclient_t *c, const char *const *keys, size_t n, int timeout_ms,
                      rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_WAIT, "WAIT", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    if (n > 0 && keys == NULL)
        return refuse(c, r, -EINVAL, err, "NULL key list");
    char kr[100];
    if (n > 0 && keys[0] == NULL) /* named in messages below; the rest are checked later */
        return refuse(c, r, -EINVAL, err, "NULL key in the list");
    if (n == 1)
        msgf(r->subject, sizeof r->subject, "key '%s'",
             rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr));
    else
        msgf(r->subject, sizeof r->subject, "%zu keys (first '%s')", n,
             n ? rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr) : "");
    if (n > RDZV_MAX_KEYS_PER_REQ)
        return refuse(c, r, DDP_ETOOBIG, err, "too many keys in one request");
    r->parks = 1;
    r->timeout_ms = timeout_ms;
    rc = rdzv__put_u8(&r->frame, RDZV_CMD_WAIT);
    rc = rc ? rc : rdzv__put_u64(&r->frame, n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (keys[i] == NULL)
            return refuse(c, r, -EINVAL, err, "NULL key in the list");
        size_t kl = strlen(keys[i]);
        if (kl > RDZV_MAX_KEY_LEN)
            return refuse(c, r, DDP_ETOOBIG, err, "a key over the 8 KiB limit");
        rc = rdzv__put_blob(&r->frame, keys[i], kl);
    }
    return submit(c, r, rc, err);
}

int rdzv_aclient_compare_set(rdzv_aclient_t *c, const char *key, const void *expected,
                             size_t expected_len, const void *desired, size_t desired_len,
                             rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_CAS, "COMPARE_SET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = value_ok(c, r, expected_len > desired_len ? expected_len : desired_len, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_COMPARE_SET, key);
    rc = rc ? rc : rdzv__put_blob(&r->frame, expected, expected_len);
    rc = rc ? rc : rdzv__put_blob(&r->frame, desired, desired_len);
    return submit(c, r, rc, err);
}

int rdzv_aclient_delete(rdzv_aclient_t *c, const char *key, rdzv_acb_t cb, void *arg,
                        ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_DELETE, "DELETE_KEY", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_DELETE_KEY, key);
    return submit(c, r, rc, err);
}

int rdzv_aclient_ping(rdzv_aclient_t *c, rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_PING, "PING", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    r->nonce = ++c->ping_seq;
    rc = rdzv__put_u8(&r->frame, RDZV_CMD_PING);
    rc = rc ? rc : rdzv__put_u32(&r->frame, r->nonce);
    return submit(c, r, rc, err);
}

int rdzv_aclient_raw(rdzv_aclient_t *c, const ddp_buf_t *frame, rdzv_reply_parser_fn parse,
                     unsigned flags, int timeout_ms, const char *what, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc = req_new(c, K_RAW, "request", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    if (frame == NULL || frame->len == 0 || parse == NULL)
        return refuse(c, r, -EINVAL, err, "empty frame or no reply parser");
    if (what != NULL)
        msgf(r->subject, sizeof r->subject, "%s", what);
    else
        msgf(r->subject, sizeof r->subject, "%s (0x%02x)", rdzv__cmd_name(frame->data[0]),
             frame->data[0]);
    r->parse = parse;
    r->parks = (flags & RDZV_ACLIENT_PARKS) != 0;
    r->timeout_ms = r->parks ? timeout_ms : -1;
    return submit(c, r, ddp_buf_append(&r->frame, frame->data, frame->len), err);
}

long rdzv_aclient_parse_u8(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    (void)buf;
    return fixed(1, len, need);
}

long rdzv_aclient_parse_u64(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    (void)buf;
    return fixed(8, len, need);
}

long rdzv_aclient_parse_blob(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    return blob_end(buf, len, 0, need);
}

int rdzv_aclient_reply_i64(const uint8_t *reply, size_t len, int64_t *out) {
    if (reply == NULL || len != 8)
        return DDP_EPROTO;
    *out = (int64_t)rdzv__get_u64(reply);
    return 0;
}

int rdzv_aclient_reply_blob(const uint8_t *reply, size_t len, const uint8_t **p, size_t *n) {
    size_t need;
    if (reply == NULL || blob_end(reply, len, 0, &need) <= 0)
        return DDP_EPROTO;
    *n = (size_t)rdzv__get_u64(reply);
    *p = reply + 8;
    return 0;
}
