/* SPDX-License-Identifier: Apache-2.0
 * rdzv_commands: the one list of the rendezvous commands (docs/protocol-rdzv.md). Each row of
 * RDZV_COMMANDS is
 *
 *   X(code, NAME, name, request layout, reply layout)
 *
 * and everything the store and its clients know per command comes from it:
 *   - the code RDZV_CMD_RDZV_<NAME> and the name "RDZV_<NAME>" of logs and errors (rdzv_proto.h,
 *     rdzv__cmd_name, rdzv_round_cmd_name);
 *   - the request encoder rdzv_<name>_req_encode(b, RDZV_REQ_PARAMS_<layout>) and the reply
 *     encoder rdzv_<name>_reply_encode(b, RDZV_REP_PARAMS_<layout>) (rdzv_proto.h), and which
 *     reader the request and reply parsers run on the bytes after the command (rdzv_proto.c);
 *   - the typed call rdzv_acall_<name> (client/rdzv_round_calls.h; a command whose reply has the
 *     join layout parks, and has its own call);
 *   - the store's dispatch table: it runs the handler on_<name> (server/rdzv_server_round.c);
 *   - the commands the rendezvous fuzzer aims at (fuzz/fuzz_rdzv_round.c);
 *   - the table of docs/protocol-rdzv.md, which tests/unit/test_rdzv_commands.c holds to these
 *     rows (codes and names, in this order, and a section per command).
 *
 * Adding a command: a row here, its handler on_<name> in rdzv_server_round.c (with the event it
 * feeds to the round machine), and its row and section in docs/protocol-rdzv.md. rdzv_proto.c
 * changes only for a layout no command has yet: a RDZV_REQ_* or RDZV_REP_* pair below and its
 * reader and writer there. Codes run consecutively from RDZV_CMD_RDZV_FIRST: the parsers and the
 * dispatch index tables by code (rdzv_proto.c checks it when compiled). */
#ifndef RDZV_COMMANDS_H
#define RDZV_COMMANDS_H

/* The first rendezvous command code (after the store's own 0x40-0x4f). */
#define RDZV_CMD_RDZV_FIRST 0x50

/* The request layouts: what follows the command byte and the blob run id, and the parameters of
 * the encoders of the commands of that layout (RDZV_REQ_ARGS_*: the same names as arguments).
 *   run_only    nothing more
 *   join        JOIN's fields (rdzv_join_req_t, whose run id the encoder writes)
 *   round_what  i64 round, blob what (0..RDZV_WHAT_MAX bytes, longer cut)
 *   what        blob what (0..RDZV_WHAT_MAX bytes, longer cut)
 *   member      i64 member, i64 member_key
 *   page        i64 first, i64 limit (each 0..RDZV_ROUND_MAX_NODES)
 *   host_what   blob host, blob what (0..RDZV_WHAT_MAX bytes, longer cut)
 *   round_only  i64 round */
#define RDZV_REQ_PARAMS_run_only const char *run_id
#define RDZV_REQ_ARGS_run_only run_id
#define RDZV_REQ_PARAMS_join const rdzv_join_req_t *req
#define RDZV_REQ_ARGS_join req
#define RDZV_REQ_PARAMS_round_what const char *run_id, int64_t round, const char *what
#define RDZV_REQ_ARGS_round_what run_id, round, what
#define RDZV_REQ_PARAMS_what const char *run_id, const char *what
#define RDZV_REQ_ARGS_what run_id, what
#define RDZV_REQ_PARAMS_member const char *run_id, int64_t member, int64_t member_key
#define RDZV_REQ_ARGS_member run_id, member, member_key
#define RDZV_REQ_PARAMS_page const char *run_id, int64_t first, int64_t limit
#define RDZV_REQ_ARGS_page run_id, first, limit
#define RDZV_REQ_PARAMS_host_what const char *run_id, const char *host, const char *what
#define RDZV_REQ_ARGS_host_what run_id, host, what
#define RDZV_REQ_PARAMS_round_only const char *run_id, int64_t round
#define RDZV_REQ_ARGS_round_only run_id, round

/* The reply layouts: what follows the echoed command byte and the status byte, and the
 * parameters of the encoders of the commands of that layout.
 *   join  status 0: the assignment (rdzv_join_result_t); status 1: i64 code, blob text (its
 *         encoder is rdzv_join_reply_encode_err). The reply comes when the round closes.
 *   beat  i64 round, i64 state; status 0 ok, 1 not a member
 *   fail  i64 round, i64 restarts_used, i64 max_restarts; status RDZV_FAIL_*
 *   json  blob JSON (status 0) or error text (status 1)
 *   ack   nothing; status 0 done, 1 ignored */
#define RDZV_REP_PARAMS_join const rdzv_join_result_t *res
#define RDZV_REP_ARGS_join res
#define RDZV_REP_PARAMS_beat int ok, int64_t round, int state
#define RDZV_REP_ARGS_beat ok, round, state
#define RDZV_REP_PARAMS_fail const rdzv_fail_reply_t *rep
#define RDZV_REP_ARGS_fail rep
#define RDZV_REP_PARAMS_json int ok, const void *text, size_t n
#define RDZV_REP_ARGS_json ok, text, n
#define RDZV_REP_PARAMS_ack int ok
#define RDZV_REP_ARGS_ack ok

/* clang-format off */
#define RDZV_COMMANDS(X)                                                                           \
    /* park until the round closes -> assignment or error */                                      \
    X(0x50, JOIN,        join,        join,       join)                                            \
    /* refresh liveness -> current round and state */                                             \
    X(0x51, HEARTBEAT,   heartbeat,   run_only,   beat)                                            \
    /* the worker group of a round failed -> counted or not */                                    \
    X(0x52, FAIL,        fail,        round_what, fail)                                            \
    /* -> JSON of the run */                                                                      \
    X(0x53, STATUS,      status,      run_only,   json)                                            \
    /* a member stops the run for good -> done or ignored */                                      \
    X(0x54, ABORT,       abort,       what,       ack)                                             \
    /* a HEARTBEAT for a member, from another connection */                                       \
    X(0x55, BEAT_FOR,    beat_for,    member,     beat)                                            \
    /* -> JSON of the run: counts and a page of members */                                        \
    X(0x56, STATUS_PAGE, status_page, page,       json)                                            \
    /* a host failed its health check -> recorded or not */                                       \
    X(0x57, UNFIT,       unfit,       host_what,  ack)                                             \
    /* the round passed its exit barrier: the run is done */                                      \
    X(0x58, FINISH,      finish,      round_only, ack)                                             \
    /* a node's ranks' compute times since its last report -> the run's stragglers */            \
    X(0x59, TIMING,      timing,      round_what, json)
/* clang-format on */

/* The codes RDZV_CMD_RDZV_<NAME>, and RDZV_CMD_RDZV_COUNT, RDZV_CMD_RDZV_LAST. */
#define RDZV_CMD_ENUM_(code, NAME, name, req, rep) RDZV_CMD_RDZV_##NAME = code,
#define RDZV_CMD_COUNT_(code, NAME, name, req, rep) +1
enum {
    RDZV_COMMANDS(RDZV_CMD_ENUM_) RDZV_CMD_RDZV_COUNT = 0 RDZV_COMMANDS(RDZV_CMD_COUNT_),
    RDZV_CMD_RDZV_LAST = RDZV_CMD_RDZV_FIRST + RDZV_CMD_RDZV_COUNT - 1,
};
#undef RDZV_CMD_ENUM_
#undef RDZV_CMD_COUNT_

#endif
