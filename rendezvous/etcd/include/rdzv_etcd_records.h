/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_records: what a run's rendezvous store must not lose when another is elected in its
 * place, kept in etcd under <prefix>/<run_id>/ (docs/protocol-rdzv.md, "The etcd key layout"):
 *   <prefix>/<run_id>/done        {"round":N}: the run passed its exit barrier at round N (DONE)
 *   <prefix>/<run_id>/hosts/HOST  {"excluded":B,"failures":F,"last_failure":"..."}: HOST's
 *                                 quarantine record
 * Every candidate that serves a run's store uses it (the agents of the etcd backend,
 * agent/rdzv_durable.c; ddp-rendezvous --etcd, rendezvous/server/rdzv_daemon_etcd.c): the store's
 * decisions are written with the leader's fenced put (a deposed leader writes nothing), and a
 * newly elected leader loads the records into its store before that store serves.
 *
 * The records hang on the run's records lease (RDZV_ETCD_RECORDS_TTL_S), not on a leader's: the
 * first leader grants it, every later one finds its id on the records it loads and keeps it alive
 * while it leads. The records go an hour after the last leader of the run left, as the c10d store
 * forgets a finished run an hour after its last node, so a run id such as the default "none" is
 * free again.
 *
 * It knows the store only through the caller's hooks (restore_done, restore_host): the etcd
 * library depends on common/ alone. Everything runs on the client's loop; callbacks run from the
 * loop. */
#ifndef RDZV_ETCD_RECORDS_H
#define RDZV_ETCD_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_err.h"
#include "rdzv_etcd.h"

/* The records' lease, how often a leader renews it, the next load after a failed one (etcd
 * away), the tries of one record's write (each bounded by the client's call timeout). */
#define RDZV_ETCD_RECORDS_TTL_S 3600
#define RDZV_ETCD_RECORDS_RENEW_MS ((uint64_t)RDZV_ETCD_RECORDS_TTL_S * 1000 / 6)
#define RDZV_ETCD_RECORDS_RETRY_MS 500
#define RDZV_ETCD_RECORDS_TRIES 3
/* The longest record key, host and last failure text. */
#define RDZV_ETCD_RECORDS_KEY_MAX 1024
#define RDZV_ETCD_RECORD_HOST_MAX 255
#define RDZV_ETCD_RECORD_TEXT_MAX 1024

/* ---- the codec (pure) ---- */

/* "<prefix>/<run_id>/<what><host>" into out (cap bytes); host may be NULL. what "" names the
 * run's directory (the range a leader loads), "done" the DONE mark, "hosts/" with host a host's
 * record. Returns the length, or -ENAMETOOLONG. */
int rdzv_etcd_records_key(char *out, size_t cap, const char *prefix, const char *run_id,
                          const char *what, const char *host);

/* A record's value, compact JSON with sorted keys, malloc'd (the caller frees it); NULL: out of
 * memory. */
char *rdzv_etcd_record_done_encode(int64_t round);
char *rdzv_etcd_record_host_encode(int64_t failures, int excluded, const char *last_failure);

typedef enum {
    RDZV_ETCD_RECORD_OTHER = 0, /* another key under the run (its leader key): not a record */
    RDZV_ETCD_RECORD_DONE = 1,
    RDZV_ETCD_RECORD_HOST = 2
} rdzv_etcd_record_kind_t;

typedef struct rdzv_etcd_record {
    rdzv_etcd_record_kind_t kind;
    int64_t round; /* DONE */
    /* HOST: the host (from the key), its failures, whether excluded, its last failure. */
    char host[RDZV_ETCD_RECORD_HOST_MAX + 1];
    int64_t failures;
    int excluded;
    char last_failure[RDZV_ETCD_RECORD_TEXT_MAX + 1];
} rdzv_etcd_record_t;

/* Decodes the record at the key whose part after "<prefix>/<run_id>/" is what (what_len bytes)
 * with value (value_len bytes). Returns its kind (OTHER for a key that names no record, out
 * untouched but kind), or -EINVAL for a record key whose value is not the record's JSON (exactly
 * its fields, a round or failures >= 0, a host or text within bounds). */
int rdzv_etcd_record_decode(const uint8_t *what, size_t what_len, const uint8_t *value,
                            size_t value_len, rdzv_etcd_record_t *out);

/* ---- one run's records, kept by the candidate that serves its store ---- */

typedef struct rdzv_etcd_records rdzv_etcd_records_t;

typedef struct rdzv_etcd_records_opts {
    const char *prefix; /* the key prefix, "/..." (copied) */
    const char *run_id; /* (copied) */
    /* The run's leader key, whose create revision fences the writes (copied). */
    const char *leader_key;
    /* Load one record into the store: 0, or a negative code with err set (the record is logged,
     * naming its key, and ignored). */
    int (*restore_done)(void *arg, int64_t round, ddp_err_t *err);
    int (*restore_host)(void *arg, const char *host, int64_t failures, int excluded,
                        const char *last_failure, ddp_err_t *err);
    /* The records are in the store and their lease is held: the store may serve from now on. */
    void (*ready)(void *arg);
    void *arg;
} rdzv_etcd_records_opts_t;

/* Creates the keeper of one run's records on c (and c's loop). Returns 0 with *out set, or
 * -EINVAL (a missing field, a key over RDZV_ETCD_RECORDS_KEY_MAX), -ENOMEM or a uv error with
 * err set. */
int rdzv_etcd_records_new(rdzv_etcd_t *c, const rdzv_etcd_records_opts_t *o,
                          rdzv_etcd_records_t **out, ddp_err_t *err);

/* The caller leads the run under token (the leader key's create revision): reads the records
 * (one range), loads them into the store, renews the records lease (or grants one), then
 * ready(arg); a failed read is retried every RDZV_ETCD_RECORDS_RETRY_MS meanwhile. While it leads
 * the lease is renewed every RDZV_ETCD_RECORDS_RENEW_MS. */
void rdzv_etcd_records_lead(rdzv_etcd_records_t *r, int64_t token);

/* The leadership ended: nothing more is loaded, renewed or written; what comes back for it is
 * dropped (a write already sent ends as etcd decides: fenced, since another leads). */
void rdzv_etcd_records_stop(rdzv_etcd_records_t *r);

/* 1 once the records are loaded under the current leadership (ready reported), else 0. */
int rdzv_etcd_records_ready(const rdzv_etcd_records_t *r);

/* The store decided a record: written fenced on the leadership, attached to the records lease,
 * tried up to RDZV_ETCD_RECORDS_TRIES times while it leads. Not loaded (or not leading): logged,
 * not written. */
void rdzv_etcd_records_put_done(rdzv_etcd_records_t *r, int64_t round);
void rdzv_etcd_records_put_host(rdzv_etcd_records_t *r, const char *host, int64_t failures,
                                int excluded, const char *last_failure);

/* then(arg) once no write is on its way (at once, inside this call, when none is): a leader that
 * resigns writes what its store decided first. The caller bounds the wait. */
void rdzv_etcd_records_flush(rdzv_etcd_records_t *r, void (*then)(void *arg), void *arg);

/* Stops and frees r once its calls have come back (the client's close cancels them): close r
 * before the client. NULL is ignored. */
void rdzv_etcd_records_close(rdzv_etcd_records_t *r);

#endif
