/* SPDX-License-Identifier: Apache-2.0
 * The agent's use of NVML, loaded at run time (agent/gpu_mem.c): waiting for the GPU memory of
 * a stopped worker group to be released before a restart (which processes still hold memory on
 * which device), and the GPUs' fault counters as the node's built-in health check. Private to
 * agent/. */
#ifndef AGENT_GPU_MEM_H
#define AGENT_GPU_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Outcomes (>= 0) of agent__gpu_mem_new, agent__gpu_mem_busy and agent__gpu_mem_wait. */
enum {
    AGENT_GPU_MEM_FREE = 0, /* nothing of the old workers is left on the watched devices */
    AGENT_GPU_MEM_BUSY = 1, /* a watched device still holds it (agent__gpu_mem_busy only) */
    AGENT_GPU_MEM_SKIP = 2, /* no NVML or no GPU: there is nothing to wait for */
};

/* Polling: the first check after the group is down comes this soon, each next one twice as
 * late, up to the cap (agent__gpu_mem_next_delay). */
#define AGENT_GPU_MEM_POLL_FIRST_MS 50
#define AGENT_GPU_MEM_POLL_MAX_MS 500
/* Used memory this far above the baseline still counts as released: the driver's own
 * allocations and other tenants' small contexts come and go. */
#define AGENT_GPU_MEM_SLACK_BYTES (256ull << 20)
/* Devices one watch covers. */
#define AGENT_GPU_MEM_MAX_DEVICES 64

typedef struct agent_gpu_mem agent_gpu_mem_t;

/* What a restart waits for. The pointers are borrowed for the call. */
typedef struct agent_gpu_watch {
    const int *devices; /* NVML device indices; NULL = every device NVML reports */
    int n_devices;
    /* The old workers: a process NVML lists on a watched device holds their memory when its pid
     * is one of these or its process group is (workers lead their groups, so this also covers
     * what they forked, as long as /proc still shows it). */
    const pid_t *pids;
    int n_pids;
    /* NULL, or per watched device (in the order of devices, or of NVML indices) the bytes used
     * before the group started: a device also counts as busy while its used memory is above
     * baseline + AGENT_GPU_MEM_SLACK_BYTES. It covers drivers that list no processes (no
     * permission, some vGPU and MIG setups) and pids NVML reports from another pid namespace. */
    const uint64_t *baseline;
} agent_gpu_watch_t;

/* Why a device is busy (agent__gpu_mem_busy, agent__gpu_mem_wait). */
typedef struct agent_gpu_busy {
    int device;        /* NVML index */
    pid_t pid;         /* the old worker's process holding memory; 0 when the baseline says so */
    uint64_t used;     /* that process's bytes (UINT64_MAX: not reported), or the device's used */
    uint64_t baseline; /* the device's baseline when pid is 0 */
} agent_gpu_busy_t;

/* Loads NVML from soname instead of libnvidia-ml.so.1 (tests; NULL restores the default). */
void agent__gpu_mem_set_lib(const char *soname);

/* Loads NVML (dlopen) and initializes it. Returns 0 with *out set (free with
 * agent__gpu_mem_free); AGENT_GPU_MEM_SKIP with *out NULL when NVML cannot be loaded or
 * initialized or reports no device, why (may be NULL) saying which; or -ENOMEM. */
int agent__gpu_mem_new(agent_gpu_mem_t **out, char *why, size_t why_len);

/* Shuts NVML down and frees g. NULL-safe. */
void agent__gpu_mem_free(agent_gpu_mem_t *g);

/* Devices NVML reports (> 0 for a g that agent__gpu_mem_new returned). */
int agent__gpu_mem_count(const agent_gpu_mem_t *g);

/* Used bytes of each of the n devices (NULL = the first n NVML indices) into used[], for a
 * watch's baseline; a device NVML cannot read gets UINT64_MAX (never busy by baseline). Returns
 * 0, or AGENT_GPU_MEM_SKIP when g is NULL. */
int agent__gpu_mem_used(agent_gpu_mem_t *g, const int *devices, int n, uint64_t *used);

/* One check, without waiting: returns AGENT_GPU_MEM_FREE, AGENT_GPU_MEM_BUSY with *busy (may be
 * NULL) naming the first busy device, or AGENT_GPU_MEM_SKIP when g is NULL. A device NVML cannot
 * query, or an index NVML does not have, counts as free: an unanswerable question must not hold
 * up a restart. */
int agent__gpu_mem_busy(agent_gpu_mem_t *g, const agent_gpu_watch_t *w, agent_gpu_busy_t *busy);

/* The delay before the next check after one of prev_ms (0 for the first):
 * AGENT_GPU_MEM_POLL_FIRST_MS, doubling up to AGENT_GPU_MEM_POLL_MAX_MS. */
int agent__gpu_mem_next_delay(int prev_ms);

/* Blocks, checking with agent__gpu_mem_next_delay's backoff, until the watched devices are free
 * or timeout_ms has passed. Returns AGENT_GPU_MEM_FREE, AGENT_GPU_MEM_SKIP (g NULL), or
 * DDP_ETIMEOUT with *busy (may be NULL) naming the device that stayed busy, after one warning
 * (agent__gpu_mem_describe). For the agent's loop use agent__gpu_mem_busy from a timer. */
int agent__gpu_mem_wait(agent_gpu_mem_t *g, const agent_gpu_watch_t *w, int timeout_ms,
                        agent_gpu_busy_t *busy);

/* What holds busy device b's memory, into out (cut to cap - 1 bytes): "GPU 1 holds 2.0 GiB of
 * pid 1234 (a previous worker)", or "GPU 1 has 4.0 GiB in use (10 MiB before the workers
 * started)". */
void agent__gpu_mem_holder(const agent_gpu_busy_t *b, char *out, size_t cap);

/* The warning for a device still busy after waited_ms, into out (cut to cap - 1 bytes):
 * "GPU 1 still holds 2.0 GiB of pid 1234 (a previous worker) after 30000 ms; restarting anyway". */
void agent__gpu_mem_describe(const agent_gpu_busy_t *b, int waited_ms, char *out, size_t cap);

/* The built-in GPU health check, before a node joins: each of the n devices (NVML indices; NULL:
 * every device NVML reports) must answer, and have no retired pages pending, no row remap pending
 * or failed, and no uncorrectable ECC error since the driver loaded (the volatile count: the
 * lifetime count would condemn a GPU for an error long since dealt with). Returns 0 healthy, 1
 * with why (cut to cap - 1 bytes) naming the first faulty GPU and the counter, e.g. "GPU 3: 2
 * uncorrectable ECC errors since the driver loaded (volatile ECC count)", or AGENT_GPU_MEM_SKIP
 * when g is NULL. A counter this NVML or GPU does not report is not checked. */
int agent__gpu_health(agent_gpu_mem_t *g, const int *devices, int n, char *why, size_t cap);

#endif
