/* SPDX-License-Identifier: Apache-2.0
 * ddp-rendezvous --etcd: the daemon stands for election, on each run id it is given, as the
 * agents of the etcd backend do (rdzv_etcd_leader on <prefix>/<run_id>/leader, its store's
 * "ADDR:PORT" as the value). While it leads a run it serves that run's rendezvous; while another
 * candidate leads, it refuses that run's rendezvous commands (rdzv_server_set_may_serve) and
 * stands by. A daemon that loses a run's lease while leading it stops serving that run at once and
 * reports it (lost callback): the daemon exits, and a supervisor starts a fresh candidate whose
 * store holds no stale state of the run. */
#ifndef RDZV_DAEMON_ETCD_H
#define RDZV_DAEMON_ETCD_H

#include <stddef.h>
#include <uv.h>

#include "rdzv_server.h"

/* The most run ids one daemon stands for. */
#define DAEMON_ETCD_MAX_RUNS 64

typedef struct daemon_etcd_opts {
    const char *endpoints;                             /* "HOST:PORT[,HOST:PORT...]" */
    const char *prefix;                                /* the key prefix, "/..." */
    int ttl_s;                                         /* the lease TTL */
    const char *cacert, *cert, *key, *user, *password; /* NULL: none */
    const char *runs[DAEMON_ETCD_MAX_RUNS];            /* the run ids it stands for */
    size_t n_runs;
    const char *host; /* the address it publishes (the others reach its store there) */
} daemon_etcd_opts_t;

typedef struct daemon_etcd daemon_etcd_t;

/* Creates the etcd client, stands for election on every run of o with server's address, installs
 * the may_serve check on server, and turns the loop until the election has named a store for
 * every run (this one or another), at most 10 s. lost(arg, why) runs from the loop when this
 * daemon loses a run it led. Returns 0 with *out set; otherwise *out is set too (stop and free
 * it) and the return is 1 (no store named in time: etcd unreachable, the lease refused) or a
 * negative code, each logged as one line naming the endpoints. */
int daemon_etcd_start(uv_loop_t *loop, rdzv_server_t *server, const daemon_etcd_opts_t *o,
                      void (*lost)(void *arg, const char *why), void *arg, daemon_etcd_t **out);

/* Leaves every election (the leader key deleted where ours, the leases revoked, so that another
 * candidate leads at once), bounded by 1 s, then closes the client; done(arg) runs from the loop
 * once the client is closed. A second call does nothing. */
void daemon_etcd_stop(daemon_etcd_t *d, void (*done)(void *arg), void *arg);

/* Frees d once the loop has run its close (NULL is ignored). */
void daemon_etcd_free(daemon_etcd_t *d);

#endif
