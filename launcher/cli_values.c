/* SPDX-License-Identifier: Apache-2.0
 * The value parsers behind the command line (launcher/cli.c's option table): numbers, seconds,
 * booleans, endpoints, --rdzv_conf, log directories, per-rank stream maps, rank and signal lists,
 * duplicate filters. Each names the flag (or PET_* variable) in its one-line error. */
#include "launch_spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_escape.h"
#include "ddp_parse.h"
#include "ddp_signal.h"
#include "launch_int.h"
#include "rdzv_etcd_store.h"
#include "rdzv_proto.h"

/* Values are quoted in messages up to this many characters, so a message fits DDP_ERR_TEXT_LEN. */
#define VQ 48

int launch__bad_value(ddp_err_t *err, const char *flag, const char *val, const char *what) {
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

int launch__str_set_nonempty(char **dst, const char *flag, const char *val, ddp_err_t *err) {
    if (*val == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    return launch__str_set(dst, val);
}

int launch__int_get(const char *flag, const char *val, int64_t min, int64_t max, int *out,
                    ddp_err_t *err) {
    int64_t v;
    int rc = ddp_parse_i64(val, min, max, &v);
    if (rc == -ERANGE) {
        char what[64];
        snprintf(what, sizeof what, "is out of range (%lld..%lld)", (long long)min, (long long)max);
        return launch__bad_value(err, flag, val, what);
    }
    if (rc < 0)
        return launch__bad_value(err, flag, val, "is not a number");
    *out = (int)v;
    return 0;
}

int launch__seconds_parse(const char *val, double min, double max, double *out) {
    /* Python's float() of torchrun reads no hex ("0x10"), which strtod would. */
    if (*val == '\0' || val[strspn(val, "0123456789.eE+-")] != '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    double d = strtod(val, &end);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || d < min || d > max)
        return -ERANGE;
    *out = d;
    return 0;
}

int launch__seconds_get(const char *flag, const char *val, double *out, ddp_err_t *err) {
    int rc = launch__seconds_parse(val, LAUNCH_DURATION_MIN_S, LAUNCH_DURATION_MAX_S, out);
    if (rc == -ERANGE)
        return ddp_err_set(err, DDP_EUSAGE, "%s: '%.*s%s' is outside %g..%.0f seconds", flag, VQ,
                           val, strlen(val) > VQ ? "..." : "", LAUNCH_DURATION_MIN_S,
                           LAUNCH_DURATION_MAX_S);
    if (rc < 0)
        return launch__bad_value(err, flag, val, "is not a number of seconds");
    return 0;
}

/* A host as a flag gives it: a name (letters, digits, '-', '.', '_'), an IPv4 address, or an IPv6
 * address (hex digits, ':', '.', and a '%' zone) when v6 is set. Returns 0, or DDP_EUSAGE naming
 * flag, the whole value val and the first character a host cannot have. */
int launch__host_check(const char *flag, const char *val, const char *host, size_t n, int v6,
                       ddp_err_t *err) {
    if (n > LAUNCH_HOST_MAX) {
        char what[64];
        snprintf(what, sizeof what, "has a host longer than %d characters", LAUNCH_HOST_MAX);
        return launch__bad_value(err, flag, val, what);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)host[i];
        if (isalnum(c) || c == '-' || c == '.' || c == '_' || (v6 && (c == ':' || c == '%')))
            continue;
        char what[96], shown[8];
        if (isgraph(c) || c == ' ')
            snprintf(shown, sizeof shown, "'%c'", c);
        else
            snprintf(shown, sizeof shown, "\\x%02x", c);
        snprintf(what, sizeof what, "has a character no host name has (%s)", shown);
        /* The value is quoted escaped: it may hold the very control byte refused. */
        char quoted[4 * VQ + 8];
        ddp_str_escape(quoted, sizeof quoted, val, strnlen(val, VQ));
        return ddp_err_set(err, DDP_EUSAGE, "%s: '%s%s' %s", flag, quoted,
                           strlen(val) > VQ ? "..." : "", what);
    }
    return 0;
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
            return launch__bad_value(err, flag, ep, "has '[' without ']'");
        if (hend[1] == ':')
            p = hend + 2;
        else if (hend[1] != '\0')
            return launch__bad_value(err, flag, ep, "is not host[:port]");
    } else {
        const char *c = strrchr(ep, ':');
        if (c != NULL && strchr(ep, ':') != c)
            return launch__bad_value(err, flag, ep, "has an IPv6 address without [brackets]");
        hend = c != NULL ? c : ep + strlen(ep);
        if (c != NULL)
            p = c + 1;
    }
    if (hend == h)
        return launch__bad_value(err, flag, ep, "has no host");
    int rc = launch__host_check(flag, ep, h, (size_t)(hend - h), *ep == '[', err);
    if (rc < 0)
        return rc;
    if (p != NULL) {
        int64_t v;
        if (ddp_parse_i64(p, 0, 65535, &v) < 0)
            return launch__bad_value(err, flag, ep, "has a port that is not 0..65535");
        *port = (int)v;
    }
    *host = strndup(h, (size_t)(hend - h));
    return *host == NULL ? -ENOMEM : 0;
}

static const char *const conf_keys = "join_timeout, last_call_timeout, close_timeout, timeout, "
                                     "heartbeat, keep_alive_interval, keep_alive_max_attempt, "
                                     "read_timeout, is_host, store_reconnect_timeout, "
                                     "max_node_failures, etcd_prefix, lease_ttl, etcd_cacert, "
                                     "etcd_cert, etcd_key, etcd_agents_campaign, "
                                     "etcd_candidates, etcd_stores";

/* torchrun's defaults, defined once by the rendezvous protocol (in milliseconds). */
void launch__rdzv_conf_defaults(launch_rdzv_conf_t *c) {
    c->join_timeout = RDZV_DEFAULT_JOIN_TIMEOUT_MS / 1000.0;
    c->last_call_timeout = RDZV_DEFAULT_LAST_CALL_TIMEOUT_MS / 1000.0;
    c->close_timeout = RDZV_DEFAULT_CLOSE_TIMEOUT_MS / 1000.0;
    c->timeout = RDZV_DEFAULT_TIMEOUT_MS / 1000.0;
    c->keep_alive_interval = RDZV_DEFAULT_KEEP_ALIVE_INTERVAL_MS / 1000.0;
    c->keep_alive_max_attempt = RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT;
    c->read_timeout = RDZV_DEFAULT_READ_TIMEOUT_MS / 1000.0;
    c->is_host = -1;
    c->store_reconnect_timeout = AGENT_DEFAULT_STORE_RECONNECT_TIMEOUT_MS / 1000.0;
    snprintf(c->etcd_prefix, sizeof c->etcd_prefix, "%s", AGENT_DEFAULT_ETCD_PREFIX);
    c->lease_ttl = AGENT_DEFAULT_ETCD_LEASE_TTL_S;
    c->etcd_agents_campaign = 1;
    c->etcd_candidates = 0;
    c->etcd_cacert[0] = c->etcd_cert[0] = c->etcd_key[0] = '\0';
    c->etcd_stores[0] = '\0';
}

/* etcd_stores: 1..AGENT_ETCD_STORES_MAX "HOST:PORT" joined by '+' (',' separates the keys), each
 * port 1..65535 given, an IPv6 address in brackets, no address twice. */
static int etcd_stores_set(launch_rdzv_conf_t *c, const char *flag, const char *val,
                           ddp_err_t *err) {
    size_t n = strlen(val);
    if (n == 0 || n >= sizeof c->etcd_stores)
        return ddp_err_set(err, DDP_EUSAGE,
                           "%s: etcd_stores='%.*s' is empty or longer than %zu bytes", flag, VQ,
                           val, sizeof c->etcd_stores - 1);
    struct {
        const char *at;
        size_t len;
    } seen[AGENT_ETCD_STORES_MAX];
    int count = 0, rc;
    const char *cur = val, *e;
    size_t len;
    char host[RDZV_ETCD_STORE_HOST_MAX + 1];
    int port;
    while ((rc = rdzv_etcd_store_list_next(&cur, &e, &len, host, sizeof host, &port)) != 0) {
        if (rc < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s: etcd_stores: '%.*s' is not HOST:PORT (port 1..65535, an IPv6 "
                               "address in brackets; '+' between stores)",
                               flag, (int)(len < VQ ? len : VQ), e);
        if (count == AGENT_ETCD_STORES_MAX)
            return ddp_err_set(err, DDP_EUSAGE, "%s: etcd_stores names more than %d stores", flag,
                               AGENT_ETCD_STORES_MAX);
        for (int i = 0; i < count; i++)
            if (seen[i].len == len && memcmp(seen[i].at, e, len) == 0)
                return ddp_err_set(err, DDP_EUSAGE, "%s: etcd_stores names '%.*s' twice", flag,
                                   (int)(len < VQ ? len : VQ), e);
        seen[count].at = e;
        seen[count++].len = len;
    }
    if (count == 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s: etcd_stores='%.*s' names no store", flag, VQ, val);
    memcpy(c->etcd_stores, val, n + 1);
    return 0;
}

/* How many stores a checked etcd_stores names. */
static int etcd_stores_count(const char *s) {
    int n = *s != '\0';
    for (; *s; s++)
        n += *s == '+';
    return n;
}

/* The etcd backend's text keys: a prefix ("/" then printable bytes, no space) or a file name. */
static int etcd_text_set(launch_rdzv_conf_t *c, const char *flag, const char *key, const char *val,
                         ddp_err_t *err) {
    struct {
        const char *key;
        char *dst;
    } texts[] = {
        {"etcd_prefix", c->etcd_prefix},
        {"etcd_cacert", c->etcd_cacert},
        {"etcd_cert", c->etcd_cert},
        {"etcd_key", c->etcd_key},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        if (strcmp(key, texts[i].key) != 0)
            continue;
        size_t n = strlen(val);
        if (n == 0 || n >= LAUNCH_ETCD_TEXT_MAX)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is empty or longer than %d bytes",
                               flag, key, VQ, val, LAUNCH_ETCD_TEXT_MAX - 1);
        for (size_t j = 0; j < n; j++)
            if (!isgraph((unsigned char)val[j]))
                return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' has a space or control byte",
                                   flag, key, VQ, val);
        if (i == 0 && (val[0] != '/' || val[n - 1] == '/'))
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s: etcd_prefix='%.*s' must start with '/' and not end with one",
                               flag, VQ, val);
        memcpy(texts[i].dst, val, n + 1);
        return 0;
    }
    return 1;
}

int launch__bool_parse(const char *v) {
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
        {"join_timeout", &c->join_timeout},
        {"last_call_timeout", &c->last_call_timeout},
        {"close_timeout", &c->close_timeout},
        {"timeout", &c->timeout},
        {"heartbeat", &c->keep_alive_interval},
        {"keep_alive_interval", &c->keep_alive_interval},
        {"read_timeout", &c->read_timeout},
        {"store_reconnect_timeout", &c->store_reconnect_timeout},
    };
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        if (strcmp(key, secs[i].key) != 0)
            continue;
        double d;
        /* Timeouts become int milliseconds in the agent and the server: keep them in range. */
        int rc = launch__seconds_parse(val, LAUNCH_RDZV_CONF_MIN_S, LAUNCH_RDZV_CONF_MAX_S, &d);
        if (rc == -EINVAL || (rc == -ERANGE && val[0] == '-'))
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is not a positive number of seconds",
                               flag, key, VQ, val);
        if (rc < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is outside %g..%.0f seconds", flag,
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
    if (strcmp(key, "max_node_failures") == 0) {
        int64_t v;
        if (ddp_parse_i64(val, 0, RDZV_ROUND_MAX_RESTARTS, &v) < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: %s='%.*s' is not a number 0..%d", flag, key,
                               VQ, val, RDZV_ROUND_MAX_RESTARTS);
        c->max_node_failures = (int)v;
        return 0;
    }
    if (strcmp(key, "lease_ttl") == 0) {
        int64_t v;
        if (ddp_parse_i64(val, AGENT_ETCD_LEASE_TTL_MIN_S, AGENT_ETCD_LEASE_TTL_MAX_S, &v) < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s: lease_ttl='%.*s' is not a number of seconds "
                               "%d..%d",
                               flag, VQ, val, AGENT_ETCD_LEASE_TTL_MIN_S,
                               AGENT_ETCD_LEASE_TTL_MAX_S);
        c->lease_ttl = (int)v;
        return 0;
    }
    if (strcmp(key, "etcd_candidates") == 0) {
        int64_t v;
        if (ddp_parse_i64(val, 0, AGENT_ETCD_CANDIDATES_MAX, &v) < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: etcd_candidates='%.*s' is not a number 0..%d",
                               flag, VQ, val, AGENT_ETCD_CANDIDATES_MAX);
        c->etcd_candidates = (int)v;
        return 0;
    }
    if (strcmp(key, "etcd_stores") == 0)
        return etcd_stores_set(c, flag, val, err);
    int rc = etcd_text_set(c, flag, key, val, err);
    if (rc <= 0)
        return rc;
    if (strcmp(key, "is_host") == 0) {
        int b = launch__bool_parse(val);
        if (b < 0)
            return ddp_err_set(err, DDP_EUSAGE, "%s: is_host='%.*s' is not true or false", flag, VQ,
                               val);
        c->is_host = b;
        return 0;
    }
    if (strcmp(key, "etcd_agents_campaign") == 0) {
        int b = launch__bool_parse(val);
        if (b < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s: etcd_agents_campaign='%.*s' is not true or false", flag, VQ,
                               val);
        c->etcd_agents_campaign = b;
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
    launch__rdzv_conf_defaults(c);
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
    /* The candidates of etcd_stores are the first node ranks: a different count of them is a
     * contradiction, not a choice. */
    if (rc == 0 && c->etcd_stores[0] && c->etcd_candidates > 0 &&
        c->etcd_candidates != etcd_stores_count(c->etcd_stores))
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "%s: etcd_candidates=%d but etcd_stores names %d stores (node ranks "
                         "below their number serve them; leave etcd_candidates out)",
                         flag, c->etcd_candidates, etcd_stores_count(c->etcd_stores));
    return rc;
}

/* *dst = a copy of val, or NULL (the default) when val is empty. Returns 0 or -ENOMEM. */
int launch__str_set_or_unset(char **dst, const char *val) {
    if (*val != '\0')
        return launch__str_set(dst, val);
    free(*dst);
    *dst = NULL;
    return 0;
}

/* A log directory that stat refused with errno e: said as errno says it (a search permission
 * missing on the way is not a file in the way). */
static int log_dir_refused(const char *flag, const char *val, int e, ddp_err_t *err) {
    char what[96];
    if (e == ENOTDIR)
        snprintf(what, sizeof what, "cannot be used: a component of the path is not a directory");
    else if (e == EACCES)
        snprintf(what, sizeof what,
                 "cannot be used: permission denied (a directory on the way "
                 "is not searchable)");
    else
        snprintf(what, sizeof what, "cannot be used: %s", strerror(e));
    return launch__bad_value(err, flag, val, what);
}

/* A log directory must be a writable directory, or creatable under the nearest existing parent. */
int launch__log_dir_check(const char *flag, const char *val, ddp_err_t *err) {
    struct stat st;
    if (stat(val, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return launch__bad_value(err, flag, val, "is not a directory");
        if (access(val, W_OK | X_OK) != 0)
            return launch__bad_value(err, flag, val, "is not writable");
        return 0;
    }
    if (errno != ENOENT)
        return log_dir_refused(flag, val, errno, err);
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
                rc = launch__bad_value(err, flag, val,
                                       "cannot be created (a parent is not a directory)");
            else if (access(parent, W_OK | X_OK) != 0)
                rc = launch__bad_value(err, flag, val, "cannot be created (parent not writable)");
            break;
        }
        if (errno != ENOENT || parent != p) {
            rc = errno != ENOENT ? log_dir_refused(flag, val, errno, err)
                                 : launch__bad_value(err, flag, val, "cannot be created");
            break;
        }
    }
    free(p);
    return rc;
}

int launch_std_map_parse(const char *flag, const char *s, agent_std_map_t *m, ddp_err_t *err) {
    agent_std_map_t r = {0};
    int64_t v;
    if (strchr(s, ':') == NULL) {
        if (ddp_parse_i64(s, 0, 3, &v) < 0)
            return launch__bad_value(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
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
            return launch__bad_value(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
        memcpy(buf, p, n);
        buf[n] = '\0';
        char *colon = strchr(buf, ':');
        int64_t rank;
        if (colon == NULL)
            return launch__bad_value(err, flag, s, "is not 0-3 or a map like 0:1,1:2");
        *colon = '\0';
        if (ddp_parse_i64(buf, 0, INT32_MAX, &rank) < 0 || ddp_parse_i64(colon + 1, 0, 3, &v) < 0)
            return launch__bad_value(err, flag, s, "is not a map like 0:1,1:2 (local_rank:0-3)");
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

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int launch__ranks_parse(const char *flag, const char *val, int **out, int *nout, ddp_err_t *err) {
    *out = NULL;
    *nout = 0;
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
        rc = launch__bad_value(err, flag, val, "is not a list of local ranks like 0,2");
        goto out;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_int);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    *out = v;
    *nout = u;
    v = NULL;
out:
    free(v);
    free(copy);
    return rc;
}

int launch__signals_parse(const char *flag, const char *val, int *out, int *nout, ddp_err_t *err) {
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
            rc = ddp_err_set(err, DDP_EUSAGE, "%s: %s cannot be handled", flag, ddp_signal_name(s));
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
        return launch__bad_value(err, flag, val, "names no signal");
    memcpy(out, sigs, sizeof sigs[0] * (size_t)n);
    *nout = n;
    return 0;
}

void launch__filters_free(char **v) {
    for (char **p = v; p != NULL && *p != NULL; p++)
        free(*p);
    free(v);
}

/* "a,b,,c" -> {"a", "b,c"} as torchrun's comma_separated_list (",," is a literal comma). Empty
 * items are dropped: an empty string would match every line. Returns 0, DDP_EUSAGE or -ENOMEM;
 * *out is NULL when nothing is left. */
int launch__filters_parse(const char *flag, const char *val, char ***out, ddp_err_t *err) {
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
        launch__filters_free(v);
        v = NULL;
    }
    if (rc == 0) {
        launch__filters_free(*out);
        *out = v;
    }
    return rc;
}
