/* SPDX-License-Identifier: Apache-2.0
 * store_swarm: N concurrent clients (one thread each) against one store, for
 * tests/integration/test_store.sh. Each rank connects (token as rdzv_token_load finds it), SETs
 * swarm/<rank>, meets the others in a barrier, GETs its neighbour's value (a wait released by
 * another client's SET) and ADDs to a counter. Prints "swarm ok N" and exits 0 when every rank
 * succeeded; otherwise prints the first error and exits 1.
 *   store_swarm PORT N [TIMEOUT_MS] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_parse.h"
#include "rdzv_client.h"

typedef struct rank {
    pthread_t th;
    int id, n, timeout_ms;
    uint16_t port;
    const ddp_buf_t *tok;
    int rc;
    ddp_err_t err;
} rank_t;

static void *run_rank(void *p) {
    rank_t *r = p;
    rdzv_client_opts_t o = {0};
    o.host = "127.0.0.1";
    o.port = r->port;
    o.token = r->tok->data;
    o.token_len = r->tok->len;
    o.connect_timeout_ms = r->timeout_ms;
    o.io_timeout_ms = r->timeout_ms;
    rdzv_client_t *c = NULL;
    ddp_err_clear(&r->err);
    r->rc = rdzv_client_connect(&o, &c, &r->err);
    if (r->rc < 0)
        return NULL;
    char key[64], want[32];
    ddp_buf_t v = DDP_BUF_INIT;
    snprintf(key, sizeof key, "swarm/%d", r->id);
    snprintf(want, sizeof want, "value-%d", r->id);
    r->rc = rdzv_client_set(c, key, want, strlen(want), &r->err);
    /* Ask for the neighbour first: for most ranks this parks a wait on the server. */
    int next = (r->id + 1) % r->n;
    snprintf(key, sizeof key, "swarm/%d", next);
    snprintf(want, sizeof want, "value-%d", next);
    if (r->rc == 0)
        r->rc = rdzv_client_get(c, key, r->timeout_ms, &v, &r->err);
    if (r->rc == 0 && (v.len != strlen(want) || memcmp(v.data, want, v.len) != 0))
        r->rc = ddp_err_set(&r->err, DDP_EPROTO, "rank %d read a wrong value for %s", r->id, key);
    if (r->rc == 0)
        r->rc = rdzv_client_barrier(c, "swarm/barrier", r->n, r->timeout_ms, &r->err);
    if (r->rc == 0)
        r->rc = rdzv_client_add(c, "swarm/count", 1, NULL, &r->err);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    return NULL;
}

int main(int argc, char **argv) {
    int64_t port, n, timeout_ms = 20000;
    if (argc < 3 || ddp_parse_i64(argv[1], 1, 65535, &port) < 0 ||
        ddp_parse_i64(argv[2], 1, 4096, &n) < 0 ||
        (argc > 3 && ddp_parse_i64(argv[3], 1, 600000, &timeout_ms) < 0)) {
        fprintf(stderr, "usage: store_swarm PORT N [TIMEOUT_MS]\n");
        return 2;
    }
    ddp_buf_t tok = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_token_load(NULL, &tok, NULL, &err) < 0) {
        fprintf(stderr, "store_swarm: %s\n", err.text);
        return 1;
    }
    rank_t *ranks = calloc((size_t)n, sizeof *ranks);
    if (ranks == NULL)
        return 1;
    int started = 0;
    for (int i = 0; i < n; i++) {
        ranks[i] = (rank_t){.id = i,
                            .n = (int)n,
                            .timeout_ms = (int)timeout_ms,
                            .port = (uint16_t)port,
                            .tok = &tok};
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        if (pthread_create(&ranks[i].th, &a, run_rank, &ranks[i]) != 0) {
            pthread_attr_destroy(&a);
            break;
        }
        pthread_attr_destroy(&a);
        started++;
    }
    int bad = started < n;
    for (int i = 0; i < started; i++) {
        pthread_join(ranks[i].th, NULL);
        if (ranks[i].rc < 0 && !bad) {
            fprintf(stderr, "store_swarm: rank %d: %s\n", i, ranks[i].err.text);
            bad = 1;
        }
    }
    if (!bad)
        printf("swarm ok %lld\n", (long long)n);
    free(ranks);
    ddp_buf_free(&tok);
    return bad;
}
