/* SPDX-License-Identifier: Apache-2.0
 * The records of the rendezvous runs, shared by the files of the round machine: rdzv_round.c (the
 * commands' entry points), rdzv_round_table.c (the phase x event table and its actions),
 * rdzv_round_steps.c (the steps the actions are made of), rdzv_runs.c (the registry and the action
 * list), rdzv_round_hosts.c (what a run keeps per host), rdzv_round_status.c (STATUS and the
 * metrics' walk). Nothing outside them includes it: the server sees rdzv_round.h. */
#ifndef RDZV_RUN_H
#define RDZV_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rdzv_round.h"
#include "rdzv_straggler.h"

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
    int64_t rank_base;  /* RUNNING: its first global rank (its ranks: rank_base + 0..nproc-1) */
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
    int straggler;       /* excluded as a straggler (last_failure says which rank, how slow) */
    uint64_t touched_ms; /* last change: the least recent plain record makes room first */
} rdzv_host_rec_t;

/* Bounds on host records: per run (beside 2 x max_nodes + 16, whichever is smaller) and in the
 * whole registry, so that UNFIT reports naming made-up hosts cannot grow the store. */
#define RDZV_RUN_HOSTS_MAX 1024
#define RDZV_HOSTS_TOTAL_MAX 65536

struct rdzv_run {
    char id[RDZV_RUN_ID_MAX + 1];
    rdzv_round_cfg_t cfg;
    int cfg_unset; /* made by a restore: the first JOIN's configuration becomes cfg */
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
    rdzv_strag_t strag; /* the running round's straggler detector (TIMING reports) */
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
/* A JOIN from host: 1 with text filled (the refusal) when the host is excluded; else 0, and a
 * failed health check it reported is over (it checked healthy before this JOIN). */
int rdzv__host_join(rdzv_run_t *r, const char *host, uint64_t now_ms, char *text, size_t cap);
/* Member m's group failed first in round `round` (what: its description): counts it against m's
 * host and excludes the host at max_node_failures while the others still meet min_nodes. Appends
 * what it decided to note (cap bytes; "" when nothing to say). */
void rdzv__host_failed(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_member_t *m, int64_t round,
                       const char *what, uint64_t now_ms, char *note, size_t cap);
/* Records host's failed health check (reason) in r, shown by STATUS until the host JOINs again.
 * Returns 0, or -ENOSPC when r's records are full of records that decide something. */
int rdzv__host_unfit(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, const char *reason,
                     uint64_t now_ms);
/* Appends RDZV_ACT_HOST_RECORD with h's record (the room was reserved). */
void rdzv__host_record_action(const rdzv_run_t *r, const rdzv_host_rec_t *h, rdzv_actions_t *out);
/* Sets host's record in r from a restore (rdzv_runs_restore_host), unless r counted more failures
 * there since. Returns 0, or -ENOSPC when r's records are full of records that decide something. */
int rdzv__host_restore(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, int64_t failures,
                       int excluded, const char *last_failure, uint64_t now_ms);
/* host is a straggler (why: which rank, how slow) and --straggler_action=exclude: excluded, as a
 * sick node, when a spare waits and the others with the spares still meet min_nodes. Returns 1
 * when excluded; 0 when kept (note says why), -ENOSPC when no record can be made. */
int rdzv__host_straggler(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, const char *why,
                         uint64_t now_ms, char *note, size_t cap);

/* ---- the round table (rdzv_round_table.c) ---- */

/* The phases of a run are its states (rdzv_run_state_t, which HEARTBEAT's reply and STATUS
 * carry): JOINING, LAST_CALL, RUNNING, FAILED, DONE. */
#define RDZV_RUN_NPHASES (RDZV_RUN_DONE + 1)

/* What happens to a run: a command of one of its nodes, a connection closing, or one of its
 * deadlines passing (rdzv_runs_tick feeds those in this order). */
typedef enum rdzv_run_event {
    RDZV_EV_JOIN,       /* a JOIN for the run (its fields checked, no JOIN of its own parked) */
    RDZV_EV_HEARTBEAT,  /* a member's HEARTBEAT, or a BEAT_FOR that carried the member's key */
    RDZV_EV_FAIL,       /* FAIL(round, what): a worker group failed */
    RDZV_EV_ABORT,      /* ABORT(why): a node stops the run for good */
    RDZV_EV_UNFIT,      /* UNFIT(host, reason): a host failed its health check */
    RDZV_EV_FINISH,     /* FINISH(round): the round passed its exit barrier */
    RDZV_EV_LEAVE,      /* a member's connection closed (or an excluded member of the ended round
                         * JOINed: it will not come back) */
    RDZV_EV_JOIN_BOUND, /* the first joiner's bound passed (rdzv__joiner_bound) */
    RDZV_EV_LAST_CALL,  /* run->last_call_ms passed */
    RDZV_EV_LIVE_CHECK, /* run->live_check_ms passed: a group member may be silent too long */
    RDZV_EV_TIMING,     /* TIMING(round, report): a node's ranks' compute times (straggler) */
    RDZV_NEVENTS
} rdzv_run_event_t;

/* One event with what it carries (the fields its kind names; the others are unused). */
typedef struct rdzv_event {
    rdzv_run_event_t kind;
    uint64_t now_ms;
    uint64_t conn;               /* JOIN: the connection it came on (a new member's id) */
    rdzv_member_t *m;            /* the run's member it is from or about; NULL: JOIN from a new
                                  * connection, FAIL or UNFIT from a connection that is none */
    const rdzv_join_req_t *req;  /* JOIN */
    const rdzv_round_cfg_t *cfg; /* JOIN: its configuration with the defaults filled in */
    int created;                 /* JOIN: the run was made for it (freed again if it fails) */
    int64_t round;               /* FAIL, FINISH, TIMING */
    const char *text;            /* FAIL: what; ABORT: why; UNFIT: reason (each may be NULL);
                                  * TIMING: the report */
    char *log;                   /* TIMING: lines for the server's log ("" none), log_cap bytes */
    size_t log_cap;
    const char *host;       /* UNFIT */
    rdzv_actions_t *out;    /* what the server must do, appended */
    ddp_err_t *err;         /* JOIN: why it was refused */
    rdzv_fail_reply_t *rep; /* FAIL: its status (filled by the entry point beforehand) */
} rdzv_event_t;

/* The phases a cell's action may leave the run in (a mask of RDZV_PHASE(state)). */
#define RDZV_PHASE(s) (1u << (s))

/* A cell of the table: the action for an event in a phase, and the phases it may lead to. */
typedef struct rdzv_cell {
    int (*action)(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev);
    unsigned next;
} rdzv_cell_t;

/* The cell of event ev in phase p. */
const rdzv_cell_t *rdzv__run_cell(rdzv_run_state_t p, rdzv_run_event_t ev);
/* Feeds ev to run r: runs the action of the cell of r's phase and ev. Returns what the action
 * returns: 0, or the refusal its entry point passes on (the events' codes in rdzv_round.h). */
int rdzv__run_event(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_event_t *ev);

/* ---- the steps of the actions (rdzv_round_steps.c) ---- */

/* Formats "node 1 (10.0.0.2)" for a member with a rank, else "node 10.0.0.2". */
void rdzv__node_name(char *out, size_t cap, int64_t rank, const char *host);
/* Makes sure the run's arrays can hold every member it may close a round with (extra_members
 * more than it has) and out every action one event may produce. Returns 0 or -ENOMEM. */
int rdzv__event_reserve(rdzv_run_t *r, size_t extra_members, rdzv_actions_t *out);
/* Frees the arrays of a run with no members (it is kept for empty_keep_ms). */
void rdzv__run_trim(rdzv_run_t *r);
/* Removes joiner only from r->joiners, keeping their order. */
void rdzv__joiners_remove(rdzv_run_t *r, rdzv_member_t *only);
/* Takes member m out of the running group (it died or re-joined). */
void rdzv__group_remove(rdzv_run_t *r, rdzv_member_t *m);
/* Re-evaluates a collecting round after its joiners changed: close, LAST_CALL, or JOINING. */
void rdzv__run_check(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out);
/* Closes the collecting round: the group is formed and answered; the run is RUNNING. */
void rdzv__round_close(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out);
/* Ends the running round saying why: round r+1 collects the waiters, or with failed set the run
 * is FAILED and they are refused. */
void rdzv__round_end(rdzv_runs_t *rs, rdzv_run_t *r, const char *why, int failed, uint64_t now_ms,
                     rdzv_actions_t *out);
/* Refuses every joiner whose JOIN is parked with code and text, and drops it. */
void rdzv__joiners_refuse(rdzv_runs_t *rs, rdzv_run_t *r, int code, const char *text,
                          uint64_t now_ms, rdzv_actions_t *out);
/* How long the joiners' JOINs stay parked in r's phase (join_timeout, or the spares' bound). */
uint64_t rdzv__joiner_bound(const rdzv_run_t *r);
/* How many joiners' bounds have passed (a prefix of r->joiners). */
size_t rdzv__joiners_due(const rdzv_run_t *r, uint64_t now_ms);
/* The first k joiners of a collecting round timed out: DDP_ETIMEOUT, dropped. */
void rdzv__joiners_time_out(rdzv_runs_t *rs, rdzv_run_t *r, size_t k, uint64_t now_ms,
                            rdzv_actions_t *out);
/* The first k spares' bounds passed: the parked ones are answered DDP_ERDZV_SPARE and stay, the
 * answered ones are dropped. */
void rdzv__spares_answer(rdzv_runs_t *rs, rdzv_run_t *r, size_t k, uint64_t now_ms,
                         rdzv_actions_t *out);
/* Declares the running group's silent members dead and ends the round, or schedules the next
 * check. */
void rdzv__group_check_live(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out);
/* The texts of refused JOINs: a FAILED run's, a DONE run's to its own nodes, and a DONE run's to
 * a new node (the run id is taken). */
void rdzv__failed_text(const rdzv_run_t *r, char *out, size_t cap);
void rdzv__done_text(const rdzv_run_t *r, char *out, size_t cap);
void rdzv__reused_text(const rdzv_runs_t *rs, const rdzv_run_t *r, uint64_t now_ms, char *out,
                       size_t cap);

#endif
