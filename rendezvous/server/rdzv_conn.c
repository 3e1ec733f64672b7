/* SPDX-License-Identifier: Apache-2.0
 * rdzv_conn: one connection of the store on its way out: the reply buffer, writing, and closing.
 * Replies go to a per-connection buffer that is written with uv_try_write, then uv_write in
 * chunks of RDZV_WRITE_BYTES_PER_TURN; a client whose unread replies pass max_out_buf is cut off.
 * Every file of the store answers and closes through here; what a closing connection must undo
 * above this file (its parked waits, its rendezvous membership, the server's own end) it reaches
 * through the server's conn_ops (rdzv_server_int.h), never by name. */
#include "rdzv_server_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddp_log.h"

/* ---- connections: close, handshake list, output ---- */

/* Takes c off the handshake list (it is ready, or closing). */
static void hs_unlink(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (!c->in_hs)
        return;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        s->hs_head = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        s->hs_tail = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
    c->in_hs = 0;
    s->hs_count--;
}

static void on_conn_closed(uv_handle_t *h) {
    conn_t *c = h->data;
    rdzv_server_t *s = c->s;
    buf_release(s, &c->in);
    buf_release(s, &c->out);
    buf_release(s, &c->wbuf);
    free(c->auth);
    free(c->scope);
    mem_acct(s, sizeof *c, 0);
    free(c);
    s->live_handles--;
    s->conn_ops.handle_closed(s);
}

void rdzv__conn_discard(conn_t *c) {
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

void rdzv__conn_ready(conn_t *c) {
    hs_unlink(c);
}

void rdzv__conn_close(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (c->closing)
        return;
    c->closing = 1;
    hs_unlink(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.conns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    /* Last, once c is out of every list: the rendezvous's actions can wake keys and close other
     * connections (c's memory lasts until its close callback). */
    s->conn_ops.conn_gone(c);
}

static void start_write(conn_t *c);

static void on_write(uv_write_t *req, int status) {
    conn_t *c = req->data;
    c->writing = 0;
    if (c->closing)
        return;
    if (status < 0) {
        rdzv__slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(status));
        rdzv__conn_close(c);
        return;
    }
    c->woff += c->wchunk;
    if (c->woff < c->wbuf.len) {
        start_write(c);
        return;
    }
    ddp_buf_reset(&c->wbuf);
    c->woff = 0;
    buf_trim(c->s, &c->wbuf);
    if (c->out.len > 0 || c->close_after_write) {
        /* conn_flush, inlined to avoid a forward declaration cycle */
        ddp_buf_t t = c->wbuf;
        c->wbuf = c->out;
        c->out = t;
        if (c->wbuf.len == 0) {
            rdzv__conn_close(c);
            return;
        }
        start_write(c);
    }
}

static void start_write(conn_t *c) {
    size_t chunk = c->wbuf.len - c->woff;
    if (chunk > RDZV_WRITE_BYTES_PER_TURN)
        chunk = RDZV_WRITE_BYTES_PER_TURN;
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data + c->woff, (unsigned)chunk);
    c->wchunk = chunk;
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
        rdzv__slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(rc));
        rdzv__conn_close(c);
        return;
    }
    c->writing = 1;
}

/* Hands queued replies to the kernel: try_write first (no request object, no callback), the
 * rest through uv_write in bounded chunks. */
void rdzv__conn_flush(conn_t *c) {
    if (c->closing || c->writing)
        return;
    if (c->out.len == 0) {
        if (c->close_after_write)
            rdzv__conn_close(c);
        return;
    }
    size_t chunk = c->out.len > RDZV_WRITE_BYTES_PER_TURN ? RDZV_WRITE_BYTES_PER_TURN : c->out.len;
    uv_buf_t b = uv_buf_init((char *)c->out.data, (unsigned)chunk);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        rdzv__slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(n));
        rdzv__conn_close(c);
        return;
    }
    if (n < 0)
        n = 0;
    if ((size_t)n == c->out.len) {
        ddp_buf_reset(&c->out);
        buf_trim(c->s, &c->out);
        if (c->close_after_write)
            rdzv__conn_close(c);
        return;
    }
    ddp_buf_t t = c->wbuf; /* empty: no write is in flight */
    c->wbuf = c->out;
    c->out = t;
    c->woff = (size_t)n;
    start_write(c);
}

/* Closes c with one warning line naming the peer; counter is the stat to bump (may be NULL). */
__attribute__((format(printf, 3, 4))) void rdzv__conn_fail(conn_t *c, uint64_t *counter,
                                                           const char *fmt, ...) {
    if (c->closing)
        return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rdzv__slog(c->s, DDP_LOG_WARN, "closing connection from %s: %s", c->peer, msg);
    if (counter != NULL)
        (*counter)++;
    rdzv__conn_close(c);
}

/* ---- replies ---- */

/* Reply helpers append to c->out and keep the memory account; on allocation failure or past the
 * output cap the connection is cut off. They return 0 or -1 (connection closing). */
static int out_done(conn_t *c, size_t cap0, int rc) {
    mem_acct(c->s, cap0, c->out.cap);
    c->replied = 1;
    if (rc < 0) {
        rdzv__conn_fail(c, &c->s->st.mem_refused, "out of memory for replies");
        return -1;
    }
    if (c->s->st.mem_used > c->s->max_total_mem) {
        rdzv__conn_fail(c, &c->s->st.mem_refused,
                        "store memory limit (%zu bytes) reached by replies", c->s->max_total_mem);
        return -1;
    }
    size_t pending = c->out.len + (c->wbuf.len - c->woff);
    if (pending > c->s->max_out_buf) {
        rdzv__conn_fail(c, &c->s->st.slow_closed,
                        "slow reader: %zu bytes of replies unread (limit %zu)", pending,
                        c->s->max_out_buf);
        return -1;
    }
    return 0;
}

int rdzv__reply_u8(conn_t *c, uint8_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_u8(&c->out, v));
}

int rdzv__reply_u32(conn_t *c, uint32_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_u32(&c->out, v));
}

int rdzv__reply_i64(conn_t *c, int64_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_i64(&c->out, v));
}

int rdzv__reply_blob(conn_t *c, const void *p, size_t n) {
    if (n > c->s->max_out_buf) {
        rdzv__conn_fail(c, &c->s->st.slow_closed, "reply of %zu bytes is over the output limit %zu",
                        n, c->s->max_out_buf);
        return -1;
    }
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_blob(&c->out, p, n));
}

int rdzv__reply_bytes(conn_t *c, const uint8_t *p, size_t n) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, ddp_buf_append(&c->out, p, n));
}
