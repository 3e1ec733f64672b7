/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round_steps: the steps the round table's actions (rdzv_round_table.c) are made of: closing
 * a collecting round, ending a running one, the joiners' bounds, the group's liveness, and the
 * texts the refusals carry. Each step keeps the records of rdzv_run.h consistent on its own; the
 * phase it leaves the run in is the one its table cell names.
 *
 * "close": min(n, max) joiners whose JOIN is parked form the group, the members of the round
 * that ended last first, then the others in join order (group_pick); the others keep waiting;
 * every group member gets its REPLY_OK and the run is RUNNING. "end r": END_ROUND action, group
 * members become IDLE (they keep their group rank as a hint for stability), round r+1 starts
 * JOINING with the waiters and is re-evaluated at once (rdzv__run_check: n>=min: LAST_CALL, at
 * max with no IDLE member left and past run->not_before_ms: close); with "failed" the run is
 * FAILED instead and the waiters are refused.
 *
 * Costs: closing a round of N joiners is O(N) (rank assignment in three passes over a slot
 * array); liveness is checked lazily at the earliest possible expiry (O(N) per check, at most
 * once per silence window unless someone dies). */
#include "rdzv_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Formats a duration for messages: "600s" or "1500ms". */
static void fmt_ms(char *out, size_t cap, int64_t ms) {
    if (ms % 1000 == 0)
        snprintf(out, cap, "%llds", (long long)(ms / 1000));
    else
        snprintf(out, cap, "%lldms", (long long)ms);
}

/* Whether run r collects joiners for a round (JOINING or LAST_CALL): else its joiners are spares
 * (RUNNING at max_nodes) or answered spares of a run that ended (FAILED, DONE). */
static int run_collecting(const rdzv_run_t *r) {
    return r->state == RDZV_RUN_JOINING || r->state == RDZV_RUN_LAST_CALL;
}

/* Answers member m's parked JOIN with an error (DDP_E* code, text). The action's room was reserved
 * by the event (rdzv__event_reserve). */
static void reply_err(const rdzv_run_t *r, const rdzv_member_t *m, int code, const char *text,
                      rdzv_actions_t *out) {
    rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_REPLY_ERR, m->id);
    a->code = code;
    rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
    rdzv__copy_str(a->text, sizeof a->text, text);
}

/* Removes joiner only, keeping join order. O(njoin). */
void rdzv__joiners_remove(rdzv_run_t *r, rdzv_member_t *only) {
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
void rdzv__node_name(char *out, size_t cap, int64_t rank, const char *host) {
    if (rank >= 0)
        snprintf(out, cap, "node %lld (%s)", (long long)rank, host);
    else
        snprintf(out, cap, "node %s", host);
}

/* Re-evaluates a collecting round after its joiners changed: close at max, last call from min,
 * back to JOINING below min. At max it closes at once only when no member of the last round is
 * still to come back (connected, not re-joined): the spares and new nodes waiting must not take
 * their places (group_pick puts them first); last call bounds the wait for them. */
void rdzv__run_check(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
    if (!run_collecting(r))
        return;
    size_t n = joiners_parked(r);
    int full = (int64_t)n >= r->cfg.max_nodes && r->nidle == 0;
    if (full && now_ms >= r->not_before_ms) {
        rdzv__round_close(rs, r, now_ms, out);
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
    /* cap_group was reserved by the caller's event (see rdzv__event_reserve). */
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
void rdzv__round_close(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
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
        m->rank_base = base;
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
void rdzv__joiners_refuse(rdzv_runs_t *rs, rdzv_run_t *r, int code, const char *text,
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
void rdzv__failed_text(const rdzv_run_t *r, char *out, size_t cap) {
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

/* The text a JOIN gets from a DONE run. */
void rdzv__done_text(const rdzv_run_t *r, char *out, size_t cap) {
    rdzv__textf(out, cap, "rendezvous '%s' finished: round %lld passed its exit barrier", r->id,
                (long long)r->round);
}

/* The text a new node's JOIN gets from a DONE run: the id is taken until the store forgets it.
 * What to do comes first: the text goes through a ddp_err_t (DDP_ERR_TEXT_LEN). */
void rdzv__reused_text(const rdzv_runs_t *rs, const rdzv_run_t *r, uint64_t now_ms, char *out,
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
void rdzv__round_end(rdzv_runs_t *rs, rdzv_run_t *r, const char *why, int failed, uint64_t now_ms,
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
        rdzv__failed_text(r, text, sizeof text);
        rdzv__joiners_refuse(rs, r, DDP_ERDZV_CLOSED, text, now_ms, out);
        return;
    }
    r->state = RDZV_RUN_JOINING;
    rdzv__run_check(rs, r, now_ms, out);
}

/* Makes sure group and prev can hold every member the run may close a round with, and out can
 * take every action one event may produce, so that the transition cannot fail halfway. */
int rdzv__event_reserve(rdzv_run_t *r, size_t extra_members, rdzv_actions_t *out) {
    size_t n = r->nmembers + extra_members;
    if (rdzv__grow((void **)&r->group, &r->cap_group, n, sizeof *r->group) < 0 ||
        rdzv__grow((void **)&r->pick, &r->cap_pick, n, sizeof *r->pick) < 0 ||
        rdzv__grow((void **)&r->prev, &r->cap_prev, n, sizeof *r->prev) < 0)
        return -ENOMEM;
    if (rdzv__grow((void **)&r->joiners, &r->cap_join, n, sizeof *r->joiners) < 0)
        return -ENOMEM;
    return rdzv__actions_reserve(out, 2 * n + 4);
}

/* Frees what a run with no members no longer needs: rdzv__event_reserve sized joiners, group and
 * prev for every member it had (about 290 bytes each), and an empty run is kept for empty_keep_ms,
 * so without this a client could park thousands of joins in a run, close them, and repeat on up to
 * max_runs ids, holding gigabytes nobody accounts for. prev keeps its nprev entries (they name
 * the lost nodes); rdzv__event_reserve grows the arrays again when someone joins. */
void rdzv__run_trim(rdzv_run_t *r) {
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
void rdzv__group_remove(rdzv_run_t *r, rdzv_member_t *m) {
    if (m->group_rank >= 0 && (size_t)m->group_rank < r->ngroup)
        r->group[m->group_rank] = NULL;
    m->prev_rank = m->group_rank;
    m->group_rank = -1;
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
        rdzv__node_name(who, sizeof who, r->prev[i].rank, r->prev[i].host);
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
uint64_t rdzv__joiner_bound(const rdzv_run_t *r) {
    if (!run_collecting(r))
        return (uint64_t)(r->cfg.keep_alive_interval_ms * r->cfg.keep_alive_max_attempt);
    return (uint64_t)r->cfg.join_timeout_ms;
}

/* Counts the joiners whose bound (rdzv__joiner_bound) has passed. Joiners are in the order of
 * their bounds' starts (joining, or the answer) with one bound per run, so the expired ones are a
 * prefix: its length. */
size_t rdzv__joiners_due(const rdzv_run_t *r, uint64_t now_ms) {
    size_t k = 0;
    uint64_t to = rdzv__joiner_bound(r);
    while (k < r->njoin && r->joiners[k]->join_ms + to <= now_ms)
        k++;
    return k;
}

/* The first k spares' bounds passed (the run is RUNNING at max_nodes, or FAILED or DONE, where
 * every joiner is answered). The parked ones get DDP_ERDZV_SPARE and move to the end, answered:
 * each stays a spare for one more bound (it JOINs again at once, after its health check), so that
 * it counts for max_node_failures meanwhile and keeps its turn; the answered ones are gone and
 * dropped. The room for the reorder is r->pick's (rdzv__event_reserve). */
void rdzv__spares_answer(rdzv_runs_t *rs, rdzv_run_t *r, size_t k, uint64_t now_ms,
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

/* The first k joiners of a collecting round waited join_timeout: each gets DDP_ETIMEOUT naming
 * who joined and who of the last round is lost, and is dropped (an answered spare, which has no
 * JOIN parked, is dropped alone). */
void rdzv__joiners_time_out(rdzv_runs_t *rs, rdzv_run_t *r, size_t k, uint64_t now_ms,
                            rdzv_actions_t *out) {
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
void rdzv__group_check_live(rdzv_runs_t *rs, rdzv_run_t *r, uint64_t now_ms, rdzv_actions_t *out) {
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
        rdzv__node_name(who, sizeof who, m->group_rank, m->host);
        if (len + strlen(who) + 40 < sizeof why)
            len += (size_t)snprintf(why + len, sizeof why - len, "%s%s", ndead ? ", " : "", who);
        ndead++;
        rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_CLOSE, m->id);
        rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
        snprintf(a->text, sizeof a->text, "rendezvous '%s': %s silent for %s (keep-alive)", r->id,
                 who, dur);
        rdzv__group_remove(r, m);
        rdzv__member_free(rs, m, now_ms);
    }
    if (ndead == 0) {
        r->live_check_ms = oldest == UINT64_MAX ? UINT64_MAX : oldest + limit;
        return;
    }
    snprintf(why + len, sizeof why - len, " lost: silent for %s (%zu node%s)", dur, ndead,
             ndead == 1 ? "" : "s");
    rdzv__round_end(rs, r, why, 0, now_ms, out);
}
