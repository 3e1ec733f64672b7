/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the round machine's phase x event table (rendezvous/round/rdzv_round_table.c):
 * every phase x event cell is fed to rdzv__run_event with a run in that phase, made through the
 * commands, and its effects are compared with what its action must do: the return code, the
 * phase after it (which must also be one the table's cell names), the actions for the server
 * (REPLY_OK, REPLY_ERR with its code, END_ROUND, CLOSE) and the one record the action changes;
 * a cell that ignores or refuses its event must leave the run as it was.
 *
 * The run: "job", min 2, max 3, keep-alive bound 300 ms, join_timeout 10 s. Members 1, 2, 3
 * (hosts h1..h3) form round 0 at once (max), member 4 (h4) waits as a spare. Each event is
 * member 1's, or a new connection's (9, a JOIN from h9; 77, an UNFIT for h2). */
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
#include "rdzv_run.h"

/* The run in phase p (see the head comment), its actions list empty. */
static rdzv_run_t *run_in(fx_t *f, rdzv_run_state_t p) {
    for (uint64_t id = 1; id <= 4; id++)
        join_ok(f->rs, "job", id, -1, 2, 3, 0, &f->out);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    rdzv_fail_reply_t rep;
    switch (p) {
    case RDZV_RUN_JOINING:
    case RDZV_RUN_LAST_CALL:
        /* Round 0 fails: round 1 collects the spare; the others are IDLE. */
        assert_int_equal(rdzv_runs_fail(f->rs, "job", 3, 0, "boom", 10, &f->out, &rep), 0);
        if (p == RDZV_RUN_LAST_CALL) /* member 1 comes back: 2 of min 2 */
            join_ok(f->rs, "job", 1, -1, 2, 3, 20, &f->out);
        break;
    case RDZV_RUN_FAILED:
    case RDZV_RUN_DONE:
        /* The spare is answered at its bound (the members stay alive), then the run ends. */
        for (uint64_t id = 1; id <= 3; id++)
            assert_int_equal(rdzv_runs_heartbeat(f->rs, "job", id, 250, NULL, NULL), 0);
        assert_int_equal(rdzv_runs_tick(f->rs, 300, &f->out), 0);
        assert_non_null(find_act(&f->out, RDZV_ACT_REPLY_ERR, 4));
        if (p == RDZV_RUN_FAILED)
            assert_int_equal(rdzv_runs_abort(f->rs, "job", 1, "stop", 310, &f->out), 0);
        else
            assert_int_equal(rdzv_runs_finish(f->rs, "job", 1, 0, 310, &f->out), 0);
        break;
    default: break;
    }
    rdzv_actions_reset(&f->out);
    rdzv_run_t *r = rdzv__run_find(f->rs, "job");
    assert_non_null(r);
    assert_int_equal(r->state, p);
    return r;
}

/* What a cell must have done besides its actions. */
typedef enum {
    X_NONE = 0,
    X_UNCHANGED, /* the run as it was (ignored, or refused) */
    X_JOINED,    /* member 9 joins */
    X_SEEN,      /* member 1 seen at the event's time */
    X_IGNORED,   /* FAIL's reply: ignored, the run as it was */
    X_COUNTED,   /* FAIL's reply: counted, a restart spent */
    X_UNFIT,     /* h2's record says unfit */
    X_GONE1,     /* member 1 dropped */
    X_GONE4,     /* member 4 dropped (no JOIN to answer) */
} extra_t;

typedef struct cell {
    int rc;
    rdzv_run_state_t next;
    int ok, err, end, close; /* actions of each kind */
    int code;                /* the REPLY_ERRs' code */
    extra_t x;
} cell_t;

static const char *const phase_names[RDZV_RUN_NPHASES] = {"JOINING", "LAST_CALL", "RUNNING",
                                                          "FAILED", "DONE"};
static const char *const event_names[RDZV_NEVENTS] = {
    "JOIN",  "HEARTBEAT",  "FAIL",      "ABORT",      "UNFIT", "FINISH",
    "LEAVE", "JOIN_BOUND", "LAST_CALL", "LIVE_CHECK", "TIMING"};

#define P(n) RDZV_RUN_##n
#define SAME(n)                                                                                    \
    { 0, P(n), 0, 0, 0, 0, 0, X_UNCHANGED }
#define NOT_NOW(n)                                                                                 \
    { -ENOENT, P(n), 0, 0, 0, 0, 0, X_UNCHANGED }

/* clang-format off */
static const cell_t expected[RDZV_RUN_NPHASES][RDZV_NEVENTS] = {
    [RDZV_RUN_JOINING] = {
        [RDZV_EV_JOIN] =       {0, P(LAST_CALL), 0, 0, 0, 0, 0, X_JOINED}, /* 2 of min 2 */
        [RDZV_EV_HEARTBEAT] =  {0, P(JOINING), 0, 0, 0, 0, 0, X_SEEN},
        [RDZV_EV_FAIL] =       {0, P(JOINING), 0, 0, 0, 0, 0, X_IGNORED},
        [RDZV_EV_ABORT] =      {0, P(FAILED), 0, 1, 0, 0, DDP_ERDZV_CLOSED, X_NONE},
        [RDZV_EV_UNFIT] =      {0, P(JOINING), 0, 0, 0, 0, 0, X_UNFIT},
        [RDZV_EV_FINISH] =     NOT_NOW(JOINING),
        [RDZV_EV_LEAVE] =      {0, P(JOINING), 0, 0, 0, 0, 0, X_GONE1},
        [RDZV_EV_JOIN_BOUND] = {0, P(JOINING), 0, 1, 0, 0, DDP_ETIMEOUT, X_NONE},
        [RDZV_EV_LAST_CALL] =  SAME(JOINING),
        [RDZV_EV_LIVE_CHECK] = SAME(JOINING),
        [RDZV_EV_TIMING] =     NOT_NOW(JOINING),
    },
    [RDZV_RUN_LAST_CALL] = {
        /* 3 at max, but two members of round 0 may come back: the last call waits for them. */
        [RDZV_EV_JOIN] =       {0, P(LAST_CALL), 0, 0, 0, 0, 0, X_JOINED},
        [RDZV_EV_HEARTBEAT] =  {0, P(LAST_CALL), 0, 0, 0, 0, 0, X_SEEN},
        [RDZV_EV_FAIL] =       {0, P(LAST_CALL), 0, 0, 0, 0, 0, X_IGNORED},
        [RDZV_EV_ABORT] =      {0, P(FAILED), 0, 2, 0, 0, DDP_ERDZV_CLOSED, X_NONE},
        [RDZV_EV_UNFIT] =      {0, P(LAST_CALL), 0, 0, 0, 0, 0, X_UNFIT},
        [RDZV_EV_FINISH] =     NOT_NOW(LAST_CALL),
        [RDZV_EV_LEAVE] =      {0, P(JOINING), 0, 0, 0, 0, 0, X_GONE1}, /* 1 of min 2 */
        [RDZV_EV_JOIN_BOUND] = SAME(LAST_CALL),
        [RDZV_EV_LAST_CALL] =  {0, P(RUNNING), 2, 0, 0, 0, 0, X_NONE},
        [RDZV_EV_LIVE_CHECK] = SAME(LAST_CALL),
        [RDZV_EV_TIMING] =     NOT_NOW(LAST_CALL),
    },
    [RDZV_RUN_RUNNING] = {
        [RDZV_EV_JOIN] =       {0, P(RUNNING), 0, 0, 0, 0, 0, X_JOINED}, /* a spare */
        [RDZV_EV_HEARTBEAT] =  {0, P(RUNNING), 0, 0, 0, 0, 0, X_SEEN},
        [RDZV_EV_FAIL] =       {0, P(JOINING), 0, 0, 1, 0, 0, X_COUNTED},
        [RDZV_EV_ABORT] =      {0, P(FAILED), 0, 1, 1, 0, DDP_ERDZV_CLOSED, X_NONE},
        [RDZV_EV_UNFIT] =      {-EPERM, P(RUNNING), 0, 0, 0, 0, 0, X_UNCHANGED},
        [RDZV_EV_FINISH] =     {0, P(DONE), 0, 1, 0, 0, DDP_ERDZV_DONE, X_NONE},
        [RDZV_EV_LEAVE] =      {0, P(JOINING), 0, 0, 1, 0, 0, X_GONE1},
        [RDZV_EV_JOIN_BOUND] = {0, P(RUNNING), 0, 1, 0, 0, DDP_ERDZV_SPARE, X_NONE},
        [RDZV_EV_LAST_CALL] =  SAME(RUNNING),
        [RDZV_EV_LIVE_CHECK] = {0, P(JOINING), 0, 0, 1, 3, 0, X_NONE},
        [RDZV_EV_TIMING] =     SAME(RUNNING), /* added; the window is still open */
    },
    [RDZV_RUN_FAILED] = {
        [RDZV_EV_JOIN] =       {DDP_ERDZV_CLOSED, P(FAILED), 0, 0, 0, 0, 0, X_UNCHANGED},
        [RDZV_EV_HEARTBEAT] =  {0, P(FAILED), 0, 0, 0, 0, 0, X_SEEN},
        [RDZV_EV_FAIL] =       {0, P(FAILED), 0, 0, 0, 0, 0, X_IGNORED},
        [RDZV_EV_ABORT] =      NOT_NOW(FAILED),
        [RDZV_EV_UNFIT] =      {0, P(FAILED), 0, 0, 0, 0, 0, X_UNFIT},
        [RDZV_EV_FINISH] =     NOT_NOW(FAILED),
        [RDZV_EV_LEAVE] =      {0, P(FAILED), 0, 0, 0, 0, 0, X_GONE1},
        [RDZV_EV_JOIN_BOUND] = {0, P(FAILED), 0, 0, 0, 0, 0, X_GONE4},
        [RDZV_EV_LAST_CALL] =  SAME(FAILED),
        [RDZV_EV_LIVE_CHECK] = SAME(FAILED),
        [RDZV_EV_TIMING] =     NOT_NOW(FAILED),
    },
    [RDZV_RUN_DONE] = {
        [RDZV_EV_JOIN] =       {DDP_ERDZV_REUSED, P(DONE), 0, 0, 0, 0, 0, X_UNCHANGED},
        [RDZV_EV_HEARTBEAT] =  {0, P(DONE), 0, 0, 0, 0, 0, X_SEEN},
        [RDZV_EV_FAIL] =       {0, P(DONE), 0, 0, 0, 0, 0, X_IGNORED},
        [RDZV_EV_ABORT] =      NOT_NOW(DONE),
        [RDZV_EV_UNFIT] =      {0, P(DONE), 0, 0, 0, 0, 0, X_UNFIT},
        [RDZV_EV_FINISH] =     NOT_NOW(DONE),
        [RDZV_EV_LEAVE] =      {0, P(DONE), 0, 0, 0, 0, 0, X_GONE1},
        [RDZV_EV_JOIN_BOUND] = {0, P(DONE), 0, 0, 0, 0, 0, X_GONE4},
        [RDZV_EV_LAST_CALL] =  SAME(DONE),
        [RDZV_EV_LIVE_CHECK] = SAME(DONE),
        [RDZV_EV_TIMING] =     NOT_NOW(DONE),
    },
};
/* clang-format on */

/* What "the run as it was" compares. */
typedef struct snap {
    int state;
    int64_t round, restarts_used;
    size_t njoin, nanswered, ngroup, nmembers, nhosts, nidle;
} snap_t;

static snap_t snap_of(const rdzv_run_t *r) {
    snap_t s = {(int)r->state, r->round,    r->restarts_used, r->njoin, r->nanswered,
                r->ngroup,     r->nmembers, r->nhosts,        r->nidle};
    return s;
}

/* Feeds event ev, the way its entry point would, to run r of f. */
static int feed(fx_t *f, rdzv_run_t *r, rdzv_run_event_t ev, rdzv_fail_reply_t *rep,
                ddp_err_t *err) {
    static rdzv_join_req_t q;
    q = req("job", "h9", -1, 2, 29509, 2, 3);
    rdzv_event_t e = {.kind = ev, .now_ms = 400, .out = &f->out};
    switch (ev) {
    case RDZV_EV_JOIN:
        e.conn = 9;
        e.req = &q;
        e.cfg = &q.cfg;
        e.err = err;
        break;
    case RDZV_EV_UNFIT: /* from connection 77, no member */
        e.host = "h2";
        e.text = "gpu 3 unhealthy";
        break;
    case RDZV_EV_JOIN_BOUND:
    case RDZV_EV_LIVE_CHECK: e.now_ms = 20000; break;
    case RDZV_EV_LAST_CALL: e.now_ms = 5000; break;
    case RDZV_EV_TIMING: {
        static char log[256];
        e.m = rdzv__member_find(f->rs, 1);
        assert_non_null(e.m);
        e.round = r->round;
        e.text = "w=1000 t=1200 n=3 a=exclude 0:5000:100:5 1:5100:90:5";
        e.log = log;
        e.log_cap = sizeof log;
        break;
    }
    default:
        e.m = rdzv__member_find(f->rs, 1);
        assert_non_null(e.m);
        e.round = r->round;
        e.text = "boom";
        e.rep = rep;
        break;
    }
    if (ev == RDZV_EV_HEARTBEAT)
        e.now_ms = 5000;
    memset(rep, 0, sizeof *rep);
    rep->status = RDZV_FAIL_IGNORED;
    return rdzv__run_event(f->rs, r, &e);
}

/* Checks the extra effect x of the cell just fed (run r, before: was). */
static void check_extra(fx_t *f, const char *cell, extra_t x, const rdzv_run_t *r, snap_t was,
                        const rdzv_fail_reply_t *rep) {
    snap_t now = snap_of(r);
    const rdzv_member_t *m1 = rdzv__member_find(f->rs, 1);
    switch (x) {
    case X_UNCHANGED:
    case X_IGNORED:
        if (memcmp(&now, &was, sizeof now) != 0)
            fail_msg("%s: the run changed", cell);
        if (x == X_IGNORED && rep->status != RDZV_FAIL_IGNORED)
            fail_msg("%s: FAIL not ignored", cell);
        break;
    case X_JOINED: {
        const rdzv_member_t *m = rdzv__member_find(f->rs, 9);
        if (m == NULL || m->state != MEMBER_JOINING || now.nmembers != was.nmembers + 1)
            fail_msg("%s: member 9 not joining", cell);
        break;
    }
    case X_SEEN:
        if (m1 == NULL || m1->last_seen_ms != 5000)
            fail_msg("%s: member 1 not refreshed", cell);
        break;
    case X_COUNTED:
        if (rep->status != RDZV_FAIL_COUNTED || now.restarts_used != was.restarts_used + 1)
            fail_msg("%s: FAIL not counted", cell);
        break;
    case X_UNFIT: {
        const rdzv_host_rec_t *h = rdzv__host_find(r, "h2");
        if (h == NULL || !h->unfit || strcmp(h->unfit_reason, "gpu 3 unhealthy") != 0)
            fail_msg("%s: h2 not unfit", cell);
        break;
    }
    case X_GONE1:
        if (m1 != NULL || now.nmembers != was.nmembers - 1)
            fail_msg("%s: member 1 not dropped", cell);
        break;
    case X_GONE4:
        if (rdzv__member_find(f->rs, 4) != NULL || now.nmembers != was.nmembers - 1)
            fail_msg("%s: member 4 not dropped", cell);
        break;
    default: break;
    }
}

static void test_every_cell(void **state) {
    fx_t *f = *state;
    for (int p = 0; p < RDZV_RUN_NPHASES; p++) {
        for (int ev = 0; ev < RDZV_NEVENTS; ev++) {
            rdzv_runs_free(f->rs);
            f->rs = rdzv_runs_new(NULL);
            assert_non_null(f->rs);
            rdzv_run_t *r = run_in(f, (rdzv_run_state_t)p);
            const cell_t *want = &expected[p][ev];
            const rdzv_cell_t *c = rdzv__run_cell((rdzv_run_state_t)p, (rdzv_run_event_t)ev);
            char cell[64];
            snprintf(cell, sizeof cell, "%s + %s", phase_names[p], event_names[ev]);
            if (c->action == NULL)
                fail_msg("%s: no action", cell);
            snap_t was = snap_of(r);
            rdzv_fail_reply_t rep;
            ddp_err_t err = {0};
            int rc = feed(f, r, (rdzv_run_event_t)ev, &rep, &err);
            if (rc != want->rc)
                fail_msg("%s: returned %d, want %d", cell, rc, want->rc);
            if ((int)r->state != (int)want->next)
                fail_msg("%s: phase %s, want %s", cell, phase_names[r->state],
                         phase_names[want->next]);
            if ((c->next & RDZV_PHASE(r->state)) == 0)
                fail_msg("%s: phase %s is not one the table names", cell, phase_names[r->state]);
            int ok = (int)count_kind(&f->out, RDZV_ACT_REPLY_OK);
            int nerr = (int)count_kind(&f->out, RDZV_ACT_REPLY_ERR);
            int end = (int)count_kind(&f->out, RDZV_ACT_END_ROUND);
            int close = (int)count_kind(&f->out, RDZV_ACT_CLOSE);
            if (ok != want->ok || nerr != want->err || end != want->end || close != want->close)
                fail_msg("%s: REPLY_OK %d/%d REPLY_ERR %d/%d END_ROUND %d/%d CLOSE %d/%d", cell, ok,
                         want->ok, nerr, want->err, end, want->end, close, want->close);
            for (size_t i = 0; i < f->out.n; i++)
                if (f->out.v[i].kind == RDZV_ACT_REPLY_ERR && f->out.v[i].code != want->code)
                    fail_msg("%s: REPLY_ERR code %d, want %d", cell, f->out.v[i].code, want->code);
            if (ev == RDZV_EV_JOIN && want->rc != 0 && err.text[0] == '\0')
                fail_msg("%s: a refused JOIN without its reason", cell);
            check_extra(f, cell, want->x, r, was, &rep);
            rdzv_actions_reset(&f->out);
        }
    }
}

/* The cells whose action depends on who sends the event: RUNNING + JOIN from a member of the
 * group (the round ends: it joined again) and from a new node while the group has room
 * (scale-up), and from a node while the group is at max (a spare, as test_every_cell feeds it);
 * RUNNING + LEAVE of a spare (dropped, the round goes on); RUNNING + FAIL on another round
 * (ignored); RUNNING + UNFIT from a member for its own host (recorded) and for another (refused);
 * RUNNING + FINISH on another round (-ENOENT). */
static void test_running_cells_by_sender(void **state) {
    fx_t *f = *state;
    rdzv_run_t *r = run_in(f, RDZV_RUN_RUNNING);
    ddp_err_t err = {0};
    rdzv_fail_reply_t rep;
    assert_int_equal(rdzv_runs_fail(f->rs, "job", 1, 7, "old", 400, &f->out, &rep), 0);
    assert_int_equal(rep.status, RDZV_FAIL_IGNORED);
    assert_int_equal(rdzv_runs_finish(f->rs, "job", 1, 7, 400, &f->out), -ENOENT);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 1, "h2", "no", 400), -EPERM);
    assert_int_equal(rdzv_runs_unfit(f->rs, "job", 1, "h1", "ecc", 400), 0);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(r->state, RDZV_RUN_RUNNING);

    rdzv_join_req_t q = req("job", "h2", -1, 2, 29502, 2, 3);
    assert_int_equal(rdzv_runs_join(f->rs, 2, &q, 500, &f->out, &err), 0);
    const rdzv_action_t *a = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(a);
    assert_non_null(strstr(a->text, "joined again"));
    assert_int_equal(r->round, 1);

    /* Round 1 of 1, 2, 3 (4 is a spare again at max); 3 leaves, then a new node scales up. */
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 1, -1, 2, 3, 600, &f->out);
    join_ok(f->rs, "job", 3, -1, 2, 3, 600, &f->out);
    assert_int_equal(r->state, RDZV_RUN_RUNNING);
    assert_int_equal(r->ngroup, 3);
    rdzv_actions_reset(&f->out);
    assert_int_equal(rdzv_runs_leave(f->rs, 4, 700, &f->out), 0); /* a spare: dropped */
    assert_int_equal(f->out.n, 0);
    assert_int_equal(r->state, RDZV_RUN_RUNNING);
    assert_int_equal(rdzv_runs_leave(f->rs, 3, 700, &f->out), 0);
    assert_int_equal(r->state, RDZV_RUN_JOINING);
    join_ok(f->rs, "job", 1, -1, 2, 3, 700, &f->out);
    join_ok(f->rs, "job", 2, -1, 2, 3, 700, &f->out);
    assert_int_equal(r->state, RDZV_RUN_LAST_CALL); /* 2 of max 3 */
    assert_int_equal(rdzv_runs_tick(f->rs, 1700, &f->out), 0);
    assert_int_equal(r->state, RDZV_RUN_RUNNING);
    assert_int_equal(r->ngroup, 2);
    rdzv_actions_reset(&f->out);
    join_ok(f->rs, "job", 9, -1, 2, 3, 1800, &f->out);
    a = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(a);
    assert_non_null(strstr(a->text, "scale-up"));
}

/* The deadlines as rdzv_runs_tick feeds them: only those that passed, in the table's order. A
 * last call that closes the round leaves the new round's silence check a keep-alive bound
 * away. */
static void test_tick_feeds_deadlines(void **state) {
    fx_t *f = *state;
    rdzv_run_t *r = run_in(f, RDZV_RUN_LAST_CALL);
    assert_int_equal(rdzv_runs_tick(f->rs, r->last_call_ms - 1, &f->out), 0);
    assert_int_equal(f->out.n, 0);
    assert_int_equal(r->state, RDZV_RUN_LAST_CALL);
    uint64_t t = r->last_call_ms;
    assert_int_equal(rdzv_runs_tick(f->rs, t, &f->out), 0);
    assert_int_equal(r->state, RDZV_RUN_RUNNING);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 2);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_CLOSE), 0);
    assert_int_equal(r->live_check_ms, t + 300);
    assert_int_equal(rdzv_runs_next_deadline(f->rs), t + 300);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_every_cell),
        T(test_running_cells_by_sender),
        T(test_tick_feeds_deadlines),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
