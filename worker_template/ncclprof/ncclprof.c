/* SPDX-License-Identifier: Apache-2.0
 * ncclprof.c: libnccl-profiler-ddprun.so's side facing NCCL: profiler API v5 (NCCL 2.28, and
 * later NCCL through its adapter) and v4 (NCCL 2.27), one implementation behind both.
 * NCCL loads it with NCCL_PROFILER_PLUGIN=ddprun (or its path) and calls init once per
 * communicator. Under ddprun's agent (DDPRUN_TIMING_FILE set), the first communicator that spans
 * the job's world (nranks == WORLD_SIZE: PyTorch's default process group, whose allreduces carry
 * the gradients) is timed, unless it is libddpw's own (DDP_NCCL_COMM_NAME), which the library
 * times itself. NCCL then reports, per collective or p2p operation, an event at enqueue and one
 * kernel channel event per channel with the GPU's own timestamps (globaltimer, ns), from its
 * proxy thread. An operation is complete when all its channels have ended; its interval (first
 * channel start to last channel end) goes to ncclprof_acct.c, which publishes compute and wait
 * through ddpw_timing_add. Without the agent's variables no communicator gets a context and the
 * activation mask stays 0: NCCL generates no event and the plugin costs nothing. */
#include "ncclprof_int.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_contract.h"
#include "ddpw.h"

/* Operations between their start (at enqueue) and their completion on the GPU. NCCL may enqueue
 * far ahead of the GPU (CUDA queues about a thousand launches), so the ring holds four times
 * that; a slot still open when its turn comes again is retired with what it has. */
#define OPS_RING 4096

/* The events NCCL is asked for. Kernel channel events carry the GPU timestamps; collective and
 * p2p events are their parents (NCCL starts them whenever channel events are on). */
#define ACTIVE_MASK (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh)

enum { OP_FREE = 0, OP_OPEN = 1 };

typedef struct ncclprof_ctx ncclprof_ctx_t;

/* One collective or p2p operation. A kernel channel event's handle is the operation's address
 * with the low bit set (operations are 8-byte aligned), so the plugin needs no memory per
 * channel and tells the two kinds of handle apart in stopEvent. */
typedef struct op {
    ncclprof_ctx_t *ctx;
    uint64_t start_ns, end_ns; /* GPU time: earliest channel start, latest channel end */
    uint16_t expected;         /* channels NCCL put it on (at least 1) */
    uint16_t started, stopped; /* channel events seen */
    uint8_t state;             /* OP_* */
} op_t;

struct ncclprof_ctx {
    pthread_mutex_t mu; /* the host thread and NCCL's proxy thread both report */
    ncclprof_acct_t acct;
    op_t *ring; /* OPS_RING operations */
    uint64_t next;
    int rank, nranks;
    ncclDebugLogger_t logfn;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ncclprof_ctx_t *g_accounted; /* under g_mu: the communicator being accounted, if any */
static ncclprof_publish_fn g_publish;
static uint64_t g_interval_ns = NCCLPROF_PUBLISH_INTERVAL_NS;

void ncclprof__set_publish(ncclprof_publish_fn publish, uint64_t interval_ns) {
    pthread_mutex_lock(&g_mu);
    g_publish = publish;
    g_interval_ns = interval_ns;
    pthread_mutex_unlock(&g_mu);
}

/* The job's world size from the agent's environment, or -1 outside ddprun (no timing file: the
 * agent does not read this worker's) or when WORLD_SIZE is not a positive number. */
static int agent_world_size(void) {
    const char *file = getenv(DDP_ENV_TIMING_FILE), *ws = getenv(DDP_ENV_WORLD_SIZE);
    if (file == NULL || *file == '\0' || ws == NULL || *ws == '\0')
        return -1;
    char *end;
    long v = strtol(ws, &end, 10);
    return *end == '\0' && v > 0 && v <= INT_MAX ? (int)v : -1;
}

/* Hands a complete (or retired) operation to the accounting and frees its slot. Under ctx->mu. */
static void op_finish(ncclprof_ctx_t *ctx, op_t *op) {
    if (op->stopped > 0)
        ncclprof__acct_op(&ctx->acct, op->start_ns, op->end_ns);
    op->state = OP_FREE;
}

/* Under ctx->mu: finishes op once each of its channels has ended on the GPU. Its own event's
 * stop says only that NCCL has enqueued it (the proxy may report channels before or after). */
static void op_maybe_finish(ncclprof_ctx_t *ctx, op_t *op) {
    if (op->stopped >= op->expected && op->stopped == op->started)
        op_finish(ctx, op);
}

/* A context for one communicator (rank of nranks): caller owns; free with ctx_free. NULL when
 * memory is short (the communicator then goes untimed). */
static ncclprof_ctx_t *ctx_new(int rank, int nranks, ncclDebugLogger_t logfn) {
    ncclprof_ctx_t *ctx = calloc(1, sizeof *ctx);
    op_t *ring = calloc(OPS_RING, sizeof *ring);
    if (ctx == NULL || ring == NULL) {
        free(ctx);
        free(ring);
        return NULL;
    }
    pthread_mutex_init(&ctx->mu, NULL);
    ctx->ring = ring;
    ctx->rank = rank;
    ctx->nranks = nranks;
    ctx->logfn = logfn;
    ncclprof__acct_init(&ctx->acct, g_interval_ns, g_publish ? g_publish : ddpw_timing_add);
    return ctx;
}

static void ctx_free(ncclprof_ctx_t *ctx) {
    pthread_mutex_destroy(&ctx->mu);
    free(ctx->ring);
    free(ctx);
}

static ncclResult_t prof_init(void **context, uint64_t comm_id, int *mask, const char *comm_name,
                              int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
    (void)comm_id;
    (void)nnodes;
    *context = NULL;
    int world = agent_world_size();
    pthread_mutex_lock(&g_mu);
    ncclprof_ctx_t *ctx = NULL;
    /* libddpw's own communicator is timed by the library (CUDA events around its collectives):
     * counting it here too would publish every collective twice. */
    int ours = comm_name != NULL && strcmp(comm_name, DDP_NCCL_COMM_NAME) == 0;
    if (world > 0 && nranks == world && !ours && g_accounted == NULL)
        ctx = g_accounted = ctx_new(rank, nranks, logfn);
    /* The mask is NCCL's, one for every communicator of the process: it stays on while one is
     * accounted, and the events of the others find no context and cost a return. */
    *mask = g_accounted != NULL ? ACTIVE_MASK : 0;
    pthread_mutex_unlock(&g_mu);
    *context = ctx;
    if (ctx != NULL && logfn != NULL)
        logfn(NCCL_LOG_INFO, NCCL_PROFILER_LOG_INIT, __FILE__, __LINE__,
              "ddprun profiler: rank %d of %d: timing communicator %s for the agent", rank, nranks,
              comm_name != NULL ? comm_name : "(unnamed)");
    return ncclSuccess;
}

/* The operation a kernel channel event names as its parent, when it is one of ctx's slots. */
static op_t *parent_op(ncclprof_ctx_t *ctx, void *parent) {
    uintptr_t p = (uintptr_t)parent, lo = (uintptr_t)ctx->ring;
    if (parent == NULL || p < lo || p >= lo + OPS_RING * sizeof(op_t) ||
        (p - lo) % sizeof(op_t) != 0)
        return NULL;
    return (op_t *)parent;
}

/* The handle of every group event. NCCL 2.27 starts a plan's collective events only under a
 * group event with a handle; the plugin keeps nothing for groups. */
static char g_group;

static ncclResult_t prof_start_event(void *context, void **handle, ncclProfilerEventDescr_v5_t *d) {
    ncclprof_ctx_t *ctx = context;
    *handle = NULL;
    if (ctx == NULL || d == NULL)
        return ncclSuccess;
    if (d->type == ncclProfileGroup) {
        *handle = &g_group;
    } else if (d->type == ncclProfileColl || d->type == ncclProfileP2p) {
        uint8_t nch = d->type == ncclProfileColl ? d->coll.nChannels : d->p2p.nChannels;
        pthread_mutex_lock(&ctx->mu);
        op_t *op = &ctx->ring[ctx->next++ % OPS_RING];
        if (op->state == OP_OPEN)
            op_finish(ctx, op);
        *op = (op_t){.ctx = ctx, .expected = nch > 0 ? nch : 1, .state = OP_OPEN};
        pthread_mutex_unlock(&ctx->mu);
        *handle = op;
    } else if (d->type == ncclProfileKernelCh) {
        op_t *op = parent_op(ctx, d->parentObj);
        if (op == NULL)
            return ncclSuccess;
        pthread_mutex_lock(&ctx->mu);
        if (op->state == OP_OPEN) {
            uint64_t t = d->kernelCh.pTimer;
            if (op->started++ == 0 || t < op->start_ns)
                op->start_ns = t;
            *handle = (void *)((uintptr_t)op | 1);
        }
        pthread_mutex_unlock(&ctx->mu);
    }
    return ncclSuccess;
}

static ncclResult_t prof_stop_event(void *handle) {
    if (handle == NULL || handle == &g_group)
        return ncclSuccess;
    if (((uintptr_t)handle & 1) == 0)
        return ncclSuccess; /* a collective or p2p event: enqueued, nothing to count yet */
    op_t *op = (op_t *)((uintptr_t)handle & ~(uintptr_t)1);
    ncclprof_ctx_t *ctx = op->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (op->state == OP_OPEN) {
        op->stopped++;
        op_maybe_finish(ctx, op);
    }
    pthread_mutex_unlock(&ctx->mu);
    return ncclSuccess;
}

static ncclResult_t prof_record_event_state(void *handle, ncclProfilerEventState_v5_t state,
                                            ncclProfilerEventStateArgs_v5_t *args) {
    if (handle == NULL || ((uintptr_t)handle & 1) == 0 || state != ncclProfilerKernelChStop ||
        args == NULL)
        return ncclSuccess;
    op_t *op = (op_t *)((uintptr_t)handle & ~(uintptr_t)1);
    pthread_mutex_lock(&op->ctx->mu);
    if (op->state == OP_OPEN && args->kernelCh.pTimer > op->end_ns)
        op->end_ns = args->kernelCh.pTimer;
    pthread_mutex_unlock(&op->ctx->mu);
    return ncclSuccess;
}

static ncclResult_t prof_finalize(void *context) {
    ncclprof_ctx_t *ctx = context;
    if (ctx == NULL)
        return ncclSuccess;
    pthread_mutex_lock(&ctx->mu);
    /* NCCL has stopped the communicator's proxy: no channel event is coming. What is still open
     * goes in with what it has, oldest first. */
    uint64_t first = ctx->next > OPS_RING ? ctx->next - OPS_RING : 0;
    for (uint64_t s = first; s < ctx->next; s++)
        if (ctx->ring[s % OPS_RING].state == OP_OPEN)
            op_finish(ctx, &ctx->ring[s % OPS_RING]);
    ncclprof__acct_flush(&ctx->acct);
    if (ctx->acct.publish == ddpw_timing_add)
        ddpw_timing_flush(); /* the file shows the communicator's last totals */
    if (ctx->logfn != NULL)
        ctx->logfn(NCCL_LOG_INFO, NCCL_PROFILER_LOG_INIT, __FILE__, __LINE__,
                   "ddprun profiler: rank %d of %d: %llu operations, compute %.3f s, wait %.3f s",
                   ctx->rank, ctx->nranks, (unsigned long long)ctx->acct.total_steps,
                   (double)ctx->acct.total_compute_ns / 1e9, (double)ctx->acct.total_wait_ns / 1e9);
    pthread_mutex_unlock(&ctx->mu);
    pthread_mutex_lock(&g_mu);
    if (g_accounted == ctx)
        g_accounted = NULL;
    pthread_mutex_unlock(&g_mu);
    ctx_free(ctx);
    return ncclSuccess;
}

/* Version 4 (NCCL 2.27): init's arguments reordered, and the events this plugin reads copied
 * into version 5's descriptor. */
static ncclResult_t v4_init(void **context, int *mask, const char *comm_name, uint64_t comm_hash,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
    return prof_init(context, comm_hash, mask, comm_name, nnodes, nranks, rank, logfn);
}

static ncclResult_t v4_start_event(void *context, void **handle, ncclProfilerEventDescr_v4_t *d4) {
    *handle = NULL;
    if (d4 == NULL)
        return ncclSuccess;
    ncclProfilerEventDescr_v5_t d = {
        .type = d4->type, .parentObj = d4->parentObj, .rank = d4->rank};
    if (d4->type == ncclProfileColl) {
        d.coll.nChannels = d4->coll.nChannels;
    } else if (d4->type == ncclProfileP2p) {
        d.p2p.nChannels = d4->p2p.nChannels;
    } else if (d4->type == ncclProfileKernelCh) {
        d.kernelCh.channelId = d4->kernelCh.channelId;
        d.kernelCh.pTimer = d4->kernelCh.pTimer;
    }
    return prof_start_event(context, handle, &d);
}

ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "ddprun",
    .init = v4_init,
    .startEvent = v4_start_event,
    .stopEvent = prof_stop_event,
    .recordEventState = prof_record_event_state,
    .finalize = prof_finalize,
};

ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "ddprun",
    .init = prof_init,
    .startEvent = prof_start_event,
    .stopEvent = prof_stop_event,
    .recordEventState = prof_record_event_state,
    .finalize = prof_finalize,
};
