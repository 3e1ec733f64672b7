/* ddpw.c: the worker environment (torchrun's variables plus DDPRUN_*), the store connection,
 * backend choice and the dispatch of collectives to the CPU or NCCL backend. */
#include "ddpw_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_buf.h"
#include "ddp_parse.h"

/* Reads integer variable name into *out. Absent: *out = def and returns 0 when optional, else
 * DDP_EENV. Malformed or out of [min, max]: DDP_EENV naming the variable and its value. */
static int env_int(const char *name, int64_t min, int64_t max, int optional, int64_t def,
                   int64_t *out, ddp_err_t *err) {
    const char *s = getenv(name);
    if (s == NULL || *s == '\0') {
        if (optional) {
            *out = def;
            return 0;
        }
        return ddp_err_set(err, DDP_EENV, "environment variable %s is not set", name);
    }
    if (ddp_parse_i64(s, min, max, out) != 0)
        return ddp_err_set(err, DDP_EENV,
                           "environment variable %s='%s' is not an integer in [%lld, %lld]", name,
                           s, (long long)min, (long long)max);
    return 0;
}

static int env_str(const char *name, char *out, size_t cap, ddp_err_t *err) {
    const char *s = getenv(name);
    if (s == NULL)
        s = "";
    if (strlen(s) >= cap)
        return ddp_err_set(err, DDP_EENV, "environment variable %s is longer than %zu bytes", name,
                           cap - 1);
    snprintf(out, cap, "%s", s);
    return 0;
}

int ddpw_env_read(ddpw_env_t *env, ddp_err_t *err) {
    memset(env, 0, sizeof *env);
    int64_t v;
    int rc;
    int distributed = getenv("RANK") != NULL || getenv("WORLD_SIZE") != NULL;
    if (!distributed) {
        env->world_size = env->local_world_size = 1;
    } else {
        if ((rc = env_int("WORLD_SIZE", 1, 1 << 20, 0, 1, &v, err)) != 0)
            return rc;
        env->world_size = (int)v;
        if ((rc = env_int("RANK", 0, env->world_size - 1, 0, 0, &v, err)) != 0)
            return rc;
        env->rank = (int)v;
        if ((rc = env_int("LOCAL_WORLD_SIZE", 1, env->world_size, 0, 1, &v, err)) != 0)
            return rc;
        env->local_world_size = (int)v;
        if ((rc = env_int("LOCAL_RANK", 0, env->local_world_size - 1, 0, 0, &v, err)) != 0)
            return rc;
        env->local_rank = (int)v;
        if ((rc = env_int("GROUP_RANK", 0, env->world_size - 1, 1, 0, &v, err)) != 0)
            return rc;
        env->group_rank = (int)v;
    }
    if ((rc = env_int("TORCHELASTIC_RESTART_COUNT", 0, INT32_MAX, 1, 0, &v, err)) != 0)
        return rc;
    env->restart_count = (int)v;
    if ((rc = env_int("DDPRUN_ROUND", 0, INT64_MAX, 1, env->restart_count, &v, err)) != 0)
        return rc;
    env->round = v;

    if ((rc = env_str("DDPRUN_RUN_ID", env->run_id, sizeof env->run_id, err)) != 0)
        return rc;
    if (env->run_id[0] == '\0' &&
        (rc = env_str("TORCHELASTIC_RUN_ID", env->run_id, sizeof env->run_id, err)) != 0)
        return rc;
    if (env->run_id[0] == '\0')
        snprintf(env->run_id, sizeof env->run_id, "none");

    /* The store: ddprun's own variables; else, under torchrun with the agent's store, MASTER_*. */
    const char *host_var = "DDPRUN_STORE_ADDR", *port_var = "DDPRUN_STORE_PORT";
    if (getenv(host_var) == NULL && getenv("MASTER_ADDR") != NULL &&
        getenv("TORCHELASTIC_USE_AGENT_STORE") != NULL &&
        strcmp(getenv("TORCHELASTIC_USE_AGENT_STORE"), "True") == 0) {
        host_var = "MASTER_ADDR";
        port_var = "MASTER_PORT";
    }
    if ((rc = env_str(host_var, env->store_host, sizeof env->store_host, err)) != 0)
        return rc;
    if (env->store_host[0] != '\0') {
        env->have_store = 1;
        if ((rc = env_int(port_var, 1, 65535, 0, 0, &v, err)) != 0)
            return rc;
        env->store_port = (uint16_t)v;
    }
    if ((rc = env_str("DDPRUN_STORE_TOKEN", env->token_hex, sizeof env->token_hex, err)) != 0)
        return rc;
    if (env->world_size > 1 && !env->have_store)
        return ddp_err_set(err, DDP_EENV,
                           "environment variable DDPRUN_STORE_ADDR is not set (WORLD_SIZE=%d "
                           "needs the job's store; run under ddprun)",
                           env->world_size);
    return 0;
}

void ddpw__key(const ddpw_t *w, const char *key, char *out) {
    snprintf(out, DDPW_KEY_MAX, "ddpw/%s/%lld/%s", w->env.run_id, (long long)w->env.round, key);
}

static int connect_store(ddpw_t *w, int connect_ms, ddp_err_t *err) {
    ddp_buf_t tok = DDP_BUF_INIT;
    int rc = 0;
    if (w->env.token_hex[0] != '\0') {
        rc = rdzv_token_from_hex(w->env.token_hex, &tok, err);
        if (rc != 0)
            goto out;
    }
    rdzv_client_opts_t o = {
        .host = w->env.store_host,
        .port = w->env.store_port,
        .token = tok.len ? tok.data : NULL,
        .token_len = tok.len,
        .connect_timeout_ms = connect_ms,
        .io_timeout_ms = w->timeout_ms,
    };
    rc = rdzv_client_connect(&o, &w->store, err);
out:
    if (tok.data != NULL)
        memset(tok.data, 0, tok.cap);
    ddp_buf_free(&tok);
    return rc;
}

int ddpw_init_env(ddpw_t **out, const ddpw_env_t *env, const ddpw_opts_t *opts, ddp_err_t *err) {
    ddpw_opts_t def = DDPW_OPTS_INIT;
    if (opts == NULL)
        opts = &def;
    *out = NULL;
    ddpw_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    w->env = *env;
    w->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : DDPW_DEFAULT_TIMEOUT_MS;
    int64_t t;
    if (opts->timeout_ms <= 0 && getenv("DDPRUN_COLL_TIMEOUT_MS") != NULL) {
        int rc = env_int("DDPRUN_COLL_TIMEOUT_MS", 1, INT32_MAX, 0, 0, &t, err);
        if (rc != 0) {
            free(w);
            return rc;
        }
        w->timeout_ms = (int)t;
    }
    w->chunk_bytes = opts->cpu_chunk_bytes ? opts->cpu_chunk_bytes : DDPW_DEFAULT_CHUNK;
    int rc = 0;

    /* Choose the backend before touching the store so "no GPU" is reported the same way on
     * every rank, without waiting for peers. */
    ddpw_backend_t b = opts->backend;
    /* Asking CUDA costs ~1 s on a machine without a driver: only when a GPU may be used. */
    int ndev = b == DDPW_BACKEND_CPU ? 0 : ddpw__cuda_device_count();
    /* AUTO takes NCCL only when every local rank gets a device of its own: deciding by this
     * rank's LOCAL_RANK alone would split a node with fewer GPUs than ranks between NCCL and the
     * CPU backend, and both sides would wait for each other until the timeout. */
    if (b == DDPW_BACKEND_AUTO)
        b = ndev >= w->env.local_world_size ? DDPW_BACKEND_NCCL : DDPW_BACKEND_CPU;
    if (b == DDPW_BACKEND_NCCL) {
        if (ndev <= 0) {
            rc = ddp_err_set(err, DDP_ENOGPU, "backend nccl: no CUDA device is visible (%s)",
#ifdef DDP_HAVE_CUDA
                             "cudaGetDeviceCount found none"
#else
                             "built without CUDA"
#endif
            );
            goto fail;
        }
        if (w->env.local_rank >= ndev) {
            rc = ddp_err_set(err, DDP_ENOGPU,
                             "backend nccl: LOCAL_RANK=%d but only %d CUDA device(s) are visible",
                             w->env.local_rank, ndev);
            goto fail;
        }
    }
    w->multi_node = b == DDPW_BACKEND_CPU && w->env.local_world_size != w->env.world_size;
    w->backend = b;

    if (w->env.world_size > 1) {
        int cms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DDPW_DEFAULT_CONNECT_MS;
        if ((rc = connect_store(w, cms, err)) != 0)
            goto fail;
    }
    if (b == DDPW_BACKEND_NCCL) {
        rc = ddpw__nccl_setup(w, err);
    } else {
        /* CPU: shared memory among this node's ranks, then a TCP ring between node leaders. */
        if (w->env.local_world_size > 1)
            rc = ddpw__shm_setup(w, err);
        if (rc == 0 && w->multi_node)
            rc = ddpw__tcp_setup(w, err);
    }
    if (rc != 0)
        goto fail;
    *out = w;
    return 0;
fail:
    ddpw_free(w);
    return rc;
}

int ddpw_init(ddpw_t **out, const ddpw_opts_t *opts, ddp_err_t *err) {
    ddpw_env_t env;
    *out = NULL;
    int rc = ddpw_env_read(&env, err);
    if (rc != 0)
        return rc;
    return ddpw_init_env(out, &env, opts, err);
}

void ddpw_free(ddpw_t *w) {
    if (w == NULL)
        return;
    ddpw__nccl_free(w->nccl);
    ddpw__tcp_free(w->tcp);
    ddpw__shm_free(w->shm);
    rdzv_client_free(w->store);
    free(w);
}

int ddpw_rank(const ddpw_t *w) {
    return w->env.rank;
}
int ddpw_local_rank(const ddpw_t *w) {
    return w->env.local_rank;
}
int ddpw_world_size(const ddpw_t *w) {
    return w->env.world_size;
}
int ddpw_local_world_size(const ddpw_t *w) {
    return w->env.local_world_size;
}
int ddpw_group_rank(const ddpw_t *w) {
    return w->env.group_rank;
}
int64_t ddpw_round(const ddpw_t *w) {
    return w->env.round;
}
ddpw_backend_t ddpw_backend(const ddpw_t *w) {
    return w->backend;
}
int ddpw_device(const ddpw_t *w) {
    return w->backend == DDPW_BACKEND_NCCL ? w->env.local_rank : -1;
}

const char *ddpw_backend_name(ddpw_backend_t b) {
    switch (b) {
    case DDPW_BACKEND_CPU: return "cpu";
    case DDPW_BACKEND_NCCL: return "nccl";
    default: return "auto";
    }
}

int ddpw_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err) {
    if (w->backend == DDPW_BACKEND_NCCL)
        return ddpw__nccl_allreduce(w, buf, count, op, NULL, 1, err);
    if (w->env.world_size == 1 || count == 0)
        return 0;
    if (w->multi_node)
        return ddpw__tcp_allreduce(w, buf, count, op, err);
    return ddpw__shm_allreduce(w, buf, count, op, err);
}

int ddpw_allreduce_async(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, void *stream,
                         ddp_err_t *err) {
    if (w->backend == DDPW_BACKEND_NCCL)
        return ddpw__nccl_allreduce(w, buf, count, op, stream, 0, err);
    return ddpw_allreduce(w, buf, count, op, err);
}

int ddpw_stream_wait(ddpw_t *w, void *stream, ddp_err_t *err) {
    if (w->backend == DDPW_BACKEND_NCCL)
        return ddpw__nccl_stream_wait(w, stream, err);
    return 0;
}

int ddpw_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err) {
    if (root < 0 || root >= w->env.world_size)
        return ddp_err_set(err, -EINVAL, "broadcast: root %d is not a rank of world %d", root,
                           w->env.world_size);
    if (w->backend == DDPW_BACKEND_NCCL)
        return ddpw__nccl_broadcast(w, buf, len, root, err);
    if (w->env.world_size == 1 || len == 0)
        return 0;
    if (w->multi_node)
        return ddpw__tcp_broadcast(w, buf, len, root, err);
    return ddpw__shm_broadcast(w, buf, len, root, err);
}

int ddpw_barrier(ddpw_t *w, ddp_err_t *err) {
    if (w->env.world_size == 1)
        return 0;
    if (w->multi_node)
        return ddpw__tcp_barrier(w, err);
    if (w->shm != NULL)
        return ddpw__shm_barrier(w, err);
    char name[32], key[DDPW_KEY_MAX];
    snprintf(name, sizeof name, "barrier/%llu", (unsigned long long)w->seq++);
    ddpw__key(w, name, key);
    return rdzv_client_barrier(w->store, key, w->env.world_size, w->timeout_ms, err);
}

int ddpw_store_set(ddpw_t *w, const char *key, const void *val, size_t len, ddp_err_t *err) {
    if (w->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    ddpw__key(w, key, k);
    return rdzv_client_set(w->store, k, val, len, err);
}

int ddpw_store_get(ddpw_t *w, const char *key, void *out, size_t cap, size_t *len, int timeout_ms,
                   ddp_err_t *err) {
    if (w->store == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "no store in a world of one process");
    char k[DDPW_KEY_MAX];
    ddpw__key(w, key, k);
    ddp_buf_t v = DDP_BUF_INIT;
    int rc = rdzv_client_get(w->store, k, timeout_ms < 0 ? w->timeout_ms : timeout_ms, &v, err);
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
