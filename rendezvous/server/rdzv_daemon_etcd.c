/* SPDX-License-Identifier: Apache-2.0
 * ddp-rendezvous --etcd (rdzv_daemon_etcd.h): one etcd client, one candidate per run id, all
 * publishing this daemon's store address; docs/ARCHITECTURE.md "The rendezvous on etcd". The
 * election is rdzv_etcd_leader's, the leader key's value rdzv_etcd_store's, the run's records
 * (its DONE mark, its hosts' quarantine) rdzv_etcd_records': the agents campaign with the same
 * three. */
#include "rdzv_daemon_etcd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_escape.h"
#include "ddp_log.h"
#include "rdzv_etcd_leader.h"
#include "rdzv_etcd_outage.h"
#include "rdzv_etcd_records.h"
#include "rdzv_etcd_store.h"
#include "rdzv_proto.h"

/* How long the start waits for etcd to name a store for every run, the bound on each call to
 * etcd, how often etcd is asked whether it answers again while it is away, and the bound on
 * resigning at the exit: the agent's (agent/rdzv_elect.c). */
#define DAEMON_ETCD_START_MS 10000
#define DAEMON_ETCD_CALL_MS 2000
#define DAEMON_ETCD_PROBE_MS 1000
#define DAEMON_ETCD_RESIGN_MS 1000
/* The longest key prefix (the agent's etcd_prefix has the same bound). */
#define DAEMON_ETCD_PREFIX_MAX 256
#define DAEMON_ETCD_VALUE_MAX (RDZV_ETCD_STORE_HOST_MAX + 16)

typedef struct daemon_run {
    daemon_etcd_t *d;
    const char *id;
    char key[DAEMON_ETCD_PREFIX_MAX + RDZV_RUN_ID_MAX + 16]; /* <prefix>/<run_id>/leader */
    rdzv_etcd_leader_t *leader;
    rdzv_etcd_records_t *records;      /* its records in etcd: loaded and written while it leads */
    int named;                         /* the election named a store for this run */
    int leading;                       /* ... this daemon's */
    char store[DAEMON_ETCD_VALUE_MAX]; /* the store another candidate publishes, as read */
    int store_gone;                    /* ... no longer known to serve (the election reopened) */
} daemon_run_t;

struct daemon_etcd {
    uv_loop_t *loop;
    rdzv_server_t *server;
    rdzv_etcd_t *etcd;
    const char *endpoints;
    char value[DAEMON_ETCD_VALUE_MAX]; /* this daemon's store, "ADDR:PORT" */
    daemon_run_t runs[DAEMON_ETCD_MAX_RUNS];
    size_t n_runs;
    int started;               /* the start's wait is over: a leadership won later is a failover */
    int etcd_down;             /* the start said etcd does not answer: said once until it does */
    rdzv_etcd_outage_t outage; /* once started: probes after a failed call, two lines an outage */
    uv_timer_t timer;          /* while stopping: the resign bound */
    uv_timer_t lost_timer;     /* defers the lost report out of the election's callback */
    const char *lost_why;
    char lost_line[512];
    void (*lost)(void *arg, const char *why);
    void *lost_arg;
    int stopping, finished;
    int client_closing;  /* finish closed the client: done waits for it */
    size_t leaders_open; /* while stopping: candidates still resigning */
    void (*done)(void *arg);
    void *done_arg;
};

/* etcd answered: the outage watcher hears it, and a start that said etcd does not answer says it
 * answers again, once. */
static void etcd_back(daemon_etcd_t *d) {
    rdzv_etcd_outage_answered(&d->outage);
    if (!d->etcd_down)
        return;
    d->etcd_down = 0;
    ddp_log(DDP_LOG_WARN, "etcd at %s answers again", rdzv_etcd_endpoint(d->etcd));
}

/* The outage watcher's two lines (rdzv_etcd_outage.h: a failed call is an outage only when the
 * probe after it fails too). */
static void on_outage(void *arg, int down, const char *why) {
    daemon_etcd_t *d = arg;
    if (d->stopping)
        return;
    if (down)
        ddp_log(DDP_LOG_WARN,
                "etcd unreachable: %s; the runs this store serves go on, nothing new is decided "
                "until it answers",
                why != NULL ? why : "no answer");
    else
        ddp_log(DDP_LOG_WARN, "etcd at %s answers again", rdzv_etcd_endpoint(d->etcd));
}

static void on_lost_timer(uv_timer_t *t) {
    daemon_etcd_t *d = t->data;
    if (!d->stopping)
        d->lost(d->lost_arg, d->lost_line);
}

static void etcd_failed(daemon_etcd_t *d, const char *why) {
    if (d->started) {
        if (!d->stopping)
            rdzv_etcd_outage_failed(&d->outage);
        return;
    }
    if (!d->etcd_down)
        ddp_log(DDP_LOG_WARN, "%s; retrying for up to %d s", why != NULL ? why : "no answer",
                DAEMON_ETCD_START_MS / 1000);
    d->etcd_down = 1;
}

/* ---- the run's records (rdzv_etcd_records.h) ---- */

static int restore_done(void *arg, int64_t round, ddp_err_t *err) {
    daemon_run_t *run = arg;
    return rdzv_server_restore_done(run->d->server, run->id, round, err);
}

static int restore_host(void *arg, const char *host, int64_t failures, int excluded,
                        const char *last_failure, ddp_err_t *err) {
    daemon_run_t *run = arg;
    return rdzv_server_restore_host(run->d->server, run->id, host, failures, excluded, last_failure,
                                    err);
}

/* The run's records are in the store: it serves the run from now on. */
static void on_records_ready(void *arg) {
    daemon_run_t *run = arg;
    daemon_etcd_t *d = run->d;
    run->named = 1;
    /* The first is the daemon's start; a later one takes a run over, said by default. */
    ddp_log(d->started ? DDP_LOG_WARN : DDP_LOG_INFO,
            "run %s: this store serves its rendezvous at %s (elected through etcd at %s)", run->id,
            d->value, d->endpoints);
}

static daemon_run_t *run_of(daemon_etcd_t *d, const char *run_id) {
    for (size_t i = 0; i < d->n_runs; i++)
        if (strcmp(d->runs[i].id, run_id) == 0)
            return &d->runs[i];
    return NULL;
}

/* The store's rdzv_server_durable_t: a decision about a run this daemon stands for is written
 * under its leadership; the other runs it serves keep nothing in etcd. */
static void on_run_done(void *arg, const char *run_id, int64_t round) {
    daemon_run_t *run = run_of(arg, run_id);
    if (run != NULL)
        rdzv_etcd_records_put_done(run->records, round);
}

static void on_host_record(void *arg, const char *run_id, const char *host, int64_t failures,
                           int excluded, const char *last_failure) {
    daemon_run_t *run = run_of(arg, run_id);
    if (run != NULL)
        rdzv_etcd_records_put_host(run->records, host, failures, excluded, last_failure);
}

static const rdzv_server_durable_t records_hooks = {.run_done = on_run_done,
                                                    .host_record = on_host_record};

static void on_leader(void *arg, rdzv_leader_event_t ev, const uint8_t *value, size_t value_len,
                      int64_t revision, const char *why) {
    daemon_run_t *run = arg;
    daemon_etcd_t *d = run->d;
    char addr[RDZV_ETCD_STORE_HOST_MAX + 1], esc[4 * DAEMON_ETCD_VALUE_MAX + 8];
    int port;
    switch (ev) {
    case RDZV_LEADER_LEADING:
        etcd_back(d);
        run->leading = 1;
        run->store[0] = '\0';
        /* The store serves the run once its records are in it (on_records_ready). */
        rdzv_etcd_records_lead(run->records, revision);
        break;
    case RDZV_LEADER_OBSERVED:
        etcd_back(d);
        if (rdzv_etcd_store_addr_parse(value, value_len, addr, sizeof addr, &port) < 0) {
            ddp_str_escape(esc, sizeof esc, (const char *)value, value_len);
            ddp_log(DDP_LOG_WARN,
                    "etcd at %s: the leader key %s holds '%s', not a store's address; waiting "
                    "for another leader",
                    rdzv_etcd_endpoint(d->etcd), run->key, esc);
            break;
        }
        run->named = 1;
        run->leading = 0;
        run->store_gone = 0;
        if (value_len < sizeof run->store &&
            (strlen(run->store) != value_len || memcmp(run->store, value, value_len) != 0)) {
            memcpy(run->store, value, value_len);
            run->store[value_len] = '\0';
            ddp_log(DDP_LOG_INFO, "run %s: standing by; its rendezvous store is at %s", run->id,
                    run->store);
        }
        break;
    case RDZV_LEADER_NONE: run->store_gone = 1; break; /* redirect: "not yet" */
    case RDZV_LEADER_LOST:
        if (run->leading) {
            run->leading = 0;
            rdzv_etcd_records_stop(run->records);
            snprintf(d->lost_line, sizeof d->lost_line,
                     "run %s: lost the etcd lease of its rendezvous store (%s): stopped serving it",
                     run->id, why != NULL ? why : "expired");
            if (!uv_is_active((uv_handle_t *)&d->lost_timer))
                uv_timer_start(&d->lost_timer, on_lost_timer, 0, 0);
            break;
        }
        /* A candidate that did not lead lost only its lease: etcd is away. */
        __attribute__((fallthrough));
    case RDZV_LEADER_ERROR: etcd_failed(d, why); break;
    }
}

/* Whether this daemon serves run now: only while it leads the run by the clock now, and not yet
 * (RDZV_NOT_YET) while it loads the run's records. */
static int run_may_serve(const daemon_run_t *run) {
    if (run->leader == NULL || !rdzv_etcd_leader_leading(run->leader))
        return 0;
    return rdzv_etcd_records_ready(run->records) ? 1 : RDZV_NOT_YET;
}

/* The store's rdzv_server_set_may_serve check: a run this daemon stands for as run_may_serve;
 * any other run always (ddp-rendezvous without etcd). */
static int may_serve(void *arg, const char *run_id) {
    const daemon_run_t *run = run_of(arg, run_id);
    return run != NULL ? run_may_serve(run) : 1;
}

/* The store's rdzv_server_set_redirect: a run this daemon stands by for is served at the store
 * its election names (agents that know the candidates' addresses, --rdzv_conf etcd_stores, come
 * here first); "not yet" while none is named, and from the moment the named one's key went
 * until the election names the next (a client sent back to the dead store would wait there for
 * its whole reconnect window). */
static int redirect(void *arg, const char *run_id, char *out, size_t cap) {
    const daemon_run_t *run = run_of(arg, run_id);
    if (run == NULL || run->leading) /* not ours; or deposed by the clock: it knows no other */
        return 0;
    if (run->store[0] == '\0' || run->store_gone)
        return RDZV_NOT_YET;
    snprintf(out, cap, "%s", run->store);
    return 1;
}

static int all_named(const daemon_etcd_t *d) {
    for (size_t i = 0; i < d->n_runs; i++)
        if (!d->runs[i].named)
            return 0;
    return 1;
}

static void on_start_timer(uv_timer_t *t) {
    (void)t;
}

/* Turns the loop until every run has a store named, at most DAEMON_ETCD_START_MS. */
static int wait_named(daemon_etcd_t *d) {
    uv_timer_t t;
    int rc = uv_timer_init(d->loop, &t);
    if (rc < 0)
        return rc;
    uv_timer_start(&t, on_start_timer, DAEMON_ETCD_START_MS, 0);
    while (!all_named(d) && uv_is_active((uv_handle_t *)&t))
        uv_run(d->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    /* The closed timer's callback runs on the next turn, while t is still in scope. */
    uv_run(d->loop, UV_RUN_NOWAIT);
    d->started = 1;
    for (size_t i = 0; i < d->n_runs; i++) {
        if (d->runs[i].named)
            continue;
        ddp_log(DDP_LOG_ERROR,
                "etcd at %s: no rendezvous store elected for run %s within %d s (etcd "
                "unreachable or refusing the lease)",
                d->endpoints, d->runs[i].id, DAEMON_ETCD_START_MS / 1000);
        return 1;
    }
    if (d->etcd_down)
        rdzv_etcd_outage_failed(&d->outage);
    return 0;
}

int daemon_etcd_start(uv_loop_t *loop, rdzv_server_t *server, const daemon_etcd_opts_t *o,
                      void (*lost)(void *arg, const char *why), void *arg, daemon_etcd_t **out) {
    *out = NULL;
    daemon_etcd_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return -ENOMEM;
    d->loop = loop;
    d->server = server;
    d->endpoints = o->endpoints;
    d->lost = lost;
    d->lost_arg = arg;
    int rc;
    if ((rc = uv_timer_init(loop, &d->timer)) < 0 ||
        (rc = uv_timer_init(loop, &d->lost_timer)) < 0) {
        free(d);
        return rc;
    }
    d->timer.data = d->lost_timer.data = d;
    *out = d;
    rdzv_etcd_store_addr_format(d->value, sizeof d->value, o->host, rdzv_server_port(server));
    rdzv_etcd_opts_t eo = {.endpoints = o->endpoints,
                           .timeout_ms = DAEMON_ETCD_CALL_MS,
                           .user = o->user,
                           .password = o->password,
                           .ca_file = o->cacert,
                           .cert_file = o->cert,
                           .key_file = o->key};
    ddp_err_t err;
    ddp_err_clear(&err);
    if ((rc = rdzv_etcd_new(loop, &eo, &d->etcd, &err)) < 0) {
        ddp_log(DDP_LOG_ERROR, "etcd at %s: %s", o->endpoints,
                err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    for (size_t i = 0; i < o->n_runs && i < DAEMON_ETCD_MAX_RUNS; i++) {
        daemon_run_t *run = &d->runs[d->n_runs++];
        run->d = d;
        run->id = o->runs[i];
        snprintf(run->key, sizeof run->key, "%s/%s/leader", o->prefix, run->id);
        rdzv_etcd_records_opts_t ro = {.prefix = o->prefix,
                                       .run_id = run->id,
                                       .leader_key = run->key,
                                       .restore_done = restore_done,
                                       .restore_host = restore_host,
                                       .ready = on_records_ready,
                                       .arg = run};
        if ((rc = rdzv_etcd_records_new(d->etcd, &ro, &run->records, &err)) < 0) {
            ddp_log(DDP_LOG_ERROR, "etcd at %s: %s", o->endpoints,
                    err.text[0] ? err.text : ddp_strerror(rc));
            return rc;
        }
        rdzv_etcd_leader_opts_t lo = {.key = run->key,
                                      .key_len = strlen(run->key),
                                      .value = d->value,
                                      .value_len = strlen(d->value),
                                      .ttl_s = o->ttl_s,
                                      .cb = on_leader,
                                      .arg = run};
        if ((rc = rdzv_etcd_leader_start(d->etcd, &lo, &run->leader, &err)) < 0) {
            ddp_log(DDP_LOG_ERROR, "etcd at %s: %s", o->endpoints,
                    err.text[0] ? err.text : ddp_strerror(rc));
            return rc;
        }
    }
    rdzv_server_set_may_serve(server, may_serve, d);
    rdzv_server_set_durable(server, &records_hooks, d);
    rdzv_server_set_redirect(server, redirect, d);
    if (d->n_runs > 0 && (rc = rdzv_etcd_outage_init(&d->outage, loop, d->etcd, d->runs[0].key,
                                                     DAEMON_ETCD_PROBE_MS, on_outage, d)) < 0)
        return rc;
    return wait_named(d);
}

static void on_client_closed(void *arg) {
    daemon_etcd_t *d = arg;
    d->etcd = NULL;
    if (d->done != NULL)
        d->done(d->done_arg);
}

static void on_timer_closed(uv_handle_t *h) {
    daemon_etcd_t *d = h->data;
    /* Without a client there is nothing else to wait for. */
    if (!d->client_closing && d->done != NULL)
        d->done(d->done_arg);
}

/* Ends what the resignations left: the candidates still closing, the timers, the client. */
static void finish(daemon_etcd_t *d) {
    if (d->finished)
        return;
    d->finished = 1;
    for (size_t i = 0; i < d->n_runs; i++) {
        rdzv_etcd_records_close(d->runs[i].records); /* before the client: its calls cancelled */
        d->runs[i].records = NULL;
        rdzv_etcd_leader_close(d->runs[i].leader, NULL, NULL); /* a second close is ignored */
        d->runs[i].leader = NULL;
    }
    uv_close((uv_handle_t *)&d->lost_timer, NULL);
    rdzv_etcd_outage_close(&d->outage);
    uv_close((uv_handle_t *)&d->timer, on_timer_closed);
    d->client_closing = d->etcd != NULL;
    if (d->etcd != NULL)
        rdzv_etcd_close(d->etcd, on_client_closed, d);
}

static void on_resigned(void *arg) {
    daemon_run_t *run = arg;
    daemon_etcd_t *d = run->d;
    run->leader = NULL; /* freed after this call */
    if (--d->leaders_open == 0)
        finish(d);
}

static void on_resign_timer(uv_timer_t *t) {
    finish(t->data);
}

/* A run's records are written: its candidate resigns. */
static void resign_run(void *arg) {
    daemon_run_t *run = arg;
    if (run->leader != NULL && !run->d->finished)
        rdzv_etcd_leader_close(run->leader, on_resigned, run);
}

void daemon_etcd_stop(daemon_etcd_t *d, void (*done)(void *arg), void *arg) {
    if (d == NULL || d->stopping)
        return;
    d->stopping = 1;
    d->done = done;
    d->done_arg = arg;
    uv_timer_stop(&d->lost_timer);
    rdzv_etcd_outage_close(&d->outage); /* no line about etcd while resigning */
    for (size_t i = 0; i < d->n_runs; i++)
        d->runs[i].leading = 0;
    /* The store decides nothing more that is kept. */
    rdzv_server_set_durable(d->server, NULL, NULL);
    /* Each candidate writes what its store decided and is still on its way, then deletes its key
     * (if ours) and revokes its lease; the timer bounds them all (etcd away: the keys lapse with
     * the leases). */
    uv_timer_start(&d->timer, on_resign_timer, DAEMON_ETCD_RESIGN_MS, 0);
    for (size_t i = 0; i < d->n_runs; i++)
        if (d->runs[i].leader != NULL)
            d->leaders_open++;
    for (size_t i = 0; i < d->n_runs; i++)
        if (d->runs[i].leader != NULL && d->runs[i].records != NULL)
            rdzv_etcd_records_flush(d->runs[i].records, resign_run, &d->runs[i]);
    if (d->leaders_open == 0)
        finish(d);
}

void daemon_etcd_free(daemon_etcd_t *d) {
    free(d);
}
