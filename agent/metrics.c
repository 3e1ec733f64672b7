/* SPDX-License-Identifier: Apache-2.0
 * agent/metrics.c: ddprun --metrics HOST:PORT, the agent's Prometheus listener: its workers
 * (running, started, failed by cause, each one's heartbeat age, the attempt) after the metrics of
 * the store it hosts, if any (rdzv_server_metrics), served on the agent's loop
 * (rdzv_metrics_start). docs/operations.md lists them. */
#include "agent_int.h"

#include <errno.h>
#include <stdio.h>

#include "ddp_contract.h"
#include "ddp_log.h"
#include "ddp_time.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

/* A family's HELP and TYPE lines, then one sample of it labelled with the run and node. */
static int sample(ddp_buf_t *out, const char *name, const char *type, const char *help,
                  const char *run, int node_rank, const char *value) {
    return ddp_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s{run=\"%s\",node_rank=\"%d\"} %s\n",
                          name, help, name, type, name, run, node_rank, value);
}

/* Where the job's time went so far (goodput.c; docs/cli.md "Goodput"): the ratio and the
 * productive time only when beats can tell them, the restarts' parts always (a part not known in
 * a restart adds nothing). */
static int goodput_metrics(agent_t *a, ddp_buf_t *out, const char *run, int n) {
    agent_goodput_totals_t t;
    agent_goodput_totals(&a->gp, ddp_now_ms(), &t);
    char v[32];
    int rc = 0;
    if (a->gp.beats) {
        snprintf(v, sizeof v, "%.4f", t.ratio);
        rc = sample(out, "ddprun_agent_goodput_ratio", "gauge",
                    "Productive time (beating, past every earlier step) over wall time so far.",
                    run, n, v);
        snprintf(v, sizeof v, "%.3f", (double)t.productive_ms / 1000.0);
        rc = rc ? rc
                : sample(out, "ddprun_agent_productive_seconds_total", "counter",
                         "Time the worker groups made new steps.", run, n, v);
    }
    const char *parts = "ddprun_agent_restart_seconds_total";
    rc = rc ? rc
            : ddp_buf_printf(out,
                             "# HELP %s Time lost to restarts, by part: detect, stop, "
                             "rendezvous, start, redo.\n# TYPE %s counter\n",
                             parts, parts);
    for (int p = 0; rc == 0 && p < AGENT_GP_NPARTS; p++)
        rc = ddp_buf_printf(out, "%s{run=\"%s\",node_rank=\"%d\",part=\"%s\"} %.3f\n", parts, run,
                            n, agent_goodput_part_names[p], (double)a->gp.lost_ms[p] / 1000.0);
    return rc;
}

static int agent_metrics(void *ctx, ddp_buf_t *out) {
    agent_t *a = ctx;
    char run[RDZV_LABEL_MAX], v[32];
    rdzv_metrics_label(a->cfg.job->run_id ? a->cfg.job->run_id : "", run, sizeof run);
    int n = a->as.node_rank, rc;
    snprintf(v, sizeof v, "%d", a->grp.running);
    rc = sample(out, "ddprun_agent_workers_running", "gauge", "Workers of this node running now.",
                run, n, v);
    snprintf(v, sizeof v, "%d", a->as.attempt);
    rc = rc ? rc
            : sample(out, "ddprun_agent_attempt", "gauge",
                     "The worker group's attempt (" DDP_ENV_RESTART_COUNT ").", run, n, v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)a->obs.counts[AGENT_COUNT_GROUP_STARTS]);
    rc = rc ? rc
            : sample(out, "ddprun_agent_worker_groups_started_total", "counter",
                     "Worker groups started (the first and every restart).", run, n, v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)a->obs.counts[AGENT_COUNT_WORKER_STARTS]);
    rc = rc ? rc
            : sample(out, "ddprun_agent_workers_started_total", "counter", "Workers started.", run,
                     n, v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)a->obs.counts[AGENT_COUNT_LOG_BYTES_LOST]);
    rc = rc ? rc
            : sample(out, "ddprun_agent_log_bytes_lost_total", "counter",
                     "Worker output bytes the log files could not take (a full disk, an I/O "
                     "error).",
                     run, n, v);
    const char *fail = "ddprun_agent_worker_group_failures_total";
    rc = rc ? rc
            : ddp_buf_printf(out,
                             "# HELP %s Failed worker groups, by the cause of the first "
                             "failure: exit, signal, hung, exec.\n# TYPE %s counter\n",
                             fail, fail);
    for (int c = 0; rc == 0 && c < AGENT_NCAUSES; c++)
        rc = ddp_buf_printf(out, "%s{run=\"%s\",node_rank=\"%d\",cause=\"%s\"} %llu\n", fail, run,
                            n, agent__cause_names[c],
                            (unsigned long long)a->obs.counts[AGENT_COUNT_GROUP_FAILED + c]);
    if (rc == 0)
        rc = goodput_metrics(a, out, run, n);
    if (rc == 0)
        rc = agent__straggler_metrics(a, out, run);
    /* Heartbeat ages (--heartbeat_timeout): each worker's file is read now, as `ddprun status`
     * does. The hang check looks only at deadlines, so the age it last saw grows up to the
     * timeout for a worker that beats all along, and there is none before its first look. */
    const char *age = "ddprun_agent_worker_heartbeat_age_seconds";
    uint64_t now = ddp_now_ms(), age_ms;
    int header = 0;
    for (int i = 0; rc == 0 && i < a->cfg.nproc; i++) {
        agent_worker_t *w = &a->grp.workers[i];
        if (agent__hang_beat_age(a, w, now, &age_ms) < 0)
            continue;
        if (!header++)
            rc = ddp_buf_printf(out,
                                "# HELP %s Time since each worker's last heartbeat.\n"
                                "# TYPE %s gauge\n",
                                age, age);
        if (rc == 0)
            rc = ddp_buf_printf(out, "%s{run=\"%s\",rank=\"%d\",local_rank=\"%d\"} %.3f\n", age,
                                run, w->rank, w->local_rank, (double)age_ms / 1000.0);
    }
    return rc < 0 ? -ENOMEM : 0;
}

void agent__metrics_stop(agent_t *a) {
    rdzv_metrics_close(a->obs.metrics);
    a->obs.metrics = NULL;
}

int agent__metrics_start(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_metrics_start(a->cfg.loop, a->stores.store, agent_metrics, a, job->metrics_host,
                                (uint16_t)job->metrics_port, &a->obs.metrics, &err);
    if (rc < 0) {
        DDP_ERROR("--metrics %s:%d: %s", job->metrics_host, job->metrics_port, err.text);
        /* An address this machine cannot listen on is the flag's value at fault, as a host
         * that does not resolve is: a usage error (exit 2), not ddprun's own failure. */
        return rc == -EADDRINUSE || rc == -EADDRNOTAVAIL || rc == -EACCES ? DDP_EUSAGE : rc;
    }
    /* With port 0 the kernel chose it: said at the default level, or nobody could scrape. */
    if (job->metrics_port == 0)
        DDP_WARN("serving metrics on http://%s/metrics", rdzv_metrics_addr(a->obs.metrics));
    else
        DDP_INFO("serving metrics on http://%s/metrics", rdzv_metrics_addr(a->obs.metrics));
    return 0;
}
