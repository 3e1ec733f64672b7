/* SPDX-License-Identifier: Apache-2.0
 * The etcd backend's records that outlive the store serving the run (docs/protocol-rdzv.md, "The
 * etcd key layout"): the run's DONE mark and its hosts' quarantine records, under
 * <prefix>/<run_id>/. The leader's store reports them (rdzv_server_durable_t); they are written
 * with the leader's fenced put (a deposed leader writes nothing), attached to the run's records
 * lease. A newly elected leader loads them into its store before it serves: its may_serve check
 * says "not yet" meanwhile, and the election's report that it leads (the link's address) waits
 * for the load.
 *
 * The records lease (AGENT_RECORDS_TTL_S) is the run's, not a leader's: the first leader grants
 * it, every later one finds its id on the records it loads and keeps it alive while it leads. The
 * records go an hour after the last leader of the run left, as the c10d store forgets a finished
 * run an hour after its last node, so a run id such as the default "none" is free again. */
#include "rdzv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ddp_log.h"
#include "rdzv_etcd_leader.h"
#include "rdzv_server.h"

/* The records' lease, and how often a leader renews it. */
#define AGENT_RECORDS_TTL_S 3600
#define AGENT_RECORDS_RENEW_MS ((uint64_t)AGENT_RECORDS_TTL_S * 1000 / 6)
/* After a failed load (etcd away), the next try. */
#define AGENT_RECORDS_RETRY_MS 500
/* Tries of one record's write (each bounded by the client's call timeout). */
#define AGENT_RECORDS_TRIES 3
#define AGENT_RECORDS_KEY_MAX 1024

/* One call about the records, tied to the leadership (fencing token) it was made under: an answer
 * that comes after that leadership ended is dropped. */
typedef struct records_call {
    struct agent_rdzv *r;
    int64_t token;
    int tries;
    size_t key_len, value_len;
    char key[AGENT_RECORDS_KEY_MAX];
    char value[]; /* a write's value */
} records_call_t;

static int records_key(const struct agent_rdzv *r, char *out, size_t cap, const char *what,
                       const char *host) {
    const agent_job_t *job = r->a->cfg.job;
    int n = snprintf(out, cap, "%s/%s/%s%s", job->etcd.prefix, job->run_id, what,
                     host != NULL ? host : "");
    return n > 0 && (size_t)n < cap ? n : -ENAMETOOLONG;
}

/* Whether this agent still leads under the token a call was made with. */
static int still_leading(const records_call_t *c) {
    return c->r->leading && c->r->lead_token == c->token && c->r->etcd != NULL;
}

static records_call_t *call_new(struct agent_rdzv *r, size_t value_len) {
    records_call_t *c = calloc(1, sizeof *c + value_len + 1);
    if (c != NULL) {
        c->r = r;
        c->token = r->lead_token;
    }
    return c;
}

/* ---- the records lease ---- */

static void on_renew_timer(uv_timer_t *t);

/* The lease is there: the store serves from now on, and the election's report goes on. */
static void records_ready(struct agent_rdzv *r) {
    r->records = AGENT_RECORDS_READY;
    uv_timer_start(&r->records_timer, on_renew_timer, AGENT_RECORDS_RENEW_MS,
                   AGENT_RECORDS_RENEW_MS);
    r->elect_hooks->moved(r, r->self_host, r->self_port, NULL);
}

static void records_retry(struct agent_rdzv *r);
static void records_lease(struct agent_rdzv *r);

static void on_lease(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    records_call_t *c = arg;
    struct agent_rdzv *r = c->r;
    int mine = status != DDP_ECANCELED && still_leading(c);
    free(c);
    if (!mine)
        return;
    if (status == DDP_ENOKEY && r->records_lease != 0) {
        /* Expired (nobody led for an hour, its records went with it): a new one. */
        r->records_lease = 0;
        records_lease(r);
        return;
    }
    if (status < 0) {
        DDP_WARN("etcd at %s: the rendezvous records' lease: %s", rdzv_etcd_endpoint(r->etcd),
                 errtext != NULL ? errtext : ddp_strerror(status));
        if (r->records != AGENT_RECORDS_READY)
            records_retry(r);
        return;
    }
    r->records_lease = res->lease_id;
    if (r->records != AGENT_RECORDS_READY)
        records_ready(r);
}

/* Renews the run's records lease, or grants one when there is none (or it expired). */
static void records_lease(struct agent_rdzv *r) {
    records_call_t *c = call_new(r, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = c == NULL ? -ENOMEM
             : r->records_lease != 0
                 ? rdzv_etcd_lease_keepalive(r->etcd, r->records_lease, on_lease, c, &err)
                 : rdzv_etcd_lease_grant(r->etcd, AGENT_RECORDS_TTL_S, on_lease, c, &err);
    if (rc < 0) {
        free(c);
        DDP_WARN("etcd at %s: the rendezvous records' lease: %s", rdzv_etcd_endpoint(r->etcd),
                 err.text[0] ? err.text : ddp_strerror(rc));
        if (r->records != AGENT_RECORDS_READY)
            records_retry(r);
    }
}

static void on_renew_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (r->leading && r->etcd != NULL)
        records_lease(r);
}

/* ---- loading ---- */

/* One record of the range into the store. Returns 1 for the DONE mark, 2 for a host's record, 0
 * for another key, -1 for a value that is not ours (logged). */
static int load_one(struct agent_rdzv *r, const rdzv_etcd_kv_t *kv, size_t prefix_len,
                    int64_t *done_round) {
    const char *what = (const char *)kv->key + prefix_len;
    const char *host = NULL;
    if (strcmp(what, "done") != 0) {
        if (strncmp(what, "hosts/", 6) != 0)
            return 0;
        host = what + 6;
    }
    const char *run = r->a->cfg.job->run_id;
    json_t *v = json_loadb((const char *)kv->value, kv->value_len, JSON_REJECT_DUPLICATES, NULL);
    json_int_t n = -1;
    int rc = -1;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (host == NULL) {
        if (json_unpack(v, "{s:I !}", "round", &n) == 0 &&
            rdzv_server_restore_done(r->a->stores.store, run, n, &err) == 0) {
            *done_round = n;
            rc = 1;
        }
    } else {
        int excluded = 0;
        const char *last = "";
        if (json_unpack(v, "{s:I, s:b, s:s !}", "failures", &n, "excluded", &excluded,
                        "last_failure", &last) == 0 &&
            rdzv_server_restore_host(r->a->stores.store, run, host, n, excluded, last, &err) == 0)
            rc = 2;
    }
    json_decref(v);
    if (rc < 0) {
        char esc[AGENT_STORE_TEXT_MAX];
        DDP_WARN("etcd at %s: %s holds '%s', not a rendezvous record%s%s; ignored",
                 rdzv_etcd_endpoint(r->etcd), kv->key,
                 agent__store_text(kv->value, kv->value_len, "", esc), err.text[0] ? ": " : "",
                 err.text);
    } else if (kv->lease != 0 && r->records_lease == 0) {
        r->records_lease = kv->lease;
    }
    return rc;
}

static void on_load(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    records_call_t *c = arg;
    struct agent_rdzv *r = c->r;
    int mine = status != DDP_ECANCELED && still_leading(c);
    size_t prefix_len = c->key_len;
    free(c);
    if (!mine)
        return;
    if (status < 0) {
        DDP_WARN("etcd at %s: unable to read the rendezvous records under %s: %s; the store "
                 "serves once they are read",
                 rdzv_etcd_endpoint(r->etcd), r->leader_key,
                 errtext != NULL ? errtext : ddp_strerror(status));
        records_retry(r);
        return;
    }
    size_t hosts = 0;
    int64_t done_round = -1;
    r->records_lease = 0;
    for (size_t i = 0; i < res->n_kvs; i++)
        hosts += load_one(r, &res->kvs[i], prefix_len, &done_round) == 2;
    if (done_round >= 0 || hosts > 0)
        DDP_INFO("rendezvous '%s': loaded from etcd %s%zu host record%s", r->a->cfg.job->run_id,
                 done_round >= 0 ? "its DONE mark, " : "", hosts, hosts == 1 ? "" : "s");
    records_lease(r);
}

static void records_load(struct agent_rdzv *r) {
    records_call_t *c = call_new(r, 0);
    if (c == NULL) {
        records_retry(r);
        return;
    }
    int n = records_key(r, c->key, sizeof c->key, "", NULL);
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = n < 0
                 ? n
                 : rdzv_etcd_get(r->etcd, c->key, (size_t)n, RDZV_ETCD_PREFIX, 0, on_load, c, &err);
    c->key_len = n < 0 ? 0 : (size_t)n;
    if (rc < 0) {
        free(c);
        DDP_WARN("etcd at %s: unable to read the rendezvous records: %s",
                 rdzv_etcd_endpoint(r->etcd), err.text[0] ? err.text : ddp_strerror(rc));
        records_retry(r);
    }
}

static void on_retry_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (!r->leading || r->etcd == NULL)
        return;
    if (r->records == AGENT_RECORDS_LOADING)
        records_load(r);
}

static void records_retry(struct agent_rdzv *r) {
    uv_timer_start(&r->records_timer, on_retry_timer, AGENT_RECORDS_RETRY_MS, 0);
}

int agent__records_init(struct agent_rdzv *r) {
    int rc = uv_timer_init(r->a->cfg.loop, &r->records_timer);
    r->records_timer.data = r;
    return rc;
}

void agent__records_lead(struct agent_rdzv *r, int64_t token) {
    r->lead_token = token;
    r->records = AGENT_RECORDS_LOADING;
    r->records_lease = 0;
    records_load(r);
}

void agent__records_stop(struct agent_rdzv *r) {
    r->records = AGENT_RECORDS_NONE;
    r->lead_token = 0;
    if (r->records_timer.data != NULL && !uv_is_closing((uv_handle_t *)&r->records_timer))
        uv_timer_stop(&r->records_timer);
}

/* ---- writing ---- */

static void put_send(records_call_t *c);

/* A write is over: the last one lets a waiting flush go on. */
static void write_ended(struct agent_rdzv *r) {
    r->records_pending--;
    void (*then)(struct agent_rdzv *) = r->records_flushed;
    if (r->records_pending == 0 && then != NULL) {
        r->records_flushed = NULL;
        then(r);
    }
}

void agent__records_flush(struct agent_rdzv *r, void (*then)(struct agent_rdzv *r)) {
    if (r->records_pending == 0) {
        r->records_flushed = NULL;
        then(r);
        return;
    }
    r->records_flushed = then;
}

static void on_put(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    (void)res;
    records_call_t *c = arg;
    struct agent_rdzv *r = c->r;
    if (status == 0 || status == DDP_ECANCELED || !still_leading(c) ||
        ++c->tries >= AGENT_RECORDS_TRIES || status == DDP_EFENCED) {
        if (status != 0 && status != DDP_ECANCELED)
            DDP_WARN("etcd: the rendezvous record %s was not written: %s", c->key,
                     errtext != NULL ? errtext : ddp_strerror(status));
        free(c);
        write_ended(r);
        return;
    }
    put_send(c);
}

static void put_send(records_call_t *c) {
    struct agent_rdzv *r = c->r;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc =
        rdzv_etcd_fenced_put(r->etcd, r->leader_key, strlen(r->leader_key), c->token, c->key,
                             c->key_len, c->value, c->value_len, r->records_lease, on_put, c, &err);
    if (rc < 0) {
        DDP_WARN("etcd: the rendezvous record %s was not written: %s", c->key,
                 err.text[0] ? err.text : ddp_strerror(rc));
        free(c);
        write_ended(r);
    }
}

/* Writes value (a JSON object, consumed) at <prefix>/<run>/<what><host>. */
static void record_put(struct agent_rdzv *r, const char *what, const char *host, json_t *value) {
    char *text = value != NULL ? json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(value);
    records_call_t *c = text != NULL ? call_new(r, strlen(text)) : NULL;
    int n = c != NULL ? records_key(r, c->key, sizeof c->key, what, host) : -ENOMEM;
    if (n < 0 || !r->leading || r->records != AGENT_RECORDS_READY) {
        DDP_WARN("etcd: the rendezvous record %s%s of '%s' was not written: %s", what,
                 host != NULL ? host : "", r->a->cfg.job->run_id,
                 n < 0 ? ddp_strerror(n) : "this node no longer leads");
        free(c);
        free(text);
        return;
    }
    c->key_len = (size_t)n;
    c->value_len = strlen(text);
    memcpy(c->value, text, c->value_len);
    free(text);
    r->records_pending++;
    put_send(c);
}

static void on_run_done(void *arg, const char *run_id, int64_t round) {
    struct agent_rdzv *r = arg;
    if (strcmp(run_id, r->a->cfg.job->run_id) == 0)
        record_put(r, "done", NULL, json_pack("{s:I}", "round", (json_int_t)round));
}

static void on_host_record(void *arg, const char *run_id, const char *host, int64_t failures,
                           int excluded, const char *last_failure) {
    struct agent_rdzv *r = arg;
    if (strcmp(run_id, r->a->cfg.job->run_id) == 0)
        record_put(r, "hosts/", host,
                   json_pack("{s:I, s:b, s:s}", "failures", (json_int_t)failures, "excluded",
                             excluded, "last_failure", last_failure != NULL ? last_failure : ""));
}

const rdzv_server_durable_t agent__records_hooks = {.run_done = on_run_done,
                                                    .host_record = on_host_record};
