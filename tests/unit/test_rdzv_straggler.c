/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of straggler detection (rendezvous/round/rdzv_straggler.c) and of TIMING in the
 * round machine: a slow rank named after exactly `windows` windows above the threshold, with when
 * it started; one just under the threshold never; clearing after as many windows at or below, and
 * a run interrupted by one fast window starting over; noisy inputs that must name nobody
 * (independent jitter, single spikes, alternate slow windows, tiny steps, too few steps, one rank
 * alone); the report's parser; and in a run: TIMING from a non-member, for another round or
 * for another node's ranks refused, warn naming without acting, exclude ending the round when a
 * spare waits (the host refused as a straggler at its next JOIN, STATUS's record saying so) and
 * keeping the host without one. */
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
#include "rdzv_straggler.h"

#define WIN 1000

static void det_new(rdzv_strag_t *st, double threshold, int windows) {
    rdzv__strag_init(st);
    st->cfg.threshold = threshold;
    st->cfg.windows = windows;
    st->cfg.window_ms = WIN;
    rdzv__strag_reset(st, 0, 0);
}

/* One window: rank i computed per_step_us[i] per step over steps steps; closes it at *t. Returns
 * the changes (ch holds them). */
static size_t window(rdzv_strag_t *st, const double *per_step_us, size_t n, uint64_t steps,
                     uint64_t *t, rdzv_strag_change_t *ch) {
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rdzv__strag_add(st, (int64_t)i, (int64_t)i / 2, "h",
                                         (uint64_t)(per_step_us[i] * steps), steps),
                         0);
    *t += WIN;
    return rdzv__strag_window(st, *t, ch, 16);
}

static void test_named_after_windows(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 3);
    double v[6] = {10000, 10100, 9900, 15000, 10050, 9950}; /* rank 3 at 1.5x */
    rdzv_strag_change_t ch[16];
    uint64_t t = 0;
    assert_int_equal(window(&st, v, 6, 20, &t, ch), 0);
    assert_int_equal(window(&st, v, 6, 20, &t, ch), 0);
    assert_int_equal(window(&st, v, 6, 20, &t, ch), 1);
    assert_int_equal(ch[0].rank, 3);
    assert_int_equal(ch[0].named, 1);
    assert_int_equal(st.v[3].since_ms, 0); /* the start of its first slow window */
    assert_true(st.v[3].ratio > 1.49 && st.v[3].ratio < 1.51);
    assert_int_equal(st.named, 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(window(&st, v, 6, 20, &t, ch), 0); /* named once */
    /* A window not yet over changes nothing. */
    assert_int_equal(rdzv__strag_window(&st, t + WIN - 1, ch, 16), 0);
    rdzv__strag_free(&st);
}

static void test_threshold(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 2);
    double under[4] = {10000, 10000, 11900, 10000}, over[4] = {10000, 10000, 12300, 10000};
    rdzv_strag_change_t ch[16];
    uint64_t t = 0;
    for (int i = 0; i < 20; i++)
        assert_int_equal(window(&st, under, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, over, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, over, 4, 10, &t, ch), 1);
    assert_int_equal(ch[0].rank, 2);
    rdzv__strag_free(&st);
}

static void test_clears(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 3);
    double slow[4] = {10000, 20000, 10000, 10000}, even[4] = {10000, 10000, 10000, 10000};
    rdzv_strag_change_t ch[16];
    uint64_t t = 0;
    for (int i = 0; i < 3; i++)
        window(&st, slow, 4, 10, &t, ch);
    assert_int_equal(st.named, 1);
    /* Two good windows and a slow one: the run of good ones starts over. */
    assert_int_equal(window(&st, even, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, even, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, slow, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, even, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, even, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, even, 4, 10, &t, ch), 1);
    assert_int_equal(ch[0].rank, 1);
    assert_int_equal(ch[0].named, 0);
    assert_int_equal(st.named, 0);
    /* Slow again: named again after three windows, since the new start. */
    uint64_t again = t;
    for (int i = 0; i < 3; i++)
        window(&st, slow, 4, 10, &t, ch);
    assert_int_equal(st.named, 1);
    assert_int_equal(st.v[1].since_ms, again);
    rdzv__strag_free(&st);
}

/* A deterministic generator: noise in [-1, 1). */
static double noise(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

static void test_noise_names_nobody(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 3);
    rdzv_strag_change_t ch[16];
    uint64_t t = 0, seed = 42;
    double v[16];
    /* Independent jitter of +-10% on every rank in every window. */
    for (int w = 0; w < 500; w++) {
        for (int i = 0; i < 16; i++)
            v[i] = 10000 * (1 + 0.1 * noise(&seed));
        assert_int_equal(window(&st, v, 16, 20, &t, ch), 0);
    }
    /* Single-window spikes (a pause of one process), 3x, a random rank at a time, and a rank
     * slow every other window: never as many consecutive windows as it takes. */
    for (int w = 0; w < 300; w++) {
        for (int i = 0; i < 16; i++)
            v[i] = 10000 * (1 + 0.05 * noise(&seed));
        if (w % 2 == 0) {
            v[(size_t)((noise(&seed) + 1) * 8) % 16] *= 3;
            v[5] *= 2;
        }
        assert_int_equal(window(&st, v, 16, 20, &t, ch), 0);
    }
    assert_int_equal(st.named, 0);
    rdzv__strag_free(&st);
}

/* Steps of a few microseconds: large ratios, no cost worth naming. */
static void test_tiny_steps(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 2);
    double v[4] = {20, 20, 60, 20};
    rdzv_strag_change_t ch[16];
    uint64_t t = 0;
    for (int i = 0; i < 10; i++)
        assert_int_equal(window(&st, v, 4, 100, &t, ch), 0);
    rdzv__strag_free(&st);
}

/* Too few steps in a window, or one rank alone: nobody is judged, and counts stay. */
static void test_too_little_to_judge(void **state) {
    (void)state;
    rdzv_strag_t st;
    det_new(&st, 1.2, 2);
    double v[4] = {10000, 10000, 30000, 10000};
    rdzv_strag_change_t ch[16];
    uint64_t t = 0;
    for (int i = 0; i < 10; i++)
        assert_int_equal(window(&st, v, 4, 1, &t, ch), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(window(&st, v + 2, 1, 50, &t, ch), 0);
    /* Judged windows count; the unjudged one between them does not break the run. */
    assert_int_equal(window(&st, v, 4, 10, &t, ch), 0);
    assert_int_equal(window(&st, v, 4, 1, &t, ch), 0);
    assert_int_equal(window(&st, v, 4, 10, &t, ch), 1);
    /* Ranks out of range are refused. */
    assert_int_equal(rdzv__strag_add(&st, -1, 0, "h", 1, 1), -EINVAL);
    assert_int_equal(rdzv__strag_add(&st, RDZV_STRAG_MAX_RANKS, 0, "h", 1, 1), -EINVAL);
    rdzv__strag_free(&st);
}

static void test_parse(void **state) {
    (void)state;
    rdzv_strag_cfg_t cfg = {0};
    rdzv_strag_entry_t e[4];
    assert_int_equal(
        rdzv__strag_parse("w=2000 t=1500 n=4 a=exclude 3:100:20:5 7:0:0:0", &cfg, e, 4), 2);
    assert_int_equal(cfg.window_ms, 2000);
    assert_true(cfg.threshold > 1.49 && cfg.threshold < 1.51);
    assert_int_equal(cfg.windows, 4);
    assert_int_equal(cfg.exclude, 1);
    assert_true(e[0].rank == 3 && e[0].compute_us == 100 && e[0].wait_us == 20 && e[0].steps == 5 &&
                e[1].rank == 7);
    assert_int_equal(rdzv__strag_parse("w=1000 t=1200 n=3 a=warn", &cfg, e, 4), 0);
    assert_int_equal(cfg.exclude, 0);
    const char *bad[] = {"",
                         "w=1000 t=1200 n=3",
                         "w=1000 t=1000 n=3 a=warn",
                         "w=10 t=1200 n=3 a=warn",
                         "w=1000 t=1200 n=0 a=warn",
                         "w=1000 t=1200 n=3 a=kill",
                         "t=1200 w=1000 n=3 a=warn",
                         "w=1000 t=1200 n=3 a=warn 1:2:3",
                         "w=1000 t=1200 n=3 a=warn 1:2:3:4:5",
                         "w=1000 t=1200 n=3 a=warn 1:2::4",
                         "w=1000 t=1200 n=3 a=warn 1:-2:3:4",
                         "w=1000 t=1200 n=3 a=warn 0:1:1:1 x",
                         "w=1000 t=1200 n=3 a=warn 1048576:1:1:1",
                         "w=1000 t=1200 n=3 a=warn 0:1:1:1 1:1:1:1 2:1:1:1 3:1:1:1 4:1:1:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (rdzv__strag_parse(bad[i], &cfg, e, 4) != -EINVAL)
            fail_msg("'%s' accepted", bad[i]);
}

/* ---- in a run ---- */

/* Member id (host h<id>, 2 ranks: 2(id-1), 2(id-1)+1) reports per-step compute us for both of
 * its ranks over 10 steps; the lines the store logs are appended to log (cap bytes). */
static int report(fx_t *f, uint64_t id, int64_t round, const char *action, double us, uint64_t now,
                  char *log, size_t cap) {
    char text[256], lines[512];
    int64_t r0 = 2 * ((int64_t)id - 1);
    snprintf(text, sizeof text, "w=%d t=1200 n=2 a=%s %lld:%llu:0:10 %lld:%llu:0:10", WIN, action,
             (long long)r0, (unsigned long long)(us * 10), (long long)r0 + 1,
             (unsigned long long)(us * 10));
    int rc = rdzv_runs_timing(f->rs, "job", id, round, text, now, &f->out, lines, sizeof lines);
    size_t len = strlen(log);
    snprintf(log + len, cap - len, "%s\n", lines);
    return rc;
}

/* Three nodes report once per window, each a millisecond after the other: h1 and h3 at 10 ms,
 * h2 at us per step. Every window holds one report of each (the first report opens it, h1's
 * next closes it). */
static void windows_of(fx_t *f, const char *action, double us, int n, uint64_t *t, char *log,
                       size_t cap) {
    for (int w = 0; w < n; w++) {
        assert_int_equal(report(f, 1, 0, action, 10000, *t + 1, log, cap), 0);
        assert_int_equal(report(f, 3, 0, action, 10000, *t + 2, log, cap), 0);
        assert_int_equal(report(f, 2, 0, action, us, *t + 3, log, cap), 0);
        *t += WIN;
    }
}

/* h2 at 16 ms: named at h1's report that closes the second window (t + 1). */
static void slow_h2(fx_t *f, const char *action, uint64_t *t, char *log, size_t cap) {
    log[0] = '\0';
    windows_of(f, action, 16000, 2, t, log, cap);
    assert_int_equal(report(f, 1, 0, action, 10000, *t + 1, log, cap), 0);
}

static void test_run_refuses_strangers(void **state) {
    fx_t *f = *state;
    form(f, 2, 2, 2, 0);
    join_ok(f->rs, "job", 3, -1, 2, 2, 10, &f->out); /* a spare */
    char log[1024] = "";
    assert_int_equal(report(f, 3, 0, "warn", 1, 20, log, sizeof log), -ENOENT);
    assert_int_equal(report(f, 1, 1, "warn", 1, 20, log, sizeof log), -ENOENT);
    assert_int_equal(report(f, 9, 0, "warn", 1, 20, log, sizeof log), -ENOENT);
    assert_int_equal(rdzv_runs_timing(f->rs, "job", 1, 0, "nonsense", 20, &f->out, log, sizeof log),
                     -EINVAL);
    assert_int_equal(f->out.n, 0);
}

static void test_run_warn(void **state) {
    fx_t *f = *state;
    form(f, 3, 3, 3, 0);
    join_ok(f->rs, "job", 4, -1, 3, 3, 10, &f->out); /* a spare, not used by warn */
    rdzv_actions_reset(&f->out);
    char log[2048];
    uint64_t t = 0;
    slow_h2(f, "warn", &t, log, sizeof log);
    if (strstr(log, "straggler: rank 2 on node 1 (h2): 1.60x") == NULL ||
        strstr(log, "straggler: rank 3 on node 1 (h2)") == NULL)
        fail_msg("log '%s'", log);
    assert_int_equal(f->out.n, 0);
    json_t *o = status_of(f, t + 10);
    json_t *sg = json_object_get(o, "stragglers");
    assert_int_equal(json_array_size(sg), 2);
    json_t *s0 = json_array_get(sg, 0);
    assert_string_equal(json_string_value(json_object_get(s0, "host")), "h2");
    assert_int_equal(json_integer_value(json_object_get(s0, "rank")), 2);
    /* Since the first window opened, at h1's first report (1). */
    assert_int_equal(json_integer_value(json_object_get(s0, "since_ms")), t + 10 - 1);
    assert_true(json_real_value(json_object_get(s0, "ratio")) > 1.59);
    json_decref(o);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_stragglers_json(f->rs, "job", t, &b), 0);
    assert_non_null(strstr((const char *)b.data, "\"host\":\"h2\""));
    ddp_buf_free(&b);
    /* h2 recovers: cleared after two windows. */
    log[0] = '\0';
    assert_int_equal(report(f, 3, 0, "warn", 10000, t + 2, log, sizeof log), 0);
    assert_int_equal(report(f, 2, 0, "warn", 10000, t + 3, log, sizeof log), 0);
    t += WIN;
    windows_of(f, "warn", 10000, 2, &t, log, sizeof log);
    if (strstr(log, "straggler cleared: rank 2") == NULL)
        fail_msg("log '%s'", log);
    o = status_of(f, t);
    assert_int_equal(json_array_size(json_object_get(o, "stragglers")), 0);
    json_decref(o);
}

static void test_run_exclude_with_spare(void **state) {
    fx_t *f = *state;
    form(f, 3, 2, 3, 0);
    join_ok(f->rs, "job", 4, -1, 2, 3, 10, &f->out); /* the spare */
    rdzv_actions_reset(&f->out);
    char log[2048];
    uint64_t t = 0;
    slow_h2(f, "exclude", &t, log, sizeof log);
    if (strstr(log, "host h2 excluded as a straggler") == NULL)
        fail_msg("log '%s'", log);
    const rdzv_action_t *end = find_act(&f->out, RDZV_ACT_END_ROUND, 0);
    assert_non_null(end);
    assert_non_null(strstr(end->text, "h2 excluded as a straggler"));
    /* The exclusion is a record that outlives the store (etcd keeps it). */
    const rdzv_action_t *rec = find_act(&f->out, RDZV_ACT_HOST_RECORD, 0);
    assert_non_null(rec);
    assert_string_equal(rec->host, "h2");
    assert_true(rec->excluded);
    assert_non_null(strstr(rec->text, "straggler"));
    /* The round that named it ended: every node still hears of it in the reply. */
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_stragglers_json(f->rs, "job", t + 1, &b), 0);
    if (strstr((const char *)b.data, "\"host\":\"h2\"") == NULL)
        fail_msg("stragglers after the exclusion: %.*s", (int)b.len, (const char *)b.data);
    ddp_buf_free(&b);
    json_t *o = status_of(f, t);
    json_t *h = host_rec(o, "h2");
    assert_non_null(h);
    assert_true(json_is_true(json_object_get(h, "excluded")));
    assert_true(json_is_true(json_object_get(h, "straggler")));
    assert_non_null(strstr(json_string_value(json_object_get(h, "last_failure")), "straggler"));
    assert_int_equal(json_integer_value(json_object_get(h, "failures")), 0);
    json_decref(o);
    /* Its JOIN is refused, naming why; the others and the spare form the next round. */
    ddp_err_t err = {0};
    assert_int_equal(join_host(f, 2, "h2", 2, 3, 0, t + 1, &err), DDP_ERDZV_EXCLUDED);
    assert_non_null(strstr(err.text, "host h2 is excluded: straggler: rank 2 on node 1 (h2)"));
    rdzv_actions_reset(&f->out);
    assert_int_equal(join_host(f, 1, "h1", 2, 3, 0, t + 2, &err), 0);
    assert_int_equal(join_host(f, 3, "h3", 2, 3, 0, t + 3, &err), 0);
    assert_int_equal(rdzv_runs_tick(f->rs, t + 5000, &f->out), 0);
    assert_int_equal(count_kind(&f->out, RDZV_ACT_REPLY_OK), 3);
    assert_non_null(find_act(&f->out, RDZV_ACT_REPLY_OK, 4));
}

static void test_run_exclude_without_spare(void **state) {
    fx_t *f = *state;
    form(f, 3, 2, 3, 0);
    char log[2048];
    uint64_t t = 0;
    slow_h2(f, "exclude", &t, log, sizeof log);
    if (strstr(log, "host h2 stays: no spare") == NULL)
        fail_msg("log '%s'", log);
    /* Every node hears why it stays. */
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_runs_stragglers_json(f->rs, "job", t, &b), 0);
    if (strstr((const char *)b.data, "\"kept\":\"host h2 stays: no spare to take its place\"") ==
        NULL)
        fail_msg("stragglers: %.*s", (int)b.len, (const char *)b.data);
    ddp_buf_free(&b);
    assert_int_equal(f->out.n, 0);
    json_t *o = status_of(f, t);
    assert_null(host_rec(o, "h2"));
    assert_string_equal(json_string_value(json_object_get(o, "state")), "RUNNING");
    json_decref(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_after_windows),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_clears),
        cmocka_unit_test(test_noise_names_nobody),
        cmocka_unit_test(test_tiny_steps),
        cmocka_unit_test(test_too_little_to_judge),
        cmocka_unit_test(test_parse),
        cmocka_unit_test_setup_teardown(test_run_refuses_strangers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_warn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_exclude_with_spare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_exclude_without_spare, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
