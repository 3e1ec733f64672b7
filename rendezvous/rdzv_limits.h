/* rdzv_limits: every bound the store enforces, as named constants in one place (STYLE 21).
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

/* Largest single request frame the server buffers while it is incomplete. It must hold one
 * COMPARE_SET of two maximal values; a MULTI_SET larger than this is refused as a whole. */
#define RDZV_MAX_FRAME_LEN ((size_t)32 * 1024 * 1024)

/* Replies queued for one client that has not read them yet; past it the client is cut off
 * as a slow reader (redis: client-output-buffer-limit). Holds a few maximal values. */
#define RDZV_MAX_OUT_BUF ((size_t)64 * 1024 * 1024)

/* Bytes handed to the kernel for one client per write, so that one large reply cannot
 * monopolise a loop turn (redis: NET_MAX_WRITES_PER_EVENT). */
#define RDZV_WRITE_BYTES_PER_TURN ((size_t)256 * 1024)

/* Simultaneous connections; further ones are accepted and closed at once. */
#define RDZV_MAX_CONNS ((size_t)65536)

/* Memory the server may use for stored keys and values plus per-connection buffers. A request
 * that would pass it closes its connection; the store keeps serving everyone else. */
#define RDZV_MAX_TOTAL_MEM ((size_t)2 * 1024 * 1024 * 1024)

/* A connection must finish VALIDATE (and authentication, when the server has a token) within
 * this many milliseconds of being accepted, or it is closed. */
#define RDZV_AUTH_IDLE_MS 10000

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
