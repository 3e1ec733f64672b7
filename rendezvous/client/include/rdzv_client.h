/* SPDX-License-Identifier: Apache-2.0
 * rdzv_client: the blocking C client of the ddprun store (agents, workers, tools).
 *
 * The wire protocol is PyTorch c10d TCPStore's (docs/protocol.md) plus ddprun's own commands
 * (authentication, stats). One client is one TCP connection. Thread-compatible: a client may be
 * used by one thread at a time; use one client per thread for concurrency.
 *
 * Every call returns 0 or a negative code (-errno or DDP_E*; text from ddp_strerror) and, when
 * err is not NULL, a one-line message naming the peer and the key, e.g.
 *   "127.0.0.1:29400: timed out after 5000 ms waiting for key 'r1/nccl/0'". */
#ifndef RDZV_CLIENT_H
#define RDZV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_token.h" /* the job token's readers, part of this API */

typedef struct rdzv_client rdzv_client_t;

typedef struct rdzv_client_opts {
    const char *host;  /* name or address; required */
    uint16_t port;     /* required */
    const void *token; /* job token; NULL or token_len 0 = do not authenticate */
    size_t token_len;
    /* With a token: the run this client acts in (AUTH_HELLO_RUN), so that the token may be that
     * run's token (rdzv_run_token) as well as the store's. NULL: the store's token only. */
    const char *run_id;
    int connect_timeout_ms; /* total budget for connect retries (backoff); <= 0 means 30000 */
    int io_timeout_ms;      /* bound on one request/reply exchange; <= 0 means 60000 */
    /* Bound on the whole handshake (VALIDATE, authentication) once connected; <= 0 means
     * io_timeout_ms. A server whose kernel accepts while it does not answer (stopped, hung)
     * holds a connect this long. */
    int handshake_timeout_ms;
} rdzv_client_opts_t;

/* Connects (retrying refused/unreachable with exponential backoff until connect_timeout_ms),
 * sends VALIDATE, and authenticates when a token is given.
 * On success *out is a new client: caller owns; free with rdzv_client_free.
 * Errors: DDP_ETIMEOUT (no listener within the budget), DDP_EAUTH (token refused), -errno. */
int rdzv_client_connect(const rdzv_client_opts_t *opts, rdzv_client_t **out, ddp_err_t *err);

/* Closes the connection and frees the client. NULL is allowed. */
void rdzv_client_free(rdzv_client_t *c);

/* "host:port" of the server; borrowed, valid until rdzv_client_free. */
const char *rdzv_client_peer(const rdzv_client_t *c);

/* SET key = value (value may be empty). */
int rdzv_client_set(rdzv_client_t *c, const char *key, const void *val, size_t len, ddp_err_t *err);

/* Blocking get: WAIT for key (server-side, no polling) up to timeout_ms (< 0: forever; 0: no
 * wait, DDP_ENOKEY when absent), then GET. On timeout sends CANCEL_WAIT and returns DDP_ETIMEOUT.
 * The value replaces out's contents (out->len set; out stays owned by the caller). */
int rdzv_client_get(rdzv_client_t *c, const char *key, int timeout_ms, ddp_buf_t *out,
                    ddp_err_t *err);

/* COMPARE_SET: if key's value == expected (or key absent and expected_len == 0), set desired.
 * out receives the value now stored (desired on success, else the current value; for an absent
 * key with non-empty expected, the expected value, as TCPStore does). */
int rdzv_client_compare_set(rdzv_client_t *c, const char *key, const void *expected,
                            size_t expected_len, const void *desired, size_t desired_len,
                            ddp_buf_t *out, ddp_err_t *err);

/* ADD delta to the integer stored at key (absent = 0); *result gets the new value (may be NULL). */
int rdzv_client_add(rdzv_client_t *c, const char *key, int64_t delta, int64_t *result,
                    ddp_err_t *err);

/* CHECK: *ready = 1 when every key exists, else 0. */
int rdzv_client_check(rdzv_client_t *c, const char *const *keys, size_t n, int *ready,
                      ddp_err_t *err);

/* WAIT until every key exists, up to timeout_ms (< 0: forever). DDP_ETIMEOUT after CANCEL_WAIT. */
int rdzv_client_wait(rdzv_client_t *c, const char *const *keys, size_t n, int timeout_ms,
                     ddp_err_t *err);

/* GETNUMKEYS. */
int rdzv_client_num_keys(rdzv_client_t *c, int64_t *n, ddp_err_t *err);

/* DELETE_KEY: *deleted = 1 when the key existed (may be NULL). */
int rdzv_client_delete(rdzv_client_t *c, const char *key, int *deleted, ddp_err_t *err);

/* APPEND bytes to key's value (creating it). */
int rdzv_client_append(rdzv_client_t *c, const char *key, const void *val, size_t len,
                       ddp_err_t *err);

/* MULTI_GET after waiting for all keys (timeout as rdzv_client_get). vals is an array of n
 * caller-owned buffers, each replaced by the matching value. */
int rdzv_client_multi_get(rdzv_client_t *c, const char *const *keys, size_t n, int timeout_ms,
                          ddp_buf_t *vals, ddp_err_t *err);

/* MULTI_SET keys[i] = vals[i] (lens[i] bytes). */
int rdzv_client_multi_set(rdzv_client_t *c, const char *const *keys, const void *const *vals,
                          const size_t *lens, size_t n, ddp_err_t *err);

/* PING: round trip with a nonce the server echoes. */
int rdzv_client_ping(rdzv_client_t *c, ddp_err_t *err);

/* Barrier of world_size participants named name: ADD(name/count, 1); the last arrival SETs
 * name/done; everyone WAITs for name/done up to timeout_ms. Each name is used once: callers
 * put a round or a sequence number in it. */
int rdzv_client_barrier(rdzv_client_t *c, const char *name, int64_t world_size, int timeout_ms,
                        ddp_err_t *err);

/* --- Additions (ddprun store v1). --- */

/* STATS (a ddprun command): out receives the server's counters as text, one "name value"
 * line each (conns, keys, waiting, mem_used, requests, ...). */
int rdzv_client_stats(rdzv_client_t *c, ddp_buf_t *out, ddp_err_t *err);

/* 1 when the connection authenticated with a token (the server holds the same token, proven by
 * its own MAC), 0 when the server runs without authentication. */
int rdzv_client_authenticated(const rdzv_client_t *c);

#endif
