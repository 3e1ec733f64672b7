/* SPDX-License-Identifier: Apache-2.0
 * ddpw: the worker library. Reads the environment ddprun (or torchrun) gives a worker, connects
 * to the job's store, and runs collectives (allreduce, broadcast, barrier) on one of two backends:
 * CPU (shared memory between the ranks of one node) or NCCL (GPUs). It also writes the agent's
 * heartbeat file (ddpw_heartbeat) and PyTorch's error file (ddpw_record_error).
 *
 * Every call returns 0 or a negative code (-errno or DDP_E*, text from ddp_strerror) and, when
 * err is not NULL, one line that names the variable, key or peer. The library never logs and never
 * exits: the program decides what to print. A ddpw_t is used by one thread at a time. */
#ifndef DDPW_H
#define DDPW_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_err.h"

typedef struct ddpw ddpw_t;

typedef enum ddpw_backend {
    DDPW_BACKEND_AUTO = 0, /* NCCL when every local rank has a CUDA device, else CPU */
    DDPW_BACKEND_CPU = 1,
    DDPW_BACKEND_NCCL = 2,
} ddpw_backend_t;

typedef enum ddpw_op {
    DDPW_SUM = 0,
    DDPW_AVG = 1,
} ddpw_op_t;

typedef struct ddpw_opts {
    ddpw_backend_t backend;
    int connect_timeout_ms; /* store connect budget; <= 0 means 30000 */
    int timeout_ms;         /* bound on one collective or store wait; <= 0 means 300000
                               (DDPRUN_COLL_TIMEOUT_MS overrides the default) */
    size_t cpu_chunk_bytes; /* CPU backend: per-rank shared-memory slot; 0 = 256 KiB */
} ddpw_opts_t;

#define DDPW_OPTS_INIT                                                                             \
    { DDPW_BACKEND_AUTO, 0, 0, 0 }

/* The ranks as read from the environment (also useful without a store). */
typedef struct ddpw_env {
    int rank, local_rank, world_size, local_world_size, group_rank;
    /* This rank's place among its node's ranks: DDPRUN_LOCAL_RANK, else LOCAL_RANK. They differ
     * under --virtual_local_rank, where every worker has LOCAL_RANK=0 (its one visible device);
     * the node-local backend and the node leaders go by this one. */
    int node_local_rank;
    int64_t round;     /* DDPRUN_ROUND, else TORCHELASTIC_RESTART_COUNT, else 0 */
    int restart_count; /* TORCHELASTIC_RESTART_COUNT, 0 when absent */
    int have_store;    /* 1 when DDPRUN_STORE_ADDR is set */
    char store_host[256];
    uint16_t store_port;
    char token_hex[256]; /* DDPRUN_STORE_TOKEN; empty = no authentication */
    char run_id[128];    /* DDPRUN_RUN_ID, else TORCHELASTIC_RUN_ID, else "none" */
} ddpw_env_t;

/* Reads and validates the worker environment into *env. With no RANK and no WORLD_SIZE the world
 * is a single process (rank 0 of 1). Returns 0, or DDP_EENV with err naming the variable. */
int ddpw_env_read(ddpw_env_t *env, ddp_err_t *err);

/* Reads the environment, connects and authenticates to the store (when world_size > 1) and sets
 * up the backend chosen by opts (NULL = defaults). The backend is decided once for the job, the
 * same on every rank (ddpw_backend_note says why AUTO did not take NCCL when it matters). On
 * success *out is a new handle: caller owns; free with ddpw_free. Errors: DDP_EENV,
 * DDP_ETIMEOUT, DDP_EAUTH, DDP_ENOGPU (NCCL asked for and a rank without a device of its own:
 * the same line on every rank, naming that rank, its node and CUDA's error), DDP_ENCCL,
 * DDP_EUSAGE (ranks asking for different backends, CPU backend across nodes), -errno. */
int ddpw_init(ddpw_t **out, const ddpw_opts_t *opts, ddp_err_t *err);

/* Same as ddpw_init with an environment the caller filled (tests, embedding); node_local_rank
 * is read from it too (set it to local_rank unless LOCAL_RANK is virtual). */
int ddpw_init_env(ddpw_t **out, const ddpw_env_t *env, const ddpw_opts_t *opts, ddp_err_t *err);

/* Releases the backend (aborting a NCCL communicator that is still busy), unmaps shared memory
 * and closes the store connection. NULL is allowed. */
void ddpw_free(ddpw_t *w);

/* The ranks and round of this process, as validated by ddpw_init (plain reads, cannot fail):
 * global rank, rank on this node, world size, ranks on this node, node index, restart round. */
int ddpw_rank(const ddpw_t *w);
int ddpw_local_rank(const ddpw_t *w);
int ddpw_world_size(const ddpw_t *w);
int ddpw_local_world_size(const ddpw_t *w);
int ddpw_group_rank(const ddpw_t *w);
int64_t ddpw_round(const ddpw_t *w);

/* The backend in use (never AUTO after ddpw_init). */
ddpw_backend_t ddpw_backend(const ddpw_t *w);

/* "cpu" or "nccl": static string. */
const char *ddpw_backend_name(ddpw_backend_t b);

/* Why the job's backend is not what AUTO would prefer (e.g. the CPU backend because one node has
 * fewer GPUs than ranks, or a device query failed: CUDA's error and the driver and runtime
 * versions), as one line for the user; NULL when there is nothing to say. The same on every
 * rank: print it once (rank 0). */
const char *ddpw_backend_note(const ddpw_t *w);

/* The CUDA device this rank uses (LOCAL_RANK), or -1 on the CPU backend. */
int ddpw_device(const ddpw_t *w);

/* In-place allreduce of count float32 values. buf is host memory on the CPU backend and device
 * memory on NCCL (the call then waits for the result). The CPU result is bitwise identical on every
 * rank and from run to run for a fixed world size (ranks are summed in rank order). */
int ddpw_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err);

/* Enqueues the allreduce on a CUDA stream (cudaStream_t passed as void *) and returns at once on
 * NCCL; on the CPU backend it is ddpw_allreduce (stream ignored). */
int ddpw_allreduce_async(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, void *stream,
                         ddp_err_t *err);

/* Waits until everything enqueued on stream (cudaStream_t as void *) so far has finished, bounded
 * by the collective timeout, while polling the NCCL communicator for asynchronous errors: a peer's
 * failure is reported as it happens instead of after the timeout, and the communicator is aborted
 * on error or timeout (so no NCCL kernel keeps spinning). Returns 0, DDP_ETIMEOUT, DDP_ENCCL or
 * DDP_ECUDA. On the CPU backend it returns 0 at once. */
int ddpw_stream_wait(ddpw_t *w, void *stream, ddp_err_t *err);

/* In-place broadcast of len bytes from root to every rank (host memory on CPU, device on NCCL). */
int ddpw_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err);

/* Waits until every rank has arrived (bounded by opts.timeout_ms: DDP_ETIMEOUT). */
int ddpw_barrier(ddpw_t *w, ddp_err_t *err);

/* Store helpers under the round prefix ("<run_id>/<round>/<key>"), so a restarted job never reads
 * a previous round's value. get waits up to timeout_ms (< 0: the handle's timeout). out is
 * caller memory of cap bytes; *len gets the value's length (DDP_ETOOBIG if it exceeds cap).
 * Both return DDP_EUSAGE when the world has no store (single process), and -EINVAL when the key
 * with its prefix is over 511 bytes. The library's own names (under backend/, nccl/, cpu/ and
 * barrier/; docs/worker.md, "Store keys") are taken. */
int ddpw_store_set(ddpw_t *w, const char *key, const void *val, size_t len, ddp_err_t *err);
int ddpw_store_get(ddpw_t *w, const char *key, void *out, size_t cap, size_t *len, int timeout_ms,
                   ddp_err_t *err);

/* Writes TORCHELASTIC_ERROR_FILE (when set) in PyTorch's format:
 *   {"message": {"message": MSG, "extraInfo": {"py_callstack": "", "timestamp": "<unix s>"}}}
 * so the agent's failure summary shows the worker's own message. Returns 0 (also when the
 * variable is unset) or -errno. Safe to call without a ddpw_t. */
int ddpw_record_error(const char *msg);

/* Same, to an explicit path (tests). */
int ddpw_record_error_to(const char *path, const char *msg);

/* ---- heartbeat: the agent's hang detection ----
 * When the agent supervises heartbeats, each worker gets DDPRUN_HEARTBEAT_FILE: an existing,
 * empty regular file the agent made for that worker. A beat is an update of the file's mtime;
 * the file then holds the progress counter as DDPW_HEARTBEAT_LEN bytes: the step in decimal,
 * zero-padded to 20 digits, and a newline (a fixed width, so a smaller step never leaves digits
 * of a larger one behind).
 *
 * The file belongs to the process, not to a store connection, so these calls take no ddpw_t: a
 * program can beat while it loads data, before ddpw_init, and from any thread. */
#define DDPW_HEARTBEAT_INTERVAL_MS 100 /* at most one write per interval */
#define DDPW_HEARTBEAT_LEN 21          /* 20 digits and a newline */

/* Beats with progress step (>= 0, e.g. the global step). The first call opens the file
 * (O_NOFOLLOW; a symlink or a non-regular file is refused). Later calls cost one read of
 * CLOCK_MONOTONIC_COARSE (no system call) unless DDPW_HEARTBEAT_INTERVAL_MS have passed since
 * the last write: then one pwrite writes the step. A step given within the interval waits for
 * the next beat or for ddpw_heartbeat_flush. Returns 0, also without DDPRUN_HEARTBEAT_FILE (every
 * call is then a no-op); DDP_EUSAGE for a negative step; and once, when the file cannot be opened
 * or written, -errno with err naming the file (-ELOOP: a symlink, -EINVAL: not a regular file).
 * After that error beats are no-ops for the life of the process: a job never stops because of
 * its heartbeat. */
int ddpw_heartbeat(int64_t step, ddp_err_t *err);

/* Writes the newest step given to ddpw_heartbeat now, whatever the interval, unless the file
 * holds it already (at the end of training, so the file shows the final step). Returns as
 * ddpw_heartbeat. */
int ddpw_heartbeat_flush(ddp_err_t *err);

/* ---- timing: the agent's straggler detection ----
 * Each worker gets DDPRUN_TIMING_FILE, an existing, empty regular file the agent made for that
 * worker. ddpw_timing_add adds to three monotonic totals of the process: the time it computed
 * (from the end of one step's collectives to the start of the next's), the time it waited inside
 * collectives, and the steps these cover. At most once per DDPW_TIMING_INTERVAL_MS one pwrite puts
 * the totals in the file as one record of DDP_TIMING_LEN bytes at offset 0 (ddp_timing.h):
 *   "t1 <compute ns, 20 digits> <wait ns, 20 digits> <steps, 10 digits> <FNV-1a, 8 hex>\n".
 * The agent reads it each window and the store compares the ranks' compute time per step.
 * A program that times its own collectives (a profiler plugin, a program without a ddpw_t) calls
 * it directly.
 * Like the heartbeat these take no ddpw_t, may be called from any thread, never fail (without the
 * variable, or after a file error, the totals count and nothing is written) and cost three
 * atomic adds and one CLOCK_MONOTONIC_COARSE read between writes. */
#define DDPW_TIMING_INTERVAL_MS 100 /* at most one write per interval */
void ddpw_timing_add(uint64_t compute_ns, uint64_t wait_ns, uint32_t steps);

/* Writes the totals now, whatever the interval (at the end of training). */
void ddpw_timing_flush(void);

#endif
