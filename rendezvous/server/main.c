/* SPDX-License-Identifier: Apache-2.0
 * ddp-rendezvous: the store daemon. Parses flags, loads the token, serves rdzv_server on the
 * default libuv loop, prints "listening on ADDR:PORT" once it accepts (and tells systemd, under
 * Type=notify), and exits 0 on SIGTERM or SIGINT. With --etcd it first stands for election on
 * each --run-id (rdzv_daemon_etcd.h). Exit codes: 0 clean shutdown; 1 could not start (address in
 * use, token unreadable, etcd unreachable) or lost a run's etcd lease; 2 usage (one line naming
 * the flag). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_contract.h"
#include "ddp_err.h"
#include "ddp_log.h"
#include "ddp_parse.h"
#include "rdzv_daemon_etcd.h"
#include "rdzv_etcd_store.h"
#include "rdzv_limits.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "rdzv_token.h"

static const char usage_text[] =
    "usage: ddp-rendezvous [--host ADDR] [--port PORT] (--token-file FILE | --no-auth)\n"
    "                      [--max-key-len N] [--max-value-len N] [--max-keys N]\n"
    "                      [--max-conns N] [--max-unauth-conns N] [--max-out-buf N]\n"
    "                      [--max-mem N] [--auth-idle-ms MS] [-v ...]\n"
    "                      [--log-level error|warn|info|debug] [--metrics ADDR:PORT]\n"
    "                      [--etcd HOST:PORT[,...] --run-id ID [--run-id ID ...]\n"
    "                       [--etcd-prefix P] [--etcd-lease-ttl S] [--etcd-cacert FILE]\n"
    "                       [--etcd-cert FILE --etcd-key FILE]]\n"
    "       ddp-rendezvous [--token-file FILE] --run-token RUN_ID\n"
    "  --host ADDR        address to bind (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
    "  --port PORT        port (default 29400; 0 picks a free one)\n"
    "  --token-file FILE  job token (raw bytes, >= 16, trailing newline trimmed, mode 600);\n"
    "                     without it: " DDP_ENV_TOKEN " (hex), " DDP_ENV_TOKEN_FILE
    ", " DDP_ENV_STORE_TOKEN "\n"
    "                     (hex), the first one set\n"
    "  --no-auth          serve without authentication (PyTorch clients; trusted networks)\n"
    "  --max-conns N      simultaneous connections (default 65536, less when the open-file\n"
    "                     limit cannot be raised to N + 256: the file limit wins, logged)\n"
    "  --max-unauth-conns N  connections still authenticating (default max(8, max-conns/4));\n"
    "                     past it or --max-conns, a newcomer evicts the oldest of them\n"
    "                     (not with --no-auth: there, past --max-conns newcomers are refused)\n"
    "  --auth-idle-ms MS  handshake deadline (default 5000)\n"
    "  --max-key-len N    bytes of one key (default 8192, at most 65536)\n"
    "  --max-value-len N  bytes of one value (default 8 MiB, at most 1 GiB)\n"
    "  --max-keys N       keys in one request (CHECK, WAIT, MULTI_GET; default 131072)\n"
    "  --max-out-buf N    bytes of replies queued for one client before it is cut off as a slow\n"
    "                     reader (default 64 MiB)\n"
    "  --max-mem N        bytes the store holds in all: keys, values, queues, buffers (default\n"
    "                     2 GiB); a request past it closes its client, the store goes on\n"
    "  --log-level L      error, warn (default), info or debug\n"
    "  --metrics ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics (connections,\n"
    "                     requests by command, waits, keys, memory, rounds, restarts, members\n"
    "                     and each node's silence); port 0 picks one (printed on stdout)\n"
    "  -v, --verbose      one level more per -v\n"
    "  --run-token RUN_ID print the run token of RUN_ID (hex) under the store's token and exit:\n"
    "                     a job of that run id given it (" DDP_ENV_TOKEN " or " DDP_ENV_TOKEN_FILE
    ")\n"
    "                     is served that run alone (docs/operations.md)\n"
    "  --etcd HOST:PORT[,...]  stand for election, through an etcd lease, as the store of each\n"
    "                     --run-id (--rdzv_backend=etcd): the leader publishes its address\n"
    "                     (--host, or its address toward the first member when --host is\n"
    "                     0.0.0.0 or ::) under <prefix>/ID/leader; the others stand by and\n"
    "                     take over when its lease lapses. Credentials: " RDZV_ETCD_ENV_USER "\n"
    "                     and " RDZV_ETCD_ENV_PASSWORD "\n"
    "  --run-id ID        a run (--rdzv_id) whose store this daemon stands for; repeatable\n"
    "  --etcd-prefix P    the key prefix (default " RDZV_ETCD_STORE_PREFIX
    "; the agents' etcd_prefix)\n"
    "  --etcd-lease-ttl S the lease TTL in seconds, 2..600 (default 4; the agents' lease_ttl)\n"
    "  --etcd-cacert FILE, --etcd-cert FILE, --etcd-key FILE  TLS to etcd (the agents'\n"
    "                     etcd_cacert, etcd_cert, etcd_key)\n"
    "prints 'listening on ADDR:PORT' on stdout once it accepts connections, and tells systemd\n"
    "(READY=1 to $NOTIFY_SOCKET) when run as a Type=notify service.\n"
    "exit codes: 0 clean shutdown (SIGTERM/SIGINT), 1 failed to start or lost a run's etcd\n"
    "lease while serving it (run it under a supervisor that starts it again), 2 usage error\n";

typedef struct daemon_state {
    uv_signal_t sigterm, sigint;
    rdzv_server_t *server;
    rdzv_metrics_t *metrics; /* --metrics, or NULL */
    daemon_etcd_t *etcd;     /* --etcd, or NULL */
    int stopping;
    int exit_code;
} daemon_state_t;

/* --etcd and what goes with it; etcd_opts.endpoints NULL: no election. */
static daemon_etcd_opts_t etcd_opts = {.prefix = RDZV_ETCD_STORE_PREFIX,
                                       .ttl_s = RDZV_ETCD_STORE_TTL_S};

/* --metrics HOST:PORT ([v6]:PORT), split: the Prometheus listener's address. */
static char metrics_host[256];
static int metrics_port = -1;

/* systemd's readiness protocol (sd_notify(3), without libsystemd): one datagram of "KEY=value"
 * lines to the AF_UNIX socket in $NOTIFY_SOCKET ('@' first: the abstract namespace). A no-op
 * outside a Type=notify service; a failure is logged, the store serves anyway. */
static void notify_systemd(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) {
        ddp_log(DDP_LOG_WARN, "NOTIFY_SOCKET '%s' is not a socket path: systemd not told", path);
        return;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
        ddp_log(DDP_LOG_WARN, "unable to notify systemd at %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* The end, once the elections are left: the store and everything else on the loop close. */
static void close_all(void *arg) {
    daemon_state_t *d = arg;
    rdzv_server_close(d->server, NULL, NULL);
    rdzv_metrics_close(d->metrics);
    if (d->sigterm.data != NULL) {
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
    }
}

static void shut_down(daemon_state_t *d) {
    if (d->stopping)
        return;
    d->stopping = 1;
    notify_systemd("STOPPING=1");
    if (d->etcd != NULL)
        daemon_etcd_stop(d->etcd, close_all, d); /* resign first: another leads at once */
    else
        close_all(d);
}

static void on_signal(uv_signal_t *h, int signum) {
    daemon_state_t *d = h->data;
    if (!d->stopping)
        ddp_log(DDP_LOG_INFO, "received %s, shutting down", strsignal(signum));
    shut_down(d);
}

/* This daemon lost the lease of a run it served: another candidate may serve it now. The store
 * refuses that run already; the daemon exits so that its supervisor starts a candidate with an
 * empty store. */
static void on_lease_lost(void *arg, const char *why) {
    daemon_state_t *d = arg;
    ddp_log(DDP_LOG_ERROR, "%s; exiting", why);
    d->exit_code = 1;
    shut_down(d);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ddp-rendezvous: %s (see --help)\n", msg);
    return 2;
}

/* Serves the store until SIGTERM or SIGINT; wipes and frees tok once the server holds its copy.
 * Returns the exit code. */
static int serve(const rdzv_server_opts_t *opts, ddp_buf_t *tok) {
    ddp_err_t err;
    ddp_err_clear(&err);
    uv_loop_t *loop = uv_default_loop();
    daemon_state_t d = {0};
    int rc = rdzv_server_start(loop, opts, &d.server, &err);
    char published[RDZV_ETCD_STORE_HOST_MAX + 1];
    if (tok->data != NULL)
        memset(tok->data, 0, tok->cap);
    ddp_buf_free(tok);
    if (rc < 0) {
        ddp_log(DDP_LOG_ERROR, "%s", err.text);
        (void)uv_run(loop, UV_RUN_NOWAIT); /* closes the failed server's handles; exiting anyway */
        return 1;
    }
    rdzv_server_set_log(d.server, ddp_log_level(), rdzv_server_log_to_ddp, NULL);
    int note_level;
    const char *note = rdzv_server_nofile_note(d.server, &note_level);
    if (note != NULL)
        ddp_log(note_level, "%s", note);
    if (etcd_opts.endpoints != NULL) {
        /* A wildcard address is not one the agents can reach: the route toward etcd is. */
        if (strcmp(opts->host, "0.0.0.0") == 0 || strcmp(opts->host, "::") == 0)
            rdzv_etcd_store_local_host(etcd_opts.endpoints, published, sizeof published);
        else
            snprintf(published, sizeof published, "%s", opts->host);
        etcd_opts.host = published;
        if (daemon_etcd_start(loop, d.server, &etcd_opts, on_lease_lost, &d, &d.etcd) != 0) {
            shut_down(&d);
            (void)uv_run(loop, UV_RUN_DEFAULT);
            daemon_etcd_free(d.etcd);
            return 1;
        }
    }
    if (uv_signal_init(loop, &d.sigterm) < 0 || uv_signal_init(loop, &d.sigint) < 0 ||
        uv_signal_start(&d.sigterm, on_signal, SIGTERM) < 0 ||
        uv_signal_start(&d.sigint, on_signal, SIGINT) < 0) {
        ddp_log(DDP_LOG_ERROR, "unable to install signal handlers");
        return 1;
    }
    d.sigterm.data = d.sigint.data = &d;
    if (metrics_port >= 0 && rdzv_metrics_start(loop, d.server, NULL, NULL, metrics_host,
                                                (uint16_t)metrics_port, &d.metrics, &err) < 0) {
        ddp_log(DDP_LOG_ERROR, "--metrics: %s", err.text);
        return 1;
    }
    printf("listening on %s\n", rdzv_server_addr(d.server));
    if (d.metrics != NULL)
        printf("metrics on http://%s/metrics\n", rdzv_metrics_addr(d.metrics));
    fflush(stdout);
    char ready[160];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=listening on %s\nMAINPID=%ld",
             rdzv_server_addr(d.server), (long)getpid());
    notify_systemd(ready);
    ddp_log(DDP_LOG_INFO, "serving the store on %s (%s)", rdzv_server_addr(d.server),
            opts->no_auth ? "no authentication" : "token authentication");
    (void)uv_run(loop, UV_RUN_DEFAULT); /* ends when every handle is closed: checked just below */
    rc = uv_loop_close(loop);
    if (rc < 0)
        ddp_log(DDP_LOG_WARN, "event loop closed with handles open: %s", uv_strerror(rc));
    daemon_etcd_free(d.etcd);
    ddp_log(DDP_LOG_INFO, "stopped");
    return d.exit_code;
}

/* --etcd's members: HOST:PORT ([v6]:PORT) each, a port 1..65535, at most 16. Returns 0 or
 * -EINVAL with what is wrong in why. */
static int etcd_members_check(const char *list, char *why, size_t cap) {
    int n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char m[RDZV_ETCD_STORE_HOST_MAX + 16];
        if (len == 0 || len >= sizeof m) {
            snprintf(why, cap, "'%.64s' has an empty or too long member", list);
            return -EINVAL;
        }
        memcpy(m, p, len);
        m[len] = '\0';
        char *colon = strrchr(m, ':');
        int64_t port;
        if (colon == NULL || colon == m || ddp_parse_i64(colon + 1, 1, 65535, &port) < 0 ||
            (m[0] == '[' && colon[-1] != ']')) {
            snprintf(why, cap, "'%.64s' is not HOST:PORT (a port 1..65535)", m);
            return -EINVAL;
        }
        if (++n > 16) {
            snprintf(why, cap, "more than 16 members");
            return -EINVAL;
        }
        if (end == NULL)
            return 0;
        p = end + 1;
    }
}

/* One of the --etcd flags (which: its offset from O_ETCD, in the enum's order) with value a.
 * Returns -1 to go on, or 2 after one line naming the flag. */
static int etcd_flag(int which, const char *a) {
    static const char *const files[] = {"--etcd-cacert", "--etcd-cert", "--etcd-key"};
    char why[300];
    int64_t v;
    switch (which) {
    case 0:
        if (etcd_members_check(a, why, sizeof why) < 0)
            return usage_error("--etcd: %s", why);
        etcd_opts.endpoints = a;
        break;
    case 1:
        if (etcd_opts.n_runs == DAEMON_ETCD_MAX_RUNS)
            return usage_error("--run-id: more than %d run ids", DAEMON_ETCD_MAX_RUNS);
        ddp_err_t err;
        ddp_err_clear(&err);
        if (rdzv_run_id_check(a, &err) < 0)
            return usage_error("--run-id: %s", err.text);
        etcd_opts.runs[etcd_opts.n_runs++] = a;
        break;
    case 2: {
        size_t n = strlen(a);
        int bad = n < 2 || n > 256 || a[0] != '/' || a[n - 1] == '/';
        for (size_t i = 0; i < n; i++)
            bad |= a[i] <= ' ' || a[i] > '~';
        if (bad)
            return usage_error("--etcd-prefix: '%.64s' is not '/' then printable bytes, without "
                               "a space or a final '/' (at most 256)",
                               a);
        etcd_opts.prefix = a;
        break;
    }
    case 3:
        if (ddp_parse_i64(a, RDZV_ETCD_STORE_TTL_MIN_S, RDZV_ETCD_STORE_TTL_MAX_S, &v) < 0)
            return usage_error("--etcd-lease-ttl: '%.64s' is not a number of seconds %d..%d", a,
                               RDZV_ETCD_STORE_TTL_MIN_S, RDZV_ETCD_STORE_TTL_MAX_S);
        etcd_opts.ttl_s = (int)v;
        break;
    default:
        if (*a == '\0')
            return usage_error("%s: empty file name", files[which - 4]);
        *(which == 4 ? &etcd_opts.cacert : which == 5 ? &etcd_opts.cert : &etcd_opts.key) = a;
        break;
    }
    return -1;
}

/* What --etcd needs together, once every flag is read. Returns -1 or 2 (one line). */
static int etcd_flags_check(void) {
    if (etcd_opts.endpoints == NULL) {
        if (etcd_opts.n_runs > 0)
            return usage_error("--run-id: stands for election with --etcd alone");
        return -1;
    }
    if (etcd_opts.n_runs == 0)
        return usage_error("--etcd: name the runs it stands for with --run-id ID");
    if ((etcd_opts.cert == NULL) != (etcd_opts.key == NULL))
        return usage_error("--etcd-cert and --etcd-key: give both or neither");
    etcd_opts.user = getenv(RDZV_ETCD_ENV_USER);
    etcd_opts.password = getenv(RDZV_ETCD_ENV_PASSWORD);
    if ((etcd_opts.user == NULL) != (etcd_opts.password == NULL))
        return usage_error("%s and %s: set both or neither", RDZV_ETCD_ENV_USER,
                           RDZV_ETCD_ENV_PASSWORD);
    return -1;
}

/* Over 60 lines: the flag table and its switch stay together, one case per flag. */
/* Parses the flags into o, *token_file and *level. Returns -1 to go on, or the exit code (0 for
 * --help, 2 with one line naming the flag). */
static int parse_flags(int argc, char **argv, rdzv_server_opts_t *o, const char **token_file,
                       const char **run_token_for, int *level) {
    enum {
        O_HOST = 256,
        O_PORT,
        O_TOKEN_FILE,
        O_NO_AUTH,
        O_MAX_KEY,
        O_MAX_VALUE,
        O_MAX_KEYS,
        O_MAX_CONNS,
        O_MAX_UNAUTH,
        O_MAX_OUT,
        O_MAX_MEM,
        O_IDLE,
        O_LOG_LEVEL,
        O_METRICS,
        O_RUN_TOKEN,
        O_ETCD,
        O_RUN_ID,
        O_ETCD_PREFIX,
        O_ETCD_TTL,
        O_ETCD_CACERT,
        O_ETCD_CERT,
        O_ETCD_KEY
    };
    static const struct option longopts[] = {
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"token-file", required_argument, NULL, O_TOKEN_FILE},
        {"no-auth", no_argument, NULL, O_NO_AUTH},
        {"run-token", required_argument, NULL, O_RUN_TOKEN},
        {"max-key-len", required_argument, NULL, O_MAX_KEY},
        {"max-value-len", required_argument, NULL, O_MAX_VALUE},
        {"max-keys", required_argument, NULL, O_MAX_KEYS},
        {"max-conns", required_argument, NULL, O_MAX_CONNS},
        {"max-unauth-conns", required_argument, NULL, O_MAX_UNAUTH},
        {"max-out-buf", required_argument, NULL, O_MAX_OUT},
        {"max-mem", required_argument, NULL, O_MAX_MEM},
        {"auth-idle-ms", required_argument, NULL, O_IDLE},
        {"log-level", required_argument, NULL, O_LOG_LEVEL},
        {"metrics", required_argument, NULL, O_METRICS},
        {"etcd", required_argument, NULL, O_ETCD},
        {"run-id", required_argument, NULL, O_RUN_ID},
        {"etcd-prefix", required_argument, NULL, O_ETCD_PREFIX},
        {"etcd-lease-ttl", required_argument, NULL, O_ETCD_TTL},
        {"etcd-cacert", required_argument, NULL, O_ETCD_CACERT},
        {"etcd-cert", required_argument, NULL, O_ETCD_CERT},
        {"etcd-key", required_argument, NULL, O_ETCD_KEY},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* The store's limits: each flag's bound, how its error names the range, and its field. */
    const struct {
        int opt;
        const char *flag;
        int64_t max;
        const char *range;
        size_t *dst;
    } limits[] = {
        {O_MAX_KEY, "--max-key-len", (int64_t)RDZV_MAX_KEY_LEN * 8, "a size in 1..65536",
         &o->max_key_len},
        {O_MAX_VALUE, "--max-value-len", (int64_t)1 << 30, "a size in 1..2^30", &o->max_value_len},
        {O_MAX_KEYS, "--max-keys", (int64_t)1 << 24, "a count in 1..2^24", &o->max_keys_per_req},
        {O_MAX_CONNS, "--max-conns", (int64_t)1 << 24, "a count in 1..2^24", &o->max_conns},
        {O_MAX_UNAUTH, "--max-unauth-conns", (int64_t)1 << 24, "a count in 1..2^24",
         &o->max_unauth_conns},
        {O_MAX_OUT, "--max-out-buf", (int64_t)1 << 40, "a byte count", &o->max_out_buf},
        {O_MAX_MEM, "--max-mem", (int64_t)1 << 50, "a byte count", &o->max_total_mem},
    };
    int opt, verbose = 0, rc;
    int64_t v;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":vh", longopts, NULL)) != -1) {
        const char *a = optarg;
        switch (opt) {
        case O_HOST: o->host = a; break;
        case O_PORT:
            if (ddp_parse_i64(a, 0, 65535, &v) < 0)
                return usage_error("--port: '%s' is not a port number (0-65535)", a);
            o->port = (uint16_t)v;
            break;
        case O_TOKEN_FILE: *token_file = a; break;
        case O_RUN_TOKEN: *run_token_for = a; break;
        case O_NO_AUTH: o->no_auth = 1; break;
        case O_MAX_KEY:
        case O_MAX_VALUE:
        case O_MAX_KEYS:
        case O_MAX_CONNS:
        case O_MAX_UNAUTH:
        case O_MAX_OUT:
        case O_MAX_MEM:
            for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
                if (limits[i].opt != opt)
                    continue;
                if (ddp_parse_i64(a, 1, limits[i].max, &v) < 0)
                    return usage_error("%s: '%s' is not %s", limits[i].flag, a, limits[i].range);
                *limits[i].dst = (size_t)v;
            }
            break;
        case O_IDLE:
            if (ddp_parse_i64(a, 1, 86400000, &v) < 0)
                return usage_error("--auth-idle-ms: '%s' is not a duration in 1..86400000 ms", a);
            o->auth_idle_ms = (int)v;
            break;
        case O_LOG_LEVEL: {
            static const char *names[] = {"error", "warn", "info", "debug"};
            *level = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(a, names[i]) == 0)
                    *level = i;
            if (*level < 0)
                return usage_error("--log-level: '%s' is not error, warn, info or debug", a);
            break;
        }
        case O_METRICS: {
            /* HOST:PORT, [IPv6]:PORT; port 0 = the kernel picks (printed on stdout). */
            const char *colon = strrchr(a, ':');
            int64_t p;
            size_t hl = colon ? (size_t)(colon - a) : 0;
            if (hl > 1 && a[0] == '[' && a[hl - 1] == ']') {
                a++;
                hl -= 2;
            }
            if (colon == NULL || hl == 0 || hl >= sizeof metrics_host ||
                ddp_parse_i64(colon + 1, 0, 65535, &p) < 0)
                return usage_error("--metrics: '%s' is not HOST:PORT", optarg);
            memcpy(metrics_host, a, hl);
            metrics_host[hl] = '\0';
            metrics_port = (int)p;
            break;
        }
        case O_ETCD:
        case O_RUN_ID:
        case O_ETCD_PREFIX:
        case O_ETCD_TTL:
        case O_ETCD_CACERT:
        case O_ETCD_CERT:
        case O_ETCD_KEY:
            if ((rc = etcd_flag(opt - O_ETCD, a)) >= 0)
                return rc;
            break;
        case 'v': verbose++; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case ':': return usage_error("%s: missing value", argv[optind - 1]);
        default: return usage_error("%s: unknown flag", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("%s: unexpected argument", argv[optind]);
    if ((rc = etcd_flags_check()) >= 0)
        return rc;
    *level += verbose;
    return -1;
}

/* Loads the job token into tok unless o->no_auth, and points o at it. Returns -1 to go on, or
 * the exit code after one line naming the flag, variable or file. */
static int load_token(rdzv_server_opts_t *o, const char *token_file, ddp_buf_t *tok) {
    ddp_err_t err;
    ddp_err_clear(&err);
    if (token_file != NULL && o->no_auth)
        return usage_error("%s: choose one of --token-file and --no-auth", "--no-auth");
    if (!o->no_auth) {
        const char *source = NULL;
        if (rdzv_token_load(token_file, tok, &source, &err) < 0) {
            ddp_log(DDP_LOG_ERROR, "%s", err.text);
            /* A file that cannot be read fails the start (1); a malformed variable is usage. */
            return source != NULL && strcmp(source, DDP_ENV_STORE_TOKEN) != 0 &&
                           strcmp(source, DDP_ENV_TOKEN) != 0
                       ? 1
                       : 2;
        }
        if (tok->len == 0)
            return usage_error("%s: one of --token-file, --no-auth or %s is required",
                               "--token-file", DDP_ENV_TOKEN_NAMES);
    }
    if (!o->no_auth && tok->len < RDZV_TOKEN_MIN_LEN_DAEMON) {
        ddp_log(DDP_LOG_ERROR, "the token is %zu bytes; use at least %zu random bytes", tok->len,
                RDZV_TOKEN_MIN_LEN_DAEMON);
        ddp_buf_free(tok);
        return 1;
    }
    o->token = tok->len ? tok->data : NULL;
    o->token_len = tok->len;
    if (o->no_auth)
        ddp_log(DDP_LOG_WARN,
                "serving without authentication (--no-auth): anyone who can reach "
                "%s can read and write the store",
                o->host);

    return -1;
}

/* --run-token: the hex run token of run_id on stdout. Returns the exit code. */
static int print_run_token(ddp_buf_t *tok, const char *run_id) {
    ddp_buf_t hex = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_run_token(tok->data, tok->len, run_id, &hex, &err);
    memset(tok->data, 0, tok->cap);
    ddp_buf_free(tok);
    if (rc < 0)
        return usage_error("--run-token: %s", err.text);
    rc = printf("%s\n", (const char *)hex.data) < 0 || fflush(stdout) != 0 ? 1 : 0;
    memset(hex.data, 0, hex.cap);
    ddp_buf_free(&hex);
    return rc;
}

int main(int argc, char **argv) {
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    o.port = 29400;
    const char *token_file = NULL, *run_token_for = NULL;
    int level = DDP_LOG_WARN;
    int rc = parse_flags(argc, argv, &o, &token_file, &run_token_for, &level);
    if (rc >= 0)
        return rc;
    ddp_log_init("rendezvous", level > DDP_LOG_DEBUG ? DDP_LOG_DEBUG : level);
    /* A reply written to a client that reset its connection (a killed worker or agent) must be
     * an EPIPE on that connection, not a SIGPIPE that ends the store silently for every job. */
    signal(SIGPIPE, SIG_IGN);
    ddp_buf_t tok = DDP_BUF_INIT;
    if (run_token_for != NULL && o.no_auth)
        return usage_error("--run-token: a store without a token (--no-auth) has no run tokens");
    if ((rc = load_token(&o, token_file, &tok)) >= 0)
        return rc;
    if (run_token_for != NULL)
        return print_run_token(&tok, run_token_for);
    return serve(&o, &tok);
}
