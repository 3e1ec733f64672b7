/* SPDX-License-Identifier: Apache-2.0
 * rdzv_runs: the registry of the rendezvous runs (the round machines of rdzv_round_table.c): runs
 * by id and members by connection id in two hash tables, their creation and freeing (a run with
 * everything it holds, its host records included), and the action list the events append to. The
 * records themselves are in rdzv_run.h. Nothing here calls the other files of the round machine:
 * they all call it. */
#include "rdzv_run.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; /* murmur3 finaliser: connection ids are sequential */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* snprintf for messages, where cutting a long text is intended (so the compiler's truncation
 * warning does not apply). Returns the length written (at most cap - 1). */
size_t rdzv__textf(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

void rdzv_actions_reset(rdzv_actions_t *a) {
    a->n = 0;
}

void rdzv_actions_close(rdzv_actions_t *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* Makes room for extra more actions, so that the transition that follows cannot fail halfway. */
int rdzv__actions_reserve(rdzv_actions_t *a, size_t extra) {
    if (a->cap - a->n >= extra)
        return 0;
    size_t cap = a->cap ? a->cap : 16;
    while (cap - a->n < extra)
        cap *= 2;
    rdzv_action_t *v = realloc(a->v, cap * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    a->v = v;
    a->cap = cap;
    return 0;
}

/* Appends a zeroed action; the room was reserved. */
rdzv_action_t *rdzv__action_add(rdzv_actions_t *a, rdzv_action_kind_t kind, uint64_t member) {
    rdzv_action_t *x = &a->v[a->n++];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->member = member;
    return x;
}

int rdzv__grow(void **v, size_t *cap, size_t want, size_t elem) {
    if (*cap >= want)
        return 0;
    size_t c = *cap ? *cap : 8;
    while (c < want)
        c *= 2;
    void *p = realloc(*v, c * elem);
    if (p == NULL)
        return -ENOMEM;
    *v = p;
    *cap = c;
    return 0;
}

const char *rdzv_run_state_name(int state) {
    switch (state) {
    case RDZV_RUN_JOINING: return "JOINING";
    case RDZV_RUN_LAST_CALL: return "LAST_CALL";
    case RDZV_RUN_RUNNING: return "RUNNING";
    case RDZV_RUN_FAILED: return "FAILED";
    case RDZV_RUN_DONE: return "DONE";
    default: return "UNKNOWN";
    }
}

const char *rdzv__member_state_name(member_state_t s) {
    switch (s) {
    case MEMBER_JOINING: return "joining";
    case MEMBER_RUNNING: return "running";
    default: return "idle";
    }
}

/* ---- registry ---- */

rdzv_runs_t *rdzv_runs_new(const rdzv_runs_opts_t *opts) {
    rdzv_runs_t *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return NULL;
    rs->max_runs = opts != NULL && opts->max_runs ? opts->max_runs : RDZV_RUNS_DEFAULT_MAX;
    rs->empty_keep_ms =
        opts != NULL && opts->empty_keep_ms ? opts->empty_keep_ms : RDZV_RUNS_DEFAULT_EMPTY_KEEP_MS;
    rs->nrun_buckets = 16;
    while (rs->nrun_buckets < rs->max_runs)
        rs->nrun_buckets *= 2;
    rs->nmem_buckets = 64;
    rs->run_buckets = calloc(rs->nrun_buckets, sizeof *rs->run_buckets);
    rs->mem_buckets = calloc(rs->nmem_buckets, sizeof *rs->mem_buckets);
    if (rs->run_buckets == NULL || rs->mem_buckets == NULL) {
        free(rs->run_buckets);
        free(rs->mem_buckets);
        free(rs);
        return NULL;
    }
    return rs;
}

rdzv_run_t *rdzv__run_find(const rdzv_runs_t *rs, const char *id) {
    rdzv_run_t *r = rs->run_buckets[hash_str(id) & (rs->nrun_buckets - 1)];
    while (r != NULL && strcmp(r->id, id) != 0)
        r = r->hnext;
    return r;
}

rdzv_member_t *rdzv__member_find(const rdzv_runs_t *rs, uint64_t id) {
    rdzv_member_t *m = rs->mem_buckets[hash_u64(id) & (rs->nmem_buckets - 1)];
    while (m != NULL && m->id != id)
        m = m->hnext;
    return m;
}

/* Doubles the member hash when it gets crowded; failure only keeps chains longer. */
static void member_hash_grow(rdzv_runs_t *rs) {
    if (rs->nmembers < rs->nmem_buckets)
        return;
    size_t nb = rs->nmem_buckets * 2;
    rdzv_member_t **b = calloc(nb, sizeof *b);
    if (b == NULL)
        return;
    for (size_t i = 0; i < rs->nmem_buckets; i++) {
        rdzv_member_t *m = rs->mem_buckets[i];
        while (m != NULL) {
            rdzv_member_t *next = m->hnext;
            size_t h = hash_u64(m->id) & (nb - 1);
            m->hnext = b[h];
            b[h] = m;
            m = next;
        }
    }
    free(rs->mem_buckets);
    rs->mem_buckets = b;
    rs->nmem_buckets = nb;
}

/* Unlinks m from the hash and its run's member list and frees it. The caller has already removed
 * it from joiners/group. */
void rdzv__member_free(rdzv_runs_t *rs, rdzv_member_t *m, uint64_t now_ms) {
    rdzv_member_t **pp = &rs->mem_buckets[hash_u64(m->id) & (rs->nmem_buckets - 1)];
    while (*pp != m)
        pp = &(*pp)->hnext;
    *pp = m->hnext;
    rs->nmembers--;
    rdzv_run_t *r = m->run;
    if (m->rprev != NULL)
        m->rprev->rnext = m->rnext;
    else
        r->mhead = m->rnext;
    if (m->rnext != NULL)
        m->rnext->rprev = m->rprev;
    if (--r->nmembers == 0)
        r->empty_since_ms = now_ms;
    free(m);
}

void rdzv__run_free(rdzv_runs_t *rs, rdzv_run_t *r) {
    while (r->mhead != NULL)
        rdzv__member_free(rs, r->mhead, 0);
    rdzv_run_t **pp = &rs->run_buckets[hash_str(r->id) & (rs->nrun_buckets - 1)];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    if (r->prev_all != NULL)
        r->prev_all->next_all = r->next_all;
    else
        rs->runs = r->next_all;
    if (r->next_all != NULL)
        r->next_all->prev_all = r->prev_all;
    rs->nruns--;
    free(r->joiners);
    free(r->group);
    free(r->pick);
    free(r->prev);
    rs->nhosts -= r->nhosts; /* the registry's count of host records (RDZV_HOSTS_TOTAL_MAX) */
    free(r->hosts);
    rdzv__strag_free(&r->strag);
    free(r);
}

void rdzv_runs_free(rdzv_runs_t *rs) {
    if (rs == NULL)
        return;
    while (rs->runs != NULL)
        rdzv__run_free(rs, rs->runs);
    free(rs->run_buckets);
    free(rs->mem_buckets);
    free(rs);
}

size_t rdzv_runs_count(const rdzv_runs_t *rs) {
    return rs->nruns;
}

/* Creates run id with cfg into *out, evicting the run empty the longest when the registry is
 * full. Returns 0, DDP_ETOOBIG or -ENOMEM with err set. */
int rdzv__run_create(rdzv_runs_t *rs, const char *id, const rdzv_round_cfg_t *cfg, rdzv_run_t **out,
                     ddp_err_t *err) {
    if (rs->nruns >= rs->max_runs) {
        rdzv_run_t *victim = NULL;
        for (rdzv_run_t *r = rs->runs; r != NULL; r = r->next_all)
            if (r->nmembers == 0 && (victim == NULL || r->empty_since_ms < victim->empty_since_ms))
                victim = r;
        if (victim == NULL)
            return ddp_err_set(err, DDP_ETOOBIG,
                               "unable to create rendezvous '%s': the server holds %zu runs, all "
                               "active",
                               id, rs->max_runs);
        rdzv__run_free(rs, victim);
    }
    rdzv_run_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return ddp_err_set(err, -ENOMEM, "unable to create rendezvous '%s': out of memory", id);
    rdzv__copy_str(r->id, sizeof r->id, id);
    r->cfg = *cfg;
    r->state = RDZV_RUN_JOINING;
    r->ended_round = -1;
    rdzv__strag_init(&r->strag);
    size_t h = hash_str(id) & (rs->nrun_buckets - 1);
    r->hnext = rs->run_buckets[h];
    rs->run_buckets[h] = r;
    r->next_all = rs->runs;
    if (rs->runs != NULL)
        rs->runs->prev_all = r;
    rs->runs = r;
    rs->nruns++;
    *out = r;
    return 0;
}

/* Makes m, a new member with connection id member, known to the registry and to run r. */
void rdzv__member_link(rdzv_runs_t *rs, rdzv_run_t *r, rdzv_member_t *m, uint64_t member) {
    m->id = member;
    m->run = r;
    m->prev_rank = -1;
    m->group_rank = -1;
    m->group_round = -1;
    size_t h = hash_u64(member) & (rs->nmem_buckets - 1);
    m->hnext = rs->mem_buckets[h];
    rs->mem_buckets[h] = m;
    rs->nmembers++;
    m->rnext = r->mhead;
    if (r->mhead != NULL)
        r->mhead->rprev = m;
    r->mhead = m;
    r->nmembers++;
    member_hash_grow(rs);
}
