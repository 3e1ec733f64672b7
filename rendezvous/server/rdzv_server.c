/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server: the ddprun store on one libuv loop: options and limits (fitted to the open-file
 * limit), the listening socket, the handshake deadline, the rate-limited admission log, and
 * closing. Connections come in through rdzv_accept.c and go out through rdzv_conn.c, commands are
 * rdzv_cmds.c, the rendezvous glue rdzv_server_round.c, the key table rdzv_keys.c, the log lines
 * rdzv_server_log.c (rdzv_server_int.h).
 *
 * A connection that is not READY (VALIDATE, and authentication when the server has a token)
 * within auth_idle_ms is closed. Admission (rdzv_conn.c) evicts the oldest such connection
 * rather than refuse a newcomer, so idle sockets cannot lock token holders out. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "ddp_log.h"
#include "ddp_sockdiag.h"
#include "rdzv_auth_int.h"
#include "rdzv_layout.h"

/* ---- accept and the handshake deadline ---- */

static void on_connection(uv_stream_t *ls, int status) {
    rdzv_server_t *s = ls->data;
    if (status < 0) {
        /* Out of descriptors, typically: one line a second at most, not per connection. */
        rdzv__admit_log(s, "unable to accept a connection on %s: %s", s->addr, uv_strerror(status));
        return;
    }
    rdzv__conn_accept(s, ls);
}

/* Closes connections that have not finished their handshake in time (oldest first). */
static void on_timer(uv_timer_t *t) {
    rdzv_server_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    /* The workers' store keeps its never-used connections on the list for eviction only
     * (RDZV_WSTORE_UNUSED_EVICT_MS): they have no deadline. */
    while (!s->worker_store && s->hs_head != NULL &&
           now - s->hs_head->accepted_ms >= s->auth_idle_ms) {
        conn_t *c = s->hs_head;
        s->st.idle_closed++;
        rdzv__admit_log(s, "closing connection from %s: no %s within %llu ms", c->peer,
                        s->token_len > 0 ? "authentication" : "VALIDATE",
                        (unsigned long long)s->auth_idle_ms);
        rdzv__conn_close(c);
    }
    rdzv__admit_log_flush(s, now);
}

/* ---- lifecycle ---- */

/* Frees the server once it is closing and its last handle is closed (conn_ops.handle_closed). */
static void server_maybe_free(rdzv_server_t *s) {
    if (!s->closing || s->live_handles > 0)
        return;
    rdzv__keys_free(s);
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    OPENSSL_cleanse(s->token, sizeof s->token);
    free(s);
    if (cb != NULL)
        cb(arg);
}

/* A connection closed (conn_ops.conn_gone): its parked waits go, and the rendezvous hears that
 * its member left. */
static void conn_gone(conn_t *c) {
    rdzv__wait_clear(c);
    rdzv__round_leave(c);
}

static void on_server_handle_closed(uv_handle_t *h) {
    rdzv_server_t *s = h->data;
    s->live_handles--;
    server_maybe_free(s);
}

static size_t or_default(size_t v, size_t def) {
    return v ? v : def;
}

int rdzv__listen_socket(const char *host, uint16_t port, ddp_err_t *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return ddp_err_set(err, DDP_EUSAGE, "unable to resolve %s: %s", host, gai_strerror(rc));
    int fd = -1, last = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            last = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        /* Accepted sockets inherit TCP_NODELAY: no setsockopt per connection. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 65535) == 0)
            break;
        last = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ddp_err_set(err, last, "unable to listen on %s:%u: %s", host, port,
                           ddp_strerror(last));
    return fd;
}

/* Refuses options that cannot make a store. Returns 0 or DDP_EUSAGE (err filled). */
static int opts_check(const rdzv_server_opts_t *opts, ddp_err_t *err) {
    if (opts == NULL || opts->host == NULL || *opts->host == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "rdzv_server_start: a loop and a host are required");
    int has_token = opts->token != NULL && opts->token_len > 0;
    if (has_token == !!opts->no_auth)
        return ddp_err_set(err, DDP_EUSAGE,
                           has_token ? "store on %s: both a token and no_auth given"
                                     : "store on %s: no token (set no_auth to serve without one)",
                           opts->host);
    if (opts->worker_store && has_token)
        return ddp_err_set(err, DDP_EUSAGE,
                           "workers' store on %s: PyTorch's client cannot present a token",
                           opts->host);
    if (opts->token_len > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EUSAGE, "store token longer than %zu bytes",
                           RDZV_TOKEN_MAX_LEN);
    return 0;
}

size_t rdzv__nofile_plan(size_t max_conns, uint64_t soft, uint64_t hard, uint64_t *want_soft) {
    uint64_t need = (uint64_t)max_conns + RDZV_NOFILE_RESERVE;
    *want_soft = soft;
    if (soft >= need)
        return max_conns;
    if (hard == (uint64_t)RLIM_INFINITY || hard > need)
        hard = need;
    if (hard > soft)
        *want_soft = hard;
    if (*want_soft >= need)
        return max_conns;
    uint64_t reserve = *want_soft / 4 < RDZV_NOFILE_RESERVE ? *want_soft / 4 : RDZV_NOFILE_RESERVE;
    uint64_t fit = *want_soft - reserve;
    return fit < 1 ? 1 : (size_t)fit;
}

/* Fits s->max_conns to RLIMIT_NOFILE (rdzv__nofile_plan), raising the soft limit when that helps,
 * and leaves one line saying what it did in s->nofile_note. explicit_max: the caller chose
 * max_conns, so a clip is a warning. */
static void nofile_fit(rdzv_server_t *s, int explicit_max) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return; /* nothing known to fit against */
    uint64_t soft0 = rl.rlim_cur, soft = soft0, hard = rl.rlim_max, want;
    size_t fit = rdzv__nofile_plan(s->max_conns, soft, hard, &want);
    if (want > soft) {
        rl.rlim_cur = (rlim_t)want;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            soft = want;
        else /* the kernel's nr_open can be below the hard limit: keep the current soft one */
            fit = rdzv__nofile_plan(s->max_conns, soft, soft, &want);
    }
    /* The soft limit named below is finite (under max_conns plus the reserve); the hard one may
     * be unlimited. */
    char hs[24] = "unlimited";
    if (hard != (uint64_t)RLIM_INFINITY)
        snprintf(hs, sizeof hs, "%llu", (unsigned long long)hard);
    if (fit < s->max_conns) {
        s->nofile_level = explicit_max ? DDP_LOG_WARN : DDP_LOG_INFO;
        snprintf(s->nofile_note, sizeof s->nofile_note,
                 "connection limit %zu clipped to %zu: the open-file limit wins (RLIMIT_NOFILE "
                 "soft %llu, hard %s; %llu descriptors kept for the rest of the process)",
                 s->max_conns, fit, (unsigned long long)soft, hs, (unsigned long long)(soft - fit));
        s->max_conns = fit;
    } else if (soft > soft0) {
        s->nofile_level = DDP_LOG_INFO;
        snprintf(s->nofile_note, sizeof s->nofile_note,
                 "raised the open-file limit (RLIMIT_NOFILE) from %llu to %llu (hard %s) for "
                 "%zu connections",
                 (unsigned long long)soft0, (unsigned long long)soft, hs, s->max_conns);
    }
}

/* A workers' store's default limits fitted to workers processes (RDZV_WSTORE_* in rdzv_limits.h),
 * never above the shared store's defaults but for the connections of a job of more than 32,736
 * workers (RDZV_WSTORE_CONNS_PER_WORKER_MIN each); limits the caller chose stay. */
static void workers_fit(rdzv_server_t *s, size_t workers) {
    if (!s->worker_store || workers == 0)
        return;
    if (workers > (size_t)RDZV_ROUND_MAX_NODES * RDZV_ROUND_MAX_NPROC)
        workers = (size_t)RDZV_ROUND_MAX_NODES * RDZV_ROUND_MAX_NPROC; /* no product overflows */
    size_t conns = RDZV_WSTORE_CONNS_BASE + RDZV_WSTORE_CONNS_PER_WORKER * workers;
    size_t floor = RDZV_WSTORE_CONNS_BASE + RDZV_WSTORE_CONNS_PER_WORKER_MIN * workers;
    size_t mem = RDZV_WSTORE_MEM_BASE + RDZV_WSTORE_MEM_PER_WORKER * workers;
    if (conns > RDZV_MAX_CONNS)
        conns = floor > RDZV_MAX_CONNS ? floor : RDZV_MAX_CONNS;
    if (!s->conns_explicit)
        s->max_conns = conns;
    if (!s->mem_explicit)
        s->max_total_mem = mem < RDZV_MAX_TOTAL_MEM ? mem : RDZV_MAX_TOTAL_MEM;
}

/* Copies the limits (0 = the default of rdzv_limits.h) and the token into s. */
static void opts_apply(rdzv_server_t *s, const rdzv_server_opts_t *opts) {
    s->lim.max_key_len = or_default(opts->max_key_len, RDZV_MAX_KEY_LEN);
    s->lim.max_value_len = or_default(opts->max_value_len, RDZV_MAX_VALUE_LEN);
    s->lim.max_keys = or_default(opts->max_keys_per_req, RDZV_MAX_KEYS_PER_REQ);
    s->lim.max_frame = RDZV_MAX_FRAME_LEN;
    if (s->lim.max_frame < 2 * s->lim.max_value_len + s->lim.max_key_len + 64)
        s->lim.max_frame = 2 * s->lim.max_value_len + s->lim.max_key_len + 64;
    s->worker_store = opts->worker_store;
    s->conns_explicit = opts->max_conns != 0;
    s->mem_explicit = opts->max_total_mem != 0;
    s->max_conns = or_default(opts->max_conns, RDZV_MAX_CONNS);
    s->max_total_mem = or_default(opts->max_total_mem, RDZV_MAX_TOTAL_MEM);
    workers_fit(s, opts->workers);
    nofile_fit(s, opts->max_conns != 0);
    size_t unauth = s->max_conns / RDZV_UNAUTH_CONNS_DIV;
    if (unauth < RDZV_MIN_UNAUTH_CONNS)
        unauth = RDZV_MIN_UNAUTH_CONNS;
    s->max_unauth = or_default(opts->max_unauth_conns, unauth);
    if (s->max_unauth > s->max_conns)
        s->max_unauth = s->max_conns;
    s->max_out_buf = or_default(opts->max_out_buf, RDZV_MAX_OUT_BUF);
    s->auth_idle_ms = opts->auth_idle_ms > 0 ? (uint64_t)opts->auth_idle_ms : RDZV_AUTH_IDLE_MS;
    s->embedded = opts->embedded;
    s->owner_only = opts->owner_only;
    s->owner_uid = (uint32_t)geteuid();
    if (opts->token != NULL && opts->token_len > 0) {
        memcpy(s->token, opts->token, opts->token_len);
        s->token_len = opts->token_len;
    }
}

/* Serves on the bound socket fd: the listener handle adopts it, and the handshake-deadline timer
 * starts. Returns 0 or a libuv code; on error the handles opened so far stay for
 * rdzv_server_close (fd is closed when the listener did not adopt it). */
static int serve_fd(rdzv_server_t *s, int fd) {
    int rc = uv_tcp_init(s->loop, &s->listener);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    s->listener.data = s;
    s->live_handles = 1;
    if ((rc = uv_tcp_open(&s->listener, fd)) < 0) {
        close(fd); /* not adopted by the handle */
        return rc;
    }
    if ((rc = uv_listen((uv_stream_t *)&s->listener, 65535, on_connection)) < 0)
        return rc;
    if ((rc = uv_timer_init(s->loop, &s->timer)) < 0)
        return rc;
    s->timer.data = s;
    s->live_handles++;
    uint64_t tick = s->auth_idle_ms / 4;
    tick = tick < 20 ? 20 : tick > 1000 ? 1000 : tick;
    return uv_timer_start(&s->timer, on_timer, tick, tick);
}

/* Checks that the kernel can name the owner of a socket here (owner_only): it is asked for the
 * listening socket fd itself, which the same exact lookup finds (its remote end is the wildcard
 * address, port 0). Without it every loopback peer would be refused, one by one, as unknown:
 * the start fails instead, saying why. Returns 0 or a negative code described in err. */
static int owner_probe(int fd, const char *addr, ddp_err_t *err) {
    struct sockaddr_storage self, none;
    socklen_t len = sizeof self;
    if (getsockname(fd, (struct sockaddr *)&self, &len) < 0)
        return ddp_err_set(err, -errno, "unable to read the address of %s: %s", addr,
                           strerror(errno));
    memset(&none, 0, sizeof none);
    none.ss_family = self.ss_family;
    ddp_sock_owner_t o;
    int rc = ddp_tcp_peer_owner((struct sockaddr *)&self, (struct sockaddr *)&none,
                                RDZV_OWNER_LOOKUP_MS, &o);
    if (rc == 0 && o.uid != (uint32_t)geteuid())
        rc = -EPROTO; /* a lookup that names someone else for our own socket cannot be trusted */
    if (rc < 0)
        return ddp_err_set(err, rc,
                           "unable to check who owns the peers of %s (sock_diag: %s); load the "
                           "tcp_diag module",
                           addr, ddp_strerror(rc));
    return 0;
}

int rdzv_server_start(uv_loop_t *loop, const rdzv_server_opts_t *opts, rdzv_server_t **out,
                      ddp_err_t *err) {
    *out = NULL;
    int rc = loop == NULL ? ddp_err_set(err, DDP_EUSAGE, "rdzv_server_start: a loop is required")
                          : opts_check(opts, err);
    if (rc < 0)
        return rc;
    rdzv_server_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for the store");
    s->loop = loop;
    s->conn_ops = (conn_ops_t){.conn_gone = conn_gone, .handle_closed = server_maybe_free};
    opts_apply(s, opts);
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (s->buckets == NULL || rdzv__random(&s->seed, sizeof s->seed) < 0) {
        free(s->buckets);
        free(s);
        return ddp_err_set(err, -ENOMEM, "out of memory for the store");
    }
    s->st.mem_used = sizeof *s + s->nbuckets * sizeof *s->buckets;
    int fd = rdzv__listen_socket(opts->host, opts->port, err);
    if (fd < 0) {
        free(s->buckets);
        free(s);
        return fd;
    }
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    snprintf(s->addr, sizeof s->addr, "%s", opts->host);
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0)
        rdzv__addr_format(&sa, s->addr, sizeof s->addr, &s->port);
    if (s->owner_only && (rc = owner_probe(fd, s->addr, err)) < 0) {
        close(fd);
        free(s->buckets);
        free(s);
        return rc;
    }
    rc = serve_fd(s, fd);
    if (rc < 0) {
        /* The handles go through uv_close; the memory is freed once the loop runs. */
        ddp_err_set(err, rc, "unable to listen on %s: %s", s->addr, uv_strerror(rc));
        rdzv_server_close(s, NULL, NULL);
        return rc;
    }
    *out = s;
    return 0;
}

const char *rdzv_server_nofile_note(const rdzv_server_t *s, int *level) {
    if (level != NULL)
        *level = s->nofile_level;
    return s->nofile_note[0] != '\0' ? s->nofile_note : NULL;
}

uint16_t rdzv_server_port(const rdzv_server_t *s) {
    return s->port;
}

const char *rdzv_server_addr(const rdzv_server_t *s) {
    return s->addr;
}

void rdzv_server_close(rdzv_server_t *s, void (*close_cb)(void *arg), void *arg) {
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    s->close_cb = close_cb;
    s->close_arg = arg;
    while (s->conns != NULL)
        rdzv__conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    if (s->live_handles > 1)
        uv_close((uv_handle_t *)&s->timer, on_server_handle_closed);
    if (s->rtimer_live) {
        s->rtimer_live = 0;
        uv_close((uv_handle_t *)&s->rtimer, on_server_handle_closed);
    }
    rdzv_runs_free(s->runs);
    s->runs = NULL;
    rdzv_actions_close(&s->acts);
}

void rdzv_server_set_may_serve(rdzv_server_t *s, rdzv_server_may_serve_fn fn, void *arg) {
    if (s == NULL)
        return;
    s->may_serve = fn;
    s->may_serve_arg = arg;
}

void rdzv_server_set_redirect(rdzv_server_t *s, rdzv_server_redirect_fn fn, void *arg) {
    if (s == NULL)
        return;
    s->redirect = fn;
    s->redirect_arg = arg;
}

void rdzv_server_set_durable(rdzv_server_t *s, const rdzv_server_durable_t *d, void *arg) {
    if (s == NULL)
        return;
    s->durable = d;
    s->durable_arg = arg;
}

void rdzv_server_set_workers(rdzv_server_t *s, size_t workers) {
    if (s == NULL || s->closing || !s->worker_store || workers == 0)
        return;
    workers_fit(s, workers);
    if (!s->conns_explicit)
        nofile_fit(s, 0);
}

void rdzv_server_reset(rdzv_server_t *s) {
    if (s == NULL || s->closing)
        return;
    while (s->conns != NULL)
        rdzv__conn_close(s->conns);
    rdzv__keys_clear(s);
}

void rdzv_server_stats(const rdzv_server_t *s, rdzv_server_stats_t *out) {
    *out = s->st;
}

void rdzv_server_set_log(rdzv_server_t *s, int max_level, rdzv_log_fn fn, void *arg) {
    if (s == NULL)
        return;
    s->log_level = max_level;
    s->log_fn = fn;
    s->log_arg = arg;
}

void rdzv_server_log_to_ddp(void *arg, int level, const char *msg) {
    (void)arg;
    ddp_log(level, "%s", msg);
}
