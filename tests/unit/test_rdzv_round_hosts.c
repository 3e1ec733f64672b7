/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of what a run keeps per host and shows (rendezvous/round/rdzv_round_hosts.c,
 * rdzv_round_status.c): max_node_failures excluding a host (or keeping it at min), UNFIT reports
 * and who may send them, and the STATUS and STATUS_PAGE JSON with the members' progress. The
 * fixture is rdzv_round_fixture.h. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_round_fixture.h"

/* ---- hosts ---- */

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

/* ---- status ---- */

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

/* A progress table for STATUS: group ranks 0 and 2 reported round 0 with their goodput, rank 1
 * an older round, rank 3 round 0 without goodput (an agent whose workers have not beaten). */
static int fake_progress(void *ctx, const char *run_id, int64_t group_rank, rdzv_progress_t *p) {
    (void)ctx;
    assert_string_equal(run_id, "job");
    switch (group_rank) {
    case 0:
        *p = (rdzv_progress_t){.round = 0,
                               .step = 42,
                               .beat_age_ms = 300,
                               .has_goodput = 1,
                               .wall_ms = 10000,
                               .productive_ms = 9000,
                               .lost_ms = 500,
                               .restarts = 2};
        return 0;
    case 1:
        *p = (rdzv_progress_t){.round = 7,
                               .step = 9,
                               .beat_age_ms = 1,
                               .has_goodput = 1,
                               .wall_ms = 99000,
                               .productive_ms = 1000,
                               .lost_ms = 9000,
                               .restarts = 9};
        return 0;
    case 2:
        *p = (rdzv_progress_t){.round = 0,
                               .step = 40,
                               .beat_age_ms = 20,
                               .has_goodput = 1,
                               .wall_ms = 20000,
                               .productive_ms = 15000,
                               .lost_ms = 3000,
                               .restarts = 1};
        return 0;
    case 3: *p = (rdzv_progress_t){.round = 0, .step = -1, .beat_age_ms = 5}; return 0;
    default: return -ENOENT;
    }
}

/* The goodput object o has these fields (ratio within 1e-9). */
static void goodput_is(const json_t *o, double ratio, json_int_t wall, json_int_t productive,
                       json_int_t lost, json_int_t restarts) {
    assert_true(json_is_object(o));
    assert_true(fabs(json_real_value(json_object_get(o, "ratio")) - ratio) < 1e-9);
    assert_int_equal(json_integer_value(json_object_get(o, "wall_ms")), wall);
    assert_int_equal(json_integer_value(json_object_get(o, "productive_ms")), productive);
    assert_int_equal(json_integer_value(json_object_get(o, "lost_ms")), lost);
    assert_int_equal(json_integer_value(json_object_get(o, "restarts")), restarts);
}

static void test_status_progress(void **state) {
    fx_t *f = *state;
    form(f, 4, 4, 4, 0);
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
        json_t *gp = json_object_get(m, "goodput");
        if (gr == 0) {
            assert_int_equal(json_integer_value(json_object_get(m, "step")), 42);
            /* the age at the report plus the time since the keep-alive it went out with */
            assert_int_equal(json_integer_value(json_object_get(m, "beat_age_ms")), 300 + silent);
            goodput_is(gp, 0.9, 10000, 9000, 500, 2);
        } else if (gr == 1) {
            assert_null(json_object_get(m, "step")); /* a report of another round is stale */
            assert_null(json_object_get(m, "beat_age_ms"));
            assert_null(gp);
        } else if (gr == 2) {
            goodput_is(gp, 0.75, 20000, 15000, 3000, 1);
        } else {
            /* a three-field report: its age, no step yet, no goodput */
            assert_null(json_object_get(m, "step"));
            assert_int_equal(json_integer_value(json_object_get(m, "beat_age_ms")), 5 + silent);
            assert_null(gp);
        }
        seen++;
    }
    assert_int_equal(seen, 4);
    /* The job's: ranks 0 and 2 (the stale report and the one without goodput left out), their
     * sums, the most restarts of one. */
    json_t *job = json_object_get(o, "goodput");
    goodput_is(job, 24000.0 / 30000.0, 30000, 24000, 3500, 2);
    assert_int_equal(json_integer_value(json_object_get(job, "nodes")), 2);
    json_decref(o);
    /* A first page of one member still gives the job's goodput over all of them; the counts
     * alone (limit 0) and a later page give none. */
    static const size_t pages[][2] = {{0, 0}, {0, 1}, {1, 1}};
    for (size_t k = 0; k < sizeof pages / sizeof pages[0]; k++) {
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_runs_status_page_json(f->rs, "job", 1600, fake_progress, NULL,
                                                    pages[k][0], pages[k][1], &b, NULL),
                         0);
        o = json_loadb((const char *)b.data, b.len, 0, NULL);
        assert_non_null(o);
        assert_int_equal(json_array_size(json_object_get(o, "members")), pages[k][1]);
        job = json_object_get(o, "goodput");
        if (k == 1)
            goodput_is(job, 0.8, 30000, 24000, 3500, 2);
        else
            assert_null(job);
        json_decref(o);
    }
    /* No member reports goodput: no job figure. */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_runs_status_json(f->rs, "job", 1600, NULL, NULL, &b, NULL), 0);
    o = json_loadb((const char *)b.data, b.len, 0, NULL);
    assert_null(json_object_get(o, "goodput"));
    json_decref(o);
    ddp_buf_free(&b);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_node_failures_exclude_host),
        T(test_node_failures_kept_at_min),
        T(test_unfit_reports),
        T(test_unfit_and_abort_speak_for_themselves),
        T(test_status_json),
        T(test_status_page),
        T(test_status_progress),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
