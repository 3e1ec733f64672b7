/* SPDX-License-Identifier: Apache-2.0
 * goodput_calc.c: the arithmetic of goodput.h, a pure function of the times it is given. */
#include "goodput.h"

#include <stdio.h>
#include <string.h>

const char *const agent_goodput_part_names[AGENT_GP_NPARTS] = {"detect", "stop", "rendezvous",
                                                               "start", "redo"};

void agent_goodput_init(agent_goodput_t *g, uint64_t now, int beats) {
    memset(g, 0, sizeof *g);
    g->begin_ms = now;
    g->beats = beats != 0;
    g->best_before = -1;
    g->top_step = -1;
}

/* The running group's productive span: from its pass (its first beat when its beats carry no
 * step) to its last beat; 0 while it redoes work or before its first beat. */
static uint64_t group_productive(const agent_goodput_t *g) {
    if (g->first_ms == 0)
        return 0;
    uint64_t from = g->pass_ms != 0 ? g->pass_ms : g->top_step < 0 ? g->first_ms : 0;
    return from != 0 && g->last_ms > from ? g->last_ms - from : 0;
}

/* Closes the open restart: its start and redo from the new group's times (pass: when it passed,
 * or 0), then the totals. */
static int restart_close(agent_goodput_t *g, uint64_t now, uint64_t pass,
                         agent_goodput_cost_t *out) {
    agent_goodput_cost_t *c = &g->cur;
    if (!g->beats) {
        c->ms[AGENT_GP_START] = c->ms[AGENT_GP_REDO] = -1;
    } else if (g->first_ms == 0) {
        /* The group never beat: all of its life went into starting. */
        c->ms[AGENT_GP_START] = (int64_t)(now - g->spawn_ms);
        c->ms[AGENT_GP_REDO] = 0;
    } else {
        c->ms[AGENT_GP_START] = (int64_t)(g->first_ms - g->spawn_ms);
        if (pass != 0)
            c->ms[AGENT_GP_REDO] = (int64_t)(pass - g->first_ms);
        else if (g->top_step >= 0) /* it stepped but never caught up: all redo */
            c->ms[AGENT_GP_REDO] = (int64_t)(g->last_ms - g->first_ms);
        else
            c->ms[AGENT_GP_REDO] = -1;
    }
    c->number = ++g->restarts;
    for (int p = 0; p < AGENT_GP_NPARTS; p++) {
        if (c->ms[p] < 0)
            continue;
        g->lost_ms[p] += c->ms[p];
        g->known[p]++;
    }
    g->open = 0;
    *out = *c;
    return 1;
}

static int group_end(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out);

int agent_goodput_spawn(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out) {
    /* A group that ended without failing (its node re-joins after a broken exit barrier). */
    int closed = g->running ? group_end(g, now, out) : 0;
    g->running = 1;
    g->groups++;
    g->spawn_ms = now;
    g->first_ms = g->last_ms = g->pass_ms = g->top_ms = 0;
    g->top_step = -1;
    if (!g->open)
        return closed;
    g->cur.ms[AGENT_GP_RENDEZVOUS] = g->down_ms != 0 ? (int64_t)(now - g->down_ms) : -1;
    return g->beats ? 0 : restart_close(g, now, 0, out);
}

/* When the group passed best_before, given the beat (t, step) at or past it: on the line from
 * the group's highest earlier beat to this one (steps take about the same time each), never
 * before its first beat. */
static uint64_t pass_time(const agent_goodput_t *g, uint64_t t, int64_t step) {
    uint64_t pass = t;
    if (g->top_step >= 0 && g->top_step < g->best_before && step > g->top_step && t > g->top_ms)
        pass = g->top_ms + (uint64_t)((double)(g->best_before - g->top_step) /
                                      (double)(step - g->top_step) * (double)(t - g->top_ms));
    return pass < g->first_ms ? g->first_ms : pass;
}

int agent_goodput_beat(agent_goodput_t *g, uint64_t t, int64_t step, agent_goodput_cost_t *out) {
    if (!g->running || t < g->spawn_ms)
        return 0;
    g->beaten = 1;
    /* Beats of several workers come in the order their files are looked at, not in time. */
    if (g->first_ms == 0 || t < g->first_ms)
        g->first_ms = t;
    if (t > g->last_ms)
        g->last_ms = t;
    if (step < 0)
        return 0;
    g->stepped = 1;
    int closed = 0;
    if (g->pass_ms == 0 && (g->best_before < 0 || step >= g->best_before)) {
        g->pass_ms = g->best_before < 0 ? g->first_ms : pass_time(g, t, step);
        if (g->open)
            closed = restart_close(g, t, g->pass_ms, out);
    }
    if (step > g->top_step) {
        g->top_step = step;
        g->top_ms = t;
    }
    return closed;
}

/* The running group ends at now: its productive span counts, and an open restart it was the
 * new group of closes with what it got to. */
static int group_end(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out) {
    if (!g->running)
        return 0;
    g->running = 0;
    g->productive_ms += group_productive(g);
    if (g->top_step > g->best_before)
        g->best_before = g->top_step;
    return g->open ? restart_close(g, now, g->pass_ms, out) : 0;
}

int agent_goodput_failed(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out) {
    if (!g->running)
        return 0;
    uint64_t last = g->last_ms;
    int64_t top = g->top_step;
    int closed = group_end(g, now, out);
    g->open = 1;
    g->known_ms = now;
    g->down_ms = 0;
    for (int p = 0; p < AGENT_GP_NPARTS; p++)
        g->cur.ms[p] = -1;
    g->cur.ms[AGENT_GP_DETECT] = last != 0 ? (int64_t)(now - last) : -1;
    g->cur.failed_step = top;
    return closed;
}

void agent_goodput_down(agent_goodput_t *g, uint64_t now) {
    if (!g->open || g->down_ms != 0 || g->running)
        return;
    g->down_ms = now;
    g->cur.ms[AGENT_GP_STOP] = (int64_t)(now - g->known_ms);
}

int agent_goodput_end(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out) {
    if (g->end_ms != 0)
        return 0;
    g->end_ms = now;
    int closed = group_end(g, now, out);
    g->open = 0; /* a failure no group followed: the job ended there */
    return closed;
}

void agent_goodput_totals(const agent_goodput_t *g, uint64_t now, agent_goodput_totals_t *t) {
    uint64_t end = g->end_ms != 0 ? g->end_ms : now;
    t->wall_ms = end > g->begin_ms ? end - g->begin_ms : 0;
    t->productive_ms = g->productive_ms + (g->running ? group_productive(g) : 0);
    t->lost_ms = 0;
    for (int p = 0; p < AGENT_GP_NPARTS; p++)
        t->lost_ms += (uint64_t)g->lost_ms[p];
    t->ratio = t->wall_ms > 0 ? (double)t->productive_ms / (double)t->wall_ms : 0;
}

/* Appends to out at *len, cut at cap. */
#define LINE_ADD(...)                                                                              \
    do {                                                                                           \
        if (*len < cap) {                                                                          \
            int n_ = snprintf(out + *len, cap - *len, __VA_ARGS__);                                \
            *len = n_ < 0 ? cap : *len + (size_t)n_ > cap ? cap : *len + (size_t)n_;               \
        }                                                                                          \
    } while (0)

/* "; lost 28.05 s in 3 restarts: detect 0.20 s, stop 1.10 s, ..." (the parts known), or
 * "; no restarts". */
static void restarts_text(const agent_goodput_t *g, const agent_goodput_totals_t *t, char *out,
                          size_t cap, size_t *len) {
    if (g->restarts == 0) {
        LINE_ADD("; no restarts");
        return;
    }
    LINE_ADD("; lost %.2f s in %d restart%s:", (double)t->lost_ms / 1000.0, g->restarts,
             g->restarts == 1 ? "" : "s");
    const char *sep = " ";
    for (int p = 0; p < AGENT_GP_NPARTS; p++) {
        if (g->known[p] == 0)
            continue;
        LINE_ADD("%s%s %.2f s", sep, agent_goodput_part_names[p], (double)g->lost_ms[p] / 1000.0);
        sep = ", ";
    }
}

void agent_goodput_line(const agent_goodput_t *g, uint64_t now, char *out, size_t cap) {
    if (cap == 0)
        return;
    out[0] = '\0';
    size_t l = 0, *len = &l;
    agent_goodput_totals_t t;
    agent_goodput_totals(g, now, &t);
    if (!g->beats || !g->beaten) {
        LINE_ADD("goodput unknown: no step beats%s; wall %.1f s",
                 g->beats ? " came" : " (--heartbeat_timeout is off)", (double)t.wall_ms / 1000.0);
        restarts_text(g, &t, out, cap, len);
        return;
    }
    LINE_ADD("goodput %.1f%% of %.1f s (productive %.1f s)", t.ratio * 100.0,
             (double)t.wall_ms / 1000.0, (double)t.productive_ms / 1000.0);
    restarts_text(g, &t, out, cap, len);
    if (!g->stepped && g->restarts > 0)
        LINE_ADD("; redo not known: the beats carry no step");
}
