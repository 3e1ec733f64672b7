/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_leader: leader election on etcd v3, on the caller's loop, through an rdzv_etcd
 * client.
 *
 * A candidate holds a lease of ttl_s seconds, renews it every ttl/3 and campaigns with
 *   txn(create_revision(key) == 0  ->  put(key, value, lease)).
 * The winner leads; the leader key's create revision is its fencing token (rdzv_etcd_fenced_put).
 * The others observe the key (range, then a watch from the next revision): a delete makes them
 * campaign at once, a put names the new leader. An observer (value NULL) never campaigns.
 *
 * The lease is lost when etcd says it is gone, or when ttl has passed since the sending of the
 * last keepalive etcd answered (etcd cannot have expired it earlier: it renews on receipt). The
 * candidate is told at that moment, from the loop's timer (RDZV_LEADER_LOST), never later than
 * that deadline while its loop runs; a process that was stopped learns it on its first loop turn.
 * Its leadership ended at rdzv_etcd_leader_deadline(), which is where a new leader's can begin.
 * After a loss it grants a new lease and campaigns again.
 *
 * Every callback runs from the loop, never inside an rdzv_etcd_leader_* call. Close the election
 * before the client it uses. */
#ifndef RDZV_ETCD_LEADER_H
#define RDZV_ETCD_LEADER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ddp_err.h"
#include "rdzv_etcd.h"

typedef struct rdzv_etcd_leader rdzv_etcd_leader_t;

typedef enum {
    RDZV_LEADER_LEADING,  /* this candidate leads; revision: the fencing token */
    RDZV_LEADER_OBSERVED, /* another leads: value and revision (its key's create revision) */
    RDZV_LEADER_NONE,     /* nobody known to lead now: an observer saw the key go; a candidate
                           * not leading campaigns (the next report names the leader) */
    RDZV_LEADER_LOST,     /* this candidate lost its lease, and its leadership when it led: why */
    RDZV_LEADER_ERROR     /* a call to etcd failed, retried: why (one line naming the endpoint) */
} rdzv_leader_event_t;

/* One report: value/value_len borrowed for the call (OBSERVED; LEADING: our own value), revision
 * as above (LOST: the revision we led under, 0 when we did not lead), why for LOST and ERROR. */
typedef void (*rdzv_leader_cb)(void *arg, rdzv_leader_event_t ev, const uint8_t *value,
                               size_t value_len, int64_t revision, const char *why);

typedef struct rdzv_etcd_leader_opts {
    const void *key; /* the leader key, e.g. "<prefix>/<run_id>/leader" */
    size_t key_len;
    const void *value; /* what the leader publishes (its address); NULL: observe only */
    size_t value_len;
    int ttl_s; /* the lease TTL, 1..3600 */
    rdzv_leader_cb cb;
    void *arg;
} rdzv_etcd_leader_opts_t;

/* Starts a candidate (or an observer) on c's loop. Returns 0 with *out set, or a negative code
 * described in err: -EINVAL (no key, ttl out of range, no callback), -ENOMEM. */
int rdzv_etcd_leader_start(rdzv_etcd_t *c, const rdzv_etcd_leader_opts_t *opts,
                           rdzv_etcd_leader_t **out, ddp_err_t *err);

/* Steps down: deletes the key if it is still ours (txn on its create revision), revokes the lease
 * and goes on as an observer; the other candidates see the delete and campaign at once. */
void rdzv_etcd_leader_resign(rdzv_etcd_leader_t *l);

/* Ends it: stops the timers and the watch, deletes the key if ours and revokes the lease (each
 * bounded by the client's timeout), then close_cb(arg) runs from the loop and l is freed. No
 * report runs after this call. NULL and a second call are ignored. */
void rdzv_etcd_leader_close(rdzv_etcd_leader_t *l, void (*close_cb)(void *arg), void *arg);

/* The loop time (uv_now's milliseconds) until which the current lease is certainly alive, or,
 * during a LOST report, when the lost one ended: where the leadership ended. 0 before a lease. */
uint64_t rdzv_etcd_leader_deadline(const rdzv_etcd_leader_t *l);

/* 1 when this candidate leads and its lease's deadline has not passed by the clock now (the loop's
 * time is updated first): what a leader asks before it acts as one (accepts a JOIN), since after
 * a stop an I/O callback may run on the loop turn before the deadline's timer reports the loss. */
int rdzv_etcd_leader_leading(rdzv_etcd_leader_t *l);

/* Put key = value (attached to lease, 0: none) only if leader_key's create revision is still
 * revision: the leader's write of what must not be lost. cb gets 0, DDP_EFENCED with
 * errtext "... fenced out ..." when another leads (or none), or the client's errors. Returns as
 * rdzv_etcd_txn. */
int rdzv_etcd_fenced_put(rdzv_etcd_t *c, const void *leader_key, size_t leader_key_len,
                         int64_t revision, const void *key, size_t key_len, const void *value,
                         size_t value_len, int64_t lease, rdzv_etcd_cb cb, void *arg,
                         ddp_err_t *err);

#endif
