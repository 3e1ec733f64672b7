/* rdzv_round: the server side of multi-node rendezvous (issue 4) as pure logic: one state
 * machine per run id (JOINING -> LAST_CALL -> RUNNING -> round r+1, or FAILED), kept in a bounded
 * registry, plus the wire codec of the rendezvous commands 0x50-0x53 (docs/protocol-rdzv.md).
 * No sockets, no clock reads: the server passes events and the time in and carries out the
 * actions that come back (reply to a member, SET the round's end key, close a connection). */
#ifndef RDZV_ROUND_INT_H
#define RDZV_ROUND_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"

/* Command codes of the rendezvous (after the store's 0x40-0x4f). */
enum {
    RDZV_CMD_RDZV_JOIN = 0x50,      /* park until the round closes -> assignment or error */
    RDZV_CMD_RDZV_HEARTBEAT = 0x51, /* refresh liveness -> current round and state */
    RDZV_CMD_RDZV_FAIL = 0x52,      /* the worker group of a round failed -> counted or not */
    RDZV_CMD_RDZV_STATUS = 0x53,    /* -> JSON of the run */
};

/* Bounds, in bytes, of the strings the rendezvous commands carry. */
#define RDZV_RUN_ID_MAX 128                            /* run id (--rdzv_id) */
#define RDZV_HOST_MAX 255                              /* address the other nodes reach a node at */
#define RDZV_WHAT_MAX 255                              /* FAIL's description of the failure */
#define RDZV_ROUND_TEXT_MAX 512                        /* error texts the server writes */
#define RDZV_REPLY_TEXT_MAX ((size_t)1024)             /* error text a client accepts in a reply */
#define RDZV_STATUS_JSON_MAX ((size_t)8 * 1024 * 1024) /* STATUS reply a client accepts */

/* Bounds on the numbers of a join. */
#define RDZV_ROUND_MAX_NODES 65536 /* max_nodes */
#define RDZV_ROUND_MAX_NPROC 65536 /* nproc of one node */
#define RDZV_ROUND_MAX_RESTARTS 1000000

/* torchrun's defaults, used where a join says 0. */
#define RDZV_DEFAULT_LAST_CALL_MS 30000
#define RDZV_DEFAULT_JOIN_TIMEOUT_MS 600000
#define RDZV_DEFAULT_KEEP_ALIVE_MS 5000
#define RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT 3

/* Registry defaults: how many runs it holds, and how long a run with no members is kept (so that
 * its restart count survives every node restarting) before tick frees it. */
#define RDZV_RUNS_DEFAULT_MAX 1024
#define RDZV_RUNS_DEFAULT_EMPTY_KEEP_MS ((uint64_t)3600 * 1000)

/* The configuration of a run, fixed by its first joiner. A 0 timeout or attempt count means
 * torchrun's default (above). */
typedef struct rdzv_round_cfg {
    int64_t min_nodes, max_nodes;
    int64_t last_call_timeout_ms;
    int64_t join_timeout_ms;
    int64_t keep_alive_interval_ms;
    int64_t keep_alive_max_attempt;
    int64_t max_restarts;
} rdzv_round_cfg_t;

/* One JOIN request. Strings are NUL-terminated copies (no borrowing). */
typedef struct rdzv_join_req {
    char run_id[RDZV_RUN_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1];
    int64_t want_node_rank; /* -1 = any */
    int64_t nproc;          /* local world size, >= 1 */
    int64_t master_port;    /* MASTER_PORT this node offers if it becomes group rank 0 */
    rdzv_round_cfg_t cfg;
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
} rdzv_join_result_t;

/* States of a run (see the table in rdzv_round.c). */
typedef enum rdzv_run_state {
    RDZV_RUN_JOINING = 0,
    RDZV_RUN_LAST_CALL = 1,
    RDZV_RUN_RUNNING = 2,
    RDZV_RUN_FAILED = 3,
} rdzv_run_state_t;

/* What the server must do after an event, in order. */
typedef enum rdzv_action_kind {
    RDZV_ACT_REPLY_OK,  /* answer member's parked JOIN with res */
    RDZV_ACT_REPLY_ERR, /* answer member's parked JOIN with code + text */
    RDZV_ACT_END_ROUND, /* SET "__rdzv/<run_id>/end/<round>"; text says why (log it) */
    RDZV_ACT_CLOSE,     /* close member's connection (declared dead by silence; text says why) */
} rdzv_action_kind_t;

typedef struct rdzv_action {
    rdzv_action_kind_t kind;
    uint64_t member; /* REPLY_*, CLOSE */
    int code;        /* REPLY_ERR: DDP_ETIMEOUT, DDP_ERDZV_CLOSED, ... */
    int64_t round;   /* END_ROUND: the round that ended */
    char run_id[RDZV_RUN_ID_MAX + 1];
    rdzv_join_result_t res;         /* REPLY_OK */
    char text[RDZV_ROUND_TEXT_MAX]; /* REPLY_ERR, END_ROUND, CLOSE */
} rdzv_action_t;

/* A list of actions the caller provides; events append to it (they never reset it). */
typedef struct rdzv_actions {
    rdzv_action_t *v; /* owned */
    size_t n, cap;
} rdzv_actions_t;

#define RDZV_ACTIONS_INIT                                                                          \
    { NULL, 0, 0 }

/* Empties the list and keeps its memory. */
void rdzv_actions_reset(rdzv_actions_t *a);

/* Frees the list's memory; the list is then empty and reusable. */
void rdzv_actions_close(rdzv_actions_t *a);

typedef struct rdzv_runs rdzv_runs_t;

typedef struct rdzv_runs_opts {
    size_t max_runs;        /* 0 = RDZV_RUNS_DEFAULT_MAX */
    uint64_t empty_keep_ms; /* 0 = RDZV_RUNS_DEFAULT_EMPTY_KEEP_MS */
} rdzv_runs_opts_t;

/* Creates an empty registry (opts may be NULL for the defaults).
 * Returns it, or NULL when out of memory. Caller owns; free with rdzv_runs_free. */
rdzv_runs_t *rdzv_runs_new(const rdzv_runs_opts_t *opts);

/* Frees the registry, its runs and members. NULL is a no-op. Sends nothing to anybody. */
void rdzv_runs_free(rdzv_runs_t *rs);

/* Member member (the server's connection id) joins run req->run_id at now_ms.
 * Returns 0 when the join is accepted: it is parked, and its reply (and any other effect, such as
 * ending a running round for a scale-up) comes as actions appended to out, now or from a later
 * event. Returns an error, with err naming it, when the join is refused at once; the server then
 * answers it with rdzv__join_reply_encode_err(code, err->text):
 *   DDP_EUSAGE       bad field, or min/max differing from the run's (the text names both);
 *   DDP_ERDZV_CLOSED the run is FAILED (max_restarts spent; the text names the last failure);
 *   DDP_ETOOBIG      the registry holds max_runs runs, none of them empty;
 *   -EBUSY           member is in another run; -EALREADY member already has a JOIN parked;
 *   -ENOMEM          nothing changed.
 * req is copied; nothing is borrowed past the call. */
int rdzv_runs_join(rdzv_runs_t *rs, uint64_t member, const rdzv_join_req_t *req, uint64_t now_ms,
                   rdzv_actions_t *out, ddp_err_t *err);

/* Member member says it is alive at now_ms. run_id may be NULL (member ids are unique).
 * Returns 0 and, when not NULL, the run's current round and state; -ENOENT when member is not a
 * member of run_id (or of any run). */
int rdzv_runs_heartbeat(rdzv_runs_t *rs, const char *run_id, uint64_t member, uint64_t now_ms,
                        int64_t *round, int *state);

/* The answer to a FAIL (wire: the FAIL reply). */
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

/* Member member reports that the worker group of round `round` of run_id failed (what: a short
 * description, such as "rank 5 exited with code 1"; may be NULL). When round is the run's running
 * round and member belongs to it, the round ends (END_ROUND action), restarts_used grows, and past
 * max_restarts the run becomes FAILED (waiting joiners get error replies). Anything else is
 * ignored. Returns 0 and fills *rep (never NULL); -ENOENT when run_id is unknown (rep filled
 * with status IGNORED). */
int rdzv_runs_fail(rdzv_runs_t *rs, const char *run_id, uint64_t member, int64_t round,
                   const char *what, uint64_t now_ms, rdzv_actions_t *out, rdzv_fail_reply_t *rep);

/* Member member is gone (its connection closed) at now_ms: a joiner is dropped; a member of a
 * running round ends it (END_ROUND naming the node). Unknown members are ignored. Returns 0. */
int rdzv_runs_leave(rdzv_runs_t *rs, uint64_t member, uint64_t now_ms, rdzv_actions_t *out);

/* Fires every deadline <= now_ms: last calls close rounds, joiners past join_timeout get error
 * replies, silent members of running rounds are declared dead (CLOSE + END_ROUND), runs empty
 * for empty_keep_ms are freed. Returns 0. */
int rdzv_runs_tick(rdzv_runs_t *rs, uint64_t now_ms, rdzv_actions_t *out);

/* The earliest time at which rdzv_runs_tick has something to do (arm one timer for it), or
 * UINT64_MAX when nothing is pending. May be earlier than strictly needed, never later. */
uint64_t rdzv_runs_next_deadline(const rdzv_runs_t *rs);

/* Appends the JSON status of run_id to out: {run, round, state, min_nodes, max_nodes,
 * restarts_used, max_restarts, last_failure, members: [{member, host, state, group_rank, nproc,
 * want_node_rank, silent_ms}]} (members by group rank, then joiners in join order, then idle).
 * Returns 0, -ENOENT for an unknown run (err says so), -ENOMEM. */
int rdzv_runs_status_json(const rdzv_runs_t *rs, const char *run_id, uint64_t now_ms,
                          ddp_buf_t *out, ddp_err_t *err);

/* Number of runs held (tests, STATS). */
size_t rdzv_runs_count(const rdzv_runs_t *rs);

/* "JOINING", "LAST_CALL", "RUNNING", "FAILED" or "UNKNOWN". Static string. */
const char *rdzv_run_state_name(int state);

/* ---- wire codec (docs/protocol-rdzv.md) ---- */

/* One parsed rendezvous request (any of 0x50-0x53). Strings are NUL-terminated copies. */
typedef struct rdzv_round_req {
    uint8_t cmd;
    rdzv_join_req_t join;         /* JOIN; the other commands fill only join.run_id */
    int64_t round;                /* FAIL */
    char what[RDZV_WHAT_MAX + 1]; /* FAIL */
} rdzv_round_req_t;

/* Parses one rendezvous request (buf[0] is its command, 0x50-0x53) from buf[0..len).
 * Returns the frame length (> 0) and fills req; 0 when incomplete, with *need set to the length
 * the buffer must reach (> len); DDP_EFRAME (unknown command, empty string, NUL inside a string)
 * or DDP_ETOOBIG (string over its bound) with err naming the field and err->offset its byte.
 * Nothing is allocated or borrowed. */
long rdzv__round_req_parse(const uint8_t *buf, size_t len, rdzv_round_req_t *req, size_t *need,
                           ddp_err_t *err);

/* Request encoders (client side): append one frame to b. Return 0, -ENOMEM, or -EINVAL when a
 * string is empty or over its bound. */
int rdzv__join_req_encode(ddp_buf_t *b, const rdzv_join_req_t *req);
int rdzv__heartbeat_req_encode(ddp_buf_t *b, const char *run_id);
int rdzv__fail_req_encode(ddp_buf_t *b, const char *run_id, int64_t round, const char *what);
int rdzv__status_req_encode(ddp_buf_t *b, const char *run_id);

/* Reply encoders (server side): append one reply to b. Return 0 or -ENOMEM. Texts longer than
 * RDZV_REPLY_TEXT_MAX are cut. */
int rdzv__join_reply_encode_ok(ddp_buf_t *b, const rdzv_join_result_t *res);
int rdzv__join_reply_encode_err(ddp_buf_t *b, int code, const char *text);
int rdzv__heartbeat_reply_encode(ddp_buf_t *b, int ok, int64_t round, int state);
int rdzv__fail_reply_encode(ddp_buf_t *b, const rdzv_fail_reply_t *rep);
int rdzv__status_reply_encode(ddp_buf_t *b, int ok, const void *text, size_t n);

/* One parsed rendezvous reply. Every reply starts with its command code echoed, so a client can
 * tell a parked JOIN's answer from a HEARTBEAT's on the same connection. */
typedef struct rdzv_round_reply {
    uint8_t cmd;
    uint8_t status;          /* JOIN: 0 ok, 1 error; HEARTBEAT/STATUS: 0 ok, 1 unknown; FAIL */
    rdzv_join_result_t join; /* JOIN ok */
    int64_t code;            /* JOIN error */
    int64_t round;           /* HEARTBEAT */
    int64_t state;           /* HEARTBEAT */
    rdzv_fail_reply_t fail;  /* FAIL */
    ddp_buf_t text;          /* JOIN error text, STATUS JSON or error; NUL-terminated; owned:
                              * free with ddp_buf_free (parse appends to it after a reset) */
} rdzv_round_reply_t;

/* Parses one rendezvous reply from buf[0..len) (client side). Returns the reply length, 0 when
 * incomplete (*need set), DDP_EPROTO (unknown command or status) or DDP_ETOOBIG, with err set.
 * rep->text must start as DDP_BUF_INIT; each call resets and refills it and keeps its memory,
 * which the caller frees with ddp_buf_free(&rep->text). */
long rdzv__round_reply_parse(const uint8_t *buf, size_t len, rdzv_round_reply_t *rep, size_t *need,
                             ddp_err_t *err);

/* How long the rendezvous reply at the start of buf[0..len) is: a reply parser for
 * rdzv_aclient_raw (arg unused). Returns the length, 0 with *need set when incomplete, or a
 * negative code for a malformed reply. */
long rdzv__round_reply_len(void *arg, const uint8_t *buf, size_t len, size_t *need);

#endif
