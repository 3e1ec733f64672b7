/* SPDX-License-Identifier: Apache-2.0
 * nccl_direct: a program that calls NCCL itself, as PyTorch does, for the NCCL profiler plugin's
 * GPU check (worker_template/gpu_check.sh). Under ddprun, one rank per GPU: rank 0 makes the NCCL
 * id and hands it over through the job's store (libddpw's CPU backend, used for nothing else);
 * then --iters allreduces of --count floats, each after --gap-ms of host sleep standing for a
 * step's compute (--slow-ms more on --slow-rank: a straggler), and ncclCommDestroy. Its NCCL
 * communicator is unnamed: the plugin times it. Exit 0, or 1 with one line naming the call. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

#include "ddp_parse.h"
#include "ddpw.h"

#define ID_KEY "nccl_direct/id"

static int die(const char *what, const char *why) {
    fprintf(stderr, "nccl_direct: unable to %s: %s\n", what, why);
    return 1;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The job's NCCL id: made by rank 0 and shared through the store (a world of one needs none). */
static int share_id(const ddpw_env_t *env, ddpw_t **w, ncclUniqueId *id) {
    ddp_err_t err = {0};
    if (env->rank == 0 && ncclGetUniqueId(id) != ncclSuccess)
        return die("make the NCCL id", ncclGetLastError(NULL));
    if (env->world_size == 1)
        return 0;
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    if (ddpw_init(w, &o, &err) != 0)
        return die("reach the job's store", err.text);
    size_t len = 0;
    int rc = env->rank == 0 ? ddpw_store_set(*w, ID_KEY, id, sizeof *id, &err)
                            : ddpw_store_get(*w, ID_KEY, id, sizeof *id, &len, -1, &err);
    return rc != 0 ? die("share the NCCL id", err.text) : 0;
}

int main(int argc, char **argv) {
    long iters = 200, gap_ms = 2, slow_ms = 0, slow_rank = -1, count = 1 << 20;
    static const struct option longopts[] = {
        {"iters", required_argument, NULL, 'i'},   {"gap-ms", required_argument, NULL, 'g'},
        {"slow-ms", required_argument, NULL, 's'}, {"slow-rank", required_argument, NULL, 'r'},
        {"count", required_argument, NULL, 'c'},   {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        long *dst = c == 'i'   ? &iters
                    : c == 'g' ? &gap_ms
                    : c == 's' ? &slow_ms
                    : c == 'r' ? &slow_rank
                    : c == 'c' ? &count
                               : NULL;
        int64_t v;
        if (dst == NULL)
            return 2; /* getopt named the option */
        if (ddp_parse_i64(optarg, 0, 1L << 30, &v) != 0) {
            fprintf(stderr, "nccl_direct: bad option %s (a number from 0 is expected)\n",
                    argv[optind - 1]);
            return 2;
        }
        *dst = (long)v;
    }
    ddpw_env_t env;
    ddp_err_t err = {0};
    if (ddpw_env_read(&env, &err) != 0)
        return die("read the environment", err.text);
    cudaError_t ce = cudaSetDevice(env.local_rank);
    if (ce != cudaSuccess)
        return die("select the rank's device", cudaGetErrorString(ce));
    ddpw_t *w = NULL;
    ncclUniqueId id;
    if (share_id(&env, &w, &id) != 0)
        return 1;
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, env.world_size, id, env.rank) != ncclSuccess)
        return die("ncclCommInitRank", ncclGetLastError(NULL));
    float *buf;
    cudaStream_t s;
    if (cudaMalloc((void **)&buf, (size_t)count * sizeof *buf) != cudaSuccess ||
        cudaMemset(buf, 0, (size_t)count * sizeof *buf) != cudaSuccess ||
        cudaStreamCreate(&s) != cudaSuccess)
        return die("set up the device buffer", cudaGetErrorString(cudaGetLastError()));
    for (long i = 0; i < iters; i++) {
        sleep_ms(gap_ms + (env.rank == slow_rank ? slow_ms : 0));
        if (ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, comm, s) != ncclSuccess)
            return die("ncclAllReduce", ncclGetLastError(NULL));
        if ((ce = cudaStreamSynchronize(s)) != cudaSuccess)
            return die("finish the allreduce", cudaGetErrorString(ce));
    }
    ncclCommDestroy(comm);
    cudaFree(buf);
    ddpw_free(w);
    printf("nccl_direct: rank %d of %d: %ld allreduces\n", env.rank, env.world_size, iters);
    return 0;
}
