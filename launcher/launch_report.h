/* SPDX-License-Identifier: Apache-2.0
 * `ddprun report EVENTS.jsonl -o OUT.svg|OUT.html`: a picture of a job's life drawn from the
 * agents' structured events (--event_log_handler json). report.c reads the events into a
 * timeline, one lane per agent (host); report_svg.c draws it as one self-contained SVG: no
 * script, no font, no link or fetch of anything outside it (an .html embeds the SVG inline). */
#ifndef LAUNCH_REPORT_H
#define LAUNCH_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"

/* Runs `ddprun report ARGS` (argv[0] is "report"). Returns the exit code: 0 written, 1 the events
 * could not be read or a line is not one of ddprun's events or the picture could not be written
 * (one line names the file and line), 2 usage. */
int launch_report_main(int argc, char **argv);

/* The flags of `ddprun report` for the completion script: with whether each takes a value. */
typedef struct launch_report_flag {
    const char *name;
    int takes_value;
} launch_report_flag_t;
extern const launch_report_flag_t launch_report_flags[];

/* ---- the timeline, shared by report.c (which builds it) and report_svg.c (which draws it) ---- */

/* A restart's parts, in the order they follow one another (docs/cli.md "Goodput"). */
enum { REPORT_DETECT, REPORT_STOP, REPORT_RENDEZVOUS, REPORT_START, REPORT_REDO, REPORT_NPARTS };
/* Their names (report_svg.c): the restart_cost fields (with _ms) and the picture's words. */
extern const char *const launch_report_part_names[REPORT_NPARTS];

/* What a mark on a lane shows. */
typedef enum {
    REPORT_MARK_FAILURE,   /* worker_group_failed */
    REPORT_MARK_HUNG,      /* worker_hung */
    REPORT_MARK_ROUND_END, /* rendezvous_round_ended: the group stops to re-join */
    REPORT_MARK_STRAGGLER, /* straggler */
    REPORT_MARK_EXCLUDED,  /* node_excluded */
    REPORT_MARK_HEALTH,    /* health_check_failed */
    REPORT_MARK_STORE,     /* the store lost, back, elected, leadership lost */
    REPORT_MARK_LOG,       /* log_write_failed */
    REPORT_MARK_END,       /* shutdown */
    REPORT_NMARKS
} report_mark_kind_t;

typedef struct report_mark {
    int64_t t; /* ms since the epoch, as every time here */
    report_mark_kind_t kind;
    int note; /* its number in the notes (1-based), 0 when it has none */
} report_mark_t;

/* A worker group's life on one agent: spawned at t0, ended at t1. */
typedef struct report_group {
    int64_t t0, t1;
    long long attempt, round, world_size;
    int failed; /* ended by a failure of its own (not a round's end or the job's end) */
} report_group_t;

/* A span of a lane that is no group: waiting as a spare, or excluded. */
typedef struct report_span {
    int64_t t0, t1;
} report_span_t;

typedef struct report_cost {
    int64_t anchor;            /* the next group's spawn: the parts before it end there */
    long long attempt;         /* that group's */
    int pending;               /* it has not started yet: the anchor is the event's time */
    int64_t ms[REPORT_NPARTS]; /* -1: not known */
    long long number, lost_ms;
} report_cost_t;

/* Abnormal worker exits remembered per group (its failure names the first failed rank). */
#define REPORT_EXITS_KEPT 16

/* One agent: a host name and the agent's pid (several agents may share a host). */
typedef struct report_lane {
    char *host, *run_id;
    long long pid, node_rank;
    int64_t t_first, t_last;
    report_group_t *groups;
    size_t ngroups, groups_cap;
    report_mark_t *marks;
    size_t nmarks, marks_cap;
    report_cost_t *costs;
    size_t ncosts, costs_cap;
    report_span_t *spares;
    size_t nspares, spares_cap;
    int group_open, spare_open;
    int64_t excluded_at; /* 0: never */
    char *result;        /* shutdown's result, NULL before it */
    /* shutdown's goodput: ratio < 0 when not known */
    int has_goodput;
    double ratio;
    long long wall_ms, productive_ms, lost_ms, restarts;
    /* The running group's abnormal worker_exited texts by rank, for its failure's note. */
    struct {
        long long rank;
        char text[48];
    } exits[REPORT_EXITS_KEPT];
    size_t nexits;
} report_lane_t;

typedef struct report_note {
    int64_t t;
    size_t lane;
    char *text;
} report_note_t;

/* Notes kept (numbered on the lanes, listed under the picture); the rest are counted. */
#define REPORT_NOTES_MAX 400
/* Rounds whose first join gets a guide line across the lanes. */
#define REPORT_ROUNDS_MAX 256

typedef struct report {
    report_lane_t *lanes;
    size_t nlanes, lanes_cap;
    /* The lanes by (host, pid): open addressing, a lane's index + 1 (0: free); index_cap is a
     * power of two above twice nlanes. A job of 16,000 agents has as many lanes. */
    size_t *index, index_cap;
    report_note_t *notes;
    size_t nnotes, notes_cap, notes_dropped;
    char **causes; /* the distinct root causes, as the shutdown events name them */
    size_t ncauses;
    char **runs; /* the distinct run ids */
    size_t nruns;
    int64_t t0, t1;
    long long round_t[REPORT_ROUNDS_MAX]; /* each round's first join, 0 when none */
    size_t events, other_events;
} report_t;

/* report_svg.c: the picture of r into out; html: wrapped in a self-contained HTML page. Returns
 * 0 or -ENOMEM. */
int launch_report_render(const report_t *r, int html, ddp_buf_t *out);

#endif
