/* SPDX-License-Identifier: Apache-2.0
 * rdzv_round_calls: the rendezvous requests (rdzv_proto.h) and the exit barrier as typed
 * asynchronous calls on an rdzv_aclient connection. Each call encodes its request, sends it,
 * decodes the reply and checks that the reply answers this command, so that a program taking part
 * in rounds (the agent) never builds or parses a frame, nor names a key of the store's layout
 * (rdzv_layout.h).
 *
 * The connection rules are rdzv_aclient's: calls on one connection are answered in order, a
 * JOIN parks (nothing after it is sent until it is answered), and the callback runs from the
 * loop exactly once for each call that returned 0. */
#ifndef RDZV_ROUND_CALLS_H
#define RDZV_ROUND_CALLS_H

#include <stdint.h>

#include "ddp_err.h"
#include "rdzv_async_client.h"
#include "rdzv_proto.h"

/* Completion of one call. status 0: rep is the decoded reply to the call's own command (its
 * rep->status is the command's answer, as rdzv_round_reply_t says); rep and rep->text are
 * borrowed, valid until the callback returns. status < 0: the call failed and rep is NULL:
 * rdzv_acb_t's codes (DDP_ECLOSED, DDP_ETIMEOUT, DDP_ECANCELED, ...), or DDP_EPROTO for a reply
 * that does not parse or answers another command; errtext is one line saying what failed. */
typedef void (*rdzv_acall_cb)(void *arg, int status, const rdzv_round_reply_t *rep,
                              const char *errtext);

/* Each call returns 0 when queued (cb runs later) or a negative code described in err (may be
 * NULL), cb never called: -EINVAL (a string empty or over its bound), -ENOMEM, and the codes
 * of rdzv_aclient_raw (DDP_ECLOSED: no connection). A call other than JOIN is bounded by the
 * connection's io_timeout_ms. */

/* JOIN: parked until the round closes or the server gives up (join_timeout). timeout_ms bounds
 * the wait on this side (< 0: none); when it runs out the call ends with DDP_ETIMEOUT and the
 * connection is closed. */
int rdzv_acall_join(rdzv_aclient_t *c, const rdzv_join_req_t *req, int timeout_ms, rdzv_acall_cb cb,
                    void *arg, ddp_err_t *err);

/* The calls of the commands whose reply comes at once, one per row of rdzv_commands.h:
 *   int rdzv_acall_<name>(rdzv_aclient_t *c, RDZV_REQ_PARAMS_<its request layout>,
 *                         rdzv_acall_cb cb, void *arg, ddp_err_t *err);
 *   heartbeat(c, run_id, ...)            HEARTBEAT for this connection's member of run_id
 *   beat_for(c, run_id, member, member_key, ...)
 *                                        a heartbeat for member (with its key, from the JOIN
 *                                        reply) from any connection
 *   fail(c, run_id, round, what, ...)    this member's group of round failed; what says how
 *   status(c, run_id, ...)               the run's state as JSON in rep->text
 *   status_page(c, run_id, first, limit, ...)
 *                                        the run's counts by member state and its members
 *                                        [first, first + limit) as JSON in rep->text (limit 0:
 *                                        the counts alone)
 *   abort(c, run_id, why, ...)           stop the run for good on every node, saying why
 *   unfit(c, run_id, host, reason, ...)  host failed its health check for reason and does not
 *                                        join (rep->status 0: recorded)
 *   finish(c, run_id, round, ...)        round passed its exit barrier on every node
 *                                        (rep->status 0: the run is done) */
#define RDZV_ACALL_AT_ONCE_DECL_(name, req)                                                        \
    int rdzv_acall_##name(rdzv_aclient_t *c, RDZV_REQ_PARAMS_##req, rdzv_acall_cb cb, void *arg,   \
                          ddp_err_t *err);
#define RDZV_ACALL_DECL_join_(name, req) /* rdzv_acall_join, above */
#define RDZV_ACALL_DECL_beat_(name, req) RDZV_ACALL_AT_ONCE_DECL_(name, req)
#define RDZV_ACALL_DECL_fail_(name, req) RDZV_ACALL_AT_ONCE_DECL_(name, req)
#define RDZV_ACALL_DECL_json_(name, req) RDZV_ACALL_AT_ONCE_DECL_(name, req)
#define RDZV_ACALL_DECL_ack_(name, req) RDZV_ACALL_AT_ONCE_DECL_(name, req)
#define RDZV_ACALL_DECL_(code, NAME, name, req, rep) RDZV_ACALL_DECL_##rep##_(name, req)
RDZV_COMMANDS(RDZV_ACALL_DECL_)
#undef RDZV_ACALL_DECL_

/* The exit barrier of round `round` of run_id (docs/protocol-rdzv.md, "Keys"). Its counter holds
 * arrivals (+1 each) and, once a node has seen the round end before the barrier completed, one
 * RDZV_BARRIER_SEAL per such node. The store applies ADDs one at a time, so every node reads the
 * same verdict from the value its own ADD returned: the barrier passed if and only if the last
 * arrival came before the first seal. The last node to arrive SETs the done key, on which the
 * others WAIT. */
#define RDZV_BARRIER_SEAL ((int64_t)1 << 32)

/* The counter as one ADD left it. */
typedef struct rdzv_barrier_count {
    int64_t arrived; /* arrivals counted: the value modulo RDZV_BARRIER_SEAL */
    int sealed;      /* a seal came first: the value is at least RDZV_BARRIER_SEAL */
} rdzv_barrier_count_t;

/* Completion of an ADD to the counter: status 0 and count (borrowed), or a negative code as for
 * rdzv_acall_cb (DDP_EPROTO: the reply is not an integer) with count NULL and errtext set. */
typedef void (*rdzv_acall_count_cb)(void *arg, int status, const rdzv_barrier_count_t *count,
                                    const char *errtext);
/* Completion of a request without a value: status 0, or a negative code with errtext set. */
typedef void (*rdzv_acall_done_cb)(void *arg, int status, const char *errtext);

/* Arrives at the barrier (ADD 1); the count says whether this node was the last, or too late. */
int rdzv_acall_barrier_arrive(rdzv_aclient_t *c, const char *run_id, int64_t round,
                              rdzv_acall_count_cb cb, void *arg, ddp_err_t *err);

/* Seals the barrier (ADD RDZV_BARRIER_SEAL): the round ended; the count says whether every
 * node had arrived before. */
int rdzv_acall_barrier_seal(rdzv_aclient_t *c, const char *run_id, int64_t round,
                            rdzv_acall_count_cb cb, void *arg, ddp_err_t *err);

/* The last arrival releases the others: SETs the done key. */
int rdzv_acall_barrier_release(rdzv_aclient_t *c, const char *run_id, int64_t round,
                               rdzv_acall_done_cb cb, void *arg, ddp_err_t *err);

/* WAITs for the done key up to timeout_ms (< 0: forever): status 0 once released, DDP_ETIMEOUT
 * when the time ran out (the connection stays usable). Parked: later calls on this connection
 * wait behind it. */
int rdzv_acall_barrier_wait(rdzv_aclient_t *c, const char *run_id, int64_t round, int timeout_ms,
                            rdzv_acall_done_cb cb, void *arg, ddp_err_t *err);

#endif
