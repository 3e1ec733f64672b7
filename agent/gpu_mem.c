/* SPDX-License-Identifier: Apache-2.0
 * The agent's use of NVML. Before a restart on a GPU node, the agent waits until the stopped
 * workers' GPU memory is released: a new group that starts while the driver still tears the old
 * contexts down fails with out-of-memory. Before a node joins, its GPUs' fault counters are its
 * built-in health check. NVML is dlopen'ed at run time (no build or link dependency on the
 * driver), and only the few types and functions used here are declared. */
#include "gpu_mem.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp_err.h"
#include "ddp_log.h"
#include "ddp_proc.h"
#include "ddp_time.h"

/* From NVML's ABI (nvml.h): nvmlReturn_t is an int enum, a device is an opaque pointer. */
#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_FEATURE_ENABLED 1
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0 /* since the driver loaded (NVML_AGGREGATE_ECC: the GPU's lifetime) */
typedef struct nvml_device *nvml_device_t;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory_t;
/* nvmlProcessInfo_v1_t is {pid, usedGpuMemory}; v2 and v3 (nvmlProcessInfo_t) append
 * gpuInstanceId and computeInstanceId. pid and usedGpuMemory sit at the same offsets in all. */
typedef struct nvml_process_info {
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info_t;
typedef struct nvml_process_info_v1 {
    unsigned int pid;
    unsigned long long used_gpu_memory;
} nvml_process_info_v1_t;

typedef int (*nvml_void_fn)(void);
typedef int (*nvml_count_fn)(unsigned int *count);
typedef int (*nvml_handle_fn)(unsigned int index, nvml_device_t *dev);
typedef int (*nvml_mem_fn)(nvml_device_t dev, nvml_memory_t *mem);
typedef int (*nvml_procs_fn)(nvml_device_t dev, unsigned int *count, void *infos);
typedef const char *(*nvml_errstr_fn)(int result);
typedef int (*nvml_pending_fn)(nvml_device_t dev, unsigned int *pending);
typedef int (*nvml_remap_fn)(nvml_device_t dev, unsigned int *corr, unsigned int *unc,
                             unsigned int *pending, unsigned int *failed);
typedef int (*nvml_ecc_fn)(nvml_device_t dev, int error_type, int counter_type,
                           unsigned long long *count);

struct agent_gpu_mem {
    nvml_void_fn shutdown;
    nvml_handle_fn handle;
    nvml_mem_fn mem_info;
    nvml_procs_fn procs; /* NULL when this NVML lists no processes */
    size_t proc_stride;  /* bytes per entry of procs' array */
    nvml_errstr_fn errstr;
    /* The health counters; each NULL when this NVML lacks it. */
    nvml_pending_fn retired_pending;
    nvml_remap_fn remapped_rows;
    nvml_ecc_fn ecc_total;
    int count;
    unsigned char *infos; /* procs' array, grown when a device lists more processes */
    unsigned int infos_cap;
};

static const char *nvml_lib = "libnvidia-ml.so.1";

void agent__gpu_mem_set_lib(const char *soname) {
    nvml_lib = soname != NULL ? soname : "libnvidia-ml.so.1";
}

/* The newest process listing this NVML has: _v3 and _v2 take the long entries, the original
 * the short ones. */
static void procs_resolve(agent_gpu_mem_t *g, void *h) {
    static const char *const names[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        g->procs = (nvml_procs_fn)dlsym(h, names[i]);
        if (g->procs != NULL) {
            g->proc_stride = i < 2 ? sizeof(nvml_process_info_t) : sizeof(nvml_process_info_v1_t);
            return;
        }
    }
}

/* nvmlInit_v2 and nvmlDeviceGetCount_v2. Returns 0, or AGENT_GPU_MEM_SKIP with why filled. */
static int nvml_start(agent_gpu_mem_t *g, void *h, char *why, size_t why_len) {
    nvml_void_fn init = (nvml_void_fn)dlsym(h, "nvmlInit_v2");
    nvml_count_fn count = (nvml_count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
    nvml_errstr_fn errstr = (nvml_errstr_fn)dlsym(h, "nvmlErrorString");
    g->shutdown = (nvml_void_fn)dlsym(h, "nvmlShutdown");
    g->handle = (nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    g->mem_info = (nvml_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
    g->errstr = errstr;
    g->retired_pending = (nvml_pending_fn)dlsym(h, "nvmlDeviceGetRetiredPagesPendingStatus");
    g->remapped_rows = (nvml_remap_fn)dlsym(h, "nvmlDeviceGetRemappedRows");
    g->ecc_total = (nvml_ecc_fn)dlsym(h, "nvmlDeviceGetTotalEccErrors");
    procs_resolve(g, h);
    if (init == NULL || count == NULL || g->shutdown == NULL || g->handle == NULL ||
        g->mem_info == NULL) {
        snprintf(why, why_len, "%s lacks the NVML functions used", nvml_lib);
        return AGENT_GPU_MEM_SKIP;
    }
    int r = init();
    if (r != NVML_SUCCESS) {
        const char *text = errstr != NULL ? errstr(r) : NULL;
        snprintf(why, why_len, "nvmlInit_v2: %s (%d)", text != NULL ? text : "error", r);
        return AGENT_GPU_MEM_SKIP;
    }
    unsigned int n = 0;
    r = count(&n);
    if (r != NVML_SUCCESS || n == 0) {
        g->shutdown();
        snprintf(why, why_len,
                 r != NVML_SUCCESS ? "nvmlDeviceGetCount_v2 failed (%d)"
                                   : "NVML reports no device (%d)",
                 r);
        return AGENT_GPU_MEM_SKIP;
    }
    g->count = n > AGENT_GPU_MEM_MAX_DEVICES ? AGENT_GPU_MEM_MAX_DEVICES : (int)n;
    return 0;
}

int agent__gpu_mem_new(agent_gpu_mem_t **out, char *why, size_t why_len) {
    char dummy[8];
    if (why == NULL) {
        why = dummy;
        why_len = sizeof dummy;
    }
    why[0] = '\0';
    *out = NULL;
    /* The library stays loaded after nvmlShutdown, as launcher/nproc.c keeps libcuda: a driver
     * library is not promised to be unloadable, and a second agent__gpu_mem_new reuses it. */
    void *h = dlopen(nvml_lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, why_len, "%s not loadable: no NVIDIA driver", nvml_lib);
        return AGENT_GPU_MEM_SKIP;
    }
    agent_gpu_mem_t *g = calloc(1, sizeof *g);
    if (g == NULL)
        return -ENOMEM;
    int rc = nvml_start(g, h, why, why_len);
    if (rc != 0) {
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void agent__gpu_mem_free(agent_gpu_mem_t *g) {
    if (g == NULL)
        return;
    g->shutdown();
    free(g->infos);
    free(g);
}

int agent__gpu_mem_count(const agent_gpu_mem_t *g) {
    return g != NULL ? g->count : 0;
}

int agent__gpu_mem_used(agent_gpu_mem_t *g, const int *devices, int n, uint64_t *used) {
    if (g == NULL)
        return AGENT_GPU_MEM_SKIP;
    for (int i = 0; i < n; i++) {
        int index = devices != NULL ? devices[i] : i;
        nvml_device_t dev;
        nvml_memory_t m;
        used[i] = UINT64_MAX;
        if (index >= 0 && index < g->count && g->handle((unsigned)index, &dev) == NVML_SUCCESS &&
            g->mem_info(dev, &m) == NVML_SUCCESS)
            used[i] = m.used;
    }
    return 0;
}

/* The compute processes of dev into g->infos (*n entries). Returns 0, or -1 when this NVML
 * cannot list them (no such function, no permission, not supported). */
static int procs_list(agent_gpu_mem_t *g, nvml_device_t dev, unsigned int *n) {
    if (g->procs == NULL)
        return -1;
    /* The list can grow between the sizing call and the next: retry a few times. */
    for (int attempt = 0; attempt < 4; attempt++) {
        unsigned int count = g->infos_cap;
        int r = g->procs(dev, &count, g->infos);
        if (r == NVML_SUCCESS) {
            *n = count;
            return 0;
        }
        if (r != NVML_ERROR_INSUFFICIENT_SIZE || count > 65536)
            return -1;
        unsigned char *p = realloc(g->infos, (size_t)(count + 16) * g->proc_stride);
        if (p == NULL)
            return -1;
        g->infos = p;
        g->infos_cap = count + 16;
    }
    return -1;
}

/* The process group of pid from /proc, or 0 when it is gone or not visible here. */
static pid_t pgrp_of(pid_t pid) {
    ddp_proc_stat_t st;
    return ddp_proc_stat(pid, 0, &st) < 0 ? 0 : st.pgrp;
}

/* pid is one of the old workers, or in one of their process groups. */
static int is_old(const agent_gpu_watch_t *w, pid_t pid) {
    for (int i = 0; i < w->n_pids; i++)
        if (w->pids[i] == pid)
            return 1;
    pid_t pg = pgrp_of(pid);
    for (int i = 0; pg > 0 && i < w->n_pids; i++)
        if (w->pids[i] == pg)
            return 1;
    return 0;
}

/* Whether device index (slot in the watch) still holds the old workers' memory; fills *b. */
static int device_busy(agent_gpu_mem_t *g, const agent_gpu_watch_t *w, int slot, int index,
                       agent_gpu_busy_t *b) {
    nvml_device_t dev;
    if (index < 0 || index >= g->count || g->handle((unsigned)index, &dev) != NVML_SUCCESS)
        return 0;
    memset(b, 0, sizeof *b);
    b->device = index;
    unsigned int n = 0;
    if (w->n_pids > 0 && procs_list(g, dev, &n) == 0) {
        for (unsigned int i = 0; i < n; i++) {
            const nvml_process_info_v1_t *e =
                (const nvml_process_info_v1_t *)(g->infos + (size_t)i * g->proc_stride);
            if (is_old(w, (pid_t)e->pid)) {
                b->pid = (pid_t)e->pid;
                b->used = e->used_gpu_memory;
                return 1;
            }
        }
    }
    nvml_memory_t m;
    if (w->baseline == NULL || w->baseline[slot] == UINT64_MAX ||
        g->mem_info(dev, &m) != NVML_SUCCESS)
        return 0;
    b->used = m.used;
    b->baseline = w->baseline[slot];
    return m.used > w->baseline[slot] + AGENT_GPU_MEM_SLACK_BYTES;
}

int agent__gpu_mem_busy(agent_gpu_mem_t *g, const agent_gpu_watch_t *w, agent_gpu_busy_t *busy) {
    if (g == NULL)
        return AGENT_GPU_MEM_SKIP;
    int n = w->devices != NULL ? w->n_devices : g->count;
    if (n > AGENT_GPU_MEM_MAX_DEVICES)
        n = AGENT_GPU_MEM_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        agent_gpu_busy_t b;
        if (device_busy(g, w, i, w->devices != NULL ? w->devices[i] : i, &b)) {
            if (busy != NULL)
                *busy = b;
            return AGENT_GPU_MEM_BUSY;
        }
    }
    return AGENT_GPU_MEM_FREE;
}

int agent__gpu_mem_next_delay(int prev_ms) {
    if (prev_ms <= 0)
        return AGENT_GPU_MEM_POLL_FIRST_MS;
    return prev_ms >= AGENT_GPU_MEM_POLL_MAX_MS / 2 ? AGENT_GPU_MEM_POLL_MAX_MS : prev_ms * 2;
}

int agent__gpu_mem_wait(agent_gpu_mem_t *g, const agent_gpu_watch_t *w, int timeout_ms,
                        agent_gpu_busy_t *busy) {
    if (g == NULL)
        return AGENT_GPU_MEM_SKIP;
    uint64_t start = ddp_now_ms();
    uint64_t deadline = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    agent_gpu_busy_t b;
    int delay = 0;
    for (;;) {
        int rc = agent__gpu_mem_busy(g, w, &b);
        if (rc != AGENT_GPU_MEM_BUSY)
            return rc;
        uint64_t now = ddp_now_ms();
        if (now >= deadline)
            break;
        delay = agent__gpu_mem_next_delay(delay);
        uint64_t ms = (uint64_t)delay < deadline - now ? (uint64_t)delay : deadline - now;
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    char text[256];
    agent__gpu_mem_describe(&b, (int)(ddp_now_ms() - start), text, sizeof text);
    DDP_WARN("%s; the next attempt starts anyway", text);
    if (busy != NULL)
        *busy = b;
    return DDP_ETIMEOUT;
}

/* "2.0 GiB" or "300 MiB". */
static void bytes_text(uint64_t n, char *out, size_t cap) {
    if (n >= (1ull << 30))
        snprintf(out, cap, "%.1f GiB", (double)n / (double)(1ull << 30));
    else
        snprintf(out, cap, "%llu MiB", (unsigned long long)(n >> 20));
}

void agent__gpu_mem_holder(const agent_gpu_busy_t *b, char *out, size_t cap) {
    char used[32], base[32];
    bytes_text(b->used, used, sizeof used);
    bytes_text(b->baseline, base, sizeof base);
    if (b->pid != 0 && b->used == UINT64_MAX)
        snprintf(out, cap, "GPU %d holds memory of pid %d (a previous worker)", b->device,
                 (int)b->pid);
    else if (b->pid != 0)
        snprintf(out, cap, "GPU %d holds %s of pid %d (a previous worker)", b->device, used,
                 (int)b->pid);
    else
        snprintf(out, cap, "GPU %d has %s in use (%s before the workers started)", b->device, used,
                 base);
}

void agent__gpu_mem_describe(const agent_gpu_busy_t *b, int waited_ms, char *out, size_t cap) {
    char used[32], base[32];
    bytes_text(b->used, used, sizeof used);
    bytes_text(b->baseline, base, sizeof base);
    if (b->pid != 0 && b->used == UINT64_MAX)
        snprintf(out, cap, "GPU %d still holds memory of pid %d (a previous worker) after %d ms",
                 b->device, (int)b->pid, waited_ms);
    else if (b->pid != 0)
        snprintf(out, cap, "GPU %d still holds %s of pid %d (a previous worker) after %d ms",
                 b->device, used, (int)b->pid, waited_ms);
    else
        snprintf(out, cap, "GPU %d still has %s in use (%s before the workers started) after %d ms",
                 b->device, used, base, waited_ms);
}

/* One NVML answer of the health check: 1 when it says the GPU is gone (why filled), else 0 (an
 * answer this device does not give, NOT_SUPPORTED or another error, is not a fault). */
static int health_lost(const agent_gpu_mem_t *g, int r, int index, const char *what, char *why,
                       size_t cap) {
    if (r != NVML_ERROR_GPU_IS_LOST)
        return 0;
    const char *text = g->errstr != NULL ? g->errstr(r) : NULL;
    snprintf(why, cap, "GPU %d does not answer (%s: %s)", index, what,
             text != NULL ? text : "GPU is lost");
    return 1;
}

/* The checks of one device: 0 healthy, 1 with why filled. */
static int health_one(const agent_gpu_mem_t *g, int index, char *why, size_t cap) {
    nvml_device_t dev;
    int r = g->handle((unsigned)index, &dev);
    if (r != NVML_SUCCESS) {
        const char *text = g->errstr != NULL ? g->errstr(r) : NULL;
        snprintf(why, cap, "GPU %d does not answer (nvmlDeviceGetHandleByIndex: %s)", index,
                 text != NULL ? text : "error");
        return 1;
    }
    nvml_memory_t m;
    if (health_lost(g, g->mem_info(dev, &m), index, "nvmlDeviceGetMemoryInfo", why, cap))
        return 1;
    unsigned int pending = 0, corr = 0, unc = 0, failed = 0;
    if (g->retired_pending != NULL) {
        r = g->retired_pending(dev, &pending);
        if (health_lost(g, r, index, "nvmlDeviceGetRetiredPagesPendingStatus", why, cap))
            return 1;
        if (r == NVML_SUCCESS && pending == NVML_FEATURE_ENABLED) {
            snprintf(why, cap, "GPU %d has retired pages pending (a reboot retires them)", index);
            return 1;
        }
    }
    if (g->remapped_rows != NULL) {
        pending = 0;
        r = g->remapped_rows(dev, &corr, &unc, &pending, &failed);
        if (health_lost(g, r, index, "nvmlDeviceGetRemappedRows", why, cap))
            return 1;
        if (r == NVML_SUCCESS && failed) {
            snprintf(why, cap, "GPU %d: a row remap failed (remapped rows: failure)", index);
            return 1;
        }
        if (r == NVML_SUCCESS && pending) {
            snprintf(why, cap,
                     "GPU %d has a row remap pending (remapped rows: pending; a GPU "
                     "reset applies it)",
                     index);
            return 1;
        }
    }
    if (g->ecc_total != NULL) {
        unsigned long long n = 0;
        r = g->ecc_total(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n);
        if (health_lost(g, r, index, "nvmlDeviceGetTotalEccErrors", why, cap))
            return 1;
        if (r == NVML_SUCCESS && n > 0) {
            snprintf(why, cap,
                     "GPU %d: %llu uncorrectable ECC error%s since the driver loaded "
                     "(volatile ECC count)",
                     index, n, n == 1 ? "" : "s");
            return 1;
        }
    }
    return 0;
}

int agent__gpu_health(agent_gpu_mem_t *g, const int *devices, int n, char *why, size_t cap) {
    if (g == NULL)
        return AGENT_GPU_MEM_SKIP;
    if (devices == NULL)
        n = g->count;
    for (int i = 0; i < n; i++) {
        int index = devices != NULL ? devices[i] : i;
        if (index >= 0 && health_one(g, index, why, cap))
            return 1;
    }
    return 0;
}
