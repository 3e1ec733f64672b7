/* SPDX-License-Identifier: Apache-2.0
 * The node's health check, a step of the supervision (SUP_CHECKING) before each start of the
 * group and each JOIN: --health_check CMD (health.c runs it in its own process group, bounded by
 * --health_check_timeout), then, where NVML and GPUs are, the fault counters of the visible GPUs
 * (agent__gpu_health). A node that fails is not let in: it says why, tries again after a back-off
 * and gives up once join_timeout has passed since its first try for this start, so that a sick
 * node leaves the job to the others (or to a scheduler that replaces it) instead of failing every
 * round it is let into. */
#include "agent_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ddp_contract.h"
#include "ddp_devices.h"
#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "gpu_mem.h"
#include "health.h"
#include "rdzv_proto.h"

/* The back-off between two tries: the first after a second, doubling up to half a minute (a
 * driver reload or a remount may fix a node within minutes; a check per second would flood the
 * log for all of join_timeout). */
#define AGENT_CHECK_RETRY_FIRST_MS 1000
#define AGENT_CHECK_RETRY_MAX_MS 30000

/* Feeds the outcome to the state table; a pass ends this start's series of tries. */
static void check_done(agent_t *a, int healthy) {
    if (healthy) {
        if (a->check.failures > 0)
            DDP_WARN("this node passed its health check after %d failed one%s", a->check.failures,
                     a->check.failures == 1 ? "" : "s");
        a->check.since_ms = 0;
    }
    agent__event(a, healthy ? EV_HEALTH_OK : EV_HEALTH_FAILED, NULL);
}

/* The NVML indices of the node's visible GPUs into idx (cap entries): the visible list's ordinals
 * as written (NVML numbers GPUs in PCI order, as CUDA_DEVICE_ORDER=PCI_BUS_ID does). Returns how
 * many, or -1 for every GPU NVML reports: no list, or a list of UUIDs. */
static int visible_gpus(const agent_t *a, int *idx, int cap) {
    const char *list = a->cfg.job->devices;
    int n = ddp_devices_count(list);
    if (n < 0)
        return -1;
    int k = 0;
    for (int i = 0; i < n && k < cap; i++) {
        char entry[96];
        int64_t v;
        if (ddp_devices_entry(list, i, entry, sizeof entry) < 0)
            break;
        if (ddp_parse_i64(entry, 0, INT32_MAX, &v) < 0)
            return -1; /* GPU-... or MIG-...: no index to map it to without asking each device */
        idx[k++] = (int)v;
    }
    return k;
}

/* The built-in check: 0 healthy (or nothing to check), 1 with a->check.reason filled. */
static int gpu_check(agent_t *a) {
    if (!a->cfg.job->gpu_health_check || agent__gpu_open(a) < 0)
        return 0;
    int idx[AGENT_GPU_MEM_MAX_DEVICES];
    int n = visible_gpus(a, idx, AGENT_GPU_MEM_MAX_DEVICES);
    char why[512];
    if (agent__gpu_health(a->gpu.nvml, n < 0 ? NULL : idx, n < 0 ? 0 : n, why, sizeof why) != 1)
        return 0;
    snprintf(a->check.reason, sizeof a->check.reason, "GPU health check: %s", why);
    return 1;
}

static void on_check_result(void *arg, const agent_health_result_t *res) {
    agent_t *a = arg;
    a->check.cmd = NULL;
    if (!res->healthy) {
        snprintf(a->check.reason, sizeof a->check.reason, "--health_check: %s; output: %s",
                 res->reason, res->tail[0] ? res->tail : "(none)");
        check_done(a, 0);
        return;
    }
    check_done(a, !gpu_check(a));
}

static void check_start(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    if (job->health_check == NULL) {
        check_done(a, !gpu_check(a));
        return;
    }
    /* The node's facts; the visible devices are in the environment it inherits. */
    char lws[64], restarts[64];
    /* A run id is at most RDZV_RUN_ID_MAX bytes on every path (agent_job_prepare checks it). */
    char run_id[sizeof DDP_ENV_RUN_ID + RDZV_RUN_ID_MAX + 1];
    snprintf(lws, sizeof lws, "%s=%d", DDP_ENV_NODE_LOCAL_WORLD_SIZE, a->cfg.nproc);
    snprintf(restarts, sizeof restarts, "%s=%d", DDP_ENV_RESTART_COUNT, a->as.attempt);
    snprintf(run_id, sizeof run_id, "%s=%s", DDP_ENV_RUN_ID, job->run_id);
    const char *env[] = {lws, restarts, run_id, NULL};
    int rc =
        agent__health_start(a->cfg.loop, job->health_check, env, (int)job->health_check_timeout_ms,
                            on_check_result, a, &a->check.cmd);
    if (rc < 0) {
        snprintf(a->check.reason, sizeof a->check.reason, "--health_check: unable to start: %s",
                 ddp_strerror(rc));
        check_done(a, 0);
        return;
    }
    agent__guard_update(a, agent__health_pid(a->check.cmd), 1);
}

static void on_retry(uv_timer_t *t) {
    agent_t *a = t->data;
    if (a->sup.state == SUP_CHECKING)
        check_start(a);
}

int agent__node_check_init(agent_t *a) {
    int rc = uv_timer_init(a->cfg.loop, &a->check.timer);
    a->check.timer.data = a;
    return rc;
}

void agent__node_check_begin(agent_t *a) {
    if (a->check.since_ms == 0) {
        a->check.since_ms = ddp_now_ms();
        a->check.delay_ms = 0;
        a->check.failures = 0;
    }
    check_start(a);
}

void agent__node_check_say(agent_t *a, const char *reason) {
    (void)a;
    DDP_WARN("this node is unfit: %s", reason);
}

int agent__node_check_failed(agent_t *a) {
    a->check.failures++;
    agent__count(a, AGENT_COUNT_CHECK_FAILURES, 1);
    uint64_t spent = ddp_now_ms() - a->check.since_ms;
    int64_t limit = a->cfg.job->rdzv.join_timeout_ms;
    int64_t left = limit - (int64_t)spent;
    int delay = a->check.delay_ms == 0 ? AGENT_CHECK_RETRY_FIRST_MS : a->check.delay_ms * 2;
    if (delay > AGENT_CHECK_RETRY_MAX_MS)
        delay = AGENT_CHECK_RETRY_MAX_MS;
    if (left > 0 && delay > left)
        delay = (int)left;
    int give_up = left <= 0;
    if (give_up)
        agent__evlog(a, "health_check_failed", "{s:s, s:i, s:n}", "reason", a->check.reason,
                     "failures", a->check.failures, "retry_ms");
    else
        agent__evlog(a, "health_check_failed", "{s:s, s:i, s:i}", "reason", a->check.reason,
                     "failures", a->check.failures, "retry_ms", delay);
    char secs[32];
    if (give_up) {
        DDP_ERROR("this node is unfit: its health check failed %d time%s in %s s (join_timeout); "
                  "the last: %s",
                  a->check.failures, a->check.failures == 1 ? "" : "s",
                  ddp_seconds_text((int64_t)spent, secs, sizeof secs), a->check.reason);
        a->check.since_ms = 0;
        return 1;
    }
    a->check.delay_ms = delay;
    DDP_INFO("health check %d failed; the next in %s s", a->check.failures,
             ddp_seconds_text(delay, secs, sizeof secs));
    int rc = uv_timer_start(&a->check.timer, on_retry, (uint64_t)delay, 0);
    if (rc < 0) {
        DDP_ERROR("unable to schedule the next health check: %s", uv_strerror(rc));
        a->check.since_ms = 0;
        return 1;
    }
    return 0;
}

void agent__node_check_cancel(agent_t *a) {
    uv_timer_stop(&a->check.timer);
    a->check.since_ms = 0;
    if (a->check.cmd == NULL)
        return;
    pid_t pid = agent__health_pid(a->check.cmd);
    agent__health_cancel(a->check.cmd);
    if (pid > 0)
        agent__guard_update(a, pid, 0);
    a->check.cmd = NULL;
}

int agent__node_check_reaped(agent_t *a, pid_t pid, int status) {
    if (!agent__health_reaped(a->check.cmd, pid, status))
        return 0;
    agent__guard_update(a, pid, 0);
    return 1;
}

pid_t agent__node_check_pid(const agent_t *a) {
    return agent__health_pid(a->check.cmd);
}
