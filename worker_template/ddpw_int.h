/* ddpw internals shared by ddpw.c and the backends (ddpw_shm.c, ddpw_nccl.c). Not installed. */
#ifndef DDPW_INT_H
#define DDPW_INT_H

#include "ddpw.h"
#include "rdzv_client.h"

#define DDPW_DEFAULT_TIMEOUT_MS 300000
#define DDPW_DEFAULT_CONNECT_MS 30000
#define DDPW_DEFAULT_CHUNK (256u << 10) /* per rank: cache-resident chunks measured fastest */
#define DDPW_KEY_MAX 512

typedef struct ddpw_shm ddpw_shm_t;
typedef struct ddpw_nccl ddpw_nccl_t;
typedef struct ddpw_tcp ddpw_tcp_t;

struct ddpw {
    ddpw_env_t env;
    ddpw_backend_t backend;
    int timeout_ms;
    size_t chunk_bytes;
    rdzv_client_t *store; /* NULL in a world of one */
    uint64_t seq;         /* store barrier sequence */
    ddpw_shm_t *shm;      /* CPU backend, world > 1 */
    ddpw_nccl_t *nccl;    /* NCCL backend */
    ddpw_tcp_t *tcp;      /* CPU backend across nodes: the leaders' ring (leaders only) */
    int multi_node;       /* CPU backend with LOCAL_WORLD_SIZE < WORLD_SIZE */
};

/* Formats "ddpw/<run_id>/<round>/<key>" into out (DDPW_KEY_MAX bytes). */
void ddpw__key(const ddpw_t *w, const char *key, char *out);

/* CPU backend over POSIX shared memory (ddpw_shm.c). setup creates (local rank 0) or opens the
 * segment, exchanging its name through the store, and sets w->shm (owned by w); free unmaps it.
 * The collectives return 0, DDP_ETIMEOUT (peers late past w->timeout_ms) or DDP_ECLOSED (a local
 * peer exited), with err naming the rank. */
int ddpw__shm_setup(ddpw_t *w, ddp_err_t *err);
void ddpw__shm_free(ddpw_shm_t *s);
int ddpw__shm_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err);
int ddpw__shm_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err);
int ddpw__shm_barrier(ddpw_t *w, ddp_err_t *err);

/* CPU backend across nodes (ddpw_tcp.c): a TCP ring between node leaders on top of the shared
 * memory of each node. setup validates the shape (equal ranks per node, contiguous ranks). */
int ddpw__tcp_setup(ddpw_t *w, ddp_err_t *err);
void ddpw__tcp_free(ddpw_tcp_t *t);
int ddpw__tcp_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err);
int ddpw__tcp_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err);
int ddpw__tcp_barrier(ddpw_t *w, ddp_err_t *err);

/* NCCL backend (ddpw_nccl.c; stubs returning DDP_ENOGPU without DDP_HAVE_CUDA).
 * cuda_device_count: visible CUDA devices, 0 without a driver or device (never fails).
 * nccl_setup: id exchange + non-blocking communicator init with a deadline (abort on failure).
 * nccl_allreduce: enqueue on stream (NULL: the backend's own), wait for completion when wait. */
int ddpw__cuda_device_count(void);
int ddpw__nccl_setup(ddpw_t *w, ddp_err_t *err);
void ddpw__nccl_free(ddpw_nccl_t *n);
int ddpw__nccl_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, void *stream, int wait,
                         ddp_err_t *err);
int ddpw__nccl_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err);
/* Waits for stream with the handle's deadline, polling the communicator (abort on failure). */
int ddpw__nccl_stream_wait(ddpw_t *w, void *stream, ddp_err_t *err);

/* Exchanges a 128-byte NCCL unique id through the store: rank 0 creates it (ncclGetUniqueId,
 * works without a GPU) and SETs "<prefix>/nccl/id"; the others GET it within timeout_ms.
 * id must hold 128 bytes. Exposed for the unit tests. */
int ddpw__nccl_id_exchange(ddpw_t *w, unsigned char *id, ddp_err_t *err);

#endif
