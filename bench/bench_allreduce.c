/* SPDX-License-Identifier: Apache-2.0
 * bench_allreduce: CPU allreduce (libddpw shared-memory backend) from 4 KiB to 64 MiB of
 * float32, with nccl-tests' figures (algbw = bytes / time, busbw = algbw * 2(n-1)/n) and the
 * single-thread memcpy bandwidth measured in the same run as the reference.
 *
 *   bench_allreduce [--ranks N] [--min-bytes B] [--max-bytes B] [--chunk B] [--seconds S]
 *                   [--backend cpu|nccl]
 *
 * With --backend nccl (GPU machines; one rank per GPU) the buffer lives in device memory and the
 * same table measures NCCL through libddpw.
 * Without RANK in the environment it starts a store in a thread (127.0.0.1, port 0) and forks
 * N ranks itself; under ddprun it runs as one rank of the job. Rank 0 prints the table. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef DDP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "ddp_parse.h"
#include "ddp_time.h"
#include "ddpw.h"
#include "rdzv_server.h"

typedef struct opts {
    int ranks;
    int64_t min_bytes, max_bytes, chunk;
    double seconds;
    ddpw_backend_t backend;
} opts_t;

static double memcpy_gbs(size_t bytes, double seconds) {
    char *a = malloc(bytes), *b = malloc(bytes);
    if (a == NULL || b == NULL)
        return 0;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    memcpy(b, a, bytes); /* warm */
    int iters = 0;
    uint64_t t0 = ddp_now_ns(), t1;
    do {
        memcpy(iters & 1 ? a : b, iters & 1 ? b : a, bytes);
        iters++;
        t1 = ddp_now_ns();
    } while ((double)(t1 - t0) / 1e9 < seconds);
    free(a);
    free(b);
    return (double)bytes * iters / ((double)(t1 - t0));
}

/* count floats of buf through one allreduce per call, `calls` calls; with NCCL all of them in
 * flight on the backend's stream and one wait at the end (as nccl-tests times them), else each
 * call waited for. Exits the rank with its error on any failure: a timed call that failed would
 * count as fast. */
static void timed_calls(ddpw_t *w, float *buf, size_t count, int calls, int gpu) {
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = 0;
    for (int i = 0; i < calls && rc == 0; i++)
        rc = gpu ? ddpw_allreduce_async(w, buf, count, DDPW_SUM, NULL, &e)
                 : ddpw_allreduce(w, buf, count, DDPW_SUM, &e);
    if (rc == 0 && gpu)
        rc = ddpw_stream_wait(w, NULL, &e);
    if (rc != 0) {
        fprintf(stderr, "rank %d: allreduce of %zu floats: %s\n", ddpw_rank(w), count, e.text);
        exit(1);
    }
}

#ifdef DDP_HAVE_CUDA
/* A CUDA call that must succeed, or the rank stops naming it. */
static void cuda_ok(cudaError_t ce, int rank, const char *what) {
    if (ce != cudaSuccess) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(ce));
        exit(1);
    }
}
#endif

static int run_rank(const opts_t *o) {
    ddpw_opts_t wo = DDPW_OPTS_INIT;
    wo.backend = o->backend;
    wo.cpu_chunk_bytes = (size_t)o->chunk;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w;
    int rc = ddpw_init(&w, &wo, &e);
    if (rc != 0) {
        fprintf(stderr, "bench_allreduce: %s\n", e.text);
        return 1;
    }
    int rank = ddpw_rank(w), n = ddpw_world_size(w);
    size_t maxc = (size_t)o->max_bytes / sizeof(float);
    float *host = malloc(maxc * sizeof(float)), *buf = host;
    if (host == NULL)
        return 1;
    /* Touch everything once: first touch costs ~15 us per page here. */
    for (size_t i = 0; i < maxc; i++)
        host[i] = 1.0f;
    int gpu = ddpw_backend(w) == DDPW_BACKEND_NCCL;
#ifdef DDP_HAVE_CUDA
    if (gpu && cudaMalloc((void **)&buf, maxc * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaMalloc of %zu bytes failed\n", rank, maxc * sizeof(float));
        return 1;
    }
#endif
    double mc = 0;
    if (rank == 0) {
        /* Measured alone (the other ranks wait at the barrier below, idle). */
        mc = memcpy_gbs((size_t)o->max_bytes, 0.3);
    }
    ddpw_barrier(w, NULL);
    if (rank == 0) {
        printf("# ddpw %s allreduce: %d ranks, chunk %lld bytes per rank, float32, op sum\n",
               gpu ? "nccl" : "cpu", n, (long long)o->chunk);
        printf("# single-thread memcpy bandwidth (%lld MiB): %.2f GB/s\n",
               (long long)(o->max_bytes >> 20), mc);
        printf("# %12s %12s %12s %12s %12s %7s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
               "busbw(GB/s)", "#wrong");
    }
    double last_busbw = 0;
    int bad = 0; /* a wrong sum at any size fails the run, not only at the last one */
    for (int64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
        size_t count = (size_t)bytes / sizeof(float);
        /* Correctness: every rank contributes rank + 1, so every value must be n(n+1)/2. */
        for (size_t i = 0; i < count; i++)
            host[i] = (float)(rank + 1);
#ifdef DDP_HAVE_CUDA
        /* A copy from pageable memory may still be in flight when cudaMemcpy returns, and NCCL
         * reads on a non-blocking stream that does not wait for the default stream: the device
         * is synchronised before the allreduce reads the buffer. */
        if (gpu) {
            cuda_ok(cudaMemcpy(buf, host, count * sizeof(float), cudaMemcpyHostToDevice), rank,
                    "upload (cudaMemcpy)");
            cuda_ok(cudaDeviceSynchronize(), rank, "upload (cudaDeviceSynchronize)");
        }
#endif
        if ((rc = ddpw_allreduce(w, buf, count, DDPW_SUM, &e)) != 0) {
            fprintf(stderr, "rank %d: %s\n", rank, e.text);
            return 1;
        }
#ifdef DDP_HAVE_CUDA
        if (gpu)
            cuda_ok(cudaMemcpy(host, buf, count * sizeof(float), cudaMemcpyDeviceToHost), rank,
                    "download (cudaMemcpy)");
#endif
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++)
            wrong += host[i] != (float)(n * (n + 1) / 2);
        /* Three warm-up calls, timed on rank 0, set the iteration count for about
         * o->seconds / 12 per size; every rank must make the same number of calls. */
        uint64_t t0 = ddp_now_ns();
        timed_calls(w, buf, count, 3, gpu);
        double per = (double)(ddp_now_ns() - t0) / 3;
        float fw = (float)(o->seconds * 1e9 / 12 / per) + 3;
        if (fw > 100000)
            fw = 100000;
        if (gpu) {
            /* The count travels through the store: NCCL broadcasts device memory only. Every rank
             * must make the same number of calls, so a rank that misses it stops here. */
            char key[64];
            size_t vl = 0;
            snprintf(key, sizeof key, "bench/iters/%lld", (long long)bytes);
            rc = rank == 0 ? ddpw_store_set(w, key, &fw, sizeof fw, &e)
                           : ddpw_store_get(w, key, &fw, sizeof fw, &vl, -1, &e);
            if (rc == 0 && vl != sizeof fw && rank != 0)
                rc = -EPROTO;
            if (rc != 0) {
                fprintf(stderr, "rank %d: iteration count (store key %s): %s\n", rank, key,
                        e.code != 0 ? e.text : ddp_strerror(rc));
                return 1;
            }
        } else
            ddpw_broadcast(w, &fw, sizeof fw, 0, NULL);
        int want = (int)fw;
        ddpw_barrier(w, NULL);
        t0 = ddp_now_ns();
        timed_calls(w, buf, count, want, gpu);
        double us = (double)(ddp_now_ns() - t0) / 1e3 / want;
        double algbw = (double)bytes / 1e3 / us;
        double busbw = algbw * 2.0 * (n - 1) / n;
        last_busbw = busbw;
        if (rank == 0)
            printf("  %12lld %12zu %12.1f %12.2f %12.2f %7zu\n", (long long)bytes, count, us, algbw,
                   busbw, wrong);
        fflush(stdout);
        bad |= wrong != 0;
    }
    if (rank == 0)
        printf("# busbw at the largest size: %.2f GB/s (memcpy %.2f GB/s, ratio %.2f)\n",
               last_busbw, mc, mc > 0 ? last_busbw / mc : 0);
#ifdef DDP_HAVE_CUDA
    if (gpu)
        cudaFree(buf);
#endif
    free(host);
    ddpw_free(w);
    return bad;
}

static void bad_arg(const char *flag, const char *what, const char *v) __attribute__((noreturn));
static void bad_arg(const char *flag, const char *what, const char *v) {
    fprintf(stderr, "bench_allreduce: %s: %s '%s'\n", flag, what, v);
    exit(2);
}

/* A byte count with an optional K or M suffix, in [4, 16 GiB]. */
static int64_t size_arg(const char *flag, const char *v) {
    size_t n = strlen(v);
    int shift = 0;
    if (n > 0 && (v[n - 1] == 'K' || v[n - 1] == 'k'))
        shift = 10;
    else if (n > 0 && (v[n - 1] == 'M' || v[n - 1] == 'm'))
        shift = 20;
    char num[32];
    if (shift)
        n--;
    if (n >= sizeof num)
        bad_arg(flag, "bad size", v);
    memcpy(num, v, n);
    num[n] = '\0';
    int64_t x;
    if (ddp_parse_i64(num, 0, (1ll << 34) >> shift, &x) != 0 || (x << shift) < 4)
        bad_arg(flag, "bad size", v);
    return x << shift;
}

int main(int argc, char **argv) {
    opts_t o = {2, 4096, 64 << 20, 256 << 10, 3.0, DDPW_BACKEND_CPU};
    static const struct option lo[] = {
        {"ranks", 1, 0, 'n'}, {"min-bytes", 1, 0, 'b'}, {"max-bytes", 1, 0, 'e'},
        {"chunk", 1, 0, 'c'}, {"seconds", 1, 0, 's'},   {"backend", 1, 0, 'k'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:b:e:c:s:k:", lo, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case 'n':
            if (ddp_parse_i64(optarg, 1, 64, &v) != 0)
                bad_arg("--ranks", "not an integer in [1, 64]:", optarg);
            o.ranks = (int)v;
            break;
        case 'b': o.min_bytes = size_arg("--min-bytes", optarg); break;
        case 'e': o.max_bytes = size_arg("--max-bytes", optarg); break;
        case 'c': o.chunk = size_arg("--chunk", optarg); break;
        case 'k':
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "nccl") != 0) {
                fprintf(stderr, "bench_allreduce: --backend: '%s' is not cpu or nccl\n", optarg);
                return 2;
            }
            o.backend = optarg[0] == 'c' ? DDPW_BACKEND_CPU : DDPW_BACKEND_NCCL;
            break;
        case 's': {
            double x;
            if (ddp_parse_seconds(optarg, &x) != 0)
                bad_arg("--seconds", "not a non-negative number:", optarg);
            o.seconds = x > 0 ? x : 3.0; /* 0: the default */
            break;
        }
        default:
            fprintf(stderr, "usage: bench_allreduce [--ranks N] [--min-bytes B] "
                            "[--max-bytes B] [--chunk B] [--seconds S] [--backend cpu|nccl]\n");
            return 2;
        }
    }
    if (getenv("RANK") != NULL)
        return run_rank(&o);

    /* Self-launch: a store in a thread, then N ranks as children. */
    rdzv_server_opts_t so;
    memset(&so, 0, sizeof so);
    so.host = "127.0.0.1";
    so.no_auth = 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    rdzv_server_thread_t *store;
    if (rdzv_server_thread_start(&so, &store, &e) != 0) {
        fprintf(stderr, "bench_allreduce: store: %s\n", e.text);
        return 1;
    }
    char port[16], world[16], run[64];
    snprintf(port, sizeof port, "%u", rdzv_server_thread_port(store));
    snprintf(world, sizeof world, "%d", o.ranks);
    snprintf(run, sizeof run, "bench-%d", (int)getpid());
    pid_t pids[64];
    for (int r = 0; r < o.ranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char rs[16];
            snprintf(rs, sizeof rs, "%d", r);
            setenv("RANK", rs, 1);
            setenv("LOCAL_RANK", rs, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv("LOCAL_WORLD_SIZE", world, 1);
            setenv("DDPRUN_STORE_ADDR", "127.0.0.1", 1);
            setenv("DDPRUN_STORE_PORT", port, 1);
            setenv("DDPRUN_RUN_ID", run, 1);
            alarm(600);
            _exit(run_rank(&o));
        }
    }
    int failed = 0;
    for (int r = 0; r < o.ranks; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    rdzv_server_thread_stop(store);
    return failed ? 1 : 0;
}
