/* A fake libcuda.so for test_launch_nproc, built as libfakecuda.so next to the test: cuInit returns
 * $FAKE_CUDA_INIT (default 0) and cuDeviceGetCount reports $FAKE_CUDA_COUNT devices. */
#include <stdlib.h>

int cuInit(unsigned int flags);
int cuDeviceGetCount(int *count);
int cuGetErrorName(int result, const char **name);

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
