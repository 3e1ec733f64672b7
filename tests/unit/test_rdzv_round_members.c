/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the round machine's membership (rendezvous/round/): members leaving, heartbeats
 * and BEAT_FOR, silence, scale-up, joiners beyond max (spares: their keep-alive answers, their
 * place after the last round's members), join_timeout, refused joins, and FINISH (the spares
 * leave; a new node's JOIN to a finished run id is refused). The fixture is
 * rdzv_round_fixture.h. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_round_fixture.h"

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

/* ---- spares and the end of a run ---- */

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
    /* No JOIN parked to answer; the DONE mark, for a store that keeps it outside itself. */
    assert_int_equal(f->out.n, 1);
    assert_int_equal(f->out.v[0].kind, RDZV_ACT_RUN_DONE);
    assert_string_equal(f->out.v[0].run_id, "job");
    assert_int_equal(f->out.v[0].round, 0);
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

/* A store that takes over a run (elected through etcd) restores what the old one kept outside
 * itself before anyone joins: the DONE mark refuses a node of the run with DDP_ERDZV_DONE (its
 * JOIN carries a round) and a new one with DDP_ERDZV_REUSED; an excluded host's record refuses
 * its JOIN with DDP_ERDZV_EXCLUDED, and the run it made takes its configuration from the first
 * JOIN. Records out of range are refused with nothing changed. */
static void test_restore(void **state) {
    fx_t *f = *state;
    ddp_err_t err = {0};
    assert_int_equal(rdzv_runs_restore_done(f->rs, "job", 3, 100, &err), 0);
    assert_int_equal(rdzv_runs_count(f->rs), 1);
    rdzv_join_req_t q = req("job", "h1", -1, 2, 29501, 2, 2);
    q.min_round = 4; /* told round 3 by the old store */
    assert_int_equal(rdzv_runs_join(f->rs, 1, &q, 110, &f->out, &err), DDP_ERDZV_DONE);
    assert_string_equal(err.text, "rendezvous 'job' finished: round 3 passed its exit barrier");
    q.min_round = 0;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 120, &f->out, &err), DDP_ERDZV_REUSED);
    assert_int_equal(f->out.n, 0);

    assert_int_equal(rdzv_runs_restore_host(f->rs, "q", "h3", 2, 1,
                                            "round 1: rank 0 exited "
                                            "with code 1",
                                            100, &err),
                     0);
    assert_int_equal(rdzv_runs_restore_host(f->rs, "q", "h4", 1, 0, NULL, 100, &err), 0);
    rdzv_join_req_t j3 = req("q", "h3", -1, 2, 29503, 1, 3);
    j3.cfg.max_node_failures = 2;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_join(f->rs, 3, &j3, 130, &f->out, &err), DDP_ERDZV_EXCLUDED);
    assert_non_null(strstr(err.text, "host h3 is excluded after 2 group failures"));
    assert_non_null(strstr(err.text, "round 1: rank 0 exited with code 1"));
    rdzv_join_req_t j4 = req("q", "h4", -1, 2, 29504, 1, 3);
    j4.cfg.max_node_failures = 2;
    assert_int_equal(rdzv_runs_join(f->rs, 4, &j4, 140, &f->out, &err), 0);
    rdzv_join_req_t j5 = req("q", "h5", -1, 2, 29505, 2, 3); /* other nnodes than the first */
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_join(f->rs, 5, &j5, 150, &f->out, &err), DDP_EUSAGE);
    /* h4's failure restored is counted on: its next one reaches the bound. */
    assert_int_equal(rdzv_runs_tick(f->rs, 1200, &f->out), 0);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 1);
    rdzv_actions_reset(&f->out);
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "q", 4, 0, "boom", 1300, &f->out, &rep), 0);
    const rdzv_action_t *h = find_act(&f->out, RDZV_ACT_HOST_RECORD, 0);
    assert_non_null(h);
    assert_string_equal(h->host, "h4");
    assert_int_equal(h->failures, 2);

    size_t runs = rdzv_runs_count(f->rs);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_runs_restore_host(f->rs, "r", "", 1, 1, NULL, 100, &err), DDP_EUSAGE);
    assert_int_equal(rdzv_runs_restore_host(f->rs, "r", "h", -1, 1, NULL, 100, &err), DDP_EUSAGE);
    assert_int_equal(rdzv_runs_restore_done(f->rs, "", 1, 100, &err), DDP_EUSAGE);
    assert_int_equal(rdzv_runs_restore_done(f->rs, "r", -1, 100, &err), DDP_EUSAGE);
    assert_int_equal(rdzv_runs_count(f->rs), runs);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_leave_running_ends_round),
        T(test_leave_joiner_drops),
        T(test_beat_for),
        T(test_heartbeat_silence),
        T(test_heartbeat_deadline_lazy),
        T(test_scale_up),
        T(test_running_at_max_waits),
        T(test_spare_keep_alive),
        T(test_join_timeout_names_lost),
        T(test_config_mismatch_and_refusals),
        T(test_finish_releases_spares),
        T(test_last_round_before_spares),
        T(test_spare_answered_counts),
        T(test_finished_run_id_reused),
        T(test_restore),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
