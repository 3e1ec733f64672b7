/* SPDX-License-Identifier: Apache-2.0
 * rdzv_async_client: the asynchronous client of the ddprun store, driven by the caller's libuv loop
 * (the agent's), so that a rendezvous never blocks signal handling or supervision.
 *
 * One client is one TCP connection. Requests are queued and pipelined; the server answers in
 * request order, so replies are matched to requests in order. The exception is a parked request
 * (WAIT, a blocking GET, a raw request flagged RDZV_ACLIENT_PARKS): the server may answer later
 * requests first, so the client sends nothing after a parked request until its reply arrives.
 * A parked wait therefore holds up every later request on its connection: the agent uses one
 * "control" connection for short requests (SET/ADD/JOIN/HEARTBEAT...) and a separate "watch"
 * connection for long parked waits.
 *
 * Every callback runs from the loop, never from inside an rdzv_aclient_* call, and runs exactly
 * once for each request the client accepted (submit call returned 0). No callback runs after
 * the close callback. Everything runs on the loop's thread. */
#ifndef RDZV_ASYNC_CLIENT_H
#define RDZV_ASYNC_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_client.h"

typedef struct rdzv_aclient rdzv_aclient_t;

/* Default bound on bytes queued for sending (requests not yet written, held ones included);
 * past it new requests are refused with -ENOBUFS. rdzv_aclient_set_out_limit changes it. */
#define RDZV_ACLIENT_OUT_LIMIT ((size_t)64 * 1024 * 1024)

/* Completion of one request. status is 0 or a negative code (DDP_ETIMEOUT, DDP_ECLOSED,
 * DDP_ECANCELED, DDP_ENOKEY, DDP_EPROTO, -errno...). On success reply/len is the request's
 * result as documented by each call (may be NULL/0); errtext is NULL. On failure reply is NULL
 * and errtext is one line naming the peer and the key, e.g.
 *   "127.0.0.1:29400: timed out after 5000 ms waiting for key 'x'".
 * reply and errtext are borrowed: valid only during the call. */
typedef void (*rdzv_acb_t)(void *arg, int status, const uint8_t *reply, size_t len,
                           const char *errtext);

/* End of the connection phase (connect retries, VALIDATE, authentication). status 0: ready;
 * else DDP_ETIMEOUT (nothing listened within connect_timeout_ms, a handshake reply did not come
 * within io_timeout_ms, or the handshake did not end within handshake_timeout_ms), DDP_EAUTH
 * (token refused or needed), DDP_ECANCELED (closed first), -errno. errtext as in rdzv_acb_t.
 * Runs exactly once. */
typedef void (*rdzv_aconnect_cb)(void *arg, int status, const char *errtext);

/* An established connection was lost (server closed it, I/O error, io_timeout_ms without
 * progress, protocol error), after every pending request got its callback. Not called for a
 * failed connect, nor after rdzv_aclient_close. */
typedef void (*rdzv_aclose_notify_cb)(void *arg, int status, const char *errtext);

/* Says how long the reply at the start of buf[0..len) is: returns its length (> 0, <= len);
 * 0 when more bytes are needed, with *need set to a total length (> len) worth waiting for; or
 * a negative code (malformed reply: the connection is closed). arg is the request's cb arg. */
typedef long (*rdzv_reply_parser_fn)(void *arg, const uint8_t *buf, size_t len, size_t *need);

/* Flags of rdzv_aclient_raw. */
enum {
    /* The server may hold this reply and answer later requests first (like WAIT): nothing is
     * sent after it until its reply arrives, and io_timeout_ms does not apply to it. */
    RDZV_ACLIENT_PARKS = 1,
};

/* Starts connecting to opts->host:opts->port on loop: resolves and connects, retrying with
 * exponential backoff (uv timers) until opts->connect_timeout_ms; then VALIDATE, and the HMAC
 * handshake when opts->token is set: each of its replies is due within opts->io_timeout_ms, and
 * all of it within opts->handshake_timeout_ms when that is set.
 * Never blocks. cb(arg, status, errtext) reports the outcome. opts is copied (token included).
 * Requests may be submitted at once: they are sent when the connection is ready.
 * Returns 0 with *out set: caller owns the client, whatever the outcome, until it calls
 * rdzv_aclient_close (also after a failed connect). Errors (*out NULL, cb never called):
 * DDP_EUSAGE (no host/port, token too long), -ENOMEM, a uv error, described in err. */
int rdzv_aclient_connect(uv_loop_t *loop, const rdzv_client_opts_t *opts, rdzv_aconnect_cb cb,
                         void *arg, rdzv_aclient_t **out, ddp_err_t *err);

/* Closes the connection: every pending request completes with DDP_ECANCELED (and a connect in
 * progress with DDP_ECANCELED), then close_cb(arg) runs (may be NULL), then the client is freed,
 * from the loop, once libuv has released its handles. Requests submitted after this call are
 * refused. NULL is allowed; a second call is ignored. */
void rdzv_aclient_close(rdzv_aclient_t *c, void (*close_cb)(void *arg), void *arg);

/* Sets the callback told when an established connection is lost (NULL: none). */
void rdzv_aclient_on_close(rdzv_aclient_t *c, rdzv_aclose_notify_cb cb, void *arg);

/* Sets the bound on queued output bytes (0: RDZV_ACLIENT_OUT_LIMIT). */
void rdzv_aclient_set_out_limit(rdzv_aclient_t *c, size_t bytes);

/* "host:port" of the server; borrowed, valid until the close callback. */
const char *rdzv_aclient_peer(const rdzv_aclient_t *c);

/* 1 once the handshake proved the server holds the token, 0 otherwise (no token, server
 * without authentication, or not connected yet). */
int rdzv_aclient_authenticated(const rdzv_aclient_t *c);

/* Number of requests accepted and not yet completed (queued, held or awaiting a reply). */
size_t rdzv_aclient_pending(const rdzv_aclient_t *c);

/* Every submit call below returns 0 when the request is queued (cb runs later, exactly once) or
 * a negative code, described in err (may be NULL), with cb never called: DDP_ETOOBIG (key over
 * 8 KiB, value over 8 MiB, too many keys, frame over 32 MiB), -ENOBUFS (output limit),
 * DDP_ECLOSED (connection lost or never made), DDP_ECANCELED (closing), -EINVAL, -ENOMEM.
 * Keys are NUL-terminated strings; values are copied. */

/* SET key = val. Completes (reply NULL) once the server has applied it: a PING is pipelined
 * behind the SET, whose echo proves it (TCPStore's SET has no reply). */
int rdzv_aclient_set(rdzv_aclient_t *c, const char *key, const void *val, size_t len, rdzv_acb_t cb,
                     void *arg, ddp_err_t *err);

/* Gets key's value, waiting on the server (no polling) up to timeout_ms from this call (< 0:
 * forever; 0: no wait, DDP_ENOKEY when absent). reply/len is the value. On timeout the client
 * sends CANCEL_WAIT and completes with DDP_ETIMEOUT; the connection stays usable. A waiting
 * GET is parked: later requests on this connection wait behind it. */
int rdzv_aclient_get(rdzv_aclient_t *c, const char *key, int timeout_ms, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err);

/* ADD delta to the integer at key (absent = 0). reply is the new value as 8 bytes
 * (rdzv_aclient_reply_i64). */
int rdzv_aclient_add(rdzv_aclient_t *c, const char *key, int64_t delta, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err);

/* WAIT until all n keys exist, up to timeout_ms (< 0: forever); parked like a waiting GET.
 * reply NULL. On timeout: CANCEL_WAIT, DDP_ETIMEOUT, connection still usable. */
int rdzv_aclient_wait(rdzv_aclient_t *c, const char *const *keys, size_t n, int timeout_ms,
                      rdzv_acb_t cb, void *arg, ddp_err_t *err);

/* COMPARE_SET (docs/protocol.md): reply/len is the value now stored (desired when it was set). */
int rdzv_aclient_compare_set(rdzv_aclient_t *c, const char *key, const void *expected,
                             size_t expected_len, const void *desired, size_t desired_len,
                             rdzv_acb_t cb, void *arg, ddp_err_t *err);

/* DELETE_KEY. reply is 8 bytes: 1 deleted, 0 absent (rdzv_aclient_reply_i64). */
int rdzv_aclient_delete(rdzv_aclient_t *c, const char *key, rdzv_acb_t cb, void *arg,
                        ddp_err_t *err);

/* PING: a round trip (liveness of the connection). reply NULL. */
int rdzv_aclient_ping(rdzv_aclient_t *c, rdzv_acb_t cb, void *arg, ddp_err_t *err);

/* Sends a request frame the caller encoded (rdzv_frame_int.h encoders), e.g. the rendezvous
 * round commands, and completes with the reply bytes as parse delimits them (reply/len: the
 * whole reply). frame is copied. flags: RDZV_ACLIENT_PARKS or 0. timeout_ms applies to a
 * parked request only (< 0: none; the server bounds it): when it runs out, the request
 * completes with DDP_ETIMEOUT and the connection is closed (a generic reply cannot be resynced),
 * so pending requests get DDP_ECLOSED. Unparked requests are bounded by io_timeout_ms. what
 * names the request in messages (e.g. "RDZV_JOIN run 'job7'"; NULL: the command's code). */
int rdzv_aclient_raw(rdzv_aclient_t *c, const ddp_buf_t *frame, rdzv_reply_parser_fn parse,
                     unsigned flags, int timeout_ms, const char *what, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err);

/* Ready-made reply parsers for rdzv_aclient_raw (arg unused): a u8, and a u64-length-prefixed
 * blob (at most 32 MiB). */
long rdzv_aclient_parse_u8(void *arg, const uint8_t *buf, size_t len, size_t *need);
long rdzv_aclient_parse_blob(void *arg, const uint8_t *buf, size_t len, size_t *need);

/* Reads an 8-byte integer reply (ADD, DELETE, a raw u64). Returns 0 or DDP_EPROTO (len != 8). */
int rdzv_aclient_reply_i64(const uint8_t *reply, size_t len, int64_t *out);

/* Finds the body of a u64-length-prefixed blob at the start of reply: *p borrows from reply.
 * Returns 0 or DDP_EPROTO (truncated). */
int rdzv_aclient_reply_blob(const uint8_t *reply, size_t len, const uint8_t **p, size_t *n);

#endif
