/* SPDX-License-Identifier: Apache-2.0
 * rdzv_keys: the store's key table (a chained hash with a per-server random seed, grown at load
 * factor 1), the queues kept beside the values, and the waits parked on keys: WAIT, GET_WAIT and
 * BARRIER are answered when their keys appear or their last party arrives, never polled. Every
 * byte is on the memory account (rdzv_server_int.h). */
#include "rdzv_server_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the key table ---- */

static uint64_t key_hash(const rdzv_server_t *s, const uint8_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull ^ s->seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static entry_t *tbl_find(rdzv_server_t *s, const rdzv_slice_t *k, uint64_t h) {
    for (entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->klen == k->n && memcmp(e->key, k->p, k->n) == 0)
            return e;
    return NULL;
}

static void tbl_grow(rdzv_server_t *s) {
    size_t n = s->nbuckets * 2;
    entry_t **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    mem_acct(s, s->nbuckets * sizeof *b, n * sizeof *b);
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

/* Finds key or adds it absent. Returns NULL when memory is short. */
entry_t *rdzv__keys_get_or_add(rdzv_server_t *s, const rdzv_slice_t *k) {
    uint64_t h = key_hash(s, k->p, k->n);
    entry_t *e = tbl_find(s, k, h);
    if (e != NULL)
        return e;
    size_t sz = sizeof *e + k->n;
    if (!mem_allows(s, sz) || (e = calloc(1, sz)) == NULL)
        return NULL;
    mem_acct(s, 0, sz);
    e->hash = h;
    e->klen = (uint32_t)k->n;
    memcpy(e->key, k->p, k->n);
    e->next = s->buckets[h & (s->nbuckets - 1)];
    s->buckets[h & (s->nbuckets - 1)] = e;
    if (++s->nentries > s->nbuckets)
        tbl_grow(s);
    return e;
}

entry_t *rdzv__keys_lookup(rdzv_server_t *s, const rdzv_slice_t *k) {
    return tbl_find(s, k, key_hash(s, k->p, k->n));
}

/* Removes e when it has neither a value, nor queued items, nor waiters. */
void rdzv__keys_maybe_remove(rdzv_server_t *s, entry_t *e) {
    if (e->present || e->waiters != NULL || e->q != NULL)
        return;
    entry_t **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    s->nentries--;
    mem_acct(s, sizeof *e + e->klen + e->vcap, 0);
    free(e->val);
    free(e);
}

/* Replaces e's value. Returns 0 or -ENOMEM (memory limit or malloc). */
int rdzv__entry_set(rdzv_server_t *s, entry_t *e, const void *v, size_t n) {
    if (n > e->vcap || e->vcap > 2 * n + 64) {
        size_t cap = n ? n : 1;
        if (!mem_allows(s, cap))
            return -ENOMEM;
        uint8_t *p = malloc(cap);
        if (p == NULL)
            return -ENOMEM;
        mem_acct(s, e->vcap, cap);
        free(e->val);
        e->val = p;
        e->vcap = cap;
    }
    if (n > 0)
        memcpy(e->val, v, n);
    e->vlen = n;
    if (!e->present) {
        e->present = 1;
        s->st.keys++;
    }
    return 0;
}

/* ---- queues ---- */

int rdzv__queue_push(rdzv_server_t *s, entry_t *e, const void *v, size_t n) {
    if (e->q != NULL && e->q->n >= RDZV_MAX_QUEUE_LEN)
        return -ENOSPC;
    size_t need = sizeof(qitem_t) + n + (e->q == NULL ? sizeof *e->q : 0);
    if (!mem_allows(s, need))
        return -ENOMEM;
    qitem_t *it = malloc(sizeof *it + n);
    if (it == NULL)
        return -ENOMEM;
    if (e->q == NULL && (e->q = calloc(1, sizeof *e->q)) == NULL) {
        free(it);
        return -ENOMEM;
    }
    mem_acct(s, 0, need);
    it->next = NULL;
    it->len = n;
    if (n > 0)
        memcpy(it->data, v, n);
    if (e->q->tail != NULL)
        e->q->tail->next = it;
    else
        e->q->head = it;
    e->q->tail = it;
    e->q->n++;
    s->st.queued++;
    return 0;
}

qitem_t *rdzv__queue_pop(rdzv_server_t *s, entry_t *e) {
    rdzv_queue_t *q = e->q;
    if (q == NULL || q->head == NULL)
        return NULL;
    qitem_t *it = q->head;
    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->n--;
    s->st.queued--;
    if (q->n == 0) {
        /* An empty queue is no queue: TCPStore answers QUEUE_LEN 0 either way. */
        mem_acct(s, sizeof *q, 0);
        free(q);
        e->q = NULL;
        rdzv__keys_maybe_remove(s, e);
    }
    return it;
}

void rdzv__qitem_free(rdzv_server_t *s, qitem_t *it) {
    mem_acct(s, sizeof *it + it->len, 0);
    free(it);
}

static void queue_free(rdzv_queue_t *q) {
    if (q == NULL)
        return;
    for (qitem_t *it = q->head, *next; it != NULL; it = next) {
        next = it->next;
        free(it);
    }
    free(q);
}

/* ---- waits ---- */

/* A waiter of c fired for e (now present, or, for a WAIT, with an item queued); answers the wait
 * once nothing is left. */
static void wait_fired(conn_t *c, entry_t *e) {
    if (--c->wait_left > 0)
        return;
    int kind = c->wait_kind;
    rdzv__wait_clear(c); /* every waiter of c has fired: this only frees them */
    if (kind == WAIT_GET) {
        if (rdzv__reply_u8(c, RDZV_GETW_FOUND) == 0)
            rdzv__reply_blob(c, e->val, e->vlen);
    } else {
        rdzv__reply_u8(c, RDZV_WAIT_STOP_WAITING); /* BARRIER's reply is the same byte */
    }
    rdzv__conn_flush(c);
}

/* Unlinks w from its entry, which it leaves for good. */
static void waiter_unlink(entry_t *e, waiter_t *w) {
    if (w->e_prev)
        w->e_prev->e_next = w->e_next;
    else
        e->waiters = w->e_next;
    if (w->e_next)
        w->e_next->e_prev = w->e_prev;
    w->e = NULL;
    w->e_prev = w->e_next = NULL;
}

/* e just got a value: releases its waiters. Each is unlinked from the head of e's list just
 * before it fires, and the rest stay linked: answering one waiter can close other connections
 * (a write error or the output cap closes a member, and the rendezvous then answers or closes
 * other members), and wait_clear must find their waiters on e to unlink them, not freed. */
void rdzv__keys_wake(rdzv_server_t *s, entry_t *e) {
    (void)s;
    waiter_t *w;
    while ((w = e->waiters) != NULL) {
        waiter_unlink(e, w);
        wait_fired(w->c, e); /* may free w and any other waiter no longer on e */
    }
}

void rdzv__keys_wake_one(rdzv_server_t *s, entry_t *e) {
    (void)s;
    waiter_t *oldest = NULL;
    for (waiter_t *w = e->waiters; w != NULL; w = w->e_next)
        if (w->c->wait_kind == WAIT_KEYS)
            oldest = w; /* the list is newest first: the last match waited longest */
    if (oldest != NULL) {
        waiter_unlink(e, oldest);
        wait_fired(oldest->c, e);
    }
}

/* Parks c on key e (one not ready for a WAIT or GET_WAIT; a BARRIER's). Returns 0 or -ENOMEM. */
int rdzv__wait_add(conn_t *c, entry_t *e) {
    rdzv_server_t *s = c->s;
    waiter_t *w;
    if (!mem_allows(s, sizeof *w) || (w = calloc(1, sizeof *w)) == NULL)
        return -ENOMEM;
    mem_acct(s, 0, sizeof *w);
    w->c = c;
    w->e = e;
    w->e_next = e->waiters;
    if (e->waiters)
        e->waiters->e_prev = w;
    e->waiters = w;
    w->c_next = c->waiters;
    c->waiters = w;
    c->wait_left++;
    return 0;
}

void rdzv__wait_clear(conn_t *c) {
    rdzv_server_t *s = c->s;
    waiter_t *w = c->waiters;
    while (w != NULL) {
        waiter_t *next = w->c_next;
        entry_t *e = w->e;
        if (e != NULL) {
            waiter_unlink(e, w);
            rdzv__keys_maybe_remove(s, e);
        }
        mem_acct(s, sizeof *w, 0);
        free(w);
        w = next;
    }
    if (c->wait_kind != WAIT_NONE)
        s->st.waiting--;
    c->waiters = NULL;
    c->wait_kind = WAIT_NONE;
    c->wait_left = 0;
}

void rdzv__entry_drop_value(rdzv_server_t *s, entry_t *e) {
    if (!e->present)
        return;
    e->present = 0;
    s->st.keys--;
    mem_acct(s, e->vcap, 0);
    free(e->val);
    e->val = NULL;
    e->vlen = e->vcap = 0;
}

/* Takes e's value and queued items off; removes e when nothing else (a waiter) holds it. */
static void entry_empty(rdzv_server_t *s, entry_t *e) {
    rdzv__entry_drop_value(s, e);
    if (e->q != NULL) /* the last pop removes e when nothing else holds it */
        for (size_t n = e->q->n; n > 0; n--)
            rdzv__qitem_free(s, rdzv__queue_pop(s, e));
    else
        rdzv__keys_maybe_remove(s, e);
}

void rdzv__keys_drop_if(rdzv_server_t *s, int (*keep)(void *ctx, const uint8_t *key, size_t n),
                        void *ctx) {
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            if ((e->present || e->q != NULL) && !keep(ctx, e->key, e->klen))
                entry_empty(s, e);
            e = next;
        }
    }
}

static int keep_none(void *ctx, const uint8_t *key, size_t n) {
    (void)ctx, (void)key, (void)n;
    return 0;
}

void rdzv__keys_clear(rdzv_server_t *s) {
    rdzv__keys_drop_if(s, keep_none, NULL);
}

void rdzv__keys_free(rdzv_server_t *s) {
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            queue_free(e->q);
            free(e->val);
            free(e);
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = NULL;
    s->nbuckets = 0;
}
