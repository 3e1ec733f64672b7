/* A fake libnvidia-ml.so for test_agent_gpu_mem, built as libfakenvml.so next to the test. Its
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
 *   FAKENVML_USED_MB=m       used memory of a busy device (default 4096; idle devices: 10) */
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

int nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
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

const char *nvmlErrorString(int result) {
    return result == 9 ? "Driver Not Loaded" : "Unknown Error";
}
