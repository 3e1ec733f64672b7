/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the round machine (rendezvous/round/): rounds closing on last call and at max,
 * rank assignment and its stability, restarts (FAIL, max_restarts, the crash loop's back-off),
 * ABORT, the counts a node carries past a store that forgot the run, the registry bound, a
 * 1,000-member round, and an empty run's memory. The fixture is rdzv_round_fixture.h. */
#include <errno.h>
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

#include "rdzv_round_fixture.h"

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
    /* ... and the host's record, for a store that keeps it outside itself. */
    const rdzv_action_t *h = find_act(&f->out, RDZV_ACT_HOST_RECORD, 0);
    assert_non_null(h);
    assert_string_equal(h->run_id, "job");
    assert_string_equal(h->host, "h1");
    assert_int_equal(h->failures, 1);
    assert_int_equal(h->excluded, 0);
    assert_string_equal(h->text, "round 0: rank 1 exited with code 1");
    assert_int_equal(f->out.n, 2);
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

/* ---- the registry ---- */

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
        T(test_member_joins_again),
        T(test_many_lost_text_is_cut),
        T(test_fail_ends_round_and_counts),
        T(test_max_restarts_spent),
        T(test_abort_between_rounds),
        T(test_abort_running_and_refusals),
        T(test_restart_count_survives_reconnect),
        T(test_carried_round_and_restarts),
        T(test_empty_run_frees_arrays),
        T(test_restart_backoff),
        cmocka_unit_test(test_registry_bound),
        T(test_thousand_members),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
