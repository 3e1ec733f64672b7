/* SPDX-License-Identifier: Apache-2.0
 * rdzv_proto: the codec of the rendezvous commands (rdzv_commands.h, rdzv_proto.h,
 * docs/protocol-rdzv.md): request parser and reply encoders for the store, request encoders and
 * reply parser for its clients. One reader and one writer per layout of rdzv_commands.h; the
 * commands' rows pick theirs. */
#include "rdzv_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ddp_escape.h"
#include "ddp_parse.h"
#include "rdzv_frame_int.h"

/* A read position over buffered bytes (the store's parser works the same way). */
typedef struct cur {
    const uint8_t *buf;
    size_t len, off, need;
    ddp_err_t *err;
    int bad; /* error code for malformed input: DDP_EFRAME (requests) or DDP_EPROTO (replies) */
} cur_t;

/* Returns 1 when n more bytes are buffered, else 0 with need set. */
static int cur_want(cur_t *c, size_t n) {
    if (c->len - c->off < n) {
        c->need = c->off + n;
        return 0;
    }
    return 1;
}

static int cur_u8(cur_t *c, uint8_t *v) {
    if (!cur_want(c, 1))
        return 0;
    *v = c->buf[c->off++];
    return 1;
}

static int cur_i64(cur_t *c, int64_t *v) {
    if (!cur_want(c, 8))
        return 0;
    *v = (int64_t)rdzv__get_u64(c->buf + c->off);
    c->off += 8;
    return 1;
}

/* Records the offset of a bad field; the caller sets the message (first error wins). */
static void cur_mark(cur_t *c, size_t at) {
    if (c->err != NULL && c->err->code == 0)
        c->err->offset = (long)at;
}

/* What cur_str accepts: any bytes; a non-empty string with no NUL; a non-empty string of
 * printable ASCII (names that end up in log lines and terminals: run ids, hosts); the same, or
 * nothing (a key prefix). */
enum { STR_ANY = 0, STR_TEXT = 1, STR_NAME = 2, STR_NAME_OR_EMPTY = 3 };

size_t rdzv_name_bad_at(const void *p, size_t n) {
    return rdzv__name_bad_at(p, n);
}

int rdzv_text_root_cause(const char *text, char *out, size_t cap) {
    if (cap > 0)
        out[0] = '\0';
    const char *p = text != NULL ? strstr(text, RDZV_TEXT_FAILED) : NULL;
    if (p == NULL || cap == 0)
        return 0;
    p += sizeof RDZV_TEXT_FAILED - 1;
    const char *last = strstr(p, RDZV_TEXT_LAST_FAILURE);
    if (last != NULL)
        p = last + sizeof RDZV_TEXT_LAST_FAILURE - 1;
    else if (strncmp(p, "stopped by ", 11) != 0)
        return 0;
    const char *end = strstr(p, RDZV_TEXT_ROOT_CAUSES);
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return 1;
}

int rdzv_run_id_check(const char *id, ddp_err_t *err) {
    char shown[4 * 32 + 1];
    size_t n = strlen(id);
    if (n == 0)
        return ddp_err_set(err, -EINVAL, "the run id is empty");
    ddp_str_escape(shown, sizeof shown, id, n < 32 ? n : 32);
    if (n > RDZV_RUN_ID_MAX)
        return ddp_err_set(err, -EINVAL, "'%s...' is longer than %d characters", shown,
                           RDZV_RUN_ID_MAX);
    size_t bad = rdzv_name_bad_at(id, n);
    if (bad < n)
        return ddp_err_set(err, -EINVAL,
                           "'%s%s' holds byte 0x%02x at position %zu: a run id is printable "
                           "ASCII only",
                           shown, n > 32 ? "..." : "", (uint8_t)id[bad], bad);
    return 0;
}

/* Reads a blob of 0..max bytes: into dst (NUL-terminated, cap > max) when dst is not NULL, else
 * appended to buf, checked as text says (STR_*). Returns 1, 0 or error. */
static int cur_str(cur_t *c, char *dst, ddp_buf_t *buf, size_t max, int text, const char *what) {
    size_t at = c->off;
    if (!cur_want(c, 8))
        return 0;
    uint64_t n = rdzv__get_u64(c->buf + c->off);
    if (n > max) {
        cur_mark(c, at);
        return ddp_err_set(c->err, DDP_ETOOBIG, "%s longer than %zu bytes", what, max);
    }
    if (!cur_want(c, 8 + (size_t)n))
        return 0;
    const uint8_t *p = c->buf + c->off + 8;
    if (text != STR_ANY &&
        ((n == 0 && text != STR_NAME_OR_EMPTY) || memchr(p, '\0', (size_t)n) != NULL)) {
        cur_mark(c, at);
        return ddp_err_set(c->err, c->bad, "%s is empty or holds a NUL byte", what);
    }
    size_t bad =
        text == STR_NAME || text == STR_NAME_OR_EMPTY ? rdzv_name_bad_at(p, (size_t)n) : (size_t)n;
    if (bad < n) {
        cur_mark(c, at);
        return ddp_err_set(c->err, c->bad,
                           "%s holds byte 0x%02x at position %zu: only printable ASCII is allowed",
                           what, p[bad], bad);
    }
    if (dst != NULL) {
        memcpy(dst, p, (size_t)n);
        dst[n] = '\0';
    } else if (buf != NULL) {
        ddp_buf_reset(buf);
        if (ddp_buf_reserve(buf, (size_t)n + 1) < 0)
            return -ENOMEM;
        memcpy(buf->data, p, (size_t)n);
        buf->len = (size_t)n;
        buf->data[n] = '\0';
    }
    c->off += 8 + (size_t)n;
    return 1;
}

/* Runs the reads of one frame: each step returns 1 to go on, 0 (incomplete) or an error. */
#define STEP(x)                                                                                    \
    do {                                                                                           \
        int step_rc_ = (x);                                                                        \
        if (step_rc_ <= 0)                                                                         \
            return step_rc_;                                                                       \
    } while (0)

/* The request readers, one per request layout (rdzv_commands.h): the fields after the run id.
 * Each returns 1, 0 (incomplete) or an error. */
static int req_read_run_only(cur_t *c, rdzv_round_req_t *q) {
    (void)c, (void)q;
    return 1;
}

static int req_read_join(cur_t *c, rdzv_round_req_t *q) {
    rdzv_join_req_t *j = &q->join;
    STEP(cur_str(c, j->host, NULL, RDZV_HOST_MAX, STR_NAME, "host"));
    STEP(cur_i64(c, &j->want_node_rank));
    STEP(cur_i64(c, &j->nproc));
    STEP(cur_i64(c, &j->master_port));
    STEP(cur_i64(c, &j->cfg.min_nodes));
    STEP(cur_i64(c, &j->cfg.max_nodes));
    STEP(cur_i64(c, &j->cfg.last_call_timeout_ms));
    STEP(cur_i64(c, &j->cfg.join_timeout_ms));
    STEP(cur_i64(c, &j->cfg.keep_alive_interval_ms));
    STEP(cur_i64(c, &j->cfg.keep_alive_max_attempt));
    STEP(cur_i64(c, &j->cfg.max_restarts));
    STEP(cur_i64(c, &j->min_round));
    STEP(cur_i64(c, &j->restarts_used));
    STEP(cur_str(c, j->cfg.round_keys, NULL, RDZV_ROUND_KEYS_MAX, STR_NAME_OR_EMPTY, "round_keys"));
    STEP(cur_i64(c, &j->cfg.max_node_failures));
    return 1;
}

static int req_read_round_what(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_i64(c, &q->round));
    STEP(cur_str(c, q->what, NULL, RDZV_WHAT_MAX, STR_ANY, "failure text"));
    return 1;
}

static int req_read_what(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_str(c, q->what, NULL, RDZV_WHAT_MAX, STR_ANY, "abort reason"));
    return 1;
}

static int req_read_member(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_i64(c, &q->member));
    STEP(cur_i64(c, &q->member_key));
    return 1;
}

static int req_read_page(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_i64(c, &q->first));
    STEP(cur_i64(c, &q->limit));
    if (q->first < 0 || q->first > RDZV_ROUND_MAX_NODES || q->limit < 0 ||
        q->limit > RDZV_ROUND_MAX_NODES)
        return ddp_err_set(c->err, DDP_EFRAME, "status page %lld+%lld out of range 0..%d",
                           (long long)q->first, (long long)q->limit, RDZV_ROUND_MAX_NODES);
    return 1;
}

static int req_read_host_what(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_str(c, q->join.host, NULL, RDZV_HOST_MAX, STR_NAME, "host"));
    STEP(cur_str(c, q->what, NULL, RDZV_WHAT_MAX, STR_ANY, "unfit reason"));
    return 1;
}

static int req_read_round_only(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_i64(c, &q->round));
    return 1;
}

/* The codes run consecutively from RDZV_CMD_RDZV_FIRST, so that tables index by code. */
enum {
#define X(code, NAME, name, req, rep) CMD_INDEX_##NAME,
    RDZV_COMMANDS(X)
#undef X
};
#define X(code, NAME, name, req, rep)                                                              \
    _Static_assert(code == RDZV_CMD_RDZV_FIRST + CMD_INDEX_##NAME,                                 \
                   "rendezvous command codes are consecutive: " #NAME);
RDZV_COMMANDS(X)
#undef X

static int (*const req_readers[RDZV_CMD_RDZV_COUNT])(cur_t *, rdzv_round_req_t *) = {
#define X(code, NAME, name, req, rep) [code - RDZV_CMD_RDZV_FIRST] = req_read_##req,
    RDZV_COMMANDS(X)
#undef X
};

static long req_fields(cur_t *c, rdzv_round_req_t *q) {
    STEP(cur_str(c, q->join.run_id, NULL, RDZV_RUN_ID_MAX, STR_NAME, "run id"));
    STEP(req_readers[q->cmd - RDZV_CMD_RDZV_FIRST](c, q));
    return (long)c->off;
}

long rdzv_round_req_parse(const uint8_t *buf, size_t len, rdzv_round_req_t *req, size_t *need,
                          ddp_err_t *err) {
    cur_t c = {buf, len, 0, 0, err, DDP_EFRAME};
    memset(req, 0, sizeof *req);
    uint8_t cmd;
    if (!cur_u8(&c, &cmd)) {
        *need = 1;
        return 0;
    }
    if (cmd < RDZV_CMD_RDZV_FIRST || cmd > RDZV_CMD_RDZV_LAST) {
        if (err != NULL && err->code == 0)
            err->offset = 0;
        return ddp_err_set(err, DDP_EFRAME, "unknown rendezvous command 0x%02x", cmd);
    }
    req->cmd = cmd;
    long rc = req_fields(&c, req);
    if (rc == 0)
        *need = c.need;
    return rc;
}

/* Appends a NUL-free, non-empty string of at most max bytes as a blob. */
static int put_str(ddp_buf_t *b, const char *s, size_t max) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > max)
        return -EINVAL;
    return rdzv__put_blob(b, s, n);
}

/* Encoders undo a partial frame on failure, so b never holds half a request. */
#define PUT(x)                                                                                     \
    do {                                                                                           \
        int put_rc_ = (x);                                                                         \
        if (put_rc_ < 0) {                                                                         \
            b->len = start;                                                                        \
            return put_rc_;                                                                        \
        }                                                                                          \
    } while (0)

/* The request writers, one per request layout (rdzv_commands.h): the whole frame of command
 * cmd. */
static int req_write_join(ddp_buf_t *b, uint8_t cmd, const rdzv_join_req_t *q) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(put_str(b, q->run_id, RDZV_RUN_ID_MAX));
    PUT(put_str(b, q->host, RDZV_HOST_MAX));
    const int64_t v[] = {q->want_node_rank,
                         q->nproc,
                         q->master_port,
                         q->cfg.min_nodes,
                         q->cfg.max_nodes,
                         q->cfg.last_call_timeout_ms,
                         q->cfg.join_timeout_ms,
                         q->cfg.keep_alive_interval_ms,
                         q->cfg.keep_alive_max_attempt,
                         q->cfg.max_restarts,
                         q->min_round,
                         q->restarts_used};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        PUT(rdzv__put_i64(b, v[i]));
    size_t keys = strlen(q->cfg.round_keys); /* may be empty: no round keys to drop */
    if (keys > RDZV_ROUND_KEYS_MAX || rdzv_name_bad_at(q->cfg.round_keys, keys) < keys)
        PUT(-EINVAL);
    PUT(rdzv__put_blob(b, q->cfg.round_keys, keys));
    PUT(rdzv__put_i64(b, q->cfg.max_node_failures));
    return 0;
}

static int req_write_run_only(ddp_buf_t *b, uint8_t cmd, const char *run_id) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(put_str(b, run_id, RDZV_RUN_ID_MAX));
    return 0;
}

/* A free text of 0..RDZV_WHAT_MAX bytes (longer: cut; NULL: empty). */
static int put_what(ddp_buf_t *b, const char *what) {
    size_t n = what != NULL ? strlen(what) : 0;
    if (n > RDZV_WHAT_MAX)
        n = RDZV_WHAT_MAX;
    return rdzv__put_blob(b, what != NULL ? what : "", n);
}

static int req_write_member(ddp_buf_t *b, uint8_t cmd, const char *run_id, int64_t member,
                            int64_t member_key) {
    size_t start = b->len;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(rdzv__put_i64(b, member));
    PUT(rdzv__put_i64(b, member_key));
    return 0;
}

static int req_write_page(ddp_buf_t *b, uint8_t cmd, const char *run_id, int64_t first,
                          int64_t limit) {
    size_t start = b->len;
    if (first < 0 || first > RDZV_ROUND_MAX_NODES || limit < 0 || limit > RDZV_ROUND_MAX_NODES)
        return -EINVAL;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(rdzv__put_i64(b, first));
    PUT(rdzv__put_i64(b, limit));
    return 0;
}

static int req_write_round_what(ddp_buf_t *b, uint8_t cmd, const char *run_id, int64_t round,
                                const char *what) {
    size_t start = b->len;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(rdzv__put_i64(b, round));
    PUT(put_what(b, what));
    return 0;
}

static int req_write_what(ddp_buf_t *b, uint8_t cmd, const char *run_id, const char *what) {
    size_t start = b->len;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(put_what(b, what));
    return 0;
}

static int req_write_host_what(ddp_buf_t *b, uint8_t cmd, const char *run_id, const char *host,
                               const char *what) {
    size_t start = b->len;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(put_str(b, host, RDZV_HOST_MAX));
    PUT(put_what(b, what));
    return 0;
}

static int req_write_round_only(ddp_buf_t *b, uint8_t cmd, const char *run_id, int64_t round) {
    size_t start = b->len;
    PUT(req_write_run_only(b, cmd, run_id));
    PUT(rdzv__put_i64(b, round));
    return 0;
}

#define X(code, NAME, name, req, rep)                                                              \
    int rdzv_##name##_req_encode(ddp_buf_t *b, RDZV_REQ_PARAMS_##req) {                            \
        return req_write_##req(b, code, RDZV_REQ_ARGS_##req);                                      \
    }
RDZV_COMMANDS(X)
#undef X

/* The reply writers, one per reply layout (rdzv_commands.h): the whole reply to command cmd. */
static int rep_write_join(ddp_buf_t *b, uint8_t cmd, const rdzv_join_result_t *res) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, 0));
    PUT(rdzv__put_i64(b, res->round));
    PUT(rdzv__put_i64(b, res->group_rank));
    PUT(rdzv__put_i64(b, res->group_world_size));
    PUT(rdzv__put_i64(b, res->rank_base));
    PUT(rdzv__put_i64(b, res->world_size));
    PUT(rdzv__put_blob(b, res->master_addr, strnlen(res->master_addr, RDZV_HOST_MAX)));
    PUT(rdzv__put_i64(b, res->master_port));
    PUT(rdzv__put_i64(b, res->restarts_used));
    PUT(rdzv__put_i64(b, res->store_flags));
    PUT(rdzv__put_i64(b, res->member));
    PUT(rdzv__put_i64(b, res->member_key));
    return 0;
}

/* The join layout's refusal: status 1, code, text. */
static int rep_write_join_err(ddp_buf_t *b, uint8_t cmd, int code, const char *text) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, 1));
    PUT(rdzv__put_i64(b, code));
    PUT(rdzv__put_blob(b, text != NULL ? text : "",
                       text != NULL ? strnlen(text, RDZV_REPLY_TEXT_MAX) : 0));
    return 0;
}

int rdzv_join_reply_encode_err(ddp_buf_t *b, int code, const char *text) {
    return rep_write_join_err(b, RDZV_CMD_RDZV_JOIN, code, text);
}

static int rep_write_beat(ddp_buf_t *b, uint8_t cmd, int ok, int64_t round, int state) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, ok ? 0 : 1));
    PUT(rdzv__put_i64(b, round));
    PUT(rdzv__put_i64(b, state));
    return 0;
}

static int rep_write_fail(ddp_buf_t *b, uint8_t cmd, const rdzv_fail_reply_t *rep) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, rep->status));
    PUT(rdzv__put_i64(b, rep->round));
    PUT(rdzv__put_i64(b, rep->restarts_used));
    PUT(rdzv__put_i64(b, rep->max_restarts));
    return 0;
}

static int rep_write_json(ddp_buf_t *b, uint8_t cmd, int ok, const void *text, size_t n) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, ok ? 0 : 1));
    PUT(rdzv__put_blob(b, text, n));
    return 0;
}

static int rep_write_ack(ddp_buf_t *b, uint8_t cmd, int ok) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, ok ? 0 : 1));
    return 0;
}

#define X(code, NAME, name, req, rep)                                                              \
    int rdzv_##name##_reply_encode(ddp_buf_t *b, RDZV_REP_PARAMS_##rep) {                          \
        return rep_write_##rep(b, code, RDZV_REP_ARGS_##rep);                                      \
    }
RDZV_COMMANDS(X)
#undef X

/* The refusal writers by reply layout: the layouts whose reply carries a text have one. */
static int rep_refuse_join(ddp_buf_t *b, uint8_t cmd, int code, const char *text) {
    return rep_write_join_err(b, cmd, code, text);
}

static int rep_refuse_json(ddp_buf_t *b, uint8_t cmd, int code, const char *text) {
    (void)code;
    return rep_write_json(b, cmd, 0, text, strlen(text));
}

/* The beat, fail and ack layouts carry no text of their own: a status of its own, then the
 * code and the text. */
static int rep_refuse_fields(ddp_buf_t *b, uint8_t cmd, int code, const char *text) {
    size_t start = b->len;
    PUT(rdzv__put_u8(b, cmd));
    PUT(rdzv__put_u8(b, RDZV_REPLY_REFUSED));
    PUT(rdzv__put_i64(b, code));
    PUT(rdzv__put_blob(b, text != NULL ? text : "",
                       text != NULL ? strnlen(text, RDZV_REPLY_TEXT_MAX) : 0));
    return 0;
}

#define rep_refuse_beat rep_refuse_fields
#define rep_refuse_fail rep_refuse_fields
#define rep_refuse_ack rep_refuse_fields

static int (*const rep_refusers[RDZV_CMD_RDZV_COUNT])(ddp_buf_t *, uint8_t, int, const char *) = {
#define X(code, NAME, name, req, rep) [code - RDZV_CMD_RDZV_FIRST] = rep_refuse_##rep,
    RDZV_COMMANDS(X)
#undef X
};

int rdzv_round_refusal_encode(ddp_buf_t *b, int cmd, int code, const char *text) {
    if (cmd < RDZV_CMD_RDZV_FIRST || cmd > RDZV_CMD_RDZV_LAST ||
        rep_refusers[cmd - RDZV_CMD_RDZV_FIRST] == NULL)
        return -ENOTSUP;
    return rep_refusers[cmd - RDZV_CMD_RDZV_FIRST](b, (uint8_t)cmd, code, text);
}

/* The reply readers, one per reply layout (rdzv_commands.h): the fields after the status byte.
 * Each returns 1, 0 (incomplete) or an error. */
static int rep_read_join(cur_t *c, rdzv_round_reply_t *p) {
    if (p->status == 0) {
        rdzv_join_result_t *j = &p->join;
        STEP(cur_i64(c, &j->round));
        STEP(cur_i64(c, &j->group_rank));
        STEP(cur_i64(c, &j->group_world_size));
        STEP(cur_i64(c, &j->rank_base));
        STEP(cur_i64(c, &j->world_size));
        STEP(cur_str(c, j->master_addr, NULL, RDZV_HOST_MAX, STR_TEXT, "master_addr"));
        STEP(cur_i64(c, &j->master_port));
        STEP(cur_i64(c, &j->restarts_used));
        STEP(cur_i64(c, &j->store_flags));
        STEP(cur_i64(c, &j->member));
        STEP(cur_i64(c, &j->member_key));
    } else if (p->status == 1) {
        STEP(cur_i64(c, &p->code));
        STEP(cur_str(c, NULL, &p->text, RDZV_REPLY_TEXT_MAX, STR_ANY, "error text"));
    } else {
        return ddp_err_set(c->err, DDP_EPROTO, "JOIN reply status %u unknown", p->status);
    }
    return 1;
}

static int rep_read_beat(cur_t *c, rdzv_round_reply_t *p) {
    STEP(cur_i64(c, &p->round));
    STEP(cur_i64(c, &p->state));
    return 1;
}

static int rep_read_fail(cur_t *c, rdzv_round_reply_t *p) {
    if (p->status > RDZV_FAIL_RUN_FAILED)
        return ddp_err_set(c->err, DDP_EPROTO, "FAIL reply status %u unknown", p->status);
    p->fail.status = p->status;
    STEP(cur_i64(c, &p->fail.round));
    STEP(cur_i64(c, &p->fail.restarts_used));
    STEP(cur_i64(c, &p->fail.max_restarts));
    return 1;
}

static int rep_read_json(cur_t *c, rdzv_round_reply_t *p) {
    STEP(cur_str(c, NULL, &p->text, RDZV_STATUS_JSON_MAX, STR_ANY, "status"));
    return 1;
}

static int rep_read_ack(cur_t *c, rdzv_round_reply_t *p) {
    if (p->status > 1)
        return ddp_err_set(c->err, DDP_EPROTO, "%s reply status %u unknown",
                           rdzv_round_cmd_name(p->cmd), p->status);
    return 1;
}

static int (*const rep_readers[RDZV_CMD_RDZV_COUNT])(cur_t *, rdzv_round_reply_t *) = {
#define X(code, NAME, name, req, rep) [code - RDZV_CMD_RDZV_FIRST] = rep_read_##rep,
    RDZV_COMMANDS(X)
#undef X
};

static long reply_fields(cur_t *c, rdzv_round_reply_t *p) {
    STEP(cur_u8(c, &p->status));
    int (*read)(cur_t *, rdzv_round_reply_t *) = rep_readers[p->cmd - RDZV_CMD_RDZV_FIRST];
    if (p->status == RDZV_REPLY_REFUSED &&
        (read == rep_read_beat || read == rep_read_fail || read == rep_read_ack)) {
        STEP(cur_i64(c, &p->code));
        STEP(cur_str(c, NULL, &p->text, RDZV_REPLY_TEXT_MAX, STR_ANY, "error text"));
        return (long)c->off;
    }
    STEP(read(c, p));
    return (long)c->off;
}

long rdzv_round_reply_parse(const uint8_t *buf, size_t len, rdzv_round_reply_t *rep, size_t *need,
                            ddp_err_t *err) {
    cur_t c = {buf, len, 0, 0, err, DDP_EPROTO};
    ddp_buf_t text = rep->text;
    memset(rep, 0, sizeof *rep);
    rep->text = text;
    ddp_buf_reset(&rep->text);
    if (!cur_u8(&c, &rep->cmd)) {
        *need = 1;
        return 0;
    }
    if (rep->cmd < RDZV_CMD_RDZV_FIRST || rep->cmd > RDZV_CMD_RDZV_LAST)
        return ddp_err_set(err, DDP_EPROTO, "unexpected reply 0x%02x to a rendezvous command",
                           rep->cmd);
    long rc = reply_fields(&c, rep);
    if (rc == 0)
        *need = c.need;
    return rc;
}

long rdzv_round_reply_len(void *arg, const uint8_t *buf, size_t len, size_t *need) {
    (void)arg;
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    long n = rdzv_round_reply_parse(buf, len, &rep, need, NULL);
    ddp_buf_free(&rep.text);
    return n;
}

/* ---- progress ---- */

int rdzv_progress_format(char *val, size_t cap, const rdzv_progress_t *p) {
    int n =
        snprintf(val, cap, "%" PRId64 " %" PRId64 " %" PRId64, p->round, p->step, p->beat_age_ms);
    if (n > 0 && (size_t)n < cap && p->has_goodput) {
        int m = snprintf(val + n, cap - (size_t)n, " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
                         p->wall_ms, p->productive_ms, p->lost_ms, p->restarts);
        n = m > 0 ? n + m : -1;
    }
    return n > 0 && (size_t)n < cap ? n : -EINVAL;
}

/* The fields of a progress value: three, or seven with the goodput. */
#define PROGRESS_FIELDS 3
#define PROGRESS_FIELDS_GOODPUT 7

int rdzv_progress_parse(const void *val, size_t n, rdzv_progress_t *out) {
    char buf[RDZV_PROGRESS_VALUE_MAX + 1];
    if (n == 0 || n > RDZV_PROGRESS_VALUE_MAX)
        return -EINVAL;
    memcpy(buf, val, n);
    buf[n] = '\0';
    /* Fields one space apart: an empty field (a leading, trailing or doubled space) fails
     * ddp_parse_i64, as does anything after a number. */
    char *f[PROGRESS_FIELDS_GOODPUT];
    size_t nf = 0;
    for (char *s = buf;;) {
        if (nf == PROGRESS_FIELDS_GOODPUT)
            return -EINVAL;
        f[nf++] = s;
        char *sp = strchr(s, ' ');
        if (sp == NULL)
            break;
        *sp = '\0';
        s = sp + 1;
    }
    if (nf != PROGRESS_FIELDS && nf != PROGRESS_FIELDS_GOODPUT)
        return -EINVAL;
    /* round, step (-1: none yet), age, then wall, productive, lost, restarts */
    static const int64_t lo[PROGRESS_FIELDS_GOODPUT] = {0, -1, 0, 0, 0, 0, 0};
    int64_t v[PROGRESS_FIELDS_GOODPUT] = {0};
    for (size_t i = 0; i < nf; i++)
        if (ddp_parse_i64(f[i], lo[i], INT64_MAX, &v[i]) < 0)
            return -EINVAL;
    rdzv_progress_t p = {.round = v[0],
                         .step = v[1],
                         .beat_age_ms = v[2],
                         .has_goodput = nf == PROGRESS_FIELDS_GOODPUT,
                         .wall_ms = v[3],
                         .productive_ms = v[4],
                         .lost_ms = v[5],
                         .restarts = v[6]};
    /* Parts of the wall time cannot exceed it: a goodput above 100% is no agent's. */
    if (p.productive_ms > p.wall_ms || p.lost_ms > p.wall_ms)
        return -EINVAL;
    *out = p;
    return 0;
}

const char *rdzv_round_cmd_name(int cmd) {
    return cmd >= RDZV_CMD_RDZV_FIRST && cmd <= RDZV_CMD_RDZV_LAST ? rdzv__cmd_name(cmd) : NULL;
}
