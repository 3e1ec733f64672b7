/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server: the ddprun store served on a libuv loop, embedded in an agent or run by the
 * ddp-rendezvous daemon (rendezvous/server/main.c). */
#ifndef RDZV_SERVER_H
#define RDZV_SERVER_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"

typedef struct rdzv_server rdzv_server_t;

typedef struct rdzv_server_opts {
    const char *host;  /* address to bind (e.g. "127.0.0.1"); never all interfaces unless
                          the caller passes "0.0.0.0" or "::" explicitly */
    uint16_t port;     /* 0 = kernel picks; read it back with rdzv_server_port */
    const void *token; /* job token; NULL with no_auth = 1 serves unauthenticated */
    size_t token_len;
    int no_auth; /* explicit opt-out: the caller logs the one warning */
    /* Limits; 0 = the default from rdzv_limits.h. */
    size_t max_key_len, max_value_len, max_keys_per_req, max_conns;
    size_t max_out_buf, max_total_mem;
    int auth_idle_ms; /* close connections that have not authenticated by then */
    /* With a token: connections still in their handshake; past it (or past max_conns) a newcomer
     * evicts the oldest of them. 0 = max(8, max_conns / 4), never above max_conns. Unused
     * with no_auth. */
    size_t max_unauth_conns;
    /* The workers' store (what PyTorch's init_process_group reaches through MASTER_ADDR and
     * MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE=True): TCPStore's commands only, ddprun's
     * rendezvous commands refused; it requires no_auth (PyTorch's client cannot authenticate).
     * No handshake deadline: PyTorch <= 2.0 opens a second connection that never sends. Each
     * connection's first frame tells its numbering: VALIDATE with its magic is PyTorch >= 2.2's
     * (and ddprun's), anything else PyTorch <= 2.0's (docs/protocol.md). */
    int worker_store;
    /* The worker processes this store serves (workers' store only; 0: unknown). With it, the
     * default max_conns and max_total_mem are fitted to them (RDZV_WSTORE_* in rdzv_limits.h)
     * instead of the shared store's defaults; rdzv_server_set_workers changes it later. */
    size_t workers;
    /* Serve only this process's user on this host: a connection whose peer socket the kernel
     * finds in this network namespace (sock_diag) must be owned by the effective uid of the
     * process that started the server, or it is refused (closed at once, one rate-limited
     * warning naming the peer and its uid). A loopback peer that cannot be checked is refused
     * too; a peer the kernel does not know is on another host and is admitted. The start fails
     * when the kernel cannot answer such a lookup at all. */
    int owner_only;
    /* Served by an agent (not the ddp-rendezvous daemon): JOIN replies say so
     * (RDZV_STORE_EMBEDDED), so that the other nodes know nobody will restart it when it goes. */
    int embedded;
} rdzv_server_opts_t;

/* Binds, listens and starts serving on loop. On success *out is the server: caller owns;
 * stop with rdzv_server_close. Errors (-errno, DDP_E*) are described in err, naming the address.
 * It fits max_conns to the process's open-file limit first: the soft RLIMIT_NOFILE is raised (up
 * to the hard limit) to max_conns plus a reserve when needed, which processes started later
 * inherit; when even the hard limit is short, max_conns shrinks. rdzv_server_nofile_note says
 * which, for the caller to log. */
int rdzv_server_start(uv_loop_t *loop, const rdzv_server_opts_t *opts, rdzv_server_t **out,
                      ddp_err_t *err);

/* What rdzv_server_start did about the open-file limit, as one line (no newline): NULL when the
 * limit already fit. *level (may be NULL) is the ddp_log level to log it at: WARN when an explicit
 * max_conns was clipped, INFO when the default was clipped or the soft limit raised. Borrowed;
 * valid until close. */
const char *rdzv_server_nofile_note(const rdzv_server_t *s, int *level);

/* The port actually bound. */
uint16_t rdzv_server_port(const rdzv_server_t *s);

/* Closes the listener and every connection (parked waits are dropped) and frees the server once
 * libuv has released its handles; close_cb (may be NULL) runs then, with arg. */
void rdzv_server_close(rdzv_server_t *s, void (*close_cb)(void *arg), void *arg);

/* --- Additions (ddprun store v1): stats, logging and the bound address. --- */

/* Empties the store for a new group of workers: closes every connection (parked waits are
 * dropped) and drops every key and queue; the listener stays, on the same port. The next group
 * never sees a key of the previous one, whatever prefix its keys have (PyTorch >= 2.x puts none
 * on the agent's store). */
void rdzv_server_reset(rdzv_server_t *s);

/* Fits a workers' store's default limits (max_conns, max_total_mem: those the options left at
 * 0) to workers processes, as rdzv_server_opts_t.workers does at start: several nodes learn
 * their world size only when the rendezvous round completes. Connections already open stay
 * open past a lowered limit; newcomers meet it. Does nothing on other stores or with 0. */
void rdzv_server_set_workers(rdzv_server_t *s, size_t workers);

/* Whether this store may serve run_id's rendezvous now: consulted before any rendezvous command
 * (JOIN, HEARTBEAT, ...) reaches the rounds. When it answers 0 the command is refused with
 * DDP_ECLOSED and the text "this store no longer serves the rendezvous", and the connection
 * closes: a client treats it as a lost store and looks for the one that serves now. An agent
 * elected through etcd installs its lease check, so that a leader resumed past its lease (its
 * loss not yet noticed by its timer) never accepts a JOIN; ddp-rendezvous --etcd, its lease of each
 * run it stands for (the other runs it serves always). A negative answer is "not yet" (the
 * store is loading what its predecessor left, rdzv_server_restore_*): the command is refused
 * with that code (RDZV_NOT_YET) and the text "... not serving yet ...", on a connection that
 * stays open: the client asks again shortly. Every command's reply carries the refusal's code
 * and text (rdzv_round_refusal_encode). NULL (the default): always serves. The key-value
 * commands are not affected. */
typedef int (*rdzv_server_may_serve_fn)(void *arg, const char *run_id);
void rdzv_server_set_may_serve(rdzv_server_t *s, rdzv_server_may_serve_fn fn, void *arg);
#define RDZV_NOT_YET (-EAGAIN)

/* Where the rendezvous of run_id is served when this store does not serve it (may_serve answered
 * 0): a store candidate at an address known in advance (--rdzv_conf etcd_stores) that does not
 * lead knows the leader's store from the election. fn writes "HOST:PORT" (rdzv_etcd_store's
 * format, at most cap bytes with its NUL) into out and returns 1, or returns 0 when it knows no
 * other store (a deposed leader), RDZV_NOT_YET when the election has named none yet. The command
 * is then refused with RDZV_MOVED and that address as the text, on a connection that stays open
 * (the client connects there), or as may_serve's 0 and "not yet" answers are. NULL (the default):
 * no redirection. */
typedef int (*rdzv_server_redirect_fn)(void *arg, const char *run_id, char *out, size_t cap);
void rdzv_server_set_redirect(rdzv_server_t *s, rdzv_server_redirect_fn fn, void *arg);

/* What must outlive this store, for a caller that keeps it elsewhere: an agent elected through
 * etcd writes it there (fenced on its leadership), and the store elected after it loads it back
 * (rdzv_server_restore_*) before it serves. Called from the loop once the event that decided it
 * has been carried out; the strings are borrowed for the call. */
typedef struct rdzv_server_durable {
    /* run_id passed its exit barrier at round (FINISH): the run is DONE for good. */
    void (*run_done)(void *arg, const char *run_id, int64_t round);
    /* host's quarantine record in run_id: the group failures counted against it, whether that
     * excluded it (max_node_failures), its last failure. */
    void (*host_record)(void *arg, const char *run_id, const char *host, int64_t failures,
                        int excluded, const char *last_failure);
} rdzv_server_durable_t;

/* Installs d (NULL: none; borrowed until the server closes or another is set). */
void rdzv_server_set_durable(rdzv_server_t *s, const rdzv_server_durable_t *d, void *arg);

/* Loads a record a predecessor kept (rdzv_server_durable_t) into the rounds: run_id DONE at
 * round; host's record in run_id. A run made for a record takes its configuration from its
 * first JOIN. Returns 0, or DDP_EUSAGE (out of range), DDP_ETOOBIG, -ENOMEM with err set. */
int rdzv_server_restore_done(rdzv_server_t *s, const char *run_id, int64_t round, ddp_err_t *err);
int rdzv_server_restore_host(rdzv_server_t *s, const char *run_id, const char *host,
                             int64_t failures, int excluded, const char *last_failure,
                             ddp_err_t *err);

/* Drops what earlier rounds of run_id left in the store: the round keys under round_keys
 * ("<round_keys><run_id>/<round>/...", rdzv_layout.h; NULL or "": none) and the round-end keys
 * ("__rdzv/<run_id>/end/<round>") of every round below `before`. A key with a parked waiter keeps
 * its entry (the waiter's), not its value. The server calls it when a round closes (keeping the
 * previous round's), with the round_keys the run's first JOIN carried; an agent hosting a
 * one-node job's store calls it before each restarted group, with its workers' prefix. Without it
 * they accumulate, one set a round, for as long as the store lives. */
void rdzv_server_forget_rounds(rdzv_server_t *s, const char *run_id, const char *round_keys,
                               int64_t before);

/* Counters a caller may read at any time from the loop's thread. */
typedef struct rdzv_server_stats {
    uint64_t conns;         /* open connections */
    uint64_t conns_total;   /* accepted since start */
    uint64_t conns_refused; /* closed at once: connection limit, every slot authenticated */
    uint64_t keys;          /* keys with a value (GETNUMKEYS) */
    uint64_t queued;        /* items in queues (QUEUE_PUSH, not yet popped) */
    uint64_t waiting;       /* connections with a parked WAIT, GET_WAIT or BARRIER */
    uint64_t mem_used;      /* bytes accounted against max_total_mem */
    uint64_t requests;      /* requests served */
    uint64_t bad_frames;    /* connections closed for a malformed or oversized frame */
    uint64_t auth_refused;  /* connections closed for a wrong proof or unauthenticated use */
    uint64_t idle_closed;   /* connections closed for not authenticating within auth_idle_ms */
    uint64_t slow_closed;   /* connections cut off past max_out_buf */
    uint64_t mem_refused;   /* connections closed because max_total_mem was reached */
    uint64_t hs_evicted;    /* unauthenticated (workers' store: never used) connections
                               closed to admit a newcomer */
    uint64_t owner_refused; /* closed at once: a local peer of another user (owner_only) */
} rdzv_server_stats_t;

/* Fills *out with the current counters. */
void rdzv_server_stats(const rdzv_server_t *s, rdzv_server_stats_t *out);

/* Receives the server's events (one line each, no newline, at a ddp_log level): peers accepted
 * (debug), connections closed for bad frames, failed authentication, slow reading or memory
 * (warn, naming the peer ip:port), and connections refused, evicted or past the handshake
 * deadline (warn, naming the peer; at most one such line a second, the next one counting those
 * left out). msg is borrowed for the call. */
typedef void (*rdzv_log_fn)(void *arg, int level, const char *msg);

/* Sets the event sink; events above max_level are not even formatted. The server never logs
 * by itself: with no sink (the default) events only update the counters. */
void rdzv_server_set_log(rdzv_server_t *s, int max_level, rdzv_log_fn fn, void *arg);

/* A ready-made sink for programs: forwards each event to ddp_log (arg unused). */
void rdzv_server_log_to_ddp(void *arg, int level, const char *msg);

/* The bound address as "ADDR:PORT" ("[ADDR]:PORT" for IPv6); borrowed, valid until close. */
const char *rdzv_server_addr(const rdzv_server_t *s);

/* ---- Prometheus metrics (rdzv_metrics.c) ---- */

/* Appends s's metrics in Prometheus' text exposition format (0.0.4) to out: connections (open,
 * accepted, refused, closed by reason), requests by command, parked waits, keys, queued items,
 * memory and its limit, and per rendezvous run its round, restarts, members by state and each
 * member's silence. Returns 0 or -ENOMEM. Call it from the loop's thread. */
int rdzv_server_metrics(const rdzv_server_t *s, ddp_buf_t *out);

/* An HTTP listener on host:port (0: the kernel picks) answering GET /metrics with
 * rdzv_server_metrics(s) (s may be NULL: none) followed by what extra (may be NULL) appends,
 * on loop: HTTP/1.0 and 1.1, one request per connection, at most 16 connections, each closed
 * after 5 s; anything else gets 404 or 405. extra returns 0 or -ENOMEM. */
typedef struct rdzv_metrics rdzv_metrics_t;
typedef int (*rdzv_metrics_extra_fn)(void *ctx, ddp_buf_t *out);
int rdzv_metrics_start(uv_loop_t *loop, const rdzv_server_t *s, rdzv_metrics_extra_fn extra,
                       void *extra_ctx, const char *host, uint16_t port, rdzv_metrics_t **out,
                       ddp_err_t *err);
/* The bound address as "ADDR:PORT" ("[ADDR]:PORT" for IPv6); borrowed, valid until close. */
const char *rdzv_metrics_addr(const rdzv_metrics_t *m);
/* v as a label value of the text format (backslash, quote and newline escaped) into out (cap
 * bytes; cut, never mid-escape, when too long: RDZV_LABEL_MAX holds any run id or host whole);
 * returns out, for use as a printf argument. */
const char *rdzv_metrics_label(const char *v, char *out, size_t cap);
/* Closes the listener and its connections; the memory goes once libuv released the handles. */
void rdzv_metrics_close(rdzv_metrics_t *m);

/* The store served on a thread of its own, for programs without a libuv loop of their own (the
 * worker library's tests, benchmarks). rdzv_server_thread.c, linked only by those who call it. */
typedef struct rdzv_server_thread rdzv_server_thread_t;

/* Starts the store (as rdzv_server_start, on a loop of the new thread). Returns 0, or a negative
 * code described in err (nothing left running). */
int rdzv_server_thread_start(const rdzv_server_opts_t *opts, rdzv_server_thread_t **out,
                             ddp_err_t *err);

/* The port it listens on. */
uint16_t rdzv_server_thread_port(const rdzv_server_thread_t *t);

/* Closes the store, joins the thread and frees t (NULL is a no-op). */
void rdzv_server_thread_stop(rdzv_server_thread_t *t);

#endif
