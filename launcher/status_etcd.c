/* SPDX-License-Identifier: Apache-2.0
 * `ddprun status --rdzv_backend=etcd`: finds the store the agents of a run elected through etcd
 * (agent/rdzv_elect.c) by reading the leader key <prefix>/<run_id>/leader, whose value is the
 * store's "ADDR:PORT" (docs/protocol-rdzv.md "The etcd key layout"). One read on a small libuv
 * loop of its own, bounded by the etcd client's call timeout. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "agent.h"
#include "ddp_err.h"
#include "ddp_escape.h"
#include "launch_int.h"
#include "rdzv_etcd.h"

/* Room for the leader key and its value (an address: host name or IP, and a port). */
#define LEADER_KEY_MAX (LAUNCH_ETCD_TEXT_MAX + 512)
#define LEADER_VALUE_MAX 300

typedef struct leader_read {
    int done, status;
    int found;
    char value[LEADER_VALUE_MAX + 1];
    size_t value_len;
    int too_long;
    char through[256];
    char errtext[512];
} leader_read_t;

static void on_get(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    leader_read_t *r = arg;
    r->done = 1;
    r->status = status;
    if (status != 0) {
        snprintf(r->errtext, sizeof r->errtext, "%s", errtext ? errtext : ddp_strerror(status));
        return;
    }
    if (res->n_kvs == 0)
        return;
    r->found = 1;
    r->too_long = res->kvs[0].value_len > LEADER_VALUE_MAX;
    r->value_len = r->too_long ? LEADER_VALUE_MAX : res->kvs[0].value_len;
    memcpy(r->value, res->kvs[0].value, r->value_len);
    r->value[r->value_len] = '\0';
}

/* "ADDR:PORT" (IPv6 in brackets) with a port 1..65535 and a host of the characters an address or
 * a --local_addr name has: *host (caller frees) and *port. Returns 0 or -EINVAL. */
static int store_addr_parse(const leader_read_t *r, char **host, int *port) {
    if (r->too_long || r->value_len == 0 || memchr(r->value, '\0', r->value_len) != NULL)
        return -EINVAL;
    for (const char *c = r->value; *c; c++)
        if (!isalnum((unsigned char)*c) && strchr(".:-_%[]", *c) == NULL)
            return -EINVAL;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (launch_endpoint_split("leader key", r->value, host, port, &err) < 0)
        return -EINVAL;
    if (*port < 1) {
        free(*host);
        *host = NULL;
        return -EINVAL;
    }
    return 0;
}

static void on_closed(void *arg) {
    (void)arg;
}

int launch_status_etcd_store(const char *members, const launch_rdzv_conf_t *conf,
                             const char *run_id, int timeout_ms, char **host, int *port,
                             char *through, size_t cap) {
    const char *user = getenv(AGENT_ENV_ETCD_USER), *password = getenv(AGENT_ENV_ETCD_PASSWORD);
    *host = NULL;
    if ((user == NULL) != (password == NULL)) {
        fprintf(stderr, "ddprun status: %s and %s: set both or neither\n", AGENT_ENV_ETCD_USER,
                AGENT_ENV_ETCD_PASSWORD);
        return 1;
    }
    char key[LEADER_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s/leader", conf->etcd_prefix, run_id);
    rdzv_etcd_opts_t eo = {.endpoints = members,
                           .timeout_ms = timeout_ms,
                           .user = user,
                           .password = password,
                           .ca_file = conf->etcd_cacert[0] ? conf->etcd_cacert : NULL,
                           .cert_file = conf->etcd_cert[0] ? conf->etcd_cert : NULL,
                           .key_file = conf->etcd_key[0] ? conf->etcd_key : NULL};
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) {
        fprintf(stderr, "ddprun status: %s\n", uv_strerror(rc));
        return 1;
    }
    leader_read_t r;
    memset(&r, 0, sizeof r);
    ddp_err_t err;
    ddp_err_clear(&err);
    rdzv_etcd_t *c = NULL;
    if ((rc = rdzv_etcd_new(&loop, &eo, &c, &err)) < 0 ||
        (rc = rdzv_etcd_get(c, key, strlen(key), 0, 1, on_get, &r, &err)) < 0) {
        r.done = 1;
        r.status = rc;
        snprintf(r.errtext, sizeof r.errtext, "%s", err.text[0] ? err.text : ddp_strerror(rc));
    }
    while (!r.done && uv_run(&loop, UV_RUN_ONCE))
        ;
    if (r.status == 0)
        snprintf(r.through, sizeof r.through, "%s", rdzv_etcd_endpoint(c));
    rdzv_etcd_close(c, on_closed, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);

    char esc[4 * sizeof r.errtext], kesc[4 * LEADER_KEY_MAX];
    ddp_str_escaped(key, kesc, sizeof kesc);
    if (r.status != 0) {
        fprintf(stderr, "ddprun status: etcd at %s: %s\n", members,
                ddp_str_escaped(r.errtext, esc, sizeof esc));
        return 1;
    }
    if (!r.found) {
        fprintf(stderr, "ddprun status: no store elected for run %s (key %s empty at %s)\n",
                ddp_str_escaped(run_id, esc, sizeof esc), kesc, r.through);
        return 1;
    }
    if (store_addr_parse(&r, host, port) < 0) {
        char vesc[4 * LEADER_VALUE_MAX + 8];
        ddp_str_escape(vesc, sizeof vesc, r.value, r.value_len);
        fprintf(stderr,
                "ddprun status: etcd at %s: the leader key %s holds '%s%s', not a store's "
                "address\n",
                r.through, kesc, vesc, r.too_long ? "..." : "");
        return 1;
    }
    snprintf(through, cap, "%s", r.through);
    return 0;
}
