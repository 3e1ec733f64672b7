/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_outage: whether etcd answers, for a candidate that must say so in two lines (one
 * when it stops answering, one when it answers again) and not in one line per failed call
 * (docs/ARCHITECTURE.md "The rendezvous on etcd", etcd unreachable). The agents of the etcd
 * backend (agent/rdzv_elect.c) and ddp-rendezvous --etcd (rendezvous/server/rdzv_daemon_etcd.c)
 * use it.
 *
 * A failed call is not an outage by itself: one member lost while another answers costs no line.
 * rdzv_etcd_outage_failed sends a probe at once (a count-only range of the caller's key, the
 * client trying the members in turn); only when that fails too is etcd reported down, and then it
 * is probed every probe_ms until an answer (a probe's, or a call's that the caller reports with
 * rdzv_etcd_outage_answered) reports it back up. "Down" is reported from a probe's callback,
 * "back up" from a probe's or inside rdzv_etcd_outage_answered (the caller's own callback). A
 * watcher never set up (all zero) ignores every call. */
#ifndef RDZV_ETCD_OUTAGE_H
#define RDZV_ETCD_OUTAGE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rdzv_etcd.h"

/* down 1: etcd stopped answering (why: the probe's error text, or NULL); 0: it answers again. */
typedef void (*rdzv_etcd_outage_fn)(void *arg, int down, const char *why);

typedef struct rdzv_etcd_outage {
    rdzv_etcd_t *etcd;
    uv_timer_t timer; /* the next probe */
    const char *key;  /* borrowed: lives as long as the watcher */
    size_t key_len;
    uint64_t probe_ms;
    int down;    /* reported down, not back up yet */
    int pending; /* a probe on its way */
    int closed;
    rdzv_etcd_outage_fn report;
    void *arg;
} rdzv_etcd_outage_t;

/* Sets o up on loop for etcd, probing key (borrowed) every probe_ms while etcd is down. Returns 0
 * or a uv error. */
int rdzv_etcd_outage_init(rdzv_etcd_outage_t *o, uv_loop_t *loop, rdzv_etcd_t *etcd,
                          const char *key, uint64_t probe_ms, rdzv_etcd_outage_fn report,
                          void *arg);
/* A call to etcd failed: probe now (unless a probe is on its way or etcd is already down). */
void rdzv_etcd_outage_failed(rdzv_etcd_outage_t *o);
/* A call to etcd was answered: etcd is up (reported when it was down). */
void rdzv_etcd_outage_answered(rdzv_etcd_outage_t *o);
/* Whether etcd is reported down now. */
static inline int rdzv_etcd_outage_down(const rdzv_etcd_outage_t *o) {
    return o->down;
}
/* Stops probing and closes the timer; no report after it. A probe on its way ends with the
 * client (closing it cancels its calls). o must live until the loop has closed the timer. */
void rdzv_etcd_outage_close(rdzv_etcd_outage_t *o);

#endif
