/* SPDX-License-Identifier: Apache-2.0
 * ddpw_nccl.c: the NCCL backend. Rank 0 creates the unique id and publishes it under the round
 * prefix; every rank creates its communicator non-blocking and polls it against a deadline,
 * aborting it on timeout or error (a blocking init cannot be aborted: NVIDIA/nccl issue 289).
 * Without DDP_HAVE_CUDA the calls are stubs that report DDP_ENOGPU, so the CPU build links. */
#include "ddpw_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp_contract.h"
#include "ddp_time.h"

#ifdef DDP_HAVE_CUDA
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

/* The allreduces in flight whose CUDA events are kept for timing. One slot more than may be
 * pending stays resolved: the previous collective's end event, from which compute is measured. */
#define NCCL_TIMING_SLOTS 8

typedef struct ddpw_nccl {
    const ddpw_ctx_t *ctx;
    ncclComm_t comm;
    cudaStream_t stream; /* for the blocking calls */
    /* Each allreduce is bracketed by two events on its stream: start, end. wait is the time
     * between them (inside NCCL, waiting for the slowest peer included); compute is the GPU time
     * from the previous allreduce's end to this one's start. Slots head..tail-1 are pending,
     * resolved in order without blocking (ddpw_timing_add); prev is the last resolved slot. */
    cudaEvent_t ev_start[NCCL_TIMING_SLOTS], ev_end[NCCL_TIMING_SLOTS];
    int timing;          /* the events exist */
    unsigned head, tail; /* free-running counters */
    int have_prev;       /* prev holds an end event of timed_stream's sequence */
    unsigned prev;
    cudaStream_t timed_stream; /* the stream of the last timed allreduce */
} ddpw_nccl_t;

void ddpw__cuda_probe(int device, ddpw_cuda_probe_t *p) {
    memset(p, 0, sizeof *p);
    /* Both versions read without a device; the driver's is 0 when none is installed. */
    (void)cudaDriverGetVersion(&p->driver);
    (void)cudaRuntimeGetVersion(&p->runtime);
    int n = 0;
    /* Without a driver or device this returns an error, never crashes. An old driver returns
     * cudaErrorInsufficientDriver: that is kept, not taken for "no GPU". */
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        p->count = -1;
        snprintf(p->error, sizeof p->error, "%s", cudaGetErrorName(ce));
        return;
    }
    p->count = n;
    if (device >= 0 && device < n &&
        cudaDeviceGetPCIBusId(p->bus_id, (int)sizeof p->bus_id, device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(p->bus_id, sizeof p->bus_id, "device %d", device);
    }
}

int ddpw__nccl_id_exchange(const ddpw_ctx_t *w, unsigned char *id, ddp_err_t *err) {
    ncclUniqueId uid;
    _Static_assert(sizeof uid == 128, "ncclUniqueId is 128 bytes");
    if (w->env.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&uid);
        if (r != ncclSuccess)
            return ddp_err_set(err, DDP_ENCCL, "ncclGetUniqueId: %s (%s)", ncclGetErrorString(r),
                               ncclGetLastError(NULL));
        memcpy(id, &uid, sizeof uid);
        if (w->env.world_size == 1)
            return 0;
        return ddpw__store_set(w, DDPW_KEY_NCCL_ID, id, sizeof uid, err);
    }
    size_t len = 0;
    int rc = ddpw__store_get(w, DDPW_KEY_NCCL_ID, id, sizeof uid, &len, -1, err);
    if (rc == 0 && len != sizeof uid)
        rc = ddp_err_set(err, DDP_EPROTO,
                         "store key " DDPW_KEY_NCCL_ID " of round %lld holds %zu bytes, not 128",
                         (long long)w->env.round, len);
    return rc;
}

/* Polls comm until it leaves ncclInProgress or the deadline passes; aborts on failure. */
static int wait_comm(const ddpw_ctx_t *w, ncclComm_t comm, const char *what, ddp_err_t *err) {
    uint64_t deadline = ddp_now_ms() + (uint64_t)w->timeout_ms;
    ncclResult_t st = ncclInProgress;
    for (;;) {
        ncclResult_t r = ncclCommGetAsyncError(comm, &st);
        if (r != ncclSuccess)
            st = r;
        if (st != ncclInProgress)
            break;
        if (ddp_now_ms() >= deadline) {
            ncclCommAbort(comm);
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "%s: NCCL did not finish within %d ms (a peer may have died); "
                               "communicator aborted",
                               what, w->timeout_ms);
        }
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    if (st != ncclSuccess) {
        int rc = ddp_err_set(err, DDP_ENCCL, "%s: %s (%s)", what, ncclGetErrorString(st),
                             ncclGetLastError(comm));
        ncclCommAbort(comm);
        return rc;
    }
    return 0;
}

static void nccl_fini(void *state);

/* Creates the timing events; without them (an error) the collectives run untimed. */
static void timing_init(ddpw_nccl_t *n) {
    int i;
    for (i = 0; i < NCCL_TIMING_SLOTS; i++) {
        if (cudaEventCreate(&n->ev_start[i]) != cudaSuccess)
            break;
        if (cudaEventCreate(&n->ev_end[i]) != cudaSuccess) {
            cudaEventDestroy(n->ev_start[i]);
            break;
        }
    }
    if (i == NCCL_TIMING_SLOTS) {
        n->timing = 1;
        return;
    }
    (void)cudaGetLastError();
    while (i-- > 0) {
        cudaEventDestroy(n->ev_start[i]);
        cudaEventDestroy(n->ev_end[i]);
    }
}

static void timing_fini(ddpw_nccl_t *n) {
    if (!n->timing)
        return;
    for (int i = 0; i < NCCL_TIMING_SLOTS; i++) {
        cudaEventDestroy(n->ev_start[i]);
        cudaEventDestroy(n->ev_end[i]);
    }
    n->timing = 0;
}

/* Resolves the pending allreduces whose end event has completed, oldest first, and tells
 * ddpw_timing_add; never blocks. A slot whose events cannot be read is skipped and the next one
 * gets no compute (its previous end is unknown). */
static void timing_resolve(ddpw_nccl_t *n) {
    while (n->timing && n->head != n->tail) {
        unsigned slot = n->head % NCCL_TIMING_SLOTS;
        cudaError_t q = cudaEventQuery(n->ev_end[slot]);
        if (q == cudaErrorNotReady)
            return;
        float wait_ms = 0, compute_ms = 0;
        int ok = q == cudaSuccess &&
                 cudaEventElapsedTime(&wait_ms, n->ev_start[slot], n->ev_end[slot]) == cudaSuccess;
        if (ok && n->have_prev &&
            cudaEventElapsedTime(&compute_ms, n->ev_end[n->prev], n->ev_start[slot]) != cudaSuccess)
            compute_ms = 0;
        if (!ok)
            (void)cudaGetLastError();
        n->head++;
        n->prev = slot;
        n->have_prev = ok;
        if (ok)
            ddpw_timing_add(compute_ms > 0 ? (uint64_t)((double)compute_ms * 1e6) : 0,
                            wait_ms > 0 ? (uint64_t)((double)wait_ms * 1e6) : 0, 1);
    }
}

/* The slot for the next allreduce on stream st, or -1 to run it untimed: when every slot is
 * pending (an asynchronous caller far ahead of the GPU) the oldest is dropped rather than waited
 * for, and a stream other than the last one's has no previous end on its timeline. */
static int timing_slot(ddpw_nccl_t *n) {
    if (!n->timing)
        return -1;
    timing_resolve(n);
    if (n->tail - n->head >= NCCL_TIMING_SLOTS - 1) {
        n->head++;
        n->have_prev = 0;
    }
    return (int)(n->tail % NCCL_TIMING_SLOTS);
}

static int nccl_init(const ddpw_ctx_t *w, void **state, ddp_err_t *err) {
    *state = NULL;
    int dev = w->env.local_rank;
    cudaError_t ce = cudaSetDevice(dev);
    if (ce != cudaSuccess)
        return ddp_err_set(err, DDP_ENOGPU, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(ce));
    unsigned char id[128];
    int rc = ddpw__nccl_id_exchange(w, id, err);
    if (rc != 0)
        return rc;
    ddpw_nccl_t *n = calloc(1, sizeof *n);
    if (n == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    n->ctx = w;
    ce = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        free(n);
        return ddp_err_set(err, DDP_ECUDA, "cudaStreamCreate on device %d: %s", dev,
                           cudaGetErrorString(ce));
    }
    timing_init(n);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = DDP_NCCL_COMM_NAME;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, w->env.world_size, uid, w->env.rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        rc = ddp_err_set(err, DDP_ENCCL,
                         "ncclCommInitRankConfig (rank %d of %d, device %d): %s (%s)", w->env.rank,
                         w->env.world_size, dev, ncclGetErrorString(r), ncclGetLastError(NULL));
        if (n->comm != NULL)
            ncclCommAbort(n->comm);
        goto fail;
    }
    if ((rc = wait_comm(w, n->comm, "ncclCommInitRankConfig", err)) != 0)
        goto fail;
    *state = n;
    return 0;
fail:
    timing_fini(n);
    cudaStreamDestroy(n->stream);
    free(n);
    return rc;
}

static void nccl_fini(void *state) {
    ddpw_nccl_t *n = state;
    if (n == NULL)
        return;
    timing_resolve(n); /* what has finished is told; nothing is waited for */
    if (n->comm != NULL) {
        ncclResult_t st = ncclSuccess;
        /* A failing query is a broken communicator too. */
        ncclResult_t q = ncclCommGetAsyncError(n->comm, &st);
        /* A healthy communicator is finalized (non-blocking: poll it, bounded), then destroyed;
         * one that is busy, broken or slow to finalize is aborted. */
        int clean = q == ncclSuccess && st == ncclSuccess;
        if (clean) {
            st = ncclCommFinalize(n->comm);
            uint64_t deadline = ddp_now_ms() + 10000;
            while (st == ncclInProgress) {
                if (ncclCommGetAsyncError(n->comm, &st) != ncclSuccess) {
                    st = ncclInternalError;
                    break;
                }
                if (st == ncclInProgress && ddp_now_ms() >= deadline)
                    break;
                struct timespec ts = {0, 1000000L};
                nanosleep(&ts, NULL);
            }
            clean = st == ncclSuccess;
        }
        if (clean)
            ncclCommDestroy(n->comm);
        else
            ncclCommAbort(n->comm);
    }
    timing_fini(n);
    cudaStreamDestroy(n->stream);
    free(n);
}

/* Aborts the communicator after a failure: later calls see it gone. */
static void abort_comm(ddpw_nccl_t *n) {
    ncclCommAbort(n->comm);
    n->comm = NULL;
}

/* A call on a non-blocking communicator may return ncclInProgress while it is still being
 * enqueued; NCCL wants no other call on the communicator until the state settles. Polls (bounded)
 * and returns 0 or a DDP_E* code, aborting the communicator on error or timeout. */
static int settle(ddpw_nccl_t *n, ncclResult_t r, const char *what, ddp_err_t *err) {
    ncclComm_t comm = n->comm;
    if (r == ncclSuccess)
        return 0;
    uint64_t deadline = ddp_now_ms() + (uint64_t)n->ctx->timeout_ms;
    while (r == ncclInProgress) {
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) {
            r = q; /* the query's own failure, not "operation in progress" */
            break;
        }
        if (r == ncclInProgress && ddp_now_ms() >= deadline) {
            abort_comm(n);
            return ddp_err_set(err, DDP_ETIMEOUT, "%s: still enqueuing after %d ms; aborted", what,
                               n->ctx->timeout_ms);
        }
        struct timespec ts = {0, 10000L};
        nanosleep(&ts, NULL);
    }
    if (r == ncclSuccess)
        return 0;
    int rc = ddp_err_set(err, DDP_ENCCL, "%s: %s (%s)", what, ncclGetErrorString(r),
                         ncclGetLastError(comm));
    abort_comm(n);
    return rc;
}

/* The wait between two looks at a stream: none for the first WAIT_SPIN_NS (a collective that
 * ends within it costs no sleep's latency), then a sleep that doubles from 1 us up to 1 ms (a
 * long wait costs no CPU). */
#define WAIT_SPIN_NS 100000L
#define WAIT_SLEEP_MAX_NS 1000000L

/* Waits for stream with the handle's deadline, checking the communicator for async errors. Any
 * failure aborts the communicator (no NCCL kernel keeps spinning, later calls see it gone). */
static int wait_stream(ddpw_nccl_t *n, cudaStream_t stream, const char *what, ddp_err_t *err) {
    uint64_t deadline = ddp_now_ms() + (uint64_t)n->ctx->timeout_ms;
    uint64_t spin_until = ddp_now_ns() + WAIT_SPIN_NS;
    long sleep_ns = 1000L;
    for (;;) {
        cudaError_t ce = cudaStreamQuery(stream);
        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady) {
            (void)cudaGetLastError();
            abort_comm(n);
            return ddp_err_set(err, DDP_ECUDA, "%s: %s; communicator aborted", what,
                               cudaGetErrorString(ce));
        }
        ncclResult_t st = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(n->comm, &st);
        if (q != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
            ncclResult_t bad = q != ncclSuccess ? q : st;
            abort_comm(n);
            return ddp_err_set(err, DDP_ENCCL, "%s: %s%s; communicator aborted", what,
                               q != ncclSuccess ? "ncclCommGetAsyncError: " : "",
                               ncclGetErrorString(bad));
        }
        if (ddp_now_ms() >= deadline) {
            abort_comm(n);
            return ddp_err_set(err, DDP_ETIMEOUT, "%s: timed out after %d ms; communicator aborted",
                               what, n->ctx->timeout_ms);
        }
        if (ddp_now_ns() < spin_until)
            continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < WAIT_SLEEP_MAX_NS)
            sleep_ns *= 2;
    }
}

static int nccl_allreduce(void *state, float *buf, size_t count, ddpw_op_t op, void *stream,
                          int wait, ddp_err_t *err) {
    ddpw_nccl_t *n = state;
    if (n == NULL || n->comm == NULL)
        return ddp_err_set(err, DDP_ENCCL, "allreduce: the NCCL communicator is gone");
    cudaStream_t st = stream != NULL ? (cudaStream_t)stream : n->stream;
    /* The events are recorded on the collective's stream; a stream change breaks the timeline
     * between two allreduces, so the next one counts no compute. */
    int slot = timing_slot(n);
    if (slot >= 0 && st != n->timed_stream) {
        n->have_prev = 0;
        n->timed_stream = st;
    }
    if (slot >= 0 && cudaEventRecord(n->ev_start[slot], st) != cudaSuccess) {
        (void)cudaGetLastError();
        slot = -1;
    }
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, op == DDPW_AVG ? ncclAvg : ncclSum,
                                   n->comm, st);
    int rc = settle(n, r, "ncclAllReduce", err);
    if (rc != 0)
        return rc;
    if (slot >= 0) {
        if (cudaEventRecord(n->ev_end[slot], st) == cudaSuccess)
            n->tail++;
        else
            (void)cudaGetLastError();
    }
    if (!wait)
        return 0;
    rc = wait_stream(n, st, "ncclAllReduce", err);
    if (rc == 0)
        timing_resolve(n);
    return rc;
}

static int nccl_broadcast(void *state, void *buf, size_t len, int root, ddp_err_t *err) {
    ddpw_nccl_t *n = state;
    if (n == NULL || n->comm == NULL)
        return ddp_err_set(err, DDP_ENCCL, "broadcast: the NCCL communicator is gone");
    ncclResult_t r = ncclBroadcast(buf, buf, len, ncclUint8, root, n->comm, n->stream);
    int rc = settle(n, r, "ncclBroadcast", err);
    if (rc != 0)
        return rc;
    return wait_stream(n, n->stream, "ncclBroadcast", err);
}

static int nccl_stream_wait(void *state, void *stream, ddp_err_t *err) {
    ddpw_nccl_t *n = state;
    if (n == NULL || n->comm == NULL)
        return ddp_err_set(err, DDP_ENCCL, "stream wait: the NCCL communicator is gone");
    int rc =
        wait_stream(n, stream != NULL ? (cudaStream_t)stream : n->stream, "training step", err);
    if (rc == 0)
        timing_resolve(n);
    return rc;
}

#else /* !DDP_HAVE_CUDA */

void ddpw__cuda_probe(int device, ddpw_cuda_probe_t *p) {
    (void)device;
    memset(p, 0, sizeof *p);
    p->count = -1;
    snprintf(p->error, sizeof p->error, "this build has no CUDA support");
}

int ddpw__nccl_id_exchange(const ddpw_ctx_t *w, unsigned char *id, ddp_err_t *err) {
    (void)w;
    (void)id;
    return ddp_err_set(err, DDP_ENOGPU, "NCCL: this build has no CUDA/NCCL support");
}

static int nccl_init(const ddpw_ctx_t *w, void **state, ddp_err_t *err) {
    *state = NULL;
    return ddpw__nccl_id_exchange(w, NULL, err);
}

static void nccl_fini(void *state) {
    (void)state;
}

static int nccl_allreduce(void *state, float *buf, size_t count, ddpw_op_t op, void *stream,
                          int wait, ddp_err_t *err) {
    (void)state, (void)buf, (void)count, (void)op, (void)stream, (void)wait;
    return ddpw__nccl_id_exchange(NULL, NULL, err);
}

static int nccl_broadcast(void *state, void *buf, size_t len, int root, ddp_err_t *err) {
    (void)state, (void)buf, (void)len, (void)root;
    return ddpw__nccl_id_exchange(NULL, NULL, err);
}

static int nccl_stream_wait(void *state, void *stream, ddp_err_t *err) {
    (void)state, (void)stream;
    return ddpw__nccl_id_exchange(NULL, NULL, err);
}

#endif

const ddpw_backend_ops_t ddpw__nccl_ops = {
    .name = "nccl",
    .init = nccl_init,
    .fini = nccl_fini,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = NULL, /* the store barrier: no device work to order */
    .stream_wait = nccl_stream_wait,
};
