/* SPDX-License-Identifier: Apache-2.0
 * rdzv_straggler: which ranks of a running round compute slower than the others, as pure logic
 * (no clock, no I/O). Each node's agent reports, once per window, its ranks' compute time and
 * steps since its last report (TIMING, rdzv_round.h); the store adds them here and, once per
 * window, compares each rank's compute time per step with the median of the other ranks'. A rank
 * above the median by the threshold (and by RDZV_STRAG_MIN_EXCESS_US) in `windows` consecutive
 * windows is a straggler; it clears after as many consecutive windows at or below. A rank with
 * fewer than RDZV_STRAG_MIN_STEPS steps in a window is not judged in it (its counts stay), and a
 * window with fewer than two ranks judged judges nobody. Private to the round library. */
#ifndef RDZV_STRAGGLER_H
#define RDZV_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_proto.h"

#define RDZV_STRAG_DEFAULT_THRESHOLD 1.2
#define RDZV_STRAG_DEFAULT_WINDOWS 3
#define RDZV_STRAG_DEFAULT_WINDOW_MS 5000
/* A rank is judged in a window only with this many steps in it: one step says little. */
#define RDZV_STRAG_MIN_STEPS 2
/* The least excess compute per step that can name a rank: a few microseconds of jitter on a
 * tiny step make large ratios that cost the job nothing. */
#define RDZV_STRAG_MIN_EXCESS_US 100
/* The highest global rank a report may name (the ranks of the largest job, and then some). */
#define RDZV_STRAG_MAX_RANKS (1 << 20)

typedef struct rdzv_strag_cfg {
    double threshold;   /* > 1: compute per step above the median by this factor is slow */
    int windows;        /* consecutive windows that name a rank, and that clear it */
    uint64_t window_ms; /* how often the ranks are compared */
    int exclude;        /* --straggler_action=exclude (the round layer acts on it) */
} rdzv_strag_cfg_t;

typedef struct rdzv_strag_rank {
    int known;                    /* a report named this rank in this round */
    int64_t group_rank;           /* the node it runs on (its last report's sender) */
    char host[RDZV_HOST_MAX + 1]; /* that node's host */
    char kept[96];       /* named under exclude and kept: why (no spare, min nodes); "" otherwise */
    uint64_t compute_us; /* this window's sums */
    uint64_t steps;
    int above, below;        /* consecutive windows judged above / not above the threshold */
    uint64_t first_above_ms; /* the start of the first window of the current run above */
    int named;               /* a straggler now */
    uint64_t since_ms;       /* named: the start of its first slow window */
    double ratio;            /* its last judged window: compute per step / the others' median */
    double per_step_us;      /* its last judged window's compute per step */
} rdzv_strag_rank_t;

typedef struct rdzv_strag {
    rdzv_strag_cfg_t cfg;
    int64_t round; /* the round the ranks belong to; -1 before the first report */
    uint64_t window_start_ms;
    rdzv_strag_rank_t *v; /* indexed by global rank */
    size_t n, cap;
    size_t named; /* ranks named now */
} rdzv_strag_t;

/* What a window changed about one rank. */
typedef struct rdzv_strag_change {
    int64_t rank;
    int named; /* 1: named a straggler in this window; 0: cleared */
} rdzv_strag_change_t;

/* An empty detector (cfg the defaults, no ranks, round -1). */
void rdzv__strag_init(rdzv_strag_t *st);
/* Frees the ranks; the detector is empty again. */
void rdzv__strag_free(rdzv_strag_t *st);
/* Forgets every rank (a new round: ranks are numbered anew) and starts a window at now_ms. */
void rdzv__strag_reset(rdzv_strag_t *st, int64_t round, uint64_t now_ms);
/* Adds one rank's report (compute time, steps) from the node of group_rank on host. Returns 0,
 * -EINVAL for a rank out of range, -ENOMEM. */
int rdzv__strag_add(rdzv_strag_t *st, int64_t rank, int64_t group_rank, const char *host,
                    uint64_t compute_us, uint64_t steps);
/* Closes the window when window_ms have passed since it started: judges the ranks, appends
 * what changed to ch (cap entries; more are not reported but still happen) and starts the next
 * window at now_ms. Returns how many changes were written (0 when the window is still open). */
size_t rdzv__strag_window(rdzv_strag_t *st, uint64_t now_ms, rdzv_strag_change_t *ch, size_t cap);

/* One rank's entry of a report. */
typedef struct rdzv_strag_entry {
    int64_t rank;
    uint64_t compute_us, wait_us, steps;
} rdzv_strag_entry_t;

/* The most entries one report holds (RDZV_WHAT_MAX bytes, 8 at least each). */
#define RDZV_STRAG_ENTRIES_MAX 32

/* Parses a TIMING report: "w=<window ms> t=<threshold x 1000> n=<windows> a=<warn|exclude>"
 * and then "<rank>:<compute us>:<wait us>:<steps>" entries, separated by spaces, into *cfg and
 * out (cap entries). Returns the number of entries, or -EINVAL for any malformed field or more
 * entries than cap (*cfg and out then unchanged or partly written: use neither). */
int rdzv__strag_parse(const char *text, rdzv_strag_cfg_t *cfg, rdzv_strag_entry_t *out, size_t cap);

#endif
