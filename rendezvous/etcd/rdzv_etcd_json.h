/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_json: the etcd v3 JSON gateway's encoding, as pure functions (no I/O): base64, the
 * request bodies and the decoding of replies and watch messages into rdzv_etcd.h's structs.
 * Replies are untrusted: every field is type- and range-checked, and a reply that does not fit
 * fails with DDP_EPROTO and a reason naming the field. */
#ifndef RDZV_ETCD_JSON_H
#define RDZV_ETCD_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_etcd.h"

/* Bytes the base64 of n bytes takes, its NUL included. */
#define RDZV_ETCD_B64_LEN(n) (((n) + 2) / 3 * 4 + 1)

/* Writes the base64 (RFC 4648, padded) of in[0..n) and a NUL to out (RDZV_ETCD_B64_LEN(n)
 * bytes). Returns the length written, NUL excluded. */
size_t rdzv__etcd_b64_encode(const void *in, size_t n, char *out);

/* Decodes base64 text in[0..n) into out (at least n / 4 * 3 bytes), strictly: length a multiple
 * of 4, padding only at the end, no other character. Returns 0 with *out_len set, or DDP_EPROTO. */
int rdzv__etcd_b64_decode(const char *in, size_t n, uint8_t *out, size_t *out_len);

/* The kinds of call, each with its gateway path and reply shape. */
typedef enum {
    RDZV_ETCD_RANGE,
    RDZV_ETCD_PUT,
    RDZV_ETCD_DELETE,
    RDZV_ETCD_TXN,
    RDZV_ETCD_GRANT,
    RDZV_ETCD_KEEPALIVE,
    RDZV_ETCD_REVOKE,
    RDZV_ETCD_AUTH,
    RDZV_ETCD_WATCH,
} rdzv__etcd_kind_t;

/* The gateway path of kind, e.g. "/v3/kv/range". Static. */
const char *rdzv__etcd_path(rdzv__etcd_kind_t kind);

/* Request bodies. Each returns 0 with *out a NUL-terminated JSON text (caller owns; free()), or
 * -ENOMEM, -EINVAL (a bad enum, a negative number), DDP_ETOOBIG (too many txn ops). */
int rdzv__etcd_enc_range(const void *key, size_t key_len, unsigned flags, int64_t limit,
                         char **out);
int rdzv__etcd_enc_put(const void *key, size_t key_len, const void *val, size_t val_len,
                       int64_t lease, char **out);
int rdzv__etcd_enc_delete(const void *key, size_t key_len, unsigned flags, char **out);
int rdzv__etcd_enc_txn(const rdzv_etcd_txn_t *txn, char **out);
/* GRANT: {"TTL"}, KEEPALIVE and REVOKE: {"ID"}. */
int rdzv__etcd_enc_lease(rdzv__etcd_kind_t kind, int64_t n, char **out);
int rdzv__etcd_enc_watch(const void *key, size_t key_len, unsigned flags, int64_t start_revision,
                         char **out);
int rdzv__etcd_enc_auth(const char *user, const char *password, char **out);

/* A decoded reply or watch message; owns what its pointers point to (rdzv__etcd_reply_free). */
typedef struct rdzv__etcd_reply {
    rdzv_etcd_result_t res;
    rdzv_etcd_kv_t *kvs;
    rdzv_etcd_watch_msg_t watch;
    rdzv_etcd_event_t *events;
    int canceled;   /* watch: etcd ended the watch (e.g. compacted) */
    char *token;    /* AUTH */
    int stream_err; /* a stream's {"error": ...} message: grpc_code and why are set */
    int grpc_code;
} rdzv__etcd_reply_t;

/* Decodes the 200 reply body[0..len) of a call of kind (KEEPALIVE and WATCH: one message of the
 * stream, {"result": ...} or {"error": ...}) into *out (zeroed first). Returns 0, or DDP_EPROTO
 * with why (why_len bytes) naming what is wrong; *out holds nothing to free then. */
int rdzv__etcd_decode(rdzv__etcd_kind_t kind, const char *body, size_t len, rdzv__etcd_reply_t *out,
                      char *why, size_t why_len);

/* Frees what a decoded reply owns and zeroes it. */
void rdzv__etcd_reply_free(rdzv__etcd_reply_t *r);

/* Reads an HTTP error body {"error"|"message": text, "code": grpc code}: writes the message (made
 * printable, bounded) to msg and returns the grpc code, or -1 when the body is not that shape
 * (msg then says so). */
int rdzv__etcd_decode_error(const char *body, size_t len, char *msg, size_t msg_len);

#endif
