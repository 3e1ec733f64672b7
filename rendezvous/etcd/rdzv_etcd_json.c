/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_json: base64, request bodies and reply decoding of the etcd v3 JSON gateway. The
 * gateway writes int64 fields as JSON strings ("revision":"7") and leaves fields at their zero
 * value out ("succeeded" when false, an event's "type" when PUT), so a missing field reads 0. */
#include "rdzv_etcd_json.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t rdzv__etcd_b64_encode(const void *in, size_t n, char *out) {
    const uint8_t *p = in;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_chars[v >> 18];
        out[o++] = b64_chars[(v >> 12) & 63];
        out[o++] = b64_chars[(v >> 6) & 63];
        out[o++] = b64_chars[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = b64_chars[v >> 18];
        out[o++] = b64_chars[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char ch) {
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int rdzv__etcd_b64_decode(const char *in, size_t n, uint8_t *out, size_t *out_len) {
    if (n % 4 != 0)
        return DDP_EPROTO;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            /* Padding is allowed only in the last quantum's last two places. */
            if (in[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad > 0 || (v[j] = b64_value(in[i + j])) < 0)
                return DDP_EPROTO;
        }
        uint32_t q = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        out[o++] = (uint8_t)(q >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(q >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)q;
    }
    *out_len = o;
    return 0;
}

const char *rdzv__etcd_path(rdzv__etcd_kind_t kind) {
    switch (kind) {
    case RDZV_ETCD_RANGE: return "/v3/kv/range";
    case RDZV_ETCD_PUT: return "/v3/kv/put";
    case RDZV_ETCD_DELETE: return "/v3/kv/deleterange";
    case RDZV_ETCD_TXN: return "/v3/kv/txn";
    case RDZV_ETCD_GRANT: return "/v3/lease/grant";
    case RDZV_ETCD_KEEPALIVE: return "/v3/lease/keepalive";
    case RDZV_ETCD_REVOKE: return "/v3/lease/revoke";
    case RDZV_ETCD_AUTH: return "/v3/auth/authenticate";
    case RDZV_ETCD_WATCH: return "/v3/watch";
    }
    return "/";
}

/* ---- encoding ---- */

/* Sets obj[name] to the base64 of p[0..n). Returns 0 or -ENOMEM. */
static int set_b64(json_t *obj, const char *name, const void *p, size_t n) {
    char *s = malloc(RDZV_ETCD_B64_LEN(n));
    if (s == NULL)
        return -ENOMEM;
    rdzv__etcd_b64_encode(p, n, s);
    int r = json_object_set_new(obj, name, json_string(s));
    free(s);
    return r == 0 ? 0 : -ENOMEM;
}

/* Sets obj[name] to v as the gateway's int64 string. */
static int set_i64(json_t *obj, const char *name, int64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return json_object_set_new(obj, name, json_string(s)) == 0 ? 0 : -ENOMEM;
}

/* Sets obj's key (and, with RDZV_ETCD_PREFIX, range_end: the key with its last byte below 0xff
 * incremented and the rest dropped; "\0", every key, when there is none). */
static int set_key_range(json_t *obj, const void *key, size_t key_len, unsigned flags) {
    int r = set_b64(obj, "key", key, key_len);
    if (r != 0 || !(flags & RDZV_ETCD_PREFIX))
        return r;
    uint8_t *end = malloc(key_len + 1);
    if (end == NULL)
        return -ENOMEM;
    size_t n = key_len;
    if (key_len > 0)
        memcpy(end, key, key_len);
    while (n > 0 && end[n - 1] == 0xff)
        n--;
    if (n > 0) {
        end[n - 1]++;
    } else {
        end[0] = 0;
        n = 1;
    }
    r = set_b64(obj, "range_end", end, n);
    free(end);
    return r;
}

/* Dumps obj (stolen) into *out. */
static int finish(json_t *obj, int r, char **out) {
    *out = NULL;
    if (r == 0 && obj != NULL)
        *out = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (r != 0)
        return r;
    return *out != NULL ? 0 : -ENOMEM;
}

int rdzv__etcd_enc_range(const void *key, size_t key_len, unsigned flags, int64_t limit,
                         char **out) {
    *out = NULL;
    if (limit < 0)
        return -EINVAL;
    json_t *o = json_object();
    int r = o != NULL ? set_key_range(o, key, key_len, flags) : -ENOMEM;
    if (r == 0 && limit > 0)
        r = set_i64(o, "limit", limit);
    if (r == 0 && (flags & RDZV_ETCD_KEYS_ONLY))
        r = json_object_set_new(o, "keys_only", json_true()) ? -ENOMEM : 0;
    if (r == 0 && (flags & RDZV_ETCD_COUNT_ONLY))
        r = json_object_set_new(o, "count_only", json_true()) ? -ENOMEM : 0;
    return finish(o, r, out);
}

static json_t *put_object(const void *key, size_t key_len, const void *val, size_t val_len,
                          int64_t lease, int *r) {
    json_t *o = json_object();
    *r = o != NULL ? set_b64(o, "key", key, key_len) : -ENOMEM;
    if (*r == 0)
        *r = set_b64(o, "value", val, val_len);
    if (*r == 0 && lease < 0)
        *r = -EINVAL;
    if (*r == 0 && lease > 0)
        *r = set_i64(o, "lease", lease);
    return o;
}

int rdzv__etcd_enc_put(const void *key, size_t key_len, const void *val, size_t val_len,
                       int64_t lease, char **out) {
    int r;
    json_t *o = put_object(key, key_len, val, val_len, lease, &r);
    return finish(o, r, out);
}

int rdzv__etcd_enc_delete(const void *key, size_t key_len, unsigned flags, char **out) {
    json_t *o = json_object();
    int r = o != NULL ? set_key_range(o, key, key_len, flags) : -ENOMEM;
    return finish(o, r, out);
}

static const char *const target_names[] = {"VERSION", "CREATE", "MOD", "VALUE"};
static const char *const target_fields[] = {"version", "create_revision", "mod_revision", "value"};
static const char *const cmp_names[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};

static json_t *compare_object(const rdzv_etcd_compare_t *c, int *r) {
    if ((unsigned)c->target > RDZV_ETCD_CMP_VALUE || (unsigned)c->cmp > RDZV_ETCD_NOT_EQUAL) {
        *r = -EINVAL;
        return NULL;
    }
    json_t *o = json_object();
    *r = o != NULL ? set_b64(o, "key", c->key, c->key_len) : -ENOMEM;
    if (*r == 0 && (json_object_set_new(o, "target", json_string(target_names[c->target])) ||
                    json_object_set_new(o, "result", json_string(cmp_names[c->cmp]))))
        *r = -ENOMEM;
    if (*r == 0 && c->target == RDZV_ETCD_CMP_VALUE)
        *r = set_b64(o, "value", c->value, c->value_len);
    else if (*r == 0)
        *r = set_i64(o, target_fields[c->target], c->number);
    return o;
}

static json_t *op_array(const rdzv_etcd_op_t *ops, size_t n, int *r) {
    json_t *a = json_array();
    *r = a != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; *r == 0 && i < n; i++) {
        const rdzv_etcd_op_t *op = &ops[i];
        json_t *inner = NULL;
        const char *name = "request_put";
        if (op->kind == RDZV_ETCD_OP_PUT) {
            inner = put_object(op->key, op->key_len, op->value, op->value_len, op->lease, r);
        } else if (op->kind == RDZV_ETCD_OP_DELETE) {
            name = "request_delete_range";
            inner = json_object();
            *r = inner != NULL ? set_key_range(inner, op->key, op->key_len, op->flags) : -ENOMEM;
        } else {
            *r = -EINVAL;
        }
        json_t *wrap = *r == 0 ? json_object() : NULL;
        if (*r == 0 &&
            (wrap == NULL || json_object_set(wrap, name, inner) || json_array_append_new(a, wrap)))
            *r = -ENOMEM;
        json_decref(inner);
    }
    return a;
}

int rdzv__etcd_enc_txn(const rdzv_etcd_txn_t *txn, char **out) {
    *out = NULL;
    if (txn->n_compares > RDZV_ETCD_TXN_MAX_OPS || txn->n_success > RDZV_ETCD_TXN_MAX_OPS ||
        txn->n_failure > RDZV_ETCD_TXN_MAX_OPS)
        return DDP_ETOOBIG;
    json_t *o = json_object(), *cmps = json_array();
    int r = o != NULL && cmps != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; r == 0 && i < txn->n_compares; i++) {
        json_t *c = compare_object(&txn->compares[i], &r);
        if (r == 0 && json_array_append(cmps, c))
            r = -ENOMEM;
        json_decref(c);
    }
    if (r == 0 && json_object_set(o, "compare", cmps))
        r = -ENOMEM;
    json_decref(cmps);
    const char *names[2] = {"success", "failure"};
    const rdzv_etcd_op_t *ops[2] = {txn->success, txn->failure};
    size_t ns[2] = {txn->n_success, txn->n_failure};
    for (int b = 0; b < 2 && r == 0; b++) {
        json_t *a = op_array(ops[b], ns[b], &r);
        if (r == 0 && json_object_set(o, names[b], a))
            r = -ENOMEM;
        json_decref(a);
    }
    return finish(o, r, out);
}

int rdzv__etcd_enc_lease(rdzv__etcd_kind_t kind, int64_t n, char **out) {
    *out = NULL;
    if (n <= 0 || (kind == RDZV_ETCD_GRANT && n > INT32_MAX))
        return -EINVAL;
    json_t *o = json_object();
    int r = o != NULL ? set_i64(o, kind == RDZV_ETCD_GRANT ? "TTL" : "ID", n) : -ENOMEM;
    return finish(o, r, out);
}

int rdzv__etcd_enc_watch(const void *key, size_t key_len, unsigned flags, int64_t start_revision,
                         char **out) {
    *out = NULL;
    if (start_revision < 0)
        return -EINVAL;
    json_t *o = json_object(), *req = json_object();
    int r = o != NULL && req != NULL ? set_key_range(req, key, key_len, flags) : -ENOMEM;
    if (r == 0 && start_revision > 0)
        r = set_i64(req, "start_revision", start_revision);
    if (r == 0 && json_object_set(o, "create_request", req))
        r = -ENOMEM;
    json_decref(req);
    return finish(o, r, out);
}

int rdzv__etcd_enc_auth(const char *user, const char *password, char **out) {
    json_t *o = json_pack("{s:s, s:s}", "name", user, "password", password);
    return finish(o, o != NULL ? 0 : -EINVAL, out);
}

/* ---- decoding ---- */

static int why_set(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int why_set(char *why, size_t why_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return DDP_EPROTO;
}

/* Reads obj[name] as an int64: absent or null = 0, a JSON integer, or a string of decimal
 * digits (optional '-') in range. Returns 0 or DDP_EPROTO with why. */
static int get_i64(const json_t *obj, const char *name, int64_t *v, char *why, size_t why_len) {
    const json_t *f = json_object_get(obj, name);
    *v = 0;
    if (f == NULL || json_is_null(f))
        return 0;
    if (json_is_integer(f)) {
        *v = json_integer_value(f);
        return 0;
    }
    if (!json_is_string(f))
        return why_set(why, why_len, "field '%s' is not a number", name);
    const char *s = json_string_value(f);
    size_t n = json_string_length(f);
    size_t i = s[0] == '-' ? 1 : 0;
    if (n == i || n > 20)
        return why_set(why, why_len, "field '%s' is not an int64", name);
    for (size_t j = i; j < n; j++)
        if (s[j] < '0' || s[j] > '9')
            return why_set(why, why_len, "field '%s' is not an int64", name);
    errno = 0;
    char *end = NULL;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || end != s + n)
        return why_set(why, why_len, "field '%s' is out of range", name);
    *v = x;
    return 0;
}

/* Reads obj[name] as a boolean (absent: 0). */
static int get_bool(const json_t *obj, const char *name, int *v, char *why, size_t why_len) {
    const json_t *f = json_object_get(obj, name);
    *v = 0;
    if (f == NULL || json_is_null(f))
        return 0;
    if (!json_is_boolean(f))
        return why_set(why, why_len, "field '%s' is not a boolean", name);
    *v = json_is_true(f);
    return 0;
}

/* Decodes the base64 string obj[name] (absent: empty) into dst (room for its decoded length),
 * NUL-terminated; *n its length. */
static int get_bytes(const json_t *obj, const char *name, uint8_t *dst, size_t *n, char *why,
                     size_t why_len) {
    const json_t *f = json_object_get(obj, name);
    *n = 0;
    dst[0] = 0;
    if (f == NULL || json_is_null(f))
        return 0;
    if (!json_is_string(f))
        return why_set(why, why_len, "field '%s' is not a string", name);
    if (rdzv__etcd_b64_decode(json_string_value(f), json_string_length(f), dst, n) != 0)
        return why_set(why, why_len, "field '%s' is not base64", name);
    dst[*n] = 0;
    return 0;
}

static size_t b64_room(const json_t *obj, const char *name) {
    const json_t *f = json_object_get(obj, name);
    return json_is_string(f) ? json_string_length(f) / 4 * 3 + 1 : 1;
}

/* Decodes one mvccpb.KeyValue into kv; its key and value share one block starting at kv->key
 * (freed by kv_free). */
static int dec_kv(const json_t *o, rdzv_etcd_kv_t *kv, char *why, size_t why_len) {
    memset(kv, 0, sizeof *kv);
    if (!json_is_object(o))
        return why_set(why, why_len, "a key-value is not an object");
    size_t kroom = b64_room(o, "key"), vroom = b64_room(o, "value");
    uint8_t *block = malloc(kroom + vroom);
    if (block == NULL)
        return why_set(why, why_len, "out of memory");
    kv->key = block;
    kv->value = block + kroom;
    int r = get_bytes(o, "key", block, &kv->key_len, why, why_len);
    if (r == 0)
        r = get_bytes(o, "value", block + kroom, &kv->value_len, why, why_len);
    if (r == 0)
        r = get_i64(o, "create_revision", &kv->create_revision, why, why_len);
    if (r == 0)
        r = get_i64(o, "mod_revision", &kv->mod_revision, why, why_len);
    if (r == 0)
        r = get_i64(o, "version", &kv->version, why, why_len);
    if (r == 0)
        r = get_i64(o, "lease", &kv->lease, why, why_len);
    return r;
}

static void kv_free(rdzv_etcd_kv_t *kv) {
    free((void *)kv->key);
    kv->key = NULL;
}

/* Reads the "header" object's revision: every reply carries one. */
static int dec_header(const json_t *o, int64_t *rev, char *why, size_t why_len) {
    const json_t *h = json_object_get(o, "header");
    if (!json_is_object(h))
        return why_set(why, why_len, "reply has no header");
    int r = get_i64(h, "revision", rev, why, why_len);
    if (r == 0 && *rev < 0)
        return why_set(why, why_len, "negative revision");
    return r;
}

/* Decodes the array obj[name] of key-values into *kvs (n of them). */
static int dec_kvs(const json_t *o, const char *name, rdzv_etcd_kv_t **kvs, size_t *n, char *why,
                   size_t why_len) {
    const json_t *a = json_object_get(o, name);
    *kvs = NULL;
    *n = 0;
    if (a == NULL || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return why_set(why, why_len, "field '%s' is not an array", name);
    size_t len = json_array_size(a);
    if (len == 0)
        return 0;
    *kvs = calloc(len, sizeof **kvs);
    if (*kvs == NULL)
        return why_set(why, why_len, "out of memory");
    for (size_t i = 0; i < len; i++) {
        int r = dec_kv(json_array_get(a, i), &(*kvs)[i], why, why_len);
        *n = i + 1;
        if (r != 0)
            return r;
    }
    return 0;
}

/* Decodes a watch message's result: created, canceled, compact_revision and events. */
static int dec_watch(const json_t *o, rdzv__etcd_reply_t *out, char *why, size_t why_len) {
    int r = get_bool(o, "created", &out->watch.created, why, why_len);
    if (r == 0)
        r = get_bool(o, "canceled", &out->canceled, why, why_len);
    if (r == 0)
        r = get_i64(o, "compact_revision", &out->watch.compact_revision, why, why_len);
    const json_t *a = json_object_get(o, "events");
    if (r != 0 || a == NULL || json_is_null(a))
        return r;
    if (!json_is_array(a))
        return why_set(why, why_len, "field 'events' is not an array");
    size_t len = json_array_size(a);
    out->events = len ? calloc(len, sizeof *out->events) : NULL;
    if (len && out->events == NULL)
        return why_set(why, why_len, "out of memory");
    for (size_t i = 0; i < len; i++) {
        const json_t *ev = json_array_get(a, i);
        if (!json_is_object(ev))
            return why_set(why, why_len, "an event is not an object");
        const json_t *type = json_object_get(ev, "type");
        rdzv_etcd_event_t *e = &out->events[i];
        if (type == NULL || (json_is_string(type) && !strcmp(json_string_value(type), "PUT")))
            e->type = RDZV_ETCD_EV_PUT;
        else if (json_is_string(type) && !strcmp(json_string_value(type), "DELETE"))
            e->type = RDZV_ETCD_EV_DELETE;
        else
            return why_set(why, why_len, "an event's type is neither PUT nor DELETE");
        r = dec_kv(json_object_get(ev, "kv"), &e->kv, why, why_len);
        out->watch.n_events = i + 1;
        if (r != 0)
            return r;
    }
    out->watch.events = out->events;
    return 0;
}

/* Copies the printable part of s (at most n bytes) into msg. */
static void printable(const char *s, size_t n, char *msg, size_t msg_len) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < msg_len; i++)
        msg[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (msg_len > 0)
        msg[o] = '\0';
}

/* Reads {"error": text | {"message", "code"}, "message", "code"} into msg and a grpc code. */
static int error_fields(const json_t *o, char *msg, size_t msg_len) {
    const json_t *inner = json_object_get(o, "error");
    if (json_is_object(inner))
        o = inner;
    const json_t *m = json_object_get(o, "message");
    if (!json_is_string(m) || json_string_length(m) == 0)
        m = json_object_get(o, "error");
    const json_t *code = json_object_get(o, "code");
    if (!json_is_string(m) || !json_is_integer(code) || json_integer_value(code) < 0 ||
        json_integer_value(code) > 255) {
        printable("the error reply has no message and code", 39, msg, msg_len);
        return -1;
    }
    printable(json_string_value(m), json_string_length(m), msg, msg_len);
    return (int)json_integer_value(code);
}

int rdzv__etcd_decode_error(const char *body, size_t len, char *msg, size_t msg_len) {
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    int code = -1;
    if (json_is_object(o))
        code = error_fields(o, msg, msg_len);
    else
        printable("the error reply is not JSON", 27, msg, msg_len);
    json_decref(o);
    return code;
}

static int decode_object(rdzv__etcd_kind_t kind, const json_t *o, rdzv__etcd_reply_t *out,
                         char *why, size_t why_len) {
    rdzv_etcd_result_t *res = &out->res;
    if (kind == RDZV_ETCD_KEEPALIVE || kind == RDZV_ETCD_WATCH) {
        const json_t *err = json_object_get(o, "error");
        if (err != NULL) {
            out->stream_err = 1;
            out->grpc_code = error_fields(o, why, why_len);
            return 0;
        }
        o = json_object_get(o, "result");
        if (!json_is_object(o))
            return why_set(why, why_len, "stream message has no result");
    }
    if (kind == RDZV_ETCD_AUTH) {
        const json_t *t = json_object_get(o, "token");
        if (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > 4096)
            return why_set(why, why_len, "reply has no token");
        for (const char *p = json_string_value(t); *p; p++)
            if (*p <= 0x20 || *p >= 0x7f)
                return why_set(why, why_len, "the token is not printable");
        out->token = strdup(json_string_value(t));
        return out->token != NULL ? 0 : why_set(why, why_len, "out of memory");
    }
    int r = dec_header(o, &res->revision, why, why_len);
    if (r != 0)
        return r;
    switch (kind) {
    case RDZV_ETCD_RANGE:
        r = dec_kvs(o, "kvs", &out->kvs, &res->n_kvs, why, why_len);
        res->kvs = out->kvs;
        if (r == 0)
            r = get_i64(o, "count", &res->count, why, why_len);
        if (r == 0)
            r = get_bool(o, "more", &res->more, why, why_len);
        break;
    case RDZV_ETCD_DELETE: r = get_i64(o, "deleted", &res->deleted, why, why_len); break;
    case RDZV_ETCD_TXN: r = get_bool(o, "succeeded", &res->succeeded, why, why_len); break;
    case RDZV_ETCD_GRANT:
    case RDZV_ETCD_KEEPALIVE:
        r = get_i64(o, "ID", &res->lease_id, why, why_len);
        if (r == 0)
            r = get_i64(o, "TTL", &res->lease_ttl, why, why_len);
        if (r == 0 && kind == RDZV_ETCD_GRANT && (res->lease_id <= 0 || res->lease_ttl <= 0))
            r = why_set(why, why_len, "the granted lease has no ID or TTL");
        break;
    case RDZV_ETCD_WATCH:
        r = dec_watch(o, out, why, why_len);
        out->watch.revision = res->revision;
        break;
    default: break;
    }
    return r;
}

int rdzv__etcd_decode(rdzv__etcd_kind_t kind, const char *body, size_t len, rdzv__etcd_reply_t *out,
                      char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        return why_set(why, why_len, "reply is not JSON: %s", jerr.text);
    int r = json_is_object(o) ? decode_object(kind, o, out, why, why_len)
                              : why_set(why, why_len, "reply is not a JSON object");
    json_decref(o);
    if (r != 0)
        rdzv__etcd_reply_free(out);
    return r;
}

void rdzv__etcd_reply_free(rdzv__etcd_reply_t *r) {
    for (size_t i = 0; r->kvs != NULL && i < r->res.n_kvs; i++)
        kv_free(&r->kvs[i]);
    for (size_t i = 0; r->events != NULL && i < r->watch.n_events; i++)
        kv_free(&r->events[i].kv);
    free(r->kvs);
    free(r->events);
    free(r->token);
    memset(r, 0, sizeof *r);
}
