/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_outage.h: a failed call, then a probe; two lines per outage. */
#include "rdzv_etcd_outage.h"

#include <string.h>

static void on_probe_timer(uv_timer_t *t);

static void on_probe(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    (void)res;
    rdzv_etcd_outage_t *o = arg;
    o->pending = 0;
    if (o->closed || status == DDP_ECANCELED)
        return;
    if (status == 0) {
        rdzv_etcd_outage_answered(o);
        return;
    }
    if (!o->down) {
        o->down = 1;
        o->report(o->arg, 1, errtext);
    }
    if (!uv_is_active((uv_handle_t *)&o->timer))
        uv_timer_start(&o->timer, on_probe_timer, o->probe_ms, o->probe_ms);
}

static void probe(rdzv_etcd_outage_t *o) {
    if (o->closed || o->pending)
        return;
    if (rdzv_etcd_get(o->etcd, o->key, o->key_len, RDZV_ETCD_COUNT_ONLY, 0, on_probe, o, NULL) == 0)
        o->pending = 1;
}

static void on_probe_timer(uv_timer_t *t) {
    probe(t->data);
}

int rdzv_etcd_outage_init(rdzv_etcd_outage_t *o, uv_loop_t *loop, rdzv_etcd_t *etcd,
                          const char *key, uint64_t probe_ms, rdzv_etcd_outage_fn report,
                          void *arg) {
    memset(o, 0, sizeof *o);
    o->etcd = etcd;
    o->key = key;
    o->key_len = strlen(key);
    o->probe_ms = probe_ms;
    o->report = report;
    o->arg = arg;
    int rc = uv_timer_init(loop, &o->timer);
    o->timer.data = o;
    return rc;
}

void rdzv_etcd_outage_failed(rdzv_etcd_outage_t *o) {
    /* Down already: the timer probes. Otherwise one probe now, the members tried in turn. */
    if (o->etcd != NULL && !o->down)
        probe(o);
}

void rdzv_etcd_outage_answered(rdzv_etcd_outage_t *o) {
    if (o->etcd == NULL || o->closed)
        return;
    uv_timer_stop(&o->timer);
    if (!o->down)
        return;
    o->down = 0;
    o->report(o->arg, 0, NULL);
}

void rdzv_etcd_outage_close(rdzv_etcd_outage_t *o) {
    if (o->closed)
        return;
    o->closed = 1;
    if (o->timer.data != NULL && !uv_is_closing((uv_handle_t *)&o->timer))
        uv_close((uv_handle_t *)&o->timer, NULL);
}
