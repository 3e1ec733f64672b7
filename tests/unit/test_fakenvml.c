/* SPDX-License-Identifier: Apache-2.0
 * A fake libnvidia-ml.so for test_agent_gpu_mem, built as libfakenvml.so next to the test. Its
 * devices are driven by the environment, read at each call:
 *   FAKENVML_INIT=r          nvmlInit_v2 returns r (default 0)
 *   FAKENVML_DEVICES=n       devices reported (default 1)
 *   FAKENVML_BUSY_UNTIL_MS=t the busy device(s) hold memory until t ms after the last
 *                            nvmlInit_v2; -1 = forever; unset = never busy
 *   FAKENVML_BUSY_DEVICE=i   only device i is busy (default: every device)
 *   FAKENVML_PIDS=p,q        the processes a busy device lists, 1 GiB each
 *   FAKENVML_PIDS_FILE=f     the same list read from file f when FAKENVML_PIDS is unset (an
 *                            integration test learns its workers' pids only once they run)
 *   FAKENVML_NO_PROCS=1      the process listing answers NVML_ERROR_NOT_SUPPORTED
 *   FAKENVML_USED_MB=m       used memory of a busy device (default 4096; idle devices: 10)
 * The health counters, each naming the one device that has the fault (unset: none has it):
 *   FAKENVML_LOST=i          device i answers every query with NVML_ERROR_GPU_IS_LOST
 *   FAKENVML_RETIRED_PENDING=i   a page retirement is pending on device i
 *   FAKENVML_REMAP_PENDING=i     a row remap is pending on device i (needs a reset)
 *   FAKENVML_REMAP_FAILED=i      a row remap failed on device i
 *   FAKENVML_ECC_DEVICE=i, FAKENVML_ECC_UNCORRECTED=n   n volatile uncorrectable ECC errors on i
 *   FAKENVML_NO_HEALTH=1     the health queries answer NVML_ERROR_NOT_SUPPORTED */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fake_device *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                            nvmlProcessInfo_t *infos);
int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, unsigned int *pending);
int nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                              unsigned int *pending, unsigned int *failed);
int nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                unsigned long long *count);
const char *nvmlErrorString(int result);

#define MIB (1ull << 20)
static struct timespec init_time;

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v != NULL && *v ? strtol(v, NULL, 10) : dflt;
}

static long ms_since_init(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - init_time.tv_sec) * 1000 + (now.tv_nsec - init_time.tv_nsec) / 1000000;
}

/* Device index from the handle (index + 1, never NULL). */
static long dev_index(nvmlDevice_t dev) {
    return (long)(uintptr_t)dev - 1;
}

static int is_busy(nvmlDevice_t dev) {
    const char *until = getenv("FAKENVML_BUSY_UNTIL_MS");
    long only = env_long("FAKENVML_BUSY_DEVICE", -1);
    if (until == NULL || (only >= 0 && only != dev_index(dev)))
        return 0;
    long t = strtol(until, NULL, 10);
    return t < 0 || ms_since_init() < t;
}

int nvmlInit_v2(void) {
    clock_gettime(CLOCK_MONOTONIC, &init_time);
    return (int)env_long("FAKENVML_INIT", 0);
}

int nvmlShutdown(void) {
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = (unsigned int)env_long("FAKENVML_DEVICES", 1);
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    if (index >= (unsigned int)env_long("FAKENVML_DEVICES", 1))
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = (nvmlDevice_t)(uintptr_t)(index + 1);
    return 0;
}

/* Nonzero when variable name names dev's index. */
static int is_device(const char *name, nvmlDevice_t dev) {
    return env_long(name, -1) == dev_index(dev);
}

#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_GPU_IS_LOST 15

int nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
    if (is_device("FAKENVML_LOST", dev))
        return NVML_ERROR_GPU_IS_LOST;
    mem->total = 80 * 1024 * MIB;
    mem->used =
        is_busy(dev) ? (unsigned long long)env_long("FAKENVML_USED_MB", 4096) * MIB : 10 * MIB;
    mem->free = mem->total - mem->used;
    return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    if (env_long("FAKENVML_NO_PROCS", 0))
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    unsigned int n = 0;
    unsigned int pids[16];
    const char *p = getenv("FAKENVML_PIDS");
    static char from_file[256];
    const char *path = getenv("FAKENVML_PIDS_FILE");
    if (p == NULL && path != NULL) {
        FILE *f = fopen(path, "r");
        size_t len = f != NULL ? fread(from_file, 1, sizeof from_file - 1, f) : 0;
        if (f != NULL)
            fclose(f);
        while (len > 0 && (from_file[len - 1] == '\n' || from_file[len - 1] == ','))
            len--;
        from_file[len] = '\0';
        p = from_file;
    }
    while (is_busy(dev) && p != NULL && *p && n < 16) {
        char *end;
        pids[n++] = (unsigned int)strtoul(p, &end, 10);
        p = *end == ',' ? end + 1 : end + strlen(end);
    }
    if (*count < n || (n > 0 && infos == NULL)) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    for (unsigned int i = 0; i < n; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = 1024 * MIB;
    }
    *count = n;
    return 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, unsigned int *pending) {
    if (is_device("FAKENVML_LOST", dev))
        return NVML_ERROR_GPU_IS_LOST;
    if (env_long("FAKENVML_NO_HEALTH", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = is_device("FAKENVML_RETIRED_PENDING", dev); /* NVML_FEATURE_ENABLED is 1 */
    return 0;
}

int nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                              unsigned int *pending, unsigned int *failed) {
    if (is_device("FAKENVML_LOST", dev))
        return NVML_ERROR_GPU_IS_LOST;
    if (env_long("FAKENVML_NO_HEALTH", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = is_device("FAKENVML_REMAP_PENDING", dev);
    *failed = is_device("FAKENVML_REMAP_FAILED", dev);
    *corr = 2; /* remapped rows that worked are no fault */
    *unc = *pending || *failed;
    return 0;
}

int nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                unsigned long long *count) {
    if (is_device("FAKENVML_LOST", dev))
        return NVML_ERROR_GPU_IS_LOST;
    if (env_long("FAKENVML_NO_HEALTH", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    /* error_type 1: uncorrected; counter_type 0: volatile, 1: aggregate (lifetime). Corrected
     * errors and an aggregate count from long ago are no fault of now. */
    *count = 0;
    if (error_type == 0 || counter_type == 1)
        *count = 7;
    else if (is_device("FAKENVML_ECC_DEVICE", dev))
        *count = (unsigned long long)env_long("FAKENVML_ECC_UNCORRECTED", 0);
    return 0;
}

const char *nvmlErrorString(int result) {
    if (result == NVML_ERROR_GPU_IS_LOST)
        return "GPU is lost";
    return result == 9 ? "Driver Not Loaded" : "Unknown Error";
}
