/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server_round: the store's side of multi-node rendezvous (docs/protocol-rdzv.md): runs the
 * commands of rdzv_commands.h (one handler each) through the state machines of rdzv_round.c and
 * carries out the actions they return (replies to parked JOINs, end-of-round keys, closing silent
 * members) on one timer. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_log.h"
#include "rdzv_layout.h"

/* ---- multi-node rendezvous (docs/protocol-rdzv.md) ---- */

static conn_t *conn_by_id(rdzv_server_t *s, uint64_t id) {
    for (conn_t *c = s->conns; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* The connections by id for one batch of actions. A round closing answers every member, and a
 * list walk per answer makes that O(members x connections): 60 ms at 4k nodes, growing with the
 * square to ~15 s of stalled loop at 64k, past the default keep-alive window. The list is
 * in descending id order (accepted connections go to its head, ids only grow), so one walk fills
 * a sorted array. Entries stay valid for the batch: a connection closed meanwhile is marked
 * closing and freed only in its close callback, on a later loop turn. */
typedef struct conn_index {
    conn_t **v; /* owned; NULL: look up by walking the list */
    size_t n;
} conn_index_t;

static void conn_index_build(rdzv_server_t *s, size_t nacts, conn_index_t *ix) {
    ix->v = NULL;
    ix->n = 0;
    if (nacts < 16 || s->st.conns == 0 || (ix->v = malloc(s->st.conns * sizeof *ix->v)) == NULL)
        return;
    for (conn_t *c = s->conns; c != NULL && ix->n < s->st.conns; c = c->next)
        ix->v[ix->n++] = c;
}

static conn_t *conn_index_find(rdzv_server_t *s, const conn_index_t *ix, uint64_t id) {
    if (ix->v == NULL)
        return conn_by_id(s, id);
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->v[mid]->id == id)
            return ix->v[mid];
        if (ix->v[mid]->id > id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Sends an encoded reply b to c (if it is still open) and frees b's contents. */
static void reply_buf(conn_t *c, ddp_buf_t *b) {
    if (c != NULL && !c->closing) {
        rdzv__reply_bytes(c, b->data, b->len);
        rdzv__conn_flush(c);
    }
    ddp_buf_free(b);
}

/* SETs key to val for the server itself (no requesting connection) and wakes its waiters. */
static void set_internal(rdzv_server_t *s, const char *key, const char *val) {
    rdzv_slice_t k = {(const uint8_t *)key, strlen(key)};
    entry_t *e = rdzv__keys_get_or_add(s, &k);
    if (e == NULL || rdzv__entry_set(s, e, val, strlen(val)) < 0) {
        if (e != NULL)
            rdzv__keys_maybe_remove(s, e);
        rdzv__slog(s, DDP_LOG_ERROR, "store memory limit reached setting '%s'", key);
        return;
    }
    rdzv__keys_wake(s, e);
}

/* rdzv_server_forget_rounds' test: keys of run `run` from a round below `before`. */
typedef struct forget {
    const char *run, *round_keys;
    int64_t before;
} forget_t;

/* 1 to keep key: anything but run's round keys and end keys of a round below f->before. */
static int keep_key(void *ctx, const uint8_t *k, size_t n) {
    const forget_t *f = ctx;
    int64_t round = rdzv_layout_end_round_of(k, n, f->run);
    if (round < 0)
        round = rdzv_layout_round_of(k, n, f->round_keys, f->run);
    return round < 0 || round >= f->before;
}

void rdzv_server_forget_rounds(rdzv_server_t *s, const char *run_id, const char *round_keys,
                               int64_t before) {
    if (s == NULL || s->closing || run_id == NULL || before <= 0)
        return;
    forget_t f = {run_id, round_keys, before};
    rdzv__keys_drop_if(s, keep_key, &f);
}

static void on_rtimer(uv_timer_t *t);

/* Carries out the actions the rendezvous produced, then re-arms its timer. The list is taken
 * first: closing a connection below appends to s->acts again. */
static void rounds_after(rdzv_server_t *s) {
    while (s->acts.n > 0) {
        rdzv_actions_t todo = s->acts;
        s->acts = (rdzv_actions_t)RDZV_ACTIONS_INIT;
        conn_index_t ix;
        conn_index_build(s, todo.n, &ix);
        const rdzv_action_t *forgot = NULL; /* the last (run, round) whose old keys went */
        for (size_t i = 0; i < todo.n; i++) {
            const rdzv_action_t *a = &todo.v[i];
            ddp_buf_t b = DDP_BUF_INIT;
            switch (a->kind) {
            case RDZV_ACT_REPLY_OK:
                /* A round closed: the keys of the rounds before the previous one go (every
                 * member of the new round has left those; the previous one's stay for a
                 * straggler). Once per run and round, not per member. */
                if (forgot == NULL || forgot->res.round != a->res.round ||
                    strcmp(forgot->run_id, a->run_id) != 0) {
                    rdzv_server_forget_rounds(s, a->run_id, a->round_keys, a->res.round - 1);
                    forgot = a;
                }
                rdzv_join_result_t res = a->res;
                res.store_flags = s->embedded ? RDZV_STORE_EMBEDDED : 0;
                if (rdzv_join_reply_encode(&b, &res) == 0)
                    reply_buf(conn_index_find(s, &ix, a->member), &b);
                break;
            case RDZV_ACT_REPLY_ERR:
                if (rdzv_join_reply_encode_err(&b, a->code, a->text) == 0)
                    reply_buf(conn_index_find(s, &ix, a->member), &b);
                break;
            case RDZV_ACT_END_ROUND: {
                char key[RDZV_LAYOUT_KEY_MAX];
                /* The text already reads "rendezvous 'R' round N ended: why". */
                rdzv__slog(s, DDP_LOG_INFO, "%s", a->text);
                /* The value says why, for the agents that were waiting on it. The run id and
                 * round came through the state machine's checks: the key always fits. */
                if (rdzv_layout_end_key(key, sizeof key, a->run_id, a->round) == 0)
                    set_internal(s, key, a->text[0] ? a->text : "ended");
                break;
            }
            case RDZV_ACT_RUN_DONE:
                if (s->durable != NULL && s->durable->run_done != NULL)
                    s->durable->run_done(s->durable_arg, a->run_id, a->round);
                break;
            case RDZV_ACT_HOST_RECORD:
                if (s->durable != NULL && s->durable->host_record != NULL)
                    s->durable->host_record(s->durable_arg, a->run_id, a->host, a->failures,
                                            a->excluded, a->text);
                break;
            case RDZV_ACT_CLOSE: {
                conn_t *c = conn_index_find(s, &ix, a->member);
                rdzv__slog(s, DDP_LOG_WARN, "%s: %s", c ? c->peer : "member", a->text);
                if (c != NULL)
                    rdzv__conn_close(c);
                break;
            }
            default: break;
            }
            ddp_buf_free(&b);
        }
        free(ix.v);
        rdzv_actions_close(&todo);
    }
    if (!s->rtimer_live)
        return;
    uint64_t next = rdzv_runs_next_deadline(s->runs), now = uv_now(s->loop);
    int rc = next == UINT64_MAX
                 ? uv_timer_stop(&s->rtimer)
                 : uv_timer_start(&s->rtimer, on_rtimer, next > now ? next - now : 0, 0);
    /* Neither fails on an initialised timer; were it to, deadlines would go unnoticed, so say so.
     */
    if (rc < 0)
        rdzv__slog(s, DDP_LOG_ERROR, "unable to arm the rendezvous timer: %s", uv_strerror(rc));
}

static void on_rtimer(uv_timer_t *t) {
    rdzv_server_t *s = t->data;
    rdzv_runs_tick(s->runs, uv_now(s->loop), &s->acts);
    rounds_after(s);
}

void rdzv__round_leave(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (s->runs == NULL || s->closing)
        return;
    rdzv_runs_leave(s->runs, c->id, uv_now(s->loop), &s->acts);
    rounds_after(s);
}

/* The registry and its timer, made on the first rendezvous command (a plain store never pays). */
static int rounds_ready(rdzv_server_t *s) {
    if (s->runs != NULL)
        return 0;
    s->runs = rdzv_runs_new(NULL);
    if (s->runs == NULL || uv_timer_init(s->loop, &s->rtimer) < 0) {
        rdzv_runs_free(s->runs);
        s->runs = NULL;
        return -ENOMEM;
    }
    s->rtimer.data = s;
    s->rtimer_live = 1;
    s->live_handles++;
    return 0;
}

int rdzv_server_restore_done(rdzv_server_t *s, const char *run_id, int64_t round, ddp_err_t *err) {
    if (s == NULL || s->closing)
        return ddp_err_set(err, DDP_ECLOSED, "restore: the store is closing");
    if (rounds_ready(s) < 0)
        return ddp_err_set(err, -ENOMEM, "restore: out of memory");
    int rc = rdzv_runs_restore_done(s->runs, run_id, round, uv_now(s->loop), err);
    rounds_after(s); /* the run's deadline (freed once empty long enough) */
    return rc;
}

int rdzv_server_restore_host(rdzv_server_t *s, const char *run_id, const char *host,
                             int64_t failures, int excluded, const char *last_failure,
                             ddp_err_t *err) {
    if (s == NULL || s->closing)
        return ddp_err_set(err, DDP_ECLOSED, "restore: the store is closing");
    if (rounds_ready(s) < 0)
        return ddp_err_set(err, -ENOMEM, "restore: out of memory");
    int rc = rdzv_runs_restore_host(s->runs, run_id, host, failures, excluded, last_failure,
                                    uv_now(s->loop), err);
    rounds_after(s);
    return rc;
}

/* STATUS: a member's progress, from the key its agent sets (rdzv_proto.h). */
static int progress_lookup(void *ctx, const char *run_id, int64_t group_rank, rdzv_progress_t *p) {
    rdzv_server_t *s = ctx;
    char key[RDZV_LAYOUT_KEY_MAX];
    if (rdzv_layout_progress_key(key, sizeof key, run_id, group_rank) < 0)
        return -ENOENT;
    rdzv_slice_t k = {(const uint8_t *)key, strlen(key)};
    entry_t *e = rdzv__keys_lookup(s, &k);
    if (e == NULL || !e->present || rdzv_progress_parse(e->val, e->vlen, p) < 0)
        return -ENOENT;
    return 0;
}

/* The handlers, one per command of rdzv_commands.h (on_<name>): each feeds its event to the
 * round machine at now and answers c, encoding into b (empty; the caller frees it); err is
 * cleared. */
typedef void (*round_handler_fn)(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                                 ddp_err_t *err);

static void on_join(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                    ddp_err_t *err) {
    rdzv_server_t *s = c->s;
    int rc = rdzv_runs_join(s->runs, c->id, &r->join, now, &s->acts, err);
    if (rc < 0) {
        /* A failed run's refusal whole: it names the root cause and the count by host. */
        char text[RDZV_ROUND_TEXT_MAX];
        if (rc != DDP_ERDZV_CLOSED ||
            rdzv_runs_failed_text(s->runs, r->join.run_id, text, sizeof text) < 0)
            snprintf(text, sizeof text, "%s", err->text);
        rdzv__slog(s, DDP_LOG_WARN, "%s: join of rendezvous '%s' refused: %s", c->peer,
                   r->join.run_id, text);
        if (rdzv_join_reply_encode_err(b, rc, text) == 0)
            reply_buf(c, b);
    } else {
        rdzv__slog(s, DDP_LOG_DEBUG, "%s (%s) joins rendezvous '%s'", c->peer, r->join.host,
                   r->join.run_id);
    }
}

static void on_heartbeat(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                         ddp_err_t *err) {
    (void)err;
    int64_t round = 0; /* docs/protocol-rdzv.md: both 0 for a non-member */
    int state = 0;
    int rc = rdzv_runs_heartbeat(c->s->runs, r->join.run_id, c->id, now, &round, &state);
    if (rdzv_heartbeat_reply_encode(b, rc == 0, round, state) == 0)
        reply_buf(c, b);
}

static void on_beat_for(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                        ddp_err_t *err) {
    (void)err;
    /* The member's spare path: its control connection may be stuck in TCP's backoff. */
    int64_t round = 0;
    int state = 0;
    int rc = rdzv_runs_beat_for(c->s->runs, r->join.run_id, (uint64_t)r->member, r->member_key, now,
                                &round, &state);
    if (rdzv_beat_for_reply_encode(b, rc == 0, round, state) == 0)
        reply_buf(c, b);
}

static void on_fail(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                    ddp_err_t *err) {
    (void)err;
    rdzv_server_t *s = c->s;
    rdzv_fail_reply_t rep;
    rdzv_runs_fail(s->runs, r->join.run_id, c->id, r->round, r->what, now, &s->acts, &rep);
    if (rdzv_fail_reply_encode(b, &rep) == 0)
        reply_buf(c, b);
}

static void on_abort(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                     ddp_err_t *err) {
    (void)err;
    rdzv_server_t *s = c->s;
    int rc = rdzv_runs_abort(s->runs, r->join.run_id, c->id, r->what, now, &s->acts);
    if (rc == 0)
        rdzv__slog(s, DDP_LOG_WARN, "%s stops rendezvous '%s' for good: %s", c->peer,
                   r->join.run_id, r->what);
    else if (rc == -EPERM)
        rdzv__slog(s, DDP_LOG_WARN,
                   "%s: ABORT of rendezvous '%s' ignored: the sender has never run in one of "
                   "its groups",
                   c->peer, r->join.run_id);
    if (rdzv_abort_reply_encode(b, rc == 0) == 0)
        reply_buf(c, b);
}

static void on_finish(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                      ddp_err_t *err) {
    (void)err;
    rdzv_server_t *s = c->s;
    int rc = rdzv_runs_finish(s->runs, r->join.run_id, c->id, r->round, now, &s->acts);
    if (rc == 0)
        rdzv__slog(s, DDP_LOG_INFO,
                   "rendezvous '%s' finished: round %lld passed its exit "
                   "barrier",
                   r->join.run_id, (long long)r->round);
    if (rdzv_finish_reply_encode(b, rc == 0) == 0)
        reply_buf(c, b);
}

static void on_unfit(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                     ddp_err_t *err) {
    (void)err;
    rdzv_server_t *s = c->s;
    int rc = rdzv_runs_unfit(s->runs, r->join.run_id, c->id, r->join.host, r->what, now);
    if (rc == 0)
        rdzv__slog(s, DDP_LOG_WARN, "%s: host %s of rendezvous '%s' is unfit: %s", c->peer,
                   r->join.host, r->join.run_id, r->what);
    else if (rc == -EPERM)
        rdzv__slog(s, DDP_LOG_WARN,
                   "%s: UNFIT for host %s of rendezvous '%s' ignored: the sender does not "
                   "run on that host",
                   c->peer, r->join.host, r->join.run_id);
    if (rdzv_unfit_reply_encode(b, rc == 0) == 0)
        reply_buf(c, b);
}

/* TIMING: a node's ranks' compute times; the reply is the run's stragglers (a JSON array), so
 * every agent names them too. Each change of the run's stragglers is one line of the log. */
static void on_timing(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                      ddp_err_t *err) {
    (void)err;
    rdzv_server_t *s = c->s;
    char log[RDZV_ROUND_TEXT_MAX * 2];
    int rc = rdzv_runs_timing(s->runs, r->join.run_id, c->id, r->round, r->what, now, &s->acts, log,
                              sizeof log);
    if (rc == -EINVAL)
        rdzv__slog(s, DDP_LOG_WARN,
                   "%s: TIMING of rendezvous '%s' ignored: malformed, or naming ranks not its own",
                   c->peer, r->join.run_id);
    for (char *line = log, *next; rc == 0 && *line != '\0'; line = next) {
        next = line + strcspn(line, "\n");
        if (*next == '\n')
            *next++ = '\0';
        rdzv__slog(s, DDP_LOG_WARN, "rendezvous '%s': %s", r->join.run_id, line);
    }
    ddp_buf_t json = DDP_BUF_INIT;
    int ok = rdzv_runs_stragglers_json(s->runs, r->join.run_id, now, &json) == 0;
    const char *text = ok ? (const char *)json.data : "unknown run";
    if (rdzv_timing_reply_encode(b, ok, text, ok ? json.len : strlen(text)) == 0)
        reply_buf(c, b);
    ddp_buf_free(&json);
}

/* STATUS and STATUS_PAGE: the run's JSON, whole or a page of its members. */
static void status_answer(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                          ddp_err_t *err, int page) {
    rdzv_server_t *s = c->s;
    ddp_buf_t json = DDP_BUF_INIT;
    int rc =
        page ? rdzv_runs_status_page_json(s->runs, r->join.run_id, now, progress_lookup, s,
                                          (size_t)r->first, (size_t)r->limit, &json, err)
             : rdzv_runs_status_json(s->runs, r->join.run_id, now, progress_lookup, s, &json, err);
    const char *text = rc == 0 ? (const char *)json.data : err->text;
    size_t n = rc == 0 ? json.len : strlen(err->text);
    if ((page ? rdzv_status_page_reply_encode : rdzv_status_reply_encode)(b, rc == 0, text, n) == 0)
        reply_buf(c, b);
    ddp_buf_free(&json);
}

static void on_status(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                      ddp_err_t *err) {
    status_answer(c, r, now, b, err, 0);
}

static void on_status_page(conn_t *c, const rdzv_round_req_t *r, uint64_t now, ddp_buf_t *b,
                           ddp_err_t *err) {
    status_answer(c, r, now, b, err, 1);
}

static const round_handler_fn round_handlers[RDZV_CMD_RDZV_COUNT] = {
#define X(code, NAME, name, req, rep) [code - RDZV_CMD_RDZV_FIRST] = on_##name,
    RDZV_COMMANDS(X)
#undef X
};

/* Runs one rendezvous command (r->cmd is one of rdzv_commands.h: rdzv_round_req_parse checks). */
void rdzv__round_dispatch(conn_t *c, const rdzv_round_req_t *r) {
    rdzv_server_t *s = c->s;
    s->st.requests++;
    s->cmd_counts[r->cmd]++;
    if (rounds_ready(s) < 0) {
        rdzv__conn_fail(c, &s->st.mem_refused, "out of memory for the rendezvous");
        return;
    }
    ddp_buf_t b = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    round_handlers[r->cmd - RDZV_CMD_RDZV_FIRST](c, r, uv_now(s->loop), &b, &err);
    ddp_buf_free(&b);
    rounds_after(s);
}

/* Answers a refused rendezvous request with text (JOIN and STATUS replies carry it, so the client
 * learns why), logs it naming the peer, counts it and closes the connection. */
static void refuse_and_close(conn_t *c, uint8_t cmd, int code, const char *text,
                             uint64_t *counter) {
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = rdzv_round_refusal_encode(&b, cmd, code, text);
    if (rc == 0)
        rc = rdzv__reply_bytes(c, b.data, b.len);
    ddp_buf_free(&b);
    if (c->closing)
        return;
    rdzv__slog(c->s, DDP_LOG_WARN, "closing connection from %s: %s", c->peer, text);
    (*counter)++;
    c->close_after_write = 1;
    rdzv__conn_flush(c);
}

/* Refuses r with code and text on a connection that stays open (the client asks again, or asks
 * the store the text names): counted as a request, logged at debug. Returns -1, or 0 when even the
 * refusal could not be encoded (refused and closed). */
static int refuse_keep_open(conn_t *c, const rdzv_round_req_t *r, int code, const char *text) {
    rdzv_server_t *s = c->s;
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = rdzv_round_refusal_encode(&b, r->cmd, code, text);
    if (rc == 0) {
        s->st.requests++;
        rdzv__reply_bytes(c, b.data, b.len);
        rdzv__conn_flush(c);
        ddp_buf_free(&b);
        rdzv__slog(s, DDP_LOG_DEBUG, "%s: %s", c->peer, text);
        return -1;
    }
    ddp_buf_free(&b);
    refuse_and_close(c, r->cmd, code, text, &s->st.conns_refused);
    return 0;
}

int rdzv__round_may_serve(conn_t *c, const rdzv_round_req_t *r) {
    rdzv_server_t *s = c->s;
    int may = s->may_serve == NULL ? 1 : s->may_serve(s->may_serve_arg, r->join.run_id);
    if (may > 0)
        return 1;
    const char *name = rdzv_round_cmd_name(r->cmd);
    name = name != NULL ? name + strlen("RDZV_") : "rendezvous command";
    char text[RDZV_ROUND_TEXT_MAX];
    if (may == 0 && s->redirect != NULL) {
        /* A candidate that does not lead: the store that does, or "not yet" while none is
         * named. The address is the whole text, for the client to connect to. */
        may = s->redirect(s->redirect_arg, r->join.run_id, text, sizeof text);
        if (may > 0) {
            text[sizeof text - 1] = '\0';
            return refuse_keep_open(c, r, DDP_ERDZV_MOVED, text);
        }
    }
    if (may < 0) {
        snprintf(text, sizeof text,
                 "%s refused: this store is not serving yet (it loads the run's records, or the "
                 "election has named no store yet); ask again shortly",
                 name);
        return refuse_keep_open(c, r, RDZV_NOT_YET, text);
    }
    snprintf(text, sizeof text,
             "%s refused: this store no longer serves the rendezvous (its node lost the "
             "leadership); find the store that serves it now",
             name);
    refuse_and_close(c, r->cmd, DDP_ECLOSED, text, &s->st.conns_refused);
    return 0;
}

void rdzv__round_refuse(conn_t *c, uint8_t cmd, int code, const ddp_err_t *err) {
    const char *name = rdzv_round_cmd_name(cmd);
    /* "RDZV_JOIN" -> "JOIN": the log and the reply say "malformed JOIN". */
    name = name != NULL ? name + strlen("RDZV_") : "rendezvous";
    char text[RDZV_ROUND_TEXT_MAX];
    snprintf(text, sizeof text, "malformed %s: %s (byte %ld)", name, err->text, err->offset);
    refuse_and_close(c, cmd, code, text, &c->s->st.bad_frames);
}

int rdzv__round_in_scope(conn_t *c, const rdzv_round_req_t *r) {
    if (c->scope == NULL || strcmp(r->join.run_id, c->scope) == 0)
        return 1;
    /* Both run ids are printable ASCII of at most RDZV_RUN_ID_MAX bytes (the parsers check). */
    const char *name = rdzv_round_cmd_name(r->cmd);
    char text[RDZV_ROUND_TEXT_MAX];
    snprintf(text, sizeof text,
             "%s for rendezvous '%s' refused: this connection holds the run token of '%s' and may "
             "act in that run alone",
             name != NULL ? name + strlen("RDZV_") : "rendezvous command", r->join.run_id,
             c->scope);
    refuse_and_close(c, r->cmd, DDP_EAUTH, text, &c->s->st.auth_refused);
    return 0;
}
