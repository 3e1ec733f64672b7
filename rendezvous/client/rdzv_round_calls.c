/* SPDX-License-Identifier: Apache-2.0
 * Typed rendezvous calls on the asynchronous client (rdzv_round_calls.h): encode with rdzv_proto,
 * send with rdzv_aclient_raw, decode the reply before the caller sees it. The exit barrier's
 * calls are store commands (ADD, SET, WAIT) on the keys rdzv_layout names. */
#include "rdzv_round_calls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_layout.h"

/* One call in flight: what to check the reply against, and whom to tell. */
typedef struct acall {
    uint8_t cmd;
    rdzv_acall_cb cb;
    void *arg;
} acall_t;

static const char *cmd_name(uint8_t cmd) {
    const char *name = rdzv_round_cmd_name(cmd);
    return name != NULL ? name : "RDZV_?";
}

static void on_raw_reply(void *arg, int status, const uint8_t *reply, size_t len,
                         const char *errtext) {
    acall_t *call = arg;
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    char why[DDP_ERR_TEXT_LEN + 64];
    if (status == 0) {
        ddp_err_t perr;
        ddp_err_clear(&perr);
        size_t need = 0;
        /* rdzv_round_reply_len framed a whole reply, so 0 (incomplete) cannot happen here. */
        if (rdzv_round_reply_parse(reply, len, &rep, &need, &perr) <= 0) {
            status = DDP_EPROTO;
            snprintf(why, sizeof why, "malformed %s reply: %s", cmd_name(call->cmd),
                     perr.text[0] ? perr.text : "cut short");
            errtext = why;
        } else if (rep.cmd != call->cmd) {
            status = DDP_EPROTO;
            snprintf(why, sizeof why, "a %s reply came for %s", cmd_name(rep.cmd),
                     cmd_name(call->cmd));
            errtext = why;
        }
    }
    call->cb(call->arg, status, status == 0 ? &rep : NULL, errtext);
    ddp_buf_free(&rep.text);
    free(call);
}

/* Sends frame (consumed) for cmd; what names it in rdzv_aclient's error texts. */
static int submit(rdzv_aclient_t *c, uint8_t cmd, int encoded, ddp_buf_t *frame, unsigned flags,
                  int timeout_ms, const char *what, rdzv_acall_cb cb, void *arg, ddp_err_t *err) {
    int rc = encoded;
    acall_t *call = NULL;
    if (rc == -EINVAL)
        ddp_err_set(err, rc, "%s: a string is empty or over its bound", cmd_name(cmd));
    else if (rc == 0 && (call = malloc(sizeof *call)) == NULL)
        rc = -ENOMEM;
    if (rc == -ENOMEM)
        ddp_err_set(err, rc, "%s: out of memory", cmd_name(cmd));
    if (rc == 0) {
        *call = (acall_t){.cmd = cmd, .cb = cb, .arg = arg};
        rc = rdzv_aclient_raw(c, frame, rdzv_round_reply_len, flags, timeout_ms,
                              what ? what : cmd_name(cmd), on_raw_reply, call, err);
        if (rc < 0)
            free(call);
    }
    ddp_buf_free(frame);
    return rc;
}

int rdzv_acall_join(rdzv_aclient_t *c, const rdzv_join_req_t *req, int timeout_ms, rdzv_acall_cb cb,
                    void *arg, ddp_err_t *err) {
    ddp_buf_t frame = DDP_BUF_INIT;
    char what[RDZV_RUN_ID_MAX + 32];
    snprintf(what, sizeof what, "RDZV_JOIN run '%s'", req->run_id);
    return submit(c, RDZV_CMD_RDZV_JOIN, rdzv_join_req_encode(&frame, req), &frame,
                  RDZV_ACLIENT_PARKS, timeout_ms, what, cb, arg, err);
}

/* The typed calls of the commands whose reply comes at once (rdzv_round_calls.h), one per
 * row of rdzv_commands.h: encode, send, hand the decoded reply over. A command whose reply has
 * the join layout parks and has its own call (rdzv_acall_join, above). */
#define ACALL_AT_ONCE(code, name, req)                                                             \
    int rdzv_acall_##name(rdzv_aclient_t *c, RDZV_REQ_PARAMS_##req, rdzv_acall_cb cb, void *arg,   \
                          ddp_err_t *err) {                                                        \
        ddp_buf_t frame = DDP_BUF_INIT;                                                            \
        return submit(c, code, rdzv_##name##_req_encode(&frame, RDZV_REQ_ARGS_##req), &frame, 0,   \
                      -1, NULL, cb, arg, err);                                                     \
    }
#define ACALL_join(code, name, req)
#define ACALL_beat(code, name, req) ACALL_AT_ONCE(code, name, req)
#define ACALL_fail(code, name, req) ACALL_AT_ONCE(code, name, req)
#define ACALL_json(code, name, req) ACALL_AT_ONCE(code, name, req)
#define ACALL_ack(code, name, req) ACALL_AT_ONCE(code, name, req)
#define X(code, NAME, name, req, rep) ACALL_##rep(code, name, req)
RDZV_COMMANDS(X)
#undef X

/* ---- the exit barrier ---- */

/* One barrier call in flight: whom to tell, in the shape of its result. */
typedef struct barrier_call {
    rdzv_acall_count_cb count_cb;
    rdzv_acall_done_cb done_cb;
    void *arg;
} barrier_call_t;

static void on_barrier_count(void *arg, int status, const uint8_t *reply, size_t len,
                             const char *errtext) {
    barrier_call_t *call = arg;
    int64_t n = 0;
    if (status == 0 && rdzv_aclient_reply_i64(reply, len, &n) < 0) {
        status = DDP_EPROTO;
        errtext = "malformed reply at the exit barrier";
    }
    rdzv_barrier_count_t count = {.arrived = n % RDZV_BARRIER_SEAL,
                                  .sealed = n >= RDZV_BARRIER_SEAL};
    call->count_cb(call->arg, status, status == 0 ? &count : NULL, errtext);
    free(call);
}

static void on_barrier_done(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)reply, (void)len;
    barrier_call_t *call = arg;
    call->done_cb(call->arg, status, errtext);
    free(call);
}

/* The barrier key of round (done: the done key, else the counter) into key; a new call for cb
 * in *out. Returns 0, or -EINVAL / -ENOMEM described in err. */
static int barrier_call_new(const char *run_id, int64_t round, int done, char *key, size_t cap,
                            barrier_call_t call, barrier_call_t **out, ddp_err_t *err) {
    int rc = done ? rdzv_layout_exit_done_key(key, cap, run_id, round)
                  : rdzv_layout_exit_key(key, cap, run_id, round);
    if (rc < 0)
        return ddp_err_set(err, -EINVAL, "exit barrier: run id '%.64s' or round %lld out of range",
                           run_id ? run_id : "", (long long)round);
    if ((*out = malloc(sizeof **out)) == NULL)
        return ddp_err_set(err, -ENOMEM, "exit barrier: out of memory");
    **out = call;
    return 0;
}

/* ADDs delta to round's counter. */
static int barrier_add(rdzv_aclient_t *c, const char *run_id, int64_t round, int64_t delta,
                       rdzv_acall_count_cb cb, void *arg, ddp_err_t *err) {
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_call_t *call;
    int rc = barrier_call_new(run_id, round, 0, key, sizeof key,
                              (barrier_call_t){.count_cb = cb, .arg = arg}, &call, err);
    if (rc == 0 && (rc = rdzv_aclient_add(c, key, delta, on_barrier_count, call, err)) < 0)
        free(call);
    return rc;
}

int rdzv_acall_barrier_arrive(rdzv_aclient_t *c, const char *run_id, int64_t round,
                              rdzv_acall_count_cb cb, void *arg, ddp_err_t *err) {
    return barrier_add(c, run_id, round, 1, cb, arg, err);
}

int rdzv_acall_barrier_seal(rdzv_aclient_t *c, const char *run_id, int64_t round,
                            rdzv_acall_count_cb cb, void *arg, ddp_err_t *err) {
    return barrier_add(c, run_id, round, RDZV_BARRIER_SEAL, cb, arg, err);
}

int rdzv_acall_barrier_release(rdzv_aclient_t *c, const char *run_id, int64_t round,
                               rdzv_acall_done_cb cb, void *arg, ddp_err_t *err) {
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_call_t *call;
    int rc = barrier_call_new(run_id, round, 1, key, sizeof key,
                              (barrier_call_t){.done_cb = cb, .arg = arg}, &call, err);
    if (rc == 0 && (rc = rdzv_aclient_set(c, key, "1", 1, on_barrier_done, call, err)) < 0)
        free(call);
    return rc;
}

int rdzv_acall_barrier_wait(rdzv_aclient_t *c, const char *run_id, int64_t round, int timeout_ms,
                            rdzv_acall_done_cb cb, void *arg, ddp_err_t *err) {
    char key[RDZV_LAYOUT_KEY_MAX];
    barrier_call_t *call;
    int rc = barrier_call_new(run_id, round, 1, key, sizeof key,
                              (barrier_call_t){.done_cb = cb, .arg = arg}, &call, err);
    const char *keys[1] = {key};
    if (rc == 0 && (rc = rdzv_aclient_wait(c, keys, 1, timeout_ms, on_barrier_done, call, err)) < 0)
        free(call);
    return rc;
}
