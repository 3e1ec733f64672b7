/* SPDX-License-Identifier: Apache-2.0
 * ddpw.c: the worker environment (torchrun's variables plus DDPRUN_*), the store connection,
 * backend choice and the only dispatcher of collectives: it holds the backends' operation tables
 * (ddpw_int.h) and composes them, shared memory within a node and the TCP ring between nodes. */
#include "ddpw_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_buf.h"
#include "ddp_contract.h"
#include "ddp_parse.h"
#include "ddp_time.h"

struct ddpw {
    ddpw_ctx_t ctx;         /* what the backends see; backend states point into it */
    ddpw_backend_t backend; /* never AUTO */
    /* The collectives among this node's ranks (shm) or among all ranks (nccl). NULL when there is
     * nothing to set up (CPU with one rank on this node). */
    const ddpw_backend_ops_t *ops;
    void *state;
    /* CPU across nodes: the ring between node leaders. ring is NULL within one node; ring_state
     * is NULL on ranks that are not their node's leader. */
    const ddpw_backend_ops_t *ring;
    void *ring_state;
    uint64_t seq; /* store barrier sequence */
    /* CPU backend: when the handle's last collective ended (CLOCK_MONOTONIC ns; 0 = none yet), so
     * the time since is the compute that ddpw_timing_add is told of. */
    uint64_t coll_end_ns;
    char note[600]; /* the backend decision's warning for the user ("" = none) */
};

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

/* The store's address and token: ddprun's own variables; else, under torchrun with the agent's
 * store, MASTER_*. */
static int env_store(ddpw_env_t *env, ddp_err_t *err) {
    int64_t v;
    int rc;
    const char *host_var = DDP_ENV_STORE_ADDR, *port_var = DDP_ENV_STORE_PORT;
    if (getenv(host_var) == NULL && getenv(DDP_ENV_MASTER_ADDR) != NULL &&
        getenv(DDP_ENV_USE_AGENT_STORE) != NULL &&
        strcmp(getenv(DDP_ENV_USE_AGENT_STORE), DDP_USE_AGENT_STORE_YES) == 0) {
        host_var = DDP_ENV_MASTER_ADDR;
        port_var = DDP_ENV_MASTER_PORT;
    }
    if ((rc = env_str(host_var, env->store_host, sizeof env->store_host, err)) != 0)
        return rc;
    if (env->store_host[0] != '\0') {
        env->have_store = 1;
        if ((rc = env_int(port_var, 1, 65535, 0, 0, &v, err)) != 0)
            return rc;
        env->store_port = (uint16_t)v;
    }
    if ((rc = env_str(DDP_ENV_STORE_TOKEN, env->token_hex, sizeof env->token_hex, err)) != 0)
        return rc;
    return 0;
}

int ddpw_env_read(ddpw_env_t *env, ddp_err_t *err) {
    memset(env, 0, sizeof *env);
    int64_t v;
    int rc;
    int distributed = getenv(DDP_ENV_RANK) != NULL || getenv(DDP_ENV_WORLD_SIZE) != NULL;
    if (!distributed) {
        env->world_size = env->local_world_size = 1;
    } else {
        if ((rc = env_int(DDP_ENV_WORLD_SIZE, 1, 1 << 20, 0, 1, &v, err)) != 0)
            return rc;
        env->world_size = (int)v;
        if ((rc = env_int(DDP_ENV_RANK, 0, env->world_size - 1, 0, 0, &v, err)) != 0)
            return rc;
        env->rank = (int)v;
        if ((rc = env_int(DDP_ENV_LOCAL_WORLD_SIZE, 1, env->world_size, 0, 1, &v, err)) != 0)
            return rc;
        env->local_world_size = (int)v;
        if ((rc = env_int(DDP_ENV_LOCAL_RANK, 0, env->local_world_size - 1, 0, 0, &v, err)) != 0)
            return rc;
        env->local_rank = (int)v;
        if ((rc = env_int(DDP_ENV_REAL_LOCAL_RANK, 0, env->local_world_size - 1, 1, env->local_rank,
                          &v, err)) != 0)
            return rc;
        env->node_local_rank = (int)v;
        if ((rc = env_int(DDP_ENV_GROUP_RANK, 0, env->world_size - 1, 1, 0, &v, err)) != 0)
            return rc;
        env->group_rank = (int)v;
    }
    if ((rc = env_int(DDP_ENV_RESTART_COUNT, 0, INT32_MAX, 1, 0, &v, err)) != 0)
        return rc;
    env->restart_count = (int)v;
    if ((rc = env_int(DDP_ENV_ROUND, 0, INT64_MAX, 1, env->restart_count, &v, err)) != 0)
        return rc;
    env->round = v;

    if ((rc = env_str(DDP_ENV_RUN_ID, env->run_id, sizeof env->run_id, err)) != 0)
        return rc;
    if (env->run_id[0] == '\0' &&
        (rc = env_str(DDP_ENV_TE_RUN_ID, env->run_id, sizeof env->run_id, err)) != 0)
        return rc;
    if (env->run_id[0] == '\0')
        snprintf(env->run_id, sizeof env->run_id, "none");

    if ((rc = env_store(env, err)) != 0)
        return rc;
    if (env->world_size > 1 && !env->have_store)
        return ddp_err_set(err, DDP_EENV,
                           "environment variable " DDP_ENV_STORE_ADDR
                           " is not set (" DDP_ENV_WORLD_SIZE "=%d "
                           "needs the job's store; run under ddprun)",
                           env->world_size);
    return 0;
}

const ddpw_ctx_t *ddpw__ctx(const ddpw_t *w) {
    return &w->ctx;
}

static int connect_store(ddpw_ctx_t *c, int connect_ms, ddp_err_t *err) {
    ddp_buf_t tok = DDP_BUF_INIT;
    int rc = 0;
    if (c->env.token_hex[0] != '\0') {
        rc = rdzv_token_from_hex(c->env.token_hex, &tok, err);
        if (rc != 0)
            goto out;
    }
    rdzv_client_opts_t o = {
        .host = c->env.store_host,
        .port = c->env.store_port,
        .token = tok.len ? tok.data : NULL,
        .token_len = tok.len,
        .run_id = c->env.run_id, /* the token may be the run's (rdzv_run_token) */
        .connect_timeout_ms = connect_ms,
        .io_timeout_ms = c->timeout_ms,
    };
    rc = rdzv_client_connect(&o, &c->store, err);
out:
    if (tok.data != NULL)
        memset(tok.data, 0, tok.cap);
    ddp_buf_free(&tok);
    return rc;
}

/* The collective timeout: opts, else DDPRUN_COLL_TIMEOUT_MS, else the default. */
static int pick_timeout(const ddpw_opts_t *opts, int *out, ddp_err_t *err) {
    int64_t t;
    *out = opts->timeout_ms > 0 ? opts->timeout_ms : DDPW_DEFAULT_TIMEOUT_MS;
    if (opts->timeout_ms <= 0 && getenv("DDPRUN_COLL_TIMEOUT_MS") != NULL) {
        int rc = env_int("DDPRUN_COLL_TIMEOUT_MS", 1, INT32_MAX, 0, 0, &t, err);
        if (rc != 0)
            return rc;
        *out = (int)t;
    }
    return 0;
}

/* Rank 0's part of the agreement: every rank's vote (its own is mine), the decision, and the
 * decision published as "<code>\t<backend>\t<note or error>". */
static int decide_for_all(ddpw_t *w, const ddpw_vote_t *mine, ddp_err_t *err) {
    const ddpw_ctx_t *c = &w->ctx;
    int n = c->env.world_size, rc = 0;
    ddpw_vote_t *votes = calloc((size_t)n, sizeof *votes);
    if (votes == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for %d backend votes", n);
    votes[0] = *mine;
    uint64_t deadline = ddp_now_ms() + (uint64_t)c->timeout_ms;
    for (int r = 1; r < n && rc == 0; r++) {
        char text[DDPW_VOTE_MAX + 1];
        ddpw_name_t key = ddpw__key_vote(r);
        size_t len = 0;
        uint64_t now = ddp_now_ms();
        int left = now < deadline ? (int)(deadline - now) : 1;
        rc = ddpw__store_get(c, key.s, text, sizeof text - 1, &len, left, err);
        if (rc == 0) {
            text[len] = '\0';
            rc = ddpw__vote_decode(text, r, &votes[r], err);
        }
    }
    ddp_err_t verdict;
    ddp_err_clear(&verdict);
    ddpw_backend_t b = DDPW_BACKEND_CPU;
    int code = rc == 0 ? ddpw__backend_decide(votes, n, &b, w->note, sizeof w->note, &verdict) : rc;
    free(votes);
    if (rc != 0)
        return rc; /* the others time out on the decision, as on a lost rank 0 */
    char text[sizeof w->note + 32];
    int len =
        snprintf(text, sizeof text, "%d\t%d\t%s", code, (int)b, code == 0 ? w->note : verdict.text);
    rc = ddpw__store_set(c, DDPW_KEY_DECISION, text, (size_t)len, err);
    if (rc == 0 && code != 0)
        rc = ddp_err_set(err, code, "%s", verdict.text);
    w->backend = b;
    return rc;
}

/* Decides the backend once for the job (ddpw_backend.c): each rank votes through the store,
 * rank 0 decides, every rank applies the decision; an error (e.g. NCCL asked for and a node
 * without a device) is the same line on every rank. A world of one decides alone. */
static int agree_backend(ddpw_t *w, ddpw_backend_t asked, ddp_err_t *err) {
    const ddpw_ctx_t *c = &w->ctx;
    ddpw_vote_t mine;
    ddpw__vote_make(&c->env, asked, &mine);
    if (c->env.world_size == 1)
        return ddpw__backend_decide(&mine, 1, &w->backend, w->note, sizeof w->note, err);
    char text[DDPW_VOTE_MAX + 1];
    ddpw_name_t key = ddpw__key_vote(c->env.rank);
    int len = ddpw__vote_encode(&mine, text, sizeof text);
    if (len < 0)
        return ddp_err_set(err, DDP_EUSAGE, "backend vote longer than %d bytes", DDPW_VOTE_MAX);
    int rc = ddpw__store_set(c, key.s, text, (size_t)len, err);
    if (rc != 0)
        return rc;
    if (c->env.rank == 0)
        return decide_for_all(w, &mine, err);
    size_t got = 0;
    char dec[sizeof w->note + 32];
    rc = ddpw__store_get(c, DDPW_KEY_DECISION, dec, sizeof dec - 1, &got, -1, err);
    if (rc != 0)
        return rc;
    dec[got] = '\0';
    char *t1 = strchr(dec, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    int code = atoi(dec), b = t1 ? atoi(t1 + 1) : -1;
    if (t2 == NULL || code > 0 || (code == 0 && b != DDPW_BACKEND_CPU && b != DDPW_BACKEND_NCCL))
        return ddp_err_set(err, DDP_EPROTO, "the backend decision of round %lld is malformed",
                           (long long)c->env.round);
    if (code != 0)
        return ddp_err_set(err, code, "%s", t2 + 1);
    w->backend = (ddpw_backend_t)b;
    snprintf(w->note, sizeof w->note, "%s", t2 + 1);
    return 0;
}

/* Sets up the backends of w->backend: NCCL among all ranks; or CPU, shared memory among this
 * node's ranks, then the TCP ring between node leaders when the world spans nodes. */
static int setup_backends(ddpw_t *w, ddp_err_t *err) {
    const ddpw_env_t *e = &w->ctx.env;
    int rc;
    if (w->backend == DDPW_BACKEND_NCCL) {
        if ((rc = ddpw__nccl_ops.init(&w->ctx, &w->state, err)) != 0)
            return rc;
        w->ops = &ddpw__nccl_ops;
        return 0;
    }
    if (e->local_world_size > 1) {
        if ((rc = ddpw__shm_ops.init(&w->ctx, &w->state, err)) != 0)
            return rc;
        w->ops = &ddpw__shm_ops;
    }
    if (e->local_world_size != e->world_size) {
        if ((rc = ddpw__tcp_ops.init(&w->ctx, &w->ring_state, err)) != 0)
            return rc;
        w->ring = &ddpw__tcp_ops;
    }
    return 0;
}

int ddpw_init_env(ddpw_t **out, const ddpw_env_t *env, const ddpw_opts_t *opts, ddp_err_t *err) {
    ddpw_opts_t def = DDPW_OPTS_INIT;
    if (opts == NULL)
        opts = &def;
    *out = NULL;
    ddpw_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    w->ctx.env = *env;
    w->ctx.chunk_bytes = opts->cpu_chunk_bytes ? opts->cpu_chunk_bytes : DDPW_DEFAULT_CHUNK;
    int rc = pick_timeout(opts, &w->ctx.timeout_ms, err);
    if (rc != 0)
        goto fail;
    if (env->world_size > 1) {
        int cms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DDPW_DEFAULT_CONNECT_MS;
        if ((rc = connect_store(&w->ctx, cms, err)) != 0)
            goto fail;
    }
    if ((rc = agree_backend(w, opts->backend, err)) != 0 || (rc = setup_backends(w, err)) != 0)
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
    /* The ring first, then the node's shared memory: the reverse of setup_backends. */
    if (w->ring != NULL)
        w->ring->fini(w->ring_state);
    if (w->ops != NULL)
        w->ops->fini(w->state);
    rdzv_client_free(w->ctx.store);
    free(w);
}

int ddpw_rank(const ddpw_t *w) {
    return w->ctx.env.rank;
}
int ddpw_local_rank(const ddpw_t *w) {
    return w->ctx.env.local_rank;
}
int ddpw_world_size(const ddpw_t *w) {
    return w->ctx.env.world_size;
}
int ddpw_local_world_size(const ddpw_t *w) {
    return w->ctx.env.local_world_size;
}
int ddpw_group_rank(const ddpw_t *w) {
    return w->ctx.env.group_rank;
}
int64_t ddpw_round(const ddpw_t *w) {
    return w->ctx.env.round;
}
ddpw_backend_t ddpw_backend(const ddpw_t *w) {
    return w->backend;
}
int ddpw_device(const ddpw_t *w) {
    return w->backend == DDPW_BACKEND_NCCL ? w->ctx.env.local_rank : -1;
}

const char *ddpw_backend_note(const ddpw_t *w) {
    return w->note[0] != '\0' ? w->note : NULL;
}

/* Across nodes: sum within the node, sum across the node leaders' ring, spread each leader's
 * result within its node. Every rank ends with its node leader's bits. */
static int hier_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err) {
    const ddpw_env_t *e = &w->ctx.env;
    int rc;
    if (w->ops != NULL &&
        (rc = w->ops->allreduce(w->state, buf, count, DDPW_SUM, NULL, 1, err)) != 0)
        return rc;
    if (w->ring_state != NULL &&
        (rc = w->ring->allreduce(w->ring_state, buf, count, DDPW_SUM, NULL, 1, err)) != 0)
        return rc;
    if (w->ops != NULL && (rc = w->ops->broadcast(w->state, buf, count * sizeof(float),
                                                  e->rank - e->node_local_rank, err)) != 0)
        return rc;
    if (op == DDPW_AVG) {
        float n = (float)e->world_size;
        for (size_t i = 0; i < count; i++)
            buf[i] /= n;
    }
    return 0;
}

/* Across nodes: the root hands the data to its node (leader included), node leaders pass it
 * along the ring from the root's node, and every other node spreads it from its leader. */
static int hier_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err) {
    const ddpw_env_t *e = &w->ctx.env;
    int root_node = root / e->local_world_size, rc;
    if (w->ops != NULL && e->group_rank == root_node &&
        (rc = w->ops->broadcast(w->state, buf, len, root, err)) != 0)
        return rc;
    if (w->ring_state != NULL && (rc = w->ring->broadcast(w->ring_state, buf, len, root, err)) != 0)
        return rc;
    if (w->ops != NULL && e->group_rank != root_node)
        return w->ops->broadcast(w->state, buf, len, e->rank - e->node_local_rank, err);
    return 0;
}

/* CPU backend: a collective that started at t0 (ddp_now_ns) just ended. The time since the
 * previous one ended is compute, the time inside is wait (host clock: the CPU collectives are
 * synchronous). steps: 1 for an allreduce (a training step's gradients), 0 for the others. The
 * NCCL backend times its own collectives with CUDA events (ddpw_nccl.c). */
static void coll_timed(ddpw_t *w, uint64_t t0, uint32_t steps) {
    uint64_t t1 = ddp_now_ns();
    uint64_t compute = w->coll_end_ns != 0 && t0 > w->coll_end_ns ? t0 - w->coll_end_ns : 0;
    w->coll_end_ns = t1;
    ddpw_timing_add(compute, t1 - t0, steps);
}

static int cpu_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err) {
    if (w->ring != NULL)
        return hier_allreduce(w, buf, count, op, err);
    return w->ops->allreduce(w->state, buf, count, op, NULL, 1, err);
}

int ddpw_allreduce(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err) {
    if (w->backend == DDPW_BACKEND_NCCL)
        return w->ops->allreduce(w->state, buf, count, op, NULL, 1, err);
    if (w->ctx.env.world_size == 1 || count == 0)
        return 0;
    uint64_t t0 = ddp_now_ns();
    int rc = cpu_allreduce(w, buf, count, op, err);
    if (rc == 0)
        coll_timed(w, t0, 1);
    return rc;
}

int ddpw_allreduce_async(ddpw_t *w, float *buf, size_t count, ddpw_op_t op, void *stream,
                         ddp_err_t *err) {
    if (w->backend == DDPW_BACKEND_NCCL)
        return w->ops->allreduce(w->state, buf, count, op, stream, 0, err);
    return ddpw_allreduce(w, buf, count, op, err);
}

int ddpw_stream_wait(ddpw_t *w, void *stream, ddp_err_t *err) {
    if (w->ops != NULL && w->ops->stream_wait != NULL)
        return w->ops->stream_wait(w->state, stream, err);
    return 0;
}

int ddpw_broadcast(ddpw_t *w, void *buf, size_t len, int root, ddp_err_t *err) {
    if (root < 0 || root >= w->ctx.env.world_size)
        return ddp_err_set(err, -EINVAL, "broadcast: root %d is not a rank of world %d", root,
                           w->ctx.env.world_size);
    if (w->backend == DDPW_BACKEND_NCCL)
        return w->ops->broadcast(w->state, buf, len, root, err);
    if (w->ctx.env.world_size == 1 || len == 0)
        return 0;
    uint64_t t0 = ddp_now_ns();
    int rc = w->ring != NULL ? hier_broadcast(w, buf, len, root, err)
                             : w->ops->broadcast(w->state, buf, len, root, err);
    if (rc == 0)
        coll_timed(w, t0, 0);
    return rc;
}

static int barrier_untimed(ddpw_t *w, ddp_err_t *err) {
    if (w->ring != NULL) { /* an allreduce of one value orders every rank of every node */
        float x = 0;
        return hier_allreduce(w, &x, 1, DDPW_SUM, err);
    }
    if (w->ops != NULL && w->ops->barrier != NULL)
        return w->ops->barrier(w->state, err);
    ddpw_name_t name = ddpw__key_barrier(w->seq++);
    return ddpw__store_barrier(&w->ctx, name.s, w->ctx.env.world_size, err);
}

/* A barrier's wait is waiting, not compute: an early rank must not look slow. */
int ddpw_barrier(ddpw_t *w, ddp_err_t *err) {
    if (w->ctx.env.world_size == 1)
        return 0;
    if (w->backend == DDPW_BACKEND_NCCL)
        return barrier_untimed(w, err);
    uint64_t t0 = ddp_now_ns();
    int rc = barrier_untimed(w, err);
    if (rc == 0)
        coll_timed(w, t0, 0);
    return rc;
}

int ddpw_store_set(ddpw_t *w, const char *key, const void *val, size_t len, ddp_err_t *err) {
    return ddpw__store_set(&w->ctx, key, val, len, err);
}

int ddpw_store_get(ddpw_t *w, const char *key, void *out, size_t cap, size_t *len, int timeout_ms,
                   ddp_err_t *err) {
    return ddpw__store_get(&w->ctx, key, out, cap, len, timeout_ms, err);
}
