/* SPDX-License-Identifier: Apache-2.0
 * launch_nproc_resolve: --nproc_per_node gpu|cpu|auto into a number. GPUs are counted through the
 * driver API, dlopen'ed only when asked (the launcher never links libcudart: it costs start-up time
 * and memory in every run that does not need it). */
#include "launch_spec.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launch_int.h"

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_errname_fn)(int result, const char **name);

static const char *cuda_lib = "libcuda.so.1";

void launch__nproc_set_cuda_lib(const char *soname) {
    cuda_lib = soname != NULL ? soname : "libcuda.so.1";
}

int launch_gpu_count(char *why, size_t why_len) {
    char dummy[8];
    if (why == NULL) {
        why = dummy;
        why_len = sizeof dummy;
    }
    why[0] = '\0';
    /* RTLD_LOCAL keeps the driver's symbols out of the global namespace. The library stays loaded:
     * a driver that ran cuInit must not be unloaded under its own threads. */
    void *h = dlopen(cuda_lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, why_len, "%s not loadable: no NVIDIA driver", cuda_lib);
        return 0;
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    cu_errname_fn ename = (cu_errname_fn)dlsym(h, "cuGetErrorName");
    if (init == NULL || count == NULL) {
        snprintf(why, why_len, "%s has no cuInit/cuDeviceGetCount", cuda_lib);
        return 0;
    }
    int r = init(0);
    if (r != 0) {
        const char *name = NULL;
        if (ename == NULL || ename(r, &name) != 0 || name == NULL)
            name = "CUDA error";
        snprintf(why, why_len, "cuInit: %s (%d)", name, r);
        return 0;
    }
    int n = 0;
    r = count(&n);
    if (r != 0 || n < 0) {
        snprintf(why, why_len, "cuDeviceGetCount failed (%d)", r);
        return 0;
    }
    if (n == 0)
        snprintf(why, why_len, "the driver reports 0 devices");
    return n;
}

typedef int (*cu_dev_get_fn)(int *dev, int ordinal);
typedef int (*cu_pci_fn)(char *bus_id, int len, int dev);

int launch_gpu_pci_ids(char (*ids)[32], int max, char *why, size_t why_len) {
    int n = launch_gpu_count(why, why_len);
    if (n <= 0)
        return n;
    void *h = dlopen(cuda_lib, RTLD_NOW | RTLD_LOCAL); /* loaded already: a reference */
    cu_dev_get_fn get = h ? (cu_dev_get_fn)dlsym(h, "cuDeviceGet") : NULL;
    cu_pci_fn pci = h ? (cu_pci_fn)dlsym(h, "cuDeviceGetPCIBusId") : NULL;
    if (get == NULL || pci == NULL) {
        snprintf(why, why_len, "%s has no cuDeviceGet/cuDeviceGetPCIBusId", cuda_lib);
        return -1;
    }
    for (int i = 0; i < n && i < max; i++) {
        int dev = 0, r = get(&dev, i);
        if (r == 0)
            r = pci(ids[i], 32, dev);
        if (r != 0) {
            snprintf(why, why_len, "cuDeviceGetPCIBusId of device %d failed (%d)", i, r);
            return -1;
        }
    }
    return n < max ? n : max;
}

int launch_cpu_count(void) {
    cpu_set_t set;
    /* The affinity mask is what this process may use (taskset, cgroup cpusets under Slurm). */
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int launch_nproc_resolve(launch_spec_t *spec, ddp_err_t *err) {
    char why[120];
    int n;
    switch (spec->nproc_kind) {
    case LAUNCH_NPROC_NUM:
        if (spec->nproc_per_node < 1)
            return ddp_err_set(err, DDP_EUSAGE, "--nproc_per_node: %d is not a positive count",
                               spec->nproc_per_node);
        return 0;
    case LAUNCH_NPROC_CPU: spec->nproc_per_node = launch_cpu_count(); return 0;
    case LAUNCH_NPROC_GPU:
        n = launch_gpu_count(why, sizeof why);
        if (n <= 0)
            return ddp_err_set(err, DDP_ENOGPU, "--nproc_per_node=gpu: no CUDA device visible (%s)",
                               why);
        spec->nproc_per_node = n;
        return 0;
    case LAUNCH_NPROC_AUTO:
        n = launch_gpu_count(NULL, 0);
        spec->nproc_per_node = n > 0 ? n : launch_cpu_count();
        return 0;
    }
    return ddp_err_set(err, DDP_EUSAGE, "--nproc_per_node: unknown kind %d", (int)spec->nproc_kind);
}
