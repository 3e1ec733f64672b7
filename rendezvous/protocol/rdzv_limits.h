/* SPDX-License-Identifier: Apache-2.0
 * rdzv_limits: every bound the store enforces, as named constants in one place (STYLE 21).
 * The wire-level ones match PyTorch's c10d TCPStore (TCPStoreLibUvBackend.cpp); the others
 * keep one client from growing the server without bound. rdzv_server_opts_t overrides most of
 * them (0 = the default here); the daemon exposes them as flags. */
#ifndef RDZV_LIMITS_H
#define RDZV_LIMITS_H

/* Longest key, in bytes (TCPStore: MAX_STRING_LEN). */
#define RDZV_MAX_KEY_LEN ((size_t)8 * 1024)

/* Longest value, in bytes (TCPStore: MAX_PAYLOAD_LEN). APPEND cannot grow a value past it. */
#define RDZV_MAX_VALUE_LEN ((size_t)8 * 1024 * 1024)

/* Most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET (TCPStore: MAX_KEY_COUNT). */
#define RDZV_MAX_KEYS_PER_REQ ((size_t)128 * 1024)

/* Items one queue (QUEUE_PUSH) holds; a push past it closes the pushing connection. Their bytes
 * count against max_total_mem like values; this bounds the per-item overhead of empty items. */
#define RDZV_MAX_QUEUE_LEN ((size_t)1024 * 1024)

/* Largest single request frame the server buffers while it is incomplete. It must hold one
 * COMPARE_SET of two maximal values; a MULTI_SET larger than this is refused as a whole. */
#define RDZV_MAX_FRAME_LEN ((size_t)32 * 1024 * 1024)

/* Replies queued for one client that has not read them yet; past it the client is cut off
 * as a slow reader (redis: client-output-buffer-limit). Holds a few maximal values. */
#define RDZV_MAX_OUT_BUF ((size_t)64 * 1024 * 1024)

/* Bytes handed to the kernel for one client per write, so that one large reply cannot
 * monopolise a loop turn (redis: NET_MAX_WRITES_PER_EVENT). */
#define RDZV_WRITE_BYTES_PER_TURN ((size_t)256 * 1024)

/* Simultaneous connections. With a token, a newcomer past it evicts the oldest connection still
 * in its handshake; it is refused (accepted and closed at once) only when every connection has
 * authenticated, or always when the server has no token. */
#define RDZV_MAX_CONNS ((size_t)65536)

/* Connections still in their handshake (servers with a token): past the cap, a newcomer evicts the
 * oldest of them. The default is max_conns / RDZV_UNAUTH_CONNS_DIV, at least
 * RDZV_MIN_UNAUTH_CONNS and at most max_conns. A quarter holds a whole listen backlog (4096 by
 * default on Linux) of clients connecting at once at the default max_conns, so a burst of real
 * clients is not evicted by itself; an idle unauthenticated peer costs one descriptor and about
 * 1 KiB, and the other three quarters stay for authenticated clients. */
#define RDZV_UNAUTH_CONNS_DIV 4
#define RDZV_MIN_UNAUTH_CONNS ((size_t)8)

/* Descriptors the process keeps besides the store's connections (stdio, the loop, the listener,
 * signals; in an agent, its workers' pipes and its own clients). The soft RLIMIT_NOFILE is raised
 * to max_conns plus this reserve when the hard limit allows; otherwise max_conns shrinks to the
 * limit less this reserve (at most a quarter of the limit), so that the connection limit, not
 * EMFILE, is what a flood meets. */
#define RDZV_NOFILE_RESERVE ((size_t)256)

/* Refused, evicted and handshake-expired connections are logged at most once per this many
 * milliseconds; the next line counts the ones left out. */
#define RDZV_ADMIT_LOG_MS 1000

/* Memory the server may use for stored keys and values plus per-connection buffers. A request
 * that would pass it closes its connection; the store keeps serving everyone else. */
#define RDZV_MAX_TOTAL_MEM ((size_t)2 * 1024 * 1024 * 1024)

/* A connection must finish VALIDATE (and authentication, when the server has a token) within
 * this many milliseconds of being accepted, or it is closed. The handshake is two round trips
 * that every client sends without waiting for anything else; 5 s leaves room for a loaded host
 * and a few lost segments (TCP's minimum RTO is 200 ms) while an idle socket is dropped soon. */
#define RDZV_AUTH_IDLE_MS 5000

/* The workers' store's limits, fitted to the worker processes it serves (all nodes' workers when
 * this node is group rank 0's). PyTorch's client keeps one connection per TCPStore object open
 * for the whole job (PyTorch <= 2.0 a second one, for watch_key callbacks, that never sends
 * until a key is watched); a worker rarely makes more than a few (a store per process group
 * family, a clone for a monitor thread), so 16 each plus a base for tools leaves a wide margin
 * while a flood of idle sockets by the job's own user stops at the limit, not at the open-file
 * limit. Memory: every worker may have one maximal value (RDZV_MAX_VALUE_LEN) in flight and one
 * stored, plus a base for the keys of init_process_group, NCCL ids and small objects. Neither
 * passes the shared store's defaults (RDZV_MAX_CONNS, RDZV_MAX_TOTAL_MEM). */
#define RDZV_WSTORE_CONNS_BASE ((size_t)64)
#define RDZV_WSTORE_CONNS_PER_WORKER ((size_t)16)
/* Past RDZV_MAX_CONNS the margin shrinks to this many connections a worker, never below: group
 * rank 0's store serves every worker of the job (16,000 nodes x 8 ranks: 128,000), and a limit
 * under one connection a worker would refuse some ranks' init_process_group. */
#define RDZV_WSTORE_CONNS_PER_WORKER_MIN ((size_t)2)
#define RDZV_WSTORE_MEM_BASE ((size_t)64 * 1024 * 1024)
#define RDZV_WSTORE_MEM_PER_WORKER ((size_t)16 * 1024 * 1024)

/* The workers' store has no handshake deadline (see RDZV_WSTORE_CONNS_*: a callback socket
 * never sends). At the connection limit, a newcomer instead evicts the oldest connection that
 * has not sent a whole first frame since at least this many milliseconds; a younger one may be
 * a real client about to send its first frame, and the newcomer is refused. */
#define RDZV_WSTORE_UNUSED_EVICT_MS 5000

/* Bound on one peer-owner lookup (rdzv_server_opts_t.owner_only): the kernel answers the
 * netlink query before sendto returns, so this is only a guard against the unforeseen. */
#define RDZV_OWNER_LOOKUP_MS 100

/* Size of the one read buffer the server shares between all connections (libuv alloc_cb). */
#define RDZV_READ_CHUNK ((size_t)64 * 1024)

/* A connection keeps at most this much idle buffer capacity; more is freed once drained, so
 * that thousands of idle connections cost little memory. */
#define RDZV_IDLE_BUF_KEEP ((size_t)4096)

/* Authentication: nonce and MAC sizes (HMAC-SHA256), and token length bounds. */
#define RDZV_AUTH_NONCE_LEN 32
#define RDZV_AUTH_MAC_LEN 32
#define RDZV_TOKEN_MAX_LEN ((size_t)1024)
#define RDZV_TOKEN_MIN_LEN_DAEMON ((size_t)16)

#endif
