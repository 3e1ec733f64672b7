/* SPDX-License-Identifier: Apache-2.0
 * rdzv_async_queue: the asynchronous client's requests on their way (rdzv_async_int.h):
 * the queue of requests not sent yet, the pipelined writes, the framing that delimits each reply
 * and matches it to the oldest request in flight, the one parked request that holds later ones
 * back, and the timeouts of replies, writes and parked waits. Kept apart from the connection's
 * life (rdzv_async_client.c) because this is the part every request goes through once the
 * connection is up, and apart from the calls (rdzv_async_store_calls.c), which only encode frames.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_async_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"

#define READ_CHUNK ((size_t)64 * 1024)
/* A reply is at most one maximal blob plus a few status bytes; a larger need is hostile. */
#define MAX_REPLY_LEN (RDZV_MAX_FRAME_LEN + 64)
/* A read or write buffer bigger than this is freed once drained rather than kept for reuse. */
#define KEEP_WBUF ((size_t)1024 * 1024)

/* ---- small helpers ---- */

void rdzv__aclient_msgf(char *dst, size_t cap, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(dst, cap, f, ap);
    va_end(ap);
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

void rdzv__aclient_list_push(req_t **head, req_t **tail, req_t *r) {
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

void rdzv__aclient_req_free(req_t *r) {
    ddp_buf_free(&r->frame);
    free(r);
}

/* Runs r's callback (user requests only) and frees r. text is the reason without the peer. */
static void complete(rdzv_aclient_t *c, req_t *r, int status, const uint8_t *reply, size_t len,
                     const char *text) {
    if (r->cb != NULL) {
        char line[2 * TEXT_LEN];
        if (status < 0)
            rdzv__aclient_msgf(line, sizeof line, "%s: %s", c->peer,
                               text ? text : ddp_strerror(status));
        c->npending--;
        r->cb(r->arg, status, status < 0 ? NULL : reply, status < 0 ? 0 : len,
              status < 0 ? line : NULL);
    }
    rdzv__aclient_req_free(r);
}

void rdzv__aclient_fail_all(rdzv_aclient_t *c, int code, req_t *culprit, int other_code,
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
            rdzv__aclient_msgf(text, sizeof text, "%s %s failed: %s", r->cmd, r->subject, reason);
            complete(c, r, other_code, NULL, 0, text);
        }
    }
}

/* Reports the connection lost (rdzv_aconn_events_t.lost) with the reason formatted. */
static void lost(rdzv_aclient_t *c, int code, req_t *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void lost(rdzv_aclient_t *c, int code, req_t *culprit, const char *fmt, ...) {
    char reason[TEXT_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    c->events->lost(c, code, culprit, reason);
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

void rdzv__aclient_io_update(rdzv_aclient_t *c) {
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
        rdzv__aclient_msgf(c->deferred_text, sizeof c->deferred_text, "%s", text);
    }
    if (uv_timer_start(&c->t_io, on_io_timer, 0, 0) == 0)
        c->io_armed = 1;
}

static void on_written(uv_write_t *w, int status);

void rdzv__aclient_flush(rdzv_aclient_t *c) {
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
        lost(c, io_code(status), NULL, "unable to write to the server: %s",
             code_text(io_code(status)));
        return;
    }
    rdzv__aclient_flush(c);
    if (c->io_armed)
        io_start(c); /* progress: the io bound starts again */
    rdzv__aclient_io_update(c);
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
    default: c->events->handshake_reply(c, r, buf, n); return;
    }
    char text[TEXT_LEN];
    if (r->kind == K_GETNOW)
        rdzv__aclient_msgf(text, sizeof text, "no %s", r->subject);
    else
        rdzv__aclient_msgf(text, sizeof text, "timed out after %d ms waiting for %s", r->timeout_ms,
                           r->subject);
    complete(c, r, r->kind == K_GETNOW ? DDP_ENOKEY : DDP_ETIMEOUT, NULL, 0, text);
}

/* Matches the bytes read so far to the in-flight requests, in order. */
static void process_input(rdzv_aclient_t *c) {
    size_t off = 0;
    while ((c->state == S_HANDSHAKE || c->state == S_READY) && off < c->in.len) {
        req_t *r = c->inflight;
        if (r == NULL) {
            lost(c, DDP_EPROTO, NULL, "%zu unexpected bytes from the server", c->in.len - off);
            break;
        }
        size_t need = 0;
        long n = reply_len(r, c->in.data + off, c->in.len - off, &need);
        if (n == 0 && need > MAX_REPLY_LEN)
            n = DDP_ETOOBIG;
        if (n == 0)
            break;
        if (n < 0 || (size_t)n > c->in.len - off) {
            lost(c, n < 0 ? (int)n : DDP_EPROTO, r, "malformed reply to %s %s: %s", r->cmd,
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
            rdzv__aclient_pump(c);
        if (c->state == S_READY || c->state == S_HANDSHAKE) {
            if (c->io_armed)
                io_start(c);
            rdzv__aclient_io_update(c);
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
        lost(c, code, NULL, "%s",
             code == DDP_ECLOSED ? "connection closed by the server" : code_text(code));
        return;
    }
    c->in.len += (size_t)nread;
    if (c->io_armed)
        io_start(c); /* progress */
    process_input(c);
}

int rdzv__aclient_read_start(rdzv_aclient_t *c) {
    return uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- sending ---- */

void rdzv__aclient_pump(rdzv_aclient_t *c) {
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
        rdzv__aclient_list_push(&c->inflight, &c->inflight_tail, r);
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
    rdzv__aclient_flush(c);
    rdzv__aclient_io_update(c);
}

int rdzv__aclient_refuse(rdzv_aclient_t *c, req_t *r, int code, ddp_err_t *err, const char *why) {
    ddp_err_set(err, code, "%s: %s %s refused: %s", c ? c->peer : "store", r ? r->cmd : "request",
                r ? r->subject : "", why);
    if (r != NULL)
        rdzv__aclient_req_free(r);
    return code;
}

int rdzv__aclient_submit(rdzv_aclient_t *c, req_t *r, int rc, ddp_err_t *err) {
    if (rc < 0)
        return rdzv__aclient_refuse(c, r, rc, err, "out of memory");
    if (c->state == S_CLOSING)
        return rdzv__aclient_refuse(c, r, DDP_ECANCELED, err, "the client is closing");
    if (c->state == S_FAILED)
        return rdzv__aclient_refuse(c, r, DDP_ECLOSED, err, "the connection is lost");
    if (r->frame.len > RDZV_MAX_FRAME_LEN)
        return rdzv__aclient_refuse(c, r, DDP_ETOOBIG, err, "frame over the 32 MiB limit");
    size_t out = c->held_bytes + c->wq.len + (c->writing ? c->wbuf.len : 0);
    if (out + r->frame.len > c->out_limit) {
        char why[96];
        rdzv__aclient_msgf(why, sizeof why, "%zu bytes already queued (limit %zu)", out,
                           c->out_limit);
        return rdzv__aclient_refuse(c, r, -ENOBUFS, err, why);
    }
    if (r->parks && r->timeout_ms >= 0)
        r->deadline = uv_now(c->loop) + (uint64_t)r->timeout_ms;
    rdzv__aclient_list_push(&c->queued, &c->queued_tail, r);
    c->held_bytes += r->frame.len;
    c->npending++;
    rdzv__aclient_pump(c);
    return 0;
}

int rdzv__aclient_req_new(rdzv_aclient_t *c, int kind, const char *cmd, const char *key,
                          rdzv_acb_t cb, void *arg, req_t **out, ddp_err_t *err) {
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
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "key '%s'",
                           rdzv__key_repr(key, n, kr, sizeof kr));
        if (n > RDZV_MAX_KEY_LEN) {
            char why[64];
            rdzv__aclient_msgf(why, sizeof why, "key of %zu bytes (limit %zu)", n,
                               RDZV_MAX_KEY_LEN);
            rdzv__aclient_refuse(c, r, DDP_ETOOBIG, err, why);
            return DDP_ETOOBIG;
        }
    }
    *out = r;
    return 0;
}

/* ---- timeouts ---- */

static void on_io_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    c->io_armed = 0;
    if (c->deferred_code != 0) {
        int code = c->deferred_code;
        c->deferred_code = 0;
        lost(c, code, NULL, "%s", c->deferred_text);
        return;
    }
    req_t *h = c->inflight;
    if (h == NULL)
        lost(c, DDP_ETIMEOUT, NULL, "unable to send within %d ms", c->io_ms);
    else
        lost(c, DDP_ETIMEOUT, h, "no reply within %d ms to %s %s", c->io_ms, h->cmd, h->subject);
}

/* The parked request's wait ran out: WAIT and GET send CANCEL_WAIT and complete when its reply
 * comes; a raw parked request cannot be resynced, so the connection is dropped. */
static void on_wait_timer(uv_timer_t *t) {
    rdzv_aclient_t *c = t->data;
    req_t *r = c->parked;
    if (r == NULL || r->canceling || c->state != S_READY)
        return;
    if (r->kind == K_RAW) {
        lost(c, DDP_ETIMEOUT, r, "timed out after %d ms waiting for the reply to %s", r->timeout_ms,
             r->subject);
        return;
    }
    r->canceling = 1;
    if (rdzv__put_u8(&c->wq, RDZV_CMD_CANCEL_WAIT) < 0) {
        lost(c, -ENOMEM, NULL, "out of memory for CANCEL_WAIT");
        return;
    }
    rdzv__aclient_flush(c);
    rdzv__aclient_io_update(c);
}

/* ---- public API: the queue's bound and count, the ready-made reply parsers ---- */

void rdzv_aclient_set_out_limit(rdzv_aclient_t *c, size_t bytes) {
    c->out_limit = bytes > 0 ? bytes : RDZV_ACLIENT_OUT_LIMIT;
}

size_t rdzv_aclient_pending(const rdzv_aclient_t *c) {
    return c->npending;
}

long rdzv_aclient_parse_u8(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    (void)buf;
    return fixed(1, len, need);
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
