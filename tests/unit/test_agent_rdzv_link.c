/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the agent's link to the store (agent/rdzv_link.c) without a socket: every phase x
 * event cell is fed to agent__link_event and its effects compared with what its action must do
 * (ignore, heartbeat, reconnect, retry, give up, close), then the paths through the table: which
 * store a loss reconnects to (the daemon's, an agent's, one this agent hosts, none), the end of a
 * reconnection and of its window, a loss after this node was counted at an agent's store's exit
 * barrier, the heartbeat's silence bound and the spare connection's BEAT_FOR, and a HEARTBEAT
 * refused by a store that no longer serves (etcd: the link follows the election at once), and
 * a follower's or reader's probe of the store its JOIN is parked at.
 *
 * rdzv_link.c is linked alone: the rendezvous clients it calls (rdzv_aclient_*, rdzv_acall_*) and
 * the agent functions it calls (the supervisor's agent__event, the exit barrier, rdzv.c's
 * waiting line and progress) are defined here as recorders, and the loop's clock and timers are
 * replaced through the linker (-Wl,--wrap), so nothing connects and no loop runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ddp_log.h"
#include "rdzv_int.h"
#include "rdzv_round_calls.h"
#include "uv_now_fixture.h"

/* ---- what rdzv_link.c did, recorded by the stand-ins below ---- */

#define MAX_EVENTS 8
#define MAX_CONNS 8

typedef struct effects {
    agent_event_t events[MAX_EVENTS]; /* agent__event, in order */
    int nevents;
    int connects; /* rdzv_aclient_connect, spare included */
    int connect_timeout_ms;
    int closes; /* rdzv_aclient_close of a connection (NULL not counted) */
    int heartbeats;
    int beat_fors;
    int probes; /* counts-only STATUS_PAGE on the watch connection (a joiner's probe) */
    int barrier_resets;
    int join_progress;
    int progress_sends;
    int elect_store_lost; /* agent__elect_store_lost calls */
    int elect_try_failed; /* agent__elect_try_failed calls */
    int elect_moved;      /* agent__elect_moved calls */
    int evlogs;
    int retry_timer_started;
    int timers_stopped;
} effects_t;

static effects_t fx;
static rdzv_aclient_t *rz_watch(void); /* the link's watch connection now */
static int connect_rc;                 /* what the next rdzv_aclient_connect returns */
static int retry_timer_active;         /* the reconnect timer, as uv_is_active sees it */
static int barrier_counted;            /* what agent__barrier_counted says */

/* The connections rdzv_aclient_connect hands out, and the callbacks it was given. */
static char conns[MAX_CONNS];
static rdzv_aconnect_cb conn_cb[MAX_CONNS];
static void *conn_arg[MAX_CONNS];
static rdzv_acall_cb hb_cb; /* the last HEARTBEAT's */
static void *hb_arg;
static rdzv_acb_t probe_cb; /* the last probe's */
static void *probe_arg;

int rdzv_aclient_connect(uv_loop_t *loop, const rdzv_client_opts_t *opts, rdzv_aconnect_cb cb,
                         void *arg, rdzv_aclient_t **out, ddp_err_t *err) {
    (void)loop;
    if (connect_rc < 0) {
        *out = NULL;
        return ddp_err_set(err, connect_rc, "connect refused by the test");
    }
    assert_true(fx.connects < MAX_CONNS);
    int i = fx.connects++;
    fx.connect_timeout_ms = opts->connect_timeout_ms;
    conn_cb[i] = cb;
    conn_arg[i] = arg;
    *out = (rdzv_aclient_t *)(void *)&conns[i];
    return 0;
}

void rdzv_aclient_close(rdzv_aclient_t *c, void (*close_cb)(void *arg), void *arg) {
    (void)close_cb, (void)arg;
    if (c != NULL)
        fx.closes++;
}

void rdzv_aclient_on_close(rdzv_aclient_t *c, rdzv_aclose_notify_cb cb, void *arg) {
    (void)c, (void)cb, (void)arg;
}

int rdzv_acall_heartbeat(rdzv_aclient_t *c, const char *run_id, rdzv_acall_cb cb, void *arg,
                         ddp_err_t *err) {
    (void)c, (void)run_id, (void)err;
    fx.heartbeats++;
    hb_cb = cb;
    hb_arg = arg;
    return 0;
}

int rdzv_acall_beat_for(rdzv_aclient_t *c, const char *run_id, int64_t member, int64_t member_key,
                        rdzv_acall_cb cb, void *arg, ddp_err_t *err) {
    (void)run_id, (void)cb, (void)arg, (void)err;
    assert_non_null(c);
    assert_int_equal(member, 7);
    assert_int_equal(member_key, 77);
    fx.beat_fors++;
    return 0;
}

int rdzv_aclient_ping(rdzv_aclient_t *c, rdzv_acb_t cb, void *arg, ddp_err_t *err) {
    (void)err;
    assert_ptr_equal(c, rz_watch());
    fx.probes++;
    probe_cb = cb;
    probe_arg = arg;
    return 0;
}

void agent__event(agent_t *a, agent_event_t ev, agent_worker_t *w) {
    (void)a, (void)w;
    assert_true(fx.nevents < MAX_EVENTS);
    fx.events[fx.nevents++] = ev;
}

void agent__evlog(agent_t *a, const char *event, const char *fmt, ...) {
    (void)a, (void)event, (void)fmt;
    fx.evlogs++;
}

void agent__barrier_event(struct agent_rdzv *r, agent_barrier_event_t ev, int status,
                          const char *errtext) {
    (void)r, (void)status, (void)errtext;
    assert_int_equal(ev, BARRIER_EV_RESET); /* the only one the link sends */
    fx.barrier_resets++;
}

int agent__barrier_counted(const struct agent_rdzv *r) {
    (void)r;
    return barrier_counted;
}

void agent__rdzv_join_progress(struct agent_rdzv *r) {
    (void)r;
    fx.join_progress++;
}

void agent__rdzv_progress_send(struct agent_rdzv *r) {
    (void)r;
    fx.progress_sends++;
}

void agent__elect_store_lost(struct agent_rdzv *r) {
    (void)r;
    fx.elect_store_lost++;
}

void agent__elect_try_failed(struct agent_rdzv *r) {
    (void)r;
    fx.elect_try_failed++;
}

/* A follower's bound, as rdzv_elect.c's: 1 s a candidate. */
int agent__elect_connect_ms(const struct agent_rdzv *r, int left_ms) {
    return r->follower && left_ms > 1000 ? 1000 : left_ms;
}

int agent__elect_moved(struct agent_rdzv *r, const void *text, size_t len) {
    (void)r;
    assert_int_equal(len, strlen("10.0.0.2:29400"));
    assert_memory_equal(text, "10.0.0.2:29400", len);
    fx.elect_moved++;
    return 0;
}

int __wrap_uv_timer_init(uv_loop_t *loop, uv_timer_t *t);
int __wrap_uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat);
int __wrap_uv_timer_stop(uv_timer_t *t);
int __wrap_uv_is_active(const uv_handle_t *h);

static struct agent_rdzv rz;
static agent_t ag;
static agent_job_t job;

static rdzv_aclient_t *rz_watch(void) {
    return rz.watch;
}

int __wrap_uv_timer_init(uv_loop_t *loop, uv_timer_t *t) {
    (void)loop, (void)t;
    return 0;
}

int __wrap_uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat) {
    (void)cb, (void)repeat;
    if (t == &rz.reconnect_timer) {
        assert_int_equal(timeout, 100);
        fx.retry_timer_started++;
        retry_timer_active = 1;
    } else {
        assert_ptr_equal(t, &rz.hb_timer);
    }
    return 0;
}

int __wrap_uv_timer_stop(uv_timer_t *t) {
    if (t == &rz.reconnect_timer)
        retry_timer_active = 0;
    fx.timers_stopped++;
    return 0;
}

int __wrap_uv_is_active(const uv_handle_t *h) {
    assert_ptr_equal(h, &rz.reconnect_timer);
    return retry_timer_active;
}

/* A node of a two-node job in link phase p, a member of round 3 of the daemon's store, its
 * connections made; the supervisor RUNNING; the store lost at t=10 s when reconnecting. */
static void setup(agent_link_phase_t p) {
    memset(&fx, 0, sizeof fx);
    memset(&rz, 0, sizeof rz);
    memset(&ag, 0, sizeof ag);
    memset(&job, 0, sizeof job);
    connect_rc = 0;
    now_ms = 10000;
    retry_timer_active = 0;
    barrier_counted = 0;
    job.run_id = "job7";
    job.rdzv.keep_alive_interval_ms = 1000;
    job.rdzv.keep_alive_max_attempt = 3;
    job.rdzv.read_timeout_ms = 5000;
    job.rdzv.store_reconnect_timeout_ms = 30000;
    ag.cfg.job = &job;
    ag.sup.state = SUP_RUNNING;
    ag.as.round = 3;
    ag.rdzv = &rz;
    static const ddp_buf_t no_token = DDP_BUF_INIT;
    rz.a = &ag;
    rz.addr = "127.0.0.1";
    rz.port = 29400;
    rz.token = &no_token;
    rz.link = p;
    rz.ctl = (rdzv_aclient_t *)(void *)&conns[MAX_CONNS - 1];
    rz.watch = (rdzv_aclient_t *)(void *)&conns[MAX_CONNS - 2];
    rz.member = 7;
    rz.member_key = 77;
    rz.watch_round = 3;
    rz.round_told = 3;
    if (p == LINK_RECONNECTING || p == LINK_CHECKING) {
        rz.reconnect_since_ms = now_ms - 1000;
        rz.reconnect_window_ms = p == LINK_CHECKING ? 2000 : 30000;
        rz.reconnect_pending = 2;
    }
    if (p == LINK_STOPPED)
        rz.ctl = rz.watch = NULL;
}

/* The same node with the etcd backend. */
static void setup_etcd(agent_link_phase_t p) {
    setup(p);
    job.backend = AGENT_RDZV_ETCD;
}

/* ---- the table, cell by cell ---- */

/* What each cell's action must do (rdzv_link.c's action names). */
typedef enum {
    A_IGNORE = 0,
    A_JOIN_UNREACHABLE, /* said, closed -> STOPPED, EV_RDZV_ERROR */
    A_LOST,             /* (the daemon's store) reconnect -> RECONNECTING, EV_STORE_LOST */
    A_TICK,             /* progress and a heartbeat */
    A_CLOSE,            /* -> STOPPED, nothing said */
    A_MADE,             /* one of the two new connections counted */
    A_RETRY_LATER,      /* the retry timer started */
    A_RETRY,            /* both connections made again, EV_STORE_LOST */
} action_t;

static const char *const action_names[] = {
    "ignore",
    "join_unreachable",
    "link_lost",
    "link_tick",
    "link_close",
    "reconnect_made",
    "reconnect_failed/lost (retry later)",
    "link_retry",
};

static const char *const phase_names[LINK_NPHASES] = {"UP", "RECONNECTING", "CHECKING", "LOST",
                                                      "STOPPED"};
static const char *const event_names[LINK_NEVENTS] = {
    "CONNECTED", "CONNECT_FAILED", "CLOSED", "SILENT", "RETRY", "TICK", "STOP"};

/* clang-format off */
static const action_t expected[LINK_NPHASES][LINK_NEVENTS] = {
    /*                  CONNECTED CONNECT_FAILED      CLOSED         SILENT         RETRY    TICK    STOP */
    [LINK_UP] =           {A_IGNORE, A_JOIN_UNREACHABLE, A_LOST,        A_LOST,        A_IGNORE, A_TICK,   A_CLOSE},
    [LINK_RECONNECTING] = {A_MADE,   A_RETRY_LATER,      A_RETRY_LATER, A_RETRY_LATER, A_RETRY,  A_IGNORE, A_CLOSE},
    [LINK_CHECKING] =     {A_MADE,   A_RETRY_LATER,      A_RETRY_LATER, A_RETRY_LATER, A_RETRY,  A_IGNORE, A_CLOSE},
    [LINK_LOST] =         {A_IGNORE, A_JOIN_UNREACHABLE, A_IGNORE,      A_IGNORE,      A_IGNORE, A_TICK,   A_CLOSE},
    [LINK_STOPPED] =      {A_IGNORE, A_IGNORE,           A_IGNORE,      A_IGNORE,      A_IGNORE, A_IGNORE, A_IGNORE},
};
/* clang-format on */

/* The effects and phase the action must leave, from phase p with pending connections to make. */
static void check_cell(agent_link_phase_t p, agent_link_event_t ev, action_t act, int pending) {
    effects_t want;
    memset(&want, 0, sizeof want);
    agent_link_phase_t next = p;
    switch (act) {
    case A_IGNORE: break;
    case A_JOIN_UNREACHABLE:
    case A_CLOSE:
        next = LINK_STOPPED;
        want.closes = 2;
        want.timers_stopped = 3;
        if (act == A_JOIN_UNREACHABLE)
            want.events[want.nevents++] = EV_RDZV_ERROR;
        break;
    case A_LOST:
    case A_RETRY:
        next = act == A_LOST ? LINK_RECONNECTING : p;
        want.closes = 2;
        want.connects = 2;
        want.barrier_resets = 1;
        want.evlogs = act == A_LOST;
        want.events[want.nevents++] = EV_STORE_LOST;
        pending = 2;
        break;
    case A_TICK:
        want.heartbeats = 1;
        want.progress_sends = 1;
        break;
    case A_MADE: pending--; break;
    case A_RETRY_LATER: want.retry_timer_started = 1; break;
    }
    char cell[96];
    snprintf(cell, sizeof cell, "%s + %s (%s)", phase_names[p], event_names[ev], action_names[act]);
    if (rz.link != next)
        fail_msg("%s: phase %s, want %s", cell, phase_names[rz.link], phase_names[next]);
    if (fx.closes != want.closes || fx.connects != want.connects ||
        fx.timers_stopped != want.timers_stopped || fx.heartbeats != want.heartbeats ||
        fx.progress_sends != want.progress_sends || fx.barrier_resets != want.barrier_resets ||
        fx.retry_timer_started != want.retry_timer_started || fx.evlogs != want.evlogs ||
        fx.beat_fors != 0 || fx.join_progress != 0 || rz.reconnect_pending != pending)
        fail_msg("%s: closes %d/%d connects %d/%d timers stopped %d/%d heartbeats %d/%d "
                 "progress %d/%d barrier resets %d/%d retry timer %d/%d evlogs %d/%d "
                 "pending %d/%d",
                 cell, fx.closes, want.closes, fx.connects, want.connects, fx.timers_stopped,
                 want.timers_stopped, fx.heartbeats, want.heartbeats, fx.progress_sends,
                 want.progress_sends, fx.barrier_resets, want.barrier_resets,
                 fx.retry_timer_started, want.retry_timer_started, fx.evlogs, want.evlogs,
                 rz.reconnect_pending, pending);
    if (fx.nevents != want.nevents || (want.nevents > 0 && fx.events[0] != want.events[0]))
        fail_msg("%s: %d supervisor events (first %d), want %d (first %d)", cell, fx.nevents,
                 fx.nevents ? (int)fx.events[0] : -1, want.nevents,
                 want.nevents ? (int)want.events[0] : -1);
}

static void test_every_cell(void **state) {
    (void)state;
    for (int p = 0; p < LINK_NPHASES; p++) {
        for (int ev = 0; ev < LINK_NEVENTS; ev++) {
            setup((agent_link_phase_t)p);
            int pending = rz.reconnect_pending;
            agent__link_event(&rz, (agent_link_event_t)ev,
                              ev == LINK_EV_CONNECT_FAILED ? -ECONNREFUSED : 0, "test");
            check_cell((agent_link_phase_t)p, (agent_link_event_t)ev, expected[p][ev], pending);
        }
    }
}

/* ---- the paths through the table ---- */

/* An agent's store that closed the connection is only checked, for 2 s; silence from it is
 * tried for the whole store_reconnect_timeout (the network is as likely at fault). */
static void test_agent_store_checked(void **state) {
    (void)state;
    setup(LINK_UP);
    rz.embedded = 1;
    agent__link_event(&rz, LINK_EV_CLOSED, 0, "connection reset");
    assert_int_equal(rz.link, LINK_CHECKING);
    assert_int_equal(rz.reconnect_window_ms, 2000);
    assert_int_equal(rz.member, 0); /* the store that forgot the run forgot the member */
    assert_int_equal(rz.watch_round, -1);
    assert_int_equal(fx.connect_timeout_ms, 2000);
    setup(LINK_UP);
    rz.embedded = 1;
    agent__link_event(&rz, LINK_EV_SILENT, 0, "no answer");
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(rz.reconnect_window_ms, 30000);
    assert_int_equal(fx.connect_timeout_ms, 30000);
}

/* A store this agent hosts, or store_reconnect_timeout=0, or new connections that cannot even
 * be opened: the loss is the end of the job, said once. */
static void test_loss_without_reconnecting(void **state) {
    (void)state;
    static char hosted;
    for (int how = 0; how < 3; how++) {
        setup(LINK_UP);
        if (how == 0)
            ag.stores.store = (struct rdzv_server *)(void *)&hosted;
        else if (how == 1)
            job.rdzv.store_reconnect_timeout_ms = 0;
        else
            connect_rc = -ENOMEM;
        agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
        assert_int_equal(rz.link, LINK_LOST);
        assert_int_equal(fx.nevents, 1);
        assert_int_equal(fx.events[0], EV_RDZV_ERROR);
        /* The other connection's loss, and a late request's, are the same loss. */
        agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
        agent__link_event(&rz, LINK_EV_SILENT, 0, NULL);
        assert_int_equal(fx.nevents, 1);
    }
}

/* At the exit barrier, counted: an agent's store that goes away has let everyone leave. */
static void test_loss_after_barrier(void **state) {
    (void)state;
    setup(LINK_UP);
    ag.sup.state = SUP_BARRIER;
    rz.embedded = 1;
    barrier_counted = 1;
    agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
    assert_int_equal(rz.link, LINK_UP);
    assert_int_equal(fx.nevents, 1);
    assert_int_equal(fx.events[0], EV_BARRIER_DONE);
    assert_int_equal(fx.connects, 0);
    /* Not counted yet: the store is lost as anywhere else. */
    setup(LINK_UP);
    ag.sup.state = SUP_BARRIER;
    rz.embedded = 1;
    agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
    assert_int_equal(rz.link, LINK_CHECKING);
}

/* Both new connections made: UP again. One made while a retry is pending is not counted (the
 * retry replaces it). A connect callback cancelled by a close is dropped. */
static void test_reconnected(void **state) {
    (void)state;
    setup(LINK_UP);
    agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.connects, 2);
    conn_cb[0](conn_arg[0], DDP_ECANCELED, "closed");
    assert_int_equal(rz.reconnect_pending, 2);
    conn_cb[0](conn_arg[0], 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    retry_timer_active = 1;
    conn_cb[1](conn_arg[1], 0, NULL);
    assert_int_equal(rz.reconnect_pending, 1);
    retry_timer_active = 0;
    conn_cb[1](conn_arg[1], 0, NULL);
    assert_int_equal(rz.link, LINK_UP);
    assert_int_equal(fx.evlogs, 2); /* lost, reconnected */
}

/* Out of time: the failure that finds the window over ends the job; so does a retry whose
 * connections cannot be opened. */
static void test_reconnect_window_over(void **state) {
    (void)state;
    for (int p = LINK_RECONNECTING; p <= LINK_CHECKING; p++) {
        setup((agent_link_phase_t)p);
        now_ms = rz.reconnect_since_ms + rz.reconnect_window_ms - 100;
        agent__link_event(&rz, LINK_EV_CONNECT_FAILED, -ECONNREFUSED, "refused");
        assert_int_equal(rz.link, LINK_STOPPED);
        assert_int_equal(fx.nevents, 1);
        assert_int_equal(fx.events[0], EV_RDZV_ERROR);
        assert_int_equal(fx.retry_timer_started, 0);
        /* The other connection's failure, after the close, says nothing more. */
        agent__link_event(&rz, LINK_EV_CONNECT_FAILED, -ECONNREFUSED, "refused");
        assert_int_equal(fx.nevents, 1);
    }
    setup(LINK_RECONNECTING);
    now_ms = rz.reconnect_since_ms + rz.reconnect_window_ms - 101;
    agent__link_event(&rz, LINK_EV_CLOSED, 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.retry_timer_started, 1);
    /* A retry pending already: nothing more is started. */
    agent__link_event(&rz, LINK_EV_CONNECT_FAILED, -ECONNREFUSED, NULL);
    assert_int_equal(fx.retry_timer_started, 1);
    connect_rc = -ENOMEM;
    agent__link_event(&rz, LINK_EV_RETRY, 0, NULL);
    assert_int_equal(rz.link, LINK_STOPPED);
    assert_int_equal(fx.events[0], EV_RDZV_ERROR);
}

/* Heartbeats: the waiting line while joining; an unanswered heartbeat checked against the
 * keep-alive bound (3 s here), BEAT_FOR on a spare connection after 1.5 intervals, for a member
 * only; the control connection answering again closes the spare one. */
static void test_heartbeat_paths(void **state) {
    (void)state;
    setup(LINK_UP);
    ag.sup.state = SUP_JOINING;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.join_progress, 1);
    assert_int_equal(fx.heartbeats, 0);

    setup(LINK_UP);
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.heartbeats, 1);
    assert_int_equal(rz.hb_pending, 1);
    assert_int_equal(rz.hb_sent_ms, 10000);
    now_ms = 11000; /* one interval: wait */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.heartbeats, 1);
    assert_int_equal(fx.connects, 0);
    now_ms = 11500; /* 1.5 intervals: a spare connection and a BEAT_FOR on it */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.connects, 1);
    assert_int_equal(fx.beat_fors, 1);
    assert_non_null(rz.spare);
    now_ms = 12000; /* its BEAT_FOR unanswered but not stuck yet: nothing new */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.connects, 1);
    assert_int_equal(fx.beat_fors, 1);
    rdzv_round_reply_t ok = {.cmd = RDZV_CMD_RDZV_HEARTBEAT};
    hb_cb(hb_arg, 0, &ok, NULL); /* the control connection answers */
    assert_int_equal(rz.hb_pending, 0);
    assert_null(rz.spare);
    assert_int_equal(fx.closes, 1);

    setup(LINK_UP);
    rz.member = 0; /* not a member yet: nobody to beat for */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    now_ms = 12000;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.connects, 0);
    now_ms = 13001; /* past the bound: silent, the store is lost */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.events[0], EV_STORE_LOST);
    assert_int_equal(rz.hb_pending, 0);
}

/* agent__link_start opens both connections and starts the heartbeat timer; a failed open is
 * returned. */
static void test_start(void **state) {
    (void)state;
    setup(LINK_UP);
    rz.ctl = rz.watch = NULL;
    assert_int_equal(agent__link_start(&rz, 600000), 0);
    assert_int_equal(fx.connects, 2);
    assert_int_equal(fx.connect_timeout_ms, 600000);
    assert_ptr_equal(rz.hb_timer.data, &rz);
    /* The first connection failing ends the job: the store cannot be joined. */
    conn_cb[0](conn_arg[0], -ECONNREFUSED, "connection refused");
    assert_int_equal(rz.link, LINK_STOPPED);
    assert_int_equal(fx.events[0], EV_RDZV_ERROR);
    setup(LINK_UP);
    connect_rc = -ENOMEM;
    assert_int_equal(agent__link_start(&rz, 1000), -ENOMEM);
}

/* The etcd backend: a lost store is followed for the whole store_reconnect_timeout whoever
 * serves it, this agent's own store included (the election may name another), the election is
 * told (a reader reads the leader key again), and each try goes to the address in r->addr at
 * that moment. */
/* The link's warning lines, as ddp_log writes them. */
static char logged[1024];
static void log_capture(void *ctx, const char *line, size_t len) {
    (void)ctx;
    size_t have = strlen(logged);
    if (have + len < sizeof logged) {
        memcpy(logged + have, line, len);
        logged[have + len] = '\0';
    }
}

static void test_etcd_follows_the_election(void **state) {
    (void)state;
    static char hosted;
    setup_etcd(LINK_UP);
    ag.stores.store = (struct rdzv_server *)(void *)&hosted;
    rz.embedded = 1;
    agent__link_event(&rz, LINK_EV_CLOSED, 0, "connection reset");
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(rz.reconnect_window_ms, 30000);
    assert_int_equal(fx.elect_store_lost, 1); /* a reader reads the leader key again */
    assert_int_equal(fx.nevents, 1);
    assert_int_equal(fx.events[0], EV_STORE_LOST);
    int before = fx.connects;
    agent__link_event(&rz, LINK_EV_RETRY, 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_true(fx.connects > before);

    /* The election moved the store (rdzv.c's store_moved names the store the link leaves; the
     * link's address is the new one already): the line names both, the old one as left. */
    setup_etcd(LINK_UP);
    rz.addr = "10.0.0.2";
    snprintf(rz.moved_from, sizeof rz.moved_from, "10.0.0.1:29400");
    logged[0] = '\0';
    ddp_log_set_writer(log_capture, NULL);
    agent__link_event(&rz, LINK_EV_CLOSED, 0, "a new leader was elected");
    ddp_log_set_writer(NULL, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_non_null(strstr(logged, "left the rendezvous store at 10.0.0.1:29400: a new leader was "
                                   "elected; reconnecting to the elected one at 10.0.0.2:29400"));
    assert_int_equal(fx.evlogs, 1);
}

/* A HEARTBEAT the store refuses as no longer serving (its node lost the etcd leadership) loses
 * the store at once, before the connection's close is read: the link reconnects to whatever the
 * election names. Other answers (not a member, another refusal code) lose nothing. */
static void test_heartbeat_refused(void **state) {
    (void)state;
    static char hosted;
    setup_etcd(LINK_UP);
    ag.stores.store = (struct rdzv_server *)(void *)&hosted;
    rz.embedded = 1;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.heartbeats, 1);
    rdzv_round_reply_t rep = {.cmd = RDZV_CMD_RDZV_HEARTBEAT, .status = 1};
    hb_cb(hb_arg, 0, &rep, NULL); /* not a member: nothing lost */
    assert_int_equal(rz.link, LINK_UP);
    rep.status = RDZV_REPLY_REFUSED;
    rep.code = DDP_EAUTH;
    hb_cb(hb_arg, 0, &rep, NULL);
    assert_int_equal(rz.link, LINK_UP);
    assert_int_equal(fx.nevents, 0);
    rep.code = DDP_ECLOSED;
    hb_cb(hb_arg, 0, &rep, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.nevents, 1);
    assert_int_equal(fx.events[0], EV_STORE_LOST);
    assert_int_equal(rz.hb_pending, 0);
    /* DDP_EFENCED reads the same. */
    setup_etcd(LINK_UP);
    ag.stores.store = (struct rdzv_server *)(void *)&hosted;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    rep.code = DDP_EFENCED;
    hb_cb(hb_arg, 0, &rep, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
}

/* A follower (--rdzv_conf etcd_stores): a first candidate that cannot be reached is not the end
 * of the job: the link goes round the candidates (reconnecting, for the join timeout); a
 * HEARTBEAT refused with the leader's address moves the link there (agent__elect_moved), with no
 * store lost by the link itself. */
static void test_follower(void **state) {
    (void)state;
    setup_etcd(LINK_UP);
    job.rdzv.join_timeout_ms = 600000;
    rz.follower = 1;
    agent__link_event(&rz, LINK_EV_CONNECT_FAILED, -ECONNREFUSED, "refused");
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.elect_try_failed, 1);
    assert_int_equal(fx.retry_timer_started, 1);
    assert_int_equal(rz.reconnect_window_ms, 600000);
    assert_int_equal(fx.nevents, 0); /* not out of the job */
    /* The other connection's failure of the same try moves nothing. */
    agent__link_event(&rz, LINK_EV_CONNECT_FAILED, -ECONNREFUSED, "refused");
    assert_int_equal(fx.elect_try_failed, 1);
    assert_int_equal(fx.nevents, 0);

    setup_etcd(LINK_UP);
    rz.follower = 1;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.heartbeats, 1);
    rdzv_round_reply_t rep = {
        .cmd = RDZV_CMD_RDZV_HEARTBEAT, .status = RDZV_REPLY_REFUSED, .code = DDP_ERDZV_MOVED};
    rep.text.data = (uint8_t *)"10.0.0.2:29400";
    rep.text.len = strlen("10.0.0.2:29400");
    hb_cb(hb_arg, 0, &rep, NULL);
    assert_int_equal(fx.elect_moved, 1);
    assert_int_equal(rz.link, LINK_UP); /* the moved hook reconnects, not the refusal */
    assert_int_equal(fx.nevents, 0);

    /* The moved hook lets the store go (rdzv_elect.c sets follow_redirected meanwhile): on the
     * way to the store, before a JOIN was taken, no store was lost; from the store this node's
     * round runs at, the round is lost as with any loss (rendezvous_store_lost). Both
     * reconnect at once and stop the group. */
    for (int member = 0; member <= 7; member += 7) {
        setup_etcd(LINK_UP);
        rz.follower = 1;
        rz.member = member;
        rz.follow_redirected = 1;
        agent__link_event(&rz, LINK_EV_CLOSED, 0, "the rendezvous store moved");
        assert_int_equal(rz.link, LINK_RECONNECTING);
        assert_int_equal(fx.evlogs, member != 0);
        assert_int_equal(fx.elect_store_lost, 1);
        assert_int_equal(fx.nevents, 1);
        assert_int_equal(fx.events[0], EV_STORE_LOST);
    }
}

/* An agent whose JOIN is parked at another's store with no etcd watch on it (a follower, a
 * reader, c10d against a daemon) probes the store on the watch connection at each tick:
 * answered, nothing happens; unanswered past the keep-alive bound, the store is lost (a cut-off
 * host closes nothing). A candidate (its watch) and an agent that hosts the store do not. */
static void test_joiner_probe(void **state) {
    (void)state;
    setup_etcd(LINK_UP);
    ag.sup.state = SUP_JOINING;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 0); /* a candidate: the election names a new store */
    assert_int_equal(fx.join_progress, 1);

    setup_etcd(LINK_UP);
    ag.sup.state = SUP_JOINING;
    rz.follower = 1;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 1);
    assert_int_equal(fx.heartbeats, 0);
    probe_cb(probe_arg, 0, NULL, 0, NULL);
    now_ms += 1000;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 2);
    now_ms += 3000; /* the keep-alive bound (3 x 1 s) is 3 s: not yet past it */
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(rz.link, LINK_UP);
    assert_int_equal(fx.probes, 2); /* one at a time */
    now_ms += 1;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(rz.link, LINK_RECONNECTING);
    assert_int_equal(fx.nevents, 1);
    assert_int_equal(fx.events[0], EV_STORE_LOST);
    assert_int_equal(rz.join_probe_pending, 0);
    probe_cb(probe_arg, DDP_ECANCELED, NULL, 0, NULL); /* the old connection's: dropped */

    setup_etcd(LINK_UP);
    ag.sup.state = SUP_JOINING;
    rz.reader = 1;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 1);

    /* c10d against another's store (a daemon, another node's agent) probes; against its own,
     * not. */
    setup(LINK_UP);
    job.backend = AGENT_RDZV_C10D;
    ag.sup.state = SUP_JOINING;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 1);
    static char hosted;
    setup(LINK_UP);
    job.backend = AGENT_RDZV_C10D;
    ag.sup.state = SUP_JOINING;
    ag.stores.store = (struct rdzv_server *)(void *)&hosted;
    agent__link_event(&rz, LINK_EV_TICK, 0, NULL);
    assert_int_equal(fx.probes, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cell),
        cmocka_unit_test(test_agent_store_checked),
        cmocka_unit_test(test_loss_without_reconnecting),
        cmocka_unit_test(test_loss_after_barrier),
        cmocka_unit_test(test_reconnected),
        cmocka_unit_test(test_reconnect_window_over),
        cmocka_unit_test(test_heartbeat_paths),
        cmocka_unit_test(test_start),
        cmocka_unit_test(test_etcd_follows_the_election),
        cmocka_unit_test(test_heartbeat_refused),
        cmocka_unit_test(test_follower),
        cmocka_unit_test(test_joiner_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
