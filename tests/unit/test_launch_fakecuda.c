/* SPDX-License-Identifier: Apache-2.0
 * A fake libcuda.so for test_launch_nproc, built as libfakecuda.so next to the test, and as
 * build/tests/fake_gpus/libcuda.so.1 for ddprun itself (LD_LIBRARY_PATH): cuInit returns
 * $FAKE_CUDA_INIT (default 0), cuDeviceGetCount reports $FAKE_CUDA_COUNT devices and
 * cuDeviceGetPCIBusId device i's entry of $FAKE_CUDA_PCI (comma-separated bus ids). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuInit(unsigned int flags);
int cuDeviceGetCount(int *count);
int cuGetErrorName(int result, const char **name);
int cuDeviceGet(int *dev, int ordinal);
int cuDeviceGetPCIBusId(char *bus_id, int len, int dev);

int cuInit(unsigned int flags) {
    (void)flags;
    const char *v = getenv("FAKE_CUDA_INIT");
    return v != NULL ? atoi(v) : 0;
}

int cuDeviceGetCount(int *count) {
    const char *v = getenv("FAKE_CUDA_COUNT");
    *count = v != NULL ? atoi(v) : 0;
    return 0;
}

int cuGetErrorName(int result, const char **name) {
    *name = result == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return 0;
}

int cuDeviceGetPCIBusId(char *bus_id, int len, int dev) {
    const char *list = getenv("FAKE_CUDA_PCI");
    if (list == NULL)
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    for (int i = 0; i < dev && list != NULL; i++) {
        list = strchr(list, ',');
        list = list ? list + 1 : NULL;
    }
    if (list == NULL)
        return 101;
    size_t n = strcspn(list, ",");
    snprintf(bus_id, (size_t)len, "%.*s", (int)n, list);
    return 0;
}
