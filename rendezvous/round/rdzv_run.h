/* SPDX-License-Identifier: Apache-2.0
 * The records of the rendezvous runs, shared by the files of the state machine: rdzv_round.c (the
 * transitions), rdzv_runs.c (the registry and the action list), rdzv_round_status.c (STATUS and
 * the metrics' walk). Nothing outside them includes it: the server sees rdzv_round.h. */
#ifndef RDZV_RUN_H
#define RDZV_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rdzv_round.h"

#include <time.h>

typedef enum member_state {
    MEMBER_JOINING,
    MEMBER_RUNNING,
    MEMBER_IDLE,
} member_state_t;

typedef struct rdzv_run rdzv_run_t;

typedef struct rdzv_member {
    uint64_t id;
    rdzv_run_t *run;
    member_state_t state;
    char host[RDZV_HOST_MAX + 1];
    int64_t want_rank, nproc, master_port;
    int64_t group_rank; /* RUNNING: its rank; else -1 */
    int64_t prev_rank;  /* rank in the last round it belonged to, or -1 (stability hint) */
    uint64_t join_ms, last_seen_ms;
    int64_t key;           /* what a BEAT_FOR for it must carry (random, told in its JOIN reply) */
    int64_t carried_round; /* its JOIN's min_round: the round after the newest it was told */
    int64_t group_round;   /* the last round whose group it was in, -1 none */
    int answered; /* a spare whose keep-alive answer went out: no JOIN parked until it JOINs again
                   * (it stays a spare, and counts as one, for one more keep-alive bound) */
    struct rdzv_member *hnext;         /* member hash chain */
    struct rdzv_member *rprev, *rnext; /* the run's member list */
} rdzv_member_t;

/* A member of the previous round, remembered to name the lost ones. */
typedef struct prev_node {
    uint64_t id;
    int64_t rank;
    char host[RDZV_HOST_MAX + 1];
} prev_node_t;

/* What a run knows of one host (rdzv_round_hosts.c), kept for the run id's life: the group
 * failures whose root cause was there, its exclusion, its last failed health check. */
typedef struct rdzv_host_rec {
    char host[RDZV_HOST_MAX + 1];
    int64_t failures;                     /* rounds whose first failure was on this host */
    int excluded;                         /* refused from later rounds (max_node_failures) */
    int kept_at_min;                      /* reached the bound while the run was at its minimum */
    char last_failure[RDZV_WHAT_MAX + 1]; /* "round 3: rank 5 exited with code 1" */
    int unfit;                            /* an UNFIT came since its last JOIN */
    char unfit_reason[RDZV_WHAT_MAX + 1];
    uint64_t unfit_ms;   /* when that UNFIT came */
    uint64_t touched_ms; /* last change: the least recent plain record makes room first */
} rdzv_host_rec_t;

/* Bounds on host records: per run (beside 2 x max_nodes + 16, whichever is smaller) and in the
 * whole registry, so that UNFIT reports naming made-up hosts cannot grow the store. */
#define RDZV_RUN_HOSTS_MAX 1024
#define RDZV_HOSTS_TOTAL_MAX 65536

struct rdzv_run {
    char id[RDZV_RUN_ID_MAX + 1];
    rdzv_round_cfg_t cfg;
    rdzv_run_state_t state;
    int64_t round;
    int64_t min_round; /* the largest a JOIN carried: no round is numbered below it */
    int64_t restarts_used;
    char last_failure[RDZV_ROUND_TEXT_MAX];
    int aborted;            /* FAILED by an ABORT (last_failure says who and why), not restarts */
    uint64_t last_call_ms;  /* LAST_CALL: when the round closes */
    uint64_t not_before_ms; /* no round closes before (a crash loop's back-off) */
    uint64_t live_check_ms; /* RUNNING: earliest time a member can be silent too long */
    uint64_t empty_since_ms;
    rdzv_member_t **joiners; /* join order (answered spares: the order of their answers) */
    size_t njoin, cap_join;
    size_t nanswered;     /* joiners with no JOIN parked (answered spares) */
    rdzv_member_t **pick; /* round_close's choice of the group (room as for group) */
    size_t cap_pick;
    int64_t ended_round;   /* the round that ended last, -1 none */
    size_t nidle;          /* IDLE members: of that round's group, still connected, not back yet */
    rdzv_member_t **group; /* by group rank */
    size_t ngroup, cap_group;
    prev_node_t *prev; /* the previous round's group */
    size_t nprev, cap_prev;
    rdzv_member_t *mhead; /* every member of the run */
    size_t nmembers;
    rdzv_host_rec_t *hosts; /* rdzv_round_hosts.c; survive run_trim */
    size_t nhosts, cap_hosts;
    struct rdzv_run *hnext, *prev_all, *next_all;
};

struct rdzv_runs {
    size_t max_runs;
    uint64_t empty_keep_ms;
    rdzv_run_t **run_buckets;
    size_t nrun_buckets, nruns;
    rdzv_run_t *runs; /* all runs, for tick */
    rdzv_member_t **mem_buckets;
    size_t nmem_buckets, nmembers;
    size_t nhosts; /* host records of every run (RDZV_HOSTS_TOTAL_MAX) */
};

/* Copies s into dst (cap bytes), cutting it. */
static inline void rdzv__copy_str(char *dst, size_t cap, const char *s) {
    snprintf(dst, cap, "%s", s);
}

/* snprintf for messages, where cutting a long text is intended (so the compiler's truncation
 * warning does not apply). Returns the length written (at most cap - 1). */
__attribute__((format(printf, 3, 4))) size_t rdzv__textf(char *out, size_t cap, const char *fmt,
                                                         ...);

/* Makes room for extra more actions, so that the transition that follows cannot fail halfway.
 * Returns 0 or -ENOMEM. */
int rdzv__actions_reserve(rdzv_actions_t *a, size_t extra);
/* Appends a zeroed action; the room was reserved. */
rdzv_action_t *rdzv__action_add(rdzv_actions_t *a, rdzv_action_kind_t kind, uint64_t member);
/* Grows *v (of *cap elements of elem bytes) to hold want. Returns 0 or -ENOMEM. */
int rdzv__grow(void **v, size_t *cap, size_t want, size_t elem);
/* "joining", "running" or "idle". */
const char *rdzv__member_state_name(member_state_t s);

/* The run called id, or NULL. */
rdzv_run_t *rdzv__run_find(const rdzv_runs_t *rs, const char *id);
/* The member with connection id id, or NULL. */
rdzv_member_t *rdzv__member_find(const rdzv_runs_t *rs, uint64_t id);
/* Creates run id with cfg into *out, evicting the run empty the longest when the registry is
 * full. Returns 0, DDP_ETOOBIG or -ENOMEM with err set. */
int rdzv__run_create(rdzv_runs_t *rs, const char *id, const rdzv_round_cfg_t *cfg, rdzv_run_t **out,
                     ddp_err_t *err);
/* Frees run r and its members. */
void rdzv__run_free(rdzv_runs_t *rs, rdzv_run_t *r);
/* Makes m, a new member with connection id member, known to the registry and to run r. */
void rdzv__member_link(rdzv_runs_t *rs, rdzv_run_t *r, rdzv_member_t *m, uint64_t member);
/* Unlinks m from the hash and its run's member list and frees it. The caller has already removed
 * it from joiners/group. */
void rdzv__member_free(rdzv_runs_t *rs, rdzv_member_t *m, uint64_t now_ms);

/* ---- host records (rdzv_round_hosts.c) ---- */

/* The record of host in r, or NULL. */
rdzv_host_rec_t *rdzv__host_find(const rdzv_run_t *r, const char *host);
/* The record of host in r, made when there is none (making room by dropping the least recently
 * changed record that is neither excluded nor counts a failure). NULL when full or out of memory.
 */
rdzv_host_rec_t *rdzv__host_get(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, uint64_t now_ms);
/* Writes "; root causes by host: H1 x3, H2 x1" (the hosts with most failures first, the first
 * four) to out, or "" when no failure was counted. */
void rdzv__hosts_tally(const rdzv_run_t *r, char *out, size_t cap);
/* Frees r's host records. */
void rdzv__hosts_free(rdzv_runs_t *rs, rdzv_run_t *r);
/* A JOIN from host: 1 with text filled (the refusal) when the host is excluded; else 0, and a
 * failed health check it reported is over (it checked healthy before this JOIN). */
int rdzv__host_join(rdzv_run_t *r, const char *host, uint64_t now_ms, char *text, size_t cap);
/* Member m's group failed first in round `round` (what: its description): counts it against m's
 * host and excludes the host at max_node_failures while the others still meet min_nodes. Appends
 * what it decided to note (cap bytes; "" when nothing to say). */
void rdzv__host_failed(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_member_t *m, int64_t round,
                       const char *what, uint64_t now_ms, char *note, size_t cap);

#endif
