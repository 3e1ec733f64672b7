/* SPDX-License-Identifier: Apache-2.0
 * rdzv_async_int: what the files of the asynchronous store client (rdzv_async_client.h) share,
 * private to rendezvous/client/: the client, its requests, and the functions that cross files.
 *
 *   rdzv_async_client.c       the connection's life: connect (resolve, retry with backoff),
 *                             the VALIDATE/HMAC handshake, loss of the connection, close, free
 *   rdzv_async_queue.c        requests on their way: queue, pipelined writes, replies matched
 *                             to requests in order, parked waits, the I/O and wait timeouts
 *   rdzv_async_store_calls.c  the store's key-value calls and raw requests: each encodes its
 *                             frame and hands it to the queue
 *
 * The client owns one uv_tcp_t and four timers embedded in it (STYLE 17); requests sit in two
 * FIFO lists: queued (not sent yet) and inflight (sent, reply awaited, matched in order).
 *
 * Connection states:
 *   RESOLVING -> CONNECTING -> HANDSHAKE -> READY        (success)
 *   RESOLVING/CONNECTING -> BACKOFF -> RESOLVING ...     (refused, unreachable: retry)
 *   any -> FAILED  (connect budget spent, handshake failed, connection lost)
 *   any -> CLOSING (rdzv_aclient_close; the client is freed once every handle is released)
 * Timers: t_conn bounds the connect retries, then the handshake when handshake_timeout_ms says
 * so, t_retry is the backoff (and, while CONNECTING, the bound on one unanswered connect), t_io
 * fires when a reply or a write makes no progress for io_timeout_ms, t_wait ends the one parked
 * request's wait. */
#ifndef RDZV_ASYNC_INT_H
#define RDZV_ASYNC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_async_client.h"
#include "rdzv_auth_int.h"

#define MAX_ADDRS 8
#define TEXT_LEN 256

/* Connection states (above). */
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

/* One request: a caller's call, or one step of the handshake (cb NULL). */
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

/* What the queue reports to the connection (rdzv_async_client.c installs these at connect):
 * the queue sees replies and failures first, while the connection's state machine decides what
 * they mean; so the calls run one way, from the connection to the queue. */
typedef struct rdzv_aconn_events {
    /* An established (or handshaking) connection broke: the client goes FAILED and every pending
     * request completes. culprit, when set, is the request whose reply caused it and gets code;
     * every other pending request gets DDP_ECLOSED; then the close notification runs. During
     * the handshake it ends the connect phase instead (rdzv_aconnect_cb). Ignored in any other
     * state. reason is the text without the peer. */
    void (*lost)(rdzv_aclient_t *c, int code, req_t *culprit, const char *reason);
    /* Handles the reply buf[0..n) to one of the handshake's own requests (HELLO, PROOF, PING; r
     * already left the in-flight list and is freed here): sends the next step, or ends the
     * connect phase (ready, or failed with DDP_EAUTH / DDP_EPROTO). */
    void (*handshake_reply)(rdzv_aclient_t *c, req_t *r, const uint8_t *buf, size_t n);
} rdzv_aconn_events_t;

/* The client (opaque in rdzv_async_client.h). */
struct rdzv_aclient {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_timer_t t_conn, t_retry, t_io, t_wait;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_getaddrinfo_t gai;
    const rdzv_aconn_events_t *events; /* the connection's answers to the queue's reports */
    enum state state;
    int open_handles; /* initialised and not yet closed; the client is freed at 0 */
    int tcp_live;     /* tcp initialised and uv_close not yet called */
    int gai_pending, writing, io_armed, finished, authed;
    int connect_ms, io_ms, tries, last_err, gai_failed, deferred_code;
    int handshake_ms; /* t_conn's bound on the handshake; 0: none (io_ms a reply) */
    uint64_t backoff_ms, attempt_ms;
    uint16_t port;
    char *host;
    uint8_t *token;
    size_t token_len;
    char *run_id;        /* rdzv_client_opts_t.run_id, owned; NULL: none */
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

/* uv_timer_stop cannot fail in libuv 1.x (it always returns 0); this keeps that in one place. */
static inline void timer_stop(uv_timer_t *t) {
    int rc = uv_timer_stop(t);
    (void)rc;
}

/* ---- rdzv_async_queue.c ---- */

/* snprintf for messages: a long host name or key may cut the text, which is fine. */
void rdzv__aclient_msgf(char *dst, size_t cap, const char *f, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends r to the FIFO list head/tail. */
void rdzv__aclient_list_push(req_t **head, req_t **tail, req_t *r);

/* Frees r and its frame (no callback). */
void rdzv__aclient_req_free(req_t *r);

/* Completes every queued and in-flight request: culprit with code and reason, the others with
 * other_code ("CMD subject failed: reason"). The lists are detached first, so callbacks that
 * submit or close see an empty client. */
void rdzv__aclient_fail_all(rdzv_aclient_t *c, int code, req_t *culprit, int other_code,
                            const char *reason);

/* Arms t_io while a reply or a write is due, stops it otherwise. A parked request waiting
 * (not canceling) is not due: its own t_wait bounds it. */
void rdzv__aclient_io_update(rdzv_aclient_t *c);

/* Hands the write queue to libuv when no write is in progress; a failed write fails the
 * connection from the loop. */
void rdzv__aclient_flush(rdzv_aclient_t *c);

/* Starts reading replies on the connected socket. Returns 0 or a uv error. */
int rdzv__aclient_read_start(rdzv_aclient_t *c);

/* Moves queued requests to the write queue in order, stopping after a parked one (READY only). */
void rdzv__aclient_pump(rdzv_aclient_t *c);

/* Makes a request of kind for key (NULL: none) in *out; cmd names it in messages. Returns 0,
 * or -EINVAL, -ENOMEM, DDP_ETOOBIG (key too long) described in err. Caller owns *out until it
 * hands it to rdzv__aclient_submit or rdzv__aclient_refuse. */
int rdzv__aclient_req_new(rdzv_aclient_t *c, int kind, const char *cmd, const char *key,
                          rdzv_acb_t cb, void *arg, req_t **out, ddp_err_t *err);

/* Refuses r (may be NULL): describes why in err ("peer: CMD subject refused: why"), frees r and
 * returns code. */
int rdzv__aclient_refuse(rdzv_aclient_t *c, req_t *r, int code, ddp_err_t *err, const char *why);

/* Takes r, whose frame is encoded (rc: the encoders' result): queues it and returns 0 (its
 * callback runs later, exactly once), or frees it and returns the reason described in err
 * (rc itself, DDP_ECANCELED, DDP_ECLOSED, DDP_ETOOBIG, -ENOBUFS). */
int rdzv__aclient_submit(rdzv_aclient_t *c, req_t *r, int rc, ddp_err_t *err);

#endif
