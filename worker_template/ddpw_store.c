/* SPDX-License-Identifier: Apache-2.0
 * ddpw_store.c: the store services of libddpw, shared by ddpw.c and the backends: keys under the
 * round prefix (ddpw__key_round, ddpw_keys.h: a restarted job never reads a previous round's
 * values, and the store drops old rounds' keys), SET, bounded GET and a store barrier. */
#include "ddpw_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ddp_buf.h"

/* The whole key of name in c's round into out (DDPW_KEY_MAX bytes). The library's own names and
 * the run id are bounded (ddpw_keys.h, ddpw_env_read); a program's name through ddpw_store_set/get
 * may be too long: -EINVAL naming it. */
static int round_key(const ddpw_ctx_t *c, const char *name, char *out, ddp_err_t *err) {
    if (ddpw__key_round(out, DDPW_KEY_MAX, c->env.run_id, c->env.round, name) < 0)
        return ddp_err_set(err, -EINVAL, "store key '%.64s': longer than %d bytes with its prefix",
                           name, DDPW_KEY_MAX - 1);
    return 0;
}

int ddpw__store_set(const ddpw_ctx_t *c, const char *key, const void *val, size_t len,
                    ddp_err_t *err) {
    if (c->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    int rc = round_key(c, key, k, err);
    if (rc != 0)
        return rc;
    return rdzv_client_set(c->store, k, val, len, err);
}

int ddpw__store_get(const ddpw_ctx_t *c, const char *key, void *out, size_t cap, size_t *len,
                    int timeout_ms, ddp_err_t *err) {
    if (c->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    int rc = round_key(c, key, k, err);
    if (rc != 0)
        return rc;
    ddp_buf_t v = DDP_BUF_INIT;
    rc = rdzv_client_get(c->store, k, timeout_ms < 0 ? c->timeout_ms : timeout_ms, &v, err);
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
    int rc = round_key(c, key, k, err);
    if (rc != 0)
        return rc;
    return rdzv_client_barrier(c->store, k, n, c->timeout_ms, err);
}
