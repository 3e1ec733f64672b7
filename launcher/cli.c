/* launch_cli_parse: torchrun's command line (torch/distributed/run.py) into a launch_spec_t.
 * Every flag has a dashed and an underscored spelling, "--flag=value" and "--flag value" forms, a
 * PET_<FLAG> variable (the command line wins), and a unique prefix works as in argparse. Parsing
 * stops at the first argument that is not a flag (the program) or after "--". */
#include "launch_spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_parse.h"
#include "ddp_signal.h"
#include "launch_int.h"

/* Values are quoted in messages up to this many characters, so a message fits DDP_ERR_TEXT_LEN. */
#define VQ 48

typedef int (*apply_fn)(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err);

typedef struct opt {
    launch_opt_t id;
    const char *name; /* canonical dashed spelling without "--" */
    char shortc;      /* -r, -t, -m, -v, -h; 0 when none */
    int takes_value;
    const char *pet; /* PET_* variable, NULL when the flag has none */
    apply_fn apply;  /* NULL: handled by the parser itself */
} opt_t;

/* ---- value parsers ------------------------------------------------------------------------ */

static int usage(ddp_err_t *err, const char *flag, const char *val, const char *what) {
    return ddp_err_set(err, DDP_EUSAGE, "%s: '%.*s%s' %s", flag, VQ, val,
                       strlen(val) > VQ ? "..." : "", what);
}

/* Replaces *dst with a copy of val (the old string is freed only once the copy exists).
 * Returns 0, or -ENOMEM with *dst unchanged. */
int launch__str_set(char **dst, const char *val) {
    char *p = strdup(val);
    if (p == NULL)
        return -ENOMEM;
    free(*dst);
    *dst = p;
    return 0;
}

static int nonempty_str(char **dst, const char *flag, const char *val, ddp_err_t *err) {
    if (*val == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    return launch__str_set(dst, val);
}

static int get_int(const char *flag, const char *val, int64_t min, int64_t max, int *out,
                   ddp_err_t *err) {
    int64_t v;
    int rc = ddp_parse_i64(val, min, max, &v);
    if (rc == -ERANGE) {
        char what[64];
        snprintf(what, sizeof what, "is out of range (%lld..%lld)", (long long)min, (long long)max);
        return usage(err, flag, val, what);
    }
    if (rc < 0)
        return usage(err, flag, val, "is not a number");
    *out = (int)v;
    return 0;
}

static int get_seconds(const char *flag, const char *val, double *out, ddp_err_t *err) {
    if (ddp_parse_seconds(val, out) < 0)
        return usage(err, flag, val, "is not a number of seconds");
    return 0;
}

static int apply_nnodes(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    const char *colon = strchr(val, ':');
    int lo = 0, hi = 0;
    if (colon == NULL) {
        if (get_int(flag, val, 1, INT32_MAX, &lo, err) < 0)
            return DDP_EUSAGE;
        hi = lo;
    } else {
        char buf[32];
        size_t n = (size_t)(colon - val);
        int64_t a, b;
        if (n >= sizeof buf)
            return usage(err, flag, val, "is not N or MIN:MAX");
        memcpy(buf, val, n);
        buf[n] = '\0';
        if (ddp_parse_i64(buf, 1, INT32_MAX, &a) < 0 ||
            ddp_parse_i64(colon + 1, 1, INT32_MAX, &b) < 0)
            return usage(err, flag, val, "is not N or MIN:MAX with 1 <= MIN <= MAX");
        if (a > b)
            return usage(err, flag, val, "has MIN above MAX");
        lo = (int)a;
        hi = (int)b;
    }
    spec->min_nodes = lo;
    spec->max_nodes = hi;
    return 0;
}

static int apply_nproc(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    if (strcmp(val, "gpu") == 0)
        spec->nproc_kind = LAUNCH_NPROC_GPU;
    else if (strcmp(val, "cpu") == 0)
        spec->nproc_kind = LAUNCH_NPROC_CPU;
    else if (strcmp(val, "auto") == 0)
        spec->nproc_kind = LAUNCH_NPROC_AUTO;
    else {
        int64_t v;
        int rc = ddp_parse_i64(val, 1, 65536, &v);
        if (rc == -ERANGE)
            return usage(err, flag, val, "is out of range (1..65536)");
        if (rc < 0)
            return usage(err, flag, val, "is not a number, gpu, cpu or auto");
        spec->nproc_kind = LAUNCH_NPROC_NUM;
        spec->nproc_per_node = (int)v;
        return 0;
    }
    spec->nproc_per_node = 0; /* launch_nproc_resolve fills it */
    return 0;
}

static int apply_node_rank(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return get_int(flag, val, 0, INT32_MAX - 1, &spec->node_rank, err);
}

static int apply_rdzv_backend(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    if (strcmp(val, "static") != 0 && strcmp(val, "c10d") != 0) {
        if (strncmp(val, "etcd", 4) == 0)
            return usage(err, flag, val, "is not supported by ddprun (use c10d)");
        return usage(err, flag, val, "is not a rendezvous backend (static or c10d)");
    }
    return launch__str_set(&spec->rdzv_backend, val);
}

int launch_endpoint_split(const char *flag, const char *ep, char **host, int *port,
                          ddp_err_t *err) {
    const char *h = ep, *hend, *p = NULL;
    *host = NULL;
    *port = -1;
    if (*ep == '[') {
        /* "[::1]:29400": the brackets keep an IPv6 address's colons apart from the port. */
        h = ep + 1;
        hend = strchr(h, ']');
        if (hend == NULL)
            return usage(err, flag, ep, "has '[' without ']'");
        if (hend[1] == ':')
            p = hend + 2;
        else if (hend[1] != '\0')
            return usage(err, flag, ep, "is not host[:port]");
    } else {
        const char *c = strrchr(ep, ':');
        if (c != NULL && strchr(ep, ':') != c)
            return usage(err, flag, ep, "has an IPv6 address without [brackets]");
        hend = c != NULL ? c : ep + strlen(ep);
        if (c != NULL)
            p = c + 1;
    }
    if (hend == h)
        return usage(err, flag, ep, "has no host");
    if (p != NULL) {
        int64_t v;
        if (ddp_parse_i64(p, 0, 65535, &v) < 0)
            return usage(err, flag, ep, "has a port that is not 0..65535");
        *port = (int)v;
    }
    *host = strndup(h, (size_t)(hend - h));
    return *host == NULL ? -ENOMEM : 0;
}

static int apply_rdzv_endpoint(launch_spec_t *spec, const char *flag, const char *val,
                               ddp_err_t *err) {
    if (*val == '\0') { /* torchrun's default is "": not given */
        free(spec->rdzv_host);
        spec->rdzv_host = NULL;
        spec->rdzv_port = -1;
        return 0;
    }
    char *host;
    int port, rc = launch_endpoint_split(flag, val, &host, &port, err);
    if (rc < 0)
        return rc;
    free(spec->rdzv_host);
    spec->rdzv_host = host;
    spec->rdzv_port = port;
    return 0;
}

static int apply_rdzv_id(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return nonempty_str(&spec->rdzv_id, flag, val, err);
}

static const char *const conf_keys = "join_timeout, last_call_timeout, close_timeout, timeout, "
                                     "heartbeat, keep_alive_interval, keep_alive_max_attempt, "
                                     "read_timeout, is_host";

static void conf_defaults(launch_rdzv_conf_t *c) {
    c->join_timeout = 600;
    c->last_call_timeout = 30;
    c->close_timeout = 30;
    c->timeout = 600;
    c->keep_alive_interval = 5;
    c->keep_alive_max_attempt = 3;
    c->read_timeout = 60;
    c->is_host = -1;
}

static int parse_bool(const char *v) {
    static const char *const t[] = {"1", "true", "t", "yes", "y", "on"};
    static const char *const f[] = {"0", "false", "f", "no", "n", "off"};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcasecmp(v, t[i]) == 0)
            return 1;
        if (strcasecmp(v, f[i]) == 0)
            return 0;
    }
    return -1;
}

/* Applies one "key=value" (key and value already trimmed). */
static int conf_set(launch_rdzv_conf_t *c, const char *flag, const char *key, const char *val,
                    ddp_err_t *err) {
    struct {
        const char *key;
        double *dst;
    } secs[] = {
        {"join_timeout", &c->join_timeout},     {"last_call_timeout", &c->last_call_timeout},
        {"close_timeout", &c->close_timeout},   {"timeout", &c->timeout},
        {"heartbeat", &c->keep_alive_interval}, {"keep_alive_interval", &c->keep_alive_interval},
        {"read_timeout", &c->read_timeout},
    };
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        if (strcmp(key, secs[i].key) != 0)
            continue;
        double d;
        if (ddp_parse_seconds(val, &d) < 0 || d <= 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is not a positive number of seconds",
                               flag, key, VQ, val);
        /* Timeouts become int milliseconds in the agent and the server: keep them in range. */
        if (d < LAUNCH_RDZV_CONF_MIN_S || d > LAUNCH_RDZV_CONF_MAX_S)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is outside %g..%g seconds", flag,
                               key, VQ, val, LAUNCH_RDZV_CONF_MIN_S, LAUNCH_RDZV_CONF_MAX_S);
        *secs[i].dst = d;
        return 0;
    }
    if (strcmp(key, "keep_alive_max_attempt") == 0) {
        int64_t v;
        if (ddp_parse_i64(val, 1, 1000000, &v) < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is not a positive number", flag, key,
                               VQ, val);
        c->keep_alive_max_attempt = (int)v;
        return 0;
    }
    if (strcmp(key, "is_host") == 0) {
        int b = parse_bool(val);
        if (b < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: is_host='%.*s' is not true or false", flag, VQ,
                               val);
        c->is_host = b;
        return 0;
    }
    return ddp_err_set(err, DDP_EUSAGE, "%s: unknown key '%.32s' (known: %s)", flag, key,
                       conf_keys);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int launch_rdzv_conf_parse(const char *flag, const char *s, launch_rdzv_conf_t *c, ddp_err_t *err) {
    conf_defaults(c);
    char *copy = strdup(s);
    if (copy == NULL)
        return -ENOMEM;
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: '%.*s' is not key=value", flag, VQ, trim(tok));
            break;
        }
        *eq = '\0';
        char *key = trim(tok), *val = trim(eq + 1);
        if ((rc = conf_set(c, flag, key, val, err)) < 0)
            break;
    }
    free(copy);
    return rc;
}

/* *dst = a copy of val, or NULL (the default) when val is empty. Returns 0 or -ENOMEM. */
static int str_set_or_unset(char **dst, const char *val) {
    if (*val != '\0')
        return launch__str_set(dst, val);
    free(*dst);
    *dst = NULL;
    return 0;
}

static int apply_rdzv_conf(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    int rc = launch_rdzv_conf_parse(flag, val, &spec->rdzv_opts, err);
    if (rc < 0)
        return rc;
    return str_set_or_unset(&spec->rdzv_conf, val);
}

static int apply_max_restarts(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    return get_int(flag, val, 0, INT32_MAX, &spec->max_restarts, err);
}

static int apply_monitor(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return get_seconds(flag, val, &spec->monitor_interval, err);
}

static int apply_start_method(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    if (strcmp(val, "spawn") != 0 && strcmp(val, "fork") != 0 && strcmp(val, "forkserver") != 0)
        return usage(err, flag, val, "is not spawn, fork or forkserver");
    return launch__str_set(&spec->start_method, val);
}

static int apply_role(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return nonempty_str(&spec->role, flag, val, err);
}

/* A log directory must be a writable directory, or creatable under the nearest existing parent. */
static int check_log_dir(const char *flag, const char *val, ddp_err_t *err) {
    struct stat st;
    if (stat(val, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return usage(err, flag, val, "is not a directory");
        if (access(val, W_OK | X_OK) != 0)
            return usage(err, flag, val, "is not writable");
        return 0;
    }
    if (errno != ENOENT)
        return usage(err, flag, val, "cannot be used (not a directory on the way?)");
    char *p = strdup(val);
    if (p == NULL)
        return -ENOMEM;
    int rc = 0;
    for (;;) {
        char *slash = strrchr(p, '/');
        while (slash != NULL && slash > p && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        const char *parent;
        if (slash == NULL)
            parent = ".";
        else if (slash == p)
            parent = "/";
        else {
            *slash = '\0';
            parent = p;
        }
        if (stat(parent, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                rc = usage(err, flag, val, "cannot be created (a parent is not a directory)");
            else if (access(parent, W_OK | X_OK) != 0)
                rc = usage(err, flag, val, "cannot be created (parent not writable)");
            break;
        }
        if (errno != ENOENT || parent != p) {
            rc = usage(err, flag, val, "cannot be created");
            break;
        }
    }
    free(p);
    return rc;
}

static int apply_log_dir(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    if (*val == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    int rc = check_log_dir(flag, val, err);
    return rc < 0 ? rc : launch__str_set(&spec->log_dir, val);
}

int launch_std_map_parse(const char *flag, const char *s, agent_std_map_t *m, ddp_err_t *err) {
    agent_std_map_t r = {0};
    int64_t v;
    if (strchr(s, ':') == NULL) {
        if (ddp_parse_i64(s, 0, 3, &v) < 0)
            return usage(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
        r.dflt = (int)v;
        *m = r;
        return 0;
    }
    /* Ranks missing from a map get 0 (torchrun's Std.NONE). */
    const char *p = s;
    for (;;) {
        char buf[32];
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n >= sizeof buf)
            return usage(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
        memcpy(buf, p, n);
        buf[n] = '\0';
        char *colon = strchr(buf, ':');
        int64_t rank;
        if (colon == NULL)
            return usage(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
        *colon = '\0';
        if (ddp_parse_i64(buf, 0, INT32_MAX, &rank) < 0 || ddp_parse_i64(colon + 1, 0, 3, &v) < 0)
            return usage(err, flag, s, "is not a map like 0:1,1:2 (local_rank:0-3)");
        for (int i = 0; i < r.n; i++)
            if (r.rank[i] == rank)
                return ddp_err_set(err, DDP_EUSAGE, "%s: local rank %lld given twice", flag,
                                   (long long)rank);
        if (r.n == AGENT_MAX_STD_OVERRIDES)
            return ddp_err_set(err, DDP_EUSAGE, "%s: more than %d local ranks", flag,
                               AGENT_MAX_STD_OVERRIDES);
        r.rank[r.n] = (int)rank;
        r.mask[r.n] = (int)v;
        r.n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *m = r;
    return 0;
}

static int apply_redirects(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch_std_map_parse(flag, val, &spec->redirects, err);
}

static int apply_tee(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch_std_map_parse(flag, val, &spec->tee, err);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int apply_ranks_filter(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    free(spec->local_ranks_filter);
    spec->local_ranks_filter = NULL;
    spec->n_local_ranks_filter = 0;
    if (*val == '\0')
        return 0;
    size_t n = 1;
    for (const char *p = val; *p; p++)
        n += *p == ',';
    int *v = calloc(n, sizeof *v);
    char *copy = strdup(val);
    int rc = 0, k = 0;
    if (v == NULL || copy == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int64_t r;
        if (ddp_parse_i64(trim(tok), 0, INT32_MAX, &r) < 0) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: '%.*s' is not a local rank (list like 0,2)",
                             flag, VQ, tok);
            goto out;
        }
        v[k++] = (int)r;
    }
    if (k == 0) {
        rc = usage(err, flag, val, "is not a list of local ranks like 0,2");
        goto out;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_int);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    spec->local_ranks_filter = v;
    spec->n_local_ranks_filter = u;
    v = NULL;
out:
    free(v);
    free(copy);
    return rc;
}

static int apply_master_addr(launch_spec_t *spec, const char *flag, const char *val,
                             ddp_err_t *err) {
    return nonempty_str(&spec->master_addr, flag, val, err);
}

static int apply_master_port(launch_spec_t *spec, const char *flag, const char *val,
                             ddp_err_t *err) {
    return get_int(flag, val, 1, 65535, &spec->master_port, err);
}

static int apply_local_addr(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return nonempty_str(&spec->local_addr, flag, val, err);
}

static int apply_signals(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    char *copy = strdup(val);
    if (copy == NULL)
        return -ENOMEM;
    int sigs[AGENT_MAX_SIGNALS], n = 0, rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        int s = ddp_signal_parse(tok);
        if (s == 0 || s > SIGRTMAX) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: '%.*s' is not a signal", flag, VQ, tok);
            break;
        }
        if (s == SIGKILL || s == SIGSTOP) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: %s cannot be handled", flag,
                             ddp_signal_name(s));
            break;
        }
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= sigs[i] == s;
        if (dup)
            continue;
        if (n == AGENT_MAX_SIGNALS) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: more than %d signals", flag, AGENT_MAX_SIGNALS);
            break;
        }
        sigs[n++] = s;
    }
    free(copy);
    if (rc < 0)
        return rc;
    if (n == 0)
        return usage(err, flag, val, "names no signal");
    memcpy(spec->signals, sigs, sizeof sigs[0] * (size_t)n);
    spec->n_signals = n;
    return 0;
}

static int apply_shutdown(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return get_seconds(flag, val, &spec->shutdown_timeout, err);
}

/* torchrun loads the torchrun.logs_specs entry point of that name; the only one torch itself
 * registers is "default" (DefaultLogsSpecs, which ddprun implements). Others are Python plugins. */
static int apply_logs_specs(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    (void)spec;
    if (strcmp(val, "default") == 0)
        return 0;
    return usage(err, flag, val,
                 "is a Python log spec plugin, which ddprun cannot load (only 'default'; "
                 "use --log_dir)");
}

static int apply_prefix_template(launch_spec_t *spec, const char *flag, const char *val,
                                 ddp_err_t *err) {
    int rc = agent_prefix_check(flag, val, err);
    if (rc < 0)
        return rc;
    return str_set_or_unset(&spec->log_line_prefix_template, val); /* empty: the default */
}

/* torch.distributed.elastic.events knows two handlers; ddprun logs its events itself. */
static int apply_event_log_handler(launch_spec_t *spec, const char *flag, const char *val,
                                   ddp_err_t *err) {
    if (strcmp(val, "null") != 0 && strcmp(val, "console") != 0)
        return usage(err, flag, val, "is not an event log handler (null or console)");
    return launch__str_set(&spec->event_log_handler, val);
}

static void filters_free(char **v) {
    for (char **p = v; p != NULL && *p != NULL; p++)
        free(*p);
    free(v);
}

/* "a,b,,c" -> {"a", "b,c"} as torchrun's comma_separated_list (",," is a literal comma). Empty
 * items are dropped: an empty string would match every line. Returns 0, DDP_EUSAGE or -ENOMEM;
 * *out is NULL when nothing is left. */
static int filters_parse(const char *flag, const char *val, char ***out, ddp_err_t *err) {
    size_t len = strlen(val);
    char **v = calloc(LAUNCH_MAX_DUP_FILTERS + 1, sizeof *v);
    char *item = malloc(len + 1);
    int n = 0, rc = 0;
    if (v == NULL || item == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0, k = 0; i <= len; i++) {
        if (i < len && val[i] == ',' && val[i + 1] == ',') {
            item[k++] = ',';
            i++;
            continue;
        }
        if (i < len && val[i] != ',') {
            item[k++] = val[i];
            continue;
        }
        if (k == 0)
            continue;
        if (n == LAUNCH_MAX_DUP_FILTERS) {
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: more than %d filters", flag,
                             LAUNCH_MAX_DUP_FILTERS);
            goto out;
        }
        if ((v[n++] = strndup(item, k)) == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        k = 0;
    }
out:
    free(item);
    if (rc < 0 || n == 0) {
        filters_free(v);
        v = NULL;
    }
    if (rc == 0) {
        filters_free(*out);
        *out = v;
    }
    return rc;
}

static int apply_dup_stdout(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return filters_parse(flag, val, &spec->dup_stdout_filters, err);
}

static int apply_dup_stderr(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return filters_parse(flag, val, &spec->dup_stderr_filters, err);
}

/* Boolean flags: on the command line they take no value; PET_* gives 0/1 (or true/false). */
static int apply_bool(int *dst, const char *flag, const char *val, ddp_err_t *err) {
    if (val == NULL) {
        *dst = 1;
        return 0;
    }
    int b = parse_bool(val);
    if (b < 0)
        return usage(err, flag, val, "is not 0 or 1");
    *dst = b;
    return 0;
}

static int apply_standalone(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return apply_bool(&spec->standalone, flag, val, err);
}

static int apply_no_python(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return apply_bool(&spec->no_python, flag, val, err);
}

static int apply_module(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return apply_bool(&spec->module, flag, val, err);
}

/* torchrun 2.x flags ddprun does not implement: refused by name with what to do instead, rather
 * than as unknown flags, so that a torchrun command line that uses them says why it stops. */
static int apply_numa_binding(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    (void)spec;
    return usage(err, flag, val,
                 "is not supported by ddprun yet: drop it, or bind in the program (numactl)");
}

static int apply_print_completion(launch_spec_t *spec, const char *flag, const char *val,
                                  ddp_err_t *err) {
    (void)spec;
    return usage(err, flag, val, "is not supported by ddprun (ddprun --help lists the flags)");
}

static int apply_virtual_local_rank(launch_spec_t *spec, const char *flag, const char *val,
                                    ddp_err_t *err) {
    return apply_bool(&spec->virtual_local_rank, flag, val, err);
}

/* --run_path is a switch in torchrun. While parsing, spec->run_path is "" for "on"; it gets the
 * script's path once the program is known. */
static int apply_run_path(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    int on = 0, rc = apply_bool(&on, flag, val, err);
    if (rc < 0)
        return rc;
    free(spec->run_path);
    spec->run_path = NULL;
    return on ? launch__str_set(&spec->run_path, "") : 0;
}

static const opt_t opts[] = {
    {LAUNCH_OPT_NNODES, "nnodes", 0, 1, "PET_NNODES", apply_nnodes},
    {LAUNCH_OPT_NPROC_PER_NODE, "nproc-per-node", 0, 1, "PET_NPROC_PER_NODE", apply_nproc},
    {LAUNCH_OPT_NODE_RANK, "node-rank", 0, 1, "PET_NODE_RANK", apply_node_rank},
    {LAUNCH_OPT_RDZV_BACKEND, "rdzv-backend", 0, 1, "PET_RDZV_BACKEND", apply_rdzv_backend},
    {LAUNCH_OPT_RDZV_ENDPOINT, "rdzv-endpoint", 0, 1, "PET_RDZV_ENDPOINT", apply_rdzv_endpoint},
    {LAUNCH_OPT_RDZV_ID, "rdzv-id", 0, 1, "PET_RDZV_ID", apply_rdzv_id},
    {LAUNCH_OPT_RDZV_CONF, "rdzv-conf", 0, 1, "PET_RDZV_CONF", apply_rdzv_conf},
    {LAUNCH_OPT_STANDALONE, "standalone", 0, 0, "PET_STANDALONE", apply_standalone},
    {LAUNCH_OPT_MAX_RESTARTS, "max-restarts", 0, 1, "PET_MAX_RESTARTS", apply_max_restarts},
    {LAUNCH_OPT_MONITOR_INTERVAL, "monitor-interval", 0, 1, "PET_MONITOR_INTERVAL", apply_monitor},
    {LAUNCH_OPT_START_METHOD, "start-method", 0, 1, "PET_START_METHOD", apply_start_method},
    {LAUNCH_OPT_ROLE, "role", 0, 1, "PET_ROLE", apply_role},
    {LAUNCH_OPT_LOG_DIR, "log-dir", 0, 1, "PET_LOG_DIR", apply_log_dir},
    {LAUNCH_OPT_REDIRECTS, "redirects", 'r', 1, "PET_REDIRECTS", apply_redirects},
    {LAUNCH_OPT_TEE, "tee", 't', 1, "PET_TEE", apply_tee},
    {LAUNCH_OPT_LOCAL_RANKS_FILTER, "local-ranks-filter", 0, 1, "PET_LOCAL_RANKS_FILTER",
     apply_ranks_filter},
    {LAUNCH_OPT_MASTER_ADDR, "master-addr", 0, 1, "PET_MASTER_ADDR", apply_master_addr},
    {LAUNCH_OPT_MASTER_PORT, "master-port", 0, 1, "PET_MASTER_PORT", apply_master_port},
    {LAUNCH_OPT_LOCAL_ADDR, "local-addr", 0, 1, "PET_LOCAL_ADDR", apply_local_addr},
    {LAUNCH_OPT_NO_PYTHON, "no-python", 0, 0, "PET_NO_PYTHON", apply_no_python},
    {LAUNCH_OPT_MODULE, "module", 'm', 0, "PET_MODULE", apply_module},
    {LAUNCH_OPT_RUN_PATH, "run-path", 0, 0, "PET_RUN_PATH", apply_run_path},
    {LAUNCH_OPT_SIGNALS_TO_HANDLE, "signals-to-handle", 0, 1, "PET_SIGNALS_TO_HANDLE",
     apply_signals},
    {LAUNCH_OPT_SHUTDOWN_TIMEOUT, "shutdown-timeout", 0, 1, "PET_SHUTDOWN_TIMEOUT", apply_shutdown},
    {LAUNCH_OPT_LOGS_SPECS, "logs-specs", 0, 1, NULL, apply_logs_specs},
    {LAUNCH_OPT_LOG_LINE_PREFIX_TEMPLATE, "log-line-prefix-template", 0, 1,
     "PET_LOG_LINE_PREFIX_TEMPLATE", apply_prefix_template},
    {LAUNCH_OPT_EVENT_LOG_HANDLER, "event-log-handler", 0, 1, "PET_EVENT_LOG_HANDLER",
     apply_event_log_handler},
    {LAUNCH_OPT_DUPLICATE_STDOUT_FILTERS, "duplicate-stdout-filters", 0, 1,
     "PET_DUPLICATE_STDOUT_FILTERS", apply_dup_stdout},
    {LAUNCH_OPT_DUPLICATE_STDERR_FILTERS, "duplicate-stderr-filters", 0, 1,
     "PET_DUPLICATE_STDERR_FILTERS", apply_dup_stderr},
    {LAUNCH_OPT_VIRTUAL_LOCAL_RANK, "virtual-local-rank", 0, 0, "PET_VIRTUAL_LOCAL_RANK",
     apply_virtual_local_rank},
    {LAUNCH_OPT_NUMA_BINDING, "numa-binding", 0, 1, "PET_NUMA_BINDING", apply_numa_binding},
    {LAUNCH_OPT_PRINT_COMPLETION, "print-completion", 0, 1, NULL, apply_print_completion},
    {LAUNCH_OPT_VERBOSE, "verbose", 'v', 0, NULL, NULL},
    {LAUNCH_OPT_HELP, "help", 'h', 0, NULL, NULL},
    {LAUNCH_OPT_VERSION, "version", 0, 0, NULL, NULL},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

/* ---- the parser ---------------------------------------------------------------------------- */

static void spec_defaults(launch_spec_t *spec) {
    memset(spec, 0, sizeof *spec);
    spec->min_nodes = spec->max_nodes = 1;
    spec->nproc_kind = LAUNCH_NPROC_NUM;
    spec->nproc_per_node = 1;
    spec->max_restarts = 0;
    spec->monitor_interval = 0.1;
    spec->master_port = -1;
    spec->rdzv_port = -1;
    spec->signals[0] = SIGTERM;
    spec->signals[1] = SIGINT;
    spec->signals[2] = SIGHUP;
    spec->signals[3] = SIGQUIT;
    spec->n_signals = 4;
    spec->shutdown_timeout = 30;
    conf_defaults(&spec->rdzv_opts);
}

static int default_strings(launch_spec_t *spec) {
    if (spec->rdzv_backend == NULL && launch__str_set(&spec->rdzv_backend, "static") < 0)
        return -ENOMEM;
    if (spec->rdzv_id == NULL && launch__str_set(&spec->rdzv_id, "none") < 0)
        return -ENOMEM;
    if (spec->role == NULL && launch__str_set(&spec->role, "default") < 0)
        return -ENOMEM;
    if (spec->master_addr == NULL && launch__str_set(&spec->master_addr, "127.0.0.1") < 0)
        return -ENOMEM;
    if (spec->start_method == NULL && launch__str_set(&spec->start_method, "spawn") < 0)
        return -ENOMEM;
    if (spec->event_log_handler == NULL && launch__str_set(&spec->event_log_handler, "null") < 0)
        return -ENOMEM;
    return 0;
}

/* Canonical form of a long name for matching: '_' becomes '-'. */
static void canon(const char *s, size_t n, char *out, size_t cap) {
    size_t i;
    for (i = 0; i < n && i + 1 < cap; i++)
        out[i] = s[i] == '_' ? '-' : s[i];
    out[i] = '\0';
}

/* Finds the option for "--name" (n chars, no dashes): exact match first, then a unique prefix
 * (argparse's allow_abbrev). Returns NULL after setting err. */
static const opt_t *find_long(const char *arg, const char *name, size_t n, ddp_err_t *err) {
    char c[64];
    if (n == 0 || n >= sizeof c) {
        ddp_err_set(err, DDP_EUSAGE, "unknown flag '%.*s' (see ddprun --help)", VQ, arg);
        return NULL;
    }
    canon(name, n, c, sizeof c);
    const opt_t *hit = NULL;
    int nhit = 0;
    for (size_t i = 0; i < N_OPTS; i++) {
        if (strcmp(opts[i].name, c) == 0)
            return &opts[i];
        if (strncmp(opts[i].name, c, n) == 0) {
            hit = &opts[i];
            nhit++;
        }
    }
    if (nhit == 1)
        return hit;
    if (nhit > 1)
        ddp_err_set(err, DDP_EUSAGE, "ambiguous flag '--%.*s' (see ddprun --help)", (int)n, name);
    else
        ddp_err_set(err, DDP_EUSAGE, "unknown flag '--%.*s' (see ddprun --help)", (int)n, name);
    return NULL;
}

static const opt_t *find_short(char ch) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (opts[i].shortc == ch)
            return &opts[i];
    return NULL;
}

static void print_version(void) {
    printf("ddprun %s\n", DDPRUN_VERSION);
}

/* Applies one option occurrence. flag is the spelling shown in messages. */
static int apply(launch_spec_t *spec, const opt_t *o, const char *flag, const char *val,
                 ddp_err_t *err) {
    if (o->id == LAUNCH_OPT_VERBOSE) {
        spec->verbose++;
        return 0;
    }
    int rc = o->apply(spec, flag, val, err);
    if (rc < 0)
        return rc;
    spec->given |= 1ull << o->id;
    return 0;
}

/* Handles a flag that does its work at once (--help, --version): prints, and marks spec as
 * having nothing to run. Returns 1 when it did. */
static int immediate(launch_spec_t *spec, const opt_t *o) {
    if (o->id == LAUNCH_OPT_HELP)
        launch_usage();
    else if (o->id == LAUNCH_OPT_VERSION)
        print_version();
    else
        return 0;
    spec->info_printed = 1;
    return 1;
}

/* Parses "-r3", "-r 3", "-mv", "-vvv". *i is advanced past consumed arguments. */
static int parse_short(int argc, char *const *argv, int *i, launch_spec_t *spec, ddp_err_t *err) {
    const char *a = argv[*i];
    for (const char *p = a + 1; *p; p++) {
        const opt_t *o = find_short(*p);
        char flag[3] = {'-', *p, '\0'};
        if (o == NULL)
            return ddp_err_set(err, DDP_EUSAGE, "unknown flag '%s' (see ddprun --help)", flag);
        if (immediate(spec, o))
            return 0;
        if (!o->takes_value) {
            int rc = apply(spec, o, flag, NULL, err);
            if (rc < 0)
                return rc;
            continue;
        }
        const char *val = p + 1;
        if (*val == '=')
            val++;
        if (*val == '\0') {
            if (*i + 1 >= argc)
                return ddp_err_set(err, DDP_EUSAGE, "%s: missing value", flag);
            val = argv[++*i];
        }
        return apply(spec, o, flag, val, err);
    }
    return 0;
}

static int parse_long(int argc, char *const *argv, int *i, launch_spec_t *spec, ddp_err_t *err) {
    const char *a = argv[*i];
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const opt_t *o = find_long(a, name, n, err);
    if (o == NULL)
        return DDP_EUSAGE;
    char flag[64];
    snprintf(flag, sizeof flag, "--%.*s", (int)n, name);
    if (!o->takes_value) {
        if (eq != NULL)
            return ddp_err_set(err, DDP_EUSAGE, "%s takes no value", flag);
        if (immediate(spec, o))
            return 0;
        return apply(spec, o, flag, NULL, err);
    }
    const char *val = eq != NULL ? eq + 1 : NULL;
    if (val == NULL) {
        if (*i + 1 >= argc)
            return ddp_err_set(err, DDP_EUSAGE, "%s: missing value", flag);
        val = argv[++*i];
    }
    return apply(spec, o, flag, val, err);
}

/* Fills every option not given on the command line from its PET_* variable. */
static int apply_pet(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx, ddp_err_t *err) {
    for (size_t k = 0; k < N_OPTS; k++) {
        const opt_t *o = &opts[k];
        if (o->pet == NULL || LAUNCH_GIVEN(spec, o->id))
            continue;
        const char *v = getenv_fn(ctx, o->pet);
        if (v == NULL)
            continue;
        int rc = o->apply(spec, o->pet, v, err);
        if (rc < 0)
            return rc;
        spec->given |= 1ull << o->id;
    }
    return 0;
}

/* torchrun's own variables, read when neither the flag nor its PET_* variable set the value:
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (also when the flag gave ""), and
 * TORCH_ELASTIC_SHUTDOWN_TIMEOUT as the default of --shutdown_timeout. */
static int apply_torch_env(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                           ddp_err_t *err) {
    const char *v = getenv_fn(ctx, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
    int rc;
    if (spec->log_line_prefix_template == NULL && v != NULL &&
        (rc = apply_prefix_template(spec, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", v, err)) < 0)
        return rc;
    v = getenv_fn(ctx, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    if (!LAUNCH_GIVEN(spec, LAUNCH_OPT_SHUTDOWN_TIMEOUT) && v != NULL &&
        (rc = get_seconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", v, &spec->shutdown_timeout, err)) < 0)
        return rc;
    return 0;
}

/* A random rendezvous id like torchrun's uuid4 for --standalone. */
static void random_id(char out[37]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
        for (size_t i = 0; i < sizeof b; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[i] = (unsigned char)x;
        }
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* --standalone: one node hosting its own c10d store on a free local port (torchrun's rules). */
static int apply_standalone_rules(launch_spec_t *spec) {
    char id[37];
    random_id(id);
    if (launch__str_set(&spec->rdzv_backend, "c10d") < 0 ||
        launch__str_set(&spec->rdzv_host, "localhost") < 0 ||
        launch__str_set(&spec->rdzv_id, id) < 0)
        return -ENOMEM;
    spec->rdzv_port = 0;
    spec->min_nodes = spec->max_nodes = 1;
    spec->node_rank = 0;
    spec->given |= 1ull << LAUNCH_OPT_RDZV_BACKEND | 1ull << LAUNCH_OPT_RDZV_ENDPOINT |
                   1ull << LAUNCH_OPT_RDZV_ID | 1ull << LAUNCH_OPT_NNODES |
                   1ull << LAUNCH_OPT_NODE_RANK;
    return 0;
}

/* Checks that need several flags at once. */
static int check_combinations(launch_spec_t *spec, ddp_err_t *err) {
    if (spec->module && spec->no_python)
        return ddp_err_set(err, DDP_EUSAGE, "-m/--module and --no_python cannot be used together");
    if (spec->run_path != NULL && spec->no_python)
        return ddp_err_set(err, DDP_EUSAGE, "--run_path and --no_python cannot be used together");
    if (spec->run_path != NULL && spec->module)
        return ddp_err_set(err, DDP_EUSAGE, "--run_path and -m/--module cannot be used together");
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK) && LAUNCH_GIVEN(spec, LAUNCH_OPT_NNODES) &&
        spec->node_rank >= spec->max_nodes)
        return ddp_err_set(err, DDP_EUSAGE, "--node_rank: %d is not below the node count %d",
                           spec->node_rank, spec->max_nodes);
    return 0;
}

const char *launch_getenv_process(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

int launch_cli_parse_env(int argc, char *const *argv, launch_getenv_fn getenv_fn, void *ctx,
                         launch_spec_t *spec, ddp_err_t *err) {
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    spec_defaults(spec);
    int rc = 0, i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the program */
        rc = a[1] == '-' ? parse_long(argc, argv, &i, spec, err)
                         : parse_short(argc, argv, &i, spec, err);
        if (rc < 0 || spec->info_printed)
            goto out;
    }
    if ((rc = apply_pet(spec, getenv_fn, ctx, err)) < 0 ||
        (rc = apply_torch_env(spec, getenv_fn, ctx, err)) < 0)
        goto out;
    if (i >= argc) {
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "missing program to run (usage: ddprun [flags] program [args...])");
        goto out;
    }
    spec->prog_argv = argv + i;
    spec->prog_argc = argc - i;
    if (spec->run_path != NULL && (rc = launch__str_set(&spec->run_path, argv[i])) < 0)
        goto out;
    if (spec->standalone && (rc = apply_standalone_rules(spec)) < 0)
        goto out;
    if ((rc = check_combinations(spec, err)) < 0)
        goto out;
    rc = default_strings(spec);
out:
    if (rc < 0 && err != NULL && err->code == 0)
        ddp_err_set(err, rc, "unable to parse the command line: %s", ddp_strerror(rc));
    if (rc < 0)
        launch_spec_free(spec);
    return rc;
}

int launch_cli_parse(int argc, char *const *argv, launch_spec_t *spec, ddp_err_t *err) {
    return launch_cli_parse_env(argc, argv, NULL, NULL, spec, err);
}

void launch_spec_free(launch_spec_t *spec) {
    if (spec == NULL)
        return;
    free(spec->rdzv_backend);
    free(spec->rdzv_id);
    free(spec->rdzv_conf);
    free(spec->role);
    free(spec->log_dir);
    free(spec->local_ranks_filter);
    free(spec->master_addr);
    free(spec->local_addr);
    free(spec->run_path);
    free(spec->rdzv_host);
    free(spec->start_method);
    free(spec->log_line_prefix_template);
    free(spec->event_log_handler);
    filters_free(spec->dup_stdout_filters);
    filters_free(spec->dup_stderr_filters);
    memset(spec, 0, sizeof *spec);
}

void launch_usage(void) {
    fputs(
        "usage: ddprun [flags] program [args...]\n"
        "       ddprun [flags] -m module [args...]\n"
        "\n"
        "Starts nproc_per_node copies of program on this node, as torchrun does, and supervises\n"
        "them. A program ending in .py runs as `python3 -u program` ($PYTHON_EXEC when set);\n"
        "anything else is executed directly. Flags stop at the program or at `--`; the rest is\n"
        "the program's. Every flag has a dashed and an underscored spelling (--nproc-per-node,\n"
        "--nproc_per_node), takes `--flag=value` or `--flag value`, and can come from the\n"
        "environment as PET_<FLAG> (PET_NPROC_PER_NODE=4); the command line wins.\n"
        "\n"
        "Job shape:\n"
        "  --nnodes N|MIN:MAX          nodes in the job (default 1:1)\n"
        "  --nproc_per_node N|gpu|cpu|auto\n"
        "                              workers on this node (default 1); gpu = CUDA devices\n"
        "                              visible (CUDA_VISIBLE_DEVICES honoured), cpu = usable\n"
        "                              CPUs, auto = GPUs if any else CPUs\n"
        "  --node_rank N               this node's rank for the static backend (default 0)\n"
        "  --standalone                single node: c10d store hosted by ddprun on localhost:0,\n"
        "                              a random rdzv_id, nnodes 1:1\n"
        "\n"
        "Rendezvous:\n"
        "  --rdzv_backend static|c10d  (default static)\n"
        "  --rdzv_endpoint HOST[:PORT] (c10d port default 29400; [v6addr]:port for IPv6)\n"
        "  --rdzv_id ID                job id shared by all nodes (default none)\n"
        "  --rdzv_conf K=V,...         join_timeout=600 last_call_timeout=30 close_timeout=30\n"
        "                              timeout=600 heartbeat|keep_alive_interval=5\n"
        "                              keep_alive_max_attempt=3 read_timeout=60 is_host=auto\n"
        "  --master_addr ADDR          static backend master (default 127.0.0.1)\n"
        "  --master_port PORT          static backend port (default 29500 with several nodes; on "
        "one\n"
        "                              node a free port, so that jobs never race for 29500)\n"
        "  --local_addr ADDR           this node's address as the others see it (default: host)\n"
        "\n"
        "Supervision:\n"
        "  --max_restarts N            restarts of the worker group before failing (default 0)\n"
        "  --monitor_interval SECS     accepted for compatibility (default 0.1; ddprun reacts to\n"
        "                              worker exits at once)\n"
        "  --signals_to_handle LIST    signals forwarded to workers, names with or without SIG\n"
        "                              or numbers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)\n"
        "  --shutdown_timeout SECS     grace after SIGTERM before SIGKILL (default 30, or\n"
        "                              $TORCH_ELASTIC_SHUTDOWN_TIMEOUT when set)\n"
        "  --role NAME                 worker role (default default)\n"
        "  --start_method M            spawn|fork|forkserver, accepted and ignored (default "
        "spawn)\n"
        "  --event_log_handler NAME    null|console, accepted for compatibility (default null;\n"
        "                              ddprun logs its events to stderr either way)\n"
        "  --virtual_local_rank        every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES "
        "set\n"
        "                              to its own device (entry LOCAL_RANK of the visible list)\n"
        "\n"
        "Output:\n"
        "  --log_dir DIR               per-rank files under DIR/attempt_N/<local_rank>/\n"
        "  -r, --redirects 0-3|MAP     streams to files only: 0 none, 1 stdout, 2 stderr, 3 both;\n"
        "                              MAP like 0:1,1:2 per local rank (default 0)\n"
        "  -t, --tee 0-3|MAP           streams to files and the console, tagged (default 0)\n"
        "  --log_line_prefix_template T\n"
        "                              tag of tee'd console lines; macros ${role_name},\n"
        "                              ${local_rank}, ${rank}, ${hostname} (default\n"
        "                              '[${role_name}${local_rank}]:', as torchrun;\n"
        "                              $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE too)\n"
        "  --local_ranks_filter LIST   local ranks shown on the console, like 0,2 (default all)\n"
        "  --duplicate_stdout_filters LIST\n"
        "  --duplicate_stderr_filters LIST\n"
        "                              tee'd console lines containing any of the comma-separated\n"
        "                              strings (`,,` is a comma) are also written, tagged, to\n"
        "                              attempt_N/filtered_stdout.log / filtered_stderr.log\n"
        "  --logs_specs default        torchrun's log spec plugin name; only the built-in one\n"
        "\n"
        "Program:\n"
        "  --no_python                 execute the program directly, even a .py file\n"
        "  -m, --module                run program as a Python module: python3 -u -m program\n"
        "  --run_path                  run program under python3 -u whatever its name\n"
        "\n"
        "ddprun itself:\n"
        "  -v, --verbose               more log lines (repeat for more; DDPRUN_LOG_LEVEL too)\n"
        "  -h, --help                  this text\n"
        "  --version                   print the version\n"
        "\n"
        "Under Slurm (srun --ntasks-per-node=1 ddprun program) nnodes, node_rank, rdzv_id,\n"
        "rdzv_backend, rdzv_endpoint and nproc_per_node come from SLURM_* unless given; -v shows\n"
        "what was derived from which variable.\n"
        "\n"
        "Exit codes:\n"
        "  0        every worker succeeded\n"
        "  1        the job failed; the summary names the rank, host and exit code or signal\n"
        "  2        usage error: one line names the flag, value or path; nothing was started\n"
        "  126/127  the program is not executable / not found (when found out late)\n"
        "  128+N    ddprun was killed by signal N\n",
        stdout);
}
