/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round: the rendezvous state machines (one per run id) and their registry, as pure logic:
 * events and the time come in, actions go out (rdzv_round.h). The wire codec of the
 * rendezvous commands is rdzv_proto.c.
 *
 * A run collects joiners for round r, closes the round (assigns group ranks and answers every
 * parked JOIN), runs it, and ends it on a FAIL report, a member's death or a scale-up; round r+1
 * then collects the survivors, who re-join after seeing the END_ROUND key. Only FAIL reports
 * spend max_restarts; the count lives in the run, so a node that reconnects cannot reset it.
 * After a FAIL the next round closes no sooner than the crash loop's back-off (restart_backoff:
 * 0 after the first, then RDZV_RESTART_BACKOFF_FIRST_MS doubling), run->not_before_ms.
 *
 * Members: JOINING (a JOIN is parked; in run->joiners, join order), RUNNING (in run->group, by
 * group rank), IDLE (was in an ended round, has not re-joined yet; dropped when the next round
 * closes). Spares are joiners that arrived while the run was RUNNING at max_nodes; one answered
 * at its keep-alive bound stays in run->joiners, "answered" (no JOIN parked), until it JOINs again
 * or another bound passes.
 *
 * event \ state | JOINING             | LAST_CALL           | RUNNING              | FAILED
 * --------------+---------------------+---------------------+----------------------+-----------
 * JOIN          | add; n>=max: close; | add; n>=max: close  | group<max: end r     | refused
 *               | n>=min: LAST_CALL   |                     | (scale-up); a group  | (ERDZV_
 *               |                     |                     | member: end r; at    | CLOSED)
 *               |                     |                     | max: a spare         |
 * last call due | -                   | close -> RUNNING    | -                    | -
 * join_timeout  | reply ETIMEOUT "n of| -                   | -                    | -
 *               | min joined; lost:"  |                     |                      |
 * spare bound   | -                   | -                   | spare: reply ERDZV_  | -
 *               |                     |                     | SPARE, answered (it  |
 *               |                     |                     | joins again); answer-|
 *               |                     |                     | ed: drop             |
 * FAIL(r)       | ignored             | ignored             | r current, from a    | ignored
 *               |                     |                     | member: restarts++,  |
 *               |                     |                     | its host's failures++|
 *               |                     |                     | (excluded at max_    |
 *               |                     |                     | node_failures if the |
 *               |                     |                     | rest >= min), end r; |
 *               |                     |                     | >max: FAILED         |
 * LEAVE         | drop                | drop; n<min:        | member: end r naming | drop
 *               |                     | JOINING             | it; spare: drop      |
 * silence       | -                   | -                   | CLOSE + end r naming | -
 *               |                     |                     | the silent members   |
 * HEARTBEAT     | refresh             | refresh             | refresh              | refresh
 * BEAT_FOR(m,k) | k is m's: refresh m | k is m's: refresh m | k is m's: refresh m  | k is m's:
 *               |                     |                     |                      | refresh m
 * ABORT(why)    | from a member that  | from a member that  | from a member that   | ignored
 *               | ran in a group:     | ran in a group:     | ran in a group: end r|
 *               | FAILED, joiners     | FAILED, joiners     | FAILED, waiters      |
 *               | refused naming it   | refused naming it   | refused naming it    |
 * UNFIT(host)   | record the host's failed health check (any state; shown by STATUS), from  |
 *               | its own member, or from a non-member for a host not in the running group  |
 * FINISH(r)     | ignored             | ignored             | r current, from a    | ignored
 *               |                     |                     | member: DONE, spares |
 *               |                     |                     | refused (ERDZV_DONE) |
 *
 * (n: joiners with a JOIN parked; at max a round closes only once no IDLE member is left
 * (run->nidle: one leaving, or refused as excluded, may close it), else last call bounds the
 * wait; no close comes before run->not_before_ms (back-off after a FAIL), a round at max then
 * closing at that time; "close": RUNNING; FAILED refuses waiting joiners with DDP_ERDZV_CLOSED;
 * DONE, a run whose round passed its exit barrier, refuses every JOIN with DDP_ERDZV_DONE and
 * ignores every other event as FAILED does; a JOIN from an excluded host is refused with
 * DDP_ERDZV_EXCLUDED in every state (rdzv_round_hosts.c); the spare bound is keep_alive_interval x
 * keep_alive_max_attempt. BEAT_FOR comes from any connection and counts only with the key m's JOIN
 * reply carried; ABORT's why becomes the run's last failure, which every later JOIN's refusal
 * names.)
 *
 * "end r": END_ROUND action, group members become IDLE (they keep their group rank as a hint for
 * stability), round r+1 starts JOINING with the waiters and is re-evaluated at once (n>=min:
 * LAST_CALL, n>=max: close). "close": min(n, max) joiners form the group, the members of the
 * round that ended last first, then the others in join order (group_pick); the others keep
 * waiting. Heartbeats refresh a member in any state; they never change state.
 *
 * Costs: closing a round of N joiners is O(N) (rank assignment in three passes over a slot
 * array); a heartbeat is O(1) (member hash); liveness is checked lazily at the earliest possible
 * expiry (O(N) per check, at most once per silence window unless someone dies).
 *
 * The records (runs, members) are in rdzv_run.h, the registry in rdzv_runs.c, STATUS in
 * rdzv_round_status.c. */
#include "rdzv_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* Formats a duration for messages: "600s" or "1500ms". */
static void fmt_ms(char *out, size_t cap, int64_t ms) {
    if (ms % 1000 == 0)
        snprintf(out, cap, "%llds", (long long)(ms / 1000));
    else
        snprintf(out, cap, "%lldms", (long long)ms);
}

/* ---- transitions ---- */

/* How long after the FAIL that spent restart k the next round may close (see
 * RDZV_RESTART_BACKOFF_FIRST_MS): 0, then the first back-off doubling up to the cap. */
static uint64_t restart_backoff(int64_t k) {
    if (k <= 1)
        return 0;
    uint64_t ms = RDZV_RESTART_BACKOFF_FIRST_MS;
    for (int64_t i = 2; i < k && ms < RDZV_RESTART_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < RDZV_RESTART_BACKOFF_MAX_MS ? ms : RDZV_RESTART_BACKOFF_MAX_MS;
}

/* Whether run r collects joiners for a round (JOINING or LAST_CALL): else its joiners are spares
 * (RUNNING at max_nodes) or answered spares of a run that ended (FAILED, DONE). */
static int run_collecting(const rdzv_run_t *r) {
    return r->state == RDZV_RUN_JOINING || r->state == RDZV_RUN_LAST_CALL;
}

/* Answers member m's parked JOIN with an error (DDP_E* code, text). The action's room was reserved
 * by the event (event_reserve). */
static void reply_err(const rdzv_run_t *r, const rdzv_member_t *m, int code, const char *text,
                      rdzv_actions_t *out) {
    rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_REPLY_ERR, m->id);
    a->code = code;
    rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
    rdzv__copy_str(a->text, sizeof a->text, text);
}

/* Removes joiner only, keeping join order. O(njoin). */
static void joiners_remove(rdzv_run_t *r, rdzv_member_t *only) {
    size_t k = 0;
    for (size_t i = 0; i < r->njoin; i++)
        if (r->joiners[i] != only)
            r->joiners[k++] = r->joiners[i];
    r->njoin = k;
    if (only->answered) {
        only->answered = 0;
        r->nanswered--;
    }
}

/* Joiners whose JOIN is parked: an answered spare is one until it JOINs again. */
static size_t joiners_parked(const rdzv_run_t *r) {
    return r->njoin - r->nanswered;
}

/* Formats "node 1 (10.0.0.2)" for a member with a rank, else "node 10.0.0.2". */
static void node_name(char *out, size_t cap, int64_t rank, const char *host) {
    if (rank >= 0)
        snprintf(out, cap, "node %lld (%s)", (long long)rank, host);
    else
        snprintf(out, cap, "node %s", host);
}

static void round_close(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out);

/* Re-evaluates a collecting round after its joiners changed: close at max, last call from min,
 * back to JOINING below min. At max it closes at once only when no member of the last round is
 * still to come back (connected, not re-joined): the spares and new nodes waiting must not take
 * their places (group_pick puts them first); last call bounds the wait for them. */
static void run_check(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    if (!run_collecting(r))
        return;
    size_t n = joiners_parked(r);
    int full = (int64_t)n >= r->cfg.max_nodes && r->nidle == 0;
    if (full && now_ms >= r->not_before_ms) {
        round_close(rs, r, now_ms, out);
    } else if ((int64_t)n >= r->cfg.min_nodes) {
        if (r->state == RDZV_RUN_JOINING) {
            r->state = RDZV_RUN_LAST_CALL;
            r->last_call_ms = now_ms + (uint64_t)r->cfg.last_call_timeout_ms;
        }
        /* A crash loop's back-off holds every close; at max the round closes once it is over. */
        if (r->last_call_ms < r->not_before_ms || full)
            r->last_call_ms = r->not_before_ms;
    } else {
        r->state = RDZV_RUN_JOINING;
    }
}

/* Gives the n members of pick group ranks in r->group, in three passes: a valid, unclaimed
 * want_node_rank first; then the member's rank in its previous round when free; then the gaps
 * in pick's order. O(n). */
static void ranks_assign(rdzv_run_t *r, rdzv_member_t **pick, size_t n) {
    /* cap_group was reserved by the caller's event (see event_reserve). */
    rdzv_member_t **slot = r->group;
    for (size_t i = 0; i < n; i++) {
        slot[i] = NULL;
        pick[i]->group_rank = -1;
    }
    for (size_t i = 0; i < n; i++) {
        rdzv_member_t *m = pick[i];
        if (m->want_rank >= 0 && m->want_rank < (int64_t)n && slot[m->want_rank] == NULL) {
            slot[m->want_rank] = m;
            m->group_rank = m->want_rank;
        }
    }
    for (size_t i = 0; i < n; i++) {
        rdzv_member_t *m = pick[i];
        if (m->group_rank < 0 && m->prev_rank >= 0 && m->prev_rank < (int64_t)n &&
            slot[m->prev_rank] == NULL) {
            slot[m->prev_rank] = m;
            m->group_rank = m->prev_rank;
        }
    }
    size_t gap = 0;
    for (size_t i = 0; i < n; i++) {
        rdzv_member_t *m = pick[i];
        if (m->group_rank >= 0)
            continue;
        while (slot[gap] != NULL)
            gap++;
        slot[gap] = m;
        m->group_rank = (int64_t)gap;
    }
}

/* A joiner that was in the group of the round that ended last: its own connection was (it
 * re-joined), or its JOIN carried that round as the newest it was told (a node that lost its
 * connection, or went silent, and came back on a new one). */
static int joiner_returns(const rdzv_run_t *r, const rdzv_member_t *m) {
    return r->ended_round >= 0 &&
           (m->group_round == r->ended_round || m->carried_round == r->ended_round + 1);
}

/* Chooses the group of the closing round into r->pick, at most max_nodes of the joiners whose
 * JOIN is parked: the members of the last round first, then the others (spares, new nodes), each
 * in join order; the rest stay in r->joiners in their order (so that their bounds still expire
 * as a prefix). Returns the group's size. O(njoin). */
static size_t group_pick(rdzv_run_t *r) {
    size_t n = joiners_parked(r), k = 0, rest = 0;
    if ((int64_t)n > r->cfg.max_nodes)
        n = (size_t)r->cfg.max_nodes;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < r->njoin && k < n; i++) {
            rdzv_member_t *m = r->joiners[i];
            if (!m->answered && m->group_rank != -2 && joiner_returns(r, m) == (pass == 0)) {
                m->group_rank = -2; /* picked; ranks_assign sets the rank */
                r->pick[k++] = m;
            }
        }
    for (size_t i = 0; i < r->njoin; i++)
        if (r->joiners[i]->group_rank != -2)
            r->joiners[rest++] = r->joiners[i];
    r->njoin = rest;
    return k;
}

/* Closes the collecting round: group_pick's members form the group (ranks_assign), and every
 * group member gets its REPLY_OK. O(n). */
static void round_close(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    size_t n = group_pick(r);
    ranks_assign(r, r->pick, n);
    rdzv_member_t **slot = r->group;
    r->ngroup = n;

    int64_t world = 0;
    for (size_t i = 0; i < n; i++)
        world += slot[i]->nproc;
    int64_t base = 0;
    for (size_t i = 0; i < n; i++) {
        rdzv_member_t *m = slot[i];
        m->state = MEMBER_RUNNING;
        m->group_round = r->round;
        m->last_seen_ms = now_ms;
        rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_REPLY_OK, m->id);
        rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
        rdzv__copy_str(a->round_keys, sizeof a->round_keys, r->cfg.round_keys);
        a->res.round = r->round;
        a->res.group_rank = (int64_t)i;
        a->res.group_world_size = (int64_t)n;
        a->res.rank_base = base;
        a->res.world_size = world;
        rdzv__copy_str(a->res.master_addr, sizeof a->res.master_addr, slot[0]->host);
        a->res.master_port = slot[0]->master_port;
        a->res.restarts_used = r->restarts_used;
        a->res.member = (int64_t)m->id;
        a->res.member_key = m->key;
        base += m->nproc;
    }
    /* Members of the previous round that did not come back are no longer members. */
    for (rdzv_member_t *m = r->mhead, *next; m != NULL; m = next) {
        next = m->rnext;
        if (m->state == MEMBER_IDLE)
            rdzv__member_free(rs, m, now_ms);
    }
    r->nidle = 0;
    r->state = RDZV_RUN_RUNNING;
    r->live_check_ms =
        now_ms + (uint64_t)(r->cfg.keep_alive_interval_ms * r->cfg.keep_alive_max_attempt);
}

/* Replies an error to every joiner (the run is FAILED or DONE) and drops them. An answered spare
 * has no JOIN to answer: it stays, so that its next JOIN is refused as a spare's of this run (a
 * DONE run's spares leave with success), and is dropped a keep-alive bound after its answer. */
static void joiners_refuse(rdzv_runs_t *rs, rdzv_run_t *r, int code, const char *text,
                           uint64_t now_ms, rdzv_actions_t *out) {
    size_t kept = 0;
    for (size_t i = 0; i < r->njoin; i++) {
        if (r->joiners[i]->answered) {
            r->joiners[kept++] = r->joiners[i];
            continue;
        }
        reply_err(r, r->joiners[i], code, text, out);
        rdzv__member_free(rs, r->joiners[i], now_ms);
    }
    r->njoin = kept;
}

/* The text a refused join gets from a FAILED run. */
static void failed_text(const rdzv_run_t *r, char *out, size_t cap) {
    if (r->aborted)
        rdzv__textf(out, cap, "rendezvous '%s" RDZV_TEXT_FAILED "stopped by %s", r->id,
                    r->last_failure);
    else {
        size_t n = rdzv__textf(out, cap,
                               "rendezvous '%s" RDZV_TEXT_FAILED
                               "max_restarts (%lld) spent" RDZV_TEXT_LAST_FAILURE "%s",
                               r->id, (long long)r->cfg.max_restarts, r->last_failure);
        rdzv__hosts_tally(r, out + n, cap - n);
    }
}

int rdzv_runs_failed_text(const rdzv_runs_t *rs, const char *run_id, char *out, size_t cap) {
    const rdzv_run_t *r = rdzv__run_find(rs, run_id);
    if (r == NULL || r->state != RDZV_RUN_FAILED)
        return -ENOENT;
    failed_text(r, out, cap);
    return 0;
}

/* The text a JOIN gets from a DONE run. */
static void done_text(const rdzv_run_t *r, char *out, size_t cap) {
    rdzv__textf(out, cap, "rendezvous '%s' finished: round %lld passed its exit barrier", r->id,
                (long long)r->round);
}

/* The text a new node's JOIN gets from a DONE run: the id is taken until the store forgets it.
 * What to do comes first: the text goes through a ddp_err_t (DDP_ERR_TEXT_LEN). */
static void reused_text(const rdzv_runs_t *rs, const rdzv_run_t *r, uint64_t now_ms, char *out,
                        size_t cap) {
    char keep[32], left[64] = "";
    fmt_ms(keep, sizeof keep, (int64_t)rs->empty_keep_ms);
    if (r->nmembers == 0) {
        uint64_t until = r->empty_since_ms + rs->empty_keep_ms;
        snprintf(left, sizeof left, "; %llds left",
                 (long long)((until > now_ms ? until - now_ms : 0) + 999) / 1000);
    }
    rdzv__textf(out, cap,
                "rendezvous '%s' finished already: use another --rdzv_id (the store keeps a "
                "finished run %s after its last node leaves%s)",
                r->id, keep, left);
}

/* Ends the running round (its dead members are already removed from the group): END_ROUND,
 * the group becomes IDLE and is remembered, round r+1 collects the waiters. With failed set the
 * run becomes FAILED instead and the waiters are refused. */
static void round_end(rdzv_runs_t *rs, rdzv_run_t *r, const char *why, int failed, uint64_t now_ms,
                      rdzv_actions_t *out) {
    rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_END_ROUND, 0);
    rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
    a->round = r->round;
    snprintf(a->text, sizeof a->text, "rendezvous '%s' round %lld ended: %s", r->id,
             (long long)r->round, why);
    /* prev has room for the group: group_reserve sized both. */
    r->nprev = 0;
    for (size_t i = 0; i < r->ngroup; i++) {
        rdzv_member_t *m = r->group[i];
        if (m == NULL)
            continue;
        prev_node_t *p = &r->prev[r->nprev++];
        p->id = m->id;
        p->rank = m->group_rank;
        rdzv__copy_str(p->host, sizeof p->host, m->host);
        m->prev_rank = m->group_rank;
        m->group_rank = -1;
        m->state = MEMBER_IDLE;
    }
    r->nidle = r->nprev;
    r->ngroup = 0;
    r->ended_round = r->round;
    r->round++;
    if (r->round < r->min_round)
        r->round = r->min_round;
    if (failed) {
        char text[RDZV_ROUND_TEXT_MAX];
        r->state = RDZV_RUN_FAILED;
        failed_text(r, text, sizeof text);
        joiners_refuse(rs, r, DDP_ERDZV_CLOSED, text, now_ms, out);
        return;
    }
    r->state = RDZV_RUN_JOINING;
    run_check(rs, r, now_ms, out);
}

/* Makes sure group and prev can hold every member the run may close a round with, and out can
 * take every action one event may produce, so that the transition cannot fail halfway. */
static int event_reserve(rdzv_run_t *r, size_t extra_members, rdzv_actions_t *out) {
    size_t n = r->nmembers + extra_members;
    if (rdzv__grow((void **)&r->group, &r->cap_group, n, sizeof *r->group) < 0 ||
        rdzv__grow((void **)&r->pick, &r->cap_pick, n, sizeof *r->pick) < 0 ||
        rdzv__grow((void **)&r->prev, &r->cap_prev, n, sizeof *r->prev) < 0)
        return -ENOMEM;
    if (rdzv__grow((void **)&r->joiners, &r->cap_join, n, sizeof *r->joiners) < 0)
        return -ENOMEM;
    return rdzv__actions_reserve(out, 2 * n + 4);
}

/* Frees what a run with no members no longer needs: event_reserve sized joiners, group and prev
 * for every member it had (about 290 bytes each), and an empty run is kept for empty_keep_ms, so
 * without this a client could park thousands of joins in a run, close them, and repeat on up to
 * max_runs ids, holding gigabytes nobody accounts for. prev keeps its nprev entries (they name
 * the lost nodes); event_reserve grows the arrays again when someone joins. */
static void run_trim(rdzv_run_t *r) {
    if (r->nmembers != 0)
        return;
    free(r->joiners);
    free(r->group);
    free(r->pick);
    r->joiners = NULL;
    r->group = NULL;
    r->pick = NULL;
    r->njoin = r->cap_join = r->ngroup = r->cap_group = r->cap_pick = r->nanswered = 0;
    if (r->cap_prev > r->nprev) {
        prev_node_t *p = r->nprev ? realloc(r->prev, r->nprev * sizeof *p) : NULL;
        if (r->nprev == 0 || p != NULL) {
            if (r->nprev == 0)
                free(r->prev);
            r->prev = p;
            r->cap_prev = r->nprev;
        }
    }
}

/* Takes member m out of the running group (it died or re-joined). */
static void group_remove(rdzv_run_t *r, rdzv_member_t *m) {
    if (m->group_rank >= 0 && (size_t)m->group_rank < r->ngroup)
        r->group[m->group_rank] = NULL;
    m->prev_rank = m->group_rank;
    m->group_rank = -1;
}

/* ---- events ---- */

/* Checks a join's fields. Returns 0 or DDP_EUSAGE with err naming the field. */
static int join_validate(const rdzv_join_req_t *q, ddp_err_t *err) {
    const rdzv_round_cfg_t *c = &q->cfg;
    const char *id = q->run_id;
    if (id[0] == '\0' || memchr(id, '\0', sizeof q->run_id) == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous join: empty or unterminated run id");
    if (q->host[0] == '\0' || memchr(q->host, '\0', sizeof q->host) == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': empty or unterminated host", id);
    if (q->nproc < 1 || q->nproc > RDZV_ROUND_MAX_NPROC)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': nproc %lld out of range 1..%d", id,
                           (long long)q->nproc, RDZV_ROUND_MAX_NPROC);
    if (q->want_node_rank < -1 || q->want_node_rank >= RDZV_ROUND_MAX_NODES)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': node rank %lld out of range", id,
                           (long long)q->want_node_rank);
    if (q->master_port < 0 || q->master_port > 65535)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': master port %lld out of range", id,
                           (long long)q->master_port);
    if (c->min_nodes < 1 || c->max_nodes < c->min_nodes || c->max_nodes > RDZV_ROUND_MAX_NODES)
        return ddp_err_set(err, DDP_EUSAGE,
                           "rendezvous '%s': nnodes %lld:%lld invalid (need 1 <= min <= max <= %d)",
                           id, (long long)c->min_nodes, (long long)c->max_nodes,
                           RDZV_ROUND_MAX_NODES);
    /* 24 days bounds every timeout, so that interval x attempts cannot overflow. */
    const int64_t day24 = (int64_t)24 * 24 * 3600 * 1000;
    if (c->last_call_timeout_ms < 0 || c->last_call_timeout_ms > day24 || c->join_timeout_ms < 0 ||
        c->join_timeout_ms > day24 || c->keep_alive_interval_ms < 0 ||
        c->keep_alive_interval_ms > day24 || c->keep_alive_max_attempt < 0 ||
        c->keep_alive_max_attempt > 1000)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': a timeout is out of range", id);
    if (c->max_restarts < 0 || c->max_restarts > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': max_restarts %lld out of range", id,
                           (long long)c->max_restarts);
    if (c->max_node_failures < 0 || c->max_node_failures > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE, "rendezvous '%s': max_node_failures %lld out of range",
                           id, (long long)c->max_node_failures);
    if (q->min_round < 0 || q->min_round > RDZV_ROUND_MAX_ROUND || q->restarts_used < 0 ||
        q->restarts_used > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE,
                           "rendezvous '%s': carried round %lld or restarts %lld out of range", id,
                           (long long)q->min_round, (long long)q->restarts_used);
    return 0;
}

static rdzv_round_cfg_t cfg_defaults(rdzv_round_cfg_t c) {
    if (c.last_call_timeout_ms == 0)
        c.last_call_timeout_ms = RDZV_DEFAULT_LAST_CALL_TIMEOUT_MS;
    if (c.join_timeout_ms == 0)
        c.join_timeout_ms = RDZV_DEFAULT_JOIN_TIMEOUT_MS;
    if (c.keep_alive_interval_ms == 0)
        c.keep_alive_interval_ms = RDZV_DEFAULT_KEEP_ALIVE_INTERVAL_MS;
    if (c.keep_alive_max_attempt == 0)
        c.keep_alive_max_attempt = RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT;
    return c;
}

/* A member's BEAT_FOR key: random, so that a member id another store handed out (ids restart
 * with the store) or a stray number never beats for this member. */
static int64_t member_key_make(void) {
    uint64_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts;
    }
    return (int64_t)(k >> 1); /* non-negative: it reads the same in every language's i64 */
}

static int join_park(rdzv_runs_t *rs, rdzv_run_t *r, rdzv_member_t *m, int was_running,
                     uint64_t now_ms, rdzv_actions_t *out);

int rdzv_runs_join(rdzv_runs_t *rs, uint64_t member, const rdzv_join_req_t *req, uint64_t now_ms,
                   rdzv_actions_t *out, ddp_err_t *err) {
    int rc = join_validate(req, err);
    if (rc < 0)
        return rc;
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m != NULL && strcmp(m->run->id, req->run_id) != 0)
        return ddp_err_set(err, -EBUSY, "rendezvous '%s': this connection is a member of '%s'",
                           req->run_id, m->run->id);
    if (m != NULL && m->state == MEMBER_JOINING && !m->answered)
        return ddp_err_set(err, -EALREADY, "rendezvous '%s': this connection already waits to join",
                           req->run_id);
    rdzv_round_cfg_t cfg = cfg_defaults(req->cfg);
    rdzv_run_t *r = m != NULL ? m->run : rdzv__run_find(rs, req->run_id);
    int created = 0;
    if (r == NULL) {
        rc = rdzv__run_create(rs, req->run_id, &cfg, &r, err);
        if (rc < 0)
            return rc;
        created = 1;
    }
    if (r->state == RDZV_RUN_FAILED) {
        char text[RDZV_ROUND_TEXT_MAX];
        failed_text(r, text, sizeof text);
        return ddp_err_set(err, DDP_ERDZV_CLOSED, "%s", text);
    }
    if (r->state == RDZV_RUN_DONE) {
        /* A node of this run (a member, a spare, or one told a round of it) learns that the job
         * finished without it; a new node must not take that for its own job's success. */
        char text[RDZV_ROUND_TEXT_MAX];
        if (m != NULL || req->min_round > 0 || req->restarts_used > 0) {
            done_text(r, text, sizeof text);
            return ddp_err_set(err, DDP_ERDZV_DONE, "%s", text);
        }
        reused_text(rs, r, now_ms, text, sizeof text);
        return ddp_err_set(err, DDP_ERDZV_REUSED, "%s", text);
    }
    char excluded[RDZV_ROUND_TEXT_MAX];
    if (rdzv__host_join(r, req->host, now_ms, excluded, sizeof excluded)) {
        /* A member of the ended round that is excluded will not come back: the round stops
         * waiting for it (it is a connection of the store, no longer a member). */
        if (m != NULL && m->state == MEMBER_IDLE)
            rdzv_runs_leave(rs, member, now_ms, out);
        return ddp_err_set(err, DDP_ERDZV_EXCLUDED, "%s", excluded);
    }
    if (cfg.min_nodes != r->cfg.min_nodes || cfg.max_nodes != r->cfg.max_nodes)
        return ddp_err_set(err, DDP_EUSAGE,
                           "rendezvous '%s': this node asks for nnodes %lld:%lld but the run was "
                           "started with %lld:%lld",
                           r->id, (long long)cfg.min_nodes, (long long)cfg.max_nodes,
                           (long long)r->cfg.min_nodes, (long long)r->cfg.max_nodes);
    if (event_reserve(r, m == NULL ? 1 : 0, out) < 0 ||
        (m == NULL && (m = calloc(1, sizeof *m)) == NULL)) {
        if (created)
            rdzv__run_free(rs, r);
        return ddp_err_set(err, -ENOMEM, "rendezvous '%s': out of memory", req->run_id);
    }
    if (m->run == NULL) {
        rdzv__member_link(rs, r, m, member);
        m->key = member_key_make();
    }
    int was_running = m->state == MEMBER_RUNNING && r->state == RDZV_RUN_RUNNING;
    rdzv__copy_str(m->host, sizeof m->host, req->host);
    m->want_rank = req->want_node_rank;
    m->nproc = req->nproc;
    m->master_port = req->master_port;
    m->carried_round = req->min_round;
    /* An answered spare keeps its place in the joiners (and the bound counted from its answer):
     * they stay in the order of their bounds. */
    if (!m->answered)
        m->join_ms = now_ms;
    m->last_seen_ms = now_ms;
    /* What the node carries past a store that forgot the run: the rounds go on after the newest
     * it was told (only a round nobody has been told is renumbered; a running round's successor
     * is, when it ends), and the restarts it saw counted stay counted. */
    if (req->min_round > r->min_round)
        r->min_round = req->min_round;
    if (r->state != RDZV_RUN_RUNNING && r->round < r->min_round)
        r->round = r->min_round;
    if (req->restarts_used > r->restarts_used)
        r->restarts_used = req->restarts_used;
    return join_park(rs, r, m, was_running, now_ms, out);
}

/* Parks m's JOIN in r and runs what it sets off: the end of the running round when m was in
 * its group (a membership change) or when the group has room (a scale-up), else the usual check
 * for a round that can close. Returns 0. */
static int join_park(rdzv_runs_t *rs, rdzv_run_t *r, rdzv_member_t *m, int was_running,
                     uint64_t now_ms, rdzv_actions_t *out) {
    char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX];
    if (was_running) {
        /* A member of the running group joining again has left it: a membership change. */
        node_name(who, sizeof who, m->group_rank, m->host);
        group_remove(r, m);
        m->state = MEMBER_JOINING;
        r->joiners[r->njoin++] = m;
        snprintf(why, sizeof why, "%s joined again", who);
        round_end(rs, r, why, 0, now_ms, out);
        return 0;
    }
    if (m->answered) {
        m->answered = 0; /* a spare JOINing again after its keep-alive answer */
        r->nanswered--;
    } else {
        if (m->state == MEMBER_IDLE)
            r->nidle--;
        m->state = MEMBER_JOINING;
        r->joiners[r->njoin++] = m;
    }
    if (r->state == RDZV_RUN_RUNNING) {
        if ((int64_t)r->ngroup < r->cfg.max_nodes) {
            node_name(who, sizeof who, -1, m->host);
            snprintf(why, sizeof why, "scale-up: %s wants to join (%zu of max %lld nodes)", who,
                     r->ngroup, (long long)r->cfg.max_nodes);
            round_end(rs, r, why, 0, now_ms, out);
        }
        return 0; /* at max: waits for the next round */
    }
    run_check(rs, r, now_ms, out);
    return 0;
}

int rdzv_runs_heartbeat(rdzv_runs_t *rs, const char *run_id, uint64_t member, uint64_t now_ms,
                        int64_t *round, int *state) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL || (run_id != NULL && strcmp(m->run->id, run_id) != 0))
        return -ENOENT;
    if (now_ms > m->last_seen_ms)
        m->last_seen_ms = now_ms;
    if (round != NULL)
        *round = m->run->round;
    if (state != NULL)
        *state = (int)m->run->state;
    return 0;
}

int rdzv_runs_beat_for(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t key,
                       uint64_t now_ms, int64_t *round, int *state) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL || m->key != key)
        return -ENOENT;
    return rdzv_runs_heartbeat(rs, run_id, member, now_ms, round, state);
}

int rdzv_runs_fail(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                   const char *what, uint64_t now_ms, rdzv_actions_t *out, rdzv_fail_reply_t *rep) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    memset(rep, 0, sizeof *rep);
    rep->status = RDZV_FAIL_IGNORED;
    if (r == NULL)
        return -ENOENT;
    rdzv_member_t *m = rdzv__member_find(rs, member);
    int current = r->state == RDZV_RUN_RUNNING && round == r->round && m != NULL && m->run == r &&
                  m->state == MEMBER_RUNNING;
    if (current && event_reserve(r, 0, out) < 0)
        current = 0; /* out of memory: the failure is reported again or by the end key */
    if (current) {
        char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX], note[RDZV_ROUND_TEXT_MAX];
        const char *how = what != NULL && what[0] != '\0' ? what : "worker group failed";
        node_name(who, sizeof who, m->group_rank, m->host);
        r->restarts_used++;
        rdzv__textf(r->last_failure, sizeof r->last_failure, "%s round %lld: %.255s", who,
                    (long long)round, how);
        /* The first FAIL of a round ends it: its host is the root cause. */
        rdzv__host_failed(rs, r, m, round, how, now_ms, note, sizeof note);
        int failed = r->restarts_used > r->cfg.max_restarts;
        r->not_before_ms = now_ms + restart_backoff(r->restarts_used);
        rdzv__textf(why, sizeof why, "worker group failed on %s (restart %lld of max %lld)%s",
                    r->last_failure, (long long)r->restarts_used, (long long)r->cfg.max_restarts,
                    note);
        round_end(rs, r, why, failed, now_ms, out);
        rep->status = failed ? RDZV_FAIL_RUN_FAILED : RDZV_FAIL_COUNTED;
    }
    rep->round = r->round;
    rep->restarts_used = r->restarts_used;
    rep->max_restarts = r->cfg.max_restarts;
    return 0;
}

int rdzv_runs_abort(rdzv_runs_t *rs, const char *run_id, uint64_t member, const char *why,
                    uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (r == NULL || m == NULL || m->run != r || r->state == RDZV_RUN_FAILED ||
        r->state == RDZV_RUN_DONE)
        return -ENOENT;
    if (m->group_round < 0)
        return -EPERM; /* a spare or a first-time joiner has nothing to stop yet */
    if (event_reserve(r, 0, out) < 0)
        return -ENOMEM;
    char who[RDZV_HOST_MAX + 64];
    /* A member between rounds has no rank now: the one it had names it. */
    node_name(who, sizeof who, m->group_rank >= 0 ? m->group_rank : m->prev_rank, m->host);
    rdzv__textf(r->last_failure, sizeof r->last_failure, "%s: %.255s", who,
                why != NULL && why[0] != '\0' ? why : "aborted");
    r->aborted = 1;
    if (r->state == RDZV_RUN_RUNNING) {
        char why_end[RDZV_ROUND_TEXT_MAX];
        rdzv__textf(why_end, sizeof why_end, "the run was stopped by %s", r->last_failure);
        round_end(rs, r, why_end, 1, now_ms, out); /* FAILED, the waiters refused */
        return 0;
    }
    char text[RDZV_ROUND_TEXT_MAX];
    r->state = RDZV_RUN_FAILED;
    failed_text(r, text, sizeof text);
    joiners_refuse(rs, r, DDP_ERDZV_CLOSED, text, now_ms, out);
    run_trim(r);
    return 0;
}

int rdzv_runs_finish(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                     uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_run_t *r = rdzv__run_find(rs, run_id);
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (r == NULL || m == NULL || m->run != r || r->state != RDZV_RUN_RUNNING ||
        round != r->round || m->state != MEMBER_RUNNING)
        return -ENOENT;
    if (event_reserve(r, 0, out) < 0)
        return -ENOMEM;
    char text[RDZV_ROUND_TEXT_MAX];
    r->state = RDZV_RUN_DONE;
    done_text(r, text, sizeof text);
    joiners_refuse(rs, r, DDP_ERDZV_DONE, text, now_ms, out);
    return 0;
}

int rdzv_runs_leave(rdzv_runs_t *rs, uint64_t member, uint64_t now_ms, rdzv_actions_t *out) {
    rdzv_member_t *m = rdzv__member_find(rs, member);
    if (m == NULL)
        return 0;
    rdzv_run_t *r = m->run;
    if (m->state == MEMBER_RUNNING && r->state == RDZV_RUN_RUNNING &&
        event_reserve(r, 0, out) == 0) {
        char who[RDZV_HOST_MAX + 64], why[RDZV_ROUND_TEXT_MAX];
        node_name(who, sizeof who, m->group_rank, m->host);
        snprintf(why, sizeof why, "%s lost: connection closed", who);
        group_remove(r, m);
        rdzv__member_free(rs, m, now_ms);
        round_end(rs, r, why, 0, now_ms, out);
        run_trim(r);
        return 0;
    }
    if (m->state == MEMBER_RUNNING)
        group_remove(r, m); /* only on -ENOMEM above: the silence check ends the round later */
    if (m->state == MEMBER_JOINING)
        joiners_remove(r, m);
    int was_idle = m->state == MEMBER_IDLE;
    if (was_idle)
        r->nidle--;
    rdzv__member_free(rs, m, now_ms);
    /* Below min: back to JOINING (no action); the last member of the ended round not back is
     * gone: the round may close at max now. */
    if (was_idle ? event_reserve(r, 0, out) == 0 : r->state == RDZV_RUN_LAST_CALL)
        run_check(rs, r, now_ms, out);
    run_trim(r);
    return 0;
}

/* Appends to text the previous round's members that are not joining now ("; lost: node 1 (h),
 * ..."), cut to fit. O(nprev) through the member hash. */
static void lost_names(const rdzv_runs_t *rs, const rdzv_run_t *r, char *text, size_t cap) {
    size_t len = strlen(text), nlost = 0, shown = 0;
    for (size_t i = 0; i < r->nprev; i++) {
        const rdzv_member_t *m = rdzv__member_find(rs, r->prev[i].id);
        if (m != NULL && m->run == r && m->state == MEMBER_JOINING)
            continue;
        nlost++;
        char who[RDZV_HOST_MAX + 64];
        node_name(who, sizeof who, r->prev[i].rank, r->prev[i].host);
        /* Keep room for ", and 99999 more". */
        if (len + strlen(who) + 10 + 24 < cap) {
            len += (size_t)snprintf(text + len, cap - len, "%s%s", shown ? ", " : "; lost: ", who);
            shown++;
        }
    }
    if (nlost > shown && len < cap)
        snprintf(text + len, cap - len, "%s%zu more lost", shown ? ", and " : "; ", nlost - shown);
}

/* How long a joiner's JOIN stays parked: join_timeout while a round collects; while the run is
 * RUNNING at max_nodes the joiners are spares, answered after the keep-alive bound so that they
 * JOIN again (a spare's keep-alive: one that is gone does not come back and is dropped). A
 * FAILED or DONE run holds only answered spares, dropped after that bound. */
static uint64_t joiner_bound(const rdzv_run_t *r) {
    if (!run_collecting(r))
        return (uint64_t)(r->cfg.keep_alive_interval_ms * r->cfg.keep_alive_max_attempt);
    return (uint64_t)r->cfg.join_timeout_ms;
}

/* joiners_expire while the run is RUNNING (or FAILED or DONE, where every joiner is answered):
 * the first k spares' bounds passed. The parked ones get DDP_ERDZV_SPARE and move to the end,
 * answered; the answered ones are dropped. The room for the reorder is r->pick's
 * (event_reserve). */
static void spares_answer(rdzv_runs_t *rs, rdzv_run_t *r, size_t k, uint64_t now_ms,
                          rdzv_actions_t *out) {
    char text[RDZV_ROUND_TEXT_MAX];
    snprintf(text, sizeof text,
             "rendezvous '%s' round %lld: running at max_nodes=%lld; waiting as a spare", r->id,
             (long long)r->round, (long long)r->cfg.max_nodes);
    size_t nkept = 0;
    for (size_t i = 0; i < k; i++) {
        rdzv_member_t *m = r->joiners[i];
        if (m->answered) {
            r->nanswered--;
            rdzv__member_free(rs, m, now_ms);
            continue;
        }
        reply_err(r, m, DDP_ERDZV_SPARE, text, out);
        m->answered = 1;
        m->join_ms = now_ms;
        r->nanswered++;
        r->pick[nkept++] = m;
    }
    memmove(r->joiners, r->joiners + k, (r->njoin - k) * sizeof *r->joiners);
    r->njoin -= k;
    memcpy(r->joiners + r->njoin, r->pick, nkept * sizeof *r->joiners);
    r->njoin += nkept;
}

/* Answers every joiner whose bound (joiner_bound) has passed: an error reply while a round
 * collects, and the joiner is dropped; DDP_ERDZV_SPARE to a spare, which stays a spare, answered,
 * for one more bound (it JOINs again at once, after its health check), so that it counts for
 * max_node_failures meanwhile and keeps its turn; an answered spare whose bound passed again
 * is gone and dropped. Joiners are in the order of their bounds' starts (joining, or the answer)
 * with one bound per run, so the expired ones are a prefix. */
static void joiners_expire(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    size_t k = 0;
    uint64_t to = joiner_bound(r);
    while (k < r->njoin && r->joiners[k]->join_ms + to <= now_ms)
        k++;
    if (k == 0)
        return;
    if (!run_collecting(r)) {
        spares_answer(rs, r, k, now_ms, out);
        return;
    }
    char text[RDZV_ROUND_TEXT_MAX], dur[32];
    fmt_ms(dur, sizeof dur, r->cfg.join_timeout_ms);
    snprintf(text, sizeof text,
             "rendezvous '%s' round %lld: %zu of min %lld nodes joined "
             "within join_timeout=%s",
             r->id, (long long)r->round, joiners_parked(r), (long long)r->cfg.min_nodes, dur);
    lost_names(rs, r, text, sizeof text);
    for (size_t i = 0; i < k; i++) {
        rdzv_member_t *m = r->joiners[i];
        if (m->answered) {
            r->nanswered--; /* no JOIN to answer */
            rdzv__member_free(rs, m, now_ms);
            continue;
        }
        reply_err(r, m, DDP_ETIMEOUT, text, out);
        rdzv__member_free(rs, m, now_ms);
    }
    memmove(r->joiners, r->joiners + k, (r->njoin - k) * sizeof *r->joiners);
    r->njoin -= k;
}

/* Declares the running group's silent members dead (CLOSE each, then END_ROUND naming them), or
 * schedules the next check at the earliest possible expiry. */
static void group_check_live(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    uint64_t limit = (uint64_t)(r->cfg.keep_alive_interval_ms * r->cfg.keep_alive_max_attempt);
    uint64_t oldest = UINT64_MAX;
    char why[RDZV_ROUND_TEXT_MAX], dur[32];
    size_t len = 0, ndead = 0;
    fmt_ms(dur, sizeof dur, (int64_t)limit);
    for (size_t i = 0; i < r->ngroup; i++) {
        rdzv_member_t *m = r->group[i];
        if (m == NULL)
            continue;
        if (m->last_seen_ms + limit > now_ms) {
            if (m->last_seen_ms < oldest)
                oldest = m->last_seen_ms;
            continue;
        }
        char who[RDZV_HOST_MAX + 64];
        node_name(who, sizeof who, m->group_rank, m->host);
        if (len + strlen(who) + 40 < sizeof why)
            len += (size_t)snprintf(why + len, sizeof why - len, "%s%s", ndead ? ", " : "", who);
        ndead++;
        rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_CLOSE, m->id);
        rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
        snprintf(a->text, sizeof a->text, "rendezvous '%s': %s silent for %s (keep-alive)", r->id,
                 who, dur);
        group_remove(r, m);
        rdzv__member_free(rs, m, now_ms);
    }
    if (ndead == 0) {
        r->live_check_ms = oldest == UINT64_MAX ? UINT64_MAX : oldest + limit;
        return;
    }
    snprintf(why + len, sizeof why - len, " lost: silent for %s (%zu node%s)", dur, ndead,
             ndead == 1 ? "" : "s");
    round_end(rs, r, why, 0, now_ms, out);
}

int rdzv_runs_tick(rdzv_runs_t *rs, uint64_t now_ms, rdzv_actions_t *out) {
    for (rdzv_run_t *r = rs->runs, *next; r != NULL; r = next) {
        next = r->next_all;
        if (r->nmembers == 0) {
            if (r->empty_since_ms + rs->empty_keep_ms <= now_ms)
                rdzv__run_free(rs, r);
            continue;
        }
        if (event_reserve(r, 0, out) < 0)
            continue; /* try again on the next tick */
        switch (r->state) {
        case RDZV_RUN_JOINING: joiners_expire(rs, r, now_ms, out); break;
        case RDZV_RUN_LAST_CALL:
            if (r->last_call_ms <= now_ms)
                round_close(rs, r, now_ms, out);
            break;
        case RDZV_RUN_RUNNING:
            joiners_expire(rs, r, now_ms, out);
            if (r->live_check_ms <= now_ms)
                group_check_live(rs, r, now_ms, out);
            break;
        case RDZV_RUN_FAILED:
        case RDZV_RUN_DONE: joiners_expire(rs, r, now_ms, out); break;
        }
        run_trim(r); /* the last joiners expired, or the last members went silent */
    }
    return 0;
}

uint64_t rdzv_runs_next_deadline(const rdzv_runs_t *rs) {
    uint64_t t = UINT64_MAX;
    for (const rdzv_run_t *r = rs->runs; r != NULL; r = r->next_all) {
        uint64_t d = UINT64_MAX;
        if (r->nmembers == 0) {
            d = r->empty_since_ms + rs->empty_keep_ms;
        } else if (r->state == RDZV_RUN_LAST_CALL) {
            d = r->last_call_ms;
        } else {
            if (r->njoin > 0)
                d = r->joiners[0]->join_ms + joiner_bound(r);
            if (r->state == RDZV_RUN_RUNNING && r->live_check_ms < d)
                d = r->live_check_ms;
        }
        if (d < t)
            t = d;
    }
    return t;
}
