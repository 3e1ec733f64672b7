/* SPDX-License-Identifier: Apache-2.0
 * Where a job's time goes, as arithmetic on the times the agent records (goodput_calc.c): no
 * clock, no I/O, no allocation, so that unit tests feed it timestamps. The agent's part that
 * feeds it is goodput.c.
 *
 * A group's life: spawn, its first beat, the beat that passes the highest step any earlier group
 * reached (the end of redone work), its last beat, the failure known, the group down, the next
 * spawn. Productive time is each group's span from that pass to its last beat (from its first beat
 * when the beats carry no step). Each restart costs five parts, which follow one another:
 *   detect      the failed group's last beat -> the agent knows of the failure (a hang's silence;
 *               for a crash, the rest of the step it died in: its exit is seen at once)
 *   stop        known -> every worker of the group is down (a hang's stack capture included)
 *   rendezvous  down -> the next group spawns (the re-join on several nodes; on one node the
 *               restart's back-off and the health check)
 *   start       spawn -> the new group's first beat
 *   redo        first beat -> the new group passes the failed group's highest step, placed
 *               between the two beats around it (the steps run since the last checkpoint)
 * Private to agent/. */
#ifndef AGENT_GOODPUT_H
#define AGENT_GOODPUT_H

#include <stddef.h>
#include <stdint.h>

enum {
    AGENT_GP_DETECT,
    AGENT_GP_STOP,
    AGENT_GP_RENDEZVOUS,
    AGENT_GP_START,
    AGENT_GP_REDO,
    AGENT_GP_NPARTS
};
/* "detect", "stop", "rendezvous", "start", "redo": the summary's words, the event's fields (with
 * _ms) and the metric's part label. */
extern const char *const agent_goodput_part_names[AGENT_GP_NPARTS];

/* The cost of one restart: each part in ms, -1 where it is not known (no beats; a redo whose
 * beats carry no step). failed_step: the highest step the failed group reached, or -1. */
typedef struct agent_goodput_cost {
    int64_t ms[AGENT_GP_NPARTS];
    int64_t failed_step;
    int number; /* 1 for the job's first restart */
} agent_goodput_cost_t;

/* The record; zero it, then agent_goodput_init. Times are monotonic ms, never 0 once set. */
typedef struct agent_goodput {
    uint64_t begin_ms, end_ms; /* the agent's start and end (0 while running) */
    int beats;                 /* a beat source exists (hang detection is on) */
    int beaten;                /* some beat came */
    int stepped;               /* some beat carried a step */
    int groups;                /* groups spawned */
    /* The running group (running: spawned and not yet failed or ended). */
    int running;
    uint64_t spawn_ms, first_ms, last_ms, pass_ms; /* 0: not yet */
    int64_t best_before;                           /* highest step of the earlier groups, -1 none */
    int64_t top_step; /* highest step of this group, -1 none, and the time of its beat */
    uint64_t top_ms;
    /* The restart being measured: from a failure known to its next group's pass. */
    int open;
    uint64_t known_ms, down_ms;
    agent_goodput_cost_t cur;
    /* Totals of the ended groups and the closed restarts. */
    uint64_t productive_ms;
    int restarts;
    int64_t lost_ms[AGENT_GP_NPARTS];
    int known[AGENT_GP_NPARTS]; /* restarts in which the part was known */
} agent_goodput_t;

/* What the record says at now. */
typedef struct agent_goodput_totals {
    uint64_t wall_ms, productive_ms, lost_ms;
    double ratio; /* productive / wall; 0 with no wall time */
} agent_goodput_totals_t;

/* Starts the record at now; beats: whether any beat source exists. */
void agent_goodput_init(agent_goodput_t *g, uint64_t now, int beats);
/* A group spawned at now (it ends the rendezvous part of an open restart). Returns 1 when that
 * closed the restart (without beats nothing more is learnt), its cost in *out, else 0. */
int agent_goodput_spawn(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out);
/* A beat of the running group at t (step: its progress counter, -1 when it carries none). Returns
 * 1 when it closed a restart, its cost in *out, else 0. */
int agent_goodput_beat(agent_goodput_t *g, uint64_t t, int64_t step, agent_goodput_cost_t *out);
/* The agent knows at now that the running group failed (or must stop: its round ended): the group
 * ends, and a restart opens. Returns 1 when the group's end closed an earlier restart (its next
 * group failed before passing), its cost in *out, else 0. */
int agent_goodput_failed(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out);
/* The failed group is down at now. */
void agent_goodput_down(agent_goodput_t *g, uint64_t now);
/* The job ends at now. Returns 1 when the end closed a restart (its group ran to the end without
 * passing), its cost in *out, else 0. A failure that no group followed is no restart. */
int agent_goodput_end(agent_goodput_t *g, uint64_t now, agent_goodput_cost_t *out);
/* Wall, productive and lost time at now (the running group's span so far included). */
void agent_goodput_totals(const agent_goodput_t *g, uint64_t now, agent_goodput_totals_t *t);
/* The summary's line at now into out (cut to cap - 1 bytes), docs/cli.md "Goodput":
 * "goodput 93.1% of 412.0 s; lost 28.05 s in 3 restarts: detect 0.20 s, stop 1.10 s, ...". */
void agent_goodput_line(const agent_goodput_t *g, uint64_t now, char *out, size_t cap);

#endif
