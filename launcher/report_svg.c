/* SPDX-License-Identifier: Apache-2.0
 * report_svg.c: draws report.c's timeline as one SVG. Top: the job, its goodput and root cause;
 * a time axis; one lane per agent with its worker groups (a bar per attempt, labelled with the
 * round), the parts of each restart under them (detect, stop and rendezvous end at the next
 * group's spawn, start and redo follow it), spans as a spare or excluded, and numbered marks
 * (failures, hangs, stragglers, exclusions, health checks, the store); under it a legend and the
 * numbered notes in full. Only SVG's own shapes and the generic sans-serif font: nothing is
 * fetched, nothing runs. Text from the events (host names, reasons) is XML-escaped, and what XML
 * cannot hold (control characters) becomes a space. */
#include "launch_report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ddp_buf.h"

/* The picture's geometry, in px. */
#define SVG_W 1280
#define LABEL_W 220 /* the lanes' names */
#define RIGHT_PAD 30
#define PLOT_W (SVG_W - LABEL_W - RIGHT_PAD)
#define LANE_H 78
#define NOTE_H 17
/* Text wider than this many characters is cut (with an ellipsis) where space is short. */
#define LABEL_CHARS 28
#define NOTE_CHARS 180
/* An estimate of the width of one character of the 11 px text inside the bars. */
#define CHAR_PX 6.2

const char *const launch_report_part_names[REPORT_NPARTS] = {"detect", "stop", "rendezvous",
                                                             "start", "redo"};

static const char *const group_fill[] = {"#4e79a7", "#59a14f", "#76b7b2",
                                         "#edc948", "#b07aa1", "#9c755f"};
static const char *const part_fill[REPORT_NPARTS] = {"#e15759", "#f28e2b", "#9467bd", "#17becf",
                                                     "#bcbd22"};
static const char *const mark_fill[REPORT_NMARKS] = {"#d62728", "#a05d00", "#999999",
                                                     "#8c564b", "#222222", "#e377c2",
                                                     "#7f7f7f", "#bcbd22", "#222222"};
static const char *const mark_name[REPORT_NMARKS] = {"failure",   "hang",        "round ended",
                                                     "straggler", "excluded",    "health check",
                                                     "store",     "output lost", "end"};

typedef struct svg {
    ddp_buf_t *b;
    int err;
    const report_t *r;
    double span; /* ms shown across the plot */
} svg_t;

static void put(svg_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(svg_t *s, const char *fmt, ...) {
    if (s->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || ddp_buf_reserve(s->b, (size_t)n + 1) < 0) {
        s->err = -ENOMEM;
        return;
    }
    va_start(ap, fmt);
    vsnprintf((char *)s->b->data + s->b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->b->len += (size_t)n;
}

/* text, at most max characters (0: all; cut ones end in an ellipsis), XML-escaped. */
static void text(svg_t *s, const char *t, size_t max) {
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)t; *p != '\0' && !s->err; p++) {
        if ((*p & 0xC0) != 0x80 && max > 0 && ++chars > max) {
            put(s, "\xe2\x80\xa6"); /* U+2026 */
            return;
        }
        switch (*p) {
        case '&': put(s, "&amp;"); break;
        case '<': put(s, "&lt;"); break;
        case '>': put(s, "&gt;"); break;
        case '"': put(s, "&quot;"); break;
        case '\'': put(s, "&#39;"); break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                put(s, " ");
            } else if (p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf)) {
                put(s, "?"); /* U+FFFE, U+FFFF: no XML character */
                p += 2;
            } else if (ddp_buf_append(s->b, p, 1) < 0) {
                s->err = -ENOMEM;
            }
        }
    }
}

static double x_of(const svg_t *s, int64_t t) {
    double x = LABEL_W + (double)(t - s->r->t0) * PLOT_W / s->span;
    return x < LABEL_W ? LABEL_W : x > LABEL_W + PLOT_W ? LABEL_W + PLOT_W : x;
}

/* "12.3 s", "1 min 2 s" for a duration in ms. */
static void dur(char *out, size_t cap, double ms) {
    if (ms < 60000)
        snprintf(out, cap, "%.*f s", ms < 10000 ? 2 : 1, ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, cap, "%d min %d s", (int)(ms / 60000), (int)(ms / 1000) % 60);
    else
        snprintf(out, cap, "%d h %d min", (int)(ms / 3600000), (int)(ms / 60000) % 60);
}

/* The job's goodput: the productive time of the agents that measured it over their wall time
 * (each agent measures its own node; one node's figure is the job's). */
static void goodput_line(svg_t *s) {
    const report_t *r = s->r;
    long long wall = 0, prod = 0;
    int agents = 0, restarts = 0;
    for (size_t i = 0; i < r->nlanes; i++) {
        const report_lane_t *l = &r->lanes[i];
        restarts |= l->ncosts > 0;
        if (!l->has_goodput || l->ratio < 0)
            continue;
        wall += l->wall_ms;
        prod += l->productive_ms;
        agents++;
    }
    char a[32], b[32];
    if (agents == 0) {
        put(s, "goodput unknown: no agent measured it (step beats need --heartbeat_timeout; the "
               "shutdown event carries the figure)");
    } else {
        dur(a, sizeof a, (double)prod);
        dur(b, sizeof b, (double)wall);
        put(s, "goodput %.1f%% (productive %s of %s",
            100.0 * (double)prod / (double)(wall ? wall : 1), a, b);
        put(s, agents > 1 ? ", over %d agents)" : ")", agents);
    }
    if (restarts > 0) {
        /* Each agent measures every restart of its node: the mean over the agents that did. */
        long long parts[REPORT_NPARTS] = {0}, lost = 0;
        size_t most = 0, measured = 0;
        for (size_t i = 0; i < r->nlanes; i++) {
            const report_lane_t *l = &r->lanes[i];
            most = l->ncosts > most ? l->ncosts : most;
            measured += l->ncosts > 0;
            for (size_t k = 0; k < l->ncosts; k++) {
                lost += l->costs[k].lost_ms;
                for (int p = 0; p < REPORT_NPARTS; p++)
                    parts[p] += l->costs[k].ms[p] > 0 ? l->costs[k].ms[p] : 0;
            }
        }
        dur(a, sizeof a, (double)lost / (double)measured);
        put(s, "</text>\n<text x=\"16\" y=\"76\" font-size=\"14\">lost %s in %zu restart%s", a,
            most, most == 1 ? "" : "s");
        if (measured > 1)
            put(s, " (mean of %zu agents)", measured);
        put(s, ":");
        for (int p = 0; p < REPORT_NPARTS; p++) {
            dur(a, sizeof a, (double)parts[p] / (double)measured);
            put(s, "%s %s %s", p ? "," : "", launch_report_part_names[p], a);
        }
    } else {
        put(s, "</text>\n<text x=\"16\" y=\"76\" font-size=\"14\">no restarts");
    }
}

static void header(svg_t *s, int *y) {
    const report_t *r = s->r;
    put(s, "<text x=\"16\" y=\"30\" font-size=\"19\" font-weight=\"bold\">");
    if (r->nruns == 1) {
        put(s, "ddprun job ");
        text(s, r->runs[0], 60);
    } else {
        put(s, "ddprun: %zu runs", r->nruns);
    }
    put(s, "</text>\n<text x=\"16\" y=\"54\" font-size=\"15\">");
    goodput_line(s);
    char when[40], span[32];
    time_t t0 = (time_t)(r->t0 / 1000);
    struct tm tm;
    gmtime_r(&t0, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    dur(span, sizeof span, (double)(r->t1 - r->t0));
    put(s,
        "</text>\n<text x=\"16\" y=\"96\" font-size=\"12\" fill=\"#444\">from %s, %s; %zu "
        "agent%s; %zu events",
        when, span, r->nlanes, r->nlanes == 1 ? "" : "s", r->events);
    put(s, "</text>\n");
    *y = 96;
    for (size_t i = 0; i < r->ncauses && i < 3; i++) {
        *y += 18;
        put(s, "<text x=\"16\" y=\"%d\" font-size=\"13\" fill=\"#b00\">root cause: ", *y);
        text(s, r->causes[i], NOTE_CHARS);
        put(s, "</text>\n");
    }
}

/* The time axis at y, with its ticks down to bottom. */
static void axis(svg_t *s, int y, int bottom) {
    static const double steps[] = {100,     200,     500,     1000,     2000,     5000,    10000,
                                   15000,   30000,   60000,   120000,   300000,   600000,  900000,
                                   1800000, 3600000, 7200000, 21600000, 43200000, 86400000};
    double step = steps[sizeof steps / sizeof steps[0] - 1];
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (s->span / steps[i] <= 12) {
            step = steps[i];
            break;
        }
    put(s, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LABEL_W, y,
        LABEL_W + PLOT_W, y);
    for (double ms = 0; ms <= s->span + 0.5; ms += step) {
        double x = LABEL_W + ms * PLOT_W / s->span;
        char lab[32];
        if (step < 1000)
            snprintf(lab, sizeof lab, "+%.1f s", ms / 1000);
        else if (step < 60000)
            snprintf(lab, sizeof lab, "+%.0f s", ms / 1000);
        else if (step < 3600000)
            snprintf(lab, sizeof lab, "+%.0f min", ms / 60000);
        else
            snprintf(lab, sizeof lab, "+%.0f h", ms / 3600000);
        put(s, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>", x, y, x,
            bottom);
        put(s,
            "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" "
            "fill=\"#333\">%s</text>\n",
            x, y - 5, lab);
    }
}

/* The dashed line of each round's first join, labelled under the lanes. */
static void rounds(svg_t *s, int top, int bottom) {
    double last_x = -100;
    for (int i = 0; i < REPORT_ROUNDS_MAX; i++) {
        if (s->r->round_t[i] == 0)
            continue;
        double x = x_of(s, s->r->round_t[i]);
        put(s,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\" "
            "stroke-dasharray=\"3,3\"><title>round %d: first join</title></line>\n",
            x, top, x, bottom, i);
        if (x - last_x >= 36) {
            put(s,
                "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\" "
                "fill=\"#555\">round %d</text>\n",
                x, bottom + 12, i);
            last_x = x;
        }
    }
}

/* A bar from t0 to t1 at y (h px high), at least 1 px wide; title: its tooltip. */
static void bar(svg_t *s, int64_t t0, int64_t t1, int y, int h, const char *fill,
                const char *title) {
    double x0 = x_of(s, t0), x1 = x_of(s, t1);
    put(s, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">", x0, y,
        x1 - x0 < 1 ? 1 : x1 - x0, h, fill);
    if (title != NULL) {
        put(s, "<title>");
        text(s, title, 0);
        put(s, "</title>");
    }
    put(s, "</rect>\n");
}

static void lane_label(svg_t *s, const report_lane_t *l, int y) {
    put(s, "<text x=\"12\" y=\"%d\" font-size=\"14\" font-weight=\"bold\"><title>", y + 20);
    text(s, l->host, 0);
    put(s, "</title>");
    text(s, l->host, LABEL_CHARS - 4);
    put(s,
        "</text>\n<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#555\">node %lld, pid "
        "%lld</text>\n",
        y + 37, l->node_rank, l->pid);
    put(s, "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#333\">", y + 53);
    text(s, l->result != NULL ? l->result : "no shutdown event", LABEL_CHARS);
    if (l->has_goodput && l->ratio >= 0)
        put(s, ", goodput %.1f%%", 100.0 * l->ratio);
    put(s, "</text>\n");
    if (l->ncosts > 0)
        put(s, "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#333\">%zu restart%s</text>\n",
            y + 68, l->ncosts, l->ncosts == 1 ? "" : "s");
}

static void lane_groups(svg_t *s, const report_lane_t *l, int y) {
    char tip[160], lab[64];
    for (size_t k = 0; k < l->nspares; k++) {
        snprintf(tip, sizeof tip, "a spare: waiting for a place");
        bar(s, l->spares[k].t0, l->spares[k].t1, y + 6, 22, "url(#spare)", tip);
        double w = x_of(s, l->spares[k].t1) - x_of(s, l->spares[k].t0);
        if (w > 40)
            put(s, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#333\">spare</text>\n",
                x_of(s, l->spares[k].t0) + 4, y + 21);
    }
    if (l->excluded_at != 0) {
        int64_t end = s->r->t1 > l->excluded_at ? s->r->t1 : l->excluded_at;
        bar(s, l->excluded_at, end, y + 6, 22, "url(#excluded)", "excluded (quarantine)");
        if (x_of(s, end) - x_of(s, l->excluded_at) > 60)
            put(s,
                "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" font-weight=\"bold\" "
                "fill=\"#000\">excluded</text>\n",
                x_of(s, l->excluded_at) + 4, y + 21);
    }
    for (size_t k = 0; k < l->ngroups; k++) {
        const report_group_t *g = &l->groups[k];
        snprintf(tip, sizeof tip, "attempt %lld, round %lld, world size %lld%s", g->attempt,
                 g->round, g->world_size, g->failed ? ": failed" : "");
        bar(s, g->t0, g->t1, y + 6, 22, group_fill[(size_t)g->attempt % 6], tip);
        double x0 = x_of(s, g->t0), x1 = x_of(s, g->t1);
        if (g->failed)
            put(s, "<rect x=\"%.1f\" y=\"%d\" width=\"3\" height=\"22\" fill=\"#d62728\"/>\n",
                x1 - 3, y + 6);
        snprintf(lab, sizeof lab, "attempt %lld, round %lld", g->attempt, g->round);
        if (x1 - x0 < (double)strlen(lab) * CHAR_PX + 8)
            snprintf(lab, sizeof lab, "a%lld r%lld", g->attempt, g->round);
        if (x1 - x0 >= (double)strlen(lab) * CHAR_PX + 8)
            put(s, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#fff\">%s</text>\n", x0 + 4,
                y + 21, lab);
    }
}

/* Each restart's parts, on one line under the groups: detect, stop, rendezvous end at the
 * anchor (the next spawn), start and redo follow it. */
static void lane_costs(svg_t *s, const report_lane_t *l, int y) {
    char tip[96], d[32];
    for (size_t k = 0; k < l->ncosts; k++) {
        const report_cost_t *c = &l->costs[k];
        int64_t t = c->anchor;
        for (int p = REPORT_RENDEZVOUS; p >= REPORT_DETECT; p--) {
            if (c->ms[p] < 0)
                continue;
            dur(d, sizeof d, (double)c->ms[p]);
            snprintf(tip, sizeof tip, "restart %lld: %s %s", c->number, launch_report_part_names[p],
                     d);
            bar(s, t - c->ms[p], t, y + 31, 10, part_fill[p], tip);
            t -= c->ms[p];
        }
        t = c->anchor;
        for (int p = REPORT_START; p < REPORT_NPARTS; p++) {
            if (c->ms[p] < 0)
                continue;
            dur(d, sizeof d, (double)c->ms[p]);
            snprintf(tip, sizeof tip, "restart %lld: %s %s", c->number, launch_report_part_names[p],
                     d);
            bar(s, t, t + c->ms[p], y + 31, 10, part_fill[p], tip);
            t += c->ms[p];
        }
    }
}

/* A mark's shape, centred on (x, cy). */
static void shape(svg_t *s, report_mark_kind_t kind, double x, int cy) {
    const char *f = mark_fill[kind];
    switch (kind) {
    case REPORT_MARK_FAILURE:
    case REPORT_MARK_HUNG:
        put(s, "<path d=\"M%.1f %d l-6 -9 h12 z\" fill=\"%s\"/>", x, cy + 5, f);
        break;
    case REPORT_MARK_STRAGGLER:
        put(s, "<path d=\"M%.1f %d l6 6 l-6 6 l-6 -6 z\" fill=\"%s\"/>", x, cy - 6, f);
        break;
    case REPORT_MARK_EXCLUDED:
        put(s, "<path d=\"M%.1f %d l10 10 m0 -10 l-10 10\" stroke=\"%s\" stroke-width=\"3\"/>",
            x - 5, cy - 5, f);
        break;
    case REPORT_MARK_HEALTH:
        put(s, "<circle cx=\"%.1f\" cy=\"%d\" r=\"5\" fill=\"%s\"/>", x, cy, f);
        break;
    case REPORT_MARK_ROUND_END:
        put(s, "<rect x=\"%.1f\" y=\"%d\" width=\"2\" height=\"12\" fill=\"%s\"/>", x - 1, cy - 6,
            f);
        break;
    case REPORT_MARK_END:
        put(s, "<rect x=\"%.1f\" y=\"%d\" width=\"3\" height=\"26\" fill=\"%s\"/>", x - 1.5,
            cy - 44, f);
        break;
    default:
        put(s, "<rect x=\"%.1f\" y=\"%d\" width=\"9\" height=\"9\" fill=\"%s\"/>", x - 4.5, cy - 4,
            f);
    }
}

static void lane_marks(svg_t *s, const report_lane_t *l, int y) {
    double row_end[2] = {-100, -100};
    for (size_t k = 0; k < l->nmarks; k++) {
        const report_mark_t *m = &l->marks[k];
        double x = x_of(s, m->t);
        put(s, "<g><title>");
        if (m->note > 0)
            text(s, s->r->notes[m->note - 1].text, 0);
        else
            put(s, "%s", mark_name[m->kind]);
        put(s, "</title>");
        shape(s, m->kind, x, y + 50);
        put(s, "</g>\n");
        if (m->note <= 0)
            continue;
        char num[16];
        int n = snprintf(num, sizeof num, "%d", m->note);
        int row = x - 6 > row_end[0] ? 0 : x - 6 > row_end[1] ? 1 : -1;
        if (row < 0)
            continue; /* no room: the shape's tooltip and the note list have it */
        put(s,
            "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\" "
            "fill=\"%s\">%s</text>\n",
            x, y + 66 + 9 * row, mark_fill[m->kind], num);
        row_end[row] = x + n * 6.0;
    }
}

static void lane(svg_t *s, size_t i, int y) {
    const report_lane_t *l = &s->r->lanes[i];
    if (i % 2 == 0)
        put(s, "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f4f4f4\"/>\n", y, SVG_W,
            LANE_H);
    lane_label(s, l, y);
    lane_groups(s, l, y);
    lane_costs(s, l, y);
    lane_marks(s, l, y);
}

typedef struct legend_item {
    const char *fill, *name;
    int kind; /* a mark's shape, or -1: a swatch */
} legend_item_t;

/* The legend's items from y; returns the y under them. */
static int legend(svg_t *s, int y) {
    double x = 16;
    legend_item_t items[24];
    int n = 0;
    items[n++] = (legend_item_t){group_fill[0], "group (attempt 0)", -1};
    items[n++] = (legend_item_t){group_fill[1], "attempt 1 ...", -1};
    for (int p = 0; p < REPORT_NPARTS; p++)
        items[n++] = (legend_item_t){part_fill[p], launch_report_part_names[p], -1};
    items[n++] = (legend_item_t){"url(#spare)", "spare", -1};
    items[n++] = (legend_item_t){"url(#excluded)", "excluded", -1};
    for (int k = 0; k < REPORT_NMARKS; k++)
        if (k != REPORT_MARK_END)
            items[n++] = (legend_item_t){mark_fill[k], mark_name[k], k};
    for (int i = 0; i < n; i++) {
        double w = 22 + (double)strlen(items[i].name) * 7.0 + 18;
        if (x + w > SVG_W - 16) {
            x = 16;
            y += 20;
        }
        if (items[i].kind < 0)
            put(s,
                "<rect x=\"%.1f\" y=\"%d\" width=\"16\" height=\"12\" fill=\"%s\" "
                "stroke=\"#999\" stroke-width=\"0.5\"/>",
                x, y - 10, items[i].fill);
        else
            shape(s, (report_mark_kind_t)items[i].kind, x + 8, y - 4);
        put(s, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\">%s</text>\n", x + 22, y, items[i].name);
        x += w;
    }
    return y + 14;
}

static void notes(svg_t *s, int y) {
    const report_t *r = s->r;
    char d[32];
    for (size_t i = 0; i < r->nnotes; i++) {
        y += NOTE_H;
        dur(d, sizeof d, (double)(r->notes[i].t - r->t0));
        put(s,
            "<text x=\"16\" y=\"%d\" font-size=\"12\"><tspan font-weight=\"bold\">%zu</tspan> "
            "+%s ",
            y, i + 1, d);
        text(s, r->notes[i].text, NOTE_CHARS);
        put(s, "</text>\n");
    }
    if (r->notes_dropped > 0)
        put(s,
            "<text x=\"16\" y=\"%d\" font-size=\"12\">and %zu more notes (the events file "
            "has them)</text>\n",
            y + NOTE_H, r->notes_dropped);
}

int launch_report_render(const report_t *r, int html, ddp_buf_t *out) {
    svg_t s = {.b = out, .r = r, .span = r->t1 > r->t0 ? (double)(r->t1 - r->t0) : 1};
    int head_h;
    /* The header's height decides where the rest goes: measured on a scratch copy. */
    ddp_buf_t scratch = DDP_BUF_INIT;
    svg_t probe = {.b = &scratch, .r = r, .span = s.span};
    header(&probe, &head_h);
    ddp_buf_free(&scratch);
    int axis_y = head_h + 34, lanes_y = axis_y + 8;
    int lanes_end = lanes_y + (int)r->nlanes * LANE_H;
    int legend_y = lanes_end + 40;
    int legend_rows = 2; /* at most, at this width */
    int notes_y = legend_y + legend_rows * 20 + 10;
    int height = notes_y + (int)(r->nnotes + (r->notes_dropped > 0)) * NOTE_H + 20;
    if (html)
        put(&s, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                "style-src 'unsafe-inline'\">\n<title>ddprun report</title></head>\n"
                "<body style=\"margin:0;background:#fff\">\n");
    else
        put(&s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    put(&s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n<title>ddprun report</title>\n",
        SVG_W, height, SVG_W, height);
    put(&s, "<defs><pattern id=\"spare\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#e8e8e8\"/>"
            "<rect width=\"3\" height=\"8\" fill=\"#bbbbbb\"/></pattern>\n"
            "<pattern id=\"excluded\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(-45)\"><rect width=\"8\" height=\"8\" fill=\"#cccccc\"/>"
            "<rect width=\"3\" height=\"8\" fill=\"#555555\"/></pattern></defs>\n");
    put(&s, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W, height);
    header(&s, &head_h);
    axis(&s, axis_y, lanes_end);
    for (size_t i = 0; i < r->nlanes; i++)
        lane(&s, i, lanes_y + (int)i * LANE_H);
    rounds(&s, lanes_y, lanes_end);
    put(&s, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ccc\"/>\n", LABEL_W, lanes_y,
        LABEL_W, lanes_end);
    legend(&s, legend_y);
    if (r->nnotes > 0)
        put(&s,
            "<text x=\"16\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">notes (the "
            "numbers on the lanes)</text>\n",
            notes_y);
    notes(&s, notes_y);
    put(&s, "</svg>\n");
    if (html)
        put(&s, "</body></html>\n");
    return s.err;
}
