/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the ssh launcher's host table (launcher/ssh_host.c) without ssh or a loop: every
 * phase x event cell is fed to ssh__host_event and its effects compared with what its action must
 * do (spawn, send, hold, kill, stop, lost, fail...) and the phase it must leave; then the paths
 * through the table: the store's address reaching the waiting hosts once the first is ready,
 * --ssh_fanout, a host that cannot start with and without --nnodes=MIN:MAX (the first host, below
 * MIN, the hosts named once), an unfit host, a failed agent and its grace, the stop, the root
 * cause's title and the cap on held stderr.
 *
 * ssh_host.c is linked alone: the loop's primitives it calls (ssh_loop_ops_t: spawn, write,
 * output, the timers...; ssh.c's in a real run) are this file's recorders (rec_ops). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "launch_ssh.h"
#include "ssh_int.h"

/* ---- what ssh_host.c did, recorded by the stand-ins below ---- */

#define NHOSTS 4

typedef struct effects {
    int spawns;
    int writes;
    char last_write[128];
    int stdin_closes;
    int kills;
    int answer_bys;
    uint64_t answer_at;
    int outputs;
    int output_std;
    char last_output[128];
} effects_t;

static effects_t fx[NHOSTS]; /* per host */
static int stop_ats, grace_starts;
static int spawn_rc; /* what the next host_spawn returns */
static uint64_t now_ms;

static ssh_run_t run;
static ssh_host_t hosts[NHOSTS];
static launch_host_t names[NHOSTS];
static launch_spec_t spec;

static effects_t *fx_of(const ssh_host_t *h) {
    assert_true(h >= hosts && h < hosts + NHOSTS);
    return &fx[h - hosts];
}

static int rec_host_spawn(ssh_run_t *r, ssh_host_t *h) {
    assert_ptr_equal(r, &run);
    fx_of(h)->spawns++;
    if (spawn_rc < 0) {
        snprintf(h->last_err, sizeof h->last_err, "unable to start ssh: refused by the test");
        return spawn_rc;
    }
    h->running = 1;
    h->in_fd = 100 + h->rank;
    return 0;
}

static void rec_host_write(ssh_host_t *h, const char *line) {
    effects_t *e = fx_of(h);
    if (h->in_fd < 0)
        return;
    e->writes++;
    snprintf(e->last_write, sizeof e->last_write, "%s", line);
}

static void rec_host_stdin_close(ssh_host_t *h) {
    fx_of(h)->stdin_closes++;
    h->in_fd = -1;
}

static void rec_host_kill(ssh_host_t *h) {
    fx_of(h)->kills++;
}

static void rec_host_answer_by(ssh_host_t *h, uint64_t at_ms) {
    effects_t *e = fx_of(h);
    e->answer_bys++;
    e->answer_at = at_ms;
}

static ssh_host_t *output_host; /* whose line rec_output writes (set by feed) */

static void rec_output(int std, const char *p, size_t n) {
    effects_t *e = fx_of(output_host);
    e->outputs++;
    e->output_std = std;
    snprintf(e->last_output, sizeof e->last_output, "%.*s", (int)n, p);
}

static uint64_t rec_now(ssh_run_t *r) {
    (void)r;
    return now_ms;
}

static void rec_stop_at(ssh_run_t *r, uint64_t at_ms) {
    (void)r;
    assert_int_equal(at_ms, now_ms + 5000 + SSH_STOP_EXTRA_S * 1000);
    stop_ats++;
}

static void rec_grace_start(ssh_run_t *r) {
    (void)r;
    grace_starts++;
}

static const ssh_loop_ops_t rec_ops = {
    .host_spawn = rec_host_spawn,
    .host_write = rec_host_write,
    .host_stdin_close = rec_host_stdin_close,
    .host_kill = rec_host_kill,
    .host_answer_by = rec_host_answer_by,
    .output = rec_output,
    .now = rec_now,
    .stop_at = rec_stop_at,
    .grace_start = rec_grace_start,
};

/* A run of n hosts "h0".."hN" (--nnodes=min:n, --ssh_fanout 8, --shutdown_timeout 5) whose
 * hosts are all PENDING, at t=10 s. */
static void setup_run(int n, int min) {
    memset(fx, 0, sizeof fx);
    memset(&run, 0, sizeof run);
    memset(hosts, 0, sizeof hosts);
    memset(&spec, 0, sizeof spec);
    stop_ats = grace_starts = spawn_rc = 0;
    now_ms = 10000;
    static char name_buf[NHOSTS][8];
    for (int i = 0; i < NHOSTS; i++) {
        snprintf(name_buf[i], sizeof name_buf[i], "h%d", i);
        names[i] = (launch_host_t){.name = name_buf[i], .slots = 0, .line = i + 1};
        hosts[i] = (ssh_host_t){.run = &run, .h = &names[i], .rank = i, .in_fd = -1};
        hosts[i].held = (ddp_buf_t)DDP_BUF_INIT;
    }
    spec.ssh_fanout = 8;
    spec.shutdown_timeout = 5.0;
    spec.max_nodes = n;
    run.spec = &spec;
    run.io = &rec_ops;
    run.hosts = (launch_hosts_t){.v = names, .n = (size_t)n};
    run.v = hosts;
    run.nnodes_min = min;
    run.nnodes_max = n;
    run.failed_rank = -1;
}

static void run_free(void) {
    for (int i = 0; i < NHOSTS; i++)
        ddp_buf_free(&hosts[i].held);
}

/* Feeds ev with line (NULL: none) to host h. */
static void feed(ssh_host_t *h, ssh_event_t ev, const char *line) {
    output_host = h;
    ssh__host_event(&run, h, ev, line, line != NULL ? strlen(line) : 0);
}

/* ---- the table, cell by cell ---- */

/* What each cell's action must do (ssh_host.c's action names). */
typedef enum {
    A_IGNORE = 0,
    A_SPAWN,          /* ssh started, the first heartbeat, the answer deadline */
    A_ADDRESS,        /* the address and a heartbeat down stdin, the deadline pushed */
    A_SEND,           /* the line down stdin */
    A_READY,          /* the held stderr shown */
    A_OUT,            /* the line on stdout */
    A_ERR_OUT,        /* the line on stderr */
    A_HOLD,           /* held, and kept as the last error */
    A_KILL,           /* ssh killed, the reason kept */
    A_FORGET,         /* nothing but the phase */
    A_CLOSE_STDIN,    /* stdin closed */
    A_ENDED,          /* stdin closed */
    A_ENDED_STARTING, /* stdin closed, lost: --nnodes=n:n stops the job */
    A_ENDED_READY,    /* stdin closed, the job failed: the grace starts */
} action_t;

static const char *const action_names[] = {
    "ignore",      "spawn",   "address",        "send_line",   "ready",
    "out",         "err_out", "hold",           "kill_late",   "forget",
    "close_stdin", "ended",   "ended_starting", "ended_ready",
};

static const char *const phase_names[SSH_NPHASES] = {"PENDING", "WAITING",  "STARTING", "READY",
                                                     "CLOSING", "STOPPING", "DONE",     "LOST"};
static const char *const event_names[SSH_NEVENTS] = {
    "START", "ADDRESS", "SEND", "READY_LINE", "OUT_LINE", "ERR_LINE", "NO_ANSWER", "STOP", "ENDED"};

typedef struct cell {
    action_t act;
    ssh_phase_t next;
} cell_t;

/* clang-format off */
#define C(a, p) {A_##a, SSH_##p}
#define NONE(p) {C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p), C(IGNORE, p)}
static const cell_t expected[SSH_NPHASES][SSH_NEVENTS] = {
    /*                START               ADDRESS               SEND                  READY_LINE          OUT_LINE            ERR_LINE                NO_ANSWER            STOP                         ENDED */
    [SSH_PENDING] =  {C(SPAWN, STARTING), C(IGNORE, PENDING),   C(IGNORE, PENDING),   C(IGNORE, PENDING), C(IGNORE, PENDING), C(IGNORE, PENDING),     C(IGNORE, PENDING),  C(FORGET, DONE),             C(IGNORE, PENDING)},
    [SSH_WAITING] =  {C(IGNORE, WAITING), C(ADDRESS, STARTING), C(IGNORE, WAITING),   C(OUT, WAITING),    C(OUT, WAITING),    C(HOLD, WAITING),       C(KILL, WAITING),    C(CLOSE_STDIN, CLOSING),     C(ENDED_STARTING, LOST)},
    [SSH_STARTING] = {C(IGNORE, STARTING),C(IGNORE, STARTING),  C(SEND, STARTING),    C(READY, READY),    C(OUT, STARTING),   C(HOLD, STARTING),      C(KILL, STARTING),   C(SEND, CLOSING),            C(ENDED_STARTING, LOST)},
    [SSH_READY] =    {C(IGNORE, READY),   C(IGNORE, READY),     C(SEND, READY),       C(OUT, READY),      C(OUT, READY),      C(ERR_OUT, READY),      C(IGNORE, READY),    C(SEND, STOPPING),           C(ENDED_READY, DONE)},
    [SSH_CLOSING] =  {C(IGNORE, CLOSING), C(IGNORE, CLOSING),   C(SEND, CLOSING),     C(READY, STOPPING), C(OUT, CLOSING),    C(HOLD, CLOSING),       C(IGNORE, CLOSING),  C(IGNORE, CLOSING),          C(ENDED, DONE)},
    [SSH_STOPPING] = {C(IGNORE, STOPPING),C(IGNORE, STOPPING),  C(SEND, STOPPING),    C(OUT, STOPPING),   C(OUT, STOPPING),   C(ERR_OUT, STOPPING),   C(IGNORE, STOPPING), C(IGNORE, STOPPING),         C(ENDED, DONE)},
    [SSH_DONE] = NONE(DONE),
    [SSH_LOST] = NONE(LOST),
};
#undef NONE
#undef C
/* clang-format on */

/* The line each event carries in the cell test. */
static const char *cell_line(ssh_event_t ev) {
    switch (ev) {
    case SSH_EV_SEND: return "signal 10\n";
    case SSH_EV_READY_LINE: return AGENT_SSH_READY " 10.0.0.1:29400\n";
    case SSH_EV_OUT_LINE: return "an output line\n";
    case SSH_EV_ERR_LINE: return "an error line\n";
    case SSH_EV_STOP: return "signal 15\n";
    default: return NULL;
    }
}

/* Host h1 of three (the others DONE), in phase p: started (stdin open) unless PENDING, with
 * "held\n" held before it was ready, its deadline at 0; --rdzv_endpoint given, --nnodes=3:3;
 * ssh exits 1. */
static ssh_host_t *setup_cell(ssh_phase_t p) {
    setup_run(3, 3);
    run.endpoint_given = 1;
    snprintf(run.endpoint, sizeof run.endpoint, "10.0.0.9:29400");
    hosts[0].phase = hosts[2].phase = SSH_DONE;
    ssh_host_t *h = &hosts[1];
    h->phase = p;
    h->code = 1;
    if (p != SSH_PENDING && p != SSH_DONE && p != SSH_LOST) {
        h->in_fd = 101;
        h->running = 1;
    }
    if (p == SSH_WAITING || p == SSH_STARTING || p == SSH_CLOSING)
        ddp_buf_append(&h->held, "held\n", 5);
    return h;
}

static void check_cell(ssh_phase_t p, ssh_event_t ev, cell_t want, const ssh_host_t *h) {
    const effects_t *e = &fx[1];
    effects_t w;
    memset(&w, 0, sizeof w);
    int lost = 0, stopped = 0, failed = 0;
    const char *line = cell_line(ev);
    switch (want.act) {
    case A_IGNORE:
    case A_FORGET: break;
    case A_SPAWN:
        w.spawns = 1;
        w.writes = 1;
        w.answer_bys = 1;
        break;
    case A_ADDRESS:
        w.writes = 2;
        w.answer_bys = 1;
        break;
    case A_SEND: w.writes = 1; break;
    case A_READY: w.outputs = 1; break;
    case A_OUT:
    case A_ERR_OUT: w.outputs = 1; break;
    case A_HOLD: break;
    case A_KILL: w.kills = 1; break;
    case A_CLOSE_STDIN:
    case A_ENDED: w.stdin_closes = 1; break;
    case A_ENDED_STARTING:
        w.stdin_closes = 1;
        lost = stopped = 1;
        break;
    case A_ENDED_READY:
        w.stdin_closes = 1;
        failed = 1;
        break;
    }
    char cell[128];
    snprintf(cell, sizeof cell, "%s + %s (%s)", phase_names[p], event_names[ev],
             action_names[want.act]);
    if (h->phase != want.next)
        fail_msg("%s: phase %s, want %s", cell, phase_names[h->phase], phase_names[want.next]);
    if (e->spawns != w.spawns || e->writes != w.writes || e->stdin_closes != w.stdin_closes ||
        e->kills != w.kills || e->answer_bys != w.answer_bys || e->outputs != w.outputs)
        fail_msg("%s: spawns %d/%d writes %d/%d stdin closes %d/%d kills %d/%d deadlines %d/%d "
                 "outputs %d/%d",
                 cell, e->spawns, w.spawns, e->writes, w.writes, e->stdin_closes, w.stdin_closes,
                 e->kills, w.kills, e->answer_bys, w.answer_bys, e->outputs, w.outputs);
    if ((int)run.n_down != lost || (run.phase == SSH_RUN_STOPPING) != stopped ||
        stop_ats != stopped || (run.failed_rank == 1) != failed || grace_starts != failed)
        fail_msg("%s: hosts lost %zu/%d, run phase %d (stop %d/%d), failed rank %d, grace %d/%d",
                 cell, run.n_down, lost, (int)run.phase, stop_ats, stopped, run.failed_rank,
                 grace_starts, failed);
    /* What went where. */
    switch (want.act) {
    case A_SEND: assert_string_equal(e->last_write, line); break;
    case A_SPAWN: assert_string_equal(e->last_write, "\n"); break;
    case A_ADDRESS:
        assert_string_equal(e->last_write, "\n");
        assert_int_equal(e->answer_at, now_ms + LAUNCH_SSH_READY_EXTRA_S * 1000);
        break;
    case A_READY:
        assert_int_equal(e->output_std, 2);
        assert_string_equal(e->last_output, "held\n");
        assert_int_equal(h->held.len, 0);
        break;
    case A_OUT:
    case A_ERR_OUT:
        assert_int_equal(e->output_std, want.act == A_OUT ? 1 : 2);
        assert_string_equal(e->last_output, line);
        break;
    case A_HOLD:
        assert_int_equal(h->held.len, 5 + strlen(line));
        assert_string_equal(h->last_err, "an error line");
        break;
    case A_KILL: assert_non_null(strstr(h->last_err, "no answer within")); break;
    default: break;
    }
}

static void test_every_cell(void **state) {
    (void)state;
    for (int p = 0; p < SSH_NPHASES; p++)
        for (int ev = 0; ev < SSH_NEVENTS; ev++) {
            ssh_host_t *h = setup_cell((ssh_phase_t)p);
            feed(h, (ssh_event_t)ev, cell_line((ssh_event_t)ev));
            check_cell((ssh_phase_t)p, (ssh_event_t)ev, expected[p][ev], h);
            run_free();
        }
}

/* ---- the paths through the table ---- */

/* Without --rdzv_endpoint the hosts after the first wait for the store's address: nothing goes
 * down their stdin (not even a heartbeat) until the first host's agent is ready; then the
 * address and a heartbeat, and a deadline at least LAUNCH_SSH_READY_EXTRA_S away. A host started
 * after that gets the address at once. --ssh_fanout 2 starts two at a time. */
static void test_address_reaches_waiting_hosts(void **state) {
    (void)state;
    setup_run(4, 4);
    spec.ssh_fanout = 2;
    ssh__schedule(&run);
    assert_int_equal(hosts[0].phase, SSH_STARTING);
    assert_int_equal(hosts[1].phase, SSH_WAITING);
    assert_int_equal(hosts[2].phase, SSH_PENDING);
    assert_int_equal(fx[0].writes, 1); /* the first heartbeat */
    assert_int_equal(fx[1].writes, 0);
    assert_int_equal(fx[1].answer_at,
                     10000 + (LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S) * 1000);
    ssh__send_all(&run, "\n");
    assert_int_equal(fx[0].writes, 2);
    assert_int_equal(fx[1].writes, 0);
    now_ms = 30000;
    feed(&hosts[0], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    assert_string_equal(run.endpoint, "10.0.0.1:29400");
    assert_int_equal(hosts[0].phase, SSH_READY);
    assert_int_equal(hosts[1].phase, SSH_STARTING);
    assert_int_equal(fx[1].writes, 2);
    assert_int_equal(fx[1].answer_at, 30000 + LAUNCH_SSH_READY_EXTRA_S * 1000);
    assert_int_equal(fx[2].writes, 0); /* not started */
    ssh__schedule(&run);               /* one slot is free: the first host is ready */
    assert_int_equal(hosts[2].phase, SSH_STARTING);
    assert_int_equal(fx[2].writes, 2);
    assert_string_equal(fx[2].last_write, "\n");
    assert_int_equal(hosts[3].phase, SSH_PENDING);
    run_free();
}

/* A host that cannot start: with --nnodes=n:n the job stops at once (the others told, pending
 * ones never started); with MIN:MAX it goes on while MIN can come up, and the hosts it goes on
 * without are named once none is left starting; without the first host, which hosts the store,
 * it stops. */
static void test_host_lost(void **state) {
    (void)state;
    setup_run(3, 3);
    spec.ssh_fanout = 1;
    ssh__schedule(&run);
    hosts[0].phase = SSH_READY;
    spawn_rc = -ENOENT;
    ssh__schedule(&run);
    assert_int_equal(hosts[1].phase, SSH_LOST);
    assert_int_equal(run.start_failed, 1);
    assert_int_equal(run.phase, SSH_RUN_STOPPING);
    assert_int_equal(hosts[2].phase, SSH_DONE);
    assert_int_equal(hosts[0].phase, SSH_STOPPING);
    assert_string_equal(fx[0].last_write, "signal 15\n");
    assert_int_equal(fx[2].spawns, 0);
    run_free();

    setup_run(3, 2);
    run.endpoint_given = 1;
    ssh__schedule(&run);
    feed(&hosts[2], SSH_EV_ERR_LINE, "ssh: connect to host h2 port 22: Connection refused\n");
    ssh__tell_down(&run);
    assert_int_equal(run.told_down, 0);
    feed(&hosts[2], SSH_EV_ENDED, NULL); /* exit 0 (code unset): still never came up */
    assert_int_equal(hosts[2].phase, SSH_LOST);
    assert_int_equal(run.start_failed, 0);
    assert_int_equal(run.phase, SSH_RUN_GOING);
    ssh__tell_down(&run);
    assert_int_equal(run.told_down, 0); /* h0 and h1 are still starting */
    feed(&hosts[0], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    feed(&hosts[1], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    ssh__tell_down(&run);
    assert_int_equal(run.told_down, 1);
    /* A ready agent that ended with 0 is no loss. */
    feed(&hosts[1], SSH_EV_ENDED, NULL);
    assert_int_equal(hosts[1].phase, SSH_DONE);
    assert_int_equal(run.n_down, 1);
    assert_int_equal(run.phase, SSH_RUN_GOING);
    run_free();

    setup_run(3, 2);
    ssh__schedule(&run);
    feed(&hosts[1], SSH_EV_ENDED, NULL);
    assert_int_equal(run.phase, SSH_RUN_GOING);
    feed(&hosts[2], SSH_EV_ENDED, NULL);
    assert_int_equal(run.start_failed, 1);
    assert_int_equal(run.phase, SSH_RUN_STOPPING);
    assert_int_equal(hosts[0].phase, SSH_CLOSING);
    run_free();

    setup_run(3, 2);
    ssh__schedule(&run);
    feed(&hosts[0], SSH_EV_ENDED, NULL);
    assert_int_equal(hosts[0].phase, SSH_LOST);
    assert_int_equal(run.start_failed, 1);
    assert_int_equal(hosts[1].phase, SSH_CLOSING); /* waiting: its stdin closed */
    assert_int_equal(fx[1].stdin_closes, 1);
    assert_int_equal(fx[1].writes, 0);
    run_free();
}

/* An unfit node (exit LAUNCH_EXIT_NODE_UNFIT) under --nnodes=MIN:MAX is lost, not a failure;
 * without MIN:MAX it is the job's failure. */
static void test_unfit_host(void **state) {
    (void)state;
    for (int min = 2; min <= 3; min++) {
        setup_run(3, min);
        run.endpoint_given = 1;
        ssh__schedule(&run);
        for (int i = 0; i < 3; i++)
            feed(&hosts[i], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
        hosts[2].code = LAUNCH_EXIT_NODE_UNFIT;
        feed(&hosts[2], SSH_EV_ENDED, NULL);
        assert_int_equal(hosts[2].phase, min == 2 ? SSH_LOST : SSH_DONE);
        assert_int_equal(run.failed_rank, min == 2 ? -1 : 2);
        assert_int_equal(run.phase, min == 2 ? SSH_RUN_GOING : SSH_RUN_FAILED);
        run_free();
    }
}

/* A failed agent: the run is FAILED (the first failure kept), no host starts any more, a host
 * that had not come up ends without a word, and when the grace is over the others are stopped.
 * A stop (a signal) first makes the failures after it no news. */
static void test_failed_agent(void **state) {
    (void)state;
    setup_run(4, 4);
    spec.ssh_fanout = 3;
    run.endpoint_given = 1;
    ssh__schedule(&run);
    feed(&hosts[0], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    feed(&hosts[1], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    hosts[1].code = 3;
    feed(&hosts[1], SSH_EV_ENDED, NULL);
    assert_int_equal(run.phase, SSH_RUN_FAILED);
    assert_int_equal(run.failed_rank, 1);
    assert_int_equal(run.failed_code, 3);
    assert_int_equal(grace_starts, 1);
    ssh__schedule(&run);
    assert_int_equal(hosts[3].phase, SSH_PENDING);
    hosts[0].code = 1;
    feed(&hosts[0], SSH_EV_ENDED, NULL);
    assert_int_equal(run.failed_rank, 1);
    hosts[2].code = 255;
    feed(&hosts[2], SSH_EV_ENDED, NULL); /* still starting: no news */
    assert_int_equal(hosts[2].phase, SSH_DONE);
    assert_int_equal(run.n_down, 0);
    ssh__grace_over(&run);
    assert_int_equal(run.phase, SSH_RUN_STOPPING);
    assert_int_equal(hosts[3].phase, SSH_DONE);
    ssh__grace_over(&run);
    assert_int_equal(stop_ats, 1);
    run_free();

    setup_run(2, 2);
    run.endpoint_given = 1;
    ssh__schedule(&run);
    feed(&hosts[0], SSH_EV_READY_LINE, AGENT_SSH_READY " 10.0.0.1:29400\n");
    ssh__stop(&run, SIGINT);
    assert_string_equal(fx[0].last_write, "signal 2\n");
    assert_string_equal(fx[1].last_write, "signal 2\n");
    ssh__stop(&run, SIGTERM); /* once */
    assert_string_equal(fx[0].last_write, "signal 2\n");
    hosts[0].code = 130;
    feed(&hosts[0], SSH_EV_ENDED, NULL);
    feed(&hosts[1], SSH_EV_ENDED, NULL);
    assert_int_equal(run.failed_rank, -1);
    assert_int_equal(run.n_down, 0);
    assert_int_equal(hosts[0].phase, SSH_DONE);
    assert_int_equal(hosts[1].phase, SSH_DONE);
    run_free();
}

/* The root cause's title, a whole stderr line of a ready host, marks it; the same text inside a
 * line does not. Stderr held before the agent is ready stops growing at SSH_HELD_MAX, while the
 * last line is still kept. */
static void test_root_cause_and_held(void **state) {
    (void)state;
    ssh_host_t *h = setup_cell(SSH_READY);
    feed(h, SSH_EV_ERR_LINE, "x " AGENT_ROOT_CAUSE_TITLE "\n");
    assert_int_equal(h->root_cause, 0);
    feed(h, SSH_EV_ERR_LINE, AGENT_ROOT_CAUSE_TITLE "\n");
    assert_int_equal(h->root_cause, 1);
    run_free();

    h = setup_cell(SSH_STARTING);
    char line[1001];
    memset(line, 'e', 999);
    line[999] = '\n';
    line[1000] = '\0';
    for (int i = 0; i < 40; i++)
        feed(h, SSH_EV_ERR_LINE, line);
    assert_true(h->held.len <= SSH_HELD_MAX);
    assert_true(h->held.len > SSH_HELD_MAX - 1000);
    feed(h, SSH_EV_ERR_LINE, "Permission denied (publickey).\r\n");
    assert_string_equal(h->last_err, "Permission denied (publickey).");
    run_free();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cell),   cmocka_unit_test(test_address_reaches_waiting_hosts),
        cmocka_unit_test(test_host_lost),    cmocka_unit_test(test_unfit_host),
        cmocka_unit_test(test_failed_agent), cmocka_unit_test(test_root_cause_and_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
