/* SPDX-License-Identifier: Apache-2.0
 * store_client: one rdzv_client command from the shell, for tests/integration/test_store.sh.
 *   store_client PORT set KEY VALUE | get KEY TIMEOUT_MS | wait KEY TIMEOUT_MS | add KEY DELTA
 *                     | ping | stats | get-then-ping KEY TIMEOUT_MS | set-size KEY NBYTES
 * The token comes from rdzv_token_load (DDPRUN_TOKEN, DDPRUN_TOKEN_FILE or DDPRUN_STORE_TOKEN).
 * Prints results on stdout; errors on stderr as "store_client: TEXT". Exit: 0 ok, 1 other error, 3
 * timed out, 4 authentication refused, 5 connection closed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_parse.h"
#include "rdzv_client.h"

static int exit_code(int rc) {
    switch (rc) {
    case 0: return 0;
    case DDP_ETIMEOUT: return 3;
    case DDP_EAUTH: return 4;
    case DDP_ECLOSED: return 5;
    default: return 1;
    }
}

static int done(int rc, const ddp_err_t *err) {
    if (rc < 0)
        fprintf(stderr, "store_client: %s\n", err->text[0] ? err->text : ddp_strerror(rc));
    return exit_code(rc);
}

int main(int argc, char **argv) {
    int64_t port, num;
    if (argc < 3 || ddp_parse_i64(argv[1], 1, 65535, &port) < 0) {
        fprintf(stderr, "usage: store_client PORT CMD [ARGS]\n");
        return 2;
    }
    ddp_err_t err;
    ddp_err_clear(&err);
    ddp_buf_t tok = DDP_BUF_INIT, v = DDP_BUF_INIT;
    int rc = rdzv_token_load(NULL, &tok, NULL, &err);
    if (rc < 0)
        return done(rc, &err);
    rdzv_client_opts_t o = {0};
    o.host = "127.0.0.1";
    o.port = (uint16_t)port;
    o.token = tok.data;
    o.token_len = tok.len;
    o.connect_timeout_ms = 5000;
    o.io_timeout_ms = 5000;
    rdzv_client_t *c = NULL;
    rc = rdzv_client_connect(&o, &c, &err);
    if (rc < 0) {
        ddp_buf_free(&tok);
        return done(rc, &err);
    }
    const char *cmd = argv[2];
    if (strcmp(cmd, "set") == 0 && argc == 5) {
        rc = rdzv_client_set(c, argv[3], argv[4], strlen(argv[4]), &err);
        if (rc == 0)
            rc = rdzv_client_ping(c, &err); /* make sure the SET was processed */
    } else if (strcmp(cmd, "set-size") == 0 && argc == 5 &&
               ddp_parse_i64(argv[4], 0, 8 << 20, &num) == 0) {
        char *big = calloc(1, (size_t)num + 1);
        rc = big == NULL ? -ENOMEM : rdzv_client_set(c, argv[3], big, (size_t)num, &err);
        free(big);
        if (rc == 0)
            rc = rdzv_client_ping(c, &err);
    } else if (strcmp(cmd, "get") == 0 && argc == 5 &&
               ddp_parse_i64(argv[4], -1, 3600000, &num) == 0) {
        rc = rdzv_client_get(c, argv[3], (int)num, &v, &err);
        if (rc == 0)
            printf("%.*s\n", (int)v.len, (char *)v.data);
    } else if (strcmp(cmd, "wait") == 0 && argc == 5 &&
               ddp_parse_i64(argv[4], -1, 3600000, &num) == 0) {
        const char *k[1] = {argv[3]};
        rc = rdzv_client_wait(c, k, 1, (int)num, &err);
        if (rc == 0)
            printf("released\n");
    } else if (strcmp(cmd, "add") == 0 && argc == 5 &&
               ddp_parse_i64(argv[4], INT64_MIN, INT64_MAX, &num) == 0) {
        int64_t r;
        rc = rdzv_client_add(c, argv[3], num, &r, &err);
        if (rc == 0)
            printf("%lld\n", (long long)r);
    } else if (strcmp(cmd, "ping") == 0) {
        rc = rdzv_client_ping(c, &err);
        if (rc == 0)
            printf("pong\n");
    } else if (strcmp(cmd, "stats") == 0) {
        rc = rdzv_client_stats(c, &v, &err);
        if (rc == 0)
            printf("%.*s", (int)v.len, (char *)v.data);
    } else if (strcmp(cmd, "get-then-ping") == 0 && argc == 5 &&
               ddp_parse_i64(argv[4], 0, 3600000, &num) == 0) {
        rc = rdzv_client_get(c, argv[3], (int)num, &v, &err);
        printf("%s\n", rc == DDP_ETIMEOUT ? "timeout" : rc == 0 ? "value" : "error");
        ddp_err_clear(&err);
        rc = rdzv_client_ping(c, &err);
        if (rc == 0)
            printf("pong\n");
    } else {
        fprintf(stderr, "store_client: bad command line\n");
        rc = DDP_EUSAGE;
    }
    fflush(stdout);
    rdzv_client_free(c);
    ddp_buf_free(&tok);
    ddp_buf_free(&v);
    return done(rc, &err);
}
