/* SPDX-License-Identifier: Apache-2.0
 * The wait before a restart for the GPU memory of the stopped group (--gpu_memory_reclaim_timeout):
 * a driver releases a killed process's memory a moment after it is reaped, and new workers that
 * start too early fail to allocate. NVML is opened once, by the node's GPU health check before
 * the first group (node_check.c) or else on the first restart, and polled from a timer with
 * agent__gpu_mem_next_delay's backoff. */
#include "agent_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "gpu_mem.h"

int agent__gpu_open(agent_t *a) {
    if (a->gpu.nvml != NULL)
        return 0;
    if (a->gpu.skip)
        return -1;
    /* For tests: a fake NVML (tests/unit/libfakenvml.so). */
    const char *lib = getenv("DDPRUN_NVML_LIB");
    if (lib != NULL && *lib != '\0')
        agent__gpu_mem_set_lib(lib);
    char why[256] = "";
    int rc = agent__gpu_mem_new(&a->gpu.nvml, why, sizeof why);
    if (rc == 0)
        a->gpu.pids = calloc((size_t)a->cfg.nproc, sizeof *a->gpu.pids);
    if (rc != 0 || a->gpu.pids == NULL) {
        DDP_DEBUG("no GPU health check, no wait for GPU memory before restarts: %s",
                  why[0] ? why : "no memory");
        agent__gpu_mem_free(a->gpu.nvml);
        a->gpu.nvml = NULL;
        a->gpu.skip = 1;
        return -1;
    }
    return 0;
}

/* One check of the stopped group's devices. */
static int gpu_check(agent_t *a, agent_gpu_busy_t *busy) {
    for (int i = 0; i < a->cfg.nproc; i++)
        a->gpu.pids[i] = a->grp.workers[i].pid;
    agent_gpu_watch_t w = {.pids = a->gpu.pids, .n_pids = a->cfg.nproc};
    return agent__gpu_mem_busy(a->gpu.nvml, &w, busy);
}

static void on_gpu_timer(uv_timer_t *t) {
    agent_t *a = t->data;
    if (a->sup.state != SUP_STOPPING)
        return;
    agent_gpu_busy_t busy;
    int waited = (int)(ddp_now_ms() - a->gpu.wait_start_ms);
    int64_t limit = a->cfg.job->gpu_memory_reclaim_timeout_ms;
    if (gpu_check(a, &busy) == AGENT_GPU_MEM_BUSY) {
        if (waited < limit) {
            a->gpu.delay_ms = agent__gpu_mem_next_delay(a->gpu.delay_ms);
            int64_t left = limit - waited;
            uint64_t d = (uint64_t)(a->gpu.delay_ms < left ? a->gpu.delay_ms : left);
            if (uv_timer_start(&a->gpu.timer, on_gpu_timer, d, 0) == 0)
                return;
        }
        char line[256];
        agent__gpu_mem_describe(&busy, waited, line, sizeof line);
        DDP_WARN("%s", line);
    } else {
        DDP_INFO("GPU memory of the stopped workers released after %d ms", waited);
    }
    agent__event(a, EV_GPU_RELEASED, NULL);
}

int agent__gpu_wait_start(agent_t *a) {
    agent_gpu_busy_t busy;
    if (a->cfg.job->gpu_memory_reclaim_timeout_ms <= 0 || agent__gpu_open(a) < 0)
        return 0;
    if (gpu_check(a, &busy) != AGENT_GPU_MEM_BUSY)
        return 0;
    a->gpu.wait_start_ms = ddp_now_ms();
    a->gpu.delay_ms = agent__gpu_mem_next_delay(0);
    if (uv_timer_start(&a->gpu.timer, on_gpu_timer, (uint64_t)a->gpu.delay_ms, 0) < 0)
        return 0;
    /* Said when it starts, at the default level: the restart may stand still for the whole
     * timeout (50 s by default), and the line after it comes only when it ends. */
    char holder[160], secs[32];
    agent__gpu_mem_holder(&busy, holder, sizeof holder);
    DDP_WARN("restart %d of %d waits up to %s s (--gpu_memory_reclaim_timeout) for the stopped "
             "workers' GPU memory: %s",
             a->as.attempt, a->cfg.job->max_restarts,
             ddp_seconds_text(a->cfg.job->gpu_memory_reclaim_timeout_ms, secs, sizeof secs),
             holder);
    return 1;
}

int agent__gpu_wait_init(agent_t *a) {
    int rc = uv_timer_init(a->cfg.loop, &a->gpu.timer);
    a->gpu.timer.data = a;
    return rc;
}

int agent__gpu_wait_active(agent_t *a) {
    return uv_is_active((uv_handle_t *)&a->gpu.timer);
}

void agent__gpu_wait_cancel(agent_t *a) {
    uv_timer_stop(&a->gpu.timer);
}

void agent__gpu_wait_free(agent_t *a) {
    agent__gpu_mem_free(a->gpu.nvml);
    a->gpu.nvml = NULL;
    free(a->gpu.pids);
    a->gpu.pids = NULL;
}
