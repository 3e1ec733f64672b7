/* SPDX-License-Identifier: Apache-2.0
 * `ddprun status`: asks a rendezvous store for the state of one run (round, members, their
 * hosts and states) and prints it as a table, or with --json as its JSON, re-serialized. By
 * default it shows the counts by state and the first STATUS_SHOWN members (a run of 16,000
 * nodes lists megabytes); --all reads every member, STATUS_PAGE_MAX at a time. */
#include "launch_status.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_contract.h"
#include "ddp_err.h"
#include "ddp_escape.h"
#include "launch_int.h"
#include "launch_spec.h"
#include "rdzv_async_client.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"

/* The whole command (connect, handshake, request, reply) ends within --timeout: a server that
 * answers one byte a second must not hold it forever. Default and bounds, in seconds. */
#define STATUS_TIMEOUT_DEFAULT_S 10.0
#define STATUS_TIMEOUT_MIN_S 0.001
#define STATUS_TIMEOUT_MAX_S 86400.0
/* Connection attempts (a refused connect is retried: the store may be starting) stop after this
 * long, or after three quarters of the deadline when that comes first. */
#define STATUS_CONNECT_MAX_MS 5000
/* Members shown without --all, and members per request with it (each page costs the store
 * one pass over the run and a reply of about 150 bytes a member, 250 with its goodput). */
#define STATUS_SHOWN 20
#define STATUS_PAGE_MAX 4096

#define STATUS_USAGE                                                                               \
    "usage: ddprun status --rdzv_endpoint HOST[:PORT] --rdzv_id ID [--json] [--all] "              \
    "[--timeout SECS]\n"                                                                           \
    "       ddprun status --rdzv_backend etcd --rdzv_endpoint ETCD[:PORT][,...] --rdzv_id ID "     \
    "[--rdzv_conf etcd_prefix=...,etcd_cacert=...] [--json] [--all] [--timeout SECS]"
/* The read of the leader key in etcd is bounded by this, or by --timeout when shorter. */
#define STATUS_ETCD_MAX_MS 5000

typedef struct status_req {
    int done, rc;
    int connected;    /* the handshake is over: what is missing is the reply */
    int own_text;     /* errtext is ours and does not name the endpoint yet (the client's does) */
    double timeout_s; /* --timeout, for the message */
    uint64_t left_ms; /* what is left of it for this request */
    ddp_buf_t reply;
    char errtext[512];
} status_req_t;

/* Records the outcome once: the first of reply, connect failure and deadline wins. */
static void settle(status_req_t *q, int status, const char *errtext, int own_text) {
    if (q->done)
        return;
    q->done = 1;
    q->rc = status;
    q->own_text = own_text;
    if (status != 0)
        snprintf(q->errtext, sizeof q->errtext, "%s", errtext ? errtext : ddp_strerror(status));
}

static void on_reply(void *arg, int status, const uint8_t *reply, size_t len, const char *errtext) {
    status_req_t *q = arg;
    if (status == 0 && !q->done && ddp_buf_append(&q->reply, reply, len) < 0)
        status = -ENOMEM;
    settle(q, status, errtext, errtext == NULL);
}

static void on_connect(void *arg, int status, const char *errtext) {
    status_req_t *q = arg;
    if (status == 0)
        q->connected = 1;
    else
        settle(q, status, errtext, errtext == NULL);
}

static void on_deadline(uv_timer_t *t) {
    status_req_t *q = t->data;
    char why[160];
    snprintf(why, sizeof why, "no answer within %g s (--timeout): waiting for %s", q->timeout_s,
             q->connected ? "the reply to RDZV_STATUS" : "the connection and handshake");
    settle(q, DDP_ETIMEOUT, why, 1);
}

/* The table's text for field key of o: "-" when it is missing or not of the expected type, so that
 * an older or newer server's reply never prints "(null)" or a made-up 0. */
#define NO_VALUE "-"

/* The server's strings (run id, host names, states, the last failure) are escaped: a member that
 * joined with ESC or CR in its host name must not rewrite the operator's screen. buf holds the
 * result (cap bytes). */
static const char *str_field(const json_t *o, const char *key, char *buf, size_t cap) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return NO_VALUE;
    ddp_str_escape(buf, cap, json_string_value(v), json_string_length(v));
    return buf;
}

/* An integer field into buf (24 bytes); negative values are "-" when !neg_ok. */
static const char *int_field(const json_t *o, const char *key, int neg_ok, char *buf) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || (!neg_ok && json_integer_value(v) < 0))
        return NO_VALUE;
    snprintf(buf, 24, "%lld", (long long)json_integer_value(v));
    return buf;
}

/* A non-negative millisecond field as seconds ("2.5s") into buf (32 bytes), else "-". */
static const char *secs_field(const json_t *o, const char *key, char *buf) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return NO_VALUE;
    snprintf(buf, 32, "%.1fs", (double)json_integer_value(v) / 1000.0);
    return buf;
}

/* A member's goodput ratio as a percentage ("93.1%") into buf (32 bytes), else "-". */
static const char *goodput_field(const json_t *m, char *buf) {
    const json_t *v = json_object_get(json_object_get(m, "goodput"), "ratio");
    if (!json_is_number(v) || json_number_value(v) < 0)
        return NO_VALUE;
    snprintf(buf, 32, "%.1f%%", json_number_value(v) * 100.0);
    return buf;
}

/* The job's goodput line, from the run's "goodput" (the sums over the nodes that report one):
 * the ratio, a node's mean wall and lost time, the most restarts of one node. Nothing when the
 * store gives none; "-" for a part missing or ill-typed. */
static void print_goodput(const json_t *g) {
    if (!json_is_object(g))
        return;
    const json_t *ratio = json_object_get(g, "ratio"), *nodes = json_object_get(g, "nodes");
    const json_t *restarts = json_object_get(g, "restarts");
    json_int_t n = json_is_integer(nodes) ? json_integer_value(nodes) : 0;
    char pct[32] = NO_VALUE, wall[32] = NO_VALUE, lost[32] = NO_VALUE, count[24] = NO_VALUE;
    const json_t *w = json_object_get(g, "wall_ms"), *l = json_object_get(g, "lost_ms");
    if (json_is_number(ratio) && json_number_value(ratio) >= 0)
        snprintf(pct, sizeof pct, "%.1f%%", json_number_value(ratio) * 100.0);
    if (n > 0 && json_is_integer(w) && json_integer_value(w) >= 0)
        snprintf(wall, sizeof wall, "%.1f", (double)json_integer_value(w) / 1000.0 / (double)n);
    if (n > 0 && json_is_integer(l) && json_integer_value(l) >= 0)
        snprintf(lost, sizeof lost, "%.2f", (double)json_integer_value(l) / 1000.0 / (double)n);
    if (json_is_integer(restarts) && json_integer_value(restarts) >= 0)
        snprintf(count, sizeof count, "%lld", (long long)json_integer_value(restarts));
    printf("goodput %s of %s s; lost %s s in %s restart%s (", pct, wall, lost, count,
           json_integer_value(restarts) == 1 ? "" : "s");
    if (n > 1)
        printf("mean of %lld nodes)\n", (long long)n);
    else
        printf("%s node)\n", n == 1 ? "1" : NO_VALUE);
}

/* Room for an escaped field: a run id, host or state (the server bounds them well below). */
#define FIELD_MAX 1024

/* The hosts the store keeps a record of (root-cause failures, exclusion, a failed health check),
 * as a second table; nothing when there are none. */
static void print_hosts(const json_t *hosts) {
    if (!json_is_array(hosts) || json_array_size(hosts) == 0)
        return;
    printf("%-40s %-9s %-11s %s\n", "host", "failures", "state", "why");
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h) {
        char host[FIELD_MAX], fails[24], why[4 * FIELD_MAX];
        const char *state = "counted", *key = "last_failure";
        if (json_is_true(json_object_get(h, "excluded")))
            state = "excluded";
        else if (json_is_true(json_object_get(h, "unfit")))
            state = "unfit", key = "reason";
        else if (json_is_true(json_object_get(h, "kept_at_min")))
            state = "kept(min)";
        printf("%-40s %-9s %-11s %s\n", str_field(h, "host", host, sizeof host),
               int_field(h, "failures", 1, fails), state, str_field(h, key, why, sizeof why));
    }
}

/* The running round's stragglers (the store's detection, --straggler_threshold), one line each;
 * nothing when there are none. */
static void print_stragglers(const json_t *list) {
    size_t i;
    json_t *s;
    json_array_foreach(list, i, s) {
        char rank[24], node[24], host[FIELD_MAX], since[32];
        const json_t *ratio = json_object_get(s, "ratio");
        const json_t *mine = json_object_get(s, "per_step_us");
        const json_t *med = json_object_get(s, "median_us");
        printf("straggler: rank %s on node %s (%s): %.2fx the median compute per step (%.1f ms "
               "against %.1f ms) for %s\n",
               int_field(s, "rank", 1, rank), int_field(s, "group_rank", 1, node),
               str_field(s, "host", host, sizeof host), json_number_value(ratio),
               (double)json_integer_value(mine) / 1000.0, (double)json_integer_value(med) / 1000.0,
               secs_field(s, "since_ms", since));
    }
}

/* "restarts U of M" into buf (64 bytes). restarts_used counts the run's failures (FAILs), and the
 * one that finds max_restarts spent fails the run instead of restarting it: past max_restarts
 * the restarts are M of M, spent, never "4 of 3". */
static const char *restarts_text(const json_t *root, char *buf) {
    char used[24], max[24];
    const json_t *u = json_object_get(root, "restarts_used");
    const json_t *m = json_object_get(root, "max_restarts");
    if (json_is_integer(u) && json_is_integer(m) && json_integer_value(m) >= 0 &&
        json_integer_value(u) > json_integer_value(m))
        snprintf(buf, 64, "restarts %lld of %lld (spent)", (long long)json_integer_value(m),
                 (long long)json_integer_value(m));
    else
        snprintf(buf, 64, "restarts %s of %s", int_field(root, "restarts_used", 1, used),
                 int_field(root, "max_restarts", 1, max));
    return buf;
}

/* Prints root (a STATUS_PAGE reply, or pages of one merged) as a table. */
static void print_table(const json_t *root) {
    char round[24], restarts[64], lo[24], hi[24], run[FIELD_MAX], state[FIELD_MAX];
    char last[4 * FIELD_MAX];
    json_t *lastv = json_object_get(root, "last_failure");
    printf("run %s: round %s, %s, %s, nodes min %s max %s\n",
           str_field(root, "run", run, sizeof run), int_field(root, "round", 1, round),
           str_field(root, "state", state, sizeof state), restarts_text(root, restarts),
           int_field(root, "min_nodes", 1, lo), int_field(root, "max_nodes", 1, hi));
    const json_t *nodes = json_object_get(root, "nodes");
    char total[24], running[24], joining[24], spares[24], idle[24];
    if (json_is_object(nodes))
        printf("nodes %s: %s running, %s joining, %s spare, %s idle\n",
               int_field(nodes, "total", 1, total), int_field(nodes, "running", 1, running),
               int_field(nodes, "joining", 1, joining), int_field(nodes, "spares", 1, spares),
               int_field(nodes, "idle", 1, idle));
    if (json_is_string(lastv) && json_string_length(lastv) > 0)
        printf("last failure: %s\n", str_field(root, "last_failure", last, sizeof last));
    print_goodput(json_object_get(root, "goodput"));
    /* step, last_beat and goodput: the node's progress, present when its agent supervises
     * heartbeats (--heartbeat_timeout); last_beat is the age of its most silent worker's last
     * beat; goodput is there once a beat came. */
    printf("%-10s %-40s %-6s %-10s %-8s %-12s %-9s %s\n", "node_rank", "host", "nproc", "state",
           "silent", "step", "last_beat", "goodput");
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "members"), i, m) {
        char rank[24], nproc[24], step[24], silent[32], beat[32], gp[32], host[FIELD_MAX];
        char mstate[FIELD_MAX];
        printf("%-10s %-40s %-6s %-10s %-8s %-12s %-9s %s\n", int_field(m, "group_rank", 0, rank),
               str_field(m, "host", host, sizeof host), int_field(m, "nproc", 1, nproc),
               str_field(m, "state", mstate, sizeof mstate), secs_field(m, "silent_ms", silent),
               int_field(m, "step", 0, step), secs_field(m, "beat_age_ms", beat),
               goodput_field(m, gp));
    }
    json_int_t shown = (json_int_t)json_array_size(json_object_get(root, "members"));
    const json_t *all = json_object_get(nodes, "total");
    if (json_is_integer(all) && json_integer_value(all) > shown)
        printf("... and %lld more nodes (--all lists every one)\n",
               (long long)(json_integer_value(all) - shown));
    print_stragglers(json_object_get(root, "stragglers"));
    print_hosts(json_object_get(root, "hosts"));
}

static int usage(const char *msg) {
    fprintf(stderr, "ddprun status: %s\n", msg);
    fprintf(stderr, "%s\n", STATUS_USAGE);
    return 2;
}

typedef struct status_args {
    const char *endpoint, *id;
    int etcd;                /* --rdzv_backend=etcd: endpoint lists etcd members */
    launch_rdzv_conf_t conf; /* --rdzv_conf: the etcd keys (prefix, TLS files) */
    int json_out, all;
    double timeout_s;
    int help;
} status_args_t;

const launch_status_flag_t launch_status_flags[] = {
    {"rdzv-endpoint", 1}, {"rdzv-id", 1}, {"rdzv-backend", 1}, {"rdzv-conf", 1}, {"timeout", 1},
    {"json", 0},          {"all", 0},     {"help", 0},         {NULL, 0},
};

/* Nonzero when name ("--rdzv_id", underscores) is one of launch_status_flags. */
static int known_flag(const char *name) {
    if (strncmp(name, "--", 2) != 0)
        return 0;
    for (const launch_status_flag_t *f = launch_status_flags; f->name != NULL; f++) {
        size_t k = 0;
        while (f->name[k] != '\0' &&
               (f->name[k] == name[2 + k] || (f->name[k] == '-' && name[2 + k] == '_')))
            k++;
        if (f->name[k] == '\0' && name[2 + k] == '\0')
            return 1;
    }
    return 0;
}

/* The flags of `ddprun status` ("--flag value" or "--flag=value", dashes or underscores).
 * Returns 0, or the usage exit code after printing why. */
static int args_parse(int argc, char **argv, status_args_t *o) {
    memset(o, 0, sizeof *o);
    o->timeout_s = STATUS_TIMEOUT_DEFAULT_S;
    launch__rdzv_conf_defaults(&o->conf);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const char *eq = strchr(a, '=');
        char name[64], msg[160];
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
            o->json_out = 1;
            continue;
        }
        if (strcmp(name, "--all") == 0) {
            o->all = 1;
            continue;
        }
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            o->help = 1;
            return 0;
        }
        if (!known_flag(name)) {
            /* Before taking a value: an unknown flag is named as such, not as lacking one. */
            snprintf(msg, sizeof msg, "unknown flag '%.64s'", a);
            return usage(msg);
        }
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL) {
            snprintf(msg, sizeof msg, "%s needs a value", name);
            return usage(msg);
        }
        if (strcmp(name, "--rdzv_endpoint") == 0) {
            o->endpoint = v;
        } else if (strcmp(name, "--rdzv_id") == 0) {
            o->id = v;
        } else if (strcmp(name, "--rdzv_backend") == 0) {
            /* etcd-v2: torchrun's name, as the job takes it. */
            if (strcmp(v, "etcd") != 0 && strcmp(v, "etcd-v2") != 0 && strcmp(v, "c10d") != 0) {
                snprintf(msg, sizeof msg, "--rdzv_backend: '%.48s' is not c10d or etcd", v);
                return usage(msg);
            }
            o->etcd = strcmp(v, "c10d") != 0;
        } else if (strcmp(name, "--rdzv_conf") == 0) {
            ddp_err_t cerr;
            ddp_err_clear(&cerr);
            if (launch_rdzv_conf_parse("--rdzv_conf", v, &o->conf, &cerr) < 0)
                return usage(cerr.text);
        } else if (launch__seconds_parse(v, STATUS_TIMEOUT_MIN_S, STATUS_TIMEOUT_MAX_S,
                                         &o->timeout_s) < 0) {
            snprintf(msg, sizeof msg, "--timeout: '%.48s' is not a number of seconds in %g..%.0f",
                     v, STATUS_TIMEOUT_MIN_S, STATUS_TIMEOUT_MAX_S);
            return usage(msg);
        }
    }
    if (o->endpoint == NULL || o->id == NULL)
        return usage("--rdzv_endpoint and --rdzv_id are required");
    /* An id no store accepts is a usage error here, not a refusal from the store. */
    ddp_err_t why;
    ddp_err_clear(&why);
    if (rdzv_run_id_check(o->id, &why) < 0) {
        char msg[sizeof why.text + 16];
        snprintf(msg, sizeof msg, "--rdzv_id: %s", why.text);
        return usage(msg);
    }
    return 0;
}

static void close_quietly(uv_handle_t *h) {
    (void)h;
}

/* Connects to co's store, asks for run id's members [first, first + limit) and runs the loop
 * until the reply, a failure or the deadline (q->left_ms from now), whichever comes first. The
 * outcome is in q. */
static void request(const rdzv_client_opts_t *co, const char *id, size_t first, size_t limit,
                    status_req_t *q) {
    uv_loop_t loop;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = uv_loop_init(&loop);
    if (rc < 0) {
        settle(q, rc, uv_strerror(rc), 1);
        return;
    }
    uv_timer_t deadline;
    rdzv_aclient_t *c = NULL;
    ddp_buf_t frame = DDP_BUF_INIT;
    if ((rc = uv_timer_init(&loop, &deadline)) == 0) {
        deadline.data = q;
        rc = uv_timer_start(&deadline, on_deadline, q->left_ms, 0);
        if (rc < 0)
            uv_close((uv_handle_t *)&deadline, close_quietly);
    }
    if (rc < 0) {
        settle(q, rc, uv_strerror(rc), 1);
    } else if (rdzv_aclient_connect(&loop, co, on_connect, q, &c, &err) < 0 ||
               rdzv_status_page_req_encode(&frame, id, (int64_t)first, (int64_t)limit) < 0 ||
               rdzv_aclient_raw(c, &frame, rdzv_round_reply_len, 0, -1, "RDZV_STATUS", on_reply, q,
                                &err) < 0) {
        settle(q, DDP_EPROTO, err.text[0] ? err.text : "unable to send the request", 1);
    }
    ddp_buf_free(&frame);
    while (!q->done && uv_run(&loop, UV_RUN_ONCE))
        ;
    rdzv_aclient_close(c, NULL, NULL);
    if (rc == 0)
        uv_close((uv_handle_t *)&deadline, close_quietly);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

/* One line on stderr for a request that failed: the endpoint once, then why. */
static void print_failure(const char *host, int port, const status_req_t *q, int have_token) {
    char text[4 * sizeof q->errtext];
    if (q->rc == DDP_EAUTH_PEER) /* we refused the store: the client's text names it, and why */
        fprintf(stderr, "ddprun status: %s\n", ddp_str_escaped(q->errtext, text, sizeof text));
    else if (q->rc == DDP_EAUTH)
        fprintf(stderr,
                "ddprun status: %s:%d: the store refused this client (%s): ddprun status reads the "
                "job token from " DDP_ENV_TOKEN_NAMES "\n",
                host, port, have_token ? "wrong job token" : "no job token given");
    else if (q->own_text)
        fprintf(stderr, "ddprun status: %s:%d: %s\n", host, port,
                ddp_str_escaped(q->errtext, text, sizeof text));
    else /* the client's text names the endpoint itself */
        fprintf(stderr, "ddprun status: %s\n", ddp_str_escaped(q->errtext, text, sizeof text));
}

/* --json prints the server's JSON re-serialized, never as it came: every control character and
 * every character above ASCII in a string becomes a \uXXXX escape (C1 controls included), and
 * bytes outside strings cannot pass at all, so a hostile server cannot drive the terminal. A
 * real (a goodput ratio) keeps 6 significant digits: 0.931245, not 0.93124500000000001. */
#define STATUS_JSON_FLAGS                                                                          \
    (JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(6))

/* Prints jansson's output of STATUS_JSON_FLAGS and a newline. jansson leaves DEL (0x7f) as it is;
 * it can only be inside a string there, where \u007F means the same. */
static void print_json(const char *out) {
    for (const char *p = out; *p != '\0'; p++) {
        if (*p == 0x7f)
            fputs("\\u007F", stdout);
        else
            putchar(*p);
    }
    putchar('\n');
}

/* A JSON value's type, for messages. Static string. */
static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* NULL when root has the shape a status needs (an object whose "members" is an array: every
 * other field prints as "-" when it is missing or of another type), else why not (static, or
 * in a static buffer). */
static const char *status_shape(const json_t *root) {
    static char why[96];
    if (!json_is_object(root)) {
        snprintf(why, sizeof why, "it is %s, not an object", json_type_name(root));
        return why;
    }
    const json_t *members = json_object_get(root, "members");
    if (members == NULL)
        return "it has no \"members\"";
    if (!json_is_array(members)) {
        snprintf(why, sizeof why, "its \"members\" is %s, not an array", json_type_name(members));
        return why;
    }
    return NULL;
}

/* The JSON of the server's answer from host:port, or NULL after printing why. Caller owns;
 * free with json_decref. */
static json_t *reply_json(const char *host, int port, const status_req_t *q) {
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    size_t need = 0;
    json_t *root = NULL;
    if (rdzv_round_reply_parse(q->reply.data, q->reply.len, &rep, &need, NULL) <= 0 ||
        rep.status != 0) {
        /* The server's own words (status 1: "unknown run ..."), escaped like the table. */
        char text[4 * FIELD_MAX];
        if (rep.text.len > 0)
            ddp_str_escape(text, sizeof text, (const char *)rep.text.data, rep.text.len);
        fprintf(stderr, "ddprun status: %s\n",
                rep.text.len > 0 ? text : "unknown run or bad reply");
    } else {
        /* jansson refuses raw control bytes inside strings and anything after the value. Its
         * error text quotes the reply: only the position is printed. */
        json_error_t jerr;
        root = json_loadb((const char *)rep.text.data, rep.text.len, 0, &jerr);
        const char *why = root == NULL ? NULL : status_shape(root);
        if (root == NULL)
            fprintf(stderr,
                    "ddprun status: %s:%d: the reply to RDZV_STATUS is not valid JSON "
                    "(at byte %d of %zu)\n",
                    host, port, jerr.position, rep.text.len);
        else if (why != NULL)
            fprintf(stderr,
                    "ddprun status: %s:%d: the reply to RDZV_STATUS is JSON but not a run's "
                    "status: %s\n",
                    host, port, why);
        if (why != NULL || root == NULL) {
            json_decref(root);
            root = NULL;
        }
    }
    ddp_buf_free(&rep.text);
    return root;
}

/* Reads the run's status into *root: the first STATUS_SHOWN members, or with all every member,
 * page after page (the pages are read one after another: a member may move between them when
 * the round changes meanwhile). Returns 0, or 1 after printing why. */
static int status_read(const rdzv_client_opts_t *co, const status_args_t *o, const char *host,
                       json_t **root) {
    uint64_t start = uv_hrtime() / 1000000u, budget = (uint64_t)(o->timeout_s * 1000.0 + 0.5);
    size_t first = 0, limit = o->all ? STATUS_PAGE_MAX : STATUS_SHOWN;
    *root = NULL;
    for (;;) {
        status_req_t q;
        memset(&q, 0, sizeof q);
        uint64_t spent = uv_hrtime() / 1000000u - start;
        q.timeout_s = o->timeout_s;
        q.left_ms = spent < budget ? budget - spent : 1;
        request(co, o->id, first, limit, &q);
        json_t *page = NULL;
        if (q.rc != 0)
            print_failure(host, (int)co->port, &q, co->token_len > 0);
        else
            page = reply_json(host, (int)co->port, &q);
        ddp_buf_free(&q.reply);
        if (page == NULL) {
            json_decref(*root);
            *root = NULL;
            return 1;
        }
        json_t *members = json_object_get(page, "members");
        size_t got = json_array_size(members);
        if (*root == NULL)
            *root = page;
        else if (json_array_extend(json_object_get(*root, "members"), members) < 0) {
            json_decref(page);
            fprintf(stderr, "ddprun status: out of memory for the members\n");
            return 1;
        } else {
            json_decref(page);
        }
        const json_t *total = json_object_get(json_object_get(*root, "nodes"), "total");
        first += got;
        if (!o->all || got == 0 || !json_is_integer(total) ||
            (json_int_t)first >= json_integer_value(total))
            return 0;
    }
}

/* Prints root as a table or, with json_out, as JSON. Returns the exit code. */
static int status_print(const json_t *root, int json_out) {
    if (!json_out) {
        print_table(root);
        return 0;
    }
    char *out = json_dumps(root, STATUS_JSON_FLAGS);
    if (out == NULL) {
        fprintf(stderr, "ddprun status: out of memory for the JSON\n");
        return 1;
    }
    print_json(out);
    free(out);
    return 0;
}

/* --rdzv_backend=etcd: the store the run's agents elected, from the leader key. Returns 0 with
 * *host, *port and through set, 1 after one line on stderr, or the usage exit code. */
static int status_store_from_etcd(const status_args_t *o, char **host, int *port, char *through,
                                  size_t cap) {
    ddp_err_t err;
    ddp_err_clear(&err);
    char *members = NULL;
    if (launch_etcd_members_parse("--rdzv_endpoint", o->endpoint, &members, &err) < 0)
        return usage(err.text);
    int64_t ms = (int64_t)(o->timeout_s * 1000.0 + 0.5);
    int etcd_ms = (int)(ms < STATUS_ETCD_MAX_MS ? (ms < 1 ? 1 : ms) : STATUS_ETCD_MAX_MS);
    int code =
        launch_status_etcd_store(members, &o->conf, o->id, etcd_ms, host, port, through, cap);
    free(members);
    return code;
}

/* Says which store answered and through which etcd endpoint it was found: "store" and
 * "elected_through" in the JSON, or one line on stderr before the table. Returns 0 or 1. */
static int status_mark_elected(json_t *root, const char *host, int port, const char *through,
                               int json_out) {
    char store[300];
    snprintf(store, sizeof store, "%s%s%s:%d", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", port);
    if (!json_out) {
        fprintf(stderr, "ddprun status: store %s, elected through etcd at %s\n", store, through);
        return 0;
    }
    if (json_object_set_new(root, "store", json_string(store)) < 0 ||
        json_object_set_new(root, "elected_through", json_string(through)) < 0) {
        fprintf(stderr, "ddprun status: out of memory for the JSON\n");
        return 1;
    }
    return 0;
}

int launch_status_main(int argc, char **argv) {
    status_args_t o;
    int code = args_parse(argc, argv, &o);
    if (code != 0)
        return code;
    if (o.help) {
        printf(
            "%s\n"
            "Asks the rendezvous store at HOST:PORT (port 29400 by default) for run ID's round,\n"
            "members and their states: the counts by state and the first %d members;\n"
            "--all lists every member. The job token comes from " DDP_ENV_TOKEN
            " (hex),\n" DDP_ENV_TOKEN_FILE " or " DDP_ENV_STORE_TOKEN " (hex), the first one set.\n"
            "--timeout bounds the whole command (default %g s).\n"
            "With --rdzv_backend etcd, --rdzv_endpoint names etcd members (port 2379 by default)\n"
            "and the store is the one the run's agents elected: the value of the key\n"
            "<etcd_prefix>/ID/leader (--rdzv_conf etcd_prefix=, etcd_cacert=, etcd_cert=,\n"
            "etcd_key=; DDPRUN_ETCD_USER and DDPRUN_ETCD_PASSWORD), read within %d s.\n"
            "Exit codes: 0 printed; 1 the store could not be asked (unreachable, no answer\n"
            "within --timeout, token refused) or does not know the run; 2 usage error.\n",
            STATUS_USAGE, STATUS_SHOWN, STATUS_TIMEOUT_DEFAULT_S, STATUS_ETCD_MAX_MS / 1000);
        return 0;
    }
    ddp_err_t err;
    ddp_err_clear(&err);
    char *host = NULL, through[256] = "";
    int port = -1;
    if (o.etcd) {
        code = status_store_from_etcd(&o, &host, &port, through, sizeof through);
        if (code != 0)
            return code;
    } else if (launch_endpoint_split("--rdzv_endpoint", o.endpoint, &host, &port, &err) < 0) {
        return usage(err.text);
    }
    ddp_buf_t token = DDP_BUF_INIT;
    if (rdzv_token_from_job_env(&token, &err) < 0) {
        free(host);
        return usage(err.text);
    }
    int64_t timeout_ms = (int64_t)(o.timeout_s * 1000.0 + 0.5);
    /* Connect retries end before the deadline, so that a refused port says so. */
    int connect_ms = (int)(timeout_ms * 3 / 4 < STATUS_CONNECT_MAX_MS ? timeout_ms * 3 / 4
                                                                      : STATUS_CONNECT_MAX_MS);
    if (connect_ms < 1)
        connect_ms = 1;
    rdzv_client_opts_t co = {.host = host,
                             .port = (uint16_t)(port > 0 ? port : AGENT_DEFAULT_C10D_PORT),
                             .token = token.len ? token.data : NULL,
                             .token_len = token.len,
                             .run_id = o.id, /* the token may be the run's (rdzv_run_token) */
                             .connect_timeout_ms = connect_ms,
                             .io_timeout_ms = (int)timeout_ms};
    json_t *root = NULL;
    code = status_read(&co, &o, host, &root);
    if (code == 0 && o.etcd)
        code = status_mark_elected(root, host, (int)co.port, through, o.json_out);
    if (code == 0)
        code = status_print(root, o.json_out);
    json_decref(root);
    ddp_buf_free(&token);
    free(host);
    return code;
}
