/* SPDX-License-Identifier: Apache-2.0
 * ddp_contract: the names two programs of ddprun agree on, spelled once. The agent
 * (agent/group.c, agent/worker.c) sets these variables in every worker's environment and the
 * worker library (worker_template/ddpw.c and its backends) reads them; the launcher, the daemon
 * and `ddprun status` read the job token's. A name is written here and nowhere else: every other
 * file uses the macro, so the two sides cannot drift apart. */
#ifndef DDP_CONTRACT_H
#define DDP_CONTRACT_H

/* ---- torchrun's worker environment (torch.distributed.run), set by the agent ---- */
#define DDP_ENV_RANK "RANK"
#define DDP_ENV_LOCAL_RANK "LOCAL_RANK"
#define DDP_ENV_GROUP_RANK "GROUP_RANK"
#define DDP_ENV_ROLE_RANK "ROLE_RANK"
#define DDP_ENV_ROLE_NAME "ROLE_NAME"
#define DDP_ENV_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define DDP_ENV_WORLD_SIZE "WORLD_SIZE"
#define DDP_ENV_GROUP_WORLD_SIZE "GROUP_WORLD_SIZE"
#define DDP_ENV_ROLE_WORLD_SIZE "ROLE_WORLD_SIZE"
#define DDP_ENV_MASTER_ADDR "MASTER_ADDR"
#define DDP_ENV_MASTER_PORT "MASTER_PORT"
#define DDP_ENV_RESTART_COUNT "TORCHELASTIC_RESTART_COUNT"
#define DDP_ENV_MAX_RESTARTS "TORCHELASTIC_MAX_RESTARTS"
#define DDP_ENV_TE_RUN_ID "TORCHELASTIC_RUN_ID"
#define DDP_ENV_ERROR_FILE "TORCHELASTIC_ERROR_FILE"
/* "True": the workers' store is the agent's, on MASTER_ADDR:MASTER_PORT; "False": rank 0 hosts
 * one (--worker_store=own). */
#define DDP_ENV_USE_AGENT_STORE "TORCHELASTIC_USE_AGENT_STORE"
#define DDP_USE_AGENT_STORE_YES "True"
#define DDP_USE_AGENT_STORE_NO "False"

/* ---- ddprun's own, for the worker library ---- */
/* The agent's store, in ddprun's protocol (rendezvous/client/include/rdzv_client.h). */
#define DDP_ENV_STORE_ADDR "DDPRUN_STORE_ADDR"
#define DDP_ENV_STORE_PORT "DDPRUN_STORE_PORT"
#define DDP_ENV_RUN_ID "DDPRUN_RUN_ID"
/* The rendezvous round: the worker library's keys live under it. */
#define DDP_ENV_ROUND "DDPRUN_ROUND"
/* The worker's place on the node, also when LOCAL_RANK is virtual (--virtual_local_rank). */
#define DDP_ENV_REAL_LOCAL_RANK "DDPRUN_LOCAL_RANK"
/* --numa_binding: the CPUs the worker is bound to, and its memory node. */
#define DDP_ENV_CPU_BINDING "DDPRUN_CPU_BINDING"
#define DDP_ENV_NUMA_NODE "DDPRUN_NUMA_NODE"
/* The file whose mtime is the worker's heartbeat (ddpw_heartbeat.c writes, agent/hang.c reads). */
#define DDP_ENV_HEARTBEAT_FILE "DDPRUN_HEARTBEAT_FILE"
/* The file in which the worker publishes its compute and collective-wait totals (ddp_timing.h:
 * ddpw_timing.c writes, agent/straggler.c reads). */
#define DDP_ENV_TIMING_FILE "DDPRUN_TIMING_FILE"
/* The name libddpw gives its NCCL communicator (ncclConfig_t.commName): the NCCL profiler plugin
 * (worker_template/ncclprof) leaves it alone, since the library times its collectives itself. */
#define DDP_NCCL_COMM_NAME "ddpw"
/* The node's scratch directory on /dev/shm (agent/scratch.c), for the CPU backend's segment. */
#define DDP_ENV_SHM_DIR "DDPRUN_SHM_DIR"

/* ---- the node's health check (--health_check), set by the agent ----
 * Besides DDPRUN_RUN_ID and TORCHELASTIC_RESTART_COUNT (the start it checks for): the workers
 * this node runs. */
#define DDP_ENV_NODE_LOCAL_WORLD_SIZE "DDPRUN_LOCAL_WORLD_SIZE"

/* ---- the job token (docs/protocol.md, "The job token") ----
 * DDPRUN_TOKEN (hex) and DDPRUN_TOKEN_FILE (a file) are the user's; DDPRUN_STORE_TOKEN (hex) is
 * what an agent hands its workers, still read everywhere. rdzv_token_load (rdzv_client.h) tries
 * them in this order: first set wins. */
#define DDP_ENV_TOKEN "DDPRUN_TOKEN"
#define DDP_ENV_TOKEN_FILE "DDPRUN_TOKEN_FILE"
#define DDP_ENV_STORE_TOKEN "DDPRUN_STORE_TOKEN"
/* The three, for messages that tell the user where a token goes. */
#define DDP_ENV_TOKEN_NAMES DDP_ENV_TOKEN ", " DDP_ENV_TOKEN_FILE " or " DDP_ENV_STORE_TOKEN

/* ---- the store's keys ----
 * The prefix of the worker library's keys: "ddpw/<run_id>/<round>/<name>" (rdzv_layout.h builds
 * and parses keys of that shape). The agent tells the store this prefix (a JOIN's round_keys, a
 * one-node agent's rdzv_server_forget_rounds) so that a round's keys go with the round; the store
 * itself knows no prefix of the layers above it. */
#define DDP_WORKER_KEY_PREFIX "ddpw/"

#endif
