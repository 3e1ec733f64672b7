/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_leader: the election (rdzv_etcd_leader.h). Two strands run on the loop:
 *   the lease: granted, renewed every ttl/3 (at most MAX_KEEPALIVES in flight), its deadline
 *     timer at the sending of the last answered keepalive + ttl; a keepalive etcd refuses or
 *     the deadline passing loses the lease;
 *   the flow: campaign (txn), else observe (range, then a watch), again on a delete; every
 *     failure reported once and retried after retry_ms.
 * Each call carries a context: the flow's epoch (a new flow ignores the old one's replies) or the
 * lease it renews. The election lives until its last call has answered and its timers closed. */
#include "rdzv_etcd_leader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEEPALIVES 2
#define MIN_RETRY_MS 100
#define MAX_RETRY_MS 1000
#define WHY_LEN 512

struct rdzv_etcd_leader {
    rdzv_etcd_t *c;
    uv_loop_t *loop;
    uint8_t *key, *value;
    size_t key_len, value_len;
    int candidate;
    uint64_t ttl_ms, retry_ms;
    rdzv_leader_cb cb;
    void *arg;
    unsigned epoch; /* the flow's generation */
    int64_t lease, old_lease;
    uint64_t deadline;
    int leading;
    int64_t my_rev;         /* our key's create revision while leading */
    int64_t seen_rev;       /* the leader last reported */
    int keepalives;         /* in flight for the current lease */
    int ka_failing;         /* a keepalive failed since the last answered one (reported once) */
    char last_err[WHY_LEN]; /* the flow's failure last reported; "" after a success */
    struct call *watch;
    uv_timer_t ka_timer, deadline_timer, retry_timer;
    int inflight, handles, closing;
    void (*close_cb)(void *arg);
    void *close_arg;
};

typedef struct call {
    rdzv_etcd_leader_t *l;
    unsigned epoch;
    uint64_t sent;
    int64_t lease;
    rdzv_etcd_watch_t *w;
    int live;
} call_t;

static void resume(rdzv_etcd_leader_t *l);
static void campaign(rdzv_etcd_leader_t *l);
static void observe(rdzv_etcd_leader_t *l);

/* ---- bookkeeping ---- */

static void maybe_free(rdzv_etcd_leader_t *l) {
    if (!l->closing || l->handles > 0 || l->inflight > 0)
        return;
    void (*cb)(void *) = l->close_cb;
    void *arg = l->close_arg;
    free(l->key);
    free(l->value);
    free(l);
    if (cb != NULL)
        cb(arg);
}

static call_t *call_new(rdzv_etcd_leader_t *l) {
    call_t *k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->l = l;
    k->epoch = l->epoch;
    k->sent = uv_now(l->loop);
    k->lease = l->lease;
    l->inflight++;
    return k;
}

static void call_end(call_t *k) {
    rdzv_etcd_leader_t *l = k->l;
    free(k);
    l->inflight--;
    maybe_free(l);
}

static int current(const call_t *k) {
    return !k->l->closing && k->epoch == k->l->epoch;
}

static void report(rdzv_etcd_leader_t *l, rdzv_leader_event_t ev, const uint8_t *v, size_t n,
                   int64_t rev, const char *why) {
    if (!l->closing)
        l->cb(l->arg, ev, v, n, rev, why);
}

static void on_retry(uv_timer_t *t) {
    resume(t->data);
}

static void retry_later(rdzv_etcd_leader_t *l, uint64_t ms) {
    if (!l->closing)
        uv_timer_start(&l->retry_timer, on_retry, ms, 0);
}

/* A failure of the flow: reported when it differs from the last one (an outage is one line, not
 * one per retry), then retried. */
static void fail_retry(rdzv_etcd_leader_t *l, const char *why) {
    if (strcmp(l->last_err, why) != 0) {
        snprintf(l->last_err, sizeof l->last_err, "%s", why);
        report(l, RDZV_LEADER_ERROR, NULL, 0, 0, why);
    }
    retry_later(l, l->retry_ms);
}

/* A new flow: the old one's replies and watch are ignored from here on. */
static void restart_flow(rdzv_etcd_leader_t *l) {
    l->epoch++;
    uv_timer_stop(&l->retry_timer);
    if (l->watch != NULL) {
        l->watch->live = 0;
        rdzv_etcd_watch_cancel(l->watch->w);
        l->watch = NULL;
    }
}

static void on_forgotten(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    (void)st, (void)res, (void)why;
    call_end(arg);
}

/* Revokes a lease we no longer use, best effort (its keys go with it). */
static void revoke_stray(rdzv_etcd_leader_t *l, int64_t lease) {
    call_t *k = lease != 0 ? call_new(l) : NULL;
    if (k != NULL && rdzv_etcd_lease_revoke(l->c, lease, on_forgotten, k, NULL) != 0)
        call_end(k);
}

static void drop_lease(rdzv_etcd_leader_t *l) {
    uv_timer_stop(&l->ka_timer);
    uv_timer_stop(&l->deadline_timer);
    l->old_lease = l->lease;
    l->lease = 0;
    l->keepalives = 0;
}

/* ---- losses ---- */

static void lease_lost(rdzv_etcd_leader_t *l, const char *why) {
    int led = l->leading;
    int64_t rev = l->my_rev, lease = l->lease;
    restart_flow(l);
    drop_lease(l);
    l->leading = 0;
    l->my_rev = 0;
    l->seen_rev = 0;
    char line[WHY_LEN];
    snprintf(line, sizeof line, "%s (lease %" PRIx64 "): %s",
             led ? "lost leadership" : "lost the lease", (uint64_t)lease, why);
    report(l, RDZV_LEADER_LOST, NULL, 0, led ? rev : 0, line);
    revoke_stray(l, lease);
    retry_later(l, 0);
}

/* Our key went (deleted by hand, a resign from elsewhere) while the lease lives: campaign. */
static void leadership_lost(rdzv_etcd_leader_t *l, const char *why) {
    int64_t rev = l->my_rev;
    restart_flow(l);
    l->leading = 0;
    l->my_rev = 0;
    l->seen_rev = 0;
    char line[WHY_LEN];
    snprintf(line, sizeof line, "lost leadership (revision %" PRId64 "): %s", rev, why);
    report(l, RDZV_LEADER_LOST, NULL, 0, rev, line);
    retry_later(l, 0);
}

/* ---- the lease ---- */

static void on_deadline(uv_timer_t *t) {
    rdzv_etcd_leader_t *l = t->data;
    char why[WHY_LEN];
    snprintf(why, sizeof why, "no keepalive answered by %s within the %" PRIu64 " ms TTL",
             rdzv_etcd_endpoint(l->c), l->ttl_ms);
    lease_lost(l, why);
}

/* True (and the loss handled) when the lease's deadline has passed: a process that was stopped
 * may find a watch event and the deadline due on one loop turn, and the lease comes first. */
static int lease_expired(rdzv_etcd_leader_t *l) {
    if (l->closing || l->lease == 0 || uv_now(l->loop) < l->deadline)
        return 0;
    on_deadline(&l->deadline_timer);
    return 1;
}

static void arm_deadline(rdzv_etcd_leader_t *l) {
    uint64_t now = uv_now(l->loop);
    uv_timer_start(&l->deadline_timer, on_deadline, l->deadline > now ? l->deadline - now : 0, 0);
}

static void on_ka_tick(uv_timer_t *t);

static void on_keepalive(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    call_t *k = arg;
    rdzv_etcd_leader_t *l = k->l;
    if (!l->closing && l->lease != 0 && k->lease == l->lease) {
        l->keepalives--;
        if (st == DDP_ENOKEY) {
            lease_lost(l, why);
        } else if (st != 0) {
            if (!l->ka_failing)
                report(l, RDZV_LEADER_ERROR, NULL, 0, 0, why);
            l->ka_failing = 1;
            /* A missed renewal is tried again soon, not a whole period later. */
            if (l->keepalives == 0 && !l->closing)
                uv_timer_start(&l->ka_timer, on_ka_tick, l->retry_ms / 2, l->ttl_ms / 3);
        } else {
            uint64_t ttl = res->lease_ttl > 0 && (uint64_t)res->lease_ttl * 1000 < l->ttl_ms
                               ? (uint64_t)res->lease_ttl * 1000
                               : l->ttl_ms;
            l->ka_failing = 0;
            if (k->sent + ttl > l->deadline)
                l->deadline = k->sent + ttl;
            if (uv_now(l->loop) >= l->deadline)
                on_deadline(&l->deadline_timer);
            else
                arm_deadline(l);
        }
    }
    call_end(k);
}

static void on_ka_tick(uv_timer_t *t) {
    rdzv_etcd_leader_t *l = t->data;
    if (l->lease == 0 || l->keepalives >= MAX_KEEPALIVES)
        return;
    call_t *k = call_new(l);
    ddp_err_t err = {0};
    if (k == NULL)
        return;
    if (rdzv_etcd_lease_keepalive(l->c, l->lease, on_keepalive, k, &err) != 0) {
        call_end(k);
        if (!l->ka_failing)
            report(l, RDZV_LEADER_ERROR, NULL, 0, 0, err.text);
        l->ka_failing = 1;
        return;
    }
    l->keepalives++;
}

static void on_grant(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    call_t *k = arg;
    rdzv_etcd_leader_t *l = k->l;
    if (!current(k) || l->lease != 0) {
        if (st == 0)
            revoke_stray(l, res->lease_id);
    } else if (st != 0) {
        fail_retry(l, why);
    } else {
        uint64_t ttl = (uint64_t)res->lease_ttl * 1000;
        l->last_err[0] = '\0';
        l->lease = res->lease_id;
        l->deadline = k->sent + (ttl > 0 && ttl < l->ttl_ms ? ttl : l->ttl_ms);
        l->ka_failing = 0;
        arm_deadline(l);
        uv_timer_start(&l->ka_timer, on_ka_tick, l->ttl_ms / 3, l->ttl_ms / 3);
        campaign(l);
    }
    call_end(k);
}

static void grant(rdzv_etcd_leader_t *l) {
    call_t *k = call_new(l);
    ddp_err_t err = {0};
    if (k == NULL) {
        fail_retry(l, "etcd election: out of memory");
        return;
    }
    if (rdzv_etcd_lease_grant(l->c, (int64_t)(l->ttl_ms / 1000), on_grant, k, &err) != 0) {
        call_end(k);
        fail_retry(l, err.text);
    }
}

/* ---- the flow ---- */

static void on_watch(void *arg, int st, const rdzv_etcd_watch_msg_t *msg, const char *why);

static void watch_from(rdzv_etcd_leader_t *l, int64_t rev) {
    call_t *k = call_new(l);
    ddp_err_t err = {0};
    if (k == NULL) {
        fail_retry(l, "etcd election: out of memory");
        return;
    }
    k->live = 1;
    if (rdzv_etcd_watch(l->c, l->key, l->key_len, 0, rev, on_watch, k, &k->w, &err) != 0) {
        call_end(k);
        fail_retry(l, err.text);
        return;
    }
    l->watch = k;
}

static void become_leader(rdzv_etcd_leader_t *l, int64_t rev, int64_t watch_rev) {
    if (uv_now(l->loop) >= l->deadline) {
        lease_lost(l, "the TTL passed before the campaign's answer");
        return;
    }
    if (!l->leading || l->my_rev != rev) {
        l->leading = 1;
        l->my_rev = rev;
        l->seen_rev = rev;
        report(l, RDZV_LEADER_LEADING, l->value, l->value_len, rev, NULL);
    }
    if (!l->closing && l->watch == NULL)
        watch_from(l, watch_rev);
}

static void on_watch(void *arg, int st, const rdzv_etcd_watch_msg_t *msg, const char *why) {
    call_t *k = arg;
    rdzv_etcd_leader_t *l = k->l;
    if (k->live && current(k) && lease_expired(l)) {
        if (st != 0)
            call_end(k);
        return;
    }
    if (st != 0) {
        if (k->live && current(k) && l->watch == k) {
            l->watch = NULL;
            fail_retry(l, why); /* resume reads the key again and watches anew */
        }
        call_end(k);
        return;
    }
    if (k->live && current(k))
        l->last_err[0] = '\0';
    for (size_t i = 0; i < msg->n_events && k->live && current(k); i++) {
        const rdzv_etcd_event_t *e = &msg->events[i];
        if (e->type == RDZV_ETCD_EV_DELETE) {
            if (l->leading) {
                leadership_lost(l, "the leader key was deleted");
            } else if (l->candidate && l->lease != 0) {
                restart_flow(l);
                campaign(l);
            } else if (!l->candidate && l->seen_rev != 0) {
                l->seen_rev = 0;
                report(l, RDZV_LEADER_NONE, NULL, 0, 0, NULL);
            }
        } else if (l->leading && e->kv.create_revision != l->my_rev) {
            leadership_lost(l, "another candidate holds the leader key");
        } else if (!l->leading && e->kv.create_revision != l->seen_rev) {
            l->seen_rev = e->kv.create_revision;
            report(l, RDZV_LEADER_OBSERVED, e->kv.value, e->kv.value_len, e->kv.create_revision,
                   NULL);
        }
    }
}

static void on_get(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    call_t *k = arg;
    rdzv_etcd_leader_t *l = k->l;
    if (current(k) && st == 0)
        l->last_err[0] = '\0';
    if (!current(k) || lease_expired(l)) {
        /* a newer flow runs */
    } else if (st != 0) {
        fail_retry(l, why);
    } else if (res->n_kvs == 0) {
        if (l->leading)
            leadership_lost(l, "the leader key is gone");
        else if (l->candidate)
            retry_later(l, 0); /* campaign (or grant first) */
        else {
            if (l->seen_rev != 0)
                report(l, RDZV_LEADER_NONE, NULL, 0, 0, NULL);
            l->seen_rev = 0;
            if (!l->closing && current(k))
                watch_from(l, res->revision + 1);
        }
    } else {
        const rdzv_etcd_kv_t *kv = &res->kvs[0];
        if (l->candidate && l->lease != 0 && kv->lease == l->lease) {
            /* Ours: a campaign whose answer was lost, or a leader re-reading its key. */
            become_leader(l, kv->create_revision, res->revision + 1);
        } else if (l->leading) {
            leadership_lost(l, "another candidate holds the leader key");
        } else {
            if (l->old_lease != 0 && kv->lease == l->old_lease) {
                /* The key of a lease this candidate lost: handing over need not wait its TTL. */
                revoke_stray(l, l->old_lease);
                l->old_lease = 0;
            }
            if (kv->create_revision != l->seen_rev) {
                l->seen_rev = kv->create_revision;
                report(l, RDZV_LEADER_OBSERVED, kv->value, kv->value_len, kv->create_revision,
                       NULL);
            }
            if (!l->closing && current(k) && l->watch == NULL)
                watch_from(l, res->revision + 1);
        }
    }
    call_end(k);
}

static void observe(rdzv_etcd_leader_t *l) {
    call_t *k = call_new(l);
    ddp_err_t err = {0};
    if (k == NULL) {
        fail_retry(l, "etcd election: out of memory");
        return;
    }
    if (rdzv_etcd_get(l->c, l->key, l->key_len, 0, 0, on_get, k, &err) != 0) {
        call_end(k);
        fail_retry(l, err.text);
    }
}

static void on_campaign(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    call_t *k = arg;
    rdzv_etcd_leader_t *l = k->l;
    if (!current(k) || l->lease == 0 || k->lease != l->lease || lease_expired(l)) {
        /* a newer flow or lease, or the lease ran out */
    } else if (st == DDP_ENOKEY) {
        lease_lost(l, why);
    } else if (st != 0) {
        fail_retry(l, why);
    } else if (res->succeeded) {
        /* The txn's only write is our put: its revision is the key's create revision. */
        become_leader(l, res->revision, res->revision + 1);
    } else {
        observe(l);
    }
    call_end(k);
}

/* A candidate that campaigns without leading does not know who leads until the txn answers:
 * the key went (a delete, a range that found none), or the flow starts again after a failure.
 * Its last report no longer holds, and its user must not pass it on meanwhile: a store that
 * names the leader it saw last would send clients, which the new leader's key sent to it the
 * moment the txn committed (before its answer arrives here), back to a dead one. NONE now;
 * the txn's answer reports the leader (LEADING, or OBSERVED from the range after a loss). */
static void campaign_unsure(rdzv_etcd_leader_t *l) {
    if (l->leading || l->seen_rev == 0)
        return;
    l->seen_rev = 0;
    report(l, RDZV_LEADER_NONE, NULL, 0, 0, NULL);
}

static void campaign(rdzv_etcd_leader_t *l) {
    campaign_unsure(l);
    rdzv_etcd_compare_t cmp = {.key = l->key,
                               .key_len = l->key_len,
                               .target = RDZV_ETCD_CMP_CREATE,
                               .cmp = RDZV_ETCD_EQUAL,
                               .number = 0};
    rdzv_etcd_op_t put = {.kind = RDZV_ETCD_OP_PUT,
                          .key = l->key,
                          .key_len = l->key_len,
                          .value = l->value,
                          .value_len = l->value_len,
                          .lease = l->lease};
    rdzv_etcd_txn_t txn = {.compares = &cmp, .n_compares = 1, .success = &put, .n_success = 1};
    call_t *k = call_new(l);
    ddp_err_t err = {0};
    if (k == NULL) {
        fail_retry(l, "etcd election: out of memory");
        return;
    }
    if (rdzv_etcd_txn(l->c, &txn, on_campaign, k, &err) != 0) {
        call_end(k);
        fail_retry(l, err.text);
    }
}

/* The next step: a lease first, then the campaign (which observes when it loses); an observer
 * reads and watches. A leader whose watch broke campaigns: the txn fails on its own key, the
 * range finds it ours, and it watches again without a new report. */
static void resume(rdzv_etcd_leader_t *l) {
    if (l->closing)
        return;
    restart_flow(l);
    if (l->candidate && l->lease == 0)
        grant(l);
    else if (l->candidate)
        campaign(l);
    else
        observe(l);
}

/* ---- the API ---- */

int rdzv_etcd_leader_start(rdzv_etcd_t *c, const rdzv_etcd_leader_opts_t *o,
                           rdzv_etcd_leader_t **out, ddp_err_t *err) {
    *out = NULL;
    if (c == NULL || o->key == NULL || o->key_len == 0 || o->cb == NULL)
        return ddp_err_set(err, -EINVAL, "etcd election: needs a client, a key and a callback");
    if (o->ttl_s < 1 || o->ttl_s > 3600)
        return ddp_err_set(err, -EINVAL, "etcd election: TTL %d s is not in 1..3600", o->ttl_s);
    rdzv_etcd_leader_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    l->key = malloc(o->key_len);
    l->value = malloc(o->value_len + 1);
    if (l->key == NULL || l->value == NULL) {
        free(l->key);
        free(l->value);
        free(l);
        return ddp_err_set(err, -ENOMEM, "out of memory");
    }
    memcpy(l->key, o->key, o->key_len);
    if (o->value_len > 0)
        memcpy(l->value, o->value, o->value_len);
    l->value[o->value_len] = '\0';
    l->key_len = o->key_len;
    l->value_len = o->value_len;
    l->candidate = o->value != NULL;
    l->c = c;
    l->loop = rdzv_etcd_loop(c);
    l->ttl_ms = (uint64_t)o->ttl_s * 1000;
    l->retry_ms = l->ttl_ms / 4;
    if (l->retry_ms < MIN_RETRY_MS)
        l->retry_ms = MIN_RETRY_MS;
    if (l->retry_ms > MAX_RETRY_MS)
        l->retry_ms = MAX_RETRY_MS;
    l->cb = o->cb;
    l->arg = o->arg;
    uv_timer_t *timers[] = {&l->ka_timer, &l->deadline_timer, &l->retry_timer};
    for (int i = 0; i < 3; i++) {
        uv_timer_init(l->loop, timers[i]);
        timers[i]->data = l;
    }
    l->handles = 3;
    /* The first step runs from the loop, so that no report comes from inside this call. */
    retry_later(l, 0);
    *out = l;
    return 0;
}

/* Gives up the key and the lease (bounded calls whose answers nobody waits for). */
static void release(rdzv_etcd_leader_t *l) {
    restart_flow(l);
    if (l->leading) {
        rdzv_etcd_compare_t cmp = {.key = l->key,
                                   .key_len = l->key_len,
                                   .target = RDZV_ETCD_CMP_CREATE,
                                   .cmp = RDZV_ETCD_EQUAL,
                                   .number = l->my_rev};
        rdzv_etcd_op_t del = {.kind = RDZV_ETCD_OP_DELETE, .key = l->key, .key_len = l->key_len};
        rdzv_etcd_txn_t txn = {.compares = &cmp, .n_compares = 1, .success = &del, .n_success = 1};
        call_t *k = call_new(l);
        if (k != NULL && rdzv_etcd_txn(l->c, &txn, on_forgotten, k, NULL) != 0)
            call_end(k);
    }
    int64_t lease = l->lease;
    drop_lease(l);
    l->old_lease = 0;
    revoke_stray(l, lease);
    l->leading = 0;
    l->my_rev = 0;
    l->seen_rev = 0;
}

void rdzv_etcd_leader_resign(rdzv_etcd_leader_t *l) {
    if (l == NULL || l->closing || !l->candidate)
        return;
    release(l);
    l->candidate = 0;
    retry_later(l, 0);
}

static void on_timer_closed(uv_handle_t *h) {
    rdzv_etcd_leader_t *l = h->data;
    l->handles--;
    maybe_free(l);
}

void rdzv_etcd_leader_close(rdzv_etcd_leader_t *l, void (*close_cb)(void *arg), void *arg) {
    if (l == NULL || l->closing)
        return;
    release(l);
    l->closing = 1;
    l->close_cb = close_cb;
    l->close_arg = arg;
    /* Held while the timers close, so that the close callback never runs inside this call. */
    l->inflight++;
    uv_close((uv_handle_t *)&l->ka_timer, on_timer_closed);
    uv_close((uv_handle_t *)&l->deadline_timer, on_timer_closed);
    uv_close((uv_handle_t *)&l->retry_timer, on_timer_closed);
    l->inflight--;
}

uint64_t rdzv_etcd_leader_deadline(const rdzv_etcd_leader_t *l) {
    return l->deadline;
}

int rdzv_etcd_leader_leading(rdzv_etcd_leader_t *l) {
    if (l == NULL || !l->leading || l->closing)
        return 0;
    uv_update_time(l->loop);
    return uv_now(l->loop) < l->deadline;
}

/* ---- the fenced write ---- */

typedef struct fence {
    rdzv_etcd_t *c;
    rdzv_etcd_cb cb;
    void *arg;
    int64_t revision;
} fence_t;

static void on_fenced(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    fence_t *f = arg;
    if (st == 0 && !res->succeeded) {
        char line[WHY_LEN];
        snprintf(line, sizeof line,
                 "%s/v3/kv/txn: fenced out: the leader key's create revision is no longer %" PRId64,
                 rdzv_etcd_endpoint(f->c), f->revision);
        f->cb(f->arg, DDP_EFENCED, NULL, line);
    } else {
        f->cb(f->arg, st, res, why);
    }
    free(f);
}

int rdzv_etcd_fenced_put(rdzv_etcd_t *c, const void *leader_key, size_t leader_key_len,
                         int64_t revision, const void *key, size_t key_len, const void *value,
                         size_t value_len, int64_t lease, rdzv_etcd_cb cb, void *arg,
                         ddp_err_t *err) {
    if (revision <= 0 || cb == NULL)
        return ddp_err_set(err, -EINVAL, "a fenced put needs a revision and a callback");
    fence_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    *f = (fence_t){.c = c, .cb = cb, .arg = arg, .revision = revision};
    rdzv_etcd_compare_t cmp = {.key = leader_key,
                               .key_len = leader_key_len,
                               .target = RDZV_ETCD_CMP_CREATE,
                               .cmp = RDZV_ETCD_EQUAL,
                               .number = revision};
    rdzv_etcd_op_t put = {.kind = RDZV_ETCD_OP_PUT,
                          .key = key,
                          .key_len = key_len,
                          .value = value,
                          .value_len = value_len,
                          .lease = lease};
    rdzv_etcd_txn_t txn = {.compares = &cmp, .n_compares = 1, .success = &put, .n_success = 1};
    int st = rdzv_etcd_txn(c, &txn, on_fenced, f, err);
    if (st != 0)
        free(f);
    return st;
}
