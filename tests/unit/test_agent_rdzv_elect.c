/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of a follower's way through the store candidates (agent/rdzv_elect.c,
 * --rdzv_conf etcd_stores) without etcd or a socket: a candidate's answer that names another
 * store (agent__elect_moved) moves the follower there, and is no store lost, whether the link
 * lets its store go from inside the move (it was up) or only retries at the new address (it
 * was reconnecting already); a store lost after such a move is lost as any other: the follower
 * goes on to the next candidate, passing over the lost one, and believes no candidate that names
 * it within lease_ttl. An agent that watches the leader key follows the key alone; a reader
 * follows a store's answer.
 *
 * rdzv_elect.c is linked with the etcd library (never called here: a follower has no etcd
 * client); the records keeper and the store's setters it calls are defined here, and the loop's
 * clock is replaced through the linker (-Wl,--wrap=uv_now). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rdzv_int.h"
#include "rdzv_server.h"
#include "uv_now_fixture.h"

/* ---- stand-ins: what a follower never reaches ---- */

int agent__records_start(struct agent_rdzv *r) {
    (void)r;
    fail_msg("a follower keeps no records");
    return -1;
}
void agent__records_lead(struct agent_rdzv *r, int64_t token) {
    (void)r, (void)token;
    fail_msg("a follower never leads");
}
void agent__records_stop(struct agent_rdzv *r) {
    (void)r;
}
void agent__records_close(struct agent_rdzv *r) {
    (void)r;
}
void agent__records_flush(struct agent_rdzv *r, void (*then)(struct agent_rdzv *r)) {
    then(r);
}
void rdzv_server_set_may_serve(rdzv_server_t *s, rdzv_server_may_serve_fn fn, void *arg) {
    (void)s, (void)fn, (void)arg;
}
void rdzv_server_set_redirect(rdzv_server_t *s, rdzv_server_redirect_fn fn, void *arg) {
    (void)s, (void)fn, (void)arg;
}
void rdzv_server_set_durable(rdzv_server_t *s, const rdzv_server_durable_t *d, void *arg) {
    (void)s, (void)d, (void)arg;
}
void rdzv_server_set_log(rdzv_server_t *s, int max_level, rdzv_log_fn fn, void *arg) {
    (void)s, (void)max_level, (void)fn, (void)arg;
}
void rdzv_server_log_to_ddp(void *arg, int level, const char *msg) {
    (void)arg, (void)level, (void)msg;
}

/* ---- the follower, and what its moved hook saw ---- */

static struct agent_rdzv rz;
static agent_t ag;
static agent_job_t job;

static struct {
    int calls;
    int redirected; /* rz.follow_redirected during the last call */
    char via[64];
    int lose_inside; /* the hook lets the store go at once, as an UP link does */
} moved;

/* As rdzv.c's store_moved: the link now meets addr:port; an UP link's loss of the store it
 * leaves (reconnect_begin) asks the election whether a store was lost. */
static void on_moved(struct agent_rdzv *r, const char *addr, int port, const char *via) {
    moved.calls++;
    moved.redirected = r->follow_redirected;
    snprintf(moved.via, sizeof moved.via, "%s", via != NULL ? via : "");
    snprintf(r->leader_addr, sizeof r->leader_addr, "%s", addr);
    r->port = port;
    if (moved.lose_inside)
        agent__elect_store_lost(r);
}

static void on_lost(struct agent_rdzv *r, const char *why) {
    (void)r, (void)why;
    fail_msg("a follower has no lease to lose");
}

static const agent_elect_hooks_t hooks = {.moved = on_moved, .lost = on_lost};

/* A follower of two candidates, 10.0.0.1:29400 and 10.0.0.2:29400, at the first; lease_ttl 10 s;
 * the clock at 100 s. */
static void setup(void) {
    memset(&rz, 0, sizeof rz);
    memset(&ag, 0, sizeof ag);
    memset(&job, 0, sizeof job);
    memset(&moved, 0, sizeof moved);
    now_ms = 100000;
    job.backend = AGENT_RDZV_ETCD;
    job.etcd.lease_ttl_s = 10;
    job.max_nodes = 3;
    ag.cfg.job = &job;
    rz.a = &ag;
    rz.elect_hooks = &hooks;
    rz.follower = 1;
    rz.n_stores = 2;
    snprintf(rz.stores[0].addr, sizeof rz.stores[0].addr, "10.0.0.1");
    snprintf(rz.stores[1].addr, sizeof rz.stores[1].addr, "10.0.0.2");
    rz.stores[0].port = rz.stores[1].port = 29400;
    rz.follow_at = 0;
    snprintf(rz.leader_addr, sizeof rz.leader_addr, "10.0.0.1");
    rz.addr = rz.leader_addr; /* as rdzv.c's: the link meets the store the election names */
    rz.port = 29400;
    rz.elected = 1;
}

static int move_to(const char *text) {
    return agent__elect_moved(&rz, text, strlen(text));
}

/* The link was reconnecting when the candidate named the store: it retries there, and nothing
 * asks whether a store was lost. The next real loss is a loss: the follower goes on to the next
 * candidate, not back to the lost store. */
static void test_move_while_reconnecting_then_lost(void **state) {
    (void)state;
    setup();
    assert_int_equal(move_to("10.0.0.2:29400"), 0);
    assert_int_equal(moved.calls, 1);
    assert_int_equal(moved.redirected, 1);
    assert_string_equal(moved.via, "10.0.0.1:29400");
    assert_string_equal(rz.leader_addr, "10.0.0.2");
    assert_int_equal(rz.follow_redirected, 0); /* the move is over */

    now_ms += 30000; /* the job runs a while at 10.0.0.2 */
    agent__elect_store_lost(&rz);
    assert_string_equal(rz.lost.addr, "10.0.0.2");
    assert_int_equal(rz.lost.port, 29400);
    assert_int_equal(rz.lost_since_ms, now_ms);
    assert_string_equal(rz.leader_addr, "10.0.0.1"); /* the next candidate, past the lost one */
    assert_int_equal(rz.follow_at, 0);

    /* Within lease_ttl of the loss, a candidate naming the lost store is behind: ask again. */
    assert_int_equal(move_to("10.0.0.2:29400"), 1);
    assert_int_equal(moved.calls, 1);
}

/* The link was up: it lets its store go inside the move, and that is no store lost (the
 * follower stays with the store it was sent to). A later loss is one. */
static void test_move_while_up_then_lost(void **state) {
    (void)state;
    setup();
    moved.lose_inside = 1;
    assert_int_equal(move_to("10.0.0.2:29400"), 0);
    assert_int_equal(moved.calls, 1);
    assert_int_equal(rz.lost.port, 0); /* nothing lost */
    assert_string_equal(rz.leader_addr, "10.0.0.2");
    assert_int_equal(rz.follow_redirected, 0);

    moved.lose_inside = 0;
    agent__elect_store_lost(&rz);
    assert_string_equal(rz.lost.addr, "10.0.0.2");
    assert_string_equal(rz.leader_addr, "10.0.0.1");
}

/* A candidate that names itself will serve once its records are in: the same request again,
 * no move. A text that is no address: -1, no move. */
static void test_move_to_self_or_garbage(void **state) {
    (void)state;
    setup();
    assert_int_equal(move_to("10.0.0.1:29400"), 1);
    assert_int_equal(move_to("not an address"), -1);
    assert_int_equal(moved.calls, 0);
    assert_int_equal(rz.follow_redirected, 0);
}

/* An agent that watches the leader key (no follower, no reader: a candidate or an observer)
 * is never sent elsewhere by a store's answer: the key names its store, and a store that names
 * another (a standby behind the key: the dead leader's address) is asked again. A reader, which
 * has no watch, follows the answer. */
static void test_watcher_follows_the_key_not_the_store(void **state) {
    (void)state;
    setup();
    rz.follower = 0;
    rz.leader = (struct rdzv_etcd_leader *)&rz; /* its election: never called here */
    assert_int_equal(move_to("10.0.0.2:29400"), 1);
    assert_int_equal(moved.calls, 0);
    assert_string_equal(rz.leader_addr, "10.0.0.1");

    rz.reader = 1;
    rz.leader = NULL; /* a reader reads the key: no election of its own */
    assert_int_equal(move_to("10.0.0.2:29400"), 0);
    assert_int_equal(moved.calls, 1);
    assert_string_equal(rz.leader_addr, "10.0.0.2");
    assert_int_equal(rz.follow_redirected, 0); /* a reader is no follower */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_while_reconnecting_then_lost),
        cmocka_unit_test(test_move_while_up_then_lost),
        cmocka_unit_test(test_move_to_self_or_garbage),
        cmocka_unit_test(test_watcher_follows_the_key_not_the_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
