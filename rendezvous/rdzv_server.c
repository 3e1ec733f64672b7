/* rdzv_server: the ddprun store on one libuv loop. It owns the key table, the connections and
 * the parked waits (WAIT and GET_WAIT are answered when their keys appear, never polled).
 *
 * Connection states: NEW (must send VALIDATE) -> AUTH (server has a token: only AUTH_HELLO and
 * AUTH_PROOF) -> READY. A connection that is not READY within auth_idle_ms is closed. Any
 * malformed, oversized or out-of-state frame closes that connection alone, with one warning
 * that names the peer. Input is parsed straight from one shared read buffer; only the tail of
 * an incomplete frame is copied into the connection. Replies go to a per-connection buffer that
 * is written with uv_try_write, then uv_write in chunks of RDZV_WRITE_BYTES_PER_TURN; a client
 * whose unread replies pass max_out_buf is cut off. */
#include "rdzv_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "ddp_buf.h"
#include "ddp_log.h"
#include "rdzv_auth_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"
#include "rdzv_round_int.h"

enum { ST_NEW = 0, ST_AUTH = 1, ST_READY = 2 };
enum { WAIT_NONE = 0, WAIT_KEYS = 1, WAIT_GET = 2 };

typedef struct entry entry_t;
typedef struct conn conn_t;
typedef struct waiter waiter_t;

/* One key: present (it has a value) or absent with parked waiters. */
struct entry {
    entry_t *next; /* hash chain */
    uint64_t hash;
    waiter_t *waiters; /* doubly linked through e_prev/e_next */
    uint8_t *val;
    size_t vlen, vcap;
    uint32_t klen;
    uint8_t present;
    uint8_t key[];
};

/* One key a parked connection still waits for. */
struct waiter {
    conn_t *c;
    entry_t *e; /* NULL once fired */
    waiter_t *e_prev, *e_next;
    waiter_t *c_next;
};

/* Handshake state, allocated only between AUTH_HELLO and AUTH_PROOF. */
typedef struct auth_state {
    uint8_t snonce[RDZV_AUTH_NONCE_LEN];
    uint8_t cnonce[RDZV_AUTH_NONCE_LEN];
} auth_state_t;

struct conn {
    uv_tcp_t tcp; /* tcp.data = this; the conn is freed in its close callback */
    uv_write_t wreq;
    rdzv_server_t *s;
    conn_t *prev, *next;       /* all open connections */
    conn_t *hs_prev, *hs_next; /* handshake list, oldest first */
    uint64_t accepted_ms;
    ddp_buf_t in;   /* tail of an incomplete frame */
    ddp_buf_t out;  /* replies not yet handed to the kernel */
    ddp_buf_t wbuf; /* the buffer uv_write is sending from */
    size_t woff, wchunk;
    size_t need; /* in.len must reach this before parsing again */
    uint8_t state, closing, writing, close_after_write, in_hs, wait_kind;
    size_t wait_left;
    waiter_t *waiters;
    auth_state_t *auth;
    uint64_t id; /* the member id the rendezvous knows this connection by */
    char peer[64];
};

struct rdzv_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t timer;
    int live_handles;
    int closing;
    void (*close_cb)(void *);
    void *close_arg;
    rdzv_frame_limits_t lim;
    size_t max_conns, max_out_buf, max_total_mem;
    uint64_t auth_idle_ms;
    uint8_t token[RDZV_TOKEN_MAX_LEN];
    size_t token_len;
    entry_t **buckets;
    size_t nbuckets, nentries;
    uint64_t seed;
    conn_t *conns;
    conn_t *hs_head, *hs_tail;
    rdzv_server_stats_t st;
    rdzv_log_fn log_fn;
    void *log_arg;
    int log_level;
    char addr[80];
    uint16_t port;
    uint64_t last_accept_warn_ms;
    /* Multi-node rendezvous (rdzv_round.c): the runs, the actions their events produce, and one
     * timer armed at their earliest deadline. */
    rdzv_runs_t *runs;
    rdzv_actions_t acts;
    uv_timer_t rtimer;
    int rtimer_live;
    uint64_t next_conn_id;
    uint8_t rbuf[RDZV_READ_CHUNK];
};

/* ---- logging and accounting ---- */

__attribute__((format(printf, 3, 4))) static void slog(rdzv_server_t *s, int level, const char *fmt,
                                                       ...) {
    if (s->log_fn == NULL || level > s->log_level)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->log_fn(s->log_arg, level, msg);
}

/* Fills c->peer, the address log lines name, when the connection is accepted: it is surely up
 * then, so every closing line names the peer whatever it did before (getpeername can fail after
 * a reset; the connection's number stands in when it fails here). */
static void peer_name(conn_t *c) {
    struct sockaddr_storage sa;
    int salen = sizeof sa;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &salen) != 0) {
        snprintf(c->peer, sizeof c->peer, "connection %llu", (unsigned long long)c->id);
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
        uv_ip6_name(a6, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "[%s]:%u", ip, ntohs(a6->sin6_port));
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&sa;
        uv_ip4_name(a4, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "%s:%u", ip, ntohs(a4->sin_port));
    }
}

/* Adds (or, with a wrapped negative, removes) bytes from the memory account. */
static void mem_acct(rdzv_server_t *s, size_t before, size_t after) {
    s->st.mem_used += after;
    s->st.mem_used -= before;
}

static int mem_allows(rdzv_server_t *s, size_t more) {
    return more <= s->max_total_mem && s->st.mem_used <= s->max_total_mem - more;
}

/* Frees a drained buffer when it holds more than RDZV_IDLE_BUF_KEEP bytes. */
static void buf_trim(rdzv_server_t *s, ddp_buf_t *b) {
    if (b->len == 0 && b->cap > RDZV_IDLE_BUF_KEEP) {
        mem_acct(s, b->cap, 0);
        ddp_buf_free(b);
    }
}

static void buf_release(rdzv_server_t *s, ddp_buf_t *b) {
    mem_acct(s, b->cap, 0);
    ddp_buf_free(b);
}

/* ---- the key table ---- */

static uint64_t key_hash(const rdzv_server_t *s, const uint8_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull ^ s->seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static entry_t *tbl_find(rdzv_server_t *s, const rdzv_slice_t *k, uint64_t h) {
    for (entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->klen == k->n && memcmp(e->key, k->p, k->n) == 0)
            return e;
    return NULL;
}

static void tbl_grow(rdzv_server_t *s) {
    size_t n = s->nbuckets * 2;
    entry_t **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    mem_acct(s, s->nbuckets * sizeof *b, n * sizeof *b);
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

/* Finds key or adds it absent. Returns NULL when memory is short. */
static entry_t *tbl_get_or_add(rdzv_server_t *s, const rdzv_slice_t *k) {
    uint64_t h = key_hash(s, k->p, k->n);
    entry_t *e = tbl_find(s, k, h);
    if (e != NULL)
        return e;
    size_t sz = sizeof *e + k->n;
    if (!mem_allows(s, sz) || (e = calloc(1, sz)) == NULL)
        return NULL;
    mem_acct(s, 0, sz);
    e->hash = h;
    e->klen = (uint32_t)k->n;
    memcpy(e->key, k->p, k->n);
    e->next = s->buckets[h & (s->nbuckets - 1)];
    s->buckets[h & (s->nbuckets - 1)] = e;
    if (++s->nentries > s->nbuckets)
        tbl_grow(s);
    return e;
}

static entry_t *tbl_lookup(rdzv_server_t *s, const rdzv_slice_t *k) {
    return tbl_find(s, k, key_hash(s, k->p, k->n));
}

/* Removes e when it has neither a value nor waiters. */
static void tbl_maybe_remove(rdzv_server_t *s, entry_t *e) {
    if (e->present || e->waiters != NULL)
        return;
    entry_t **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    s->nentries--;
    mem_acct(s, sizeof *e + e->klen + e->vcap, 0);
    free(e->val);
    free(e);
}

/* Replaces e's value. Returns 0 or -ENOMEM (memory limit or malloc). */
static int entry_set(rdzv_server_t *s, entry_t *e, const void *v, size_t n) {
    if (n > e->vcap || e->vcap > 2 * n + 64) {
        size_t cap = n ? n : 1;
        if (!mem_allows(s, cap))
            return -ENOMEM;
        uint8_t *p = malloc(cap);
        if (p == NULL)
            return -ENOMEM;
        mem_acct(s, e->vcap, cap);
        free(e->val);
        e->val = p;
        e->vcap = cap;
    }
    if (n > 0)
        memcpy(e->val, v, n);
    e->vlen = n;
    if (!e->present) {
        e->present = 1;
        s->st.keys++;
    }
    return 0;
}

/* ---- connections: close, handshake list, output ---- */

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
}

/* Drops a parked wait: unlinks every unfired waiter and frees them all. */
static void wait_clear(conn_t *c) {
    rdzv_server_t *s = c->s;
    waiter_t *w = c->waiters;
    while (w != NULL) {
        waiter_t *next = w->c_next;
        entry_t *e = w->e;
        if (e != NULL) {
            if (w->e_prev)
                w->e_prev->e_next = w->e_next;
            else
                e->waiters = w->e_next;
            if (w->e_next)
                w->e_next->e_prev = w->e_prev;
            tbl_maybe_remove(s, e);
        }
        mem_acct(s, sizeof *w, 0);
        free(w);
        w = next;
    }
    if (c->wait_kind != WAIT_NONE)
        s->st.waiting--;
    c->waiters = NULL;
    c->wait_kind = WAIT_NONE;
    c->wait_left = 0;
}

static void maybe_finish_close(rdzv_server_t *s);

static void on_conn_closed(uv_handle_t *h) {
    conn_t *c = h->data;
    rdzv_server_t *s = c->s;
    buf_release(s, &c->in);
    buf_release(s, &c->out);
    buf_release(s, &c->wbuf);
    free(c->auth);
    mem_acct(s, sizeof *c, 0);
    free(c);
    s->live_handles--;
    maybe_finish_close(s);
}

/* Closes c (idempotent). The memory goes in the close callback. */
static void rounds_after(rdzv_server_t *s);

static void conn_close(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (c->closing)
        return;
    c->closing = 1;
    wait_clear(c);
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
        rounds_after(s);
    }
}

static void start_write(conn_t *c);

static void on_write(uv_write_t *req, int status) {
    conn_t *c = req->data;
    c->writing = 0;
    if (c->closing)
        return;
    if (status < 0) {
        slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(status));
        conn_close(c);
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
            conn_close(c);
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
        slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(rc));
        conn_close(c);
        return;
    }
    c->writing = 1;
}

/* Hands queued replies to the kernel: try_write first (no request object, no callback), the
 * rest through uv_write in bounded chunks. */
static void conn_flush(conn_t *c) {
    if (c->closing || c->writing)
        return;
    if (c->out.len == 0) {
        if (c->close_after_write)
            conn_close(c);
        return;
    }
    size_t chunk = c->out.len > RDZV_WRITE_BYTES_PER_TURN ? RDZV_WRITE_BYTES_PER_TURN : c->out.len;
    uv_buf_t b = uv_buf_init((char *)c->out.data, (unsigned)chunk);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        slog(c->s, DDP_LOG_DEBUG, "unable to write to %s: %s", c->peer, uv_strerror(n));
        conn_close(c);
        return;
    }
    if (n < 0)
        n = 0;
    if ((size_t)n == c->out.len) {
        ddp_buf_reset(&c->out);
        buf_trim(c->s, &c->out);
        if (c->close_after_write)
            conn_close(c);
        return;
    }
    ddp_buf_t t = c->wbuf; /* empty: no write is in flight */
    c->wbuf = c->out;
    c->out = t;
    c->woff = (size_t)n;
    start_write(c);
}

/* Closes c with one warning line naming the peer; counter is the stat to bump (may be NULL). */
__attribute__((format(printf, 3, 4))) static void conn_fail(conn_t *c, uint64_t *counter,
                                                            const char *fmt, ...) {
    if (c->closing)
        return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    slog(c->s, DDP_LOG_WARN, "closing connection from %s: %s", c->peer, msg);
    if (counter != NULL)
        (*counter)++;
    conn_close(c);
}

/* ---- replies ---- */

/* Reply helpers append to c->out and keep the memory account; on allocation failure or past the
 * output cap the connection is cut off. They return 0 or -1 (connection closing). */
static int out_done(conn_t *c, size_t cap0, int rc) {
    mem_acct(c->s, cap0, c->out.cap);
    if (rc < 0) {
        conn_fail(c, &c->s->st.mem_refused, "out of memory for replies");
        return -1;
    }
    if (c->s->st.mem_used > c->s->max_total_mem) {
        conn_fail(c, &c->s->st.mem_refused, "store memory limit (%zu bytes) reached by replies",
                  c->s->max_total_mem);
        return -1;
    }
    size_t pending = c->out.len + (c->wbuf.len - c->woff);
    if (pending > c->s->max_out_buf) {
        conn_fail(c, &c->s->st.slow_closed, "slow reader: %zu bytes of replies unread (limit %zu)",
                  pending, c->s->max_out_buf);
        return -1;
    }
    return 0;
}

static int reply_u8(conn_t *c, uint8_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_u8(&c->out, v));
}

static int reply_u32(conn_t *c, uint32_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_u32(&c->out, v));
}

static int reply_i64(conn_t *c, int64_t v) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_i64(&c->out, v));
}

static int reply_blob(conn_t *c, const void *p, size_t n) {
    if (n > c->s->max_out_buf) {
        conn_fail(c, &c->s->st.slow_closed, "reply of %zu bytes is over the output limit %zu", n,
                  c->s->max_out_buf);
        return -1;
    }
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, rdzv__put_blob(&c->out, p, n));
}

static int reply_bytes(conn_t *c, const uint8_t *p, size_t n) {
    size_t cap0 = c->out.cap;
    return out_done(c, cap0, ddp_buf_append(&c->out, p, n));
}

/* ---- waits ---- */

/* A waiter of c fired for e (now present); answers the wait once nothing is left. */
static void wait_fired(conn_t *c, entry_t *e) {
    if (--c->wait_left > 0)
        return;
    int kind = c->wait_kind;
    wait_clear(c); /* every waiter of c has fired: this only frees them */
    if (kind == WAIT_GET) {
        if (reply_u8(c, RDZV_GETW_FOUND) == 0)
            reply_blob(c, e->val, e->vlen);
    } else {
        reply_u8(c, RDZV_WAIT_STOP_WAITING);
    }
    conn_flush(c);
}

/* e just got a value: releases its waiters. Each is unlinked from the head of e's list just
 * before it fires, and the rest stay linked: answering one waiter can close other connections
 * (a write error or the output cap closes a member, and the rendezvous then answers or closes
 * other members), and wait_clear must find their waiters on e to unlink them, not freed. */
static void wake(rdzv_server_t *s, entry_t *e) {
    (void)s;
    waiter_t *w;
    while ((w = e->waiters) != NULL) {
        e->waiters = w->e_next;
        if (w->e_next)
            w->e_next->e_prev = NULL;
        w->e = NULL;
        w->e_prev = w->e_next = NULL;
        wait_fired(w->c, e); /* may free w and any other waiter no longer on e */
    }
}

/* Parks c on absent key e. Returns 0 or -ENOMEM. */
static int wait_add(conn_t *c, entry_t *e) {
    rdzv_server_t *s = c->s;
    waiter_t *w;
    if (!mem_allows(s, sizeof *w) || (w = calloc(1, sizeof *w)) == NULL)
        return -ENOMEM;
    mem_acct(s, 0, sizeof *w);
    w->c = c;
    w->e = e;
    w->e_next = e->waiters;
    if (e->waiters)
        e->waiters->e_prev = w;
    e->waiters = w;
    w->c_next = c->waiters;
    c->waiters = w;
    c->wait_left++;
    return 0;
}

/* ---- commands ---- */

static int set_value(conn_t *c, const rdzv_slice_t *key, const void *v, size_t n) {
    rdzv_server_t *s = c->s;
    entry_t *e = tbl_get_or_add(s, key);
    if (e == NULL || entry_set(s, e, v, n) < 0) {
        char kr[300];
        if (e != NULL)
            tbl_maybe_remove(s, e);
        conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached setting key '%s'",
                  s->max_total_mem, rdzv__key_repr(key->p, key->n, kr, sizeof kr));
        return -1;
    }
    wake(s, e);
    return 0;
}

/* Parses a stored integer as std::stoll does (TCPStore's ADD): optional blanks and sign, at
 * least one digit, trailing bytes ignored. Returns 0 or -1. */
static int parse_stored_int(const uint8_t *p, size_t n, int64_t *out) {
    size_t i = 0;
    while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
        i++;
    int neg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    if (i >= n || p[i] < '0' || p[i] > '9')
        return -1;
    uint64_t v = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static void cmd_add(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    int64_t cur = 0;
    entry_t *e = tbl_lookup(s, &r->key);
    if (e != NULL && e->present && parse_stored_int(e->val, e->vlen, &cur) < 0) {
        conn_fail(c, NULL, "ADD on key '%s' whose value is not an integer",
                  rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr));
        return;
    }
    int64_t sum;
    if (__builtin_add_overflow(cur, r->delta, &sum)) {
        conn_fail(c, NULL, "ADD overflows the value of key '%s'",
                  rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr));
        return;
    }
    char num[24];
    int len = snprintf(num, sizeof num, "%lld", (long long)sum);
    if (set_value(c, &r->key, num, (size_t)len) == 0)
        reply_i64(c, sum);
}

static void cmd_compare_set(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = tbl_lookup(s, &r->key);
    if (e == NULL || !e->present) {
        if (r->val.n == 0) {
            if (set_value(c, &r->key, r->val2.p, r->val2.n) == 0)
                reply_blob(c, r->val2.p, r->val2.n);
        } else {
            /* TCPStore answers with the expected value when the key is absent. */
            reply_blob(c, r->val.p, r->val.n);
        }
        return;
    }
    if (e->vlen == r->val.n && (r->val.n == 0 || memcmp(e->val, r->val.p, r->val.n) == 0)) {
        if (entry_set(s, e, r->val2.p, r->val2.n) < 0) {
            conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                      s->max_total_mem);
            return;
        }
    }
    reply_blob(c, e->val, e->vlen);
}

static void cmd_append(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    entry_t *e = tbl_lookup(s, &r->key);
    if (e == NULL || !e->present) {
        set_value(c, &r->key, r->val.p, r->val.n);
        return;
    }
    if (e->vlen + r->val.n > s->lim.max_value_len) {
        conn_fail(c, &s->st.bad_frames, "APPEND makes key '%s' longer than %zu bytes",
                  rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr), s->lim.max_value_len);
        return;
    }
    size_t need = e->vlen + r->val.n;
    if (need > e->vcap) {
        size_t cap = e->vcap * 2 > need ? e->vcap * 2 : need;
        uint8_t *p = NULL;
        if (!mem_allows(s, cap - e->vcap) || (p = realloc(e->val, cap)) == NULL) {
            conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                      s->max_total_mem);
            return;
        }
        mem_acct(s, e->vcap, cap);
        e->val = p;
        e->vcap = cap;
    }
    if (r->val.n > 0)
        memcpy(e->val + e->vlen, r->val.p, r->val.n);
    e->vlen = need;
    wake(s, e);
}

static void cmd_wait(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (c->wait_kind != WAIT_NONE) {
        conn_fail(c, &s->st.bad_frames, "%s while a wait is already parked",
                  rdzv__cmd_name(r->cmd));
        return;
    }
    const uint8_t *cur = r->list.p;
    for (uint64_t i = 0; i < r->nkeys; i++) {
        rdzv_slice_t k;
        rdzv__list_next(&cur, 0, &k, NULL);
        entry_t *e = tbl_lookup(s, &k);
        if (e != NULL && e->present)
            continue;
        if (c->wait_kind == WAIT_NONE) {
            c->wait_kind = WAIT_KEYS;
            s->st.waiting++;
        }
        if ((e = tbl_get_or_add(s, &k)) == NULL || wait_add(c, e) < 0) {
            if (e != NULL)
                tbl_maybe_remove(s, e);
            conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached in WAIT",
                      s->max_total_mem);
            return;
        }
    }
    if (c->wait_kind == WAIT_NONE)
        reply_u8(c, RDZV_WAIT_STOP_WAITING);
}

static void cmd_get_wait(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = tbl_lookup(s, &r->key);
    if (e != NULL && e->present) {
        if (reply_u8(c, RDZV_GETW_FOUND) == 0)
            reply_blob(c, e->val, e->vlen);
        return;
    }
    if (r->mode == RDZV_GETW_NOWAIT) {
        reply_u8(c, RDZV_GETW_ABSENT);
        return;
    }
    if (c->wait_kind != WAIT_NONE) {
        conn_fail(c, &s->st.bad_frames, "GET_WAIT while a wait is already parked");
        return;
    }
    c->wait_kind = WAIT_GET;
    s->st.waiting++;
    if ((e = tbl_get_or_add(s, &r->key)) == NULL || wait_add(c, e) < 0) {
        if (e != NULL)
            tbl_maybe_remove(s, e);
        conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached in GET_WAIT",
                  s->max_total_mem);
    }
}

static void cmd_stats(conn_t *c) {
    rdzv_server_t *s = c->s;
    char text[640];
    const rdzv_server_stats_t *t = &s->st;
    int n = snprintf(text, sizeof text,
                     "conns %llu\nconns_total %llu\nconns_refused %llu\nkeys %llu\n"
                     "waiting %llu\nmem_used %llu\nrequests %llu\nbad_frames %llu\n"
                     "auth_refused %llu\nidle_closed %llu\nslow_closed %llu\nmem_refused %llu\n",
                     (unsigned long long)t->conns, (unsigned long long)t->conns_total,
                     (unsigned long long)t->conns_refused, (unsigned long long)t->keys,
                     (unsigned long long)t->waiting, (unsigned long long)t->mem_used,
                     (unsigned long long)t->requests, (unsigned long long)t->bad_frames,
                     (unsigned long long)t->auth_refused, (unsigned long long)t->idle_closed,
                     (unsigned long long)t->slow_closed, (unsigned long long)t->mem_refused);
    reply_blob(c, text, n < 0 ? 0 : (size_t)n);
}

static void cmd_auth_hello(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (s->token_len == 0) {
        reply_u8(c, RDZV_AUTH_NOT_NEEDED);
        return;
    }
    if (c->state != ST_AUTH || c->auth != NULL) {
        conn_fail(c, &s->st.auth_refused, "AUTH_HELLO out of sequence");
        return;
    }
    c->auth = malloc(sizeof *c->auth);
    if (c->auth == NULL || rdzv__random(c->auth->snonce, RDZV_AUTH_NONCE_LEN) < 0) {
        conn_fail(c, &s->st.mem_refused, "no memory or randomness for a challenge");
        return;
    }
    memcpy(c->auth->cnonce, r->val.p, RDZV_AUTH_NONCE_LEN);
    if (reply_u8(c, RDZV_AUTH_CHALLENGE) == 0)
        reply_bytes(c, c->auth->snonce, RDZV_AUTH_NONCE_LEN);
}

static void cmd_auth_proof(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (s->token_len == 0 || c->state != ST_AUTH || c->auth == NULL) {
        conn_fail(c, &s->st.auth_refused, "AUTH_PROOF out of sequence");
        return;
    }
    uint8_t want[RDZV_AUTH_MAC_LEN], mine[RDZV_AUTH_MAC_LEN];
    if (rdzv__auth_mac(s->token, s->token_len, RDZV_ROLE_CLIENT, c->auth->snonce, c->auth->cnonce,
                       want) < 0 ||
        rdzv__auth_mac(s->token, s->token_len, RDZV_ROLE_SERVER, c->auth->snonce, c->auth->cnonce,
                       mine) < 0) {
        conn_fail(c, &s->st.auth_refused, "libcrypto failed to compute a MAC");
        return;
    }
    free(c->auth);
    c->auth = NULL;
    if (!rdzv__auth_equal(want, r->val.p)) {
        slog(s, DDP_LOG_WARN, "closing connection from %s: authentication refused (wrong token)",
             c->peer);
        s->st.auth_refused++;
        reply_u8(c, RDZV_AUTH_REFUSED);
        c->close_after_write = 1;
        return;
    }
    c->state = ST_READY;
    hs_unlink(c);
    slog(s, DDP_LOG_DEBUG, "authenticated %s", c->peer);
    if (reply_u8(c, RDZV_AUTH_OK) == 0)
        reply_bytes(c, mine, RDZV_AUTH_MAC_LEN);
}

/* ---- multi-node rendezvous (docs/protocol-rdzv.md) ---- */

static conn_t *conn_by_id(rdzv_server_t *s, uint64_t id) {
    for (conn_t *c = s->conns; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* The connections by id for one batch of actions. A round closing answers every member, and a
 * list walk per answer makes that O(members x connections): 60 ms at 4k nodes, growing with the
 * square to ~15 s of stalled loop at 64k, past the default keep-alive window. The list is
 * in descending id order (accepted connections go to its head, ids only grow), so one walk fills
 * a sorted array. Entries stay valid for the batch: a connection closed meanwhile is marked
 * closing and freed only in its close callback, on a later loop turn. */
typedef struct conn_index {
    conn_t **v; /* owned; NULL: look up by walking the list */
    size_t n;
} conn_index_t;

static void conn_index_build(rdzv_server_t *s, size_t nacts, conn_index_t *ix) {
    ix->v = NULL;
    ix->n = 0;
    if (nacts < 16 || s->st.conns == 0 || (ix->v = malloc(s->st.conns * sizeof *ix->v)) == NULL)
        return;
    for (conn_t *c = s->conns; c != NULL && ix->n < s->st.conns; c = c->next)
        ix->v[ix->n++] = c;
}

static conn_t *conn_index_find(rdzv_server_t *s, const conn_index_t *ix, uint64_t id) {
    if (ix->v == NULL)
        return conn_by_id(s, id);
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->v[mid]->id == id)
            return ix->v[mid];
        if (ix->v[mid]->id > id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Sends an encoded reply b to c (if it is still open) and frees b's contents. */
static void reply_buf(conn_t *c, ddp_buf_t *b) {
    if (c != NULL && !c->closing) {
        reply_bytes(c, b->data, b->len);
        conn_flush(c);
    }
    ddp_buf_free(b);
}

/* SETs key to val for the server itself (no requesting connection) and wakes its waiters. */
static void set_internal(rdzv_server_t *s, const char *key, const char *val) {
    rdzv_slice_t k = {(const uint8_t *)key, strlen(key)};
    entry_t *e = tbl_get_or_add(s, &k);
    if (e == NULL || entry_set(s, e, val, strlen(val)) < 0) {
        if (e != NULL)
            tbl_maybe_remove(s, e);
        slog(s, DDP_LOG_ERROR, "store memory limit reached setting '%s'", key);
        return;
    }
    wake(s, e);
}

static void on_rtimer(uv_timer_t *t);

/* Carries out the actions the rendezvous produced, then re-arms its timer. The list is taken
 * first: closing a connection below appends to s->acts again. */
static void rounds_after(rdzv_server_t *s) {
    while (s->acts.n > 0) {
        rdzv_actions_t todo = s->acts;
        s->acts = (rdzv_actions_t)RDZV_ACTIONS_INIT;
        conn_index_t ix;
        conn_index_build(s, todo.n, &ix);
        for (size_t i = 0; i < todo.n; i++) {
            const rdzv_action_t *a = &todo.v[i];
            ddp_buf_t b = DDP_BUF_INIT;
            switch (a->kind) {
            case RDZV_ACT_REPLY_OK:
                if (rdzv_join_reply_encode_ok(&b, &a->res) == 0)
                    reply_buf(conn_index_find(s, &ix, a->member), &b);
                break;
            case RDZV_ACT_REPLY_ERR:
                if (rdzv_join_reply_encode_err(&b, a->code, a->text) == 0)
                    reply_buf(conn_index_find(s, &ix, a->member), &b);
                break;
            case RDZV_ACT_END_ROUND: {
                char key[RDZV_RUN_ID_MAX + 64];
                snprintf(key, sizeof key, "__rdzv/%s/end/%lld", a->run_id, (long long)a->round);
                /* The text already reads "rendezvous 'R' round N ended: why". */
                slog(s, DDP_LOG_INFO, "%s", a->text);
                /* The value says why, for the agents that were waiting on it. */
                set_internal(s, key, a->text[0] ? a->text : "ended");
                break;
            }
            case RDZV_ACT_CLOSE: {
                conn_t *c = conn_index_find(s, &ix, a->member);
                slog(s, DDP_LOG_WARN, "%s: %s", c ? c->peer : "member", a->text);
                if (c != NULL)
                    conn_close(c);
                break;
            }
            default: break;
            }
            ddp_buf_free(&b);
        }
        free(ix.v);
        rdzv_actions_close(&todo);
    }
    if (!s->rtimer_live)
        return;
    uint64_t next = rdzv_runs_next_deadline(s->runs), now = uv_now(s->loop);
    if (next == UINT64_MAX)
        uv_timer_stop(&s->rtimer);
    else
        uv_timer_start(&s->rtimer, on_rtimer, next > now ? next - now : 0, 0);
}

static void on_rtimer(uv_timer_t *t) {
    rdzv_server_t *s = t->data;
    rdzv_runs_tick(s->runs, uv_now(s->loop), &s->acts);
    rounds_after(s);
}

/* The registry and its timer, made on the first rendezvous command (a plain store never pays). */
static int rounds_ready(rdzv_server_t *s) {
    if (s->runs != NULL)
        return 0;
    s->runs = rdzv_runs_new(NULL);
    if (s->runs == NULL || uv_timer_init(s->loop, &s->rtimer) < 0) {
        rdzv_runs_free(s->runs);
        s->runs = NULL;
        return -ENOMEM;
    }
    s->rtimer.data = s;
    s->rtimer_live = 1;
    s->live_handles++;
    return 0;
}

/* Runs one rendezvous command (JOIN, HEARTBEAT, FAIL, STATUS). */
static void round_dispatch(conn_t *c, const rdzv_round_req_t *r) {
    rdzv_server_t *s = c->s;
    s->st.requests++;
    if (rounds_ready(s) < 0) {
        conn_fail(c, &s->st.mem_refused, "out of memory for the rendezvous");
        return;
    }
    uint64_t now = uv_now(s->loop);
    ddp_buf_t b = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    switch (r->cmd) {
    case RDZV_CMD_RDZV_JOIN: {
        int rc = rdzv_runs_join(s->runs, c->id, &r->join, now, &s->acts, &err);
        if (rc < 0) {
            slog(s, DDP_LOG_WARN, "%s: join of rendezvous '%s' refused: %s", c->peer,
                 r->join.run_id, err.text);
            if (rdzv_join_reply_encode_err(&b, rc, err.text) == 0)
                reply_buf(c, &b);
        } else {
            slog(s, DDP_LOG_DEBUG, "%s (%s) joins rendezvous '%s'", c->peer, r->join.host,
                 r->join.run_id);
        }
        break;
    }
    case RDZV_CMD_RDZV_HEARTBEAT: {
        int64_t round = 0; /* docs/protocol-rdzv.md: both 0 for a non-member */
        int state = 0;
        int rc = rdzv_runs_heartbeat(s->runs, r->join.run_id, c->id, now, &round, &state);
        if (rdzv_heartbeat_reply_encode(&b, rc == 0, round, state) == 0)
            reply_buf(c, &b);
        break;
    }
    case RDZV_CMD_RDZV_FAIL: {
        rdzv_fail_reply_t rep;
        rdzv_runs_fail(s->runs, r->join.run_id, c->id, r->round, r->what, now, &s->acts, &rep);
        if (rdzv_fail_reply_encode(&b, &rep) == 0)
            reply_buf(c, &b);
        break;
    }
    case RDZV_CMD_RDZV_STATUS: {
        ddp_buf_t json = DDP_BUF_INIT;
        int rc = rdzv_runs_status_json(s->runs, r->join.run_id, now, &json, &err);
        const char *text = rc == 0 ? (const char *)json.data : err.text;
        size_t n = rc == 0 ? json.len : strlen(err.text);
        if (rdzv_status_reply_encode(&b, rc == 0, text, n) == 0)
            reply_buf(c, &b);
        ddp_buf_free(&json);
        break;
    }
    default: break;
    }
    ddp_buf_free(&b);
    rounds_after(s);
}

/* Runs one request. The connection may be closing afterwards. */
static void dispatch(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    s->st.requests++;
    switch (r->cmd) {
    case RDZV_CMD_VALIDATE:
        if (r->u32 != RDZV_VALIDATE_MAGIC) {
            conn_fail(c, &s->st.bad_frames, "bad VALIDATE magic 0x%08x", r->u32);
            return;
        }
        c->state = s->token_len > 0 ? ST_AUTH : ST_READY;
        if (c->state == ST_READY)
            hs_unlink(c);
        return;
    case RDZV_CMD_AUTH_HELLO: cmd_auth_hello(c, r); return;
    case RDZV_CMD_AUTH_PROOF: cmd_auth_proof(c, r); return;
    case RDZV_CMD_PING: reply_u32(c, r->u32); return;
    case RDZV_CMD_SET: set_value(c, &r->key, r->val.p, r->val.n); return;
    case RDZV_CMD_COMPARE_SET: cmd_compare_set(c, r); return;
    case RDZV_CMD_GET: {
        entry_t *e = tbl_lookup(s, &r->key);
        int present = e != NULL && e->present;
        reply_blob(c, present ? e->val : NULL, present ? e->vlen : 0);
        return;
    }
    case RDZV_CMD_ADD: cmd_add(c, r); return;
    case RDZV_CMD_CHECK: {
        const uint8_t *cur = r->list.p;
        int ready = 1;
        for (uint64_t i = 0; i < r->nkeys && ready; i++) {
            rdzv_slice_t k;
            rdzv__list_next(&cur, 0, &k, NULL);
            entry_t *e = tbl_lookup(s, &k);
            ready = e != NULL && e->present;
        }
        reply_u8(c, ready ? RDZV_CHECK_READY : RDZV_CHECK_NOT_READY);
        return;
    }
    case RDZV_CMD_WAIT: cmd_wait(c, r); return;
    case RDZV_CMD_GETNUMKEYS: reply_i64(c, (int64_t)s->st.keys); return;
    case RDZV_CMD_DELETE_KEY: {
        entry_t *e = tbl_lookup(s, &r->key);
        int64_t deleted = e != NULL && e->present;
        if (deleted) {
            e->present = 0;
            s->st.keys--;
            mem_acct(s, e->vcap, 0);
            free(e->val);
            e->val = NULL;
            e->vlen = e->vcap = 0;
            tbl_maybe_remove(s, e);
        }
        reply_i64(c, deleted);
        return;
    }
    case RDZV_CMD_APPEND: cmd_append(c, r); return;
    case RDZV_CMD_MULTI_GET: {
        const uint8_t *cur = r->list.p;
        for (uint64_t i = 0; i < r->nkeys; i++) {
            rdzv_slice_t k;
            rdzv__list_next(&cur, 0, &k, NULL);
            entry_t *e = tbl_lookup(s, &k);
            int present = e != NULL && e->present;
            if (reply_blob(c, present ? e->val : NULL, present ? e->vlen : 0) < 0)
                return;
        }
        return;
    }
    case RDZV_CMD_MULTI_SET: {
        const uint8_t *cur = r->list.p;
        for (uint64_t i = 0; i < r->nkeys; i++) {
            rdzv_slice_t k, v;
            rdzv__list_next(&cur, 1, &k, &v);
            if (set_value(c, &k, v.p, v.n) < 0)
                return;
        }
        return;
    }
    case RDZV_CMD_CANCEL_WAIT:
        wait_clear(c);
        reply_u8(c, RDZV_WAIT_CANCELED);
        return;
    case RDZV_CMD_GET_WAIT: cmd_get_wait(c, r); return;
    case RDZV_CMD_STATS: cmd_stats(c); return;
    default: conn_fail(c, &s->st.bad_frames, "unknown command 0x%02x", r->cmd); return;
    }
}

/* Checks that cmd is allowed in c's state, before its frame is even buffered. */
static int state_allows(conn_t *c, uint8_t cmd) {
    if (c->state == ST_READY) {
        if (cmd == RDZV_CMD_VALIDATE || cmd == RDZV_CMD_AUTH_PROOF) {
            conn_fail(c, &c->s->st.bad_frames, "%s after the handshake", rdzv__cmd_name(cmd));
            return 0;
        }
        return 1;
    }
    if (c->state == ST_NEW) {
        if (cmd == RDZV_CMD_VALIDATE)
            return 1;
        conn_fail(c, &c->s->st.bad_frames, "first command is %s (0x%02x), not VALIDATE",
                  rdzv__cmd_name(cmd), cmd);
        return 0;
    }
    if (cmd == RDZV_CMD_AUTH_HELLO || cmd == RDZV_CMD_AUTH_PROOF)
        return 1;
    conn_fail(c, &c->s->st.auth_refused, "%s before authentication", rdzv__cmd_name(cmd));
    return 0;
}

/* Parses and runs every whole frame in buf. Returns the bytes consumed. */
static size_t process(conn_t *c, const uint8_t *buf, size_t len) {
    rdzv_server_t *s = c->s;
    size_t off = 0;
    c->need = 0;
    while (off < len && !c->closing && !c->close_after_write) {
        if (!state_allows(c, buf[off]))
            break;
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        if (buf[off] >= RDZV_CMD_RDZV_JOIN && buf[off] <= RDZV_CMD_RDZV_STATUS) {
            rdzv_round_req_t rreq;
            long rn = rdzv_round_req_parse(buf + off, len - off, &rreq, &need, &err);
            if (rn < 0) {
                conn_fail(c, &s->st.bad_frames, "malformed rendezvous frame 0x%02x: %s (byte %ld)",
                          buf[off], err.text, err.offset);
                break;
            }
            if (rn == 0) {
                c->need = need;
                break;
            }
            round_dispatch(c, &rreq);
            off += (size_t)rn;
            continue;
        }
        rdzv_req_t req;
        long n = rdzv__frame_parse(buf + off, len - off, &s->lim, &req, &need, &err);
        if (n < 0) {
            const char *name = rdzv__cmd_name(buf[off]);
            if (strcmp(name, "UNKNOWN") == 0)
                conn_fail(c, &s->st.bad_frames, "malformed frame: %s", err.text);
            else
                conn_fail(c, &s->st.bad_frames, "malformed %s frame: %s (byte %ld)", name, err.text,
                          err.offset);
            break;
        }
        if (n == 0) {
            c->need = need;
            break;
        }
        dispatch(c, &req);
        off += (size_t)n;
    }
    return off;
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
 * TCP_QUICKACK = 2 (even, non-zero) pushes the pending ACK and stays in delayed-ACK mode. */
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
            conn_fail(c, &s->st.bad_frames, "connection ended inside a %s frame (%zu bytes)",
                      rdzv__cmd_name(c->in.data[0]), c->in.len);
        else if (!c->closing)
            slog(s, DDP_LOG_DEBUG, "%s closed the connection%s%s", c->peer,
                 nread == UV_EOF ? "" : ": ", nread == UV_EOF ? "" : uv_strerror((int)nread));
        conn_close(c);
        return;
    }
    if (nread == 0 || c->closing || c->close_after_write)
        return;
    const uint8_t *data = (const uint8_t *)buf->base;
    size_t n = (size_t)nread, used = 0;
    if (c->in.len == 0) {
        used = process(c, data, n);
        if (!c->closing && used < n) {
            if (!mem_allows(s, n - used)) {
                conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                          s->max_total_mem);
                return;
            }
            size_t cap0 = c->in.cap;
            int rc = ddp_buf_append(&c->in, data + used, n - used);
            mem_acct(s, cap0, c->in.cap);
            if (rc < 0) {
                conn_fail(c, &s->st.mem_refused, "out of memory for a frame");
                return;
            }
        }
    } else {
        if (!mem_allows(s, n)) {
            conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                      s->max_total_mem);
            return;
        }
        size_t cap0 = c->in.cap;
        int rc = ddp_buf_append(&c->in, data, n);
        mem_acct(s, cap0, c->in.cap);
        if (rc < 0) {
            conn_fail(c, &s->st.mem_refused, "out of memory for a frame");
            return;
        }
        if (c->in.len >= c->need) {
            used = process(c, c->in.data, c->in.len);
            if (c->closing)
                return;
            ddp_buf_consume(&c->in, used);
            buf_trim(s, &c->in);
        }
    }
    if (used > 0 && c->in.len == 0 && c->out.len == 0 && !c->closing)
        ack_now(c);
    conn_flush(c);
}

static void on_connection(uv_stream_t *ls, int status) {
    rdzv_server_t *s = ls->data;
    if (status < 0) {
        /* Out of descriptors, typically: warn at most once a second, not per connection. */
        uint64_t now = uv_now(s->loop);
        if (now - s->last_accept_warn_ms >= 1000 || s->last_accept_warn_ms == 0) {
            s->last_accept_warn_ms = now;
            slog(s, DDP_LOG_WARN, "unable to accept a connection on %s: %s", s->addr,
                 uv_strerror(status));
        }
        return;
    }
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
    if (s->st.conns >= s->max_conns || s->closing) {
        slog(s, DDP_LOG_DEBUG, "refused %s: connection limit %zu reached", c->peer, s->max_conns);
        s->st.conns_refused++;
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
    c->closing = 0;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->st.conns++;
    s->st.conns_total++;
    c->accepted_ms = uv_now(s->loop);
    c->in_hs = 1;
    c->hs_prev = s->hs_tail;
    if (s->hs_tail)
        s->hs_tail->hs_next = c;
    else
        s->hs_head = c;
    s->hs_tail = c;
    slog(s, DDP_LOG_DEBUG, "accepted %s", c->peer);
}

/* Closes connections that have not finished their handshake in time (oldest first). */
static void on_timer(uv_timer_t *t) {
    rdzv_server_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    while (s->hs_head != NULL && now - s->hs_head->accepted_ms >= s->auth_idle_ms)
        conn_fail(s->hs_head, &s->st.idle_closed, "no %s within %llu ms",
                  s->token_len > 0 ? "authentication" : "VALIDATE",
                  (unsigned long long)s->auth_idle_ms);
}

/* ---- lifecycle ---- */

static void maybe_finish_close(rdzv_server_t *s) {
    if (!s->closing || s->live_handles > 0)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            free(e->val);
            free(e);
            e = next;
        }
    }
    free(s->buckets);
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    OPENSSL_cleanse(s->token, sizeof s->token);
    free(s);
    if (cb != NULL)
        cb(arg);
}

static void on_server_handle_closed(uv_handle_t *h) {
    rdzv_server_t *s = h->data;
    s->live_handles--;
    maybe_finish_close(s);
}

static size_t or_default(size_t v, size_t def) {
    return v ? v : def;
}

/* Creates a listening socket on host:port. Returns the fd or -errno (err filled). */
static int listen_socket(const char *host, uint16_t port, ddp_err_t *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return ddp_err_set(err, -EINVAL, "unable to resolve %s: %s", host, gai_strerror(rc));
    int fd = -1, last = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            last = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        /* Accepted sockets inherit TCP_NODELAY: no setsockopt per connection. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 65535) == 0)
            break;
        last = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ddp_err_set(err, last, "unable to listen on %s:%u: %s", host, port,
                           ddp_strerror(last));
    return fd;
}

int rdzv_server_start(uv_loop_t *loop, const rdzv_server_opts_t *opts, rdzv_server_t **out,
                      ddp_err_t *err) {
    *out = NULL;
    if (loop == NULL || opts == NULL || opts->host == NULL || *opts->host == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "rdzv_server_start: a loop and a host are required");
    int has_token = opts->token != NULL && opts->token_len > 0;
    if (has_token == !!opts->no_auth)
        return ddp_err_set(err, DDP_EUSAGE,
                           has_token ? "store on %s: both a token and no_auth given"
                                     : "store on %s: no token (set no_auth to serve without one)",
                           opts->host);
    if (opts->token_len > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EUSAGE, "store token longer than %zu bytes",
                           RDZV_TOKEN_MAX_LEN);
    rdzv_server_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for the store");
    s->loop = loop;
    s->lim.max_key_len = or_default(opts->max_key_len, RDZV_MAX_KEY_LEN);
    s->lim.max_value_len = or_default(opts->max_value_len, RDZV_MAX_VALUE_LEN);
    s->lim.max_keys = or_default(opts->max_keys_per_req, RDZV_MAX_KEYS_PER_REQ);
    s->lim.max_frame = RDZV_MAX_FRAME_LEN;
    if (s->lim.max_frame < 2 * s->lim.max_value_len + s->lim.max_key_len + 64)
        s->lim.max_frame = 2 * s->lim.max_value_len + s->lim.max_key_len + 64;
    s->max_conns = or_default(opts->max_conns, RDZV_MAX_CONNS);
    s->max_out_buf = or_default(opts->max_out_buf, RDZV_MAX_OUT_BUF);
    s->max_total_mem = or_default(opts->max_total_mem, RDZV_MAX_TOTAL_MEM);
    s->auth_idle_ms = opts->auth_idle_ms > 0 ? (uint64_t)opts->auth_idle_ms : RDZV_AUTH_IDLE_MS;
    if (has_token) {
        memcpy(s->token, opts->token, opts->token_len);
        s->token_len = opts->token_len;
    }
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (s->buckets == NULL || rdzv__random(&s->seed, sizeof s->seed) < 0) {
        free(s->buckets);
        free(s);
        return ddp_err_set(err, -ENOMEM, "out of memory for the store");
    }
    s->st.mem_used = sizeof *s + s->nbuckets * sizeof *s->buckets;
    int fd = listen_socket(opts->host, opts->port, err);
    if (fd < 0) {
        free(s->buckets);
        free(s);
        return fd;
    }
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0) {
        if (sa.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&sa, ip, sizeof ip);
            s->port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
            snprintf(s->addr, sizeof s->addr, "[%s]:%u", ip, s->port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&sa, ip, sizeof ip);
            s->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
            snprintf(s->addr, sizeof s->addr, "%s:%u", ip, s->port);
        }
    }
    int rc = uv_tcp_init(loop, &s->listener);
    if (rc < 0) {
        close(fd);
        free(s->buckets);
        free(s);
        return ddp_err_set(err, rc, "unable to listen on %s: %s", opts->host, uv_strerror(rc));
    }
    s->listener.data = s;
    s->live_handles = 1;
    rc = uv_tcp_open(&s->listener, fd);
    if (rc < 0)
        close(fd); /* not adopted by the handle */
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 65535, on_connection);
    if (rc == 0) {
        rc = uv_timer_init(loop, &s->timer);
        if (rc == 0) {
            s->timer.data = s;
            s->live_handles++;
            uint64_t tick = s->auth_idle_ms / 4;
            tick = tick < 20 ? 20 : tick > 1000 ? 1000 : tick;
            rc = uv_timer_start(&s->timer, on_timer, tick, tick);
        }
    }
    if (rc < 0) {
        /* The handles go through uv_close; the memory is freed once the loop runs. */
        ddp_err_set(err, rc, "unable to listen on %s: %s", s->addr, uv_strerror(rc));
        rdzv_server_close(s, NULL, NULL);
        return rc;
    }
    *out = s;
    return 0;
}

uint16_t rdzv_server_port(const rdzv_server_t *s) {
    return s->port;
}

const char *rdzv_server_addr(const rdzv_server_t *s) {
    return s->addr;
}

void rdzv_server_close(rdzv_server_t *s, void (*close_cb)(void *arg), void *arg) {
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    s->close_cb = close_cb;
    s->close_arg = arg;
    while (s->conns != NULL)
        conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    if (s->live_handles > 1)
        uv_close((uv_handle_t *)&s->timer, on_server_handle_closed);
    if (s->rtimer_live) {
        s->rtimer_live = 0;
        uv_close((uv_handle_t *)&s->rtimer, on_server_handle_closed);
    }
    rdzv_runs_free(s->runs);
    s->runs = NULL;
    rdzv_actions_close(&s->acts);
}

void rdzv_server_stats(const rdzv_server_t *s, rdzv_server_stats_t *out) {
    *out = s->st;
}

void rdzv_server_set_log(rdzv_server_t *s, int max_level, rdzv_log_fn fn, void *arg) {
    s->log_level = max_level;
    s->log_fn = fn;
    s->log_arg = arg;
}

void rdzv_server_log_to_ddp(void *arg, int level, const char *msg) {
    (void)arg;
    ddp_log(level, "%s", msg);
}
