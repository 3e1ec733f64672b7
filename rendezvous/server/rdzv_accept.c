/* SPDX-License-Identifier: Apache-2.0
 * rdzv_accept: one connection of the store on its way in: accept and admission (the owner check,
 * the connection caps, eviction of connections still in their handshake), and reading. Input is
 * parsed straight from one shared read buffer (rdzv_cmds.c runs the frames); only the tail of an
 * incomplete frame is copied into the connection. Any malformed, oversized or out-of-state frame
 * closes that connection alone, with one warning that names the peer. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ddp_err.h"
#include "ddp_log.h"
#include "ddp_sockdiag.h"

/* ---- peer addresses ---- */

void rdzv__addr_format(const struct sockaddr_storage *sa, char *out, size_t cap, uint16_t *port) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
        if (uv_ip6_name(a6, ip, sizeof ip) != 0)
            snprintf(ip, sizeof ip, "?");
        *port = ntohs(a6->sin6_port);
        snprintf(out, cap, "[%s]:%u", ip, *port);
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)sa;
        if (uv_ip4_name(a4, ip, sizeof ip) != 0)
            snprintf(ip, sizeof ip, "?");
        *port = ntohs(a4->sin_port);
        snprintf(out, cap, "%s:%u", ip, *port);
    }
}

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
 * on another host and passes this check; a loopback one cannot be, so there an unanswered lookup
 * refuses. Returns 1 to admit c; 0 when it is refused (counted, logged). */
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
        rdzv__conn_discard(c);
        return;
    }
    peer_name(c);
    /* The owner first: a stranger's connection must not evict anything on its way out. */
    if (s->closing || (s->owner_only && !owner_allows(s, c)) || !admit(s, c)) {
        rdzv__conn_discard(c);
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
        rdzv__conn_discard(c);
        return;
    }
    conn_link(s, c);
    rdzv__slog(s, DDP_LOG_DEBUG, "accepted %s", c->peer);
}
