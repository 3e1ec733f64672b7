/* SPDX-License-Identifier: Apache-2.0
 * The etcd backend's records that outlive the store serving the run (docs/protocol-rdzv.md, "The
 * etcd key layout"): the run's DONE mark and its hosts' quarantine records, kept by
 * rendezvous/etcd's rdzv_etcd_records (the same keeper as ddp-rendezvous --etcd's). Here, what is
 * the agent's: the store it loads them into (its own), the report that it leads (the link's
 * address waits for the load: its may_serve check says "not yet" meanwhile), and the store's
 * decisions, written while this agent leads. */
#include "rdzv_int.h"

#include <string.h>

#include "ddp_log.h"
#include "rdzv_etcd_records.h"
#include "rdzv_server.h"

static int restore_done(void *arg, int64_t round, ddp_err_t *err) {
    struct agent_rdzv *r = arg;
    return rdzv_server_restore_done(r->a->stores.store, r->a->cfg.job->run_id, round, err);
}

static int restore_host(void *arg, const char *host, int64_t failures, int excluded,
                        const char *last_failure, ddp_err_t *err) {
    struct agent_rdzv *r = arg;
    return rdzv_server_restore_host(r->a->stores.store, r->a->cfg.job->run_id, host, failures,
                                    excluded, last_failure, err);
}

/* The records are in the store: it serves from now on, and the election's report goes on. */
static void on_ready(void *arg) {
    struct agent_rdzv *r = arg;
    r->records = AGENT_RECORDS_READY;
    r->elect_hooks->moved(r, r->self_host, r->self_port, NULL);
}

static void on_run_done(void *arg, const char *run_id, int64_t round) {
    struct agent_rdzv *r = arg;
    if (r->records_keeper != NULL && strcmp(run_id, r->a->cfg.job->run_id) == 0)
        rdzv_etcd_records_put_done(r->records_keeper, round);
}

static void on_host_record(void *arg, const char *run_id, const char *host, int64_t failures,
                           int excluded, const char *last_failure) {
    struct agent_rdzv *r = arg;
    if (r->records_keeper != NULL && strcmp(run_id, r->a->cfg.job->run_id) == 0)
        rdzv_etcd_records_put_host(r->records_keeper, host, failures, excluded, last_failure);
}

static const rdzv_server_durable_t records_hooks = {.run_done = on_run_done,
                                                    .host_record = on_host_record};

int agent__records_start(struct agent_rdzv *r) {
    const agent_job_t *job = r->a->cfg.job;
    rdzv_etcd_records_opts_t o = {.prefix = job->etcd.prefix,
                                  .run_id = job->run_id,
                                  .leader_key = r->leader_key,
                                  .restore_done = restore_done,
                                  .restore_host = restore_host,
                                  .ready = on_ready,
                                  .arg = r};
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_etcd_records_new(r->etcd, &o, &r->records_keeper, &err);
    if (rc < 0) {
        DDP_ERROR("etcd at %s: %s", job->etcd.endpoints, err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    rdzv_server_set_durable(r->a->stores.store, &records_hooks, r);
    return 0;
}

void agent__records_lead(struct agent_rdzv *r, int64_t token) {
    r->records = AGENT_RECORDS_LOADING;
    if (r->records_keeper != NULL)
        rdzv_etcd_records_lead(r->records_keeper, token);
}

void agent__records_stop(struct agent_rdzv *r) {
    r->records = AGENT_RECORDS_NONE;
    if (r->records_keeper != NULL)
        rdzv_etcd_records_stop(r->records_keeper);
}

void agent__records_close(struct agent_rdzv *r) {
    agent__records_stop(r);
    r->records_flushed = NULL;
    rdzv_etcd_records_close(r->records_keeper);
    r->records_keeper = NULL;
}

static void on_flushed(void *arg) {
    struct agent_rdzv *r = arg;
    void (*then)(struct agent_rdzv *) = r->records_flushed;
    r->records_flushed = NULL;
    if (then != NULL)
        then(r);
}

void agent__records_flush(struct agent_rdzv *r, void (*then)(struct agent_rdzv *r)) {
    r->records_flushed = then;
    if (r->records_keeper == NULL)
        on_flushed(r);
    else
        rdzv_etcd_records_flush(r->records_keeper, on_flushed, r);
}
