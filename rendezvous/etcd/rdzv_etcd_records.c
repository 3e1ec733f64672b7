/* SPDX-License-Identifier: Apache-2.0
 * A run's records in etcd (rdzv_etcd_records.h): the codec, the load a new leader makes before
 * its store serves, the records lease, and the fenced writes of what its store decides. */
#include "rdzv_etcd_records.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_escape.h"
#include "ddp_log.h"
#include "rdzv_etcd_leader.h"

/* ---- the codec ---- */

int rdzv_etcd_records_key(char *out, size_t cap, const char *prefix, const char *run_id,
                          const char *what, const char *host) {
    int n = snprintf(out, cap, "%s/%s/%s%s", prefix, run_id, what, host != NULL ? host : "");
    return n > 0 && (size_t)n < cap ? n : -ENAMETOOLONG;
}

static char *encode(json_t *v) {
    char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(v);
    return text;
}

char *rdzv_etcd_record_done_encode(int64_t round) {
    return encode(json_pack("{s:I}", "round", (json_int_t)round));
}

char *rdzv_etcd_record_host_encode(int64_t failures, int excluded, const char *last_failure) {
    return encode(json_pack("{s:I, s:b, s:s}", "failures", (json_int_t)failures, "excluded",
                            excluded != 0, "last_failure",
                            last_failure != NULL ? last_failure : ""));
}

/* Copies s (n bytes) into out (cap bytes) with a NUL; -EINVAL when it does not fit or holds a
 * NUL. */
static int copy_text(char *out, size_t cap, const char *s, size_t n) {
    if (n >= cap || memchr(s, '\0', n) != NULL)
        return -EINVAL;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

int rdzv_etcd_record_decode(const uint8_t *what, size_t what_len, const uint8_t *value,
                            size_t value_len, rdzv_etcd_record_t *out) {
    static const char done[] = "done", hosts[] = "hosts/";
    const char *w = (const char *)what;
    int kind = RDZV_ETCD_RECORD_OTHER;
    if (what_len == sizeof done - 1 && memcmp(w, done, what_len) == 0)
        kind = RDZV_ETCD_RECORD_DONE;
    else if (what_len > sizeof hosts - 1 && memcmp(w, hosts, sizeof hosts - 1) == 0)
        kind = RDZV_ETCD_RECORD_HOST;
    out->kind = kind;
    if (kind == RDZV_ETCD_RECORD_OTHER)
        return kind;
    json_t *v = json_loadb((const char *)value, value_len, JSON_REJECT_DUPLICATES, NULL);
    json_int_t n = -1;
    int excluded = 0, rc = -EINVAL;
    const char *last = NULL;
    size_t last_len = 0;
    if (kind == RDZV_ETCD_RECORD_DONE) {
        if (json_unpack(v, "{s:I !}", "round", &n) == 0 && n >= 0) {
            out->round = n;
            rc = kind;
        }
    } else if (json_unpack(v, "{s:I, s:b, s:s% !}", "failures", &n, "excluded", &excluded,
                           "last_failure", &last, &last_len) == 0 &&
               n >= 0 &&
               copy_text(out->host, sizeof out->host, w + sizeof hosts - 1,
                         what_len - (sizeof hosts - 1)) == 0 &&
               copy_text(out->last_failure, sizeof out->last_failure, last, last_len) == 0) {
        out->failures = n;
        out->excluded = excluded != 0;
        rc = kind;
    }
    json_decref(v);
    return rc;
}

/* ---- one run's records ---- */

typedef enum { RECORDS_IDLE, RECORDS_LOADING, RECORDS_READY } records_state_t;

struct rdzv_etcd_records {
    rdzv_etcd_t *etcd;
    rdzv_etcd_records_opts_t o; /* its strings point at the copies below */
    int64_t token;              /* the leadership's fencing token, 0 while not leading */
    records_state_t state;
    int64_t lease;    /* the run's records lease, 0 none yet */
    size_t calls;     /* calls to etcd whose callback has not run */
    size_t writes;    /* of which writes (a flush waits for them) */
    uv_timer_t timer; /* the next load after a failed one; the lease's renewal */
    void (*flushed)(void *arg);
    void *flushed_arg;
    int closing;
    int timer_closed;
    char prefix[RDZV_ETCD_RECORDS_KEY_MAX];
    char run_id[RDZV_ETCD_RECORDS_KEY_MAX];
    char leader_key[RDZV_ETCD_RECORDS_KEY_MAX];
};

/* One call about the records, tied to the leadership (token) it was made under: an answer that
 * comes after that leadership ended is dropped. */
typedef struct records_call {
    rdzv_etcd_records_t *r;
    int64_t token;
    int tries;
    size_t key_len, value_len;
    char key[RDZV_ETCD_RECORDS_KEY_MAX];
    char value[]; /* a write's value */
} records_call_t;

static void maybe_free(rdzv_etcd_records_t *r) {
    if (r->closing && r->timer_closed && r->calls == 0)
        free(r);
}

static int still_leading(const records_call_t *c) {
    return !c->r->closing && c->r->token != 0 && c->r->token == c->token;
}

static records_call_t *call_new(rdzv_etcd_records_t *r, size_t value_len) {
    records_call_t *c = calloc(1, sizeof *c + value_len + 1);
    if (c != NULL) {
        c->r = r;
        c->token = r->token;
    }
    return c;
}

/* A call came back: whether its answer is still wanted (r stays allocated until the return). */
static int call_back(records_call_t *c, int status) {
    c->r->calls--;
    return status != DDP_ECANCELED && still_leading(c);
}

static const char *endpoint(const rdzv_etcd_records_t *r) {
    return rdzv_etcd_endpoint(r->etcd);
}

/* ---- the records lease ---- */

static void on_renew_timer(uv_timer_t *t);
static void load_retry(rdzv_etcd_records_t *r);
static void lease_call(rdzv_etcd_records_t *r);

/* The lease is there: the store serves from now on. */
static void records_ready(rdzv_etcd_records_t *r) {
    r->state = RECORDS_READY;
    uv_timer_start(&r->timer, on_renew_timer, RDZV_ETCD_RECORDS_RENEW_MS,
                   RDZV_ETCD_RECORDS_RENEW_MS);
    r->o.ready(r->o.arg);
}

static void on_lease(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    records_call_t *c = arg;
    rdzv_etcd_records_t *r = c->r;
    int mine = call_back(c, status);
    free(c);
    if (!mine) {
        maybe_free(r);
        return;
    }
    if (status == DDP_ENOKEY && r->lease != 0) {
        /* Expired (nobody led for an hour, its records went with it): a new one. */
        r->lease = 0;
        lease_call(r);
        return;
    }
    if (status < 0) {
        DDP_WARN("etcd at %s: the rendezvous records' lease of '%s': %s", endpoint(r), r->run_id,
                 errtext != NULL ? errtext : ddp_strerror(status));
        if (r->state != RECORDS_READY)
            load_retry(r);
        return;
    }
    r->lease = res->lease_id;
    if (r->state != RECORDS_READY)
        records_ready(r);
}

/* Renews the run's records lease, or grants one when there is none (or it expired). */
static void lease_call(rdzv_etcd_records_t *r) {
    records_call_t *c = call_new(r, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = c == NULL ? -ENOMEM
             : r->lease != 0
                 ? rdzv_etcd_lease_keepalive(r->etcd, r->lease, on_lease, c, &err)
                 : rdzv_etcd_lease_grant(r->etcd, RDZV_ETCD_RECORDS_TTL_S, on_lease, c, &err);
    if (rc == 0) {
        r->calls++;
        return;
    }
    free(c);
    DDP_WARN("etcd at %s: the rendezvous records' lease of '%s': %s", endpoint(r), r->run_id,
             err.text[0] ? err.text : ddp_strerror(rc));
    if (r->state != RECORDS_READY)
        load_retry(r);
}

static void on_renew_timer(uv_timer_t *t) {
    rdzv_etcd_records_t *r = t->data;
    if (r->token != 0 && !r->closing)
        lease_call(r);
}

/* ---- loading ---- */

/* One record of the range into the store. Returns its kind, or -1 for a value that is not a
 * record (logged). */
static int load_one(rdzv_etcd_records_t *r, const rdzv_etcd_kv_t *kv, size_t dir_len) {
    rdzv_etcd_record_t rec;
    ddp_err_t err;
    ddp_err_clear(&err);
    int kind = kv->key_len < dir_len
                   ? RDZV_ETCD_RECORD_OTHER
                   : rdzv_etcd_record_decode(kv->key + dir_len, kv->key_len - dir_len, kv->value,
                                             kv->value_len, &rec);
    int rc = kind;
    if (kind == RDZV_ETCD_RECORD_DONE)
        rc = r->o.restore_done(r->o.arg, rec.round, &err) == 0 ? kind : -1;
    else if (kind == RDZV_ETCD_RECORD_HOST)
        rc = r->o.restore_host(r->o.arg, rec.host, rec.failures, rec.excluded, rec.last_failure,
                               &err) == 0
                 ? kind
                 : -1;
    if (rc < 0) {
        char key[RDZV_ETCD_RECORDS_KEY_MAX], value[512];
        ddp_str_escape(key, sizeof key, (const char *)kv->key, kv->key_len);
        ddp_str_escape(value, sizeof value, (const char *)kv->value, kv->value_len);
        DDP_WARN("etcd at %s: %s holds '%s', not a rendezvous record%s%s; ignored", endpoint(r),
                 key, value, err.text[0] ? ": " : "", err.text);
    } else if (rc != RDZV_ETCD_RECORD_OTHER && kv->lease != 0 && r->lease == 0) {
        r->lease = kv->lease;
    }
    return rc;
}

static void on_load(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    records_call_t *c = arg;
    rdzv_etcd_records_t *r = c->r;
    int mine = call_back(c, status);
    size_t dir_len = c->key_len;
    free(c);
    if (!mine) {
        maybe_free(r);
        return;
    }
    if (status < 0) {
        DDP_WARN("etcd at %s: unable to read the rendezvous records of '%s': %s; its store serves "
                 "once they are read",
                 endpoint(r), r->run_id, errtext != NULL ? errtext : ddp_strerror(status));
        load_retry(r);
        return;
    }
    size_t hosts = 0;
    int done = 0;
    r->lease = 0;
    for (size_t i = 0; i < res->n_kvs; i++) {
        int kind = load_one(r, &res->kvs[i], dir_len);
        hosts += kind == RDZV_ETCD_RECORD_HOST;
        done |= kind == RDZV_ETCD_RECORD_DONE;
    }
    if (done || hosts > 0)
        DDP_INFO("rendezvous '%s': loaded from etcd %s%zu host record%s", r->run_id,
                 done ? "its DONE mark, " : "", hosts, hosts == 1 ? "" : "s");
    lease_call(r);
}

static void load(rdzv_etcd_records_t *r) {
    records_call_t *c = call_new(r, 0);
    int n = c != NULL ? rdzv_etcd_records_key(c->key, sizeof c->key, r->prefix, r->run_id, "", NULL)
                      : -ENOMEM;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = n < 0
                 ? n
                 : rdzv_etcd_get(r->etcd, c->key, (size_t)n, RDZV_ETCD_PREFIX, 0, on_load, c, &err);
    if (rc == 0) {
        c->key_len = (size_t)n;
        r->calls++;
        return;
    }
    free(c);
    DDP_WARN("etcd at %s: unable to read the rendezvous records of '%s': %s", endpoint(r),
             r->run_id, err.text[0] ? err.text : ddp_strerror(rc));
    load_retry(r);
}

static void on_retry_timer(uv_timer_t *t) {
    rdzv_etcd_records_t *r = t->data;
    if (r->token != 0 && !r->closing && r->state == RECORDS_LOADING)
        load(r);
}

static void load_retry(rdzv_etcd_records_t *r) {
    uv_timer_start(&r->timer, on_retry_timer, RDZV_ETCD_RECORDS_RETRY_MS, 0);
}

/* ---- writing ---- */

static void put_send(records_call_t *c);

/* A write's failure, naming its key (escaped: a host's name came from the network). */
static void put_failed(const records_call_t *c, const char *why) {
    char key[RDZV_ETCD_RECORDS_KEY_MAX * 4];
    ddp_str_escape(key, sizeof key, c->key, c->key_len);
    DDP_WARN("etcd: the rendezvous record %s was not written: %s", key, why);
}

/* A write is over: the last one lets a waiting flush go on. */
static void write_ended(rdzv_etcd_records_t *r) {
    r->writes--;
    void (*then)(void *) = r->flushed;
    if (r->writes == 0 && then != NULL && !r->closing) {
        r->flushed = NULL;
        then(r->flushed_arg);
    }
}

static void on_put(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    (void)res;
    records_call_t *c = arg;
    rdzv_etcd_records_t *r = c->r;
    r->calls--;
    if (status == 0 || status == DDP_ECANCELED || !still_leading(c) ||
        ++c->tries >= RDZV_ETCD_RECORDS_TRIES || status == DDP_EFENCED) {
        if (status != 0 && status != DDP_ECANCELED)
            put_failed(c, errtext != NULL ? errtext : ddp_strerror(status));
        free(c);
        write_ended(r);
        maybe_free(r);
        return;
    }
    put_send(c);
}

static void put_send(records_call_t *c) {
    rdzv_etcd_records_t *r = c->r;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_etcd_fenced_put(r->etcd, r->leader_key, strlen(r->leader_key), c->token, c->key,
                                  c->key_len, c->value, c->value_len, r->lease, on_put, c, &err);
    if (rc == 0) {
        r->calls++;
        return;
    }
    put_failed(c, err.text[0] ? err.text : ddp_strerror(rc));
    free(c);
    write_ended(r);
}

/* Writes text (malloc'd, consumed) at <prefix>/<run>/<what><host>. */
static void put(rdzv_etcd_records_t *r, const char *what, const char *host, char *text) {
    records_call_t *c = text != NULL ? call_new(r, strlen(text)) : NULL;
    int n = c != NULL
                ? rdzv_etcd_records_key(c->key, sizeof c->key, r->prefix, r->run_id, what, host)
                : -ENOMEM;
    if (n < 0 || r->closing || r->token == 0 || r->state != RECORDS_READY) {
        char esc[RDZV_ETCD_RECORD_HOST_MAX * 4 + 1];
        DDP_WARN("etcd: the rendezvous record %s%s of '%s' was not written: %s", what,
                 ddp_str_escaped(host, esc, sizeof esc), r->run_id,
                 n < 0 ? ddp_strerror(n) : "its store no longer leads");
        free(c);
        free(text);
        return;
    }
    c->key_len = (size_t)n;
    c->value_len = strlen(text);
    memcpy(c->value, text, c->value_len);
    free(text);
    r->writes++;
    put_send(c);
}

void rdzv_etcd_records_put_done(rdzv_etcd_records_t *r, int64_t round) {
    put(r, "done", NULL, rdzv_etcd_record_done_encode(round));
}

void rdzv_etcd_records_put_host(rdzv_etcd_records_t *r, const char *host, int64_t failures,
                                int excluded, const char *last_failure) {
    put(r, "hosts/", host, rdzv_etcd_record_host_encode(failures, excluded, last_failure));
}

void rdzv_etcd_records_flush(rdzv_etcd_records_t *r, void (*then)(void *arg), void *arg) {
    if (r->writes == 0) {
        r->flushed = NULL;
        then(arg);
        return;
    }
    r->flushed = then;
    r->flushed_arg = arg;
}

/* ---- the keeper ---- */

int rdzv_etcd_records_new(rdzv_etcd_t *c, const rdzv_etcd_records_opts_t *o,
                          rdzv_etcd_records_t **out, ddp_err_t *err) {
    *out = NULL;
    if (c == NULL || o == NULL || o->prefix == NULL || o->run_id == NULL || o->leader_key == NULL ||
        o->restore_done == NULL || o->restore_host == NULL || o->ready == NULL)
        return ddp_err_set(err, -EINVAL, "etcd records: a missing option");
    rdzv_etcd_records_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return ddp_err_set(err, -ENOMEM, "etcd records: out of memory");
    char dir[RDZV_ETCD_RECORDS_KEY_MAX];
    if (rdzv_etcd_records_key(dir, sizeof dir, o->prefix, o->run_id, "hosts/", NULL) < 0 ||
        copy_text(r->prefix, sizeof r->prefix, o->prefix, strlen(o->prefix)) < 0 ||
        copy_text(r->run_id, sizeof r->run_id, o->run_id, strlen(o->run_id)) < 0 ||
        copy_text(r->leader_key, sizeof r->leader_key, o->leader_key, strlen(o->leader_key)) < 0) {
        free(r);
        return ddp_err_set(err, -EINVAL, "etcd records: the prefix or run id is too long");
    }
    int rc = uv_timer_init(rdzv_etcd_loop(c), &r->timer);
    if (rc < 0) {
        free(r);
        return ddp_err_set(err, rc, "etcd records: %s", uv_strerror(rc));
    }
    r->timer.data = r;
    r->etcd = c;
    r->o = *o;
    r->o.prefix = r->prefix;
    r->o.run_id = r->run_id;
    r->o.leader_key = r->leader_key;
    *out = r;
    return 0;
}

void rdzv_etcd_records_lead(rdzv_etcd_records_t *r, int64_t token) {
    if (r->closing)
        return;
    uv_timer_stop(&r->timer);
    r->token = token;
    r->state = RECORDS_LOADING;
    r->lease = 0;
    load(r);
}

void rdzv_etcd_records_stop(rdzv_etcd_records_t *r) {
    r->token = 0;
    r->state = RECORDS_IDLE;
    if (!r->closing)
        uv_timer_stop(&r->timer);
}

int rdzv_etcd_records_ready(const rdzv_etcd_records_t *r) {
    return r->token != 0 && r->state == RECORDS_READY;
}

static void on_timer_closed(uv_handle_t *h) {
    rdzv_etcd_records_t *r = h->data;
    r->timer_closed = 1;
    maybe_free(r);
}

void rdzv_etcd_records_close(rdzv_etcd_records_t *r) {
    if (r == NULL || r->closing)
        return;
    rdzv_etcd_records_stop(r);
    r->closing = 1;
    r->flushed = NULL;
    uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}
