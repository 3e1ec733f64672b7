/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the goodput arithmetic (agent/goodput_calc.c): recorded times in, the parts of
 * each restart, productive time, goodput and the summary's line out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "goodput.h"

/* The times below are ms after this origin (0 means "not set" in the record). */
#define T0 1000000u

static void test_one_group_no_restart(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    assert_int_equal(agent_goodput_spawn(&g, T0 + 100, &c), 0);
    assert_int_equal(agent_goodput_beat(&g, T0 + 600, 0, &c), 0);
    assert_int_equal(agent_goodput_beat(&g, T0 + 5600, 50, &c), 0);
    assert_int_equal(agent_goodput_end(&g, T0 + 10000, &c), 0);
    agent_goodput_totals_t t;
    agent_goodput_totals(&g, T0 + 99999, &t);
    assert_int_equal(t.wall_ms, 10000);
    assert_int_equal(t.productive_ms, 5000);
    assert_int_equal(t.lost_ms, 0);
    char line[256];
    agent_goodput_line(&g, T0 + 10000, line, sizeof line);
    assert_string_equal(line, "goodput 50.0% of 10.0 s (productive 5.0 s); no restarts");
}

/* A crash at step 40 after a checkpoint at 30; the next group resumes at 30 and beats 10 steps
 * a second: every part is the distance between two recorded moments. */
static void test_restart_parts(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    agent_goodput_spawn(&g, T0 + 10, &c);
    agent_goodput_beat(&g, T0 + 1010, 0, &c);
    agent_goodput_beat(&g, T0 + 5010, 40, &c); /* its last beat */
    memset(&c, 0, sizeof c);
    assert_int_equal(agent_goodput_failed(&g, T0 + 5210, &c), 0);  /* detect 200 */
    agent_goodput_down(&g, T0 + 6310);                             /* stop 1100 */
    assert_int_equal(agent_goodput_spawn(&g, T0 + 6360, &c), 0);   /* rendezvous 50 */
    assert_int_equal(agent_goodput_beat(&g, T0 + 8360, 0, &c), 0); /* start 2000 */
    assert_int_equal(agent_goodput_beat(&g, T0 + 8460, 30, &c), 0);
    assert_int_equal(agent_goodput_beat(&g, T0 + 9460, 40, &c), 1); /* passes 40: closes */
    assert_int_equal(c.number, 1);
    assert_int_equal(c.ms[AGENT_GP_DETECT], 200);
    assert_int_equal(c.ms[AGENT_GP_STOP], 1100);
    assert_int_equal(c.ms[AGENT_GP_RENDEZVOUS], 50);
    assert_int_equal(c.ms[AGENT_GP_START], 2000);
    assert_int_equal(c.ms[AGENT_GP_REDO], 1100);
    assert_int_equal(c.failed_step, 40);
    assert_int_equal(agent_goodput_beat(&g, T0 + 12460, 70, &c), 0);
    assert_int_equal(agent_goodput_end(&g, T0 + 12500, &c), 0);
    agent_goodput_totals_t t;
    agent_goodput_totals(&g, T0 + 12500, &t);
    /* 1010..5010 and 9460..12460 */
    assert_int_equal(t.productive_ms, 4000 + 3000);
    assert_int_equal(t.lost_ms, 200 + 1100 + 50 + 2000 + 1100);
    char line[256];
    agent_goodput_line(&g, T0 + 12500, line, sizeof line);
    assert_string_equal(line, "goodput 56.0% of 12.5 s (productive 7.0 s); lost 4.45 s in 1 "
                              "restart: detect 0.20 s, stop 1.10 s, rendezvous 0.05 s, start "
                              "2.00 s, redo 1.10 s");
}

/* The pass falls between two looks: placed on the line between the beats around it. */
static void test_redo_interpolated(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    agent_goodput_spawn(&g, T0 + 1, &c);
    agent_goodput_beat(&g, T0 + 1000, 100, &c);
    agent_goodput_failed(&g, T0 + 1000, &c);
    agent_goodput_down(&g, T0 + 1000);
    agent_goodput_spawn(&g, T0 + 1000, &c);
    agent_goodput_beat(&g, T0 + 2000, 60, &c);
    /* steps 60 -> 140 in 2 s: step 100 at 1 s in */
    assert_int_equal(agent_goodput_beat(&g, T0 + 4000, 140, &c), 1);
    assert_int_equal(c.ms[AGENT_GP_START], 1000);
    assert_int_equal(c.ms[AGENT_GP_REDO], 1000);
    agent_goodput_totals_t t;
    agent_goodput_totals(&g, T0 + 4000, &t);
    assert_int_equal(t.productive_ms, 1000); /* 3000..4000 of the second group */
}

/* A restarted group that fails again before catching up: its whole span was redo, and the
 * second restart follows from its last beat. */
static void test_fails_during_redo(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    agent_goodput_spawn(&g, T0 + 1, &c);
    agent_goodput_beat(&g, T0 + 100, 50, &c);
    agent_goodput_failed(&g, T0 + 200, &c);
    agent_goodput_down(&g, T0 + 300);
    agent_goodput_spawn(&g, T0 + 400, &c);
    agent_goodput_beat(&g, T0 + 500, 10, &c);
    agent_goodput_beat(&g, T0 + 700, 20, &c);
    memset(&c, 0, sizeof c);
    assert_int_equal(agent_goodput_failed(&g, T0 + 900, &c), 1);
    assert_int_equal(c.ms[AGENT_GP_START], 100);
    assert_int_equal(c.ms[AGENT_GP_REDO], 200);
    assert_int_equal(g.cur.ms[AGENT_GP_DETECT], 200);
    assert_int_equal(g.cur.failed_step, 20);
    /* A failure no group follows is no restart. */
    assert_int_equal(agent_goodput_end(&g, T0 + 1000, &c), 0);
    assert_int_equal(g.restarts, 1);
    agent_goodput_totals_t t;
    agent_goodput_totals(&g, T0 + 1000, &t);
    assert_int_equal(t.productive_ms, 0);
}

/* A group that never beats: its life until the failure was its start. */
static void test_never_beaten(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    agent_goodput_spawn(&g, T0 + 1, &c);
    agent_goodput_beat(&g, T0 + 100, 5, &c);
    agent_goodput_failed(&g, T0 + 150, &c);
    agent_goodput_down(&g, T0 + 160);
    agent_goodput_spawn(&g, T0 + 170, &c);
    assert_int_equal(agent_goodput_end(&g, T0 + 970, &c), 1);
    assert_int_equal(c.ms[AGENT_GP_START], 800);
    assert_int_equal(c.ms[AGENT_GP_REDO], 0);
}

/* No beat source: stop and rendezvous are known, each restart closes at the next spawn, and the
 * line says there are no step beats. */
static void test_no_beats(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 0);
    agent_goodput_spawn(&g, T0 + 1, &c);
    agent_goodput_failed(&g, T0 + 2000, &c);
    agent_goodput_down(&g, T0 + 2500);
    assert_int_equal(agent_goodput_spawn(&g, T0 + 2600, &c), 1);
    assert_int_equal(c.ms[AGENT_GP_DETECT], -1);
    assert_int_equal(c.ms[AGENT_GP_STOP], 500);
    assert_int_equal(c.ms[AGENT_GP_RENDEZVOUS], 100);
    assert_int_equal(c.ms[AGENT_GP_START], -1);
    assert_int_equal(c.ms[AGENT_GP_REDO], -1);
    agent_goodput_end(&g, T0 + 4000, &c);
    char line[256];
    agent_goodput_line(&g, T0 + 4000, line, sizeof line);
    assert_string_equal(line, "goodput unknown: no step beats (--heartbeat_timeout is off); wall "
                              "4.0 s; lost 0.60 s in 1 restart: stop 0.50 s, rendezvous 0.10 s");
}

/* Beats without a step (output lines): productive from the first beat, redo not known. */
static void test_beats_without_steps(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    agent_goodput_spawn(&g, T0 + 1, &c);
    agent_goodput_beat(&g, T0 + 300, -1, &c);
    agent_goodput_beat(&g, T0 + 200, -1, &c); /* an earlier beat of another worker */
    agent_goodput_beat(&g, T0 + 1200, -1, &c);
    agent_goodput_failed(&g, T0 + 1300, &c);
    agent_goodput_down(&g, T0 + 1400);
    agent_goodput_spawn(&g, T0 + 1500, &c);
    agent_goodput_beat(&g, T0 + 1800, -1, &c);
    agent_goodput_beat(&g, T0 + 2800, -1, &c);
    assert_int_equal(agent_goodput_end(&g, T0 + 3000, &c), 1);
    assert_int_equal(c.ms[AGENT_GP_START], 300);
    assert_int_equal(c.ms[AGENT_GP_REDO], -1);
    agent_goodput_totals_t t;
    agent_goodput_totals(&g, T0 + 3000, &t);
    assert_int_equal(t.productive_ms, 1000 + 1000);
    char line[256];
    agent_goodput_line(&g, T0 + 3000, line, sizeof line);
    assert_string_equal(line, "goodput 66.7% of 3.0 s (productive 2.0 s); lost 0.60 s in 1 "
                              "restart: detect 0.10 s, stop 0.10 s, rendezvous 0.10 s, start "
                              "0.30 s; redo not known: the beats carry no step");
}

/* Beats outside a running group (read after the failure) change nothing; the line is cut. */
static void test_stray_beats_and_cut(void **state) {
    (void)state;
    agent_goodput_t g;
    agent_goodput_cost_t c;
    agent_goodput_init(&g, T0, 1);
    assert_int_equal(agent_goodput_beat(&g, T0 + 5, 3, &c), 0);
    assert_int_equal(g.beaten, 0);
    agent_goodput_spawn(&g, T0 + 10, &c);
    agent_goodput_beat(&g, T0 + 20, 1, &c);
    agent_goodput_failed(&g, T0 + 30, &c);
    assert_int_equal(agent_goodput_beat(&g, T0 + 40, 9, &c), 0);
    assert_int_equal(g.best_before, 1);
    char line[8];
    agent_goodput_line(&g, T0 + 50, line, sizeof line);
    assert_string_equal(line, "goodput");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_group_no_restart), cmocka_unit_test(test_restart_parts),
        cmocka_unit_test(test_redo_interpolated),    cmocka_unit_test(test_fails_during_redo),
        cmocka_unit_test(test_never_beaten),         cmocka_unit_test(test_no_beats),
        cmocka_unit_test(test_beats_without_steps),  cmocka_unit_test(test_stray_beats_and_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
