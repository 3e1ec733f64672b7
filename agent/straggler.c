/* SPDX-License-Identifier: Apache-2.0
 * Stragglers, the agent's part: each worker's timing file (DDPRUN_TIMING_FILE, written by
 * libddpw's ddpw_timing_add: common/include/ddp_timing.h), read once per --straggler_window; the
 * compute time, collective wait and steps since the last read go to the store in TIMING reports
 * (docs/protocol-rdzv.md), whose reply lists the run's stragglers. A rank the store names is one
 * warning line and a `straggler` event here; one it clears, a line and `straggler_cleared`. The
 * store judges (rendezvous/round/rdzv_straggler.c): only it sees every node's ranks. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_timing.h"
#include "rdzv_proto.h"

static int detection_on(const agent_t *a) {
    return a->cfg.job->straggler_threshold > 0;
}

static void on_window(uv_timer_t *t);

int agent__straggler_init(agent_t *a) {
    int rc = uv_timer_init(a->cfg.loop, &a->strag.timer);
    if (rc < 0)
        return rc;
    a->strag.timer.data = a;
    if (!detection_on(a) || a->cfg.job->straggler_window_ms <= 0)
        return 0;
    uint64_t period = (uint64_t)a->cfg.job->straggler_window_ms;
    rc = uv_timer_start(&a->strag.timer, on_window, period, period);
    /* The windows never keep the loop alive: the job's end stops everything. */
    uv_unref((uv_handle_t *)&a->strag.timer);
    return rc;
}

void agent__straggler_fini(agent_t *a) {
    json_decref(a->strag.named);
    a->strag.named = NULL;
}

int agent__straggler_worker_file(agent_t *a, agent_worker_t *w, const char *dir) {
    w->tm_file[0] = '\0';
    w->tm_have = 0;
    memset(&w->tm_last, 0, sizeof w->tm_last);
    if (!detection_on(a))
        return 0;
    if (a->cfg.log_layout)
        snprintf(w->tm_file, sizeof w->tm_file, "%s/timing", dir);
    else
        snprintf(w->tm_file, sizeof w->tm_file, "%s/timing.%d.%d", a->cfg.run_dir, a->as.attempt,
                 w->local_rank);
    /* Replaced as the heartbeat file is: a fresh file proves it is ours. */
    ddp_err_t err = {0};
    int fd = ddp_file_open(w->tm_file, strlen(a->cfg.run_dir), DDP_FILE_REPLACE, 0600, &err);
    if (fd < 0) {
        /* Not fatal: this worker's ranks go unjudged. */
        DDP_WARN("unable to create the timing file %s; straggler detection leaves this worker "
                 "out",
                 err.text);
        w->tm_file[0] = '\0';
        return 0;
    }
    close(fd);
    return 0;
}

/* Reads w's totals; 0 with *t filled, or -1 (no file, nothing written yet, a torn read: the next
 * window reads it again). */
static int totals_read(const agent_worker_t *w, ddp_timing_t *t) {
    int fd = open(w->tm_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[DDP_TIMING_LEN];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n == (ssize_t)sizeof buf && ddp_timing_parse(buf, (size_t)n, t) == 0 ? 0 : -1;
}

/* What w did since its last read, as one report entry into out (cap bytes); 0 when it has
 * nothing new. Totals that went backwards (a file rewritten from scratch) count from zero. */
static int entry_of(agent_worker_t *w, char *out, size_t cap) {
    ddp_timing_t t;
    if (w->tm_file[0] == '\0' || totals_read(w, &t) < 0)
        return 0;
    ddp_timing_t d = {0, 0, 0};
    if (!w->tm_have || t.steps < w->tm_last.steps || t.compute_ns < w->tm_last.compute_ns ||
        t.wait_ns < w->tm_last.wait_ns)
        d = t;
    else
        d = (ddp_timing_t){t.compute_ns - w->tm_last.compute_ns, t.wait_ns - w->tm_last.wait_ns,
                           t.steps - w->tm_last.steps};
    w->tm_last = t;
    w->tm_have = 1;
    w->tm_sum_compute_ns += d.compute_ns;
    w->tm_sum_wait_ns += d.wait_ns;
    w->tm_sum_steps += d.steps;
    if (d.steps == 0 && d.compute_ns == 0 && d.wait_ns == 0)
        return 0;
    return snprintf(out, cap, " %d:%llu:%llu:%u", w->rank,
                    (unsigned long long)(d.compute_ns / 1000),
                    (unsigned long long)(d.wait_ns / 1000), d.steps);
}

/* Once per window while the group runs: every worker's news to the store, in reports of at most
 * RDZV_WHAT_MAX bytes (the header repeated in each). */
static void on_window(uv_timer_t *t) {
    agent_t *a = t->data;
    const agent_job_t *job = a->cfg.job;
    if (a->sup.state != SUP_RUNNING || a->cfg.ops->report_timing == NULL)
        return;
    char head[96], text[RDZV_WHAT_MAX + 1], entry[96];
    snprintf(head, sizeof head, "w=%lld t=%d n=%d a=%s", (long long)job->straggler_window_ms,
             (int)(job->straggler_threshold * 1000 + 0.5), job->straggler_windows,
             job->straggler_exclude ? "exclude" : "warn");
    size_t len = 0;
    int entries = 0;
    for (int i = 0; i < a->cfg.nproc; i++) {
        int n = entry_of(&a->grp.workers[i], entry, sizeof entry);
        if (n <= 0 || n >= (int)sizeof entry)
            continue;
        if (entries > 0 && len + (size_t)n > RDZV_WHAT_MAX) {
            a->cfg.ops->report_timing(a, text);
            entries = 0;
        }
        if (entries == 0)
            len = (size_t)snprintf(text, sizeof text, "%s", head);
        memcpy(text + len, entry, (size_t)n + 1);
        len += (size_t)n;
        entries++;
    }
    if (entries > 0)
        a->cfg.ops->report_timing(a, text);
}

/* The entry of rank in arr, or NULL. */
static json_t *find_rank(json_t *arr, json_int_t rank) {
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        if (json_integer_value(json_object_get(o, "rank")) == rank)
            return o;
    }
    return NULL;
}

/* host as a metrics label value: an address's characters, the rest dropped. */
static void label_safe(const char *host, char *out, size_t cap) {
    size_t n = 0;
    for (; host != NULL && *host != '\0' && n + 1 < cap; host++)
        if ((*host >= 'a' && *host <= 'z') || (*host >= 'A' && *host <= 'Z') ||
            (*host >= '0' && *host <= '9') || strchr(".:-_[]%", *host) != NULL)
            out[n++] = *host;
    out[n] = '\0';
}

static void say_named(agent_t *a, json_t *o) {
    json_int_t rank = json_integer_value(json_object_get(o, "rank"));
    json_int_t node = json_integer_value(json_object_get(o, "group_rank"));
    const char *host = json_string_value(json_object_get(o, "host"));
    double ratio = json_number_value(json_object_get(o, "ratio"));
    json_int_t mine = json_integer_value(json_object_get(o, "per_step_us"));
    json_int_t med = json_integer_value(json_object_get(o, "median_us"));
    json_int_t since = json_integer_value(json_object_get(o, "since_ms"));
    const char *kept = json_string_value(json_object_get(o, "kept"));
    DDP_WARN("straggler: rank %lld on node %lld (%s) computes %.2fx the median time per step "
             "(%.1f ms against %.1f ms) since %.1f s ago%s%s",
             (long long)rank, (long long)node, host != NULL ? host : "?", ratio, mine / 1000.0,
             med / 1000.0, since / 1000.0, kept != NULL ? "; --straggler_action=exclude: " : "",
             kept != NULL ? kept : "");
    agent__evlog(a, "straggler", "{s:I, s:I, s:s, s:f, s:I, s:I, s:I}", "rank", rank, "group_rank",
                 node, "host", host != NULL ? host : "", "ratio", ratio, "per_step_us", mine,
                 "median_us", med, "since_ms", since);
}

void agent__straggler_told(agent_t *a, const char *json, size_t len) {
    json_t *now = json_loadb(json, len, 0, NULL);
    if (!json_is_array(now)) {
        json_decref(now);
        return;
    }
    size_t i;
    json_t *o;
    json_array_foreach(now, i, o) {
        if (a->strag.named == NULL ||
            find_rank(a->strag.named, json_integer_value(json_object_get(o, "rank"))) == NULL)
            say_named(a, o);
    }
    if (a->strag.named != NULL)
        json_array_foreach(a->strag.named, i, o) {
            json_int_t rank = json_integer_value(json_object_get(o, "rank"));
            if (find_rank(now, rank) != NULL)
                continue;
            const char *host = json_string_value(json_object_get(o, "host"));
            DDP_WARN("straggler cleared: rank %lld (%s) is no longer named (back within the "
                     "threshold, or its round is over)",
                     (long long)rank, host != NULL ? host : "?");
            agent__evlog(a, "straggler_cleared", "{s:I, s:s}", "rank", rank, "host",
                         host != NULL ? host : "");
        }
    json_decref(a->strag.named);
    a->strag.named = now;
}

int agent__straggler_metrics(agent_t *a, ddp_buf_t *out, const char *run) {
    int rc = 0;
    static const struct {
        const char *name, *help;
    } m[3] = {
        {"ddprun_agent_worker_compute_seconds_total",
         "Time each worker computed between collectives (DDPRUN_TIMING_FILE)."},
        {"ddprun_agent_worker_collective_wait_seconds_total",
         "Time each worker spent inside collectives, waiting for the slowest rank included."},
        {"ddprun_agent_worker_steps_timed_total", "Steps each worker timed."},
    };
    for (int k = 0; rc == 0 && detection_on(a) && k < 3; k++) {
        rc = ddp_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", m[k].name, m[k].help,
                            m[k].name);
        for (int i = 0; rc == 0 && i < a->cfg.nproc; i++) {
            const agent_worker_t *w = &a->grp.workers[i];
            double v = k == 0   ? (double)w->tm_sum_compute_ns / 1e9
                       : k == 1 ? (double)w->tm_sum_wait_ns / 1e9
                                : (double)w->tm_sum_steps;
            rc = ddp_buf_printf(out, "%s{run=\"%s\",rank=\"%d\",local_rank=\"%d\"} %.6g\n",
                                m[k].name, run, w->rank, w->local_rank, v);
        }
    }
    const char *g = "ddprun_agent_straggler_ratio";
    size_t n = a->strag.named != NULL ? json_array_size(a->strag.named) : 0;
    rc = rc ? rc
            : ddp_buf_printf(out,
                             "# HELP ddprun_agent_stragglers Ranks of the job the store names "
                             "stragglers now.\n# TYPE ddprun_agent_stragglers gauge\n"
                             "ddprun_agent_stragglers{run=\"%s\"} %zu\n",
                             run, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *o = json_array_get(a->strag.named, i);
        char host[RDZV_HOST_MAX + 1];
        label_safe(json_string_value(json_object_get(o, "host")), host, sizeof host);
        if (i == 0)
            rc = ddp_buf_printf(out,
                                "# HELP %s Each straggler's compute time per step over the "
                                "median of the other ranks'.\n# TYPE %s gauge\n",
                                g, g);
        if (rc == 0)
            rc = ddp_buf_printf(out, "%s{run=\"%s\",rank=\"%lld\",host=\"%s\"} %.3f\n", g, run,
                                (long long)json_integer_value(json_object_get(o, "rank")), host,
                                json_number_value(json_object_get(o, "ratio")));
    }
    return rc;
}
