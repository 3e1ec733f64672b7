/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round: the server side of multi-node rendezvous as pure logic: one round machine per run
 * id (JOINING -> LAST_CALL -> RUNNING -> round r+1, or FAILED, or DONE; a phase x event table,
 * rendezvous/round/rdzv_round_table.c), kept in a bounded registry. The wire codec of the
 * rendezvous commands (rdzv_commands.h) is rdzv_proto.h.
 * No sockets, no clock reads: the server passes events and the time in and carries out the
 * actions that come back (reply to a member, SET the round's end key, close a connection). */
#ifndef RDZV_ROUND_H
#define RDZV_ROUND_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_proto.h"

/* Registry defaults: how many runs it holds, and how long a run with no members is kept (so that
 * its restart count survives every node restarting) before tick frees it. */
#define RDZV_RUNS_DEFAULT_MAX 1024
#define RDZV_RUNS_DEFAULT_EMPTY_KEEP_MS ((uint64_t)3600 * 1000)

/* The back-off of a crash loop, held by the store so that every node keeps it: the round after
 * a FAIL that spent restart k closes no sooner than this long after that FAIL, 0 for k = 1 (a
 * single failure restarts at once), then RDZV_RESTART_BACKOFF_FIRST_MS doubling per restart up to
 * RDZV_RESTART_BACKOFF_MAX_MS. Without it a node whose workers fail at once spends max_restarts in
 * milliseconds, before a spare or a health check can step in. */
#define RDZV_RESTART_BACKOFF_FIRST_MS 100
#define RDZV_RESTART_BACKOFF_MAX_MS 5000

/* What the server must do after an event, in order. */
typedef enum rdzv_action_kind {
    RDZV_ACT_REPLY_OK,  /* answer member's parked JOIN with res (its round has closed) */
    RDZV_ACT_REPLY_ERR, /* answer member's parked JOIN with code + text */
    RDZV_ACT_END_ROUND, /* SET the round's end key (rdzv_layout_end_key); text says why (log it) */
    RDZV_ACT_CLOSE,     /* close member's connection (declared dead by silence; text says why) */
    /* What a store that another may replace keeps outside itself (rdzv_runs_restore_*): */
    RDZV_ACT_RUN_DONE,    /* the run passed its exit barrier at round: DONE for good */
    RDZV_ACT_HOST_RECORD, /* host's record changed: failures, excluded, text its last failure */
} rdzv_action_kind_t;

typedef struct rdzv_action {
    rdzv_action_kind_t kind;
    uint64_t member; /* REPLY_*, CLOSE */
    int code;        /* REPLY_ERR: DDP_ETIMEOUT, DDP_ERDZV_CLOSED, ... */
    int64_t round;   /* END_ROUND: the round that ended */
    char run_id[RDZV_RUN_ID_MAX + 1];
    rdzv_join_result_t res;                   /* REPLY_OK */
    char round_keys[RDZV_ROUND_KEYS_MAX + 1]; /* REPLY_OK: the run's (rdzv_round_cfg_t) */
    char text[RDZV_ROUND_TEXT_MAX];           /* REPLY_ERR, END_ROUND, CLOSE, HOST_RECORD */
    char host[RDZV_HOST_MAX + 1];             /* HOST_RECORD */
    int64_t failures;                         /* HOST_RECORD */
    int excluded;                             /* HOST_RECORD */
} rdzv_action_t;

/* A list of actions the caller provides; events append to it (they never reset it). */
typedef struct rdzv_actions {
    rdzv_action_t *v; /* owned */
    size_t n, cap;
} rdzv_actions_t;

#define RDZV_ACTIONS_INIT                                                                          \
    { NULL, 0, 0 }

/* Empties the list and keeps its memory. */
void rdzv_actions_reset(rdzv_actions_t *a);

/* Frees the list's memory; the list is then empty and reusable. */
void rdzv_actions_close(rdzv_actions_t *a);

typedef struct rdzv_runs rdzv_runs_t;

typedef struct rdzv_runs_opts {
    size_t max_runs;        /* 0 = RDZV_RUNS_DEFAULT_MAX */
    uint64_t empty_keep_ms; /* 0 = RDZV_RUNS_DEFAULT_EMPTY_KEEP_MS */
} rdzv_runs_opts_t;

/* Creates an empty registry (opts may be NULL for the defaults).
 * Returns it, or NULL when out of memory. Caller owns; free with rdzv_runs_free. */
rdzv_runs_t *rdzv_runs_new(const rdzv_runs_opts_t *opts);

/* Frees the registry, its runs and members. NULL is a no-op. Sends nothing to anybody. */
void rdzv_runs_free(rdzv_runs_t *rs);

/* Member member (the server's connection id) joins run req->run_id at now_ms.
 * Returns 0 when the join is accepted: it is parked, and its reply (and any other effect, such as
 * ending a running round for a scale-up) comes as actions appended to out, now or from a later
 * event. Returns an error, with err naming it, when the join is refused at once; the server then
 * answers it with rdzv_join_reply_encode_err(code, err->text):
 *   DDP_EUSAGE       bad field, or min/max differing from the run's (the text names both);
 *   DDP_ERDZV_CLOSED the run is FAILED (max_restarts spent; the text names the last failure);
 *   DDP_ETOOBIG      the registry holds max_runs runs, none of them empty;
 *   -EBUSY           member is in another run; -EALREADY member already has a JOIN parked;
 *   -ENOMEM          nothing changed.
 * req is copied; nothing is borrowed past the call. */
int rdzv_runs_join(rdzv_runs_t *rs, uint64_t member, const rdzv_join_req_t *req, uint64_t now_ms,
                   rdzv_actions_t *out, ddp_err_t *err);

/* Member member says it is alive at now_ms. run_id may be NULL (member ids are unique).
 * Returns 0 and, when not NULL, the run's current round and state; -ENOENT when member is not a
 * member of run_id (or of any run). */
int rdzv_runs_heartbeat(rdzv_runs_t *rs, const char *run_id, uint64_t member, uint64_t now_ms,
                        int64_t *round, int *state);

/* The same for a BEAT_FOR (from a connection that is not the member's): key must be the one
 * its JOIN reply carried, else -ENOENT (a member id of a forgotten store, or a guess). */
int rdzv_runs_beat_for(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t key,
                       uint64_t now_ms, int64_t *round, int *state);

/* Member member (of any state: joining, running, or between rounds), once it has run in a group
 * of run_id, stops run_id for good: why
 * (e.g. "no progress in 3 attempts") becomes its last failure, the running round ends, the run
 * becomes FAILED and every JOIN, waiting or later, is refused with "rendezvous 'R' failed:
 * stopped by node N (host): why". Returns 0; -ENOENT when run_id is unknown, member is not one of
 * its members or the run has FAILED already (nothing changes); -EPERM when member has never run
 * in a group of the run (a spare, a first-time joiner: nothing changes); -ENOMEM. */
int rdzv_runs_abort(rdzv_runs_t *rs, const char *run_id, uint64_t member, const char *why,
                    uint64_t now_ms, rdzv_actions_t *out);

/* Member member reports that the worker group of round `round` of run_id failed (what: a short
 * description, such as "rank 5 exited with code 1"; may be NULL). When round is the run's running
 * round and member belongs to it, the round ends (END_ROUND action), restarts_used grows, and past
 * max_restarts the run becomes FAILED (waiting joiners get error replies). Anything else is
 * ignored. Returns 0 and fills *rep (never NULL); -ENOENT when run_id is unknown (rep filled
 * with status IGNORED). */
int rdzv_runs_fail(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                   const char *what, uint64_t now_ms, rdzv_actions_t *out, rdzv_fail_reply_t *rep);

/* Host host (a node's address, as its JOIN would carry it) failed its health check for reason
 * and does not join: run_id's status shows it (with the reason and when) until the host JOINs
 * again. member (the reporting connection) speaks for its own host alone: a member of the run
 * may report only the host it joined with, and a connection that is not one may not report a
 * host that runs in the run's group. Returns 0; -ENOENT for an unknown run; -EPERM for a host
 * the sender may not speak for (nothing changes); -ENOSPC when the run's host records are full of
 * records that decide something (failures, exclusions). */
int rdzv_runs_unfit(rdzv_runs_t *rs, const char *run_id, uint64_t member, const char *host,
                    const char *reason, uint64_t now_ms);

/* Member member of round `round` of run_id says the round passed its exit barrier (every node's
 * workers succeeded): the run is DONE. Its spares are answered DDP_ERDZV_DONE ("rendezvous 'R'
 * finished: round N passed its exit barrier") and so is every later JOIN of a node of the run, so
 * that a spare leaves with success instead of forming a round of its own once the others hang
 * up; a new node's JOIN gets DDP_ERDZV_REUSED (the id is taken); members leaving then end
 * nothing. Returns 0; -ENOENT when round is not the running round or member not in its
 * group (nothing changes); -ENOMEM. */
int rdzv_runs_finish(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                     uint64_t now_ms, rdzv_actions_t *out);

/* What a store taking over from another (a leader elected through etcd) learns before it serves:
 * the records the old one kept outside itself (RDZV_ACT_RUN_DONE, RDZV_ACT_HOST_RECORD). Each
 * makes run_id when it is not there, empty and taking its configuration from its first JOIN.
 *
 * rdzv_runs_restore_done: run_id passed its exit barrier at round: it is DONE (a node of the run
 * that JOINs gets DDP_ERDZV_DONE, a new one DDP_ERDZV_REUSED, as after its FINISH).
 * rdzv_runs_restore_host: host's record: failures counted against it, excluded (its JOINs refused
 * with DDP_ERDZV_EXCLUDED), last_failure (may be NULL).
 * Both return 0, DDP_EUSAGE (a run id, host or number out of range), DDP_ETOOBIG (the registry or
 * the run's host records are full) or -ENOMEM, with err set; nothing changes on an error. */
int rdzv_runs_restore_done(rdzv_runs_t *rs, const char *run_id, int64_t round, uint64_t now_ms,
                           ddp_err_t *err);
int rdzv_runs_restore_host(rdzv_runs_t *rs, const char *run_id, const char *host, int64_t failures,
                           int excluded, const char *last_failure, uint64_t now_ms, ddp_err_t *err);

/* Member member of round `round` of run_id reports its node's ranks' compute times since its last
 * report (text: "w=<window ms> t=<threshold x 1000> n=<windows> a=<warn|exclude>" and entries
 * "<rank>:<compute us>:<wait us>:<steps>", rendezvous/round/rdzv_straggler.h). The run compares
 * every rank's compute time per step with the median of the others' once per window: one above
 * by the threshold in n consecutive windows is a straggler, cleared after n windows at or below.
 * With a=exclude a straggler's host is excluded as a sick node when a spare waits and min_nodes
 * still holds: the round ends (END_ROUND in out; not a restart), and its JOINs are refused. log
 * (cap bytes) gets the lines to log, one per change ("" when none). Returns 0; -ENOENT when
 * round is not the running round or member not in its group (nothing changes); -EINVAL for a
 * malformed report or one naming a rank that is not the member's (nothing added); -ENOMEM. */
int rdzv_runs_timing(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                     const char *text, uint64_t now_ms, rdzv_actions_t *out, char *log, size_t cap);

/* Appends run_id's stragglers as a JSON array to out: [{rank, group_rank, host, ratio,
 * per_step_us, median_us, since_ms[, kept]}] (since_ms: how long ago its first slow window
 * started; kept: why a=exclude kept its host). Those of the round that just ended stay listed
 * until the next round's first report.
 * Returns 0, -ENOENT for an unknown run, -ENOMEM. */
int rdzv_runs_stragglers_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                              ddp_buf_t *out);

/* The whole text a JOIN to run_id gets while the run is FAILED (DDP_ERDZV_CLOSED; rdzv_runs_join's
 * err holds it cut to DDP_ERR_TEXT_LEN, its root causes lost) into out (cap bytes,
 * RDZV_ROUND_TEXT_MAX for all of it). Returns 0, or -ENOENT when run_id is not a FAILED run. */
int rdzv_runs_failed_text(const rdzv_runs_t *rs, const char *run_id, char *out, size_t cap);

/* Member member is gone (its connection closed) at now_ms: a joiner is dropped; a member of a
 * running round ends it (END_ROUND naming the node). Unknown members are ignored. Returns 0. */
int rdzv_runs_leave(rdzv_runs_t *rs, uint64_t member, uint64_t now_ms, rdzv_actions_t *out);

/* Fires every deadline <= now_ms: last calls close rounds, joiners past join_timeout get error
 * replies, spares (joiners while the run is RUNNING at max_nodes) past the keep-alive bound
 * (interval x attempts) get DDP_ERDZV_SPARE (they JOIN again at once: that is their keep-alive,
 * and a spare that is gone is dropped),  silent members of running rounds are declared dead (CLOSE
 * + END_ROUND), runs empty for empty_keep_ms are freed. Returns 0. */
int rdzv_runs_tick(rdzv_runs_t *rs, uint64_t now_ms, rdzv_actions_t *out);

/* The earliest time at which rdzv_runs_tick has something to do (arm one timer for it), or
 * UINT64_MAX when nothing is pending. May be earlier than strictly needed, never later. */
uint64_t rdzv_runs_next_deadline(const rdzv_runs_t *rs);

/* Finds the progress a group member reported (rdzv_proto.h): 0 with *p filled, or -ENOENT. The
 * state machine keeps no progress itself; the server looks it up among its keys. */
typedef int (*rdzv_progress_lookup_fn)(void *ctx, const char *run_id, int64_t group_rank,
                                       rdzv_progress_t *p);

/* Appends the JSON status of run_id to out: {run, round, state, min_nodes, max_nodes,
 * restarts_used, max_restarts, last_failure[, goodput], members: [{member, host, state,
 * group_rank, nproc, want_node_rank, silent_ms[, step][, beat_age_ms][, goodput]}], hosts,
 * stragglers (as rdzv_runs_stragglers_json)} (members by group rank, then joiners in join order,
 * then idle). step, beat_age_ms and goodput come from lookup (may be NULL), for members of the
 * current round whose report is of that round: beat_age_ms is the reported age plus silent_ms
 * (the report went out with the member's last keep-alive); a member's goodput is {ratio,
 * wall_ms, productive_ms, lost_ms, restarts} as reported, the run's the same over those members
 * (sums of the times, ratio the sum of productive over the sum of wall, the most restarts of one)
 * and "nodes", their number. Returns 0, -ENOENT for an unknown run (err says so), -ENOMEM. */
int rdzv_runs_status_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                          rdzv_progress_lookup_fn lookup, void *ctx, ddp_buf_t *out,
                          ddp_err_t *err);

/* The same JSON with the members [first, first + limit) of that order only (limit 0: none, and
 * no run goodput; the run's goodput only in the page at first 0), and two more fields: "nodes":
 * {total, running, joining, idle} (the counts of every member) and "first". A run of 16,000 nodes
 * has a STATUS of megabytes; a page, or the counts alone, is what a waiting agent and a default
 * `ddprun status` ask for. Returns as rdzv_runs_status_json. */
int rdzv_runs_status_page_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                               rdzv_progress_lookup_fn lookup, void *ctx, size_t first,
                               size_t limit, ddp_buf_t *out, ddp_err_t *err);

/* What the metrics need of each run and each of its members (rdzv_runs_visit). */
typedef struct rdzv_run_view {
    const char *id, *state;
    int64_t round, restarts_used, max_restarts;
    size_t members, group;              /* members held; those in the current round's group */
    size_t spares;                      /* joiners waiting while the run is RUNNING at max_nodes */
    size_t hosts_excluded, hosts_unfit; /* host records (rdzv_runs_unfit, max_node_failures) */
    size_t stragglers;                  /* ranks named stragglers now (rdzv_runs_timing) */
} rdzv_run_view_t;

typedef struct rdzv_member_view {
    const char *run_id, *host, *state;
    int64_t group_rank; /* -1: not in the round's group */
    uint64_t silent_ms; /* since its last message (a keep-alive, a JOIN) */
} rdzv_member_view_t;

/* Calls run_fn for every run, then member_fn for each of its members (either may be NULL). */
void rdzv_runs_visit(const rdzv_runs_t *rs, uint64_t now_ms,
                     void (*run_fn)(void *ctx, const rdzv_run_view_t *r),
                     void (*member_fn)(void *ctx, const rdzv_member_view_t *m), void *ctx);

/* Number of runs held (tests, STATS). */
size_t rdzv_runs_count(const rdzv_runs_t *rs);

/* "JOINING", "LAST_CALL", "RUNNING", "FAILED" or "UNKNOWN". Static string. */
const char *rdzv_run_state_name(int state);

#endif
