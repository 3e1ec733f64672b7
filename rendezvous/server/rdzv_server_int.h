/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server_int: what the files of the store share (private to rendezvous/server/): the server,
 * its connections, the key table's entries and parked waiters, the memory account, and the
 * functions that cross files.
 *
 *   rdzv_server.c        lifecycle: options, listening socket, handshake deadline, close
 *   rdzv_accept.c        a connection on its way in: accept, admission, read
 *   rdzv_cmds.c          the store commands: frame parsing per connection state, dispatch
 *   rdzv_server_round.c  the glue to the rendezvous state machines (rdzv_round.c)
 *   rdzv_keys.c          the key table, the queues kept beside it, and the waits parked on keys
 *   rdzv_conn.c          a connection on its way out: replies, writing, limits, close
 *   rdzv_server_log.c    the log lines and the rate-limited admission log
 *
 * Calls go down this list, never up: a file uses only those below it. The one way up is the
 * server's conn_ops, through which rdzv_conn.c tells the files above it that a connection
 * closed.
 *
 * Connection states: NEW (must send VALIDATE) -> AUTH (server has a token: only AUTH_HELLO and
 * AUTH_PROOF) -> READY. */
#ifndef RDZV_SERVER_INT_H
#define RDZV_SERVER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <uv.h>

#include "ddp_buf.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"
#include "rdzv_proto.h"
#include "rdzv_round.h"
#include "rdzv_server.h"

enum { ST_NEW = 0, ST_AUTH = 1, ST_READY = 2 };
/* What a parked connection waits for: WAIT's keys (a value or a non-empty queue each), GET_WAIT's
 * value, or a BARRIER's last arrival (its key has a value from the first arrival on). */
enum { WAIT_NONE = 0, WAIT_KEYS = 1, WAIT_GET = 2, WAIT_BARRIER = 3 };

typedef struct entry entry_t;
typedef struct conn conn_t;
typedef struct waiter waiter_t;
typedef struct qitem qitem_t;

/* One QUEUE_PUSH value, oldest first. */
struct qitem {
    qitem_t *next;
    size_t len;
    uint8_t data[];
};

/* A key's queue: TCPStore keeps it apart from the key's value (GET, DELETE_KEY, GETNUMKEYS and
 * LIST_KEYS see values only; CHECK and WAIT count a non-empty queue as ready). */
typedef struct rdzv_queue {
    qitem_t *head, *tail;
    size_t n;
} rdzv_queue_t;

/* One key: present (it has a value), a non-empty queue, or absent with parked waiters. */
struct entry {
    entry_t *next; /* hash chain */
    uint64_t hash;
    waiter_t *waiters; /* doubly linked through e_prev/e_next, newest first */
    rdzv_queue_t *q;   /* NULL when no item is queued (never empty) */
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
    char run_id[RDZV_RUN_ID_MAX + 1]; /* AUTH_HELLO_RUN's run; "" after AUTH_HELLO */
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
    uint8_t legacy;  /* PyTorch <= 2.0's command numbering (worker store only) */
    uint8_t replied; /* a reply was queued during the read being handled: it carries the ACK */
    size_t wait_left;
    waiter_t *waiters;
    auth_state_t *auth;
    /* The run this connection was authenticated for with that run's token (AUTH_HELLO_RUN): it
     * is served that run's rendezvous commands and keys alone (rdzv_scope.c). NULL: the whole
     * store (the store's token, or no authentication). Owned. */
    char *scope;
    uint64_t id; /* the member id the rendezvous knows this connection by */
    char peer[64];
};

/* What a connection's end sets off above rdzv_conn.c; rdzv_server.c fills it. */
typedef struct conn_ops {
    /* c is closing and out of every list (called once, before its close callback): its parked
     * waits go and the rendezvous hears that its member left. */
    void (*conn_gone)(conn_t *c);
    /* A connection's handle has closed (live_handles counted down): a closing server may go. */
    void (*handle_closed)(rdzv_server_t *s);
} conn_ops_t;

struct rdzv_server {
    uv_loop_t *loop;
    conn_ops_t conn_ops;
    uv_tcp_t listener;
    uv_timer_t timer;
    int live_handles;
    int closing;
    void (*close_cb)(void *);
    void *close_arg;
    rdzv_frame_limits_t lim;
    size_t max_conns, max_unauth, max_out_buf, max_total_mem;
    uint64_t auth_idle_ms;
    int worker_store;                   /* rdzv_server_opts_t.worker_store */
    int embedded;                       /* rdzv_server_opts_t.embedded */
    rdzv_server_may_serve_fn may_serve; /* rdzv_server_set_may_serve; NULL: always */
    void *may_serve_arg;
    rdzv_server_redirect_fn redirect; /* rdzv_server_set_redirect; NULL: none */
    void *redirect_arg;
    const rdzv_server_durable_t *durable; /* rdzv_server_set_durable; NULL: none */
    void *durable_arg;
    /* rdzv_server_opts_t.owner_only: the uid a local peer's socket must have. */
    int owner_only;
    uint32_t owner_uid;
    /* Limits the caller chose (not fitted to the workers by rdzv_server_set_workers). */
    int conns_explicit, mem_explicit;
    uint8_t token[RDZV_TOKEN_MAX_LEN];
    size_t token_len;
    entry_t **buckets;
    size_t nbuckets, nentries;
    uint64_t seed;
    conn_t *conns;
    conn_t *hs_head, *hs_tail;
    size_t hs_count; /* connections on the handshake list */
    rdzv_server_stats_t st;
    rdzv_log_fn log_fn;
    void *log_arg;
    int log_level;
    char addr[80];
    uint16_t port;
    /* Admission lines (refused, evicted, handshake deadline, failed accept): the time of the
     * last one logged, and how many were left out since. */
    uint64_t alog_last_ms, alog_skipped;
    int alog_any;
    char nofile_note[240];
    int nofile_level;
    /* Multi-node rendezvous (rdzv_round.c): the runs, the actions their events produce, and one
     * timer armed at their earliest deadline. */
    rdzv_runs_t *runs;
    rdzv_actions_t acts;
    uv_timer_t rtimer;
    int rtimer_live;
    uint64_t next_conn_id;
    uint64_t cmd_counts[256]; /* requests served, by command code (metrics) */
    uint8_t rbuf[RDZV_READ_CHUNK];
};

/* ---- the memory account (max_total_mem) ---- */

/* Moves the account from before to after bytes (either may be 0). */
static inline void mem_acct(rdzv_server_t *s, size_t before, size_t after) {
    s->st.mem_used += after;
    s->st.mem_used -= before;
}

/* 1 when more bytes fit under max_total_mem. */
static inline int mem_allows(rdzv_server_t *s, size_t more) {
    return more <= s->max_total_mem && s->st.mem_used <= s->max_total_mem - more;
}

/* Frees a drained buffer when it holds more than RDZV_IDLE_BUF_KEEP bytes. */
static inline void buf_trim(rdzv_server_t *s, ddp_buf_t *b) {
    if (b->len == 0 && b->cap > RDZV_IDLE_BUF_KEEP) {
        mem_acct(s, b->cap, 0);
        ddp_buf_free(b);
    }
}

/* Frees a buffer and takes it off the account. */
static inline void buf_release(rdzv_server_t *s, ddp_buf_t *b) {
    mem_acct(s, b->cap, 0);
    ddp_buf_free(b);
}

/* ---- rdzv_server.c ---- */

/* A listening socket (non-blocking, close-on-exec, SO_REUSEADDR, TCP_NODELAY) on host:port, the
 * first of host's addresses that binds: the store's and the metrics listener's. Returns the fd,
 * DDP_EUSAGE when host does not resolve, or -errno; err names host (and port). */
int rdzv__listen_socket(const char *host, uint16_t port, ddp_err_t *err);

/* Plans max_conns against the open-file limits soft and hard (RLIM_INFINITY counts as
 * unlimited): *want_soft is the soft limit to ask for (soft itself when no raise is needed or
 * possible). Returns the connections that fit under *want_soft, at most max_conns, at least 1. */
size_t rdzv__nofile_plan(size_t max_conns, uint64_t soft, uint64_t hard, uint64_t *want_soft);

/* ---- rdzv_accept.c ---- */

/* Accepts one pending connection on the listener ls: a new conn in NEW state, reading, on the
 * handshake list. With a token, past max_unauth or max_conns it evicts the oldest connection
 * still in its handshake; it is refused (closed at once, counted, logged) only when max_conns
 * connections have all authenticated, or with no token past max_conns. */
void rdzv__conn_accept(rdzv_server_t *s, uv_stream_t *ls);

/* Writes sa as "IP:PORT" or "[IP]:PORT" into out (cap bytes) and its port into *port. */
void rdzv__addr_format(const struct sockaddr_storage *sa, char *out, size_t cap, uint16_t *port);

/* ---- rdzv_cmds.c ---- */

/* Parses and runs every whole frame in buf[0..len) for c. Returns the bytes consumed; c->need is
 * set when an incomplete frame remains. c may be closing afterwards. */
size_t rdzv__conn_process(conn_t *c, const uint8_t *buf, size_t len);

/* ---- rdzv_server_round.c ---- */

/* Runs one rendezvous command (one of rdzv_commands.h) from c. */
void rdzv__round_dispatch(conn_t *c, const rdzv_round_req_t *r);

/* Refuses c's malformed rendezvous frame cmd (parse error code, err naming the field): answers
 * JOIN and STATUS with an error reply that names it, logs one warning naming the peer, and
 * closes c once the reply is written. */
void rdzv__round_refuse(conn_t *c, uint8_t cmd, int code, const ddp_err_t *err);

/* 1 when c may send rendezvous request r: c holds the store's token (or none is needed), or the
 * run token of r's run. Else r is answered as refused (DDP_EAUTH, the text naming both runs),
 * logged and counted (auth_refused), c is closed, and 0 is returned. */
int rdzv__round_in_scope(conn_t *c, const rdzv_round_req_t *r);
/* Whether the store may serve r now (rdzv_server_set_may_serve): 1 yes; 0 refused (reply, log,
 * close); -1 answered "not yet", or "served at HOST:PORT" (rdzv_server_set_redirect), in a reply
 * that carries the code: the connection goes on with the next frame. */
int rdzv__round_may_serve(conn_t *c, const rdzv_round_req_t *r);

/* c is gone (conn_ops.conn_gone): a member's connection closing is its death, and the
 * rendezvous ends its round at once. Nothing when the server has no runs or is closing. */
void rdzv__round_leave(conn_t *c);

/* ---- rdzv_keys.c ---- */

/* Finds key k or adds it absent. Returns NULL when memory is short. */
entry_t *rdzv__keys_get_or_add(rdzv_server_t *s, const rdzv_slice_t *k);

/* Finds key k, present or not; NULL when unknown. */
entry_t *rdzv__keys_lookup(rdzv_server_t *s, const rdzv_slice_t *k);

/* Removes e when it has neither a value, nor queued items, nor waiters. */
void rdzv__keys_maybe_remove(rdzv_server_t *s, entry_t *e);

/* 1 when a WAIT or CHECK on e is satisfied: it has a value or queued items. */
static inline int rdzv__entry_ready(const entry_t *e) {
    return e != NULL && (e->present || e->q != NULL); /* an emptied queue is freed */
}

/* Drops every value and queued item and frees every entry (no waiter may remain); the bucket
 * array stays, at the size it grew to. */
void rdzv__keys_clear(rdzv_server_t *s);

/* Drops the value and queued items of every key for which keep(ctx, key) is 0; an entry left
 * with neither and no waiter goes. */
void rdzv__keys_drop_if(rdzv_server_t *s, int (*keep)(void *ctx, const uint8_t *key, size_t n),
                        void *ctx);

/* Frees every entry and the bucket array (server teardown; no waiter may remain). */
void rdzv__keys_free(rdzv_server_t *s);

/* Takes e's value off (it stays in the table: rdzv__keys_maybe_remove decides). */
void rdzv__entry_drop_value(rdzv_server_t *s, entry_t *e);

/* Replaces e's value. Returns 0 or -ENOMEM (memory limit or malloc). */
int rdzv__entry_set(rdzv_server_t *s, entry_t *e, const void *v, size_t n);

/* e just got a value: answers the waits parked on it. */
void rdzv__keys_wake(rdzv_server_t *s, entry_t *e);

/* Appends a copy of v[0..n) to e's queue. Returns 0, -ENOMEM (memory limit or malloc) or
 * -ENOSPC (RDZV_MAX_QUEUE_LEN items queued). */
int rdzv__queue_push(rdzv_server_t *s, entry_t *e, const void *v, size_t n);

/* Takes the oldest item off e's queue (NULL when it is empty); the caller frees it with
 * rdzv__qitem_free once replied. e may be removed when the queue empties. */
qitem_t *rdzv__queue_pop(rdzv_server_t *s, entry_t *e);

/* Frees an item taken by rdzv__queue_pop and takes it off the account. */
void rdzv__qitem_free(rdzv_server_t *s, qitem_t *it);

/* An item was queued on e: answers the oldest WAIT parked on e (one only, as TCPStore: each item
 * is for one blocked pop). GET_WAIT and BARRIER waits stay parked. */
void rdzv__keys_wake_one(rdzv_server_t *s, entry_t *e);

/* Parks c on key e (one not ready for a WAIT or GET_WAIT; a BARRIER's). Returns 0 or -ENOMEM. */
int rdzv__wait_add(conn_t *c, entry_t *e);

/* Drops c's parked wait: unlinks every unfired waiter and frees them all. */
void rdzv__wait_clear(conn_t *c);

/* ---- rdzv_conn.c ---- */

/* Closes c (idempotent): unlinks it, then conn_ops.conn_gone (its waits, the rendezvous). The
 * memory goes in the close callback, so c stays readable until the next loop turn. */
void rdzv__conn_close(conn_t *c);

/* Closes c with one warning line naming the peer; counter is the stat to bump (may be NULL). */
__attribute__((format(printf, 3, 4))) void rdzv__conn_fail(conn_t *c, uint64_t *counter,
                                                           const char *fmt, ...);

/* Hands queued replies to the kernel. */
void rdzv__conn_flush(conn_t *c);

/* c finished its handshake (VALIDATE, and authentication when the server has a token): it leaves
 * the handshake list and its deadline. */
void rdzv__conn_ready(conn_t *c);

/* Reply helpers: append to c->out and keep the memory account; on allocation failure or past the
 * output cap the connection is cut off. They return 0 or -1 (connection closing). */
int rdzv__reply_u8(conn_t *c, uint8_t v);
int rdzv__reply_u32(conn_t *c, uint32_t v);
int rdzv__reply_i64(conn_t *c, int64_t v);
int rdzv__reply_blob(conn_t *c, const void *p, size_t n);
int rdzv__reply_bytes(conn_t *c, const uint8_t *p, size_t n);

/* Closes c, accepted but never linked into the server's lists (refused at admission). */
void rdzv__conn_discard(conn_t *c);

/* ---- rdzv_server_log.c ---- */

/* Sends one event line to the server's log sink (when set and level is enabled). */
__attribute__((format(printf, 3, 4))) void rdzv__slog(rdzv_server_t *s, int level, const char *fmt,
                                                      ...);

/* Logs one admission event (a connection refused, evicted or past the handshake deadline, a failed
 * accept) as a warning, at most one line per RDZV_ADMIT_LOG_MS; a line left out is counted, and
 * the next line logged (or the deadline timer, when none comes) says how many. */
__attribute__((format(printf, 2, 3))) void rdzv__admit_log(rdzv_server_t *s, const char *fmt, ...);

/* Says how many admission lines were left out once a quiet second has passed, so that the count
 * of a burst shows up even when no event follows it (the handshake deadline's timer). */
void rdzv__admit_log_flush(rdzv_server_t *s, uint64_t now);

#endif
