/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round_status: what a run looks like from outside: the JSON of STATUS and STATUS_PAGE
 * (`ddprun status`) and the walk the metrics page takes over runs and members. Read only. */
#include "rdzv_run.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct status_ctx {
    const rdzv_run_t *run;
    uint64_t now_ms;
    rdzv_progress_lookup_fn lookup;
    void *lookup_ctx;
} status_ctx_t;

/* A member's state as STATUS names it: a joiner while the run is RUNNING (at max_nodes) is a
 * spare, waiting for a place. */
static const char *member_state(const rdzv_run_t *r, const rdzv_member_t *m) {
    if (m->state == MEMBER_JOINING && r->state == RDZV_RUN_RUNNING)
        return "spare";
    return rdzv__member_state_name(m->state);
}

/* Whether the detector's stragglers are the run's now: those of the running round, or of the
 * round that just ended (one excluded as a straggler ends it: every node still hears of it) until
 * the next round's first report starts the detector over. */
static int strag_current(const rdzv_run_t *r) {
    const rdzv_strag_t *st = &r->strag;
    return st->named > 0 && st->round >= 0 &&
           (st->round == r->round || (r->state != RDZV_RUN_RUNNING && st->round == r->round - 1));
}

/* The run's stragglers (rdzv_runs_stragglers_json). */
static json_t *stragglers_json(const rdzv_run_t *r, uint64_t now_ms) {
    json_t *v = json_array();
    const rdzv_strag_t *st = &r->strag;
    if (v == NULL || !strag_current(r))
        return v;
    for (size_t i = 0; i < st->n; i++) {
        const rdzv_strag_rank_t *k = &st->v[i];
        if (!k->named)
            continue;
        json_t *o = json_pack(
            "{s:I, s:I, s:s, s:f, s:I, s:I, s:I}", "rank", (json_int_t)i, "group_rank",
            (json_int_t)k->group_rank, "host", k->host, "ratio",
            (double)(int)(k->ratio * 100 + 0.5) / 100, "per_step_us", (json_int_t)k->per_step_us,
            "median_us", (json_int_t)(k->ratio > 0 ? k->per_step_us / k->ratio : 0), "since_ms",
            (json_int_t)(now_ms > k->since_ms ? now_ms - k->since_ms : 0));
        if (o != NULL && k->kept[0] != '\0')
            json_object_set_new(o, "kept", json_string(k->kept));
        if (o == NULL || json_array_append_new(v, o) < 0) {
            json_decref(v);
            return NULL;
        }
    }
    return v;
}

int rdzv_runs_stragglers_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                              ddp_buf_t *out) {
    const rdzv_run_t *r = rdzv__run_find(rs, run_id);
    if (r == NULL)
        return -ENOENT;
    json_t *v = stragglers_json(r, now_ms);
    char *s = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    int rc = s != NULL && ddp_buf_append(out, s, strlen(s)) == 0 ? 0 : -ENOMEM;
    free(s);
    json_decref(v);
    return rc;
}

/* The run's host records: [{host, failures, excluded[, kept_at_min][, last_failure][, unfit,
 * reason, unfit_age_ms]}]. */
static json_t *hosts_json(const rdzv_run_t *r, uint64_t now_ms) {
    json_t *v = json_array();
    for (size_t i = 0; v != NULL && i < r->nhosts; i++) {
        const rdzv_host_rec_t *h = &r->hosts[i];
        json_t *o = json_pack("{s:s, s:I, s:b}", "host", h->host, "failures",
                              (json_int_t)h->failures, "excluded", h->excluded);
        if (o != NULL && h->kept_at_min)
            json_object_set_new(o, "kept_at_min", json_true());
        if (o != NULL && (h->failures > 0 || h->straggler))
            json_object_set_new(o, "last_failure", json_string(h->last_failure));
        if (o != NULL && h->straggler)
            json_object_set_new(o, "straggler", json_true());
        if (o != NULL && h->unfit) {
            json_object_set_new(o, "unfit", json_true());
            json_object_set_new(o, "reason", json_string(h->unfit_reason));
            json_object_set_new(
                o, "unfit_age_ms",
                json_integer((json_int_t)(now_ms > h->unfit_ms ? now_ms - h->unfit_ms : 0)));
        }
        if (o == NULL || json_array_append_new(v, o) < 0) {
            json_decref(v);
            return NULL;
        }
    }
    return v;
}

/* The progress running member m reported for the current round into *p: 0, or -1 when there
 * is none. */
static int member_progress(const status_ctx_t *sc, const rdzv_member_t *m, rdzv_progress_t *p) {
    if (sc->lookup == NULL || m->group_rank < 0 || m->state != MEMBER_RUNNING ||
        sc->lookup(sc->lookup_ctx, sc->run->id, m->group_rank, p) < 0 || p->round != sc->run->round)
        return -1;
    return 0;
}

/* {ratio, wall_ms, productive_ms, lost_ms, restarts}: ratio is productive / wall (0 without
 * wall time). */
static json_t *goodput_json(int64_t wall, int64_t productive, int64_t lost, int64_t restarts) {
    return json_pack("{s:f, s:I, s:I, s:I, s:I}", "ratio",
                     wall > 0 ? (double)productive / (double)wall : 0.0, "wall_ms",
                     (json_int_t)wall, "productive_ms", (json_int_t)productive, "lost_ms",
                     (json_int_t)lost, "restarts", (json_int_t)restarts);
}

static int64_t sum_capped(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* The job's goodput over the running members that report theirs: the sums of their times (ratio:
 * the sum of productive over the sum of wall), the most restarts any of them counted, and
 * "nodes", how many they are; NULL when none reports. */
static json_t *job_goodput_json(const status_ctx_t *sc) {
    const rdzv_run_t *r = sc->run;
    int64_t wall = 0, productive = 0, lost = 0, restarts = 0, nodes = 0;
    rdzv_progress_t p;
    for (size_t i = 0; i < r->ngroup; i++) {
        if (r->group[i] == NULL || member_progress(sc, r->group[i], &p) < 0 || !p.has_goodput)
            continue;
        wall = sum_capped(wall, p.wall_ms);
        productive = sum_capped(productive, p.productive_ms);
        lost = sum_capped(lost, p.lost_ms);
        restarts = p.restarts > restarts ? p.restarts : restarts;
        nodes++;
    }
    json_t *o = nodes > 0 ? goodput_json(wall, productive, lost, restarts) : NULL;
    if (o != NULL && json_object_set_new(o, "nodes", json_integer((json_int_t)nodes)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *member_json(const status_ctx_t *sc, const rdzv_member_t *m) {
    int64_t silent = (int64_t)(sc->now_ms > m->last_seen_ms ? sc->now_ms - m->last_seen_ms : 0);
    json_t *o =
        json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I}", "member", (json_int_t)m->id, "host",
                  m->host, "state", member_state(sc->run, m), "group_rank",
                  (json_int_t)m->group_rank, "nproc", (json_int_t)m->nproc, "want_node_rank",
                  (json_int_t)m->want_rank, "silent_ms", (json_int_t)silent);
    rdzv_progress_t p;
    if (o == NULL || member_progress(sc, m, &p) < 0)
        return o;
    if (p.step >= 0)
        json_object_set_new(o, "step", json_integer((json_int_t)p.step));
    int64_t age = p.beat_age_ms > INT64_MAX - silent ? INT64_MAX : p.beat_age_ms + silent;
    json_object_set_new(o, "beat_age_ms", json_integer((json_int_t)age));
    if (p.has_goodput)
        json_object_set_new(o, "goodput",
                            goodput_json(p.wall_ms, p.productive_ms, p.lost_ms, p.restarts));
    return o;
}

/* Appends member m to members when it is at position *pos of STATUS's order and inside the page
 * [first, first + limit); counts it in *pos. Returns 0 or -ENOMEM. */
static int member_page_add(const status_ctx_t *sc, json_t *members, const rdzv_member_t *m,
                           size_t *pos, size_t first, size_t limit) {
    size_t at = (*pos)++;
    if (at < first || at - first >= limit)
        return 0;
    return json_array_append_new(members, member_json(sc, m)) == 0 ? 0 : -ENOMEM;
}

/* The JSON of STATUS (page NULL: every member) or STATUS_PAGE (page[0] = first, page[1] =
 * limit: the members of that page, and the counts by state). Either costs O(members) in all;
 * only the page's members are written. */
static int status_write(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                        rdzv_progress_lookup_fn lookup, void *ctx, const size_t *page,
                        ddp_buf_t *out, ddp_err_t *err) {
    const rdzv_run_t *r = rdzv__run_find(rs, run_id);
    if (r == NULL)
        return ddp_err_set(err, -ENOENT, "no rendezvous '%s' on this server", run_id);
    size_t first = page ? page[0] : 0, limit = page ? page[1] : SIZE_MAX;
    json_t *members = json_array();
    json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:o}", "run", r->id, "round",
                          (json_int_t)r->round, "state", rdzv_run_state_name(r->state), "min_nodes",
                          (json_int_t)r->cfg.min_nodes, "max_nodes", (json_int_t)r->cfg.max_nodes,
                          "restarts_used", (json_int_t)r->restarts_used, "max_restarts",
                          (json_int_t)r->cfg.max_restarts, "last_failure",
                          r->last_failure[0] ? json_string(r->last_failure) : json_null());
    status_ctx_t sc = {r, now_ms, lookup, ctx};
    int rc = o != NULL && members != NULL ? 0 : -ENOMEM;
    size_t pos = 0, running = 0, idle = 0;
    for (size_t i = 0; rc == 0 && i < r->ngroup; i++)
        if (r->group[i] != NULL) {
            running++;
            rc = member_page_add(&sc, members, r->group[i], &pos, first, limit);
        }
    for (size_t i = 0; rc == 0 && i < r->njoin; i++)
        rc = member_page_add(&sc, members, r->joiners[i], &pos, first, limit);
    for (const rdzv_member_t *m = r->mhead; rc == 0 && m != NULL; m = m->rnext)
        if (m->state == MEMBER_IDLE) {
            idle++;
            rc = member_page_add(&sc, members, m, &pos, first, limit);
        }
    if (rc == 0 && page != NULL &&
        json_object_set_new(o, "nodes",
                            json_pack("{s:I, s:I, s:I, s:I, s:I}", "total", (json_int_t)pos,
                                      "running", (json_int_t)running, "joining",
                                      (json_int_t)(r->state == RDZV_RUN_RUNNING ? 0 : r->njoin),
                                      "spares",
                                      (json_int_t)(r->state == RDZV_RUN_RUNNING ? r->njoin : 0),
                                      "idle", (json_int_t)idle)) < 0)
        rc = -ENOMEM;
    if (rc == 0 && page != NULL && json_object_set_new(o, "first", json_integer(first)) < 0)
        rc = -ENOMEM;
    /* The job's goodput costs a key lookup per running member: not for the counts alone (limit
     * 0), which every waiting agent asks for, and once for a reader of every page (the first). */
    json_t *gp = rc == 0 && limit > 0 && first == 0 ? job_goodput_json(&sc) : NULL;
    if (gp != NULL && json_object_set_new(o, "goodput", gp) < 0)
        rc = -ENOMEM;
    if (rc == 0 && json_object_set(o, "members", members) < 0)
        rc = -ENOMEM;
    if (rc == 0 && json_object_set_new(o, "hosts", hosts_json(r, now_ms)) < 0)
        rc = -ENOMEM;
    if (rc == 0 && json_object_set_new(o, "stragglers", stragglers_json(r, now_ms)) < 0)
        rc = -ENOMEM;
    char *s = rc == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
    if (rc == 0 && (s == NULL || ddp_buf_append(out, s, strlen(s)) < 0))
        rc = -ENOMEM;
    free(s);
    json_decref(members);
    json_decref(o);
    if (rc < 0)
        return ddp_err_set(err, rc, "unable to write the status of '%s': out of memory", run_id);
    return 0;
}

int rdzv_runs_status_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                          rdzv_progress_lookup_fn lookup, void *ctx, ddp_buf_t *out,
                          ddp_err_t *err) {
    return status_write(rs, run_id, now_ms, lookup, ctx, NULL, out, err);
}

int rdzv_runs_status_page_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                               rdzv_progress_lookup_fn lookup, void *ctx, size_t first,
                               size_t limit, ddp_buf_t *out, ddp_err_t *err) {
    size_t page[2] = {first, limit};
    return status_write(rs, run_id, now_ms, lookup, ctx, page, out, err);
}

void rdzv_runs_visit(const rdzv_runs_t *rs, uint64_t now_ms,
                     void (*run_fn)(void *ctx, const rdzv_run_view_t *r),
                     void (*member_fn)(void *ctx, const rdzv_member_view_t *m), void *ctx) {
    for (const rdzv_run_t *r = rs != NULL ? rs->runs : NULL; r != NULL; r = r->next_all) {
        size_t in_group = 0, excluded = 0, unfit = 0;
        for (size_t i = 0; i < r->ngroup; i++)
            in_group += r->group[i] != NULL;
        for (size_t i = 0; i < r->nhosts; i++) {
            excluded += r->hosts[i].excluded != 0;
            unfit += r->hosts[i].unfit != 0;
        }
        rdzv_run_view_t rv = {.id = r->id,
                              .state = rdzv_run_state_name(r->state),
                              .round = r->round,
                              .restarts_used = r->restarts_used,
                              .max_restarts = r->cfg.max_restarts,
                              .members = r->nmembers,
                              .group = in_group,
                              .spares = r->state == RDZV_RUN_RUNNING ? r->njoin : 0,
                              .hosts_excluded = excluded,
                              .hosts_unfit = unfit,
                              .stragglers = strag_current(r) ? r->strag.named : 0};
        if (run_fn != NULL)
            run_fn(ctx, &rv);
        for (const rdzv_member_t *m = r->mhead; member_fn != NULL && m != NULL; m = m->rnext) {
            rdzv_member_view_t mv = {r->id, m->host, member_state(r, m), m->group_rank,
                                     now_ms > m->last_seen_ms ? now_ms - m->last_seen_ms : 0};
            member_fn(ctx, &mv);
        }
    }
}
