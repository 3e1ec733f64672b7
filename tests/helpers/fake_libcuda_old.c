/* SPDX-License-Identifier: Apache-2.0
 * A libcuda.so.1 of a driver older than the CUDA runtime the project builds with: built as
 * build/tests/old_driver/libcuda.so.1, found by the CUDA runtime through LD_LIBRARY_PATH. It
 * reports driver version $FAKE_CUDA_DRIVER (default 11080, CUDA 11.8) and offers nothing else, so
 * cudaGetDeviceCount fails with cudaErrorInsufficientDriver as under a real old driver, without
 * a GPU. The runtime finds the driver's entry points through cuGetProcAddress. */
#include <stdlib.h>
#include <string.h>

int cuDriverGetVersion(int *version);
int cuInit(unsigned int flags);
int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                        int *status);

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NOT_FOUND = 500 };

int cuDriverGetVersion(int *version) {
    const char *v = getenv("FAKE_CUDA_DRIVER");
    *version = v != NULL ? atoi(v) : 11080;
    return CUDA_SUCCESS;
}

int cuInit(unsigned int flags) {
    (void)flags;
    return CUDA_SUCCESS;
}

int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                        int *status) {
    (void)version, (void)flags;
    if (status != NULL)
        *status = 0;
    *fn = strcmp(symbol, "cuDriverGetVersion") == 0 ? (void *)cuDriverGetVersion
          : strcmp(symbol, "cuInit") == 0           ? (void *)cuInit
          : strcmp(symbol, "cuGetProcAddress") == 0 ? (void *)cuGetProcAddress_v2
                                                    : NULL;
    return *fn != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
