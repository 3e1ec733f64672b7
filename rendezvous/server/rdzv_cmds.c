/* SPDX-License-Identifier: Apache-2.0
 * rdzv_cmds: the store's commands (TCPStore's and ddprun's own): which commands each connection
 * state allows, the parse loop over a connection's input, and one handler per command. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "ddp_log.h"
#include "rdzv_auth_int.h"

/* ---- commands ---- */

static int set_value(conn_t *c, const rdzv_slice_t *key, const void *v, size_t n) {
    rdzv_server_t *s = c->s;
    entry_t *e = rdzv__keys_get_or_add(s, key);
    if (e == NULL || rdzv__entry_set(s, e, v, n) < 0) {
        char kr[300];
        if (e != NULL)
            rdzv__keys_maybe_remove(s, e);
        rdzv__conn_fail(c, &s->st.mem_refused,
                        "store memory limit (%zu bytes) reached setting key '%s'", s->max_total_mem,
                        rdzv__key_repr(key->p, key->n, kr, sizeof kr));
        return -1;
    }
    rdzv__keys_wake(s, e);
    return 0;
}

/* Parses a stored integer as std::stoll does (TCPStore's ADD): optional blanks and sign, at
 * least one digit, trailing bytes ignored. Returns 0 or -1. */
static int parse_stored_int(const uint8_t *p, size_t n, int64_t *out) {
    size_t i = 0;
    while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
        i++;
    int neg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    if (i >= n || p[i] < '0' || p[i] > '9')
        return -1;
    uint64_t v = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static void cmd_add(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    int64_t cur = 0;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    if (e != NULL && e->present && parse_stored_int(e->val, e->vlen, &cur) < 0) {
        rdzv__conn_fail(c, NULL, "ADD on key '%s' whose value is not an integer",
                        rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr));
        return;
    }
    int64_t sum;
    if (__builtin_add_overflow(cur, r->delta, &sum)) {
        rdzv__conn_fail(c, NULL, "ADD overflows the value of key '%s'",
                        rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr));
        return;
    }
    char num[24];
    int len = snprintf(num, sizeof num, "%lld", (long long)sum);
    if (set_value(c, &r->key, num, (size_t)len) == 0)
        rdzv__reply_i64(c, sum);
}

static void cmd_compare_set(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    if (e == NULL || !e->present) {
        if (r->val.n == 0) {
            if (set_value(c, &r->key, r->val2.p, r->val2.n) == 0)
                rdzv__reply_blob(c, r->val2.p, r->val2.n);
        } else {
            /* TCPStore answers with the expected value when the key is absent. */
            rdzv__reply_blob(c, r->val.p, r->val.n);
        }
        return;
    }
    if (e->vlen == r->val.n && (r->val.n == 0 || memcmp(e->val, r->val.p, r->val.n) == 0)) {
        if (rdzv__entry_set(s, e, r->val2.p, r->val2.n) < 0) {
            rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                            s->max_total_mem);
            return;
        }
    }
    rdzv__reply_blob(c, e->val, e->vlen);
}

static void cmd_append(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    if (e == NULL || !e->present) {
        set_value(c, &r->key, r->val.p, r->val.n);
        return;
    }
    if (e->vlen + r->val.n > s->lim.max_value_len) {
        rdzv__conn_fail(c, &s->st.bad_frames, "APPEND makes key '%s' longer than %zu bytes",
                        rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr), s->lim.max_value_len);
        return;
    }
    size_t need = e->vlen + r->val.n;
    if (need > e->vcap) {
        size_t cap = e->vcap * 2 > need ? e->vcap * 2 : need;
        uint8_t *p = NULL;
        if (!mem_allows(s, cap - e->vcap) || (p = realloc(e->val, cap)) == NULL) {
            rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached",
                            s->max_total_mem);
            return;
        }
        mem_acct(s, e->vcap, cap);
        e->val = p;
        e->vcap = cap;
    }
    if (r->val.n > 0)
        memcpy(e->val + e->vlen, r->val.p, r->val.n);
    e->vlen = need;
    rdzv__keys_wake(s, e);
}

/* One parked wait per connection (WAIT, GET_WAIT, BARRIER): 1 when c may park; otherwise c is
 * closed and 0 returned. */
static int may_park(conn_t *c, const rdzv_req_t *r) {
    if (c->wait_kind == WAIT_NONE)
        return 1;
    rdzv__conn_fail(c, &c->s->st.bad_frames, "%s while a wait is already parked",
                    rdzv__cmd_name(r->cmd));
    return 0;
}

/* Parks c, waiting as kind, on key k (added absent when unknown). Returns 0, or -1 with c closed
 * (memory limit). */
static int park_on(conn_t *c, int kind, const rdzv_slice_t *k, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (c->wait_kind == WAIT_NONE) {
        c->wait_kind = (uint8_t)kind;
        s->st.waiting++;
    }
    entry_t *e = rdzv__keys_get_or_add(s, k);
    if (e != NULL && rdzv__wait_add(c, e) == 0)
        return 0;
    if (e != NULL)
        rdzv__keys_maybe_remove(s, e);
    rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached in %s",
                    s->max_total_mem, rdzv__cmd_name(r->cmd));
    return -1;
}

static void cmd_wait(conn_t *c, const rdzv_req_t *r) {
    if (!may_park(c, r))
        return;
    const uint8_t *cur = r->list.p;
    for (uint64_t i = 0; i < r->nkeys; i++) {
        rdzv_slice_t k;
        rdzv__list_next(&cur, 0, &k, NULL);
        if (!rdzv__entry_ready(rdzv__keys_lookup(c->s, &k)) && park_on(c, WAIT_KEYS, &k, r) < 0)
            return;
    }
    if (c->wait_kind == WAIT_NONE)
        rdzv__reply_u8(c, RDZV_WAIT_STOP_WAITING);
}

static void cmd_get_wait(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    if (e != NULL && e->present) {
        if (rdzv__reply_u8(c, RDZV_GETW_FOUND) == 0)
            rdzv__reply_blob(c, e->val, e->vlen);
        return;
    }
    if (r->mode == RDZV_GETW_NOWAIT) {
        rdzv__reply_u8(c, RDZV_GETW_ABSENT);
        return;
    }
    if (may_park(c, r))
        park_on(c, WAIT_GET, &r->key, r);
}

/* Items queued on e (NULL: an unknown key). */
static int64_t queue_len(const entry_t *e) {
    return e != NULL && e->q != NULL ? (int64_t)e->q->n : 0;
}

/* QUEUE_PUSH: no reply (TCPStore's client sends the next request at once). */
static void cmd_queue_push(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    entry_t *e = rdzv__keys_get_or_add(s, &r->key);
    int rc = e == NULL ? -ENOMEM : rdzv__queue_push(s, e, r->val.p, r->val.n);
    if (rc < 0) {
        if (e != NULL)
            rdzv__keys_maybe_remove(s, e);
        rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr);
        if (rc == -ENOSPC)
            rdzv__conn_fail(c, NULL, "QUEUE_PUSH to queue '%s', which holds %zu items already", kr,
                            RDZV_MAX_QUEUE_LEN);
        else
            rdzv__conn_fail(c, &s->st.mem_refused,
                            "store memory limit (%zu bytes) reached pushing to queue '%s'",
                            s->max_total_mem, kr);
        return;
    }
    rdzv__keys_wake_one(s, e);
}

/* QUEUE_POP never parks: TCPStore's client blocks with a WAIT on the key first (a push answers
 * one such WAIT), then pops; 0 says the queue was empty. */
static void cmd_queue_pop(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    int64_t n = queue_len(e);
    qitem_t *it = n > 0 ? rdzv__queue_pop(s, e) : NULL;
    if (rdzv__reply_i64(c, n) == 0 && it != NULL)
        rdzv__reply_blob(c, it->data, it->len);
    if (it != NULL)
        rdzv__qitem_free(s, it);
}

static void cmd_queue_len(conn_t *c, const rdzv_req_t *r) {
    rdzv__reply_i64(c, queue_len(rdzv__keys_lookup(c->s, &r->key)));
}

/* LIST_KEYS: every key with a value (not queues), in table order. */
static void cmd_list_keys(conn_t *c) {
    rdzv_server_t *s = c->s;
    if (rdzv__reply_i64(c, (int64_t)s->st.keys) < 0)
        return;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (entry_t *e = s->buckets[i]; e != NULL; e = e->next)
            if (e->present && rdzv__reply_blob(c, e->key, e->klen) < 0)
                return;
}

/* BARRIER: counts arrivals in the key's value (decimal, as ADD); the last of world_size arrivals
 * answers everyone parked on the key, itself at once. */
static void cmd_barrier(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    char kr[300];
    if (!may_park(c, r))
        return;
    int64_t cur = 0;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    if (e != NULL && e->present &&
        (parse_stored_int(e->val, e->vlen, &cur) < 0 || cur == INT64_MAX)) {
        rdzv__conn_fail(c, NULL, "BARRIER on key '%s' whose value is not a count",
                        rdzv__key_repr(r->key.p, r->key.n, kr, sizeof kr));
        return;
    }
    char num[24];
    int len = snprintf(num, sizeof num, "%lld", (long long)(cur + 1));
    if ((e = rdzv__keys_get_or_add(s, &r->key)) == NULL ||
        rdzv__entry_set(s, e, num, (size_t)len) < 0) {
        if (e != NULL)
            rdzv__keys_maybe_remove(s, e);
        rdzv__conn_fail(c, &s->st.mem_refused, "store memory limit (%zu bytes) reached in BARRIER",
                        s->max_total_mem);
        return;
    }
    if (cur + 1 >= r->delta) {
        rdzv__keys_wake(s, e);
        rdzv__reply_u8(c, RDZV_WAIT_STOP_WAITING);
        return;
    }
    park_on(c, WAIT_BARRIER, &r->key, r);
}

static void cmd_stats(conn_t *c) {
    rdzv_server_t *s = c->s;
    char text[640];
    const rdzv_server_stats_t *t = &s->st;
    int n = snprintf(text, sizeof text,
                     "conns %llu\nconns_total %llu\nconns_refused %llu\nkeys %llu\n"
                     "queued %llu\nwaiting %llu\nmem_used %llu\nrequests %llu\nbad_frames %llu\n"
                     "auth_refused %llu\nidle_closed %llu\nslow_closed %llu\nmem_refused %llu\n"
                     "hs_evicted %llu\nowner_refused %llu\n",
                     (unsigned long long)t->conns, (unsigned long long)t->conns_total,
                     (unsigned long long)t->conns_refused, (unsigned long long)t->keys,
                     (unsigned long long)t->queued, (unsigned long long)t->waiting,
                     (unsigned long long)t->mem_used, (unsigned long long)t->requests,
                     (unsigned long long)t->bad_frames, (unsigned long long)t->auth_refused,
                     (unsigned long long)t->idle_closed, (unsigned long long)t->slow_closed,
                     (unsigned long long)t->mem_refused, (unsigned long long)t->hs_evicted,
                     (unsigned long long)t->owner_refused);
    rdzv__reply_blob(c, text, n < 0 ? 0 : (size_t)n);
}

static void cmd_auth_hello(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (s->token_len == 0) {
        rdzv__reply_u8(c, RDZV_AUTH_NOT_NEEDED);
        return;
    }
    if (c->state != ST_AUTH || c->auth != NULL) {
        rdzv__conn_fail(c, &s->st.auth_refused, "AUTH_HELLO out of sequence");
        return;
    }
    c->auth = malloc(sizeof *c->auth);
    if (c->auth == NULL || rdzv__random(c->auth->snonce, RDZV_AUTH_NONCE_LEN) < 0) {
        rdzv__conn_fail(c, &s->st.mem_refused, "no memory or randomness for a challenge");
        return;
    }
    memcpy(c->auth->cnonce, r->val.p, RDZV_AUTH_NONCE_LEN);
    /* AUTH_HELLO_RUN: the frame parser bounded the run id and checked it is printable. */
    size_t n = r->cmd == RDZV_CMD_AUTH_HELLO_RUN ? r->key.n : 0;
    if (n > 0)
        memcpy(c->auth->run_id, r->key.p, n);
    c->auth->run_id[n] = '\0';
    if (rdzv__reply_u8(c, RDZV_AUTH_CHALLENGE) == 0)
        rdzv__reply_bytes(c, c->auth->snonce, RDZV_AUTH_NONCE_LEN);
}

/* The client's MAC under key (into want) and the server's answer (into mine). Returns 0 or
 * DDP_EAUTH. */
static int proof_macs(const void *key, size_t key_len, const auth_state_t *a,
                      uint8_t want[RDZV_AUTH_MAC_LEN], uint8_t mine[RDZV_AUTH_MAC_LEN]) {
    if (rdzv__auth_mac(key, key_len, RDZV_ROLE_CLIENT, a->snonce, a->cnonce, want) < 0 ||
        rdzv__auth_mac(key, key_len, RDZV_ROLE_SERVER, a->snonce, a->cnonce, mine) < 0)
        return DDP_EAUTH;
    return 0;
}

/* The proof may use the store's token (the whole store), or, after AUTH_HELLO_RUN, the run's
 * token derived from it (that run alone: c->scope). */
static void cmd_auth_proof(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (s->token_len == 0 || c->state != ST_AUTH || c->auth == NULL) {
        rdzv__conn_fail(c, &s->st.auth_refused, "AUTH_PROOF out of sequence");
        return;
    }
    uint8_t want[RDZV_AUTH_MAC_LEN], mine[RDZV_AUTH_MAC_LEN], run_key[RDZV_AUTH_MAC_LEN];
    auth_state_t *a = c->auth;
    int failed = proof_macs(s->token, s->token_len, a, want, mine) < 0;
    int whole = !failed && rdzv__auth_equal(want, r->val.p);
    int run = 0;
    if (!failed && !whole && a->run_id[0] != '\0') {
        failed = rdzv__run_key(s->token, s->token_len, a->run_id, strlen(a->run_id), run_key) < 0 ||
                 proof_macs(run_key, sizeof run_key, a, want, mine) < 0;
        run = !failed && rdzv__auth_equal(want, r->val.p);
        OPENSSL_cleanse(run_key, sizeof run_key);
    }
    if (failed) {
        rdzv__conn_fail(c, &s->st.auth_refused, "libcrypto failed to compute a MAC");
        return;
    }
    if (run && (c->scope = strdup(a->run_id)) == NULL) {
        rdzv__conn_fail(c, &s->st.mem_refused, "no memory for the connection's run");
        return;
    }
    free(c->auth);
    c->auth = NULL;
    if (!whole && !run) {
        rdzv__slog(s, DDP_LOG_WARN,
                   "closing connection from %s: authentication refused (wrong token)", c->peer);
        s->st.auth_refused++;
        rdzv__reply_u8(c, RDZV_AUTH_REFUSED);
        c->close_after_write = 1;
        return;
    }
    c->state = ST_READY;
    rdzv__conn_ready(c);
    if (run)
        rdzv__slog(s, DDP_LOG_DEBUG, "authenticated %s for run '%s' (its run token)", c->peer,
                   c->scope);
    else
        rdzv__slog(s, DDP_LOG_DEBUG, "authenticated %s", c->peer);
    if (rdzv__reply_u8(c, RDZV_AUTH_OK) == 0)
        rdzv__reply_bytes(c, mine, RDZV_AUTH_MAC_LEN);
}

static void cmd_validate(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    if (r->u32 != RDZV_VALIDATE_MAGIC) {
        rdzv__conn_fail(c, &s->st.bad_frames, "bad VALIDATE magic 0x%08x", r->u32);
        return;
    }
    c->state = s->token_len > 0 ? ST_AUTH : ST_READY;
    if (c->state == ST_READY)
        rdzv__conn_ready(c);
}

static void cmd_get(conn_t *c, const rdzv_req_t *r) {
    entry_t *e = rdzv__keys_lookup(c->s, &r->key);
    int present = e != NULL && e->present;
    rdzv__reply_blob(c, present ? e->val : NULL, present ? e->vlen : 0);
}

static void cmd_check(conn_t *c, const rdzv_req_t *r) {
    const uint8_t *cur = r->list.p;
    int ready = 1;
    for (uint64_t i = 0; i < r->nkeys && ready; i++) {
        rdzv_slice_t k;
        rdzv__list_next(&cur, 0, &k, NULL);
        ready = rdzv__entry_ready(rdzv__keys_lookup(c->s, &k));
    }
    rdzv__reply_u8(c, ready ? RDZV_CHECK_READY : RDZV_CHECK_NOT_READY);
}

static void cmd_delete(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    entry_t *e = rdzv__keys_lookup(s, &r->key);
    int64_t deleted = e != NULL && e->present;
    if (deleted) {
        rdzv__entry_drop_value(s, e);
        rdzv__keys_maybe_remove(s, e);
    }
    rdzv__reply_i64(c, deleted);
}

static void cmd_multi_get(conn_t *c, const rdzv_req_t *r) {
    const uint8_t *cur = r->list.p;
    for (uint64_t i = 0; i < r->nkeys; i++) {
        rdzv_slice_t k;
        rdzv__list_next(&cur, 0, &k, NULL);
        entry_t *e = rdzv__keys_lookup(c->s, &k);
        int present = e != NULL && e->present;
        if (rdzv__reply_blob(c, present ? e->val : NULL, present ? e->vlen : 0) < 0)
            return;
    }
}

static void cmd_multi_set(conn_t *c, const rdzv_req_t *r) {
    const uint8_t *cur = r->list.p;
    for (uint64_t i = 0; i < r->nkeys; i++) {
        rdzv_slice_t k, v;
        rdzv__list_next(&cur, 1, &k, &v);
        if (set_value(c, &k, v.p, v.n) < 0)
            return;
    }
}

/* ---- a connection that holds a run token (c->scope) ---- */

/* 1 when key belongs to run: <prefix>/<run>/..., a prefix without '/' (the store's own __rdzv, the
 * worker library's ddpw: every key a job keeps in the store has that form, rdzv_layout.h). */
static int scope_key_ok(const char *run, const rdzv_slice_t *key) {
    const uint8_t *slash = memchr(key->p, '/', key->n);
    if (slash == NULL || slash == key->p)
        return 0;
    size_t at = (size_t)(slash - key->p) + 1, n = strlen(run);
    return key->n > at + n && memcmp(key->p + at, run, n) == 0 && key->p[at + n] == '/';
}

/* 1 when c may run r; else c is closed with one line naming the key and the run. A connection
 * with a run token reaches that run's keys alone: listing or counting every key is refused. */
static int scope_allows(conn_t *c, const rdzv_req_t *r) {
    if (c->scope == NULL)
        return 1;
    rdzv_slice_t bad = {NULL, 0};
    switch (r->cmd) {
    case RDZV_CMD_CHECK:
    case RDZV_CMD_WAIT:
    case RDZV_CMD_MULTI_GET:
    case RDZV_CMD_MULTI_SET: {
        const uint8_t *cur = r->list.p;
        for (uint64_t i = 0; i < r->nkeys && bad.p == NULL; i++) {
            rdzv_slice_t k, v;
            rdzv__list_next(&cur, r->cmd == RDZV_CMD_MULTI_SET, &k, &v);
            if (!scope_key_ok(c->scope, &k))
                bad = k;
        }
        break;
    }
    case RDZV_CMD_GETNUMKEYS:
    case RDZV_CMD_LIST_KEYS:
        rdzv__conn_fail(c, &c->s->st.auth_refused,
                        "%s refused: this connection holds the run token of '%s', which reaches "
                        "that run's keys alone",
                        rdzv__cmd_name(r->cmd), c->scope);
        return 0;
    default:
        if (r->key.p != NULL && !scope_key_ok(c->scope, &r->key))
            bad = r->key;
        break;
    }
    if (bad.p == NULL)
        return 1;
    char shown[4 * 64 + 8];
    rdzv__conn_fail(c, &c->s->st.auth_refused,
                    "%s of key '%s' refused: this connection holds the run token of '%s', which "
                    "reaches keys <prefix>/%s/... alone",
                    rdzv__cmd_name(r->cmd), rdzv__key_repr(bad.p, bad.n, shown, sizeof shown),
                    c->scope, c->scope);
    return 0;
}

/* Runs one request. The connection may be closing afterwards. */
static void dispatch(conn_t *c, const rdzv_req_t *r) {
    rdzv_server_t *s = c->s;
    s->st.requests++;
    s->cmd_counts[r->cmd]++;
    if (!scope_allows(c, r))
        return;
    switch (r->cmd) {
    case RDZV_CMD_VALIDATE: cmd_validate(c, r); return;
    case RDZV_CMD_AUTH_HELLO:
    case RDZV_CMD_AUTH_HELLO_RUN: cmd_auth_hello(c, r); return;
    case RDZV_CMD_AUTH_PROOF: cmd_auth_proof(c, r); return;
    case RDZV_CMD_PING: rdzv__reply_u32(c, r->u32); return;
    case RDZV_CMD_SET: set_value(c, &r->key, r->val.p, r->val.n); return;
    case RDZV_CMD_COMPARE_SET: cmd_compare_set(c, r); return;
    case RDZV_CMD_GET: cmd_get(c, r); return;
    case RDZV_CMD_ADD: cmd_add(c, r); return;
    case RDZV_CMD_CHECK: cmd_check(c, r); return;
    case RDZV_CMD_WAIT: cmd_wait(c, r); return;
    case RDZV_CMD_GETNUMKEYS: rdzv__reply_i64(c, (int64_t)s->st.keys); return;
    case RDZV_CMD_DELETE_KEY: cmd_delete(c, r); return;
    case RDZV_CMD_APPEND: cmd_append(c, r); return;
    case RDZV_CMD_MULTI_GET: cmd_multi_get(c, r); return;
    case RDZV_CMD_MULTI_SET: cmd_multi_set(c, r); return;
    case RDZV_CMD_CANCEL_WAIT:
        rdzv__wait_clear(c);
        rdzv__reply_u8(c, RDZV_WAIT_CANCELED);
        return;
    case RDZV_CMD_QUEUE_PUSH: cmd_queue_push(c, r); return;
    case RDZV_CMD_QUEUE_POP: cmd_queue_pop(c, r); return;
    case RDZV_CMD_QUEUE_LEN: cmd_queue_len(c, r); return;
    case RDZV_CMD_LIST_KEYS: cmd_list_keys(c); return;
    case RDZV_CMD_BARRIER: cmd_barrier(c, r); return;
    case RDZV_CMD_GET_WAIT: cmd_get_wait(c, r); return;
    case RDZV_CMD_STATS: cmd_stats(c); return;
    default: rdzv__conn_fail(c, &s->st.bad_frames, "unknown command 0x%02x", r->cmd); return;
    }
}

/* Checks that cmd is allowed in c's state, before its frame is even buffered. */
static int state_allows(conn_t *c, uint8_t cmd) {
    if (c->state == ST_READY) {
        if (cmd == RDZV_CMD_VALIDATE || cmd == RDZV_CMD_AUTH_PROOF) {
            rdzv__conn_fail(c, &c->s->st.bad_frames, "%s after the handshake", rdzv__cmd_name(cmd));
            return 0;
        }
        return 1;
    }
    if (c->state == ST_NEW) {
        if (cmd == RDZV_CMD_VALIDATE)
            return 1;
        rdzv__conn_fail(c, &c->s->st.bad_frames, "first command is %s (0x%02x), not VALIDATE",
                        rdzv__cmd_name(cmd), cmd);
        return 0;
    }
    if (cmd == RDZV_CMD_AUTH_HELLO || cmd == RDZV_CMD_AUTH_HELLO_RUN || cmd == RDZV_CMD_AUTH_PROOF)
        return 1;
    rdzv__conn_fail(c, &c->s->st.auth_refused, "%s before authentication", rdzv__cmd_name(cmd));
    return 0;
}

/* The workers' store tells a new connection's numbering by its first frame: VALIDATE (0) with
 * its 4-byte magic is PyTorch >= 2.2's (and ddprun's); anything else is PyTorch <= 2.0's, which
 * has no VALIDATE and numbers SET 0 (whose u64 key length could never equal the magic under the
 * key length limit). Returns 1 when the connection's numbering is settled (c->legacy set, and a
 * legacy connection READY), 0 when more bytes are needed (c->need set). */
static int dialect_settle(conn_t *c, const uint8_t *p, size_t n) {
    if (!c->s->worker_store || c->state != ST_NEW || c->legacy)
        return 1;
    if (p[0] == RDZV_CMD_VALIDATE && n < 5) {
        c->need = 5;
        return 0;
    }
    if (p[0] == RDZV_CMD_VALIDATE && rdzv__get_u32(p + 1) == RDZV_VALIDATE_MAGIC)
        return 1;
    c->legacy = 1;
    c->state = ST_READY;
    rdzv__conn_ready(c);
    rdzv__slog(c->s, DDP_LOG_DEBUG, "%s speaks PyTorch <= 2.0's store protocol", c->peer);
    return 1;
}

/* The command a frame starting with code means on c (today's numbering), or -1 with c closed:
 * a code of PyTorch <= 2.0's numbering that is not served, or a rendezvous command on the
 * workers' store. */
static int frame_cmd(conn_t *c, uint8_t code) {
    if (c->legacy) {
        int cmd = rdzv__legacy_cmd(code);
        if (cmd < 0)
            rdzv__conn_fail(c, &c->s->st.bad_frames,
                            "command %u of PyTorch <= 2.0's numbering (%s) is not served", code,
                            code == 7 ? "WATCH_KEY" : "unknown");
        return cmd;
    }
    if (c->s->worker_store && code >= RDZV_CMD_RDZV_FIRST && code <= RDZV_CMD_RDZV_LAST) {
        rdzv__conn_fail(c, &c->s->st.bad_frames,
                        "rendezvous command 0x%02x on the workers' store (it serves TCPStore's "
                        "commands only)",
                        code);
        return -1;
    }
    return code;
}

/* Parses and runs every whole frame in buf. Returns the bytes consumed. */
size_t rdzv__conn_process(conn_t *c, const uint8_t *buf, size_t len) {
    rdzv_server_t *s = c->s;
    size_t off = 0;
    c->need = 0;
    while (off < len && !c->closing && !c->close_after_write) {
        if (!dialect_settle(c, buf + off, len - off))
            break;
        int cmd = frame_cmd(c, buf[off]);
        if (cmd < 0 || !state_allows(c, (uint8_t)cmd))
            break;
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        if (cmd >= RDZV_CMD_RDZV_FIRST && cmd <= RDZV_CMD_RDZV_LAST) {
            rdzv_round_req_t rreq;
            long rn = rdzv_round_req_parse(buf + off, len - off, &rreq, &need, &err);
            if (rn < 0) {
                rdzv__round_refuse(c, buf[off], (int)rn, &err);
                break;
            }
            if (rn == 0) {
                c->need = need;
                break;
            }
            int may = rdzv__round_in_scope(c, &rreq) ? rdzv__round_may_serve(c, &rreq) : 0;
            if (may == 0)
                break;
            if (may > 0)
                rdzv__round_dispatch(c, &rreq);
            off += (size_t)rn; /* answered "not yet" (may < 0): the connection goes on */
            continue;
        }
        rdzv_req_t req;
        long n =
            rdzv__frame_parse_as((uint8_t)cmd, buf + off, len - off, &s->lim, &req, &need, &err);
        if (n < 0) {
            const char *name = rdzv__cmd_name(cmd);
            if (strcmp(name, "UNKNOWN") == 0)
                rdzv__conn_fail(c, &s->st.bad_frames, "malformed frame: %s", err.text);
            else
                rdzv__conn_fail(c, &s->st.bad_frames, "malformed %s frame: %s (byte %ld)", name,
                                err.text, err.offset);
            break;
        }
        if (n == 0) {
            c->need = need;
            break;
        }
        dispatch(c, &req);
        off += (size_t)n;
    }
    return off;
}
