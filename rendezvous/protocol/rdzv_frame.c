/* SPDX-License-Identifier: Apache-2.0
 * rdzv_frame: parses store requests in place (no allocation, no copies) and encodes the
 * integers and blobs of requests and replies. The parser is stateless: it is given all the
 * bytes buffered so far and either finds one whole frame, says how many bytes it needs, or
 * rejects the frame. Every length is range-checked before it is used. */
#include "rdzv_frame_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_proto.h" /* RDZV_RUN_ID_MAX, the rendezvous commands (rdzv_commands.h) */

/* A read position over the buffered bytes. */
typedef struct cursor {
    const uint8_t *buf;
    size_t len, off;
    size_t need;
    const rdzv_frame_limits_t *lim;
    ddp_err_t *err;
} cursor_t;

uint64_t rdzv__get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

uint32_t rdzv__get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

size_t rdzv__name_bad_at(const void *p, size_t n) {
    const uint8_t *b = p;
    size_t i = 0;
    while (i < n && b[i] >= 0x20 && b[i] <= 0x7e)
        i++;
    return i;
}

const char *rdzv__cmd_name(int cmd) {
    static const char *const names[] = {
        "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
        "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
        "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER"};
    if (cmd >= 0 && cmd < (int)(sizeof names / sizeof names[0]))
        return names[cmd];
    /* The rendezvous commands (rdzv_commands.h) are named here too (rdzv_round_cmd_name reads
     * this): a log line about one, sent before authentication, say, names it, never "UNKNOWN". */
    switch (cmd) {
    case RDZV_CMD_AUTH_HELLO: return "AUTH_HELLO";
    case RDZV_CMD_AUTH_PROOF: return "AUTH_PROOF";
    case RDZV_CMD_GET_WAIT: return "GET_WAIT";
    case RDZV_CMD_STATS: return "STATS";
    case RDZV_CMD_AUTH_HELLO_RUN: return "AUTH_HELLO_RUN";
#define X(code, NAME, name, req, rep)                                                              \
    case code: return "RDZV_" #NAME;
        RDZV_COMMANDS(X)
#undef X
    default: return "UNKNOWN";
    }
}

/* Makes sure n more bytes are buffered. Returns 1 when they are, 0 when more input is needed
 * (need set), DDP_ETOOBIG when the frame would pass the frame limit. */
static int want(cursor_t *c, size_t n, const char *what) {
    if (n > c->lim->max_frame || c->off > c->lim->max_frame - n) {
        if (c->err != NULL && c->err->code == 0)
            c->err->offset = (long)c->off;
        return ddp_err_set(c->err, DDP_ETOOBIG, "%s makes the frame longer than %zu bytes", what,
                           c->lim->max_frame);
    }
    if (c->len - c->off < n) {
        c->need = c->off + n;
        return 0;
    }
    return 1;
}

/* Reads a u64 length and checks it against max. Returns 1 (*out set), 0 or an error. */
static int read_len(cursor_t *c, size_t max, const char *what, uint64_t *out) {
    int rc = want(c, 8, what);
    if (rc <= 0)
        return rc;
    uint64_t v = rdzv__get_u64(c->buf + c->off);
    if (v > max) {
        if (c->err != NULL && c->err->code == 0)
            c->err->offset = (long)c->off;
        return ddp_err_set(c->err, DDP_ETOOBIG, "%s length %llu exceeds %zu", what,
                           (unsigned long long)v, max);
    }
    c->off += 8;
    *out = v;
    return 1;
}

/* Reads a length-prefixed blob of at most max bytes into *s. Returns 1, 0 or an error. */
static int read_blob(cursor_t *c, size_t max, const char *what, rdzv_slice_t *s) {
    uint64_t n = 0;
    int rc = read_len(c, max, what, &n);
    if (rc <= 0)
        return rc;
    rc = want(c, (size_t)n, what);
    if (rc <= 0) {
        c->off -= 8; /* re-read the length next time; need already points past the body */
        return rc;
    }
    s->p = c->buf + c->off;
    s->n = (size_t)n;
    c->off += (size_t)n;
    return 1;
}

/* Reads fixed-size fields. */
static int read_fixed(cursor_t *c, size_t n, const char *what, const uint8_t **p) {
    int rc = want(c, n, what);
    if (rc <= 0)
        return rc;
    *p = c->buf + c->off;
    c->off += n;
    return 1;
}

/* Reads a key count and then the keys (and values when with_values). */
static int read_list(cursor_t *c, int with_values, rdzv_req_t *req) {
    int rc = want(c, 8, "key count");
    if (rc <= 0)
        return rc;
    uint64_t n = rdzv__get_u64(c->buf + c->off);
    if (n > c->lim->max_keys) {
        if (c->err != NULL && c->err->code == 0)
            c->err->offset = (long)c->off;
        return ddp_err_set(c->err, DDP_ETOOBIG, "key count %llu exceeds %zu", (unsigned long long)n,
                           c->lim->max_keys);
    }
    c->off += 8;
    req->nkeys = n;
    req->list.p = c->buf + c->off;
    for (uint64_t i = 0; i < n; i++) {
        rdzv_slice_t s;
        rc = read_blob(c, c->lim->max_key_len, "key", &s);
        if (rc <= 0)
            return rc;
        if (with_values) {
            rc = read_blob(c, c->lim->max_value_len, "value", &s);
            if (rc <= 0)
                return rc;
        }
    }
    req->list.n = (size_t)(c->buf + c->off - req->list.p);
    return 1;
}

long rdzv__frame_parse(const uint8_t *buf, size_t len, const rdzv_frame_limits_t *lim,
                       rdzv_req_t *req, size_t *need, ddp_err_t *err) {
    if (len == 0) {
        memset(req, 0, sizeof *req);
        *need = 1;
        return 0;
    }
    return rdzv__frame_parse_as(buf[0], buf, len, lim, req, need, err);
}

int rdzv__legacy_cmd(uint8_t code) {
    /* PyTorch <= 2.0's QueryType: SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS,
     * WATCH_KEY, DELETE_KEY. WATCH_KEY (7) needs the callback protocol, which is not served. */
    static const int map[] = {
        RDZV_CMD_SET,  RDZV_CMD_COMPARE_SET, RDZV_CMD_GET, RDZV_CMD_ADD,       RDZV_CMD_CHECK,
        RDZV_CMD_WAIT, RDZV_CMD_GETNUMKEYS,  -1,           RDZV_CMD_DELETE_KEY};
    return code < sizeof map / sizeof map[0] ? map[code] : -1;
}

/* Over 60 lines: one switch over the command codes keeps every frame layout in one place. */
long rdzv__frame_parse_as(uint8_t cmd, const uint8_t *buf, size_t len,
                          const rdzv_frame_limits_t *lim, rdzv_req_t *req, size_t *need,
                          ddp_err_t *err) {
    memset(req, 0, sizeof *req);
    cursor_t c = {buf, len, 0, 0, lim, err};
    if (len == 0) {
        *need = 1;
        return 0;
    }
    req->cmd = cmd;
    c.off = 1;
    const uint8_t *p = NULL;
    int rc;
    switch (req->cmd) {
    case RDZV_CMD_VALIDATE:
    case RDZV_CMD_PING:
        rc = read_fixed(&c, 4, req->cmd == RDZV_CMD_PING ? "nonce" : "magic", &p);
        if (rc > 0)
            req->u32 = rdzv__get_u32(p);
        break;
    case RDZV_CMD_SET:
    case RDZV_CMD_APPEND:
    case RDZV_CMD_QUEUE_PUSH:
        rc = read_blob(&c, lim->max_key_len, "key", &req->key);
        if (rc > 0)
            rc = read_blob(&c, lim->max_value_len, "value", &req->val);
        break;
    case RDZV_CMD_COMPARE_SET:
        rc = read_blob(&c, lim->max_key_len, "key", &req->key);
        if (rc > 0)
            rc = read_blob(&c, lim->max_value_len, "expected value", &req->val);
        if (rc > 0)
            rc = read_blob(&c, lim->max_value_len, "desired value", &req->val2);
        break;
    case RDZV_CMD_GET:
    case RDZV_CMD_DELETE_KEY:
    case RDZV_CMD_QUEUE_POP:
    case RDZV_CMD_QUEUE_LEN: rc = read_blob(&c, lim->max_key_len, "key", &req->key); break;
    case RDZV_CMD_ADD:
    case RDZV_CMD_BARRIER:
        rc = read_blob(&c, lim->max_key_len, "key", &req->key);
        if (rc > 0)
            rc = read_fixed(&c, 8, req->cmd == RDZV_CMD_ADD ? "delta" : "world size", &p);
        if (rc > 0)
            req->delta = (int64_t)rdzv__get_u64(p);
        break;
    case RDZV_CMD_CHECK:
    case RDZV_CMD_WAIT:
    case RDZV_CMD_MULTI_GET: rc = read_list(&c, 0, req); break;
    case RDZV_CMD_MULTI_SET: rc = read_list(&c, 1, req); break;
    case RDZV_CMD_GETNUMKEYS:
    case RDZV_CMD_CANCEL_WAIT:
    case RDZV_CMD_LIST_KEYS:
    case RDZV_CMD_STATS: rc = 1; break;
    case RDZV_CMD_AUTH_HELLO:
    case RDZV_CMD_AUTH_PROOF:
        rc = read_fixed(&c, RDZV_AUTH_NONCE_LEN, "auth payload", &p);
        if (rc > 0) {
            req->val.p = p;
            req->val.n = RDZV_AUTH_NONCE_LEN;
        }
        break;
    case RDZV_CMD_AUTH_HELLO_RUN:
        rc = read_fixed(&c, RDZV_AUTH_NONCE_LEN, "auth payload", &p);
        if (rc > 0) {
            req->val.p = p;
            req->val.n = RDZV_AUTH_NONCE_LEN;
            rc = read_blob(&c, RDZV_RUN_ID_MAX, "run id", &req->key);
        }
        if (rc > 0 && (req->key.n == 0 || rdzv__name_bad_at(req->key.p, req->key.n) < req->key.n)) {
            if (err != NULL && err->code == 0)
                err->offset = (long)(c.off - req->key.n - 8);
            rc = ddp_err_set(err, DDP_EFRAME, "the run id is empty or not printable ASCII");
        }
        break;
    case RDZV_CMD_GET_WAIT:
        rc = read_blob(&c, lim->max_key_len, "key", &req->key);
        if (rc > 0)
            rc = read_fixed(&c, 1, "mode", &p);
        if (rc > 0) {
            req->mode = *p;
            if (req->mode > RDZV_GETW_NOWAIT) {
                if (err != NULL && err->code == 0)
                    err->offset = (long)(c.off - 1);
                rc = ddp_err_set(err, DDP_EFRAME, "GET_WAIT mode %u is not 0 or 1", req->mode);
            }
        }
        break;
    default:
        if (err != NULL && err->code == 0)
            err->offset = 0;
        return ddp_err_set(err, DDP_EFRAME, "unknown command 0x%02x", req->cmd);
    }
    if (rc < 0)
        return rc;
    if (rc == 0) {
        *need = c.need;
        return 0;
    }
    return (long)c.off;
}

void rdzv__list_next(const uint8_t **cursor, int with_values, rdzv_slice_t *key,
                     rdzv_slice_t *val) {
    const uint8_t *p = *cursor;
    key->n = (size_t)rdzv__get_u64(p);
    key->p = p + 8;
    p += 8 + key->n;
    if (with_values) {
        rdzv_slice_t v;
        v.n = (size_t)rdzv__get_u64(p);
        v.p = p + 8;
        p += 8 + v.n;
        if (val != NULL)
            *val = v;
    }
    *cursor = p;
}

int rdzv__put_u8(ddp_buf_t *b, uint8_t v) {
    return ddp_buf_append(b, &v, 1);
}

int rdzv__put_u32(ddp_buf_t *b, uint32_t v) {
    return ddp_buf_append(b, &v, sizeof v);
}

int rdzv__put_u64(ddp_buf_t *b, uint64_t v) {
    return ddp_buf_append(b, &v, sizeof v);
}

int rdzv__put_i64(ddp_buf_t *b, int64_t v) {
    return ddp_buf_append(b, &v, sizeof v);
}

int rdzv__put_blob(ddp_buf_t *b, const void *p, size_t n) {
    int rc = ddp_buf_reserve(b, 8 + n);
    if (rc < 0)
        return rc;
    uint64_t n64 = n;
    memcpy(b->data + b->len, &n64, 8);
    if (n > 0)
        memcpy(b->data + b->len + 8, p, n);
    b->len += 8 + n;
    b->data[b->len] = 0;
    return 0;
}

char *rdzv__key_repr(const void *key, size_t n, char *out, size_t cap) {
    const uint8_t *k = key;
    size_t o = 0;
    if (cap == 0)
        return out;
    size_t show = n > 64 ? 64 : n;
    for (size_t i = 0; i < show && o + 5 < cap; i++) {
        if (k[i] >= 0x20 && k[i] < 0x7f && k[i] != '\\' && k[i] != '\'') {
            out[o++] = (char)k[i];
        } else {
            snprintf(out + o, cap - o, "\\x%02x", k[i]);
            o += 4;
        }
    }
    if (show < n && o + 4 < cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}
