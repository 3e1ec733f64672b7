/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the rendezvous state machines (rendezvous/round/rdzv_round.c): rounds closing on
 * last call and at max, rank assignment, restarts, deaths, scale-up, timeouts, the registry bound,
 * a 1,000-member round, the status JSON, and the wire codec of the rendezvous commands
 * (rdzv_commands.h). Time is simulated: every event gets its own now_ms. */
#include <errno.h>
#include <jansson.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_layout.h"
#include "rdzv_round.h"

/* ---- helpers ---- */

static rdzv_join_req_t req(const char *run, const char *host, int64_t want, int64_t nproc,
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
static void join_ok(rdzv_runs_t *rs, const char *run, uint64_t id, int64_t want, int64_t min,
                    int64_t max, uint64_t now, rdzv_actions_t *out) {
    char host[32];
    snprintf(host, sizeof host, "h%llu", (unsigned long long)id);
    rdzv_join_req_t q = req(run, host, want, 2, 29500 + (int64_t)id, min, max);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(rs, id, &q, now, out, &err), 0);
}

static size_t count_kind(const rdzv_actions_t *a, rdzv_action_kind_t k) {
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++)
        n += a->v[i].kind == k;
    return n;
}

/* The action of kind k for member, or NULL. */
static const rdzv_action_t *find_act(const rdzv_actions_t *a, rdzv_action_kind_t k,
                                     uint64_t member) {
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].kind == k && (k == RDZV_ACT_END_ROUND || a->v[i].member == member))
            return &a->v[i];
    return NULL;
}

static int64_t rank_of(const rdzv_actions_t *a, uint64_t member) {
    const rdzv_action_t *x = find_act(a, RDZV_ACT_REPLY_OK, member);
    assert_non_null(x);
    return x->res.group_rank;
}

typedef struct fx {
    rdzv_runs_t *rs;
    rdzv_actions_t out;
} fx_t;

static int setup(void **state) {
    fx_t *f = calloc(1, sizeof *f);
    if (f == NULL || (f->rs = rdzv_runs_new(NULL)) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx_t *f = *state;
    rdzv_runs_free(f->rs);
    rdzv_actions_close(&f->out);
    free(f);
    return 0;
}

/* Forms round 0 of "job" with members 1..n (min 2, max 8 by default) through last call. */
static void form(fx_t *f, uint64_t n, int64_t min, int64_t max, uint64_t now) {
    for (uint64_t i = 1; i <= n; i++)
        join_ok(f->rs, "job", i, -1, min, max, now, &f->out);
    if ((int64_t)n < max) {
        assert_int_equal(f->out.n, 0);
        assert_int_equal(rdzv_runs_tick(f->rs, now + 1000, &f->out), 0);
    }
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), n);
    rdzv_actions_reset(&f->out);
}

/* ---- rounds ---- */

/* A run's round_keys are its first joiner's (like its configuration), and every REPLY_OK of a
 * closing round carries them: the server drops old rounds' keys under that prefix. */
static void test_round_keys_of_first_joiner(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    rdzv_join_req_t q = req("job", "h1", -1, 1, 29500, 2, 2);
    snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "ddpw/");
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 0, &f->out, &err), 0);
    q = req("job", "h2", -1, 1, 29500, 2, 2);
    snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "other/");
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 0, &f->out, &err), 0);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    for (uint64_t m = 1; m <= 2; m++)
        assert_string_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, m)->round_keys, "ddpw/");
}

static void test_min_then_last_call(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 2, 4, 100, &f->out);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 100 + 10000); /* join timeout */
    join_ok(f->rs, "job", 2, -1, 2, 4, 200, &f->out);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 200 + 1000); /* last call */
    rdzv_runs_tick(f->rs, 1199, &f->out);
    assert_int_equal(f->out.n, 0);
    join_ok(f->rs, "job", 3, -1, 2, 4, 500, &f->out); /* inside the last call: same deadline */
    rdzv_runs_tick(f->rs, 1200, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    for (uint64_t m = 1; m <= 3; m++) {
        const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_OK, m);
        assert_non_null(a);
        assert_string_equal(a->run_id, "job");
        assert_int_equal(a->res.round, 0);
        assert_int_equal(a->res.group_rank, (int64_t)m - 1); /* join order */
        assert_int_equal(a->res.group_world_size, 3);
        assert_int_equal(a->res.rank_base, 2 * ((int64_t)m - 1));
        assert_int_equal(a->res.world_size, 6);
        assert_string_equal(a->res.master_addr, "h1");
        assert_int_equal(a->res.master_port, 29501);
        assert_int_equal(a->res.restarts_used, 0);
    }
    /* Running: the next deadline is the liveness check, 3 x 100 ms after the close. */
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 1200 + 300);
}

static void test_max_closes_at_once(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 1, 3, 0, &f->out);
    join_ok(f->rs, "job", 2, -1, 1, 3, 1, &f->out);
    assert_int_equal(f->out.n, 0);
    join_ok(f->rs, "job", 3, -1, 1, 3, 2, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    assert_int_equal(f->out.n, 3);
}

static void test_last_call_back_to_joining(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 2, 4, 0, &f->out);
    join_ok(f->rs, "job", 2, -1, 2, 4, 0, &f->out);
    rdzv_runs_leave(f->rs, 2, 10, &f->out); /* below min again */
    assert_int_equal(f->out.n, 0);
    rdzv_runs_tick(f->rs, 5000, &f->out); /* the old last call must not close a 1-node round */
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 10000);
}

static void test_explicit_ranks_and_duplicates(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 4, 4, 0, &f->out);
    join_ok(f->rs, "job", 2, 3, 4, 4, 0, &f->out);
    join_ok(f->rs, "job", 3, 3, 4, 4, 0, &f->out); /* duplicate: 2 keeps 3 */
    join_ok(f->rs, "job", 4, 7, 4, 4, 0, &f->out); /* out of range: ignored */
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 4);
    assert_int_equal(rank_of(&f->out, 2), 3);
    assert_int_equal(rank_of(&f->out, 1), 0);
    assert_int_equal(rank_of(&f->out, 3), 1);
    assert_int_equal(rank_of(&f->out, 4), 2);
    /* rank_base follows group rank, master is group rank 0. */
    assert_int_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, 2)->res.rank_base, 6);
    assert_string_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, 3)->res.master_addr, "h1");
}

static void test_stable_ranks_across_rounds(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 3, 3, 0, &f->out);
    join_ok(f->rs, "job", 2, -1, 3, 3, 0, &f->out);
    join_ok(f->rs, "job", 3, -1, 3, 3, 0, &f->out);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    assert_int_equal(
        rdzv_runs_fail(f->rs, "job", 2, 0, "rank 3 exited with code 1", 10, &f->out, &rep), 0);
    rdzv_actions_reset(&f->out);
    /* Survivors re-join in reverse order: each keeps its previous rank. */
    join_ok(f->rs, "job", 3, -1, 3, 3, 20, &f->out);
    join_ok(f->rs, "job", 2, -1, 3, 3, 21, &f->out);
    join_ok(f->rs, "job", 1, -1, 3, 3, 22, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    for (uint64_t m = 1; m <= 3; m++) {
        assert_int_equal(rank_of(&f->out, m), (int64_t)m - 1);
        assert_int_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, m)->res.round, 1);
        assert_int_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, m)->res.restarts_used, 1);
    }
}

static void test_stable_ranks_after_scale_down(void **state) {
    fx_t *f = *state;
    form(f, 4, 2, 4, 0);
    rdzv_runs_leave(f->rs, 2, 10, &f->out); /* node 1 dies */
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 4, -1, 2, 4, 20, &f->out); /* was 3: out of range for 3 nodes */
    join_ok(f->rs, "job", 3, -1, 2, 4, 21, &f->out); /* was 2 */
    join_ok(f->rs, "job", 1, -1, 2, 4, 22, &f->out); /* was 0 */
    rdzv_runs_tick(f->rs, 21 + 1000, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    assert_int_equal(rank_of(&f->out, 1), 0);
    assert_int_equal(rank_of(&f->out, 3), 2);
    assert_int_equal(rank_of(&f->out, 4), 1); /* fills the gap */
    assert_int_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, 1)->res.world_size, 6);
}

/* ---- restarts ---- */

static void test_fail_ends_round_and_counts(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);
    rdzv_fail_reply_t rep;
    assert_int_equal(
        rdzv_runs_fail(f->rs, "job", 1, 0, "rank 1 exited with code 1", 5, &f->out, &rep), 0);
    assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
    assert_int_equal(rep.round, 1);
    assert_int_equal(rep.restarts_used, 1);
    assert_int_equal(rep.max_restarts, 2);
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_int_equal(e->round, 0);
    assert_string_equal(e->run_id, "job");
    assert_non_null(strstr(e->text, "node 0 (h1)"));
    assert_non_null(strstr(e->text, "rank 1 exited with code 1"));
    assert_int_equal(f->out.n, 1);
    rdzv_actions_reset(&f->out);
    /* The other node's FAIL for round 0 arrives after the end: ignored, not counted. */
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 2, 0, "x", 6, &f->out, &rep), 0);
    assert_int_equal(rep.status, RDZV_FAIL_IGNORED);
    assert_int_equal(rep.restarts_used, 1);
    assert_int_equal(f->out.n, 0);
    /* Round 1 forms; a FAIL naming a future round or from a non-member is ignored too. */
    join_ok(f->rs, "job", 1, -1, 2, 2, 10, &f->out);
    join_ok(f->rs, "job", 2, -1, 2, 2, 11, &f->out);
    rdzv_actions_reset(&f->out);
    rdzv_runs_fail(f->rs, "job", 2, 5, "x", 12, &f->out, &rep);
    assert_int_equal(rep.status, RDZV_FAIL_IGNORED);
    rdzv_runs_fail(f->rs, "job", 99, 1, "x", 12, &f->out, &rep);
    assert_int_equal(rep.status, RDZV_FAIL_IGNORED);
    assert_int_equal(rdzv_runs_fail(f->rs, "nope", 2, 1, "x", 12, &f->out, &rep), -ENOENT);
    assert_int_equal(f->out.n, 0);
}

static void test_max_restarts_spent(void **state) {
    fx_t *f = *state;
    rdzv_fail_reply_t rep;
    uint64_t now = 0;
    form(f, 2, 2, 2, now); /* max_restarts = 2 */
    for (int64_t r = 0; r < 2; r++) {
        rdzv_runs_fail(f->rs, "job", 2, r, "boom", ++now, &f->out, &rep);
        assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
        join_ok(f->rs, "job", 1, -1, 2, 2, ++now, &f->out);
        join_ok(f->rs, "job", 2, -1, 2, 2, ++now, &f->out);
        if (r == 1) /* the second restart waits out the back-off */
            rdzv_runs_tick(f->rs, now += RDZV_RESTART_BACKOFF_FIRST_MS, &f->out);
        assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
        rdzv_actions_reset(&f->out);
    }
    /* A waiting third node (max is 2) is parked while round 2 runs. */
    join_ok(f->rs, "job", 3, -1, 2, 2, ++now, &f->out);
    assert_int_equal(f->out.n, 0);
    rdzv_runs_fail(f->rs, "job", 1, 2, "rank 0 exited with code 3", ++now, &f->out, &rep);
    assert_int_equal(rep.status, RDZV_FAIL_RUN_FAILED);
    assert_int_equal(rep.restarts_used, 3);
    assert_non_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 3);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ERDZV_CLOSED);
    assert_string_equal(a->text, "rendezvous 'job' failed: max_restarts (2) spent; last failure: "
                                 "node 0 (h1) round 2: rank 0 exited with code 3; root causes "
                                 "by host: h2 x2, h1 x1");
    /* Survivors re-joining are refused at once, and so is a new node. */
    rdzv_join_req_t q = req("job", "h1", -1, 2, 1, 2, 2);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, ++now, &f->out, &err), DDP_ERDZV_CLOSED);
    assert_string_equal(err.text, a->text);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_join(f->rs, 50, &q, ++now, &f->out, &err), DDP_ERDZV_CLOSED);
    /* Everyone leaving and coming back quickly does not reset the count. */
    rdzv_runs_leave(f->rs, 1, ++now, &f->out);
    rdzv_runs_leave(f->rs, 2, ++now, &f->out);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_join(f->rs, 60, &q, ++now, &f->out, &err), DDP_ERDZV_CLOSED);
    assert_int_equal(rdzv_runs_count(f->rs), 1);
    /* The refusal whole (err cuts it), and the root cause every agent takes from it. */
    char text[RDZV_ROUND_TEXT_MAX], cause[RDZV_ROUND_TEXT_MAX];
    assert_int_equal(rdzv_runs_failed_text(f->rs, "job", text, sizeof text), 0);
    assert_string_equal(text, a->text);
    assert_int_equal(rdzv_runs_failed_text(f->rs, "nope", text, sizeof text), -ENOENT);
    assert_int_equal(rdzv_text_root_cause(a->text, cause, sizeof cause), 1);
    assert_string_equal(cause, "node 0 (h1) round 2: rank 0 exited with code 3");
    assert_int_equal(rdzv_text_root_cause("rendezvous 'j' failed: stopped by node 1 (h): why",
                                          cause, sizeof cause),
                     1);
    assert_string_equal(cause, "stopped by node 1 (h): why");
    assert_int_equal(rdzv_text_root_cause("rendezvous 'j' finished: round 3 passed", cause, 8), 0);
    assert_string_equal(cause, "");
    assert_int_equal(rdzv_text_root_cause(a->text, cause, 12), 1); /* cut to fit */
    assert_string_equal(cause, "node 0 (h1)");
}

/* A member between rounds (its group stopped, not re-joined) stops the run: the node already
 * waiting for the next round is refused with who stopped it and why, and so is every later JOIN. */
static void test_abort_between_rounds(void **state) {
    fx_t *f = *state;
    rdzv_fail_reply_t rep;
    form(f, 2, 2, 2, 0);
    rdzv_runs_fail(f->rs, "job", 2, 0, "rank 3 hung", 1, &f->out, &rep);
    join_ok(f->rs, "job", 1, -1, 2, 2, 2, &f->out); /* node 0 waits for round 1 */
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 2, "no progress in 2 attempts", 3, &f->out), 0);
    const char *want = "rendezvous 'job' failed: stopped by node 1 (h2): no progress in 2 attempts";
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 1);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ERDZV_CLOSED);
    assert_string_equal(a->text, want);
    assert_int_equal(f->out.n, 1);
    rdzv_join_req_t q = req("job", "h9", -1, 2, 1, 2, 2);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(f->rs, 9, &q, 4, &f->out, &err), DDP_ERDZV_CLOSED);
    assert_string_equal(err.text, want);
    /* A second ABORT (the other node decided the same) changes nothing. */
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 2, "again", 5, &f->out), -ENOENT);
    assert_int_equal(f->out.n, 0);
}

/* ABORT during a running round ends it (END_ROUND naming who stopped the run) and fails the run;
 * an unknown run, a connection that is not a member and a member of another run change nothing. */
static void test_abort_running_and_refusals(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);
    join_ok(f->rs, "other", 7, -1, 1, 1, 0, &f->out);
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_abort(f->rs, "nope", 1, "x", 1, &f->out), -ENOENT);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 99, "x", 1, &f->out), -ENOENT);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 7, "x", 1, &f->out), -ENOENT);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 1, "operator said so", 2, &f->out), 0);
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_int_equal(e->round, 0);
    assert_non_null(strstr(e->text, "stopped by node 0 (h1): operator said so"));
    rdzv_join_req_t q = req("job", "h2", -1, 2, 1, 2, 2);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 3, &f->out, &err), DDP_ERDZV_CLOSED);
    /* The other run goes on. */
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "other", 7, 0, "x", 4, &f->out, &rep), 0);
    assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
}

static void test_restart_count_survives_reconnect(void **state) {
    fx_t *f = *state;
    rdzv_fail_reply_t rep;
    form(f, 2, 2, 2, 0);
    rdzv_runs_fail(f->rs, "job", 1, 0, "boom", 1, &f->out, &rep);
    rdzv_runs_leave(f->rs, 1, 2, &f->out);
    rdzv_runs_leave(f->rs, 2, 2, &f->out); /* the run is empty but kept */
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 11, -1, 2, 2, 3, &f->out); /* new connections */
    join_ok(f->rs, "job", 12, -1, 2, 2, 3, &f->out);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_OK, 11);
    assert_non_null(a);
    assert_int_equal(a->res.restarts_used, 1);
    assert_int_equal(a->res.round, 1);
}

/* A restarted daemon knows nothing of the run: the agents carry the round after the newest they
 * were told and the restarts they saw counted. The first round the fresh store closes is
 * numbered after the largest carried, the count is the largest carried, and a joiner that
 * carries nothing (0, 0) changes neither. A running round is never renumbered: its successor
 * is, when it ends. Out-of-range carried values are refused. */
static void test_carried_round_and_restarts(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    rdzv_join_req_t q = req("job", "h1", -1, 2, 29501, 3, 3);
    q.min_round = 7;
    q.restarts_used = 2;
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 0, &f->out, &err), 0);
    q = req("job", "h2", -1, 2, 29502, 3, 3);
    q.min_round = 9; /* a node that was a round ahead */
    q.restarts_used = 1;
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 0, &f->out, &err), 0);
    join_ok(f->rs, "job", 3, -1, 3, 3, 0, &f->out); /* carries nothing */
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_OK, 3);
    assert_non_null(a);
    assert_int_equal(a->res.round, 9);
    assert_int_equal(a->res.restarts_used, 2);
    /* Running round 9: a joiner carrying 12 waits (at max) and does not renumber it; the next
     * round is 12, not 10. */
    rdzv_actions_reset(&f->out);
    q = req("job", "h1", -1, 2, 29501, 3, 3);
    q.min_round = 12;
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 1, &f->out, &err), 0); /* joined again */
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_int_equal(e->round, 9);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 2, -1, 3, 3, 2, &f->out);
    join_ok(f->rs, "job", 3, -1, 3, 3, 2, &f->out);
    a = find_act(&f->out, RDZV_ACT_REPLY_OK, 2);
    assert_non_null(a);
    assert_int_equal(a->res.round, 12);
    assert_int_equal(a->res.restarts_used, 2);
    /* Refused: a negative or huge carried round, restarts past the protocol's bound. */
    int64_t bad[][2] = {
        {-1, 0}, {RDZV_ROUND_MAX_ROUND + 1, 0}, {0, -1}, {0, RDZV_ROUND_MAX_RESTARTS + 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        q = req("job", "h9", -1, 2, 29509, 3, 3);
        q.min_round = bad[i][0];
        q.restarts_used = bad[i][1];
        ddp_err_clear(&err);
        assert_int_equal(rdzv_runs_join(f->rs, 9, &q, 3, &f->out, &err), DDP_EUSAGE);
        assert_non_null(strstr(err.text, "carried"));
    }
}

/* Heap bytes in use (glibc), or 0 where malloc is replaced (ASan): the test then skips. */
static size_t heap_used(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* A run whose members all left keeps its restart count, not arrays sized for every member it
 * had: 20000 parked joins, then all closed, must not leave megabytes behind for an hour. */
static void test_empty_run_frees_arrays(void **state) {
    fx_t *f = *state;
    size_t base = heap_used();
    if (base == 0)
        skip();
    for (uint64_t i = 1; i <= 20000; i++)
        join_ok(f->rs, "big", i, -1, 65536, 65536, 0, &f->out);
    rdzv_actions_close(&f->out); /* room reserved for 2 actions per member: not the run's */
    size_t full = heap_used();
    for (uint64_t i = 1; i <= 20000; i++)
        rdzv_runs_leave(f->rs, i, 1, &f->out);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_count(f->rs), 1);
    rdzv_actions_close(&f->out);
    size_t left = heap_used();
    print_message("heap: %zu joined, %zu after all left\n", full - base, left - base);
    assert_true(full - base > (size_t)10 << 20);
    /* What stays: the run and the member hash's buckets (256 KiB at this size). */
    assert_true(left - base < (size_t)1 << 20);
    /* The run still works: a new round forms. */
    join_ok(f->rs, "big", 30001, -1, 65536, 65536, 2, &f->out);
    assert_int_equal(f->out.n, 0);
}

/* ---- liveness and membership ---- */

static void test_leave_running_ends_round(void **state) {
    fx_t *f = *state;
    form(f, 3, 2, 4, 0);
    rdzv_runs_leave(f->rs, 2, 1500, &f->out);
    assert_int_equal(f->out.n, 1);
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_int_equal(e->round, 0);
    assert_string_equal(e->text,
                        "rendezvous 'job' round 0 ended: node 1 (h2) lost: connection closed");
    rdzv_actions_reset(&f->out);
    /* Survivors re-form with 2 nodes, without a restart counted. */
    join_ok(f->rs, "job", 1, -1, 2, 4, 1510, &f->out);
    join_ok(f->rs, "job", 3, -1, 2, 4, 1511, &f->out);
    rdzv_runs_tick(f->rs, 2511, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_OK, 3);
    assert_int_equal(a->res.round, 1);
    assert_int_equal(a->res.group_world_size, 2);
    assert_int_equal(a->res.restarts_used, 0);
    /* A joiner leaving is only dropped. */
    rdzv_actions_reset(&f->out);
    rdzv_runs_leave(f->rs, 12345, 2600, &f->out); /* unknown: ignored */
    assert_int_equal(f->out.n, 0);
}

static void test_leave_joiner_drops(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 3, 3, 0, &f->out);
    join_ok(f->rs, "job", 2, -1, 3, 3, 0, &f->out);
    rdzv_runs_leave(f->rs, 1, 1, &f->out);
    assert_int_equal(f->out.n, 0);
    join_ok(f->rs, "job", 3, -1, 3, 3, 2, &f->out);
    assert_int_equal(f->out.n, 0); /* 2 of 3 */
    join_ok(f->rs, "job", 4, -1, 3, 3, 3, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    assert_null(find_act(&f->out, RDZV_ACT_REPLY_OK, 1));
}

/* BEAT_FOR, a member's spare heartbeat path: its JOIN reply carries its member id and a random
 * key; a BEAT_FOR with both keeps it alive like a HEARTBEAT, a wrong key or a member id the
 * store never handed out does not. */
static void test_beat_for(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 2, 2, 0, &f->out);
    join_ok(f->rs, "job", 2, -1, 2, 2, 0, &f->out); /* at max: closes at once, limit 300 ms */
    const rdzv_action_t *a1 = find_act(&f->out, RDZV_ACT_REPLY_OK, 1);
    const rdzv_action_t *a2 = find_act(&f->out, RDZV_ACT_REPLY_OK, 2);
    assert_non_null(a1);
    assert_non_null(a2);
    assert_int_equal(a1->res.member, 1);
    assert_int_equal(a2->res.member, 2);
    assert_true(a1->res.member_key >= 0 && a2->res.member_key >= 0);
    assert_true(a1->res.member_key != a2->res.member_key); /* 2^-63 to fail by chance */
    int64_t key2 = a2->res.member_key;
    rdzv_actions_reset(&f->out);
    int64_t round = -1;
    int st = -1;
    for (uint64_t t = 100; t <= 500; t += 100) {
        assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL), 0);
        assert_int_equal(rdzv_runs_beat_for(f->rs, "job", 2, key2, t, &round, &st), 0);
        assert_int_equal(rdzv_runs_beat_for(f->rs, "job", 2, key2 ^ 1, t, NULL, NULL), -ENOENT);
        assert_int_equal(rdzv_runs_beat_for(f->rs, "job", 9, key2, t, NULL, NULL), -ENOENT);
        assert_int_equal(rdzv_runs_beat_for(f->rs, "other", 2, key2, t, NULL, NULL), -ENOENT);
        rdzv_runs_tick(f->rs, t, &f->out);
        assert_int_equal(f->out.n, 0); /* member 2 is alive through its spare path alone */
    }
    assert_int_equal(round, 0);
    assert_int_equal(st, RDZV_RUN_RUNNING);
    /* Wrong keys only from now on: member 2 is silent, dead 300 ms after its last BEAT_FOR. */
    for (uint64_t t = 600; t <= 800; t += 100) {
        assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL), 0);
        assert_int_equal(rdzv_runs_beat_for(f->rs, "job", 2, key2 + 1, t, NULL, NULL), -ENOENT);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    assert_non_null(find_act(&f->out, RDZV_ACT_CLOSE, 2));
    assert_non_null(strstr(find_act(&f->out, RDZV_ACT_END_ROUND, 0)->text, "silent for 300ms"));
}

static void test_heartbeat_silence(void **state) {
    fx_t *f = *state;
    form(f, 3, 2, 4, 0); /* closes at 1000; silence limit 300 ms */
    int64_t round = -1;
    int st = -1;
    for (uint64_t t = 1100; t <= 1200; t += 100) {
        assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", 1, t, &round, &st), 0);
        assert_int_equal(rdzv_runs_heartbeat(f->rs, NULL, 3, t, NULL, NULL), 0);
        rdzv_runs_tick(f->rs, t, &f->out);
        assert_int_equal(f->out.n, 0);
    }
    assert_int_equal(round, 0);
    assert_int_equal(st, RDZV_RUN_RUNNING);
    rdzv_runs_tick(f->rs, 1299, &f->out);
    assert_int_equal(f->out.n, 0);
    rdzv_runs_tick(f->rs, 1300, &f->out);
    /* Member 2 last seen at 1000: dead at 1300. */
    assert_int_equal(f->out.n, 2);
    const rdzv_action_t *c = find_act(&f->out, RDZV_ACT_CLOSE, 2);
    assert_non_null(c);
    assert_non_null(strstr(c->text, "node 1 (h2) silent for 300ms"));
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_string_equal(e->text, "rendezvous 'job' round 0 ended: node 1 (h2) lost: silent for "
                                 "300ms (1 node)");
    assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", 2, 1500, NULL, NULL), -ENOENT);
    assert_int_equal(rdzv_runs_heartbeat(f->rs, "other", 1, 1500, NULL, NULL), -ENOENT);
    assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", 1, 1500, &round, &st), 0);
    assert_int_equal(round, 1);
    assert_int_equal(st, RDZV_RUN_JOINING);
}

static void test_heartbeat_deadline_lazy(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0); /* closes at once at 0 */
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 300);
    rdzv_runs_heartbeat(f->rs, "job", 1, 250, NULL, NULL);
    rdzv_runs_heartbeat(f->rs, "job", 2, 280, NULL, NULL);
    rdzv_runs_tick(f->rs, 300, &f->out);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 550); /* oldest (250) + 300 */
}

static void test_scale_up(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 4, 0);
    join_ok(f->rs, "job", 3, -1, 2, 4, 1500, &f->out);
    assert_int_equal(f->out.n, 1);
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_non_null(strstr(e->text, "scale-up"));
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 2, 4, 1510, &f->out);
    join_ok(f->rs, "job", 2, -1, 2, 4, 1520, &f->out);
    rdzv_runs_tick(f->rs, 1510 + 1000, &f->out); /* min reached at 1510 */
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_OK, 3);
    assert_int_equal(a->res.round, 1);
    assert_int_equal(a->res.group_rank, 2);
    assert_int_equal(a->res.group_world_size, 3);
    assert_int_equal(a->res.restarts_used, 0);
    assert_int_equal(rank_of(&f->out, 1), 0);
    assert_int_equal(rank_of(&f->out, 2), 1);
}

static void test_running_at_max_waits(void **state) {
    fx_t *f = *state;
    form(f, 2, 1, 2, 0);
    join_ok(f->rs, "job", 3, -1, 1, 2, 10, &f->out);
    assert_int_equal(f->out.n, 0); /* no end: waits */
    /* A member's death makes room: the waiter is in round 1's collection already. */
    rdzv_runs_leave(f->rs, 1, 20, &f->out);
    assert_non_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 20 + 1000); /* min 1: last call */
    join_ok(f->rs, "job", 2, -1, 1, 2, 30, &f->out);             /* reaches max: closes */
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_int_equal(rank_of(&f->out, 2), 1); /* keeps its rank */
    assert_int_equal(rank_of(&f->out, 3), 0);
}

/* A joiner while the run is RUNNING at max_nodes is a spare: it is not refused at join_timeout
 * but answered DDP_ERDZV_SPARE after the keep-alive bound (100 ms x 3 here), and joins again;
 * STATUS calls it a spare. */
static void test_spare_keep_alive(void **state) {
    fx_t *f = *state;
    form(f, 2, 1, 2, 0);
    join_ok(f->rs, "job", 3, -1, 1, 2, 1010, &f->out);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_page_json(f->rs, "job", 1100, NULL, NULL, 0, 8, &b, NULL), 0);
    json_t *o = json_loadb((const char *)b.data, b.len, 0, NULL);
    assert_non_null(o);
    json_t *spare = json_array_get(json_object_get(o, "members"), 2);
    assert_string_equal(json_string_value(json_object_get(spare, "state")), "spare");
    json_t *nodes = json_object_get(o, "nodes");
    assert_int_equal(json_integer_value(json_object_get(nodes, "spares")), 1);
    assert_int_equal(json_integer_value(json_object_get(nodes, "joining")), 0);
    json_decref(o);
    ddp_buf_free(&b);
    for (uint64_t t = 1050; t < 1310; t += 50) { /* keep the group alive */
        rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL);
        rdzv_runs_heartbeat(f->rs, "job", 2, t, NULL, NULL);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    assert_int_equal(f->out.n, 0);
    rdzv_runs_tick(f->rs, 1310, &f->out);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 3);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ERDZV_SPARE);
    assert_string_equal(a->text,
                        "rendezvous 'job' round 0: running at max_nodes=2; waiting as a spare");
    assert_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
    rdzv_actions_reset(&f->out);
    /* It joins again and takes the place of a member that leaves, with no last call. */
    join_ok(f->rs, "job", 3, -1, 1, 2, 1311, &f->out);
    rdzv_runs_leave(f->rs, 2, 1320, &f->out);
    assert_non_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 1, 2, 1330, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_int_equal(rank_of(&f->out, 3), 1);
}

static void test_join_timeout_names_lost(void **state) {
    fx_t *f = *state;
    form(f, 3, 2, 3, 0); /* closes at once */
    rdzv_fail_reply_t rep;
    rdzv_runs_fail(f->rs, "job", 1, 0, "boom", 100, &f->out, &rep);
    rdzv_runs_leave(f->rs, 3, 101, &f->out);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 2, 3, 200, &f->out);
    rdzv_runs_tick(f->rs, 10199, &f->out);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), 10200);
    rdzv_runs_tick(f->rs, 10200, &f->out);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 1);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ETIMEOUT);
    assert_string_equal(a->text, "rendezvous 'job' round 1: 1 of min 2 nodes joined within "
                                 "join_timeout=10s; lost: node 1 (h2), node 2 (h3)");
}

static void test_config_mismatch_and_refusals(void **state) {
    fx_t *f = *state;
    join_ok(f->rs, "job", 1, -1, 2, 4, 0, &f->out);
    rdzv_join_req_t q = req("job", "h2", -1, 2, 1, 3, 4);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 1, &f->out, &err), DDP_EUSAGE);
    assert_string_equal(err.text, "rendezvous 'job': this node asks for nnodes 3:4 but the run was "
                                  "started with 2:4");
    /* Bad fields. */
    const struct {
        int64_t nproc, min, max, want, port;
    } bad[] = {{0, 2, 4, -1, 1},
               {2, 0, 4, -1, 1},
               {2, 3, 2, -1, 1},
               {2, 2, 4, -2, 1},
               {2, 2, 4, -1, 70000}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        q = req("job", "h2", bad[i].want, bad[i].nproc, bad[i].port, bad[i].min, bad[i].max);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 1, &f->out, &err), DDP_EUSAGE);
    }
    q = req("job", "", -1, 2, 1, 2, 4);
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 1, &f->out, NULL), DDP_EUSAGE);
    /* Twice the same member; a member of another run. */
    q = req("job", "h1", -1, 2, 1, 2, 4);
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 1, &f->out, NULL), -EALREADY);
    q = req("other", "h1", -1, 2, 1, 2, 4);
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 1, &f->out, NULL), -EBUSY);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_count(f->rs), 1);
}

static void test_registry_bound(void **state) {
    (void)state;
    rdzv_runs_opts_t o = {2, 5000};
    rdzv_runs_t *rs = rdzv_runs_new(&o);
    rdzv_actions_t out = RDZV_ACTIONS_INIT;
    join_ok(rs, "a", 1, -1, 2, 2, 0, &out);
    join_ok(rs, "b", 2, -1, 2, 2, 0, &out);
    rdzv_join_req_t q = req("c", "h3", -1, 2, 1, 2, 2);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(rs, 3, &q, 1, &out, &err), DDP_ETOOBIG);
    assert_non_null(strstr(err.text, "2 runs"));
    /* An empty run is evicted for a new one. */
    rdzv_runs_leave(rs, 1, 2, &out);
    assert_int_equal(rdzv_runs_join(rs, 3, &q, 3, &out, NULL), 0);
    assert_int_equal(rdzv_runs_count(rs), 2);
    /* Empty runs are freed by tick after empty_keep_ms. */
    rdzv_runs_leave(rs, 3, 10, &out);
    assert_int_equal(rdzv_runs_next_deadline(rs) <= 5010, 1);
    rdzv_runs_tick(rs, 5010, &out);
    assert_int_equal(rdzv_runs_count(rs), 1);
    assert_int_equal(out.n, 0);
    rdzv_actions_close(&out);
    rdzv_runs_free(rs);
}

static void test_thousand_members(void **state) {
    fx_t *f = *state;
    const uint64_t n = 1000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 1; i <= n; i++)
        join_ok(f->rs, "big", i, i % 3 == 0 ? (int64_t)(n - i) : -1, 500, (int64_t)n, i, &f->out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), n);
    /* Every rank once; bases consistent. */
    char *seen = calloc(n, 1);
    for (size_t i = 0; i < f->out.n; i++) {
        const rdzv_join_result_t *r = &f->out.v[i].res;
        assert_in_range(r->group_rank, 0, n - 1);
        assert_int_equal(seen[r->group_rank], 0);
        seen[r->group_rank] = 1;
        assert_int_equal(r->rank_base, 2 * r->group_rank);
        assert_int_equal(r->world_size, 2 * (int64_t)n);
        if (f->out.v[i].member % 3 == 0)
            assert_int_equal(r->group_rank, (int64_t)(n - f->out.v[i].member));
    }
    free(seen);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_true(ms < 500.0); /* a loose sanity bound; bench/ measures it */
    /* A second round after a failure, all re-joining. */
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    rdzv_runs_fail(f->rs, "big", 7, 0, "boom", 2000, &f->out, &rep);
    assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
    rdzv_actions_reset(&f->out);
    for (uint64_t i = n; i >= 1; i--)
        join_ok(f->rs, "big", i, -1, 500, (int64_t)n, 3000, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), n);
    for (size_t i = 0; i < f->out.n; i += 97) {
        uint64_t m = f->out.v[i].member;
        int64_t want = m % 3 == 0 ? (int64_t)(n - m) : -1;
        if (want >= 0)
            assert_int_equal(f->out.v[i].res.group_rank, want);
    }
}

/* FINISH: a member of the running round says it passed its exit barrier: the run is DONE, its
 * spare is answered DDP_ERDZV_DONE and so is any later JOIN, and the members hanging up end
 * nothing (without it the spare would form a round of its own). A FINISH from outside the round,
 * or for another round, changes nothing. */
static void test_finish_releases_spares(void **state) {
    fx_t *f = *state;
    form(f, 2, 1, 2, 0);
    join_ok(f->rs, "job", 3, -1, 1, 2, 10, &f->out); /* a spare */
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 3, 0, 20, &f->out), -ENOENT);
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 1, 1, 20, &f->out), -ENOENT);
    assert_int_equal(rdzv_runs_finish(f->rs, "nope", 1, 0, 20, &f->out), -ENOENT);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 1, 0, 30, &f->out), 0);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 3);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ERDZV_DONE);
    assert_string_equal(a->text, "rendezvous 'job' finished: round 0 passed its exit barrier");
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 2, 0, 31, &f->out), -ENOENT); /* once */
    rdzv_actions_reset(&f->out);
    rdzv_runs_leave(f->rs, 1, 40, &f->out);
    rdzv_runs_leave(f->rs, 2, 41, &f->out);
    assert_int_equal(f->out.n, 0); /* no round ends, nothing forms */
    ddp_err_t err = {0};
    rdzv_join_req_t q = req("job", "h4", -1, 2, 1, 1, 2);
    q.min_round = 1; /* a node of the run, on a new connection: it was told round 0 */
    assert_int_equal(rdzv_runs_join(f->rs, 4, &q, 50, &f->out, &err), DDP_ERDZV_DONE);
    assert_non_null(strstr(err.text, "finished"));
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", 60, NULL, NULL, &b, NULL), 0);
    assert_non_null(strstr((const char *)b.data, "\"state\":\"DONE\""));
    ddp_buf_free(&b);
    /* The wire: u8 0x58, blob run id, i64 round; the reply's status. */
    assert_int_equal(rdzv_finish_req_encode(&b, "job", 7), 0);
    assert_int_equal(b.len, 1 + 8 + 3 + 8);
    rdzv_round_req_t p;
    size_t need = 0;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_FINISH);
    assert_int_equal(p.round, 7);
    ddp_buf_reset(&b);
    rdzv_round_reply_t rep = {0};
    assert_int_equal(rdzv_finish_reply_encode(&b, 1), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 2);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_FINISH);
    assert_int_equal(rep.status, 0);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
}

/* Joins member id as host host into run "job" (min, max, max_node_failures bound). */
static int join_host(fx_t *f, uint64_t id, const char *host, int64_t min, int64_t max,
                     int64_t bound, uint64_t now, ddp_err_t *err) {
    rdzv_join_req_t q = req("job", host, -1, 2, 29500 + (int64_t)id, min, max);
    q.cfg.max_node_failures = bound;
    return rdzv_runs_join(f->rs, id, &q, now, &f->out, err);
}

/* The status's host record of host, or NULL (o owns it). */
static json_t *host_rec(json_t *o, const char *host) {
    json_t *hs = json_object_get(o, "hosts"), *h;
    size_t i;
    json_array_foreach(hs, i, h) {
        if (strcmp(json_string_value(json_object_get(h, "host")), host) == 0)
            return h;
    }
    return NULL;
}

static json_t *status_of(fx_t *f, uint64_t now) {
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", now, NULL, NULL, &b, NULL), 0);
    json_t *o = json_loadb((const char *)b.data, b.len, 0, NULL);
    ddp_buf_free(&b);
    assert_non_null(o);
    return o;
}

/* max_node_failures=2: the host whose failure ended two rounds is excluded (the others still
 * meet min 2): the END_ROUND text says so, its JOIN is refused with DDP_ERDZV_EXCLUDED naming
 * the failures, STATUS shows the record, and the round forms without it. Failures of another
 * host are its own count. */
static void test_node_failures_exclude_host(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    const char *hosts[] = {"", "bad", "h2", "h3"};
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(join_host(f, i, hosts[i], 2, 3, 2, 0, &err), 0);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    int64_t round = 0;
    for (int failure = 1; failure <= 2; failure++, round++) {
        assert_int_equal(rdzv_runs_fail(f->rs, "job", 1, round, "rank 0 exited with code 1",
                                        100 * (uint64_t)failure, &f->out, &rep),
                         0);
        const rdzv_action_t *end = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
        assert_non_null(end);
        const char *said = strstr(end->text, "host bad excluded after 2 failures");
        if (failure == 1) {
            assert_null(said);
            /* The survivors and the bad host come back: round 1. */
            rdzv_actions_reset(&f->out);
            for (uint64_t i = 1; i <= 3; i++)
                assert_int_equal(join_host(f, i, hosts[i], 2, 3, 2, 101, &err), 0);
            assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
            rdzv_actions_reset(&f->out);
        } else {
            assert_non_null(said);
        }
    }
    rdzv_actions_reset(&f->out);
    ddp_err_clear(&err);
    assert_int_equal(join_host(f, 1, "bad", 2, 3, 2, 300, &err), DDP_ERDZV_EXCLUDED);
    assert_string_equal(err.text, "rendezvous 'job': host bad is excluded after 2 group failures "
                                  "(max_node_failures=2); the last: round 1: rank 0 exited with "
                                  "code 1");
    /* A new connection from that host is refused too: the record is the host's. */
    ddp_err_clear(&err);
    assert_int_equal(join_host(f, 9, "bad", 2, 3, 2, 300, &err), DDP_ERDZV_EXCLUDED);
    assert_int_equal(join_host(f, 2, "h2", 2, 3, 2, 310, &err), 0);
    assert_int_equal(join_host(f, 3, "h3", 2, 3, 2, 320, &err), 0);
    rdzv_runs_tick(f->rs, 320 + 1000, &f->out); /* last call: 2 of max 3 */
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    json_t *o = status_of(f, 2000);
    json_t *h = host_rec(o, "bad");
    assert_non_null(h);
    assert_int_equal(json_integer_value(json_object_get(h, "failures")), 2);
    assert_true(json_is_true(json_object_get(h, "excluded")));
    assert_string_equal(json_string_value(json_object_get(h, "last_failure")),
                        "round 1: rank 0 exited with code 1");
    assert_null(host_rec(o, "h2"));
    json_decref(o);
    /* h2's own failure counts for h2 alone. */
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 2, 2, "x", 2100, &f->out, &rep), 0);
    o = status_of(f, 2200);
    assert_int_equal(json_integer_value(json_object_get(host_rec(o, "h2"), "failures")), 1);
    assert_false(json_is_true(json_object_get(host_rec(o, "h2"), "excluded")));
    json_decref(o);
}

/* At its minimum the job keeps the host (it would stop without it): the record says so, its
 * JOIN is accepted, and the restart budget decides as without the bound. */
static void test_node_failures_kept_at_min(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    assert_int_equal(join_host(f, 1, "bad", 2, 2, 1, 0, &err), 0);
    assert_int_equal(join_host(f, 2, "h2", 2, 2, 1, 0, &err), 0);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 1, 0, "boom", 100, &f->out, &rep), 0);
    assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
    const rdzv_action_t *end = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(end);
    assert_non_null(strstr(end->text, "host bad has 1 failures (max_node_failures=1) but stays: "
                                      "without it 1 of min 2 nodes"));
    assert_int_equal(join_host(f, 1, "bad", 2, 2, 1, 200, &err), 0);
    json_t *o = status_of(f, 300);
    json_t *h = host_rec(o, "bad");
    assert_false(json_is_true(json_object_get(h, "excluded")));
    assert_true(json_is_true(json_object_get(h, "kept_at_min")));
    json_decref(o);
}

/* Members of the last round come before spares: with max 2, spare 3 waits, and member 2's agent
 * comes back on a new connection (4, carrying round 1: it was told round 0) before its old one is
 * found silent. Round 1 has 3 and 4 parked, max, but waits for member 1 (connected, not back) and
 * then takes 1 and 4, leaving 3 a spare; without the policy 3 and 4 closed it at once and the
 * surviving member 1 was the spare. */
static void test_last_round_before_spares(void **state) {
    fx_t *f = *state;
    form(f, 2, 1, 2, 0);
    join_ok(f->rs, "job", 3, -1, 1, 2, 10, &f->out);
    rdzv_join_req_t q = req("job", "h2", -1, 2, 29600, 1, 2);
    q.min_round = 1;
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_join(f->rs, 4, &q, 20, &f->out, &err), 0);
    assert_int_equal(f->out.n, 0); /* a spare for now */
    for (uint64_t t = 50; t <= 300; t += 50) {
        rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    rdzv_runs_tick(f->rs, 301, &f->out); /* member 2 silent since 0: bound 300 */
    assert_non_null(find_act(&f->out, RDZV_ACT_CLOSE, 2));
    assert_non_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 0);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 1, 2, 310, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_int_equal(rank_of(&f->out, 1), 0); /* keeps its rank */
    assert_int_equal(rank_of(&f->out, 4), 1);
    assert_null(find_act(&f->out, RDZV_ACT_REPLY_OK, 3));
    json_t *o = status_of(f, 320);
    json_t *last = json_array_get(json_object_get(o, "members"), 2);
    assert_int_equal(json_integer_value(json_object_get(last, "member")), 3);
    assert_string_equal(json_string_value(json_object_get(last, "state")), "spare");
    json_decref(o);
}

/* A spare answered at its keep-alive bound stays a spare until it JOINs again: a FAIL in that
 * gap counts it toward min, so the failing host is excluded (min 2: h2 and the spare) where it
 * was kept at min; the excluded member's refused JOIN stops round 1 waiting for it, and the
 * round closes at max with h2 and the spare. An answered spare that does not JOIN again within
 * another bound is dropped. */
static void test_spare_answered_counts(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    assert_int_equal(join_host(f, 1, "bad", 2, 2, 1, 0, &err), 0);
    assert_int_equal(join_host(f, 2, "h2", 2, 2, 1, 0, &err), 0);
    assert_int_equal(join_host(f, 3, "h3", 2, 2, 1, 10, &err), 0);
    rdzv_actions_reset(&f->out);
    for (uint64_t t = 50; t <= 300; t += 50) {
        rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL);
        rdzv_runs_heartbeat(f->rs, "job", 2, t, NULL, NULL);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    rdzv_runs_tick(f->rs, 310, &f->out);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 3);
    assert_non_null(a);
    assert_int_equal(a->code, DDP_ERDZV_SPARE);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 1, 0, "boom", 311, &f->out, &rep), 0);
    const rdzv_action_t *end = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(end);
    assert_non_null(strstr(end->text, "host bad excluded after 1 failures"));
    rdzv_actions_reset(&f->out);
    assert_int_equal(join_host(f, 3, "h3", 2, 2, 1, 312, &err), 0); /* the spare again */
    assert_int_equal(join_host(f, 2, "h2", 2, 2, 1, 313, &err), 0);
    assert_int_equal(f->out.n, 0); /* at max, but member 1 may come back */
    assert_int_equal(join_host(f, 1, "bad", 2, 2, 1, 314, &err), DDP_ERDZV_EXCLUDED);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_non_null(find_act(&f->out, RDZV_ACT_REPLY_OK, 3));
    rdzv_actions_reset(&f->out);
    /* A new spare, answered, then silent: dropped one bound after its answer. */
    assert_int_equal(join_host(f, 5, "h5", 2, 2, 1, 400, &err), 0);
    for (uint64_t t = 450; t <= 1100; t += 50) {
        rdzv_runs_heartbeat(f->rs, "job", 2, t, NULL, NULL);
        rdzv_runs_heartbeat(f->rs, "job", 3, t, NULL, NULL);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_ERR), 1); /* the answer at 700 */
    json_t *o = status_of(f, 1100);
    assert_int_equal(json_array_size(json_object_get(o, "members")), 2);
    json_decref(o);
    assert_int_equal(join_host(f, 5, "h5", 2, 2, 1, 1110, &err), 0); /* a new spare again */
}

/* The same job started again on a store that still holds its finished run: a new node (no
 * connection of the run, told no round of it) is refused with DDP_ERDZV_REUSED, naming the id
 * and how long the store keeps the run, where it got DDP_ERDZV_DONE and its agent exited 0
 * having run nothing. A spare answered at its keep-alive bound when the run finished is still
 * told DDP_ERDZV_DONE when it JOINs again, and is dropped a bound later if it does not. */
static void test_finished_run_id_reused(void **state) {
    fx_t *f = *state;
    form(f, 2, 1, 2, 0);
    join_ok(f->rs, "job", 3, -1, 1, 2, 10, &f->out); /* a spare, answered at 310 */
    join_ok(f->rs, "job", 5, -1, 1, 2, 20, &f->out); /* a spare, answered at 320 */
    for (uint64_t t = 50; t <= 320; t += 10) {
        rdzv_runs_heartbeat(f->rs, "job", 1, t, NULL, NULL);
        rdzv_runs_heartbeat(f->rs, "job", 2, t, NULL, NULL);
        rdzv_runs_tick(f->rs, t, &f->out);
    }
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_ERR), 2);
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 1, 0, 330, &f->out), 0);
    assert_int_equal(f->out.n, 0); /* no JOIN parked to answer */
    ddp_err_t err = {0};
    assert_int_equal(join_host(f, 3, "h3", 1, 2, 0, 340, &err), DDP_ERDZV_DONE);
    rdzv_runs_leave(f->rs, 1, 350, &f->out);
    rdzv_runs_leave(f->rs, 2, 350, &f->out);
    rdzv_runs_leave(f->rs, 3, 350, &f->out);
    rdzv_runs_tick(f->rs, 620, &f->out); /* spare 5 is dropped: the run is empty from 620 */
    ddp_err_clear(&err);
    assert_int_equal(join_host(f, 6, "h6", 1, 2, 0, 1620, &err), DDP_ERDZV_REUSED);
    assert_string_equal(err.text, "rendezvous 'job' finished already: use another --rdzv_id (the "
                                  "store keeps a finished run 3600s after its last node leaves; "
                                  "3599s left)");
    ddp_err_clear(&err);
    assert_int_equal(join_host(f, 5, "h5", 1, 2, 0, 1630, &err), DDP_ERDZV_REUSED); /* dropped */
}

/* A crash loop backs off across nodes, the store holding the next round: the first restart's
 * round closes as soon as every node is back, the second's not before 100 ms after its FAIL, the
 * third's 200 ms, doubling up to the cap; a round at max closes when the back-off is over. */
static void test_restart_backoff(void **state) {
    fx_t *f = *state;
    rdzv_fail_reply_t rep;
    ddp_err_t err = {0};
    rdzv_join_req_t q1 = req("job", "h1", -1, 2, 1, 2, 2), q2 = req("job", "h2", -1, 2, 2, 2, 2);
    q1.cfg.max_restarts = q2.cfg.max_restarts = 20;
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q1, 0, &f->out, &err), 0);
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q2, 0, &f->out, &err), 0);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    rdzv_actions_reset(&f->out);
    uint64_t now = 1000, want[] = {0, 100, 200, 400, 800, 1600, 3200, 5000, 5000};
    for (int64_t k = 1; k <= 9; k++) {
        assert_int_equal(rdzv_runs_fail(f->rs, "job", 2, k - 1, "boom", now, &f->out, &rep), 0);
        assert_int_equal(rep.restarts_used, k);
        rdzv_actions_reset(&f->out);
        assert_int_equal(rdzv_runs_join(f->rs, 1, &q1, now + 1, &f->out, &err), 0);
        assert_int_equal(rdzv_runs_join(f->rs, 2, &q2, now + 2, &f->out, &err), 0);
        uint64_t at = now + (want[k - 1] > 2 ? want[k - 1] : 2);
        if (want[k - 1] > 0) {
            assert_int_equal(f->out.n, 0);
            assert_int_equal(rdzv_runs_next_deadline(f->rs), now + want[k - 1]);
            rdzv_runs_tick(f->rs, at - 1, &f->out);
            assert_int_equal(f->out.n, 0);
            rdzv_runs_tick(f->rs, at, &f->out);
        }
        assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
        rdzv_actions_reset(&f->out);
        now = at + 10;
    }
}

/* UNFIT: recorded for a known run only, shown with its reason until the host joins; the records
 * of a run are bounded (2 x max_nodes + 16), the oldest plain record making room. */
static void test_unfit_reports(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 50, "h9", "gpu 0: ECC", 0), -ENOENT);
    assert_int_equal(join_host(f, 1, "h1", 2, 2, 0, 0, &err), 0);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 50, "h2", "health check exited with 3", 100), 0);
    json_t *o = status_of(f, 350);
    json_t *h = host_rec(o, "h2");
    assert_non_null(h);
    assert_true(json_is_true(json_object_get(h, "unfit")));
    assert_string_equal(json_string_value(json_object_get(h, "reason")),
                        "health check exited with 3");
    assert_int_equal(json_integer_value(json_object_get(h, "unfit_age_ms")), 250);
    assert_int_equal(json_integer_value(json_object_get(h, "failures")), 0);
    json_decref(o);
    /* It passes its check and joins: no longer unfit. */
    assert_int_equal(join_host(f, 2, "h2", 2, 2, 0, 400, &err), 0);
    o = status_of(f, 450);
    assert_false(json_is_true(json_object_get(host_rec(o, "h2"), "unfit")));
    json_decref(o);
    /* Made-up hosts: 2 x 2 + 16 = 20 records at most; the newest are kept. */
    for (int i = 0; i < 100; i++) {
        char host[32];
        snprintf(host, sizeof host, "fake%d", i);
        assert_int_equal(rdzv_runs_unfit(f->rs, "job", 50, host, "x", 500 + (uint64_t)i), 0);
    }
    o = status_of(f, 700);
    assert_int_equal(json_array_size(json_object_get(o, "hosts")), 20);
    assert_non_null(host_rec(o, "fake99"));
    assert_null(host_rec(o, "fake0"));
    json_decref(o);
}

/* Nobody speaks for a host it does not run on, and nobody who never ran in a group stops the run:
 * a spare (a forged host, say) cannot ABORT the run or mark a member's host unfit, a member
 * reports its own host alone, and a connection outside the run cannot mark a host that runs in
 * the group. Its own host, or one the group does not use, it may report. */
static void test_unfit_and_abort_speak_for_themselves(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);                             /* h1, h2 run; at max */
    join_ok(f->rs, "job", 3, -1, 2, 2, 10, &f->out); /* h3: a spare */
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 3, "attacker says stop", 11, &f->out), -EPERM);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 3, "h1", "forged", 12), -EPERM);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 1, "h2", "forged", 12), -EPERM);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 9, "h2", "forged", 12), -EPERM);
    json_t *o = status_of(f, 13);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "RUNNING");
    assert_null(host_rec(o, "h1"));
    assert_null(host_rec(o, "h2"));
    json_decref(o);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 3, "h3", "its own check", 14), 0);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 1, "h1", "its own check", 14), 0);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 9, "h7", "not in the group", 14), 0);
    /* A member that ran in the group may stop the run. */
    assert_int_equal(rdzv_runs_abort(f->rs, "job", 1, "no progress", 15, &f->out), 0);
    assert_non_null(find_act(&f->out, RDZV_ACT_END_ROUND, 0));
}

static void test_status_json(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 3, 0);
    join_ok(f->rs, "job", 3, -1, 2, 3, 1500, &f->out); /* scale-up: round 1 */
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", 1600, NULL, NULL, &b, NULL), 0);
    json_error_t je;
    json_t *o = json_loadb((const char *)b.data, b.len, 0, &je);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "JOINING");
    assert_int_equal(json_integer_value(json_object_get(o, "round")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "restarts_used")), 0);
    json_t *ms = json_object_get(o, "members");
    assert_int_equal(json_array_size(ms), 3);
    json_t *first = json_array_get(ms, 0);
    assert_string_equal(json_string_value(json_object_get(first, "host")), "h3");
    assert_string_equal(json_string_value(json_object_get(first, "state")), "joining");
    assert_int_equal(json_integer_value(json_object_get(first, "silent_ms")), 100);
    json_decref(o);
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_status_json(f->rs, "nope", 0, NULL, NULL, &b, &err), -ENOENT);
    assert_non_null(strstr(err.text, "nope"));
    ddp_buf_free(&b);
}

/* STATUS_PAGE: the counts of every member by state, and only the members of the page asked for,
 * in STATUS's order (group rank, then joiners, then idle members). */
static void test_status_page(void **state) {
    fx_t *f = *state;
    form(f, 6, 2, 8, 0);
    /* Round 0 runs 6 nodes; member 1 fails it: 1..6 idle, then 2 and 3 re-join round 1. */
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 1, 0, "x", 1500, &f->out, &rep), 0);
    join_ok(f->rs, "job", 2, -1, 2, 8, 1600, &f->out);
    join_ok(f->rs, "job", 3, -1, 2, 8, 1600, &f->out);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_page_json(f->rs, "job", 1700, NULL, NULL, 1, 3, &b, NULL), 0);
    json_error_t je;
    json_t *o = json_loadb((const char *)b.data, b.len, 0, &je);
    assert_non_null(o);
    json_t *nodes = json_object_get(o, "nodes");
    assert_int_equal(json_integer_value(json_object_get(nodes, "total")), 6);
    assert_int_equal(json_integer_value(json_object_get(nodes, "running")), 0);
    assert_int_equal(json_integer_value(json_object_get(nodes, "joining")), 2);
    assert_int_equal(json_integer_value(json_object_get(nodes, "idle")), 4);
    assert_int_equal(json_integer_value(json_object_get(o, "first")), 1);
    json_t *ms = json_object_get(o, "members");
    assert_int_equal(json_array_size(ms), 3); /* joiner h3, then the first two idle */
    assert_string_equal(json_string_value(json_object_get(json_array_get(ms, 0), "host")), "h3");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ms, 1), "state")), "idle");
    json_decref(o);
    /* A page past the end lists nobody; limit 0 gives the counts alone. */
    for (size_t first = 0; first <= 6; first += 6) {
        ddp_buf_reset(&b);
        size_t limit = first ? 10 : 0;
        assert_int_equal(
            rdzv_runs_status_page_json(f->rs, "job", 1700, NULL, NULL, first, limit, &b, NULL), 0);
        o = json_loadb((const char *)b.data, b.len, 0, &je);
        assert_non_null(o);
        assert_int_equal(json_array_size(json_object_get(o, "members")), 0);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "nodes"), "total")),
                         6);
        json_decref(o);
    }
    /* The whole status has no counts: it is what it always was. */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", 1700, NULL, NULL, &b, NULL), 0);
    o = json_loadb((const char *)b.data, b.len, 0, &je);
    assert_null(json_object_get(o, "nodes"));
    assert_int_equal(json_array_size(json_object_get(o, "members")), 6);
    json_decref(o);
    ddp_buf_free(&b);
}

/* A progress table for STATUS: group rank 0 reported round 0, group rank 1 an older round. */
static int fake_progress(void *ctx, const char *run_id, int64_t group_rank, rdzv_progress_t *p) {
    (void)ctx;
    assert_string_equal(run_id, "job");
    if (group_rank == 0) {
        *p = (rdzv_progress_t){.round = 0, .step = 42, .beat_age_ms = 300};
        return 0;
    }
    if (group_rank == 1) {
        *p = (rdzv_progress_t){.round = 7, .step = 9, .beat_age_ms = 1};
        return 0;
    }
    return -ENOENT;
}

static void test_status_progress(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", 1600, fake_progress, NULL, &b, NULL), 0);
    json_t *o = json_loadb((const char *)b.data, b.len, 0, NULL);
    assert_non_null(o);
    size_t i;
    json_t *m;
    int seen = 0;
    json_array_foreach(json_object_get(o, "members"), i, m) {
        json_int_t gr = json_integer_value(json_object_get(m, "group_rank"));
        json_int_t silent = json_integer_value(json_object_get(m, "silent_ms"));
        if (gr == 0) {
            assert_int_equal(json_integer_value(json_object_get(m, "step")), 42);
            /* the age at the report plus the time since the keep-alive it went out with */
            assert_int_equal(json_integer_value(json_object_get(m, "beat_age_ms")), 300 + silent);
            seen++;
        } else {
            assert_null(json_object_get(m, "step")); /* a report of another round is stale */
            assert_null(json_object_get(m, "beat_age_ms"));
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    json_decref(o);
    ddp_buf_free(&b);
}

/* The key layout (rdzv_layout.h): each key's name, refusals, and the parsers reading back the
 * round of exactly the keys the builders make. */
static void test_key_layout(void **state) {
    (void)state;
    char key[RDZV_LAYOUT_KEY_MAX], longid[RDZV_RUN_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(rdzv_layout_progress_key(key, sizeof key, "job", 3), 0);
    assert_string_equal(key, "__rdzv/job/progress/3");
    assert_int_equal(rdzv_layout_progress_key(key, sizeof key, "job", -1), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, "job", 12), 0);
    assert_string_equal(key, "__rdzv/job/end/12");
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key), "job"), 12);
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key), "jo"), -1);
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key) - 3, "job"), -1); /* "end/" */
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, longid, 0), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, "job", -1), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, 10, "job", 1), -EINVAL); /* does not fit */
    assert_int_equal(rdzv_layout_exit_key(key, sizeof key, "job", 4), 0);
    assert_string_equal(key, "__rdzv/job/4/exit");
    assert_int_equal(rdzv_layout_exit_done_key(key, sizeof key, "job", 4), 0);
    assert_string_equal(key, "__rdzv/job/4/exit/done");
    /* The largest run id and round fit RDZV_LAYOUT_KEY_MAX. */
    longid[RDZV_RUN_ID_MAX] = '\0';
    assert_int_equal(rdzv_layout_exit_done_key(key, sizeof key, longid, INT64_MAX), 0);
    assert_int_equal(rdzv_layout_round_key(key, sizeof key, "ddpw/", "job", 3, "backend"), 0);
    assert_string_equal(key, "ddpw/job/3/backend");
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "ddpw/", "job"), 3);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "lib/", "job"), -1);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "", "job"), -1);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "ddpw/", "jo"), -1);
    assert_int_equal(rdzv_layout_round_of("ddpw/job/3", 10, "ddpw/", "job"), -1);
    assert_int_equal(rdzv_layout_round_of("ddpw/job/x/k", 12, "ddpw/", "job"), -1);
    char prefix[RDZV_ROUND_KEYS_MAX + 2];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    assert_int_equal(rdzv_layout_round_key(key, sizeof key, prefix, "job", 0, "k"), -EINVAL);
}

/* The progress value's codec: what it writes it reads back; anything else is refused. */
static void test_progress_codec(void **state) {
    (void)state;
    char val[RDZV_PROGRESS_VALUE_MAX];
    rdzv_progress_t p = {.round = INT64_MAX, .step = -1, .beat_age_ms = INT64_MAX}, q;
    int n = rdzv_progress_format(val, sizeof val, &p);
    assert_true(n > 0);
    assert_int_equal(rdzv_progress_parse(val, (size_t)n, &q), 0);
    assert_true(q.round == p.round && q.step == -1 && q.beat_age_ms == p.beat_age_ms);
    static const char *const bad[] = {"",        "1 2",
                                      "1 2 3 ",  " 1 2 3",
                                      "a b c",   "-1 0 0",
                                      "1 -2 0",  "1 2 -3",
                                      "1 2 3 4", "1  2 3",
                                      "1 2 3\n", "1 2 99999999999999999999",
                                      "- 2 3",   "1 2 9223372036854775808"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(rdzv_progress_parse(bad[k], strlen(bad[k]), &q), -EINVAL);
    assert_int_equal(rdzv_progress_parse("0 9223372036854775807 0", 23, &q), 0);
    assert_true(q.step == INT64_MAX);
}

static void test_member_joins_again(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);
    join_ok(f->rs, "job", 2, -1, 2, 2, 10, &f->out); /* its agent restarted the group itself */
    const rdzv_action_t *e = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(e);
    assert_non_null(strstr(e->text, "node 1 (h2) joined again"));
    assert_int_equal(f->out.n, 1);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 2, 2, 11, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_int_equal(rank_of(&f->out, 2), 1);
    assert_int_equal(find_act(&f->out, RDZV_ACT_REPLY_OK, 2)->res.restarts_used, 0);
}

static void test_many_lost_text_is_cut(void **state) {
    fx_t *f = *state;
    const uint64_t n = 200;
    for (uint64_t i = 1; i <= n; i++)
        join_ok(f->rs, "job", i, -1, n, n, 0, &f->out);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    rdzv_runs_fail(f->rs, "job", 1, 0, "boom", 1, &f->out, &rep);
    for (uint64_t i = 2; i <= n; i++)
        rdzv_runs_leave(f->rs, i, 2, &f->out);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, n, n, 3, &f->out);
    rdzv_runs_tick(f->rs, 10003, &f->out);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_REPLY_ERR, 1);
    assert_non_null(a);
    assert_true(strlen(a->text) < sizeof a->text);
    assert_non_null(strstr(a->text, "1 of min 200 nodes joined"));
    assert_non_null(strstr(a->text, "lost: node 1 (h2), node 2 (h3)"));
    assert_non_null(strstr(a->text, "more lost"));
}

/* ---- wire codec ---- */

static void check_all_prefixes_incomplete(const ddp_buf_t *b, int reply) {
    for (size_t k = 0; k < b->len; k++) {
        size_t need = 0;
        long rc;
        if (reply) {
            rdzv_round_reply_t rep = {0};
            rc = rdzv_round_reply_parse(b->data, k, &rep, &need, NULL);
            ddp_buf_free(&rep.text);
        } else {
            rdzv_round_req_t q;
            rc = rdzv_round_req_parse(b->data, k, &q, &need, NULL);
        }
        assert_int_equal(rc, 0);
        assert_true(need > k && need <= b->len);
    }
}

static void test_wire_join_req(void **state) {
    (void)state;
    rdzv_join_req_t q = req("job7", "10.0.0.2", 3, 8, 29500, 2, 4);
    q.cfg.max_restarts = 5;
    q.min_round = 12;
    q.restarts_used = 4;
    q.cfg.max_node_failures = 3;
    snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "ddpw/");
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8 + 12 * 8 + 8 + 5 + 8);
    assert_int_equal(b.data[0], 0x50);
    rdzv_round_req_t p;
    size_t need = 0;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_JOIN);
    assert_memory_equal(&p.join, &q, sizeof q);
    check_all_prefixes_incomplete(&b, 0);
    /* Pipelined: the first frame's length only. */
    assert_int_equal(rdzv_heartbeat_req_encode(&b, "job7"), 0);
    size_t first = 1 + 8 + 4 + 8 + 8 + 12 * 8 + 8 + 5 + 8;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)first);
    assert_int_equal(rdzv_round_req_parse(b.data + first, b.len - first, &p, &need, NULL), 13);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_string_equal(p.join.run_id, "job7");
    /* u8 0x55, blob "job7", i64 member, i64 key */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_beat_for_req_encode(&b, "job7", 42, -7), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8);
    assert_int_equal(b.data[0], 0x55);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_BEAT_FOR);
    assert_string_equal(p.join.run_id, "job7");
    assert_int_equal(p.member, 42);
    assert_int_equal(p.member_key, -7);
    check_all_prefixes_incomplete(&b, 0);
    /* u8 0x57, blob "job7", blob host, blob reason */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_unfit_req_encode(&b, "job7", "10.0.0.2", "gpu 1: ECC"), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8 + 8 + 10);
    assert_int_equal(b.data[0], 0x57);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_UNFIT);
    assert_string_equal(p.join.host, "10.0.0.2");
    assert_string_equal(p.what, "gpu 1: ECC");
    check_all_prefixes_incomplete(&b, 0);
    assert_int_equal(rdzv_unfit_req_encode(&b, "job7", "", "x"), -EINVAL);
    ddp_buf_reset(&b);
    rdzv_round_reply_t rep = {0};
    assert_int_equal(rdzv_unfit_reply_encode(&b, 0), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 2);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_UNFIT);
    assert_int_equal(rep.status, 1);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
}

static void test_wire_bad_requests(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_round_req_t p;
    size_t need = 0;
    ddp_err_t err = {0};
    uint8_t unknown = 0x59;
    assert_int_equal(rdzv_round_req_parse(&unknown, 1, &p, &need, &err), DDP_EFRAME);
    /* A host longer than 255 bytes is refused as soon as its length arrives. */
    ddp_buf_append(&b, "\x50", 1);
    uint64_t n = 4;
    ddp_buf_append(&b, &n, 8);
    ddp_buf_append(&b, "job7", 4);
    n = 256;
    ddp_buf_append(&b, &n, 8);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_ETOOBIG);
    assert_int_equal(err.offset, 13);
    assert_non_null(strstr(err.text, "host"));
    /* A negative (huge) run id length. */
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x53", 1);
    n = UINT64_MAX;
    ddp_buf_append(&b, &n, 8);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_ETOOBIG);
    /* An empty run id, and a NUL inside one. */
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x51", 1);
    n = 0;
    ddp_buf_append(&b, &n, 8);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_EFRAME);
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x51", 1);
    n = 3;
    ddp_buf_append(&b, &n, 8);
    ddp_buf_append(&b, "a\0b", 3);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_EFRAME);
    /* Run ids and hosts are printable ASCII: ESC, BEL, CR, LF and DEL are refused, naming the
     * field and the byte. */
    const char *bad[] = {"job\x1b[2J", "job\x07", "job\r", "job\n", "job\x7f", "job\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rdzv_join_req_t q;
        memset(&q, 0, sizeof q);
        snprintf(q.run_id, sizeof q.run_id, "%s", bad[i]);
        snprintf(q.host, sizeof q.host, "10.0.0.1");
        q.nproc = 1;
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "run id"));
        assert_non_null(strstr(err.text, "printable ASCII"));
        snprintf(q.run_id, sizeof q.run_id, "job7");
        snprintf(q.host, sizeof q.host, "%s", bad[i]);
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "host"));
        assert_int_equal(err.offset, 13);
    }
    /* round_keys may be empty, else printable ASCII of at most RDZV_ROUND_KEYS_MAX bytes. */
    {
        rdzv_join_req_t q = req("job7", "10.0.0.2", -1, 1, 0, 1, 1);
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
        assert_string_equal(p.join.cfg.round_keys, "");
        snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "ddpw\x1b/");
        assert_int_equal(rdzv_join_req_encode(&b, &q), -EINVAL);
        /* The same bytes from another client: refused by the parser, naming the field. */
        /* b holds the empty-prefix frame: its last 16 bytes are that blob's length and
         * max_node_failures. */
        uint64_t six = 6;
        b.len -= 8;
        memcpy(b.data + b.len - 8, &six, 8);
        ddp_buf_append(&b, "ddpw\x1b/", 6);
        int64_t bound = 0;
        ddp_buf_append(&b, &bound, 8);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "round_keys"));
        uint64_t big = RDZV_ROUND_KEYS_MAX + 1;
        memcpy(b.data + b.len - 8 - 6 - 8, &big, 8);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_ETOOBIG);
    }
    /* Encoders refuse what the parser would. */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_req_encode(&b, ""), -EINVAL);
    char longid[RDZV_RUN_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(rdzv_heartbeat_req_encode(&b, longid), -EINVAL);
    assert_int_equal(b.len, 0);
    ddp_buf_free(&b);
}

static void test_wire_fail_status_req(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_fail_req_encode(&b, "job7", 3, "rank 5 exited with code 1"), 0);
    rdzv_round_req_t p;
    size_t need = 0;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_FAIL);
    assert_int_equal(p.round, 3);
    assert_string_equal(p.what, "rank 5 exited with code 1");
    check_all_prefixes_incomplete(&b, 0);
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_fail_req_encode(&b, "job7", 0, NULL), 0); /* empty text is allowed */
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_string_equal(p.what, "");
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_req_encode(&b, "job7"), 0);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), 13);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_STATUS);
    ddp_buf_reset(&b);
    /* u8 0x56, blob "job7", i64 first, i64 limit */
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", 40, 20), 0);
    assert_int_equal(b.len, 13 + 16);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_STATUS_PAGE);
    assert_int_equal(p.first, 40);
    assert_int_equal(p.limit, 20);
    check_all_prefixes_incomplete(&b, 0);
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", -1, 20), -EINVAL);
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", 0, RDZV_ROUND_MAX_NODES + 1), -EINVAL);
    /* A page out of range on the wire is a malformed frame naming it. */
    b.data[b.len - 1] = 0x80; /* limit < 0 */
    ddp_err_t perr = {0};
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &perr), DDP_EFRAME);
    assert_non_null(strstr(perr.text, "status page"));
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_page_reply_encode(&b, 1, "{}", 2), 0);
    rdzv_round_reply_t rr;
    memset(&rr, 0, sizeof rr);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rr, &need, NULL), (long)b.len);
    assert_int_equal(rr.cmd, RDZV_CMD_RDZV_STATUS_PAGE);
    assert_int_equal(rr.status, 0);
    assert_string_equal((const char *)rr.text.data, "{}");
    ddp_buf_free(&rr.text);
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_abort_req_encode(&b, "job7", "no progress in 3 attempts"), 0);
    /* u8 0x54, blob "job7", blob reason */
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 25);
    assert_int_equal(b.data[0], 0x54);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_ABORT);
    assert_string_equal(p.join.run_id, "job7");
    assert_string_equal(p.what, "no progress in 3 attempts");
    check_all_prefixes_incomplete(&b, 0);
    ddp_buf_free(&b);
}

static void test_wire_replies(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_join_result_t res = {
        4, 1, 3, 8, 24, "10.0.0.1", 29500, 2, RDZV_STORE_EMBEDDED, 17, 0x123456789abcdefLL};
    assert_int_equal(rdzv_join_reply_encode(&b, &res), 0);
    assert_int_equal(b.len, 2 + 5 * 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8);
    rdzv_round_reply_t rep = {0};
    size_t need = 0;
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), (long)b.len);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
    assert_int_equal(rep.status, 0);
    assert_memory_equal(&rep.join, &res, sizeof res);
    check_all_prefixes_incomplete(&b, 1);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_join_reply_encode_err(&b, DDP_ETIMEOUT, "1 of min 2 nodes joined"), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), (long)b.len);
    assert_int_equal(rep.status, 1);
    assert_int_equal(rep.code, DDP_ETIMEOUT);
    assert_string_equal((const char *)rep.text.data, "1 of min 2 nodes joined");
    check_all_prefixes_incomplete(&b, 1);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_heartbeat_reply_encode(&b, 1, 7, RDZV_RUN_RUNNING), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 18);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(rep.round, 7);
    assert_int_equal(rep.state, RDZV_RUN_RUNNING);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_beat_for_reply_encode(&b, 1, 8, RDZV_RUN_LAST_CALL), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 18);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_BEAT_FOR);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.round, 8);
    assert_int_equal(rep.state, RDZV_RUN_LAST_CALL);

    ddp_buf_reset(&b);
    rdzv_fail_reply_t fr = {RDZV_FAIL_RUN_FAILED, 5, 4, 3};
    assert_int_equal(rdzv_fail_reply_encode(&b, &fr), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 26);
    assert_int_equal(rep.fail.status, RDZV_FAIL_RUN_FAILED);
    assert_int_equal(rep.fail.round, 5);
    assert_int_equal(rep.fail.restarts_used, 4);
    assert_int_equal(rep.fail.max_restarts, 3);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_reply_encode(&b, 1, "{\"round\":1}", 11), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 21);
    assert_int_equal(rep.status, 0);
    assert_string_equal((const char *)rep.text.data, "{\"round\":1}");
    check_all_prefixes_incomplete(&b, 1);

    for (int stopped = 0; stopped <= 1; stopped++) {
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_abort_reply_encode(&b, stopped), 0);
        assert_int_equal(b.len, 2);
        assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 2);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_ABORT);
        assert_int_equal(rep.status, stopped ? 0 : 1);
    }
    uint8_t badabort[2] = {0x54, 2};
    assert_int_equal(rdzv_round_reply_parse(badabort, 2, &rep, &need, NULL), DDP_EPROTO);

    /* Unknown reply command and JOIN status are protocol errors. */
    ddp_err_t err = {0};
    uint8_t junk[2] = {0x06, 0};
    assert_int_equal(rdzv_round_reply_parse(junk, 2, &rep, &need, &err), DDP_EPROTO);
    uint8_t badst[2] = {0x50, 9};
    assert_int_equal(rdzv_round_reply_parse(badst, 2, &rep, &need, NULL), DDP_EPROTO);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_round_keys_of_first_joiner),
        T(test_min_then_last_call),
        T(test_max_closes_at_once),
        T(test_last_call_back_to_joining),
        T(test_explicit_ranks_and_duplicates),
        T(test_stable_ranks_across_rounds),
        T(test_stable_ranks_after_scale_down),
        T(test_fail_ends_round_and_counts),
        T(test_max_restarts_spent),
        T(test_abort_between_rounds),
        T(test_abort_running_and_refusals),
        T(test_restart_count_survives_reconnect),
        T(test_carried_round_and_restarts),
        T(test_empty_run_frees_arrays),
        T(test_leave_running_ends_round),
        T(test_leave_joiner_drops),
        T(test_beat_for),
        T(test_heartbeat_silence),
        T(test_heartbeat_deadline_lazy),
        T(test_scale_up),
        T(test_running_at_max_waits),
        T(test_spare_keep_alive),
        T(test_last_round_before_spares),
        T(test_spare_answered_counts),
        T(test_node_failures_exclude_host),
        T(test_node_failures_kept_at_min),
        T(test_unfit_reports),
        T(test_unfit_and_abort_speak_for_themselves),
        T(test_finish_releases_spares),
        T(test_finished_run_id_reused),
        T(test_restart_backoff),
        T(test_join_timeout_names_lost),
        T(test_config_mismatch_and_refusals),
        cmocka_unit_test(test_registry_bound),
        T(test_thousand_members),
        T(test_member_joins_again),
        T(test_many_lost_text_is_cut),
        T(test_status_json),
        T(test_status_page),
        T(test_status_progress),
        cmocka_unit_test(test_key_layout),
        cmocka_unit_test(test_progress_codec),
        cmocka_unit_test(test_wire_join_req),
        cmocka_unit_test(test_wire_bad_requests),
        cmocka_unit_test(test_wire_fail_status_req),
        cmocka_unit_test(test_wire_replies),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
