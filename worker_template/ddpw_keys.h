/* SPDX-License-Identifier: Apache-2.0
 * ddpw_keys: the names of the keys libddpw and train keep in the store, built here alone. Every
 * key of a worker lives under its round: DDP_WORKER_KEY_PREFIX "<run_id>/<round>/<name>"
 * (ddpw__key_round), so a restarted job (the next round) never reads a previous round's NCCL id,
 * shared-memory name or resume point. No worker deletes a key: the store drops a round's keys
 * under that prefix once the round is over (rdzv_server_forget_rounds: a one-node agent's before
 * each restart, a multi-node store's as each round closes; docs/protocol-rdzv.md, "Keys"). A
 * store barrier on name N keeps "N/count" and "N/done" (rdzv_client_barrier).
 *
 *   name                 written by                    read by
 *   backend/vote/<rank>  rank <rank> (SET, its vote)   rank 0 (GET), which decides the backend
 *   backend/decision     rank 0 (SET)                  every other rank (GET)
 *   nccl/id              rank 0 (SET, 128 bytes)       every other rank (GET)
 *   cpu/shm/<node>       node <node>'s local rank 0    its node's other ranks (GET)
 *                        (SET, the segment's name)
 *   cpu/ready/<node>     a store barrier of node <node>'s ranks, once each has mapped the segment
 *   cpu/tcp/<node>       node <node>'s leader (SET,    the previous node's leader (GET)
 *                        "ADDR PORT")
 *   barrier/<seq>        a store barrier of every rank, the seq-th of ddpw_barrier's without a
 *                        backend barrier
 *   train/resume         train's rank 0 (SET)          train's other ranks (GET)
 *   train/sync/<epoch>   train's rank 0 (SET)          train's other ranks (GET)
 *                        (both only when the collectives run on GPUs: the CPU backend
 *                        broadcasts them)
 *
 * train's names are here too: it keeps them under the same prefix through ddpw_store_set/get, and
 * one list shows that no two names collide. The names are a contract with whatever else reads the
 * store (tests, a user's own program): they never change. A name's builder returns it in a
 * ddpw_name_t, whose size bounds every name, so that no builder can fail. */
#ifndef DDPW_KEYS_H
#define DDPW_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* Room for any name below, NUL included: the words and one 20-digit number. */
#define DDPW_NAME_MAX 48
/* Room for a whole key: the prefix, a run id (ddpw_env_t.run_id), a round and a name of the
 * library's (a program's own names through ddpw_store_set/get may take the rest). */
#define DDPW_KEY_MAX 512

/* One name within a round, NUL-terminated. */
typedef struct ddpw_name {
    char s[DDPW_NAME_MAX];
} ddpw_name_t;

/* The whole key of name in round round of run run_id, DDP_WORKER_KEY_PREFIX
 * "<run_id>/<round>/<name>" (rdzv_layout_round_key), NUL-terminated into key[0..cap). Returns 0,
 * or -EINVAL when the run id is over RDZV_RUN_ID_MAX, round is negative or the key does not fit
 * cap (key is then unspecified). */
int ddpw__key_round(char *key, size_t cap, const char *run_id, int64_t round, const char *name);

/* Backend choice (ddpw.c): each rank's vote, and rank 0's decision from them
 * ("<code>\t<backend>\t<note or error>"). */
ddpw_name_t ddpw__key_vote(int rank);
#define DDPW_KEY_DECISION "backend/decision"

/* NCCL (ddpw_nccl.c): rank 0's ncclUniqueId. */
#define DDPW_KEY_NCCL_ID "nccl/id"

/* CPU within node node (ddpw_shm.c): the shared-memory segment's name (NUL included), and the
 * store barrier after which that name can go. */
ddpw_name_t ddpw__key_shm(int node);
ddpw_name_t ddpw__key_shm_ready(int node);

/* CPU across nodes (ddpw_tcp.c): where node node's leader listens, for the previous node's leader
 * to connect to. */
ddpw_name_t ddpw__key_ring(int node);

/* The seq-th store barrier of all ranks (ddpw.c, ddpw_barrier). */
ddpw_name_t ddpw__key_barrier(uint64_t seq);

/* train (train/loop.c): rank 0's resume point, and its parameters' checksum after epoch epoch
 * (--check-sync). */
#define DDPW_KEY_TRAIN_RESUME "train/resume"
ddpw_name_t ddpw__key_train_sync(uint64_t epoch);

#endif
