/* SPDX-License-Identifier: Apache-2.0
 * The fixture of the round machine's tests (test_rdzv_round*.c): a registry of runs and an action
 * list per test (setup, teardown), JOIN requests with test defaults (min/max as given, last call
 * 1 s, join_timeout 10 s, keep-alive 100 ms x 3, max_restarts 2), a round formed through last
 * call, and readers of the actions and of a run's STATUS. Time is simulated: every event gets its
 * own now_ms.
 *
 * Functions are static inline so that a test file that uses only some of them builds without
 * warnings. */
#ifndef RDZV_ROUND_FIXTURE_H
#define RDZV_ROUND_FIXTURE_H

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_round.h"

static inline rdzv_join_req_t req(const char *run, const char *host, int64_t want, int64_t nproc,
                                  int64_t port, int64_t min, int64_t max) {
    rdzv_join_req_t q;
    memset(&q, 0, sizeof q);
    snprintf(q.run_id, sizeof q.run_id, "%s", run);
    snprintf(q.host, sizeof q.host, "%s", host);
    q.want_node_rank = want;
    q.nproc = nproc;
    q.master_port = port;
    q.cfg.min_nodes = min;
    q.cfg.max_nodes = max;
    q.cfg.last_call_timeout_ms = 1000;
    q.cfg.join_timeout_ms = 10000;
    q.cfg.keep_alive_interval_ms = 100;
    q.cfg.keep_alive_max_attempt = 3;
    q.cfg.max_restarts = 2;
    return q;
}

/* Joins member id with host "h<id>", nproc 2, port 29500+id; asserts it is accepted. */
static inline void join_ok(rdzv_runs_t *rs, const char *run, uint64_t id, int64_t want, int64_t min,
                           int64_t max, uint64_t now, rdzv_actions_t *out) {
    char host[32];
    snprintf(host, sizeof host, "h%llu", (unsigned long long)id);
    rdzv_join_req_t q = req(run, host, want, 2, 29500 + (int64_t)id, min, max);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(rs, id, &q, now, out, &err), 0);
}

static inline size_t count_kind(const rdzv_actions_t *a, rdzv_action_kind_t k) {
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++)
        n += a->v[i].kind == k;
    return n;
}

/* The action of kind k for member, or NULL. */
static inline const rdzv_action_t *find_act(const rdzv_actions_t *a, rdzv_action_kind_t k,
                                            uint64_t member) {
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].kind == k && (k == RDZV_ACT_END_ROUND || a->v[i].member == member))
            return &a->v[i];
    return NULL;
}

static inline int64_t rank_of(const rdzv_actions_t *a, uint64_t member) {
    const rdzv_action_t *x = find_act(a, RDZV_ACT_REPLY_OK, member);
    assert_non_null(x);
    return x->res.group_rank;
}

typedef struct fx {
    rdzv_runs_t *rs;
    rdzv_actions_t out;
} fx_t;

static inline int setup(void **state) {
    fx_t *f = calloc(1, sizeof *f);
    if (f == NULL || (f->rs = rdzv_runs_new(NULL)) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static inline int teardown(void **state) {
    fx_t *f = *state;
    rdzv_runs_free(f->rs);
    rdzv_actions_close(&f->out);
    free(f);
    return 0;
}

/* Forms round 0 of "job" with members 1..n (min 2, max 8 by default) through last call. */
static inline void form(fx_t *f, uint64_t n, int64_t min, int64_t max, uint64_t now) {
    for (uint64_t i = 1; i <= n; i++)
        join_ok(f->rs, "job", i, -1, min, max, now, &f->out);
    if ((int64_t)n < max) {
        assert_int_equal(f->out.n, 0);
        assert_int_equal(rdzv_runs_tick(f->rs, now + 1000, &f->out), 0);
    }
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), n);
    rdzv_actions_reset(&f->out);
}

/* Joins member id as host host into run "job" (min, max, max_node_failures bound). */
static inline int join_host(fx_t *f, uint64_t id, const char *host, int64_t min, int64_t max,
                            int64_t bound, uint64_t now, ddp_err_t *err) {
    rdzv_join_req_t q = req("job", host, -1, 2, 29500 + (int64_t)id, min, max);
    q.cfg.max_node_failures = bound;
    return rdzv_runs_join(f->rs, id, &q, now, &f->out, err);
}

/* The status's host record of host, or NULL (o owns it). */
static inline json_t *host_rec(json_t *o, const char *host) {
    json_t *hs = json_object_get(o, "hosts"), *h;
    size_t i;
    json_array_foreach(hs, i, h) {
        if (strcmp(json_string_value(json_object_get(h, "host")), host) == 0)
            return h;
    }
    return NULL;
}

static inline json_t *status_of(fx_t *f, uint64_t now) {
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", now, NULL, NULL, &b, NULL), 0);
    json_t *o = json_loadb((const char *)b.data, b.len, 0, NULL);
    ddp_buf_free(&b);
    assert_non_null(o);
    return o;
}

#endif
