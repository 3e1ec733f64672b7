/* SPDX-License-Identifier: Apache-2.0
 * rdzv_async_store_calls: the asynchronous client's store calls (rdzv_async_client.h): SET, GET,
 * ADD, WAIT, COMPARE_SET, DELETE_KEY, PING and raw requests. Each checks its arguments against the
 * store's limits, encodes its frame and names its subject for messages, then hands the request to
 * the queue (rdzv_async_queue.c); what happens on the wire is not their concern, so a new store
 * command is added here alone. */
#include <errno.h>
#include <string.h>

#include "rdzv_async_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"

/* Starts r's frame: the command byte, then the key blob. */
static int put_cmd_key(req_t *r, uint8_t cmd, const char *key) {
    int rc = rdzv__put_u8(&r->frame, cmd);
    return rc ? rc : rdzv__put_blob(&r->frame, key, strlen(key));
}

static int value_ok(rdzv_aclient_t *c, req_t *r, size_t len, ddp_err_t *err) {
    if (len <= RDZV_MAX_VALUE_LEN)
        return 0;
    char why[80];
    rdzv__aclient_msgf(why, sizeof why, "value of %zu bytes (limit %zu)", len, RDZV_MAX_VALUE_LEN);
    return rdzv__aclient_refuse(c, r, DDP_ETOOBIG, err, why);
}

int rdzv_aclient_set(rdzv_aclient_t *c, const char *key, const void *val, size_t len, rdzv_acb_t cb,
                     void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_SET, "SET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = value_ok(c, r, len, err);
    if (rc < 0)
        return rc;
    r->nonce = ++c->ping_seq;
    rc = put_cmd_key(r, RDZV_CMD_SET, key);
    rc = rc ? rc : rdzv__put_blob(&r->frame, val, len);
    /* SET has no reply; the PING behind it is answered only after the SET was applied. */
    rc = rc ? rc : rdzv__put_u8(&r->frame, RDZV_CMD_PING);
    rc = rc ? rc : rdzv__put_u32(&r->frame, r->nonce);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_get(rdzv_aclient_t *c, const char *key, int timeout_ms, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc =
        rdzv__aclient_req_new(c, timeout_ms == 0 ? K_GETNOW : K_GET, "GET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    r->parks = timeout_ms != 0;
    r->timeout_ms = timeout_ms;
    rc = put_cmd_key(r, RDZV_CMD_GET_WAIT, key);
    rc = rc ? rc : rdzv__put_u8(&r->frame, timeout_ms == 0 ? RDZV_GETW_NOWAIT : RDZV_GETW_BLOCK);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_add(rdzv_aclient_t *c, const char *key, int64_t delta, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_ADD, "ADD", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_ADD, key);
    rc = rc ? rc : rdzv__put_i64(&r->frame, delta);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_wait(rdzv_aclient_t *c, const char *const *keys, size_t n, int timeout_ms,
                      rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_WAIT, "WAIT", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    if (n > 0 && keys == NULL)
        return rdzv__aclient_refuse(c, r, -EINVAL, err, "NULL key list");
    char kr[100];
    if (n > 0 && keys[0] == NULL) /* named in messages below; the rest are checked later */
        return rdzv__aclient_refuse(c, r, -EINVAL, err, "NULL key in the list");
    if (n == 1)
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "key '%s'",
                           rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr));
    else
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "%zu keys (first '%s')", n,
                           n ? rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr) : "");
    if (n > RDZV_MAX_KEYS_PER_REQ)
        return rdzv__aclient_refuse(c, r, DDP_ETOOBIG, err, "too many keys in one request");
    r->parks = 1;
    r->timeout_ms = timeout_ms;
    rc = rdzv__put_u8(&r->frame, RDZV_CMD_WAIT);
    rc = rc ? rc : rdzv__put_u64(&r->frame, n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (keys[i] == NULL)
            return rdzv__aclient_refuse(c, r, -EINVAL, err, "NULL key in the list");
        size_t kl = strlen(keys[i]);
        if (kl > RDZV_MAX_KEY_LEN)
            return rdzv__aclient_refuse(c, r, DDP_ETOOBIG, err, "a key over the 8 KiB limit");
        rc = rdzv__put_blob(&r->frame, keys[i], kl);
    }
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_compare_set(rdzv_aclient_t *c, const char *key, const void *expected,
                             size_t expected_len, const void *desired, size_t desired_len,
                             rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_CAS, "COMPARE_SET", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = value_ok(c, r, expected_len > desired_len ? expected_len : desired_len, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_COMPARE_SET, key);
    rc = rc ? rc : rdzv__put_blob(&r->frame, expected, expected_len);
    rc = rc ? rc : rdzv__put_blob(&r->frame, desired, desired_len);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_delete(rdzv_aclient_t *c, const char *key, rdzv_acb_t cb, void *arg,
                        ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_DELETE, "DELETE_KEY", key, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    rc = put_cmd_key(r, RDZV_CMD_DELETE_KEY, key);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_ping(rdzv_aclient_t *c, rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_PING, "PING", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    r->nonce = ++c->ping_seq;
    rc = rdzv__put_u8(&r->frame, RDZV_CMD_PING);
    rc = rc ? rc : rdzv__put_u32(&r->frame, r->nonce);
    return rdzv__aclient_submit(c, r, rc, err);
}

int rdzv_aclient_raw(rdzv_aclient_t *c, const ddp_buf_t *frame, rdzv_reply_parser_fn parse,
                     unsigned flags, int timeout_ms, const char *what, rdzv_acb_t cb, void *arg,
                     ddp_err_t *err) {
    req_t *r;
    int rc = rdzv__aclient_req_new(c, K_RAW, "request", NULL, cb, arg, &r, err);
    if (rc < 0)
        return rc;
    if (frame == NULL || frame->len == 0 || parse == NULL)
        return rdzv__aclient_refuse(c, r, -EINVAL, err, "empty frame or no reply parser");
    if (what != NULL)
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "%s", what);
    else
        rdzv__aclient_msgf(r->subject, sizeof r->subject, "%s (0x%02x)",
                           rdzv__cmd_name(frame->data[0]), frame->data[0]);
    r->parse = parse;
    r->parks = (flags & RDZV_ACLIENT_PARKS) != 0;
    r->timeout_ms = r->parks ? timeout_ms : -1;
    return rdzv__aclient_submit(c, r, ddp_buf_append(&r->frame, frame->data, frame->len), err);
}
