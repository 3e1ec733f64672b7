/* SPDX-License-Identifier: Apache-2.0
 * ddpw internals: the context every backend sees, the store services (ddpw_store.c) and the
 * backend operations table. ddpw.c is the only dispatcher: it picks the backends, composes them
 * (shared memory within a node, the TCP ring between node leaders) and calls them through their
 * tables; a backend calls only the store services, never another backend or ddpw.c. Not
 * installed. */
#ifndef DDPW_INT_H
#define DDPW_INT_H

#include "ddpw.h"
#include "ddpw_keys.h"
#include "rdzv_client.h"

#define DDPW_DEFAULT_TIMEOUT_MS 300000
#define DDPW_DEFAULT_CONNECT_MS 30000
#define DDPW_DEFAULT_CHUNK (256u << 10) /* per rank: cache-resident chunks measured fastest */
#define DDPW_VOTE_MAX 512               /* a vote's text in the store */

/* What a backend may read of its handle: the ranks, the bounds and the store connection. It
 * lives in the ddpw_t and outlives every backend state. */
typedef struct ddpw_ctx {
    ddpw_env_t env;
    int timeout_ms;       /* bound on one collective or store wait */
    size_t chunk_bytes;   /* CPU backend: per-rank shared-memory slot */
    rdzv_client_t *store; /* NULL in a world of one */
} ddpw_ctx_t;

/* One backend, as a table of operations (the shape of nccl-tests' per-collective struct).
 * init sets *state (owned by the caller, released with fini; it may stay NULL when this rank
 * has no part in the backend, such as a node's non-leader in the TCP ring). The collectives work
 * on that state and return 0 or a negative code with err naming the rank or peer.
 *   allreduce: in place, count float32 values; stream (cudaStream_t as void *, NULL for the
 *              backend's own) and wait (1: return when the result is there) matter to NCCL only.
 *   broadcast: in place, len bytes from global rank root.
 *   barrier:   NULL when the backend has none (the dispatcher then uses the store).
 *   stream_wait: NULL when nothing is ever enqueued asynchronously. */
typedef struct ddpw_backend_ops {
    const char *name;
    int (*init)(const ddpw_ctx_t *ctx, void **state, ddp_err_t *err);
    void (*fini)(void *state);
    int (*allreduce)(void *state, float *buf, size_t count, ddpw_op_t op, void *stream, int wait,
                     ddp_err_t *err);
    int (*broadcast)(void *state, void *buf, size_t len, int root, ddp_err_t *err);
    int (*barrier)(void *state, ddp_err_t *err);
    int (*stream_wait)(void *state, void *stream, ddp_err_t *err);
} ddpw_backend_ops_t;

/* CPU within a node: POSIX shared memory among the node's ranks (ddpw_shm.c). Collectives return
 * 0, DDP_ETIMEOUT (peers late past the timeout) or DDP_ECLOSED (a local peer exited). */
extern const ddpw_backend_ops_t ddpw__shm_ops;

/* CPU across nodes: a TCP ring between node leaders (ddpw_tcp.c). init validates the shape (equal
 * ranks per node, contiguous ranks) on every rank and gives a state to leaders only. The ring's
 * allreduce sums the node leaders' buffers (op must be DDPW_SUM); broadcast passes the root node's
 * leader's buffer along the ring; barrier is NULL (the dispatcher reduces one value). */
extern const ddpw_backend_ops_t ddpw__tcp_ops;

/* NCCL (ddpw_nccl.c): id exchange through the store, non-blocking communicator init with a
 * deadline (abort on failure). Without DDP_HAVE_CUDA every call returns DDP_ENOGPU. */
extern const ddpw_backend_ops_t ddpw__nccl_ops;

/* The context of a handle (ddpw.c). Borrowed; valid until ddpw_free(w). For the unit tests. */
const ddpw_ctx_t *ddpw__ctx(const ddpw_t *w);

/* What one rank's device query found (ddpw__cuda_probe). */
typedef struct ddpw_cuda_probe {
    int count;       /* CUDA devices visible; -1 when the query failed */
    int driver;      /* cudaDriverGetVersion (e.g. 13000); 0 = no driver installed */
    int runtime;     /* cudaRuntimeGetVersion; 0 = built without CUDA */
    char error[160]; /* CUDA's error name when the query failed (cudaErrorInsufficientDriver) */
    char bus_id[32]; /* PCI bus id of the device asked about, when it exists */
} ddpw_cuda_probe_t;

/* Counts the visible CUDA devices and reads the PCI bus id of device (when it exists), keeping
 * CUDA's error and the driver and runtime versions when the count fails (ddpw_nccl.c; never
 * crashes without a driver or device). */
void ddpw__cuda_probe(int device, ddpw_cuda_probe_t *p);

/* One rank's say in the job's backend: what it asked for and whether NCCL can run on it. */
typedef struct ddpw_vote {
    ddpw_backend_t asked;
    int group_rank;
    int can_nccl;    /* device LOCAL_RANK exists for this rank */
    int cuda_failed; /* a driver is installed, and the device query failed */
    char host[64];
    char device[32]; /* its PCI bus id, when can_nccl */
    char why[240];   /* why not, when !can_nccl (one phrase) */
} ddpw_vote_t;

/* Fills this rank's vote: probes CUDA unless asked is CPU. */
void ddpw__vote_make(const ddpw_env_t *env, ddpw_backend_t asked, ddpw_vote_t *v);

/* The job's backend from every rank's vote (votes[r] is rank r's; n ranks). The ranks must ask
 * for the same backend; NCCL needs every rank to have a device of its own (none shared by two
 * ranks of one node); AUTO takes NCCL then, else CPU for every rank, with *note (cap bytes; ""
 * when there is nothing to say) naming the rank that kept NCCL out when some rank could have
 * used it or a device query failed. Returns 0 with *out set, or DDP_ENOGPU / DDP_EUSAGE with err
 * naming the rank and node that differ. */
int ddpw__backend_decide(const ddpw_vote_t *votes, int n, ddpw_backend_t *out, char *note,
                         size_t cap, ddp_err_t *err);

/* A vote as one line of text for the store, and back (0, or DDP_EPROTO naming the rank). */
int ddpw__vote_encode(const ddpw_vote_t *v, char *out, size_t cap);
int ddpw__vote_decode(const char *s, int rank, ddpw_vote_t *v, ddp_err_t *err);

/* Exchanges a 128-byte NCCL unique id through the store: rank 0 creates it (ncclGetUniqueId,
 * works without a GPU) and SETs DDPW_KEY_NCCL_ID; the others GET it within the timeout.
 * id must hold 128 bytes. Exposed for the unit tests. */
int ddpw__nccl_id_exchange(const ddpw_ctx_t *ctx, unsigned char *id, ddp_err_t *err);

/* Test hooks of ddpw_timing.c: the interval between writes (0: every call writes), and a fresh
 * state (totals zero, file closed, DDPRUN_TIMING_FILE read again at the next call). */
void ddpw__timing_set_interval_ns(int64_t ns);
void ddpw__timing_reset(void);

/* ---- store services (ddpw_store.c), shared by ddpw.c and the backends ---- */

/* SET / GET of key under the round prefix (ddpw__key_round). get waits up to timeout_ms (< 0: the
 * context's); out holds cap bytes and *len gets the value's length (DDP_ETOOBIG beyond cap).
 * DDP_EUSAGE without a store; -EINVAL naming the key when the whole key exceeds DDPW_KEY_MAX. */
int ddpw__store_set(const ddpw_ctx_t *c, const char *key, const void *val, size_t len,
                    ddp_err_t *err);
int ddpw__store_get(const ddpw_ctx_t *c, const char *key, void *out, size_t cap, size_t *len,
                    int timeout_ms, ddp_err_t *err);

/* Store barrier of n processes on key (under the round prefix), bounded by the context's
 * timeout. */
int ddpw__store_barrier(const ddpw_ctx_t *c, const char *key, int n, ddp_err_t *err);

/* ---- heartbeat test hooks (ddpw_heartbeat.c), for the unit tests and bench_heartbeat ---- */

/* Sets the minimum time between two writes (0: every beat writes) and lets the next beat write. */
void ddpw__heartbeat_set_interval_ns(int64_t ns);

/* Closes the file and forgets everything: the next beat reads DDPRUN_HEARTBEAT_FILE again, with
 * the default interval. */
void ddpw__heartbeat_reset(void);

#endif
