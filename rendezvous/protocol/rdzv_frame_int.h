/* SPDX-License-Identifier: Apache-2.0
 * rdzv_frame: the wire codec of the store (internal to rendezvous/). Requests are PyTorch c10d
 * TCPStore's (a 1-byte command, u64 length-prefixed blobs, native little-endian integers) plus
 * ddprun's own commands at codes >= 0x40. docs/protocol.md is the specification. */
#ifndef RDZV_FRAME_INT_H
#define RDZV_FRAME_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_limits.h"

/* Command codes: 0..18 are TCPStore's QueryType (TCPStoreBackend.hpp, PyTorch 2.x); ddprun's own
 * start at 0x40 (the rendezvous commands, rdzv_commands.h, at RDZV_CMD_RDZV_FIRST). */
enum rdzv_cmd {
    RDZV_CMD_VALIDATE = 0,
    RDZV_CMD_SET = 1,
    RDZV_CMD_COMPARE_SET = 2,
    RDZV_CMD_GET = 3,
    RDZV_CMD_ADD = 4,
    RDZV_CMD_CHECK = 5,
    RDZV_CMD_WAIT = 6,
    RDZV_CMD_GETNUMKEYS = 7,
    RDZV_CMD_DELETE_KEY = 8,
    RDZV_CMD_APPEND = 9,
    RDZV_CMD_MULTI_GET = 10,
    RDZV_CMD_MULTI_SET = 11,
    RDZV_CMD_CANCEL_WAIT = 12,
    RDZV_CMD_PING = 13,
    RDZV_CMD_QUEUE_PUSH = 14,   /* key, value -> (no reply) */
    RDZV_CMD_QUEUE_POP = 15,    /* key -> i64 length before the pop [+ blob when > 0] */
    RDZV_CMD_QUEUE_LEN = 16,    /* key -> i64 */
    RDZV_CMD_LIST_KEYS = 17,    /* -> i64 count + count blobs */
    RDZV_CMD_BARRIER = 18,      /* key, i64 world size -> u8 0 once that many have arrived */
    RDZV_CMD_AUTH_HELLO = 0x40, /* 32-byte client nonce -> u8 status [+ 32-byte server nonce] */
    RDZV_CMD_AUTH_PROOF = 0x41, /* 32-byte MAC -> u8 status [+ 32-byte server MAC] */
    RDZV_CMD_GET_WAIT = 0x42,   /* key, u8 mode -> u8 0 + blob, or u8 1 (absent / canceled) */
    RDZV_CMD_STATS = 0x43,      /* -> blob of "name value\n" lines */
    /* AUTH_HELLO for one run: 32-byte client nonce, blob run id -> as AUTH_HELLO. The proof may
     * use the store's token (the whole store) or the run's token (that run alone). */
    RDZV_CMD_AUTH_HELLO_RUN = 0x44,
};

/* The VALIDATE magic (TCPStore: validationMagicNumber). */
#define RDZV_VALIDATE_MAGIC 0x3C85F7CEu

/* Reply bytes (TCPStore's CheckResponseType and WaitResponseType). */
enum {
    RDZV_CHECK_READY = 0,
    RDZV_CHECK_NOT_READY = 1,
    RDZV_WAIT_STOP_WAITING = 0,
    RDZV_WAIT_CANCELED = 1,
};

/* AUTH_HELLO / AUTH_PROOF status bytes. */
enum {
    RDZV_AUTH_CHALLENGE = 0,  /* HELLO: the server nonce follows */
    RDZV_AUTH_OK = 0,         /* PROOF: accepted; the server's own MAC follows */
    RDZV_AUTH_REFUSED = 1,    /* PROOF: wrong MAC; the server closes the connection */
    RDZV_AUTH_NOT_NEEDED = 2, /* HELLO: this server has no token */
};

/* GET_WAIT modes and reply status. */
enum {
    RDZV_GETW_BLOCK = 0,  /* park until the key exists (CANCEL_WAIT ends it) */
    RDZV_GETW_NOWAIT = 1, /* reply at once; status 1 when the key is absent */
    RDZV_GETW_FOUND = 0,
    RDZV_GETW_ABSENT = 1,
};

/* A borrowed byte range inside the buffer that was parsed. */
typedef struct rdzv_slice {
    const uint8_t *p;
    size_t n;
} rdzv_slice_t;

/* The bounds the parser enforces (see rdzv_limits.h). */
typedef struct rdzv_frame_limits {
    size_t max_key_len, max_value_len, max_keys, max_frame;
} rdzv_frame_limits_t;

/* One parsed request. Every slice borrows from the parsed buffer and is valid only as long as
 * that buffer is unchanged. Fields not used by cmd are zero. */
typedef struct rdzv_req {
    uint8_t cmd;
    rdzv_slice_t key;  /* SET, COMPARE_SET, GET, ADD, DELETE_KEY, APPEND, GET_WAIT, QUEUE_*,
                          BARRIER; AUTH_HELLO_RUN: the run id */
    rdzv_slice_t val;  /* SET/APPEND/QUEUE_PUSH value, COMPARE_SET expected, AUTH_* 32 bytes */
    rdzv_slice_t val2; /* COMPARE_SET desired */
    int64_t delta;     /* ADD delta, BARRIER world size */
    uint32_t u32;      /* VALIDATE magic, PING nonce */
    uint8_t mode;      /* GET_WAIT */
    uint64_t nkeys;    /* CHECK, WAIT, MULTI_GET, MULTI_SET */
    rdzv_slice_t list; /* the nkeys keys (MULTI_SET: key, value pairs), for rdzv__list_next */
} rdzv_req_t;

/* Parses one request from buf[0..len).
 * Returns the frame length (> 0) and fills req; 0 when the frame is incomplete, with *need set
 * to a byte count the buffer must reach before parsing can progress (> len); or DDP_EFRAME
 * (unknown command), DDP_ETOOBIG (a length or count over lim) with err naming the field and
 * err->offset the byte where it starts. Nothing is allocated; req borrows from buf. */
long rdzv__frame_parse(const uint8_t *buf, size_t len, const rdzv_frame_limits_t *lim,
                       rdzv_req_t *req, size_t *need, ddp_err_t *err);

/* As rdzv__frame_parse, with the frame's first byte read as command cmd: the codes of another
 * numbering (rdzv__legacy_cmd) share the frame layouts. */
long rdzv__frame_parse_as(uint8_t cmd, const uint8_t *buf, size_t len,
                          const rdzv_frame_limits_t *lim, rdzv_req_t *req, size_t *need,
                          ddp_err_t *err);

/* PyTorch <= 2.0's command numbering (no VALIDATE; SET is 0, DELETE_KEY 8): the command code
 * of today's numbering for code, or -1 when it has none that is served (WATCH_KEY, 7, and
 * anything above 8). PyTorch 2.1 numbered alike up to GETNUMKEYS (6) and differently above. */
int rdzv__legacy_cmd(uint8_t code);

/* Steps through req->list, which rdzv__frame_parse has validated: fills *key (and *val for
 * MULTI_SET when val is not NULL) and advances *cursor, which starts at req->list. Call it
 * exactly req->nkeys times. */
void rdzv__list_next(const uint8_t **cursor, int with_values, rdzv_slice_t *key, rdzv_slice_t *val);

/* The name of a command code ("SET", "AUTH_HELLO", "RDZV_JOIN", ...) or "UNKNOWN". Static
 * string. */
const char *rdzv__cmd_name(int cmd);

/* Encoders: append to b in wire order. Return 0 or -ENOMEM. */
int rdzv__put_u8(ddp_buf_t *b, uint8_t v);
int rdzv__put_u32(ddp_buf_t *b, uint32_t v);
int rdzv__put_u64(ddp_buf_t *b, uint64_t v);
int rdzv__put_i64(ddp_buf_t *b, int64_t v);
int rdzv__put_blob(ddp_buf_t *b, const void *p, size_t n);

/* The offset of the first byte of p[0..n) that is not printable ASCII (0x20-0x7e), or n: the
 * store's rule for run ids and hosts (rdzv_name_bad_at, rdzv_proto.h, is its public name). */
size_t rdzv__name_bad_at(const void *p, size_t n);

/* Reads native-order integers from possibly unaligned bytes. */
uint64_t rdzv__get_u64(const uint8_t *p);
uint32_t rdzv__get_u32(const uint8_t *p);

/* Writes key into out (size cap) for messages: at most 64 bytes shown, non-printable bytes as
 * \xNN, "..." when cut. Returns out. */
char *rdzv__key_repr(const void *key, size_t n, char *out, size_t cap);

#endif
