/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round_hosts: what a run remembers of each host, for as long as the run id lives: how many
 * group failures had their root cause there (the first failure of a round: the FAIL that ended
 * it), whether that excluded the host (max_node_failures), and its last failed health check (an
 * UNFIT report). A sick node that fails the job again and again is kept out of later rounds while
 * the others still meet min_nodes; `ddprun status` and the metrics show every record.
 *
 * Records are few (hosts that failed or reported themselves unfit) and looked up by a scan: a
 * FAIL, an UNFIT or a JOIN costs O(records), at most RDZV_RUN_HOSTS_MAX. The round table's
 * actions (rdzv_round_table.c) keep them; the registry (rdzv_runs.c) frees them with their run,
 * and calls nothing here. */
#include "rdzv_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

rdzv_host_rec_t *rdzv__host_find(const rdzv_run_t *r, const char *host) {
    for (size_t i = 0; i < r->nhosts; i++)
        if (strcmp(r->hosts[i].host, host) == 0)
            return &r->hosts[i];
    return NULL;
}

/* How many records r may hold: twice its nodes and some room for reports from hosts that never
 * joined, within RDZV_RUN_HOSTS_MAX. */
static size_t hosts_cap(const rdzv_run_t *r) {
    if (r->cfg_unset)
        return RDZV_RUN_HOSTS_MAX; /* restored records come before the run's size */
    int64_t want = 2 * r->cfg.max_nodes + 16;
    return want < RDZV_RUN_HOSTS_MAX ? (size_t)want : RDZV_RUN_HOSTS_MAX;
}

/* Drops the least recently changed record that decides nothing (not excluded, no failure
 * counted). Returns 0, or -ENOSPC when every record decides something. */
static int hosts_make_room(rdzv_runs_t *rs, rdzv_run_t *r) {
    size_t victim = r->nhosts;
    for (size_t i = 0; i < r->nhosts; i++) {
        const rdzv_host_rec_t *h = &r->hosts[i];
        if (h->excluded || h->failures > 0)
            continue;
        if (victim == r->nhosts || h->touched_ms < r->hosts[victim].touched_ms)
            victim = i;
    }
    if (victim == r->nhosts)
        return -ENOSPC;
    r->hosts[victim] = r->hosts[--r->nhosts];
    rs->nhosts--;
    return 0;
}

rdzv_host_rec_t *rdzv__host_get(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, uint64_t now_ms) {
    rdzv_host_rec_t *h = rdzv__host_find(r, host);
    if (h != NULL)
        return h;
    if ((r->nhosts >= hosts_cap(r) || rs->nhosts >= RDZV_HOSTS_TOTAL_MAX) &&
        hosts_make_room(rs, r) < 0)
        return NULL;
    if (rdzv__grow((void **)&r->hosts, &r->cap_hosts, r->nhosts + 1, sizeof *r->hosts) < 0)
        return NULL;
    h = &r->hosts[r->nhosts++];
    rs->nhosts++;
    memset(h, 0, sizeof *h);
    rdzv__copy_str(h->host, sizeof h->host, host);
    h->touched_ms = now_ms;
    return h;
}

void rdzv__hosts_tally(const rdzv_run_t *r, char *out, size_t cap) {
    enum { SHOWN = 4 };
    const rdzv_host_rec_t *top[SHOWN] = {NULL};
    size_t counted = 0;
    for (size_t i = 0; i < r->nhosts; i++) {
        const rdzv_host_rec_t *h = &r->hosts[i];
        if (h->failures <= 0)
            continue;
        counted++;
        /* Insert into the short list, most failures first. */
        for (size_t k = 0; k < SHOWN; k++) {
            if (top[k] == NULL || h->failures > top[k]->failures) {
                memmove(&top[k + 1], &top[k], (SHOWN - 1 - k) * sizeof top[0]);
                top[k] = h;
                break;
            }
        }
    }
    if (cap > 0)
        out[0] = '\0';
    size_t len = 0;
    for (size_t k = 0; k < SHOWN && top[k] != NULL && len < cap; k++)
        len += rdzv__textf(out + len, cap - len, "%s%s x%lld", k ? ", " : RDZV_TEXT_ROOT_CAUSES,
                           top[k]->host, (long long)top[k]->failures);
    if (counted > SHOWN && len < cap)
        rdzv__textf(out + len, cap - len, ", %zu more", counted - SHOWN);
}

int rdzv__host_join(rdzv_run_t *r, const char *host, uint64_t now_ms, char *text, size_t cap) {
    rdzv_host_rec_t *h = rdzv__host_find(r, host);
    if (h == NULL)
        return 0;
    if (h->excluded && h->straggler) {
        rdzv__textf(text, cap, "rendezvous '%s': host %s is excluded: %s", r->id, h->host,
                    h->last_failure);
        return 1;
    }
    if (h->excluded) {
        rdzv__textf(text, cap,
                    "rendezvous '%s': host %s is excluded after %lld group failures "
                    "(max_node_failures=%lld); the last: %s",
                    r->id, h->host, (long long)h->failures, (long long)r->cfg.max_node_failures,
                    h->last_failure);
        return 1;
    }
    if (h->unfit) {
        h->unfit = 0;
        h->touched_ms = now_ms;
    }
    return 0;
}

/* Members of r that would still be there without host's: the group of the round that is
 * ending and the joiners (spares). Excluded hosts never get this far. */
static int64_t nodes_without(const rdzv_run_t *r, const char *host) {
    int64_t n = 0;
    for (size_t i = 0; i < r->ngroup; i++)
        n += r->group[i] != NULL && strcmp(r->group[i]->host, host) != 0;
    for (size_t i = 0; i < r->njoin; i++)
        n += strcmp(r->joiners[i]->host, host) != 0;
    return n;
}

void rdzv__host_failed(rdzv_runs_t *rs, rdzv_run_t *r, const rdzv_member_t *m, int64_t round,
                       const char *what, uint64_t now_ms, char *note, size_t cap) {
    note[0] = '\0';
    rdzv_host_rec_t *h = rdzv__host_get(rs, r, m->host, now_ms);
    if (h == NULL)
        return; /* full of records that decide something: this failure is not held against it */
    h->failures++;
    h->touched_ms = now_ms;
    rdzv__textf(h->last_failure, sizeof h->last_failure, "round %lld: %s", (long long)round, what);
    int64_t bound = r->cfg.max_node_failures;
    if (bound <= 0 || h->failures < bound)
        return;
    int64_t left = nodes_without(r, m->host);
    if (left >= r->cfg.min_nodes) {
        h->excluded = 1;
        h->kept_at_min = 0;
        rdzv__textf(note, cap, "; host %s excluded after %lld failures (max_node_failures=%lld)",
                    h->host, (long long)h->failures, (long long)bound);
    } else {
        /* Without it the job would stop: the restart budget decides, as without the bound. */
        h->kept_at_min = 1;
        rdzv__textf(note, cap,
                    "; host %s has %lld failures (max_node_failures=%lld) but stays: without it "
                    "%lld of min %lld nodes",
                    h->host, (long long)h->failures, (long long)bound, (long long)left,
                    (long long)r->cfg.min_nodes);
    }
}

int rdzv__host_unfit(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, const char *reason,
                     uint64_t now_ms) {
    rdzv_host_rec_t *h = rdzv__host_get(rs, r, host, now_ms);
    if (h == NULL)
        return -ENOSPC;
    h->unfit = 1;
    h->unfit_ms = now_ms;
    h->touched_ms = now_ms;
    rdzv__copy_str(h->unfit_reason, sizeof h->unfit_reason,
                   reason != NULL && reason[0] != '\0' ? reason : "health check failed");
    return 0;
}

void rdzv__host_record_action(const rdzv_run_t *r, const rdzv_host_rec_t *h, rdzv_actions_t *out) {
    rdzv_action_t *a = rdzv__action_add(out, RDZV_ACT_HOST_RECORD, 0);
    rdzv__copy_str(a->run_id, sizeof a->run_id, r->id);
    rdzv__copy_str(a->host, sizeof a->host, h->host);
    rdzv__copy_str(a->text, sizeof a->text, h->last_failure);
    a->failures = h->failures;
    a->excluded = h->excluded;
}

int rdzv__host_restore(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, int64_t failures,
                       int excluded, const char *last_failure, uint64_t now_ms) {
    rdzv_host_rec_t *h = rdzv__host_get(rs, r, host, now_ms);
    if (h == NULL)
        return -ENOSPC;
    /* A record the run made itself since (it counted a failure here) is newer. */
    if (h->failures > failures)
        return 0;
    h->failures = failures;
    h->excluded = excluded != 0;
    h->touched_ms = now_ms;
    rdzv__copy_str(h->last_failure, sizeof h->last_failure,
                   last_failure != NULL ? last_failure : "");
    return 0;
}

int rdzv__host_straggler(rdzv_runs_t *rs, rdzv_run_t *r, const char *host, const char *why,
                         uint64_t now_ms, char *note, size_t cap) {
    note[0] = '\0';
    size_t spares = 0;
    for (size_t i = 0; i < r->njoin; i++)
        spares += strcmp(r->joiners[i]->host, host) != 0;
    int64_t left = nodes_without(r, host);
    if (spares == 0 || left < r->cfg.min_nodes) {
        if (spares == 0)
            rdzv__textf(note, cap, "host %s stays: no spare to take its place", host);
        else
            rdzv__textf(note, cap, "host %s stays: without it %lld of min %lld nodes", host,
                        (long long)left, (long long)r->cfg.min_nodes);
        return 0;
    }
    rdzv_host_rec_t *h = rdzv__host_get(rs, r, host, now_ms);
    if (h == NULL)
        return -ENOSPC;
    h->excluded = 1;
    h->straggler = 1;
    h->kept_at_min = 0;
    h->touched_ms = now_ms;
    rdzv__textf(h->last_failure, sizeof h->last_failure, "%s", why);
    rdzv__textf(note, cap, "host %s excluded as a straggler; a spare takes its place", host);
    return 1;
}
