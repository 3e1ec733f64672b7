/* SPDX-License-Identifier: Apache-2.0
 * `ddprun report`: reads a file of the agents' structured events (--event_log_handler json, one
 * JSON object a line, docs/cli.md "Structured events") into a timeline, one lane per agent, and
 * has report_svg.c draw it. Every line must be one of ddprun's events: a line that is not JSON,
 * or an object without the fields every event starts with, stops the report with one line naming
 * the file and the line, and nothing is written. The picture goes to a temporary file renamed
 * over the output, so a reader never sees half of one. */
#include "launch_report.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp_buf.h"
#include "ddp_escape.h"
#include "ddp_file.h"

#define REPORT_USAGE "usage: ddprun report EVENTS.jsonl -o OUT.svg|OUT.html"

const launch_report_flag_t launch_report_flags[] = {
    {"--output", 1}, {"-o", 1}, {"--help", 0}, {NULL, 0}};

/* A failed read or a line that is not ours: the text of the one line said. */
typedef struct report_err {
    char text[512];
} report_err_t;

/* Grows *p (of *cap elements of size sz) to hold n + 1. Returns 0 or -ENOMEM. */
static int grow(void **p, size_t *cap, size_t n, size_t sz) {
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 8;
    void *q = realloc(*p, c * sz);
    if (q == NULL)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}
#define GROW(arr, n, cap) grow((void **)&(arr), &(cap), (n), sizeof *(arr))

/* "2026-12-04T06:26:40.006Z" as ms since the epoch. Returns 0, or -1 when ts is not that. */
static int ts_parse(const char *ts, int64_t *out) {
    struct tm tm;
    int ms, end = 0;
    memset(&tm, 0, sizeof tm);
    if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &end) != 7 ||
        end != 24 || ts[end] != '\0' || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60 || ms < 0)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t s = timegm(&tm);
    if (s == (time_t)-1)
        return -1;
    *out = (int64_t)s * 1000 + ms;
    return 0;
}

/* The integer field key of o, or dflt when it is missing or not an integer. */
static long long int_of(const json_t *o, const char *key, long long dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

/* The string field key of o, or NULL. */
static const char *str_of(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* Adds s to the set (*set, *n) when it is not there yet. Returns 0 or -ENOMEM. */
static int set_add(char ***set, size_t *n, const char *s) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*set)[i], s) == 0)
            return 0;
    char **q = realloc(*set, (*n + 1) * sizeof **set);
    if (q == NULL)
        return -ENOMEM;
    *set = q;
    if ((q[*n] = strdup(s)) == NULL)
        return -ENOMEM;
    (*n)++;
    return 0;
}

/* FNV-1a of the host and the pid. */
static size_t lane_hash(const char *host, long long pid) {
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)host; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ (((unsigned long long)pid >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return (size_t)h;
}

/* The index's slot of (host, pid): its lane's, or the free one where it would go. */
static size_t *lane_slot(const report_t *r, const char *host, long long pid) {
    size_t mask = r->index_cap - 1;
    for (size_t i = lane_hash(host, pid) & mask;; i = (i + 1) & mask) {
        size_t *slot = &r->index[i];
        if (*slot == 0 ||
            (r->lanes[*slot - 1].pid == pid && strcmp(r->lanes[*slot - 1].host, host) == 0))
            return slot;
    }
}

/* Makes room in the index for one more lane. Returns 0 or -ENOMEM. */
static int index_grow(report_t *r) {
    if (2 * (r->nlanes + 1) < r->index_cap)
        return 0;
    size_t cap = r->index_cap ? r->index_cap * 2 : 64;
    size_t *old = r->index;
    if ((r->index = calloc(cap, sizeof *r->index)) == NULL) {
        r->index = old;
        return -ENOMEM;
    }
    r->index_cap = cap;
    for (size_t i = 0; i < r->nlanes; i++)
        *lane_slot(r, r->lanes[i].host, r->lanes[i].pid) = i + 1;
    free(old);
    return 0;
}

/* The lane of agent (host, pid), made when new. Returns its index, or -ENOMEM. */
static long lane_of(report_t *r, const char *host, long long pid, const char *run_id,
                    long long node_rank, int64_t t) {
    if (index_grow(r) < 0)
        return -ENOMEM;
    size_t *slot = lane_slot(r, host, pid);
    if (*slot != 0)
        return (long)*slot - 1;
    if (GROW(r->lanes, r->nlanes, r->lanes_cap) < 0)
        return -ENOMEM;
    report_lane_t *l = &r->lanes[r->nlanes];
    memset(l, 0, sizeof *l);
    l->host = strdup(host);
    l->run_id = strdup(run_id);
    if (l->host == NULL || l->run_id == NULL) {
        free(l->host);
        free(l->run_id);
        return -ENOMEM;
    }
    l->pid = pid;
    l->node_rank = node_rank;
    l->t_first = l->t_last = t;
    *slot = r->nlanes + 1;
    return (long)r->nlanes++;
}

/* A note on lane li at t, numbered; past REPORT_NOTES_MAX only counted (returns 0 then). Returns
 * its number, or -ENOMEM. */
static int note_add(report_t *r, size_t li, int64_t t, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int note_add(report_t *r, size_t li, int64_t t, const char *fmt, ...) {
    if (r->nnotes >= REPORT_NOTES_MAX) {
        r->notes_dropped++;
        return 0;
    }
    if (GROW(r->notes, r->nnotes, r->notes_cap) < 0)
        return -ENOMEM;
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    r->notes[r->nnotes] = (report_note_t){.t = t, .lane = li, .text = text};
    return (int)++r->nnotes;
}

static int mark_add(report_lane_t *l, int64_t t, report_mark_kind_t kind, int note) {
    if (note < 0 || GROW(l->marks, l->nmarks, l->marks_cap) < 0)
        return -ENOMEM;
    l->marks[l->nmarks++] = (report_mark_t){.t = t, .kind = kind, .note = note};
    return 0;
}

/* Ends the lane's running group at t (failed: by its own failure). */
static void group_close(report_lane_t *l, int64_t t, int failed) {
    if (!l->group_open)
        return;
    report_group_t *g = &l->groups[l->ngroups - 1];
    g->t1 = t;
    g->failed = failed;
    l->group_open = 0;
}

static void spare_close(report_lane_t *l, int64_t t) {
    if (!l->spare_open)
        return;
    l->spares[l->nspares - 1].t1 = t;
    l->spare_open = 0;
}

/* "k v, k v" of o's fields beyond the head every event starts with: the text of an event this
 * report knows only by name (a straggler's rank, how much slower, since when). */
static void fields_text(const json_t *o, char *out, size_t cap) {
    static const char *const head[] = {"ts",        "event",     "run_id",  "host",
                                       "agent_pid", "node_rank", "attempt", NULL};
    size_t len = 0;
    const char *key;
    const json_t *v;
    out[0] = '\0';
    json_object_foreach((json_t *)o, key, v) {
        int skip = 0;
        for (int i = 0; head[i] != NULL; i++)
            skip |= strcmp(key, head[i]) == 0;
        if (skip || len + 1 >= cap)
            continue;
        char val[160];
        if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_integer(v))
            snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
            snprintf(val, sizeof val, "%.3g", json_real_value(v));
        else if (json_is_boolean(v))
            snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "false");
        else
            continue;
        int n = snprintf(out + len, cap - len, "%s%s %s", len ? ", " : "", key, val);
        len = n < 0 || len + (size_t)n >= cap ? cap - 1 : len + (size_t)n;
    }
}

/* "exited with code 1" / "killed by SIGKILL" of a worker_exited, "" when it ended well. */
static void exit_text(const json_t *o, char *out, size_t cap) {
    const char *sig = str_of(o, "signal");
    long long code = int_of(o, "exit_code", 0);
    out[0] = '\0';
    if (sig != NULL)
        snprintf(out, cap, "killed by %s", sig);
    else if (code != 0)
        snprintf(out, cap, "exited with code %lld", code);
}

/* The restart_cost event: its parts, placed around the spawn of the group that followed. */
static int cost_add(report_lane_t *l, const json_t *o, int64_t t) {
    if (GROW(l->costs, l->ncosts, l->costs_cap) < 0)
        return -ENOMEM;
    report_cost_t *c = &l->costs[l->ncosts++];
    c->number = int_of(o, "restart", (long long)l->ncosts);
    c->lost_ms = int_of(o, "lost_ms", 0);
    for (int p = 0; p < REPORT_NPARTS; p++) {
        char key[32];
        snprintf(key, sizeof key, "%s_ms", launch_report_part_names[p]);
        c->ms[p] = int_of(o, key, -1);
    }
    /* The event comes once the restart closes: the redo done, the next group's failure or
     * round end, or the job's end, all after the spawn it is measured around, the start of the
     * group of its attempt; or at that spawn itself (no beats: nothing more to learn), before
     * the group's worker_group_started. */
    c->anchor = t;
    c->attempt = int_of(o, "attempt", -1);
    c->pending = 1;
    for (size_t k = l->ngroups; k-- > 0 && c->pending;)
        if (l->groups[k].attempt == c->attempt) {
            c->anchor = l->groups[k].t0;
            c->pending = 0;
        }
    return 0;
}

/* The shutdown event: the lane's end, its result, the root cause and its goodput. */
static int shutdown_take(report_t *r, report_lane_t *l, const json_t *o) {
    const char *result = str_of(o, "result");
    const char *cause = str_of(o, "root_cause");
    free(l->result);
    l->result = strdup(result != NULL ? result : "?");
    if (l->result == NULL || (cause != NULL && set_add(&r->causes, &r->ncauses, cause) < 0))
        return -ENOMEM;
    const json_t *g = json_object_get(o, "goodput");
    if (json_is_object(g)) {
        const json_t *ratio = json_object_get(g, "ratio");
        l->has_goodput = 1;
        l->ratio = json_is_number(ratio) ? json_number_value(ratio) : -1;
        l->wall_ms = int_of(g, "wall_ms", 0);
        l->productive_ms = int_of(g, "productive_ms", 0);
        l->lost_ms = int_of(g, "lost_ms", 0);
        l->restarts = int_of(g, "restarts", 0);
    }
    return 0;
}

/* One event of lane li at t. Returns 0 or -ENOMEM. */
static int event_take(report_t *r, size_t li, const char *ev, const json_t *o, int64_t t) {
    report_lane_t *l = &r->lanes[li];
    const char *host = l->host;
    char text[400];
    if (strcmp(ev, "worker_group_started") == 0) {
        group_close(l, t, 0);
        spare_close(l, t);
        l->nexits = 0;
        if (GROW(l->groups, l->ngroups, l->groups_cap) < 0)
            return -ENOMEM;
        for (size_t k = 0; k < l->ncosts; k++)
            if (l->costs[k].pending && l->costs[k].attempt == int_of(o, "attempt", 0)) {
                l->costs[k].anchor = t; /* the bar starts here, the workers started */
                l->costs[k].pending = 0;
            }
        l->groups[l->ngroups++] = (report_group_t){.t0 = t,
                                                   .t1 = t,
                                                   .attempt = int_of(o, "attempt", 0),
                                                   .round = int_of(o, "round", 0),
                                                   .world_size = int_of(o, "world_size", 0)};
        l->group_open = 1;
    } else if (strcmp(ev, "worker_exited") == 0) {
        exit_text(o, text, sizeof text);
        if (text[0] != '\0' && l->nexits < REPORT_EXITS_KEPT) {
            l->exits[l->nexits].rank = int_of(o, "rank", -1);
            snprintf(l->exits[l->nexits++].text, sizeof l->exits[0].text, "%s", text);
        }
    } else if (strcmp(ev, "worker_group_failed") == 0) {
        long long rank = int_of(o, "rank", -1);
        const char *how = str_of(o, "cause");
        for (size_t k = 0; k < l->nexits; k++)
            if (l->exits[k].rank == rank)
                how = l->exits[k].text;
        group_close(l, t, 1);
        return mark_add(l, t, REPORT_MARK_FAILURE,
                        note_add(r, li, t, "%s: attempt %lld failed: rank %lld %s", host,
                                 int_of(o, "attempt", 0), rank, how != NULL ? how : "failed"));
    } else if (strcmp(ev, "worker_hung") == 0) {
        return mark_add(l, t, REPORT_MARK_HUNG,
                        note_add(r, li, t, "%s: rank %lld hung, silent %lld ms (step %lld)", host,
                                 int_of(o, "rank", -1), int_of(o, "silent_ms", 0),
                                 int_of(o, "step", -1)));
    } else if (strcmp(ev, "rendezvous_round_ended") == 0) {
        group_close(l, t, 0);
        return mark_add(l, t, REPORT_MARK_ROUND_END, 0);
    } else if (strcmp(ev, "rendezvous_joined") == 0) {
        long long round = int_of(o, "round", -1);
        spare_close(l, t);
        if (round >= 0 && round < REPORT_ROUNDS_MAX &&
            (r->round_t[round] == 0 || t < r->round_t[round]))
            r->round_t[round] = t;
    } else if (strcmp(ev, "rendezvous_spare") == 0) {
        if (l->spare_open) /* a spare re-joins each keep-alive bound: one span */
            return 0;
        if (GROW(l->spares, l->nspares, l->spares_cap) < 0)
            return -ENOMEM;
        l->spares[l->nspares++] = (report_span_t){t, t};
        l->spare_open = 1;
        int n = note_add(r, li, t, "%s: a spare, waiting for a place (max %lld nodes)", host,
                         int_of(o, "max_nodes", 0));
        return n < 0 ? n : 0;
    } else if (strcmp(ev, "node_excluded") == 0) {
        const char *why = str_of(o, "reason");
        group_close(l, t, 0);
        spare_close(l, t);
        l->excluded_at = t;
        return mark_add(l, t, REPORT_MARK_EXCLUDED,
                        note_add(r, li, t, "%s: excluded (quarantine): %s", host,
                                 why != NULL ? why : "no reason given"));
    } else if (strcmp(ev, "health_check_failed") == 0) {
        const char *why = str_of(o, "reason");
        return mark_add(l, t, REPORT_MARK_HEALTH,
                        note_add(r, li, t, "%s: health check failed (%lld in a row): %s", host,
                                 int_of(o, "failures", 1), why != NULL ? why : ""));
    } else if (strcmp(ev, "rendezvous_store_lost") == 0) {
        group_close(l, t, 0);
        return mark_add(l, t, REPORT_MARK_STORE,
                        note_add(r, li, t, "%s: the rendezvous store was lost", host));
    } else if (strcmp(ev, "rendezvous_store_reconnected") == 0) {
        return mark_add(l, t, REPORT_MARK_STORE,
                        note_add(r, li, t, "%s: the store is back after %lld ms", host,
                                 int_of(o, "down_ms", 0)));
    } else if (strcmp(ev, "rendezvous_store_elected") == 0 ||
               strcmp(ev, "rendezvous_leadership_lost") == 0) {
        fields_text(o, text, sizeof text);
        return mark_add(l, t, REPORT_MARK_STORE, note_add(r, li, t, "%s: %s (%s)", host, ev, text));
    } else if (strcmp(ev, "log_write_failed") == 0) {
        fields_text(o, text, sizeof text);
        return mark_add(l, t, REPORT_MARK_LOG,
                        note_add(r, li, t, "%s: a worker's output was lost (%s)", host, text));
    } else if (strcmp(ev, "straggler") == 0) {
        fields_text(o, text, sizeof text);
        return mark_add(l, t, REPORT_MARK_STRAGGLER,
                        note_add(r, li, t, "%s: straggler: %s", host, text));
    } else if (strcmp(ev, "restart_cost") == 0) {
        if (cost_add(l, o, t) < 0)
            return -ENOMEM;
        const report_cost_t *c = &l->costs[l->ncosts - 1];
        size_t len = (size_t)snprintf(text, sizeof text, "%s: restart %lld lost %.2f s:", host,
                                      c->number, (double)c->lost_ms / 1000.0);
        for (int p = 0; p < REPORT_NPARTS && len < sizeof text; p++)
            if (c->ms[p] >= 0)
                len += (size_t)snprintf(text + len, sizeof text - len, " %s %.2f s",
                                        launch_report_part_names[p], (double)c->ms[p] / 1000.0);
        int n = note_add(r, li, t, "%s", text);
        return n < 0 ? n : 0;
    } else if (strcmp(ev, "shutdown") == 0) {
        group_close(l, t, 0);
        spare_close(l, t);
        if (shutdown_take(r, l, o) < 0)
            return -ENOMEM;
        return mark_add(l, t, REPORT_MARK_END, 0);
    } else if (strcmp(ev, "worker_started") != 0) {
        r->other_events++;
    }
    return 0;
}

/* One line (no = its number): parsed, checked to be one of ddprun's events, taken. Returns 0, or
 * -1 with err set. */
static int line_take(report_t *r, const char *name, size_t no, const char *line, size_t len,
                     report_err_t *err) {
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    const char *missing = NULL;
    int64_t t = 0;
    if (o == NULL) {
        snprintf(err->text, sizeof err->text, "%s:%zu: not JSON (%s)", name, no, jerr.text);
        return -1;
    }
    static const char *const strs[] = {"ts", "event", "run_id", "host", NULL};
    static const char *const ints[] = {"agent_pid", "node_rank", "attempt", NULL};
    for (int i = 0; strs[i] != NULL && missing == NULL && json_is_object(o); i++)
        if (!json_is_string(json_object_get(o, strs[i])))
            missing = strs[i];
    for (int i = 0; ints[i] != NULL && missing == NULL && json_is_object(o); i++)
        if (!json_is_integer(json_object_get(o, ints[i])))
            missing = ints[i];
    if (!json_is_object(o) || missing != NULL || ts_parse(str_of(o, "ts"), &t) < 0) {
        char why[64];
        if (!json_is_object(o))
            snprintf(why, sizeof why, "not an object");
        else if (missing != NULL)
            snprintf(why, sizeof why, "no \"%s\"", missing);
        else
            snprintf(why, sizeof why, "\"ts\" is not a UTC time with ms");
        snprintf(err->text, sizeof err->text, "%s:%zu: not an event of ddprun's (%s)", name, no,
                 why);
        json_decref(o);
        return -1;
    }
    int rc = 0;
    long li = -1;
    /* An event naming another host in its own "host" field (which replaces the agent's: a
     * straggler named by the agent that compares the ranks) goes on that host's lane. */
    if (strcmp(str_of(o, "event"), "straggler") == 0)
        for (size_t i = 0; i < r->nlanes && li < 0; i++)
            if (strcmp(r->lanes[i].host, str_of(o, "host")) == 0)
                li = (long)i;
    if (li < 0)
        li = lane_of(r, str_of(o, "host"), int_of(o, "agent_pid", 0), str_of(o, "run_id"),
                     int_of(o, "node_rank", 0), t);
    if (li < 0 || set_add(&r->runs, &r->nruns, str_of(o, "run_id")) < 0)
        rc = -ENOMEM;
    if (rc == 0) {
        report_lane_t *l = &r->lanes[li];
        l->t_last = t > l->t_last ? t : l->t_last;
        l->t_first = t < l->t_first ? t : l->t_first;
        if (l->pid == int_of(o, "agent_pid", 0))
            l->node_rank = int_of(o, "node_rank", l->node_rank);
        r->t0 = r->events == 0 || t < r->t0 ? t : r->t0;
        r->t1 = r->events == 0 || t > r->t1 ? t : r->t1;
        r->events++;
        rc = event_take(r, (size_t)li, str_of(o, "event"), o, t);
    }
    json_decref(o);
    if (rc < 0)
        snprintf(err->text, sizeof err->text, "%s:%zu: out of memory", name, no);
    return rc < 0 ? -1 : 0;
}

/* Reads the events of path into r. Returns 0, or -1 with err set. */
static int events_read(report_t *r, const char *path, report_err_t *err) {
    char name[256];
    ddp_str_escaped(path, name, sizeof name);
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err->text, sizeof err->text, "%s: %s", name, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, no = 0;
    ssize_t n;
    int rc = 0;
    errno = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        no++;
        size_t len = (size_t)n;
        if (len > 0 && line[len - 1] == '\n')
            len--;
        rc = line_take(r, name, no, line, len, err);
        errno = 0;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err->text, sizeof err->text, "%s:%zu: %s", name, no + 1,
                 strerror(errno != 0 ? errno : EIO));
        rc = -1;
    }
    if (rc == 0 && r->events == 0) {
        snprintf(err->text, sizeof err->text, "%s: no events", name);
        rc = -1;
    }
    free(line);
    fclose(f);
    /* A group, a spare's wait still running at the agent's last event ends there. */
    for (size_t i = 0; rc == 0 && i < r->nlanes; i++) {
        group_close(&r->lanes[i], r->lanes[i].t_last, 0);
        spare_close(&r->lanes[i], r->lanes[i].t_last);
    }
    return rc;
}

static void report_free(report_t *r) {
    for (size_t i = 0; i < r->nlanes; i++) {
        report_lane_t *l = &r->lanes[i];
        free(l->host);
        free(l->run_id);
        free(l->groups);
        free(l->marks);
        free(l->costs);
        free(l->spares);
        free(l->result);
    }
    for (size_t i = 0; i < r->nnotes; i++)
        free(r->notes[i].text);
    for (size_t i = 0; i < r->ncauses; i++)
        free(r->causes[i]);
    for (size_t i = 0; i < r->nruns; i++)
        free(r->runs[i]);
    free(r->lanes);
    free(r->index);
    free(r->notes);
    free(r->causes);
    free(r->runs);
}

/* One line: what is wrong; --help has the rest. */
static int usage(const char *msg) {
    fprintf(stderr, "ddprun report: %s\n", msg);
    return 2;
}

static void help(void) {
    fputs(REPORT_USAGE
          "\n"
          "Draws a job's life from the events its agents wrote with\n"
          "--event_log_handler json:EVENTS.jsonl (several agents may share the file):\n"
          "one lane per agent (host) with its rounds, worker groups, failures and root\n"
          "cause, each restart's parts (detect, stop, rendezvous, start, redo),\n"
          "stragglers, spares, exclusions, and the goodput. OUT ending in .svg gets an\n"
          "SVG picture, in .html or .htm a page with the picture inline; either holds\n"
          "everything it shows (no script, font or link to anything outside).\n"
          "  -o, --output OUT   the picture to write (replaced whole, never half-written)\n"
          "  -h, --help         this text\n"
          "Exit codes: 0 written; 1 the events could not be read, a line is not one of\n"
          "ddprun's events (one line names the file and line) or OUT could not be\n"
          "written; 2 usage error.\n",
          stdout);
}

/* "OUT ends in .svg" -> 0, ".html"/".htm" -> 1, else -1. */
static int output_kind(const char *out) {
    size_t n = strlen(out);
    if (n > 4 && strcmp(out + n - 4, ".svg") == 0)
        return 0;
    if ((n > 5 && strcmp(out + n - 5, ".html") == 0) || (n > 4 && strcmp(out + n - 4, ".htm") == 0))
        return 1;
    return -1;
}

int launch_report_main(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    char msg[300], esc[200];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help();
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (i + 1 >= argc)
                return usage("-o needs a file name (OUT.svg or OUT.html)");
            out = argv[++i];
        } else if (strncmp(a, "--output=", 9) == 0) {
            out = a + 9;
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, sizeof msg, "unknown flag '%s'", ddp_str_escaped(a, esc, sizeof esc));
            return usage(msg);
        } else if (in != NULL) {
            snprintf(msg, sizeof msg, "one events file only ('%s' is a second)",
                     ddp_str_escaped(a, esc, sizeof esc));
            return usage(msg);
        } else {
            in = a;
        }
    }
    if (in == NULL)
        return usage("the events file is missing");
    if (out == NULL)
        return usage("-o OUT.svg or -o OUT.html is missing");
    int html = output_kind(out);
    if (html < 0) {
        snprintf(msg, sizeof msg, "-o %s: the name must end in .svg, .html or .htm",
                 ddp_str_escaped(out, esc, sizeof esc));
        return usage(msg);
    }
    report_t r;
    report_err_t err;
    memset(&r, 0, sizeof r);
    if (events_read(&r, in, &err) < 0) {
        fprintf(stderr, "ddprun report: %s\n", err.text);
        report_free(&r);
        return 1;
    }
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = launch_report_render(&r, html, &b);
    if (rc == 0) {
        ddp_file_part_t part = {b.data, b.len};
        rc = ddp_file_replace(out, NULL, &part, 1, 0644, 0);
    }
    if (rc < 0)
        fprintf(stderr, "ddprun report: %s: %s\n", ddp_str_escaped(out, esc, sizeof esc),
                strerror(-rc));
    ddp_buf_free(&b);
    report_free(&r);
    return rc < 0 ? 1 : 0;
}
