/* SPDX-License-Identifier: Apache-2.0
 * ddpw_store.c: the store services of libddpw, shared by ddpw.c and the backends: keys under the
 * round prefix (DDP_WORKER_KEY_PREFIX "<run_id>/<round>/<key>", rdzv_layout.h, so a restarted job
 * never reads a previous round's values, and the store drops old rounds' keys), SET, bounded GET
 * and a store barrier. */
#include "ddpw_int.h"

#include <stdio.h>
#include <string.h>

#include "ddp_buf.h"
#include "ddp_contract.h"
#include "rdzv_layout.h"

void ddpw__key(const ddpw_ctx_t *c, const char *key, char *out) {
    /* The library's own names are short and the run id is bounded (ddpw_env_read): it fits. */
    if (rdzv_layout_round_key(out, DDPW_KEY_MAX, DDP_WORKER_KEY_PREFIX, c->env.run_id, c->env.round,
                              key) < 0)
        out[0] = '\0';
}

int ddpw__store_set(const ddpw_ctx_t *c, const char *key, const void *val, size_t len,
                    ddp_err_t *err) {
    if (c->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    ddpw__key(c, key, k);
    return rdzv_client_set(c->store, k, val, len, err);
}

int ddpw__store_get(const ddpw_ctx_t *c, const char *key, void *out, size_t cap, size_t *len,
                    int timeout_ms, ddp_err_t *err) {
    if (c->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    ddpw__key(c, key, k);
    ddp_buf_t v = DDP_BUF_INIT;
    int rc = rdzv_client_get(c->store, k, timeout_ms < 0 ? c->timeout_ms : timeout_ms, &v, err);
    if (rc == 0) {
        if (v.len > cap)
            rc = ddp_err_set(err, DDP_ETOOBIG, "store key '%s': value of %zu bytes exceeds %zu", k,
                             v.len, cap);
        else {
            if (v.len)
                memcpy(out, v.data, v.len);
            if (len != NULL)
                *len = v.len;
        }
    }
    ddp_buf_free(&v);
    return rc;
}

int ddpw__store_barrier(const ddpw_ctx_t *c, const char *key, int n, ddp_err_t *err) {
    if (c->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    ddpw__key(c, key, k);
    return rdzv_client_barrier(c->store, k, n, c->timeout_ms, err);
}
