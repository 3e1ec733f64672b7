/* SPDX-License-Identifier: Apache-2.0
 * bench_gpu: the GPU facts make gpu-check needs, measured with CUDA itself.
 *
 *   bench_gpu info
 *       One line: the driver and runtime versions and each visible device (CUDA_VISIBLE_DEVICES
 *       and MIG honoured: CUDA's own count). Exit 0 with devices; 3 with none or no driver (one
 *       line saying which); 1 when a driver is installed and the query fails (CUDA's error and
 *       both versions, e.g. a driver older than the runtime).
 *   bench_gpu sgemm [--layers A,B,...] [--batch N] [--seconds S]
 *       The compute roof of train's MLP step on device 0: every cuBLAS SGEMM of one step (per
 *       layer the forward product, the weight gradient and, above the first layer, the input
 *       gradient, with train's shapes and transposes) timed alone, the best of many runs each.
 *       Prints one JSON object: {"sgemm_flop_per_sample": F, "sgemm_tflops": T, ...}: T is the
 *       step's GEMM FLOP over the sum of the GEMMs' best times.
 *
 * Without CUDA in the build every mode prints one line and exits 3. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDP_HAVE_CUDA
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#define MAX_LAYERS 32

static void version(int v, char *out, size_t cap) {
    if (v <= 0)
        snprintf(out, cap, "none");
    else
        snprintf(out, cap, "%d.%d", v / 1000, v % 1000 / 10);
}

static int info(void) {
    int drv = 0, rt = 0, n = 0;
    char dv[16], rv[16];
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    version(drv, dv, sizeof dv);
    version(rt, rv, sizeof rv);
    if (drv == 0) {
        printf("no CUDA driver is installed (runtime %s)\n", rv);
        return 3;
    }
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess) {
        printf("cudaGetDeviceCount: %s: %s (driver %s, runtime %s)\n", cudaGetErrorName(ce),
               cudaGetErrorString(ce), dv, rv);
        return 1;
    }
    if (n == 0) {
        printf("no CUDA device is visible (driver %s, runtime %s)\n", dv, rv);
        return 3;
    }
    printf("driver %s, runtime %s, %d device(s):", dv, rv, n);
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        char bus[32] = "?";
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            snprintf(p.name, sizeof p.name, "?");
        (void)cudaDeviceGetPCIBusId(bus, sizeof bus, i);
        printf("%s %d %s (%s, %.0f GiB)", i ? ";" : "", i, p.name, bus,
               (double)p.totalGlobalMem / (1 << 30));
    }
    printf("\n");
    return 0;
}

/* One SGEMM of the step: C[m x n] = op(A) op(B), k the inner size, as cublasSgemm takes them. */
typedef struct gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
} gemm_t;

/* The best time in ms of g over about `seconds` of repetitions (after one warm-up). */
static int time_gemm(cublasHandle_t h, const gemm_t *g, const float *a, const float *b, float *c,
                     double seconds, double *best_ms) {
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        return -1;
    int lda = g->ta == CUBLAS_OP_N ? g->m : g->k, ldb = g->tb == CUBLAS_OP_N ? g->k : g->n;
    *best_ms = 1e30;
    double spent = 0;
    int rc = 0;
    for (int it = 0; rc == 0 && (it < 5 || (spent < seconds * 1000 && it < 100000)); it++) {
        rc |= cudaEventRecord(e0, 0) != cudaSuccess;
        rc |= cublasSgemm(h, g->ta, g->tb, g->m, g->n, g->k, &one, a, lda, b, ldb, &zero, c,
                          g->m) != CUBLAS_STATUS_SUCCESS;
        rc |= cudaEventRecord(e1, 0) != cudaSuccess;
        rc |= cudaEventSynchronize(e1) != cudaSuccess;
        float ms = 0;
        rc |= cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess;
        if (it > 0 && ms < *best_ms) /* the first run warms cuBLAS up */
            *best_ms = ms;
        spent += ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc ? -1 : 0;
}

static int sgemm(int nsizes, const int *sizes, int batch, double seconds) {
    gemm_t g[3 * MAX_LAYERS];
    int ng = 0;
    size_t maxe = 0;
    for (int l = 0; l + 1 < nsizes; l++) {
        int ni = sizes[l], no = sizes[l + 1];
        /* As gpu_model_step: forward, weight gradient, input gradient (not for layer 0). */
        g[ng++] = (gemm_t){CUBLAS_OP_T, CUBLAS_OP_N, no, batch, ni};
        g[ng++] = (gemm_t){CUBLAS_OP_N, CUBLAS_OP_T, ni, no, batch};
        if (l > 0)
            g[ng++] = (gemm_t){CUBLAS_OP_N, CUBLAS_OP_N, ni, batch, no};
        size_t e = (size_t)(ni > batch ? ni : batch) * (size_t)(no > batch ? no : batch);
        if (e > maxe)
            maxe = e;
    }
    float *a = NULL, *b = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc((void **)&a, maxe * sizeof(float)) ||
        cudaMalloc((void **)&b, maxe * sizeof(float)) ||
        cudaMalloc((void **)&c, maxe * sizeof(float)) || cublasCreate(&h)) {
        fprintf(stderr, "bench_gpu sgemm: unable to set up device 0: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    cudaMemset(a, 0, maxe * sizeof(float));
    cudaMemset(b, 0, maxe * sizeof(float));
    double flop = 0, ms = 0;
    for (int i = 0; i < ng; i++) {
        double best;
        if (time_gemm(h, &g[i], a, b, c, seconds / ng, &best) != 0) {
            fprintf(stderr, "bench_gpu sgemm: cublasSgemm %dx%dx%d failed\n", g[i].m, g[i].n,
                    g[i].k);
            return 1;
        }
        flop += 2.0 * g[i].m * g[i].n * g[i].k;
        ms += best;
    }
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf(
        "{\"device\": \"%s\", \"batch\": %d, \"gemms_per_step\": %d, "
        "\"sgemm_flop_per_sample\": %.0f, \"sgemm_ms_per_step\": %.4f, \"sgemm_tflops\": %.3f}\n",
        p.name, batch, ng, flop / batch, ms, flop / (ms * 1e-3) / 1e12);
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 0;
}

static int parse_layers(const char *s, int *sizes, int *n) {
    *n = 0;
    while (*s != '\0') {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno != 0 || end == s || v < 1 || v > (1 << 20) || *n >= MAX_LAYERS + 1)
            return -1;
        sizes[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return *n >= 2 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return info();
    if (argc < 2 || strcmp(argv[1], "sgemm") != 0) {
        fprintf(stderr, "usage: bench_gpu info | sgemm [--layers A,B,...] [--batch N] "
                        "[--seconds S]\n");
        return 2;
    }
    int sizes[MAX_LAYERS + 1], ns = 0, batch = 256;
    double seconds = 2;
    parse_layers("512,1024,512,10", sizes, &ns); /* train's default */
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--layers") == 0 && parse_layers(argv[i + 1], sizes, &ns) == 0)
            continue;
        if (strcmp(argv[i], "--batch") == 0 && (batch = atoi(argv[i + 1])) > 0)
            continue;
        if (strcmp(argv[i], "--seconds") == 0 && (seconds = atof(argv[i + 1])) > 0)
            continue;
        fprintf(stderr, "bench_gpu sgemm: %s: bad value '%s'\n", argv[i], argv[i + 1]);
        return 2;
    }
    return sgemm(ns, sizes, batch, seconds);
}

#else

int main(void) {
    printf("this build has no CUDA support (HAVE_CUDA=0)\n");
    return 3;
}

#endif
