/* SPDX-License-Identifier: Apache-2.0
 * etcd_client: one rdzv_etcd call from the shell, for tests/integration/test_etcd_client.sh.
 *   etcd_client [--endpoints LIST] [--timeout MS] [--user U --password P] [--curl-lib SONAME]
 *               [--ca FILE] [--cert FILE --key FILE] CMD
 *   CMD: put KEY VALUE [LEASE] | get KEY [prefix] | del KEY [prefix] | txn-create KEY VALUE
 *      | txn-mod KEY MOD_REVISION VALUE | txn-value KEY EXPECTED VALUE | grant TTL
 *      | keepalive ID | keep ID SECONDS | revoke ID | watch KEY START_REVISION N [prefix]
 *      | close-pending KEY
 * Prints results on stdout, one line each; errors on stderr as "etcd_client: TEXT". Exit: 0 ok,
 * 1 other error, 2 usage, 3 timed out, 4 authentication refused, 5 no such key or lease,
 * 6 no endpoint answered, 7 malformed reply or HTTP error, 8 reply too big. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "ddp_err.h"
#include "ddp_parse.h"
#include "rdzv_etcd.h"
#include "rdzv_etcd_curl.h"

static uv_loop_t *loop;
static rdzv_etcd_t *client;
static int status = 1, finished;
static int64_t watch_left;
static rdzv_etcd_watch_t *watch;
static int64_t keep_id, keep_left, kept;
static uv_timer_t keep_timer;

static int exit_code(int rc) {
    switch (rc) {
    case 0: return 0;
    case DDP_ETIMEOUT: return 3;
    case DDP_EAUTH: return 4;
    case DDP_ENOKEY: return 5;
    case -ECONNREFUSED: return 6;
    case DDP_EPROTO: return 7;
    case DDP_ETOOBIG: return 8;
    case DDP_EUSAGE: return 9;
    default: return 1;
    }
}

static void fail(int rc, const char *text) {
    fprintf(stderr, "etcd_client: %s (%s)\n", text != NULL ? text : ddp_strerror(rc),
            ddp_strerror(rc));
    status = rc;
    finished = 1;
}

static void print_kv(const rdzv_etcd_kv_t *kv) {
    printf("%s %s create=%" PRId64 " mod=%" PRId64 " version=%" PRId64 " lease=%" PRId64 "\n",
           (const char *)kv->key, (const char *)kv->value, kv->create_revision, kv->mod_revision,
           kv->version, kv->lease);
}

static void on_result(void *arg, int st, const rdzv_etcd_result_t *res, const char *errtext) {
    const char *cmd = arg;
    finished = 1;
    status = st;
    if (st != 0) {
        fail(st, errtext);
        return;
    }
    if (!strcmp(cmd, "get")) {
        printf("count %" PRId64 " more %d revision %" PRId64 "\n", res->count, res->more,
               res->revision);
        for (size_t i = 0; i < res->n_kvs; i++)
            print_kv(&res->kvs[i]);
    } else if (!strcmp(cmd, "del")) {
        printf("deleted %" PRId64 " revision %" PRId64 "\n", res->deleted, res->revision);
    } else if (!strncmp(cmd, "txn", 3)) {
        printf("succeeded %d revision %" PRId64 "\n", res->succeeded, res->revision);
    } else if (!strcmp(cmd, "grant") || !strcmp(cmd, "keepalive")) {
        printf("lease %" PRId64 " ttl %" PRId64 "\n", res->lease_id, res->lease_ttl);
    } else if (!strcmp(cmd, "revoke")) {
        printf("revoked revision %" PRId64 "\n", res->revision);
    } else {
        printf("revision %" PRId64 "\n", res->revision);
    }
}

static void on_watch(void *arg, int st, const rdzv_etcd_watch_msg_t *msg, const char *errtext) {
    (void)arg;
    if (st != 0) {
        finished = 1;
        watch = NULL;
        if (st == DDP_ECANCELED && watch_left == 0) {
            printf("canceled\n");
            status = 0;
        } else {
            fail(st, errtext);
        }
        return;
    }
    if (msg->created)
        printf("created revision %" PRId64 "\n", msg->revision);
    for (size_t i = 0; i < msg->n_events && watch_left > 0; i++) {
        const rdzv_etcd_event_t *e = &msg->events[i];
        printf("%s %s %s %" PRId64 "\n", e->type == RDZV_ETCD_EV_PUT ? "PUT" : "DELETE",
               (const char *)e->kv.key,
               e->type == RDZV_ETCD_EV_PUT ? (const char *)e->kv.value : "-", e->kv.mod_revision);
        if (--watch_left == 0)
            rdzv_etcd_watch_cancel(watch);
    }
    fflush(stdout);
}

static void on_keep(void *arg, int st, const rdzv_etcd_result_t *res, const char *errtext) {
    (void)arg;
    if (st != 0) {
        uv_timer_stop(&keep_timer);
        uv_close((uv_handle_t *)&keep_timer, NULL);
        fail(st, errtext);
        return;
    }
    kept += res->lease_ttl > 0;
}

static void on_keep_timer(uv_timer_t *t) {
    (void)t;
    if (keep_left-- <= 0) {
        uv_close((uv_handle_t *)&keep_timer, NULL);
        printf("kept %" PRId64 "\n", kept);
        status = 0;
        finished = 1;
        return;
    }
    ddp_err_t err = {0};
    int st = rdzv_etcd_lease_keepalive(client, keep_id, on_keep, NULL, &err);
    if (st != 0)
        fail(st, err.text);
}

/* close-pending: both calls must end with DDP_ECANCELED before the close callback. */
static int cancels;
static void on_canceled(void *arg, int st, const rdzv_etcd_result_t *res, const char *errtext) {
    (void)res;
    printf("%s: %s (%s)\n", (const char *)arg, ddp_strerror(st), errtext ? errtext : "");
    cancels += st == DDP_ECANCELED;
}
static void on_watch_canceled(void *arg, int st, const rdzv_etcd_watch_msg_t *msg,
                              const char *errtext) {
    if (st != 0)
        on_canceled(arg, st, NULL, errtext);
    (void)msg;
}
static void on_closed(void *arg) {
    (void)arg;
    printf("closed after %d cancels\n", cancels);
    status = cancels == 2 ? 0 : 1;
}

static int usage(void) {
    fprintf(stderr, "usage: etcd_client [--endpoints LIST] [--timeout MS] [--user U --password P]"
                    " [--curl-lib SONAME] [--ca FILE] [--cert FILE --key FILE] CMD ARGS\n");
    return 2;
}

static int num(const char *s, int64_t min, int64_t max, int64_t *v) {
    return ddp_parse_i64(s, min, max, v) == 0 ? 0 : -1;
}

/* Submits CMD; returns 0 or a negative code (err says why), or 2 for a usage error. */
static int submit(int argc, char **argv, ddp_err_t *err) {
    const char *cmd = argv[0], *key = argc > 1 ? argv[1] : "";
    size_t klen = strlen(key);
    int64_t a = 0, b = 0;
    unsigned prefix = (argc > 2 && !strcmp(argv[argc - 1], "prefix")) ? RDZV_ETCD_PREFIX : 0;
    if (!strcmp(cmd, "put") && (argc == 3 || argc == 4)) {
        if (argc == 4 && num(argv[3], 0, INT64_MAX, &a) != 0)
            return 2;
        return rdzv_etcd_put(client, key, klen, argv[2], strlen(argv[2]), a, on_result, "put", err);
    }
    if (!strcmp(cmd, "get") && argc >= 2)
        return rdzv_etcd_get(client, key, klen, prefix, 0, on_result, "get", err);
    if (!strcmp(cmd, "del") && argc >= 2)
        return rdzv_etcd_delete(client, key, klen, prefix, on_result, "del", err);
    if (!strncmp(cmd, "txn-", 4) && argc >= 3) {
        rdzv_etcd_compare_t cmp = {.key = key, .key_len = klen, .cmp = RDZV_ETCD_EQUAL};
        const char *val = argv[argc - 1];
        rdzv_etcd_op_t put = {.kind = RDZV_ETCD_OP_PUT,
                              .key = key,
                              .key_len = klen,
                              .value = val,
                              .value_len = strlen(val)};
        rdzv_etcd_op_t del = {.kind = RDZV_ETCD_OP_DELETE, .key = key, .key_len = klen};
        rdzv_etcd_txn_t txn = {.compares = &cmp, .n_compares = 1, .success = &put, .n_success = 1};
        if (!strcmp(cmd, "txn-create") && argc == 3) {
            cmp.target = RDZV_ETCD_CMP_CREATE;
        } else if (!strcmp(cmd, "txn-mod") && argc == 4) {
            cmp.target = RDZV_ETCD_CMP_MOD;
            if (num(argv[2], 0, INT64_MAX, &cmp.number) != 0)
                return 2;
        } else if (!strcmp(cmd, "txn-value") && argc == 4) {
            cmp.target = RDZV_ETCD_CMP_VALUE;
            cmp.value = argv[2];
            cmp.value_len = strlen(argv[2]);
            txn.failure = &del;
            txn.n_failure = 1;
        } else {
            return 2;
        }
        return rdzv_etcd_txn(client, &txn, on_result, (void *)cmd, err);
    }
    if (!strcmp(cmd, "grant") && argc == 2 && num(argv[1], 1, INT32_MAX, &a) == 0)
        return rdzv_etcd_lease_grant(client, a, on_result, "grant", err);
    if (!strcmp(cmd, "keepalive") && argc == 2 && num(argv[1], 1, INT64_MAX, &a) == 0)
        return rdzv_etcd_lease_keepalive(client, a, on_result, "keepalive", err);
    if (!strcmp(cmd, "revoke") && argc == 2 && num(argv[1], 1, INT64_MAX, &a) == 0)
        return rdzv_etcd_lease_revoke(client, a, on_result, "revoke", err);
    if (!strcmp(cmd, "keep") && argc == 3 && num(argv[1], 1, INT64_MAX, &keep_id) == 0 &&
        num(argv[2], 1, 3600, &b) == 0) {
        keep_left = b * 2; /* every 500 ms */
        uv_timer_init(loop, &keep_timer);
        return uv_timer_start(&keep_timer, on_keep_timer, 0, 500);
    }
    if (!strcmp(cmd, "watch") && argc >= 4 && num(argv[2], 0, INT64_MAX, &a) == 0 &&
        num(argv[3], 1, 1000, &watch_left) == 0)
        return rdzv_etcd_watch(client, key, klen, prefix, a, on_watch, NULL, &watch, err);
    if (!strcmp(cmd, "close-pending") && argc == 2) {
        int st = rdzv_etcd_get(client, key, klen, 0, 0, on_canceled, "get", err);
        if (st == 0)
            st = rdzv_etcd_watch(client, key, klen, 0, 0, on_watch_canceled, "watch", NULL, err);
        if (st == 0)
            rdzv_etcd_close(client, on_closed, NULL);
        client = NULL;
        finished = 1;
        status = 1;
        return st;
    }
    return 2;
}

int main(int argc, char **argv) {
    rdzv_etcd_opts_t opts = {.endpoints = "127.0.0.1:2379"};
    int i = 1;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        int64_t v;
        if (!strcmp(argv[i], "--endpoints"))
            opts.endpoints = argv[i + 1];
        else if (!strcmp(argv[i], "--timeout") && num(argv[i + 1], 1, 600000, &v) == 0)
            opts.timeout_ms = (int)v;
        else if (!strcmp(argv[i], "--user"))
            opts.user = argv[i + 1];
        else if (!strcmp(argv[i], "--password"))
            opts.password = argv[i + 1];
        else if (!strcmp(argv[i], "--ca"))
            opts.ca_file = argv[i + 1];
        else if (!strcmp(argv[i], "--cert"))
            opts.cert_file = argv[i + 1];
        else if (!strcmp(argv[i], "--key"))
            opts.key_file = argv[i + 1];
        else if (!strcmp(argv[i], "--curl-lib"))
            rdzv__etcd_curl_set_lib(argv[i + 1]);
        else
            return usage();
    }
    if (i >= argc)
        return usage();
    loop = uv_default_loop();
    ddp_err_t err = {0};
    int st = rdzv_etcd_new(loop, &opts, &client, &err);
    if (st != 0) {
        fprintf(stderr, "etcd_client: %s\n", err.text);
        return exit_code(st);
    }
    st = submit(argc - i, argv + i, &err);
    if (st == 2) {
        rdzv_etcd_close(client, NULL, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        return usage();
    }
    if (st != 0)
        fail(st, err.text);
    while (!finished && uv_run(loop, UV_RUN_ONCE) != 0)
        ;
    rdzv_etcd_close(client, NULL, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    fflush(stdout);
    return exit_code(status);
}
