/* SPDX-License-Identifier: Apache-2.0
 * Typed rendezvous calls (rdzv_round_calls.h) against the embedded store server on one libuv loop,
 * as the agent makes them: a JOIN that closes a one-node round, then HEARTBEAT, BEAT_FOR (right and
 * wrong key), STATUS, FAIL, ABORT and UNFIT, each answered with its decoded reply; a request that
 * cannot be encoded; a reply to another command (a scripted server); a parked JOIN cancelled by
 * closing the connection; the exit barrier's calls between two nodes (arrive, release, wait; a
 * seal before and after the last arrival; a wait that runs out; a round no key can name); a store
 * whose may_serve check says no refuses a JOIN (DDP_ECLOSED) and serves it once it says yes, or
 * says "not yet" on a connection that stays open, or names the store that serves (a redirect);
 * the durable hooks (DONE, a host's record) and
 * restored records. */
#include <errno.h>

#include "async_client_fixture.h"
#include "rdzv_round_calls.h"

/* What an rdzv_acall_cb saw (its reply is borrowed, so it is copied here). */
typedef struct call_res {
    int called, status;
    int had_rep;
    rdzv_round_reply_t rep; /* text not kept: see text */
    char text[1024];        /* rep->text, or errtext */
} call_res_t;

static void call_cb(void *arg, int status, const rdzv_round_reply_t *rep, const char *errtext) {
    call_res_t *r = arg;
    r->called++;
    r->status = status;
    r->had_rep = rep != NULL;
    if (rep != NULL) {
        r->rep = *rep;
        r->rep.text = (ddp_buf_t)DDP_BUF_INIT;
        snprintf(r->text, sizeof r->text, "%.*s", (int)rep->text.len,
                 rep->text.data ? (const char *)rep->text.data : "");
    } else {
        snprintf(r->text, sizeof r->text, "%s", errtext ? errtext : "");
    }
    if (status < 0) {
        assert_null(rep);
        assert_non_null(errtext);
    } else {
        assert_non_null(rep);
    }
}

static rdzv_join_req_t join_req(const char *run_id, int min_nodes) {
    rdzv_join_req_t q;
    memset(&q, 0, sizeof q);
    snprintf(q.run_id, sizeof q.run_id, "%s", run_id);
    snprintf(q.host, sizeof q.host, "127.0.0.1");
    q.want_node_rank = -1;
    q.nproc = 2;
    q.master_port = 29500;
    q.cfg.min_nodes = min_nodes;
    q.cfg.max_nodes = min_nodes;
    q.cfg.last_call_timeout_ms = 100;
    q.cfg.join_timeout_ms = 5000;
    q.cfg.keep_alive_interval_ms = 1000;
    q.cfg.keep_alive_max_attempt = 3;
    q.cfg.max_restarts = 1;
    return q;
}

TEST(test_round_calls) {
    rdzv_aclient_t *c = e->c;
    call_res_t j = {0};
    rdzv_join_req_t q = join_req("acall", 1);
    assert_int_equal(rdzv_acall_join(c, &q, 5000, call_cb, &j, NULL), 0);
    run_until(e, &j.called);
    assert_int_equal(j.status, 0);
    assert_int_equal(j.rep.cmd, RDZV_CMD_RDZV_JOIN);
    assert_int_equal(j.rep.status, 0);
    assert_int_equal(j.rep.join.group_rank, 0);
    assert_int_equal(j.rep.join.group_world_size, 1);
    assert_int_equal(j.rep.join.world_size, 2);
    assert_int_equal(j.rep.join.master_port, 29500);
    assert_true(j.rep.join.member > 0);

    /* Pipelined on one connection, answered in order, each decoded as its own command's. */
    call_res_t hb = {0}, mine = {0}, other = {0}, st = {0};
    assert_int_equal(rdzv_acall_heartbeat(c, "acall", call_cb, &hb, NULL), 0);
    assert_int_equal(rdzv_acall_beat_for(c, "acall", j.rep.join.member, j.rep.join.member_key,
                                         call_cb, &mine, NULL),
                     0);
    assert_int_equal(rdzv_acall_beat_for(c, "acall", j.rep.join.member, j.rep.join.member_key + 1,
                                         call_cb, &other, NULL),
                     0);
    assert_int_equal(rdzv_acall_status(c, "acall", call_cb, &st, NULL), 0);
    run_until(e, &st.called);
    assert_int_equal(hb.status, 0);
    assert_int_equal(hb.rep.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(hb.rep.status, 0);
    assert_int_equal(hb.rep.round, j.rep.join.round);
    assert_int_equal(hb.rep.state, RDZV_RUN_RUNNING);
    assert_int_equal(mine.rep.cmd, RDZV_CMD_RDZV_BEAT_FOR);
    assert_int_equal(mine.rep.status, 0);
    assert_int_equal(other.rep.status, 1); /* a wrong key beats for nobody */
    assert_int_equal(st.rep.cmd, RDZV_CMD_RDZV_STATUS);
    assert_int_equal(st.rep.status, 0);
    assert_non_null(strstr(st.text, "\"members\""));

    /* FINISH for a round that is not the running one changes nothing. */
    call_res_t fin = {0};
    assert_int_equal(rdzv_acall_finish(c, "acall", j.rep.join.round + 1, call_cb, &fin, NULL), 0);
    run_until(e, &fin.called);
    assert_int_equal(fin.rep.cmd, RDZV_CMD_RDZV_FINISH);
    assert_int_equal(fin.rep.status, 1);

    call_res_t f = {0};
    assert_int_equal(
        rdzv_acall_fail(c, "acall", j.rep.join.round, "rank 1 exited with 3", call_cb, &f, NULL),
        0);
    run_until(e, &f.called);
    assert_int_equal(f.status, 0);
    assert_int_equal(f.rep.cmd, RDZV_CMD_RDZV_FAIL);
    assert_int_equal(f.rep.fail.status, RDZV_FAIL_COUNTED);
    assert_int_equal(f.rep.fail.restarts_used, 1);
    assert_int_equal(f.rep.fail.max_restarts, 1);

    call_res_t ab = {0}, again = {0};
    assert_int_equal(rdzv_acall_abort(c, "acall", "stopped by the test", call_cb, &ab, NULL), 0);
    assert_int_equal(rdzv_acall_abort(c, "acall", "once more", call_cb, &again, NULL), 0);
    run_until(e, &again.called);
    assert_int_equal(ab.rep.cmd, RDZV_CMD_RDZV_ABORT);
    assert_int_equal(ab.rep.status, 0);    /* the run stopped */
    assert_int_equal(again.rep.status, 1); /* it had stopped already */

    /* UNFIT: recorded for the run the store knows and the sender's own host, ignored for another
     * run or another host; STATUS shows it. */
    call_res_t un = {0}, unknown = {0}, elsewhere = {0}, st2 = {0};
    assert_int_equal(rdzv_acall_unfit(c, "acall", "127.0.0.1", "gpu 0: ECC", call_cb, &un, NULL),
                     0);
    assert_int_equal(rdzv_acall_unfit(c, "nope", "127.0.0.1", "x", call_cb, &unknown, NULL), 0);
    assert_int_equal(rdzv_acall_unfit(c, "acall", "127.0.0.9", "x", call_cb, &elsewhere, NULL), 0);
    assert_int_equal(rdzv_acall_status(c, "acall", call_cb, &st2, NULL), 0);
    run_until(e, &st2.called);
    assert_int_equal(un.rep.cmd, RDZV_CMD_RDZV_UNFIT);
    assert_int_equal(un.rep.status, 0);
    assert_int_equal(unknown.rep.status, 1);
    assert_int_equal(elsewhere.rep.status, 1);
    assert_non_null(strstr(st2.text, "\"reason\":\"gpu 0: ECC\""));
    assert_null(strstr(st2.text, "127.0.0.9"));
}

TEST(test_encode_refused) {
    call_res_t r = {0};
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_acall_heartbeat(e->c, "", call_cb, &r, &err), -EINVAL);
    assert_non_null(strstr(err.text, "RDZV_HEARTBEAT"));
    rdzv_join_req_t q = join_req("acall", 1);
    q.host[0] = '\0';
    ddp_err_clear(&err);
    assert_int_equal(rdzv_acall_join(e->c, &q, 1000, call_cb, &r, &err), -EINVAL);
    assert_non_null(strstr(err.text, "RDZV_JOIN"));
    uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_int_equal(r.called, 0);
}

TEST(test_reply_for_another_command) {
    fake_t f;
    e->port = fake_start(e, &f);
    assert_int_equal(rdzv_heartbeat_reply_encode(&f.round_reply, 1, 7, RDZV_RUN_RUNNING), 0);
    rdzv_aclient_t *c = client_up(e, NULL);
    call_res_t st = {0}, next = {0};
    assert_int_equal(rdzv_acall_status(c, "acall", call_cb, &st, NULL), 0);
    assert_int_equal(rdzv_acall_heartbeat(c, "acall", call_cb, &next, NULL), 0);
    run_until(e, &next.called);
    assert_int_equal(st.status, DDP_EPROTO);
    assert_string_equal(st.text, "a RDZV_HEARTBEAT reply came for RDZV_STATUS");
    /* The stream stays in step: the next call gets its own (scripted) reply. */
    assert_int_equal(next.status, 0);
    assert_int_equal(next.rep.round, 7);
    client_close(e, c);
    fake_stop(e, &f);
}

TEST(test_parked_join_cancelled) {
    rdzv_aclient_t *c = client_up(e, good_token);
    call_res_t j = {0};
    rdzv_join_req_t q = join_req("acall-two", 2); /* parks: the second node never comes */
    assert_int_equal(rdzv_acall_join(c, &q, 5000, call_cb, &j, NULL), 0);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    client_close(e, c);
    assert_int_equal(j.called, 1);
    assert_int_equal(j.status, DDP_ECANCELED);
    assert_false(j.had_rep);
}

/* What an exit barrier call saw. */
typedef struct bar_res {
    int called, status, seq;
    int had_count;
    rdzv_barrier_count_t count;
    char text[400];
} bar_res_t;

static void count_cb(void *arg, int status, const rdzv_barrier_count_t *count,
                     const char *errtext) {
    bar_res_t *r = arg;
    r->called++;
    r->status = status;
    r->seq = ++g_seq;
    r->had_count = count != NULL;
    if (count != NULL)
        r->count = *count;
    snprintf(r->text, sizeof r->text, "%s", errtext ? errtext : "");
    if (status < 0)
        assert_non_null(errtext);
    assert_true((status == 0) == (count != NULL));
}

static void done_cb(void *arg, int status, const char *errtext) {
    bar_res_t *r = arg;
    r->called++;
    r->status = status;
    r->seq = ++g_seq;
    snprintf(r->text, sizeof r->text, "%s", errtext ? errtext : "");
    if (status < 0)
        assert_non_null(errtext);
}

/* Two nodes of a two-node group: the first arrives and waits, the second arrives last and
 * releases it; a seal after the last arrival still reads a passed barrier. */
TEST(test_barrier_passes) {
    rdzv_aclient_t *b = client_up(e, good_token);
    bar_res_t a1 = {0}, aw = {0}, b1 = {0}, br = {0}, seal = {0};
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 3, count_cb, &a1, NULL), 0);
    run_until(e, &a1.called);
    assert_int_equal(a1.status, 0);
    assert_int_equal(a1.count.arrived, 1);
    assert_false(a1.count.sealed);
    assert_int_equal(rdzv_acall_barrier_wait(e->c, "bar", 3, 5000, done_cb, &aw, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_arrive(b, "bar", 3, count_cb, &b1, NULL), 0);
    run_until(e, &b1.called);
    assert_int_equal(b1.count.arrived, 2);
    assert_false(b1.count.sealed);
    assert_int_equal(aw.called, 0); /* parked until the last arrival releases it */
    assert_int_equal(rdzv_acall_barrier_release(b, "bar", 3, done_cb, &br, NULL), 0);
    run_until(e, &aw.called);
    assert_int_equal(aw.status, 0);
    run_until(e, &br.called);
    assert_int_equal(br.status, 0);
    assert_int_equal(rdzv_acall_barrier_seal(b, "bar", 3, count_cb, &seal, NULL), 0);
    run_until(e, &seal.called);
    assert_int_equal(seal.count.arrived, 2); /* every node had arrived: passed */
    assert_true(seal.count.sealed);
    client_close(e, b);
}

/* A seal before the last arrival: that arrival reads it (too late), and so does a later seal;
 * another round's counter is apart. */
TEST(test_barrier_sealed_first) {
    bar_res_t a1 = {0}, s1 = {0}, b1 = {0}, s2 = {0}, other = {0};
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 4, count_cb, &a1, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_seal(e->c, "bar", 4, count_cb, &s1, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 4, count_cb, &b1, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_seal(e->c, "bar", 4, count_cb, &s2, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 5, count_cb, &other, NULL), 0);
    run_until(e, &other.called);
    assert_int_equal(s1.count.arrived, 1);
    assert_true(s1.count.sealed);
    assert_int_equal(b1.count.arrived, 2);
    assert_true(b1.count.sealed);
    assert_int_equal(s2.count.arrived, 2);
    assert_true(s2.count.sealed);
    assert_int_equal(other.count.arrived, 1);
    assert_false(other.count.sealed);
    assert_true(a1.seq < s1.seq && s1.seq < b1.seq && b1.seq < s2.seq);
}

/* Nobody releases: the wait ends with DDP_ETIMEOUT and the connection goes on. */
TEST(test_barrier_wait_runs_out) {
    bar_res_t w = {0}, a = {0};
    assert_int_equal(rdzv_acall_barrier_wait(e->c, "bar", 6, 50, done_cb, &w, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 6, count_cb, &a, NULL), 0);
    run_until(e, &a.called);
    assert_int_equal(w.status, DDP_ETIMEOUT);
    assert_true(w.seq < a.seq);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.count.arrived, 1);
}

/* No key names a negative round or a run id over its bound: refused at once, no callback. */
TEST(test_barrier_key_refused) {
    bar_res_t r = {0};
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", -1, count_cb, &r, &err), -EINVAL);
    assert_non_null(strstr(err.text, "exit barrier"));
    char long_id[RDZV_RUN_ID_MAX + 2];
    memset(long_id, 'r', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    assert_int_equal(rdzv_acall_barrier_wait(e->c, long_id, 1, 10, done_cb, &r, NULL), -EINVAL);
    assert_int_equal(rdzv_acall_barrier_release(e->c, "bar", -2, done_cb, &r, NULL), -EINVAL);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_int_equal(r.called, 0);
}

/* The connection is lost under a parked wait and an arrival: both end with the loss. */
TEST(test_barrier_store_gone) {
    bar_res_t w = {0}, a = {0};
    assert_int_equal(rdzv_acall_barrier_wait(e->c, "bar", 7, 5000, done_cb, &w, NULL), 0);
    assert_int_equal(rdzv_acall_barrier_arrive(e->c, "bar", 7, count_cb, &a, NULL), 0);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    srv_stop(e);
    run_until(e, &a.called);
    assert_true(w.status < 0 && w.status != DDP_ETIMEOUT);
    assert_true(a.status < 0);
    assert_false(a.had_count);
}

/* Runs "fenced" and "loading" get *arg's answer (1 serves, 0 refuses, RDZV_NOT_YET not yet),
 * every other run is served. */
static int may_serve_flag(void *arg, const char *run_id) {
    if (strcmp(run_id, "fenced") == 0 || strcmp(run_id, "loading") == 0)
        return *(const int *)arg;
    return 1;
}

TEST(test_may_serve) {
    int serving = 0;
    rdzv_server_set_may_serve(e->srv, may_serve_flag, &serving);
    call_res_t other = {0};
    rdzv_join_req_t o = join_req("other", 1);
    assert_int_equal(rdzv_acall_join(e->c, &o, 5000, call_cb, &other, NULL), 0);
    run_until(e, &other.called);
    assert_int_equal(other.status, 0);
    assert_int_equal(other.rep.status, 0);
    call_res_t no = {0};
    rdzv_join_req_t q = join_req("fenced", 1);
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &no, NULL), 0);
    run_until(e, &no.called);
    assert_int_equal(no.status, 0);
    assert_int_equal(no.rep.cmd, RDZV_CMD_RDZV_JOIN);
    assert_int_not_equal(no.rep.status, 0);
    assert_int_equal(no.rep.code, DDP_ECLOSED);
    assert_non_null(strstr(no.text, "no longer serves the rendezvous"));
    env_client_close(e);

    /* A member's HEARTBEAT, FAIL and FINISH are refused the same way, each with its code and
     * text in a reply of its own (RDZV_REPLY_REFUSED), not only by the connection's close. */
    serving = 1;
    e->c = client_up(e, good_token);
    call_res_t in = {0};
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &in, NULL), 0);
    run_until(e, &in.called);
    assert_int_equal(in.rep.status, 0);
    serving = 0;
    uint8_t cmds[3] = {RDZV_CMD_RDZV_HEARTBEAT, RDZV_CMD_RDZV_FAIL, RDZV_CMD_RDZV_FINISH};
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            env_client_close(e);
            e->c = client_up(e, good_token);
        }
        call_res_t ref = {0};
        int rc = cmds[i] == RDZV_CMD_RDZV_HEARTBEAT
                     ? rdzv_acall_heartbeat(e->c, "fenced", call_cb, &ref, NULL)
                 : cmds[i] == RDZV_CMD_RDZV_FAIL
                     ? rdzv_acall_fail(e->c, "fenced", 0, "x", call_cb, &ref, NULL)
                     : rdzv_acall_finish(e->c, "fenced", 0, call_cb, &ref, NULL);
        assert_int_equal(rc, 0);
        run_until(e, &ref.called);
        assert_int_equal(ref.status, 0);
        assert_int_equal(ref.rep.cmd, cmds[i]);
        assert_int_equal(ref.rep.status, RDZV_REPLY_REFUSED);
        assert_int_equal(ref.rep.code, DDP_ECLOSED);
        assert_non_null(strstr(ref.text, "no longer serves the rendezvous"));
    }
    env_client_close(e);

    serving = 1;
    e->c = client_up(e, good_token);
    call_res_t yes = {0};
    q = join_req("fenced2", 1);
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &yes, NULL), 0);
    run_until(e, &yes.called);
    assert_int_equal(yes.status, 0);
    assert_int_equal(yes.rep.status, 0);
    assert_int_equal(yes.rep.join.group_world_size, 1);
}

/* "Not yet" (a store loading its predecessor's records): the JOIN is refused with that code on
 * a connection that stays open, and the same connection's next JOIN is served. */
TEST(test_may_serve_not_yet) {
    int serving = RDZV_NOT_YET;
    rdzv_server_set_may_serve(e->srv, may_serve_flag, &serving);
    call_res_t wait = {0}, yes = {0};
    rdzv_join_req_t q = join_req("loading", 1);
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &wait, NULL), 0);
    run_until(e, &wait.called);
    assert_int_equal(wait.status, 0);
    assert_int_not_equal(wait.rep.status, 0);
    assert_int_equal(wait.rep.code, RDZV_NOT_YET);
    assert_non_null(strstr(wait.text, "not serving yet"));
    serving = 1;
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &yes, NULL), 0);
    run_until(e, &yes.called);
    assert_int_equal(yes.status, 0);
    assert_int_equal(yes.rep.status, 0);
    /* The refused frame was consumed: the next reply on the connection is the HEARTBEAT's. */
    call_res_t hb = {0};
    assert_int_equal(rdzv_acall_heartbeat(e->c, "loading", call_cb, &hb, NULL), 0);
    run_until(e, &hb.called);
    assert_int_equal(hb.status, 0);
    assert_int_equal(hb.rep.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(hb.rep.status, 0);
}

/* A candidate that does not lead (rdzv_server_set_redirect) names the store that does: JOIN and
 * HEARTBEAT are refused with DDP_ERDZV_MOVED and "HOST:PORT" as the whole text, on a connection
 * that stays open; "not yet" while no store is named; a redirect that knows none (a deposed
 * leader) refuses and closes as before. */
static int redirect_flag(void *arg, const char *run_id, char *out, size_t cap) {
    (void)run_id;
    int v = *(const int *)arg;
    if (v > 0)
        snprintf(out, cap, "10.1.2.3:29411");
    return v;
}

TEST(test_may_serve_redirect) {
    int serving = 0, known = 1;
    rdzv_server_set_may_serve(e->srv, may_serve_flag, &serving);
    rdzv_server_set_redirect(e->srv, redirect_flag, &known);
    call_res_t moved = {0}, hb = {0}, wait = {0}, yes = {0};
    rdzv_join_req_t q = join_req("fenced", 1);
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &moved, NULL), 0);
    run_until(e, &moved.called);
    assert_int_equal(moved.status, 0);
    assert_int_not_equal(moved.rep.status, 0);
    assert_int_equal(moved.rep.code, DDP_ERDZV_MOVED);
    assert_string_equal(moved.text, "10.1.2.3:29411");
    assert_int_equal(rdzv_acall_heartbeat(e->c, "fenced", call_cb, &hb, NULL), 0);
    run_until(e, &hb.called);
    assert_int_equal(hb.status, 0);
    assert_int_equal(hb.rep.status, RDZV_REPLY_REFUSED);
    assert_int_equal(hb.rep.code, DDP_ERDZV_MOVED);
    assert_string_equal(hb.text, "10.1.2.3:29411");
    known = RDZV_NOT_YET;
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &wait, NULL), 0);
    run_until(e, &wait.called);
    assert_int_equal(wait.rep.code, RDZV_NOT_YET);
    assert_non_null(strstr(wait.text, "named no store yet"));
    /* The same connection is served once this store leads. */
    serving = 1;
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &yes, NULL), 0);
    run_until(e, &yes.called);
    assert_int_equal(yes.rep.status, 0);
    env_client_close(e);
    serving = 0;
    known = 0;
    e->c = client_up(e, good_token);
    call_res_t no = {0};
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &no, NULL), 0);
    run_until(e, &no.called);
    assert_int_equal(no.rep.code, DDP_ECLOSED);
}

/* What must outlive the store reaches its durable hooks: FINISH's DONE mark, a FAIL's host
 * record; restored records refuse a node of the finished run and an excluded host. */
typedef struct durable_seen {
    int done, hosts;
    int64_t round, failures;
    char host[64];
} durable_seen_t;

static void seen_done(void *arg, const char *run_id, int64_t round) {
    durable_seen_t *d = arg;
    assert_string_equal(run_id, "durable");
    d->done++;
    d->round = round;
}

static void seen_host(void *arg, const char *run_id, const char *host, int64_t failures,
                      int excluded, const char *last_failure) {
    durable_seen_t *d = arg;
    assert_string_equal(run_id, "durable");
    assert_false(excluded);
    assert_non_null(strstr(last_failure, "boom"));
    d->hosts++;
    d->failures = failures;
    snprintf(d->host, sizeof d->host, "%s", host);
}

TEST(test_durable_hooks) {
    static const rdzv_server_durable_t hooks = {.run_done = seen_done, .host_record = seen_host};
    durable_seen_t d = {0};
    rdzv_server_set_durable(e->srv, &hooks, &d);
    rdzv_join_req_t q = join_req("durable", 1);
    call_res_t j = {0}, f = {0}, j1 = {0}, fin = {0};
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &j, NULL), 0);
    run_until(e, &j.called);
    assert_int_equal(j.rep.status, 0);
    assert_int_equal(rdzv_acall_fail(e->c, "durable", 0, "boom", call_cb, &f, NULL), 0);
    run_until(e, &f.called);
    assert_int_equal(d.hosts, 1);
    assert_int_equal(d.failures, 1);
    assert_string_equal(d.host, "127.0.0.1");
    assert_int_equal(rdzv_acall_join(e->c, &q, 5000, call_cb, &j1, NULL), 0);
    run_until(e, &j1.called);
    assert_int_equal(j1.rep.status, 0);
    assert_int_equal(rdzv_acall_finish(e->c, "durable", j1.rep.join.round, call_cb, &fin, NULL), 0);
    run_until(e, &fin.called);
    assert_int_equal(fin.rep.status, 0);
    assert_int_equal(d.done, 1);
    assert_int_equal(d.round, 1);

    ddp_err_t err = {0};
    assert_int_equal(rdzv_server_restore_done(e->srv, "over", 4, &err), 0);
    assert_int_equal(
        rdzv_server_restore_host(e->srv, "sick", "127.0.0.1", 3, 1, "round 2: x", &err), 0);
    assert_int_equal(rdzv_server_restore_host(e->srv, "sick", "", 3, 1, "", &err), DDP_EUSAGE);
    call_res_t over = {0}, sick = {0};
    env_client_close(e); /* a member of "durable" */
    e->c = client_up(e, good_token);
    rdzv_join_req_t o = join_req("over", 1);
    o.min_round = 5;
    assert_int_equal(rdzv_acall_join(e->c, &o, 5000, call_cb, &over, NULL), 0);
    run_until(e, &over.called);
    assert_int_equal(over.rep.code, DDP_ERDZV_DONE);
    env_client_close(e);
    e->c = client_up(e, good_token);
    rdzv_join_req_t s = join_req("sick", 1);
    assert_int_equal(rdzv_acall_join(e->c, &s, 5000, call_cb, &sick, NULL), 0);
    run_until(e, &sick.called);
    assert_int_equal(sick.rep.code, DDP_ERDZV_EXCLUDED);
    assert_non_null(strstr(sick.text, "round 2: x"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_calls, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_encode_refused, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_reply_for_another_command, setup_loop, teardown),
        cmocka_unit_test_setup_teardown(test_parked_join_cancelled, setup_server, teardown),
        cmocka_unit_test_setup_teardown(test_barrier_passes, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_barrier_sealed_first, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_barrier_wait_runs_out, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_barrier_key_refused, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_barrier_store_gone, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_may_serve, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_may_serve_not_yet, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_may_serve_redirect, setup_client, teardown),
        cmocka_unit_test_setup_teardown(test_durable_hooks, setup_client, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
