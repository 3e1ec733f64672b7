/* `ddprun status`: asks a rendezvous store for the state of one run (round, members, their
 * hosts and states) and prints it as a table, or as the server's JSON with --json. */
#include "launch_status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "launch_spec.h"
#include "rdzv_aclient.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"

typedef struct status_req {
    int done, rc;
    ddp_buf_t reply;
    char errtext[512];
} status_req_t;

static void on_reply(void *arg, int status, const uint8_t *reply, size_t len, const char *errtext) {
    status_req_t *q = arg;
    q->done = 1;
    q->rc = status;
    if (status == 0)
        ddp_buf_append(&q->reply, reply, len);
    else
        snprintf(q->errtext, sizeof q->errtext, "%s", errtext ? errtext : ddp_strerror(status));
}

static void on_connect(void *arg, int status, const char *errtext) {
    status_req_t *q = arg;
    if (status != 0 && !q->done) {
        q->done = 1;
        q->rc = status;
        snprintf(q->errtext, sizeof q->errtext, "%s", errtext ? errtext : ddp_strerror(status));
    }
}

/* The table's text for field key of o: "-" when it is missing or not of the expected type, so that
 * an older or newer server's reply never prints "(null)" or a made-up 0. */
#define NO_VALUE "-"

static const char *str_field(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : NO_VALUE;
}

/* An integer field into buf (24 bytes); negative values are "-" when !neg_ok. */
static const char *int_field(const json_t *o, const char *key, int neg_ok, char *buf) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || (!neg_ok && json_integer_value(v) < 0))
        return NO_VALUE;
    snprintf(buf, 24, "%lld", (long long)json_integer_value(v));
    return buf;
}

static void print_table(const json_t *root) {
    char round[24], used[24], max[24], lo[24], hi[24];
    json_t *last = json_object_get(root, "last_failure");
    printf("run %s: round %s, %s, restarts %s of %s, nodes min %s max %s\n", str_field(root, "run"),
           int_field(root, "round", 1, round), str_field(root, "state"),
           int_field(root, "restarts_used", 1, used), int_field(root, "max_restarts", 1, max),
           int_field(root, "min_nodes", 1, lo), int_field(root, "max_nodes", 1, hi));
    if (json_is_string(last) && json_string_length(last) > 0)
        printf("last failure: %s\n", json_string_value(last));
    printf("%-10s %-40s %-6s %-10s %s\n", "node_rank", "host", "nproc", "state", "silent");
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "members"), i, m) {
        char rank[24], nproc[24], silent[32];
        json_t *ms = json_object_get(m, "silent_ms");
        if (json_is_integer(ms))
            snprintf(silent, sizeof silent, "%.1fs", (double)json_integer_value(ms) / 1000.0);
        else
            snprintf(silent, sizeof silent, "%s", NO_VALUE);
        printf("%-10s %-40s %-6s %-10s %s\n", int_field(m, "group_rank", 0, rank),
               str_field(m, "host"), int_field(m, "nproc", 1, nproc), str_field(m, "state"),
               silent);
    }
}

static int usage(const char *msg) {
    fprintf(stderr, "ddprun status: %s\n", msg);
    fprintf(stderr, "usage: ddprun status --rdzv_endpoint HOST[:PORT] --rdzv_id ID [--json]\n");
    return 2;
}

/* Long: the flag loop and the one request, read top to bottom like a small main. */
int launch_status_main(int argc, char **argv) {
    const char *endpoint = NULL, *id = NULL;
    int json_out = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const char *eq = strchr(a, '=');
        char name[64];
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (n >= sizeof name)
            return usage("flag name too long");
        memcpy(name, a, n);
        name[n] = '\0';
        /* From the third character: "-" or "" must not send the scan past the name's end. */
        for (char *p = name + (n > 2 ? 2 : n); *p; p++)
            if (*p == '-')
                *p = '_';
        if (strcmp(name, "--json") == 0) {
            json_out = 1;
            continue;
        }
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            printf("usage: ddprun status --rdzv_endpoint HOST[:PORT] --rdzv_id ID [--json]\n"
                   "The job token comes from DDPRUN_TOKEN (hex) or DDPRUN_TOKEN_FILE.\n");
            return 0;
        }
        if (strcmp(name, "--rdzv_endpoint") != 0 && strcmp(name, "--rdzv_id") != 0) {
            /* Before taking a value: an unknown flag is named as such, not as lacking one. */
            char msg[128];
            snprintf(msg, sizeof msg, "unknown flag '%.64s'", a);
            return usage(msg);
        }
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL) {
            char msg[128];
            snprintf(msg, sizeof msg, "%s needs a value", name);
            return usage(msg);
        }
        if (strcmp(name, "--rdzv_endpoint") == 0)
            endpoint = v;
        else
            id = v;
    }
    if (endpoint == NULL || id == NULL)
        return usage("--rdzv_endpoint and --rdzv_id are required");
    ddp_err_t err;
    ddp_err_clear(&err);
    char *host = NULL;
    int port = -1;
    if (launch_endpoint_split("--rdzv_endpoint", endpoint, &host, &port, &err) < 0)
        return usage(err.text);
    ddp_buf_t token = DDP_BUF_INIT;
    if (rdzv_token_from_job_env(&token, &err) < 0) {
        free(host);
        return usage(err.text);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    rdzv_client_opts_t co = {.host = host,
                             .port = (uint16_t)(port > 0 ? port : AGENT_DEFAULT_C10D_PORT),
                             .token = token.len ? token.data : NULL,
                             .token_len = token.len,
                             .connect_timeout_ms = 5000,
                             .io_timeout_ms = 5000};
    status_req_t q;
    memset(&q, 0, sizeof q);
    rdzv_aclient_t *c = NULL;
    ddp_buf_t frame = DDP_BUF_INIT;
    if (rdzv_aclient_connect(&loop, &co, on_connect, &q, &c, &err) < 0 ||
        rdzv_status_req_encode(&frame, id) < 0 ||
        rdzv_aclient_raw(c, &frame, rdzv_round_reply_len, 0, -1, "RDZV_STATUS", on_reply, &q,
                         &err) < 0) {
        q.done = 1;
        q.rc = DDP_EPROTO;
        snprintf(q.errtext, sizeof q.errtext, "%s", err.text);
    }
    ddp_buf_free(&frame);
    while (!q.done && uv_run(&loop, UV_RUN_ONCE))
        ;
    rdzv_aclient_close(c, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    ddp_buf_free(&token);
    int code = 0;
    if (q.rc != 0) {
        fprintf(stderr, "ddprun status: %s:%d: %s\n", host, (int)co.port, q.errtext);
        code = 1;
    } else {
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        size_t need = 0;
        if (rdzv_round_reply_parse(q.reply.data, q.reply.len, &rep, &need, NULL) <= 0 ||
            rep.status != 0) {
            fprintf(stderr, "ddprun status: %s\n",
                    rep.text.len > 0 ? (char *)rep.text.data : "unknown run or bad reply");
            code = 1;
        } else if (json_out) {
            printf("%s\n", rep.text.len > 0 ? (char *)rep.text.data : "");
        } else {
            json_t *root = json_loadb((const char *)rep.text.data, rep.text.len, 0, NULL);
            if (root == NULL) {
                fprintf(stderr, "ddprun status: the server sent malformed JSON\n");
                code = 1;
            } else {
                print_table(root);
                json_decref(root);
            }
        }
        ddp_buf_free(&rep.text);
    }
    ddp_buf_free(&q.reply);
    free(host);
    return code;
}
