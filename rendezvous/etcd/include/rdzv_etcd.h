/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd: an asynchronous client of etcd v3 through its JSON gateway (HTTP/1.1 POSTs of JSON
 * to /v3/kv/..., /v3/lease/..., the streaming /v3/watch), driven by the caller's libuv loop so
 * that it never blocks the agent's supervision.
 *
 * HTTP is libcurl's multi interface, loaded at run time (dlopen "libcurl.so.4"): a program that
 * never creates a client needs no libcurl. Each call is one HTTP request on the client's
 * connection pool; calls run concurrently. A call that cannot connect to an endpoint is tried on
 * the next one of the list, within its timeout; the endpoint that answered last is tried first.
 *
 * Every callback runs from the loop, never from inside an rdzv_etcd_* call, and runs exactly once
 * for each call that returned 0 (a watch: any number of event deliveries, then exactly one final
 * call). No callback runs after the close callback. Everything runs on the loop's thread. Keys
 * and values are bytes; a key prefix is the caller's business. */
#ifndef RDZV_ETCD_H
#define RDZV_ETCD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ddp_err.h"

typedef struct rdzv_etcd rdzv_etcd_t;
typedef struct rdzv_etcd_watch rdzv_etcd_watch_t;

/* Bounds: endpoints in a list, bytes of one reply (a range's kvs included) or of one watch
 * message, keys/ops/compares in one txn (etcd's own default limit is 128 ops). */
#define RDZV_ETCD_MAX_ENDPOINTS 16
#define RDZV_ETCD_REPLY_LIMIT ((size_t)16 * 1024 * 1024)
#define RDZV_ETCD_TXN_MAX_OPS 128
#define RDZV_ETCD_DEFAULT_TIMEOUT_MS 5000

typedef struct rdzv_etcd_opts {
    /* "HOST:PORT[,HOST:PORT...]" (at most RDZV_ETCD_MAX_ENDPOINTS), tried in turn. */
    const char *endpoints;
    /* Bound on each call from submission to its callback, connection attempts included
     * (0: RDZV_ETCD_DEFAULT_TIMEOUT_MS). A watch uses it for connecting only. */
    int timeout_ms;
    /* etcd authentication (/v3/auth/authenticate): both or neither. */
    const char *user, *password;
    /* TLS: with ca_file set the endpoints are https://; cert_file/key_file: a client certificate
     * (both or neither). Files are read by libcurl. */
    const char *ca_file, *cert_file, *key_file;
    /* Bound on one reply or watch message (0: RDZV_ETCD_REPLY_LIMIT). */
    size_t reply_limit;
} rdzv_etcd_opts_t;

/* One key-value pair as etcd stores it. key and value are followed by a NUL not counted in
 * their lengths (so text keys print as strings). */
typedef struct rdzv_etcd_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
} rdzv_etcd_kv_t;

/* The decoded result of a call; fields a call does not set are 0/NULL. Borrowed: valid only
 * during the callback. */
typedef struct rdzv_etcd_result {
    int64_t revision;          /* the store's revision when the call ran (header.revision) */
    const rdzv_etcd_kv_t *kvs; /* get: the pairs (values left out with keys_only) */
    size_t n_kvs;
    int64_t count;     /* get: how many keys matched (may exceed n_kvs with a limit) */
    int more;          /* get: 1 when a limit left keys out */
    int64_t deleted;   /* delete: how many keys went */
    int succeeded;     /* txn: 1 when the compares held and the success ops ran */
    int64_t lease_id;  /* lease grant/keepalive */
    int64_t lease_ttl; /* lease grant/keepalive: seconds */
} rdzv_etcd_result_t;

/* Completion of one call: status 0 and res, or a negative code and errtext (res NULL): one line
 * naming the endpoint and what failed, e.g.
 *   "http://127.0.0.1:2379/v3/kv/put: HTTP 400: etcdserver: ...".
 * Codes: DDP_ETIMEOUT, DDP_ECANCELED (closed first), DDP_EPROTO (malformed reply, HTTP error),
 * DDP_ETOOBIG (reply over the limit), DDP_ENOKEY (lease not found), DDP_EAUTH (credentials
 * refused or token expired; the next call authenticates again), -ECONNREFUSED (no endpoint
 * answered), DDP_EUSAGE (etcd refused the request as invalid). */
typedef void (*rdzv_etcd_cb)(void *arg, int status, const rdzv_etcd_result_t *res,
                             const char *errtext);

/* Starts a client on loop. Loads libcurl (the first time): when it is missing, fails with
 * DDP_EUSAGE and "libcurl.so.4 not loadable (Debian package libcurl4): ...". Never blocks, sends
 * nothing yet. opts is copied. Returns 0 with *out set (caller owns it: rdzv_etcd_close), or a
 * negative code described in err (*out NULL): DDP_EUSAGE (bad endpoint list, half of a pair),
 * -ENOMEM, a uv error. */
int rdzv_etcd_new(uv_loop_t *loop, const rdzv_etcd_opts_t *opts, rdzv_etcd_t **out, ddp_err_t *err);

/* Closes the client: every pending call completes with DDP_ECANCELED and every watch ends with
 * DDP_ECANCELED, then close_cb(arg) runs (may be NULL) and the client is freed, all from the
 * loop. Calls made after this are refused. NULL is allowed; a second call is ignored. */
void rdzv_etcd_close(rdzv_etcd_t *c, void (*close_cb)(void *arg), void *arg);

/* The endpoint the next call tries first, as "http://HOST:PORT"; borrowed, valid until the next
 * call's callback or the close. */
const char *rdzv_etcd_endpoint(const rdzv_etcd_t *c);

/* The loop the client runs on. */
uv_loop_t *rdzv_etcd_loop(const rdzv_etcd_t *c);

/* Number of calls accepted and not completed (watches included). */
size_t rdzv_etcd_pending(const rdzv_etcd_t *c);

/* Every call below returns 0 when accepted (cb runs later, exactly once) or a negative code
 * described in err (may be NULL), cb never called: DDP_ECANCELED (closing), DDP_ETOOBIG (more
 * than RDZV_ETCD_TXN_MAX_OPS ops, a request over the reply limit), -EINVAL, -ENOMEM. Keys and
 * values are copied. */

enum {
    RDZV_ETCD_PREFIX = 1,    /* get/delete/watch: every key that starts with key */
    RDZV_ETCD_KEYS_ONLY = 2, /* get: the keys and revisions, no values */
    RDZV_ETCD_COUNT_ONLY = 4 /* get: count alone */
};

/* Range: key alone, or (RDZV_ETCD_PREFIX) every key under it, at most limit pairs (0: all) in
 * key order. Result: kvs, count, more, revision. */
int rdzv_etcd_get(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags, int64_t limit,
                  rdzv_etcd_cb cb, void *arg, ddp_err_t *err);

/* Put key = value, attached to lease (0: none). Result: revision (of the put). */
int rdzv_etcd_put(rdzv_etcd_t *c, const void *key, size_t key_len, const void *val, size_t val_len,
                  int64_t lease, rdzv_etcd_cb cb, void *arg, ddp_err_t *err);

/* Delete key, or (RDZV_ETCD_PREFIX) every key under it. Result: deleted, revision. */
int rdzv_etcd_delete(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags,
                     rdzv_etcd_cb cb, void *arg, ddp_err_t *err);

/* A txn compare: key's target field, compared (cmp) with the number or value given. */
typedef enum {
    RDZV_ETCD_CMP_VERSION,
    RDZV_ETCD_CMP_CREATE,
    RDZV_ETCD_CMP_MOD,
    RDZV_ETCD_CMP_VALUE
} rdzv_etcd_target_t;
typedef enum {
    RDZV_ETCD_EQUAL,
    RDZV_ETCD_GREATER,
    RDZV_ETCD_LESS,
    RDZV_ETCD_NOT_EQUAL
} rdzv_etcd_cmp_t;
typedef struct rdzv_etcd_compare {
    const void *key;
    size_t key_len;
    rdzv_etcd_target_t target;
    rdzv_etcd_cmp_t cmp;
    int64_t number;    /* VERSION, CREATE, MOD */
    const void *value; /* VALUE */
    size_t value_len;
} rdzv_etcd_compare_t;

/* A txn op: a put (value, lease) or a delete (prefix in flags). */
typedef struct rdzv_etcd_op {
    enum { RDZV_ETCD_OP_PUT, RDZV_ETCD_OP_DELETE } kind;
    const void *key;
    size_t key_len;
    const void *value;
    size_t value_len;
    int64_t lease;
    unsigned flags;
} rdzv_etcd_op_t;

typedef struct rdzv_etcd_txn {
    const rdzv_etcd_compare_t *compares;
    size_t n_compares;
    const rdzv_etcd_op_t *success, *failure;
    size_t n_success, n_failure;
} rdzv_etcd_txn_t;

/* Txn: when every compare holds, the success ops run, else the failure ops; atomically. Result:
 * succeeded (which branch ran), revision (after the txn). */
int rdzv_etcd_txn(rdzv_etcd_t *c, const rdzv_etcd_txn_t *txn, rdzv_etcd_cb cb, void *arg,
                  ddp_err_t *err);

/* Grant a lease of ttl_s seconds (1..INT32_MAX). Result: lease_id, lease_ttl. */
int rdzv_etcd_lease_grant(rdzv_etcd_t *c, int64_t ttl_s, rdzv_etcd_cb cb, void *arg,
                          ddp_err_t *err);

/* Renew lease id once (the caller repeats it, e.g. every ttl/3). Result: lease_id, lease_ttl;
 * DDP_ENOKEY when the lease expired or never existed. */
int rdzv_etcd_lease_keepalive(rdzv_etcd_t *c, int64_t id, rdzv_etcd_cb cb, void *arg,
                              ddp_err_t *err);

/* Revoke lease id: its keys are deleted. DDP_ENOKEY when it is not there. */
int rdzv_etcd_lease_revoke(rdzv_etcd_t *c, int64_t id, rdzv_etcd_cb cb, void *arg, ddp_err_t *err);

/* One change a watch saw. kv is the key after the change (a delete: key and mod_revision). */
typedef struct rdzv_etcd_event {
    enum { RDZV_ETCD_EV_PUT, RDZV_ETCD_EV_DELETE } type;
    rdzv_etcd_kv_t kv;
} rdzv_etcd_event_t;

/* One watch message: created (the watch is in place; no event), or events, in revision order. */
typedef struct rdzv_etcd_watch_msg {
    int64_t revision;
    int created;
    int64_t compact_revision; /* > 0: start_revision was compacted away (the watch then ends) */
    const rdzv_etcd_event_t *events;
    size_t n_events;
} rdzv_etcd_watch_msg_t;

/* A watch's deliveries: status 0 with msg (borrowed, valid during the call), any number of
 * times; then exactly once a final call with status < 0 and msg NULL: DDP_ECANCELED
 * (rdzv_etcd_watch_cancel or close), DDP_ECLOSED (the stream ended), DDP_EPROTO, DDP_ETOOBIG,
 * -ECONNREFUSED..., errtext naming the endpoint. */
typedef void (*rdzv_etcd_watch_cb)(void *arg, int status, const rdzv_etcd_watch_msg_t *msg,
                                   const char *errtext);

/* Watches key, or (RDZV_ETCD_PREFIX) every key under it, from start_revision (0: from now).
 * Events stream as etcd sends them. *out (may be NULL) is the handle for rdzv_etcd_watch_cancel,
 * valid until the final callback. */
int rdzv_etcd_watch(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags,
                    int64_t start_revision, rdzv_etcd_watch_cb cb, void *arg,
                    rdzv_etcd_watch_t **out, ddp_err_t *err);

/* Ends a watch: its final callback runs from the loop with DDP_ECANCELED. Ignored once its
 * final callback is due. */
void rdzv_etcd_watch_cancel(rdzv_etcd_watch_t *w);

#endif
