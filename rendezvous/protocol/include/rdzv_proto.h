/* SPDX-License-Identifier: Apache-2.0
 * rdzv_proto: the wire protocol of ddprun's multi-node rendezvous (the commands of
 * rdzv_commands.h, docs/protocol-rdzv.md): string and number bounds, torchrun's default
 * timeouts, the request and reply structures, and their codec (both directions), for the agent,
 * `ddprun status` and the store. Frames are the store's: a 1-byte command, u64 length-prefixed
 * strings, native little-endian 64-bit integers. */
#ifndef RDZV_PROTO_H
#define RDZV_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_commands.h"

/* Bounds, in bytes, of the strings the rendezvous commands carry. Run ids and hosts are
 * printable ASCII (0x20-0x7e): the store refuses any other byte. */
#define RDZV_RUN_ID_MAX 128 /* run id (--rdzv_id) */
#define RDZV_HOST_MAX 255   /* address the other nodes reach a node at */
/* Room for a run id or host as a metric label value, every byte escaped (two bytes), and the NUL:
 * a label is never cut, or two hosts that differ late would be one series. */
#define RDZV_LABEL_MAX (2 * (RDZV_HOST_MAX > RDZV_RUN_ID_MAX ? RDZV_HOST_MAX : RDZV_RUN_ID_MAX) + 1)
#define RDZV_WHAT_MAX 255       /* FAIL's failure, ABORT's reason */
#define RDZV_ROUND_KEYS_MAX 64  /* JOIN's round_keys: the prefix of a layer's round keys */
#define RDZV_ROUND_TEXT_MAX 512 /* error texts the server writes */
#define RDZV_REPLY_TEXT_MAX ((size_t)1024)             /* error text a client accepts in a reply */
#define RDZV_STATUS_JSON_MAX ((size_t)8 * 1024 * 1024) /* STATUS reply a client accepts */

/* The refusal of a JOIN to a run that spent max_restarts reads "rendezvous 'R' failed:
 * max_restarts (N) spent" RDZV_TEXT_LAST_FAILURE "<the FAIL that ended the last round, its node
 * named>" and, when failures were counted by host, RDZV_TEXT_ROOT_CAUSES "<host xN, ...>"; a run
 * an ABORT stopped, "rendezvous 'R' failed: stopped by <node>: <why>". An agent takes the root
 * cause of the job from it (rdzv_text_root_cause), so that every node names the same one. */
#define RDZV_TEXT_FAILED "' failed: "
#define RDZV_TEXT_LAST_FAILURE "; last failure: "
#define RDZV_TEXT_ROOT_CAUSES "; root causes by host: "

/* The root cause a FAILED run's refusal text names (see RDZV_TEXT_LAST_FAILURE) into out (cap
 * bytes): the last failure, or what stopped the run. Returns 1, or 0 (out empty) when text is
 * not such a refusal. */
int rdzv_text_root_cause(const char *text, char *out, size_t cap);

/* The offset of the first byte of p[0..n) that is not printable ASCII (0x20-0x7e), or n: the
 * store's rule for run ids and hosts, whichever way they reach it. */
size_t rdzv_name_bad_at(const void *p, size_t n);

/* Checks run id id against what the store accepts in every request (1..RDZV_RUN_ID_MAX bytes of
 * printable ASCII), so that a run that never talks to a store (one node) holds the same ids as one
 * that does: an id is a label in the metrics, a JSON string in the events and part of file names.
 * Returns 0, or -EINVAL with err saying what is wrong (the id quoted with its bytes escaped). */
int rdzv_run_id_check(const char *id, ddp_err_t *err);

/* Bounds on the numbers of a join. */
#define RDZV_ROUND_MAX_NODES 65536 /* max_nodes */
#define RDZV_ROUND_MAX_NPROC 65536 /* nproc of one node */
#define RDZV_ROUND_MAX_RESTARTS 1000000

/* torchrun's rendezvous defaults (--rdzv_conf keys of the same names), in milliseconds: the one
 * definition, used by the store where a JOIN says 0 and by the launcher for its flags. */
#define RDZV_DEFAULT_JOIN_TIMEOUT_MS 600000      /* join_timeout: a round must close within it */
#define RDZV_DEFAULT_LAST_CALL_TIMEOUT_MS 30000  /* last_call_timeout: wait for more past min */
#define RDZV_DEFAULT_CLOSE_TIMEOUT_MS 30000      /* close_timeout: to close the rendezvous */
#define RDZV_DEFAULT_TIMEOUT_MS 600000           /* timeout: store operations of the rendezvous */
#define RDZV_DEFAULT_KEEP_ALIVE_INTERVAL_MS 5000 /* keep_alive_interval (alias heartbeat) */
#define RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT 3    /* missed heartbeats before a node is dead */
#define RDZV_DEFAULT_READ_TIMEOUT_MS 60000       /* read_timeout: one store read */

/* The configuration of a run, fixed by its first joiner. A 0 timeout or attempt count means
 * torchrun's default (above). */
typedef struct rdzv_round_cfg {
    int64_t min_nodes, max_nodes;
    int64_t last_call_timeout_ms;
    int64_t join_timeout_ms;
    int64_t keep_alive_interval_ms;
    int64_t keep_alive_max_attempt;
    int64_t max_restarts;
    /* The prefix under which the run's workers keep keys per round ("<prefix><run>/<round>/...",
     * rdzv_layout.h); the store drops those of old rounds. Printable ASCII; "" for none. */
    char round_keys[RDZV_ROUND_KEYS_MAX + 1];
    /* A host that was the root cause (the first failure of a round) this many times is excluded
     * from the run's later rounds, while the others still meet min_nodes. 0: never. */
    int64_t max_node_failures;
} rdzv_round_cfg_t;

/* One JOIN request. Strings are NUL-terminated copies (no borrowing). */
typedef struct rdzv_join_req {
    char run_id[RDZV_RUN_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1];
    int64_t want_node_rank; /* -1 = any */
    int64_t nproc;          /* local world size, >= 1 */
    int64_t master_port;    /* MASTER_PORT this node offers if it becomes group rank 0 */
    rdzv_round_cfg_t cfg;
    /* What this node carries across a store that forgot the run (a restarted daemon): the round
     * after the newest it was told (0: none), and the restarts it knows were counted. The round
     * this JOIN closes is numbered at least min_round, and the run's count does not fall below
     * restarts_used. 0 and 0 ask for nothing. */
    int64_t min_round;
    int64_t restarts_used;
} rdzv_join_req_t;

/* What a member learns when its round closes. */
typedef struct rdzv_join_result {
    int64_t round;
    int64_t group_rank, group_world_size; /* nodes */
    int64_t rank_base;                    /* sum of nproc over lower group ranks */
    int64_t world_size;                   /* sum of nproc */
    char master_addr[RDZV_HOST_MAX + 1];  /* host of group rank 0 */
    int64_t master_port;                  /* group rank 0's candidate */
    int64_t restarts_used;
    int64_t store_flags; /* RDZV_STORE_*: what the store that answered is */
    /* This node's member and its key: a BEAT_FOR carrying both beats for the member from any
     * connection (its spare path when the control connection's TCP is backing off). */
    int64_t member, member_key;
} rdzv_join_result_t;

/* store_flags of a JOIN reply. RDZV_STORE_EMBEDDED: served by an agent, it ends with that agent
 * and nobody restarts it. */
#define RDZV_STORE_EMBEDDED 1

/* Bound on a JOIN's min_round (round numbers never come near it). */
#define RDZV_ROUND_MAX_ROUND ((int64_t)1 << 53)

/* States of a run (HEARTBEAT's reply carries one). */
typedef enum rdzv_run_state {
    RDZV_RUN_JOINING = 0,
    RDZV_RUN_LAST_CALL = 1,
    RDZV_RUN_RUNNING = 2,
    RDZV_RUN_FAILED = 3,
    RDZV_RUN_DONE = 4, /* a round passed its exit barrier (FINISH): JOINs are refused, spares go */
} rdzv_run_state_t;

/* The answer to a FAIL. */
typedef struct rdzv_fail_reply {
    uint8_t status; /* RDZV_FAIL_COUNTED, RDZV_FAIL_IGNORED or RDZV_FAIL_RUN_FAILED */
    int64_t round;  /* the run's current round after the event */
    int64_t restarts_used, max_restarts;
} rdzv_fail_reply_t;

enum {
    RDZV_FAIL_COUNTED = 0,    /* round ended, restart counted: re-join */
    RDZV_FAIL_IGNORED = 1,    /* not the running round (already ended) or not a member of it */
    RDZV_FAIL_RUN_FAILED = 2, /* counted, and max_restarts is now spent: the run is FAILED */
};

/* ---- requests ---- */

/* One parsed rendezvous request (any command of rdzv_commands.h). Strings are NUL-terminated
 * copies. */
typedef struct rdzv_round_req {
    uint8_t cmd;
    rdzv_join_req_t join;         /* JOIN; the other commands fill only join.run_id */
    int64_t round;                /* FAIL, FINISH */
    char what[RDZV_WHAT_MAX + 1]; /* FAIL, ABORT, UNFIT (the reason; the host is join.host) */
    int64_t member, member_key;   /* BEAT_FOR */
    int64_t first, limit;         /* STATUS_PAGE: members [first, first + limit) */
} rdzv_round_req_t;

/* Parses one rendezvous request (buf[0] is its command, one of rdzv_commands.h) from buf[0..len)
 * (server side). Returns the frame length (> 0) and fills req; 0 when incomplete, with *need set to
 * the length the buffer must reach (> len); DDP_EFRAME (unknown command, empty string, NUL inside a
 * string, a run id or host holding a byte that is not printable ASCII) or DDP_ETOOBIG (string over
 * its bound) with err naming the field and err->offset its byte. Nothing is allocated or borrowed.
 */
long rdzv_round_req_parse(const uint8_t *buf, size_t len, rdzv_round_req_t *req, size_t *need,
                          ddp_err_t *err);

/* "RDZV_JOIN" ... "RDZV_FINISH" for a rendezvous command code, NULL for any other code. */
const char *rdzv_round_cmd_name(int cmd);

/* Request encoders (client side), one per command of rdzv_commands.h:
 *   int rdzv_<name>_req_encode(ddp_buf_t *b, RDZV_REQ_PARAMS_<its request layout>);
 * e.g. rdzv_heartbeat_req_encode(b, run_id), rdzv_fail_req_encode(b, run_id, round, what),
 * rdzv_join_req_encode(b, req). Each appends one frame to b. Returns 0, -ENOMEM, or -EINVAL when
 * a string is empty or over its bound, or a number out of its range (STATUS_PAGE's first and
 * limit: 0..RDZV_ROUND_MAX_NODES); b is unchanged on error. Free texts (FAIL's failure, ABORT's
 * and UNFIT's reason) longer than RDZV_WHAT_MAX are cut. */
#define RDZV_REQ_ENCODE_DECL_(code, NAME, name, req, rep)                                          \
    int rdzv_##name##_req_encode(ddp_buf_t *b, RDZV_REQ_PARAMS_##req);
RDZV_COMMANDS(RDZV_REQ_ENCODE_DECL_)
#undef RDZV_REQ_ENCODE_DECL_

/* ---- replies ---- */

/* Reply encoders (server side), one per command of rdzv_commands.h:
 *   int rdzv_<name>_reply_encode(ddp_buf_t *b, RDZV_REP_PARAMS_<its reply layout>);
 * e.g. rdzv_heartbeat_reply_encode(b, ok, round, state), rdzv_join_reply_encode(b, res) (a
 * round's assignment), rdzv_unfit_reply_encode(b, ok) (status 0 recorded, 1 ignored). Each appends
 * one reply to b. Returns 0 or -ENOMEM (b unchanged). Texts longer than RDZV_REPLY_TEXT_MAX are
 * cut. */
#define RDZV_REP_ENCODE_DECL_(code, NAME, name, req, rep)                                          \
    int rdzv_##name##_reply_encode(ddp_buf_t *b, RDZV_REP_PARAMS_##rep);
RDZV_COMMANDS(RDZV_REP_ENCODE_DECL_)
#undef RDZV_REP_ENCODE_DECL_

/* JOIN's refusal: status 1, code and text. */
int rdzv_join_reply_encode_err(ddp_buf_t *b, int code, const char *text);

/* The refusal of a rendezvous request cmd with code and text, so that the client learns why: the
 * join layout's status 1 (JOIN), the json layout's status 1 with the text alone (STATUS,
 * STATUS_PAGE), and for the beat, fail and ack layouts (HEARTBEAT, BEAT_FOR, FAIL, ABORT, UNFIT,
 * FINISH) status RDZV_REPLY_REFUSED followed by i64 code and blob text. Returns 0, -ENOMEM, or
 * -ENOTSUP for a code that is not a rendezvous command (b unchanged). */
int rdzv_round_refusal_encode(ddp_buf_t *b, int cmd, int code, const char *text);

/* The status of a refused HEARTBEAT, BEAT_FOR, FAIL, ABORT, UNFIT or FINISH (a store that no
 * longer serves the rendezvous): code and text follow instead of the reply's fields. */
#define RDZV_REPLY_REFUSED 0xff

/* One parsed rendezvous reply. Every reply starts with its command code echoed, so a client can
 * tell a parked JOIN's answer from a HEARTBEAT's on the same connection. */
typedef struct rdzv_round_reply {
    uint8_t cmd;
    uint8_t status;          /* JOIN: 0 ok, 1 error; HEARTBEAT/STATUS: 0 ok, 1 unknown; FAIL;
                              * ABORT: 0 the run stopped, 1 ignored; UNFIT: 0 recorded,
                              * 1 ignored; FINISH: 0 done, 1 ignored */
    rdzv_join_result_t join; /* JOIN ok */
    int64_t code;            /* JOIN error; RDZV_REPLY_REFUSED's code */
    int64_t round;           /* HEARTBEAT, BEAT_FOR */
    int64_t state;           /* HEARTBEAT, BEAT_FOR */
    rdzv_fail_reply_t fail;  /* FAIL */
    ddp_buf_t text;          /* JOIN error text, STATUS JSON or error, RDZV_REPLY_REFUSED's
                              * text; NUL-terminated; owned:
                              * free with ddp_buf_free (parse appends to it after a reset) */
} rdzv_round_reply_t;

/* Parses one rendezvous reply from buf[0..len) (client side). Returns the reply length, 0 when
 * incomplete (*need set), DDP_EPROTO (unknown command or status) or DDP_ETOOBIG, with err set.
 * rep->text must start as DDP_BUF_INIT; each call resets and refills it and keeps its memory,
 * which the caller frees with ddp_buf_free(&rep->text). */
long rdzv_round_reply_parse(const uint8_t *buf, size_t len, rdzv_round_reply_t *rep, size_t *need,
                            ddp_err_t *err);

/* How long the rendezvous reply at the start of buf[0..len) is: a reply parser for
 * rdzv_aclient_raw (arg unused). Returns the length, 0 with *need set when incomplete, or a
 * negative code for a malformed reply. */
long rdzv_round_reply_len(void *arg, const uint8_t *buf, size_t len, size_t *need);

/* ---- progress: what a node's workers last reported, for `ddprun status` ----
 * With heartbeat supervision on, each agent SETs its progress in the store once per keep-alive
 * interval, under a key of its run and group rank (rdzv_layout_progress_key; an ordinary store key:
 * no new command, so a store without this knows nothing of it and loses nothing). The STATUS reply
 * adds it to the member: "step" and "beat_age_ms", the age of its most silent worker's last beat,
 * grown by the time since the report, and "goodput", the node's goodput so far, once its workers
 * have beaten. */
#define RDZV_PROGRESS_VALUE_MAX 160

typedef struct rdzv_progress {
    int64_t round;       /* the round the report is of; another round's report is stale */
    int64_t step;        /* the highest progress counter of the node's workers; -1 none yet */
    int64_t beat_age_ms; /* since the last beat of its most silent worker, at the report */
    /* The node's goodput at the report (docs/cli.md "Goodput"), when has_goodput: its agent's
     * wall time, the productive part of it, the time lost in its restarts whose cost is known,
     * and their number. productive_ms and lost_ms never exceed wall_ms. */
    int has_goodput;
    int64_t wall_ms, productive_ms, lost_ms, restarts;
} rdzv_progress_t;

/* The value: "ROUND STEP AGE_MS" in decimal, followed by " WALL_MS PRODUCTIVE_MS LOST_MS
 * RESTARTS" when p->has_goodput. Returns its length, or -EINVAL when it does not fit cap
 * (RDZV_PROGRESS_VALUE_MAX always does). */
int rdzv_progress_format(char *val, size_t cap, const rdzv_progress_t *p);

/* Parses a value of rdzv_progress_format: three fields (has_goodput 0) or seven. Returns 0, or
 * -EINVAL for anything else (a value set by some other client under that key is ignored, never
 * trusted). */
int rdzv_progress_parse(const void *val, size_t n, rdzv_progress_t *out);

#endif
