/* SPDX-License-Identifier: Apache-2.0
 * rdzv_conn: one connection of the store: accept, read, write, close, and the reply buffer.
 * Input is parsed straight from one shared read buffer; only the tail of an incomplete frame is
 * copied into the connection. Replies go to a per-connection buffer that is written with
 * uv_try_write, then uv_write in chunks of RDZV_WRITE_BYTES_PER_TURN; a client whose unread
 * replies pass max_out_buf is cut off. Any malformed, oversized or out-of-state frame closes that
 * connection alone, with one warning that names the peer. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ddp_err.h"
#include "ddp_log.h"
#include "ddp_sockdiag.h"

/* Fills c->peer, the address log lines name, when the connection is accepted: it is surely up
 * then, so every closing line names the peer whatever it did before (getpeername can fail after
 * a reset; the connection's number stands in when it fails here). */
static void peer_name(conn_t *c) {
    struct sockaddr_storage sa;
    int salen = sizeof sa;
    uint16_t port;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &salen) != 0)
        snprintf(c->peer, sizeof c->peer, "connection %llu", (unsigned long long)c->id);
    else
        rdzv__addr_format(&sa, c->peer, sizeof c->peer, &port);
}

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
    rdzv__server_maybe_free(s);
}

void rdzv__conn_ready(conn_t *c) {
    hs_unlink(c);
}

void rdzv__conn_close(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (c->closing)
        return;
    c->closing = 1;
    rdzv__wait_clear(c);
    hs_unlink(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.conns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    if (s->runs != NULL && !s->closing) {
        /* A member's connection closing is its death: the rendezvous ends its round at once.
         * This comes last, once c is out of every list, because the actions can wake keys and
         * close other connections (c's memory lasts until its close callback). */
        rdzv_runs_leave(s->runs, c->id, uv_now(s->loop), &s->acts);
        rdzv__rounds_after(s);
    }
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

/* ---- libuv callbacks ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    conn_t *c = h->data;
    buf->base = (char *)c->s->rbuf;
    buf->len = sizeof c->s->rbuf;
}

/* Sends the ACK of what c has read now. A read that ended in whole commands and queued no reply
 * (a SET, a parked WAIT) would leave its ACK to the delayed-ACK timer (40 ms), and a client that
 * keeps Nagle on holds its next request until that ACK: every SET then GET would stall 40 ms.
 * TCP_QUICKACK = 2 (even, non-zero) pushes the pending ACK and stays in delayed-ACK mode.
 * A read that was answered needs none: its reply carries the ACK, whether it is still queued or
 * already written (rendezvous replies are flushed as they are made, so an empty output buffer
 * does not mean no reply; pushing then would cost every keep-alive a fourth system call). */
static void ack_now(conn_t *c) {
    uv_os_fd_t fd;
    int push = 2;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &push, sizeof push);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    conn_t *c = st->data;
    rdzv_server_t *s = c->s;
    if (nread < 0) {
        if (c->in.len > 0 && !c->closing)
            rdzv__conn_fail(c, &s->st.bad_frames, "connection ended inside a %s frame (%zu bytes)",
                            rdzv__cmd_name(c->in.data[0]), c->in.len);
        else if (!c->closing)
            rdzv__slog(s, DDP_LOG_DEBUG, "%s closed the connection%s%s", c->peer,
                       nread == UV_EOF ? "" : ": ", nread == UV_EOF ? "" : uv_strerror((int)nread));
        rdzv__conn_close(c);
        return;
    }
    if (nread == 0 || c->closing || c->close_after_write)
        return;
    const uint8_t *data = (const uint8_t *)buf->base;
    size_t n = (size_t)nread, used = 0;
    c->replied = 0;
    if (c->in.len == 0) {
        used = rdzv__conn_process(c, data, n);
        if (!c->closing && used < n) {
            if (!mem_allows(s, n - used)) {
                rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                                s->max_total_mem);
                return;
            }
            size_t cap0 = c->in.cap;
            int rc = ddp_buf_append(&c->in, data + used, n - used);
            mem_acct(s, cap0, c->in.cap);
            if (rc < 0) {
                rdzv__conn_fail(c, &s->st.mem_refused, "out of memory for a frame");
                return;
            }
        }
    } else {
        if (!mem_allows(s, n)) {
            rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                            s->max_total_mem);
            return;
        }
        size_t cap0 = c->in.cap;
        int rc = ddp_buf_append(&c->in, data, n);
        mem_acct(s, cap0, c->in.cap);
        if (rc < 0) {
            rdzv__conn_fail(c, &s->st.mem_refused, "out of memory for a frame");
            return;
        }
        if (c->in.len >= c->need) {
            used = rdzv__conn_process(c, c->in.data, c->in.len);
            if (c->closing)
                return;
            ddp_buf_consume(&c->in, used);
            buf_trim(s, &c->in);
        }
    }
    if (used > 0 && c->in.len == 0 && !c->replied && !c->closing)
        ack_now(c);
    rdzv__conn_flush(c);
}

/* Links c, now reading, into the server's lists: all connections, and the handshake list (oldest
 * first) that the deadline timer walks. */
static void conn_link(rdzv_server_t *s, conn_t *c) {
    c->closing = 0;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->st.conns++;
    s->st.conns_total++;
    c->accepted_ms = uv_now(s->loop);
    /* On the workers' store the list holds the connections that have not sent a whole first
     * frame yet, with no deadline (rdzv_server_opts_t.worker_store): admit evicts from it. */
    c->in_hs = 1;
    s->hs_count++;
    c->hs_prev = s->hs_tail;
    if (s->hs_tail)
        s->hs_tail->hs_next = c;
    else
        s->hs_head = c;
    s->hs_tail = c;
}

/* Closes the oldest connection still in its handshake to make room for the newcomer c; limit
 * names the cap that was reached. */
static void evict_oldest(rdzv_server_t *s, const conn_t *c, const char *limit, size_t n) {
    conn_t *old = s->hs_head;
    s->st.hs_evicted++;
    rdzv__admit_log(s,
                    "closing connection from %s: evicted, unauthenticated after %llu ms, to "
                    "admit %s (%s limit %zu reached)",
                    old->peer, (unsigned long long)(uv_now(s->loop) - old->accepted_ms), c->peer,
                    limit, n);
    rdzv__conn_close(old);
}

/* Decides whether the newcomer c (accepted, not linked yet) may stay. With a token, a full
 * handshake list or a full server evicts the oldest connection still in its handshake, so that
 * sockets that never authenticate cannot lock token holders out; c is refused only when every
 * connection has authenticated. Without a token anyone can finish the handshake, so evicting
 * would protect nothing: past max_conns the newcomer is refused. Returns 1 when c may stay. */
static int admit(rdzv_server_t *s, const conn_t *c) {
    int guarded = s->token_len > 0;
    if (guarded && s->hs_count >= s->max_unauth && s->hs_head != NULL)
        evict_oldest(s, c, "unauthenticated connection", s->max_unauth);
    if (s->st.conns < s->max_conns)
        return 1;
    if (guarded && s->hs_head != NULL) {
        evict_oldest(s, c, "connection", s->max_conns);
        return 1;
    }
    if (s->worker_store && s->hs_head != NULL &&
        uv_now(s->loop) - s->hs_head->accepted_ms >= RDZV_WSTORE_UNUSED_EVICT_MS) {
        conn_t *old = s->hs_head;
        s->st.hs_evicted++;
        rdzv__admit_log(s,
                        "closing connection from %s: evicted, no command in %llu ms, to admit %s "
                        "(connection limit %zu reached)",
                        old->peer, (unsigned long long)(uv_now(s->loop) - old->accepted_ms),
                        c->peer, s->max_conns);
        rdzv__conn_close(old);
        return 1;
    }
    s->st.conns_refused++;
    rdzv__admit_log(s, "refused connection from %s: connection limit %zu reached%s", c->peer,
                    s->max_conns,
                    guarded           ? ", every connection authenticated"
                    : s->worker_store ? ", none unused for 5 s"
                                      : "");
    return 0;
}

/* rdzv_server_opts_t.owner_only: whether the newcomer c's peer may be served. The kernel is
 * asked who owns the socket at the other end; one it finds (loopback or another address of this
 * network namespace) must be the server's user's, with a file still holding it (a socket its
 * owner closed, or one in TIME_WAIT, reports uid 0 whoever made it). A peer it does not find is
 * on another host and is admitted as before; a loopback one cannot be, so there an unanswered
 * lookup refuses. Returns 1 to admit c; 0 when it is refused (counted, logged). */
static int owner_allows(rdzv_server_t *s, const conn_t *c) {
    struct sockaddr_storage peer, local;
    int plen = sizeof peer, llen = sizeof local;
    char why[160];
    ddp_sock_owner_t o;
    int rc = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &plen);
    if (rc == 0)
        rc = uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&local, &llen);
    if (rc < 0) {
        snprintf(why, sizeof why, "unable to read its address: %s", uv_strerror(rc));
    } else {
        rc = ddp_tcp_peer_owner((struct sockaddr *)&peer, (struct sockaddr *)&local,
                                RDZV_OWNER_LOOKUP_MS, &o);
        if (rc == 0 && o.inode != 0 && o.uid == s->owner_uid)
            return 1;
        if (rc == -ENOENT && !ddp_sock_is_loopback((struct sockaddr *)&peer))
            return 1; /* another host (or network namespace): not the kernel's to say */
        if (rc == 0 && o.inode != 0)
            snprintf(why, sizeof why, "its socket belongs to uid %u, not the job's user (uid %u)",
                     o.uid, s->owner_uid);
        else if (rc == 0)
            snprintf(why, sizeof why, "its socket is closed already, its owner unknown");
        else
            snprintf(why, sizeof why, "unable to look up the owner of its socket: %s",
                     ddp_strerror(rc));
    }
    s->st.owner_refused++;
    rdzv__admit_log(s, "refused connection from %s: %s", c->peer, why);
    return 0;
}

void rdzv__conn_accept(rdzv_server_t *s, uv_stream_t *ls) {
    conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return; /* the pending connection stays in the backlog until memory returns */
    c->s = s;
    c->id = ++s->next_conn_id;
    if (uv_tcp_init(s->loop, &c->tcp) < 0) {
        free(c);
        return;
    }
    c->tcp.data = c;
    s->live_handles++;
    mem_acct(s, 0, sizeof *c);
    c->closing = 1; /* not linked yet: close by hand below until it is */
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    peer_name(c);
    /* The owner first: a stranger's connection must not evict anything on its way out. */
    if (s->closing || (s->owner_only && !owner_allows(s, c)) || !admit(s, c)) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    /* Every request is answered at once (or parked), so delayed ACKs ride on the replies:
     * leaving quick-ACK mode spares a pure ACK per request at the start of every connection
     * (16,384 ranks: ~16k fewer segments). It is not inherited from the listener. */
    uv_os_fd_t fd;
    int zero = 0;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof zero);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    conn_link(s, c);
    rdzv__slog(s, DDP_LOG_DEBUG, "accepted %s", c->peer);
}
