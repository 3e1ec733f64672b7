/* SPDX-License-Identifier: Apache-2.0
 * rdzv_metrics: the store's Prometheus metrics (text exposition format 0.0.4) and the small HTTP
 * listener that serves them on the store's own loop (rdzv_server.h). The listener is bounded like
 * the store: a few connections, a request of at most 8 KiB, 5 s each; one request per connection,
 * answered and closed. When every slot is taken, a newcomer takes the slot of the oldest
 * connection still sending its request: clients that send half a request (or reconnect to do it
 * again) cannot keep a scraper out. */
#include "rdzv_server_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp_log.h"

#define METRICS_MAX_CONNS 16
#define METRICS_MAX_REQUEST 8192
#define METRICS_DEADLINE_MS 5000

/* ---- the text ---- */

typedef struct mtext {
    ddp_buf_t *out;
    int rc;
    const char *last_family; /* HELP/TYPE printed once per family */
} mtext_t;

static void emit(mtext_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(mtext_t *t, const char *fmt, ...) {
    if (t->rc != 0)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || ddp_buf_append(t->out, line, (size_t)n) < 0)
        t->rc = -ENOMEM;
}

static void family(mtext_t *t, const char *name, const char *type, const char *help) {
    if (t->last_family != NULL && strcmp(t->last_family, name) == 0)
        return;
    t->last_family = name;
    emit(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

const char *rdzv_metrics_label(const char *v, char *out, size_t cap) {
    size_t j = 0;
    if (cap == 0)
        return out;
    for (; *v; v++) {
        int esc = *v == '\\' || *v == '"' || *v == '\n';
        if (j + (esc ? 2 : 1) >= cap) /* what this byte takes, and the NUL */
            break;
        if (esc)
            out[j++] = '\\';
        out[j++] = *v == '\n' ? 'n' : *v;
    }
    out[j] = '\0';
    return out;
}

static void run_metrics(void *ctx, const rdzv_run_view_t *r) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX];
    rdzv_metrics_label(r->id, id, sizeof id);
    family(t, "ddprun_rendezvous_round", "gauge", "The run's current round.");
    emit(t, "ddprun_rendezvous_round{run=\"%s\",state=\"%s\"} %lld\n", id, r->state,
         (long long)r->round);
}

static void run_restarts(void *ctx, const rdzv_run_view_t *r) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX];
    family(t, "ddprun_rendezvous_restarts", "gauge", "Restarts the run has used.");
    emit(t, "ddprun_rendezvous_restarts{run=\"%s\"} %lld\n",
         rdzv_metrics_label(r->id, id, sizeof id), (long long)r->restarts_used);
}

static void run_members(void *ctx, const rdzv_run_view_t *r) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX];
    rdzv_metrics_label(r->id, id, sizeof id);
    family(t, "ddprun_rendezvous_members", "gauge",
           "Nodes of the run: held by the store, in the current round's group, and spares (waiting "
           "while the run is at max_nodes).");
    emit(t, "ddprun_rendezvous_members{run=\"%s\",set=\"all\"} %zu\n", id, r->members);
    emit(t, "ddprun_rendezvous_members{run=\"%s\",set=\"group\"} %zu\n", id, r->group);
    emit(t, "ddprun_rendezvous_members{run=\"%s\",set=\"spare\"} %zu\n", id, r->spares);
}

static void run_hosts(void *ctx, const rdzv_run_view_t *r) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX];
    rdzv_metrics_label(r->id, id, sizeof id);
    family(t, "ddprun_rendezvous_hosts", "gauge",
           "Hosts kept out of the run: excluded after max_node_failures root-cause failures, or "
           "reporting a failed health check.");
    emit(t, "ddprun_rendezvous_hosts{run=\"%s\",set=\"excluded\"} %zu\n", id, r->hosts_excluded);
    emit(t, "ddprun_rendezvous_hosts{run=\"%s\",set=\"unfit\"} %zu\n", id, r->hosts_unfit);
}

static void run_stragglers(void *ctx, const rdzv_run_view_t *r) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX];
    rdzv_metrics_label(r->id, id, sizeof id);
    family(t, "ddprun_rendezvous_stragglers", "gauge",
           "Ranks of the running round named stragglers now (TIMING reports).");
    emit(t, "ddprun_rendezvous_stragglers{run=\"%s\"} %zu\n", id, r->stragglers);
}

static void member_silence(void *ctx, const rdzv_member_view_t *m) {
    mtext_t *t = ctx;
    char id[RDZV_LABEL_MAX], host[RDZV_LABEL_MAX];
    family(t, "ddprun_rendezvous_member_silence_seconds", "gauge",
           "Time since each node's last keep-alive (or JOIN).");
    emit(t,
         "ddprun_rendezvous_member_silence_seconds{run=\"%s\",host=\"%s\",group_rank=\"%lld\","
         "state=\"%s\"} %.3f\n",
         rdzv_metrics_label(m->run_id, id, sizeof id),
         rdzv_metrics_label(m->host, host, sizeof host), (long long)m->group_rank, m->state,
         (double)m->silent_ms / 1000.0);
}

/* Over 60 lines: the families in the order a reader of the page expects them. */
int rdzv_server_metrics(const rdzv_server_t *s, ddp_buf_t *out) {
    mtext_t t = {out, 0, NULL};
    const rdzv_server_stats_t *st = &s->st;
    family(&t, "ddprun_store_connections", "gauge", "Open connections.");
    emit(&t, "ddprun_store_connections %llu\n", (unsigned long long)st->conns);
    family(&t, "ddprun_store_connections_limit", "gauge", "The connection limit (max_conns).");
    emit(&t, "ddprun_store_connections_limit %zu\n", s->max_conns);
    family(&t, "ddprun_store_connections_accepted_total", "counter", "Connections accepted.");
    emit(&t, "ddprun_store_connections_accepted_total %llu\n", (unsigned long long)st->conns_total);
    family(&t, "ddprun_store_connections_refused_total", "counter",
           "Connections refused at once: the connection limit was reached.");
    emit(&t, "ddprun_store_connections_refused_total %llu\n",
         (unsigned long long)st->conns_refused);
    family(&t, "ddprun_store_connections_closed_total", "counter",
           "Connections the store closed, by reason.");
    const struct {
        const char *reason;
        uint64_t n;
    } closed[] = {{"bad_frame", st->bad_frames},          {"auth_failed", st->auth_refused},
                  {"handshake_timeout", st->idle_closed}, {"slow_reader", st->slow_closed},
                  {"memory_limit", st->mem_refused},      {"evicted", st->hs_evicted},
                  {"peer_owner", st->owner_refused}};
    for (size_t i = 0; i < sizeof closed / sizeof closed[0]; i++)
        emit(&t, "ddprun_store_connections_closed_total{reason=\"%s\"} %llu\n", closed[i].reason,
             (unsigned long long)closed[i].n);
    family(&t, "ddprun_store_requests_total", "counter", "Requests served, by command.");
    for (int c = 0; c < 256; c++) {
        if (s->cmd_counts[c] == 0)
            continue;
        const char *name = rdzv_round_cmd_name(c);
        if (name == NULL)
            name = rdzv__cmd_name(c);
        emit(&t, "ddprun_store_requests_total{command=\"%s\"} %llu\n", name,
             (unsigned long long)s->cmd_counts[c]);
    }
    family(&t, "ddprun_store_waiting", "gauge", "Connections with a parked WAIT, GET or BARRIER.");
    emit(&t, "ddprun_store_waiting %llu\n", (unsigned long long)st->waiting);
    family(&t, "ddprun_store_keys", "gauge", "Keys with a value.");
    emit(&t, "ddprun_store_keys %llu\n", (unsigned long long)st->keys);
    family(&t, "ddprun_store_queued_items", "gauge", "Items in queues, not yet popped.");
    emit(&t, "ddprun_store_queued_items %llu\n", (unsigned long long)st->queued);
    family(&t, "ddprun_store_memory_bytes", "gauge",
           "Bytes on the store's memory account (keys, values, queues, buffers).");
    emit(&t, "ddprun_store_memory_bytes %llu\n", (unsigned long long)st->mem_used);
    family(&t, "ddprun_store_memory_limit_bytes", "gauge", "The memory limit (max_total_mem).");
    emit(&t, "ddprun_store_memory_limit_bytes %zu\n", s->max_total_mem);
    family(&t, "ddprun_rendezvous_runs", "gauge", "Rendezvous runs held.");
    emit(&t, "ddprun_rendezvous_runs %zu\n", s->runs != NULL ? rdzv_runs_count(s->runs) : 0);
    uint64_t now = uv_now(s->loop);
    rdzv_runs_visit(s->runs, now, run_metrics, NULL, &t);
    rdzv_runs_visit(s->runs, now, run_restarts, NULL, &t);
    rdzv_runs_visit(s->runs, now, run_members, NULL, &t);
    rdzv_runs_visit(s->runs, now, run_hosts, NULL, &t);
    rdzv_runs_visit(s->runs, now, run_stragglers, NULL, &t);
    rdzv_runs_visit(s->runs, now, NULL, member_silence, &t);
    return t.rc;
}

/* ---- the HTTP listener ---- */

typedef struct mconn mconn_t;

struct rdzv_metrics {
    uv_tcp_t listener;
    uv_timer_t timer;
    const rdzv_server_t *s;
    rdzv_metrics_extra_fn extra;
    void *extra_ctx;
    mconn_t *conns;
    int nconns, live_handles, closing;
    int listener_live, timer_live; /* initialized: closed by rdzv_metrics_close */
    char addr[80];                 /* the bound address, as rdzv_server_addr */
};

struct mconn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    rdzv_metrics_t *m;
    mconn_t *prev, *next;
    uint64_t accepted_ms;
    char in[METRICS_MAX_REQUEST];
    size_t inlen;
    ddp_buf_t out;
    int closing;
    int answering; /* the reply is being written: not to be evicted */
};

static void metrics_maybe_free(rdzv_metrics_t *m) {
    if (m->closing && m->live_handles == 0)
        free(m);
}

static void on_mconn_closed(uv_handle_t *h) {
    mconn_t *c = h->data;
    rdzv_metrics_t *m = c->m;
    ddp_buf_free(&c->out);
    free(c);
    m->live_handles--;
    metrics_maybe_free(m);
}

static void mconn_close(mconn_t *c) {
    if (c->closing)
        return;
    c->closing = 1;
    rdzv_metrics_t *m = c->m;
    if (c->prev)
        c->prev->next = c->next;
    else
        m->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    m->nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_mconn_closed);
}

static void on_written(uv_write_t *req, int status) {
    (void)status;
    mconn_close(req->data);
}

/* Answers the request in c->in (whole: its header block ended) and closes after the write.
 * malformed: a request no HTTP server takes (a NUL byte in its header), answered 400. */
static void answer(mconn_t *c, int malformed) {
    const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
    ddp_buf_t body = DDP_BUF_INIT;
    int get = strncmp(c->in, "GET ", 4) == 0;
    const char *path = get ? c->in + 4 : "";
    size_t plen = strcspn(path, " \r\n?");
    c->answering = 1;
    if (malformed) {
        status = "400 Bad Request";
        ddp_buf_printf(&body, "a NUL byte in the request\n");
    } else if (!get) {
        status = "405 Method Not Allowed";
        ddp_buf_printf(&body, "only GET /metrics\n");
    } else if (plen == 8 && strncmp(path, "/metrics", 8) == 0) {
        rdzv_metrics_t *m = c->m;
        if ((m->s != NULL && rdzv_server_metrics(m->s, &body) < 0) ||
            (m->extra != NULL && m->extra(m->extra_ctx, &body) < 0)) {
            status = "500 Internal Server Error";
            ddp_buf_reset(&body);
            ddp_buf_printf(&body, "out of memory\n");
        }
    } else {
        status = "404 Not Found";
        ddp_buf_printf(&body, "the metrics are at /metrics\n");
    }
    if (ddp_buf_printf(&c->out,
                       "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                       "Connection: close\r\n\r\n",
                       status, type, body.len) < 0 ||
        ddp_buf_append(&c->out, body.data, body.len) < 0) {
        ddp_buf_free(&body);
        mconn_close(c);
        return;
    }
    ddp_buf_free(&body);
    uv_buf_t b = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
    c->wreq.data = c;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
        mconn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    mconn_t *c = h->data;
    buf->base = c->in + c->inlen;
    buf->len = sizeof c->in - 1 - c->inlen;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    (void)buf;
    mconn_t *c = st->data;
    if (n < 0) {
        mconn_close(c);
        return;
    }
    c->inlen += (size_t)n;
    c->in[c->inlen] = '\0';
    /* Searched over the bytes read, not as a C string: a NUL must not hide the end of the
     * header block (the client would wait for an answer until the deadline). */
    if (memmem(c->in, c->inlen, "\r\n\r\n", 4) != NULL ||
        memmem(c->in, c->inlen, "\n\n", 2) != NULL)
        answer(c, memchr(c->in, '\0', c->inlen) != NULL);
    else if (c->inlen >= sizeof c->in - 1)
        mconn_close(c); /* a header block past 8 KiB: not a scraper */
}

static void on_connection(uv_stream_t *ls, int status) {
    rdzv_metrics_t *m = ls->data;
    if (status < 0)
        return;
    mconn_t *c = calloc(1, sizeof *c);
    if (c == NULL || uv_tcp_init(ls->loop, &c->tcp) < 0) {
        free(c);
        return;
    }
    c->tcp.data = c;
    c->m = m;
    m->live_handles++;
    if (m->nconns >= METRICS_MAX_CONNS) {
        /* Full: the oldest connection still sending its request gives way (the list is newest
         * first), so that a scraper gets through whatever slow clients hold. */
        mconn_t *oldest = NULL;
        for (mconn_t *o = m->conns; o != NULL; o = o->next)
            if (!o->answering)
                oldest = o;
        if (oldest != NULL)
            mconn_close(oldest);
    }
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0 || m->nconns >= METRICS_MAX_CONNS) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_mconn_closed);
        return;
    }
    c->accepted_ms = uv_now(ls->loop);
    c->next = m->conns;
    if (m->conns)
        m->conns->prev = c;
    m->conns = c;
    m->nconns++;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        mconn_close(c);
}

static void on_timer(uv_timer_t *t) {
    rdzv_metrics_t *m = t->data;
    uint64_t now = uv_now(t->loop);
    for (mconn_t *c = m->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (now - c->accepted_ms >= METRICS_DEADLINE_MS)
            mconn_close(c);
    }
}

static void on_handle_closed(uv_handle_t *h) {
    rdzv_metrics_t *m = h->data;
    m->live_handles--;
    metrics_maybe_free(m);
}

int rdzv_metrics_start(uv_loop_t *loop, const rdzv_server_t *s, rdzv_metrics_extra_fn extra,
                       void *extra_ctx, const char *host, uint16_t port, rdzv_metrics_t **out,
                       ddp_err_t *err) {
    *out = NULL;
    int fd = rdzv__listen_socket(host, port, err);
    if (fd < 0)
        return fd;
    rdzv_metrics_t *m = calloc(1, sizeof *m);
    if (m == NULL) {
        close(fd);
        return ddp_err_set(err, -ENOMEM, "out of memory for the metrics listener");
    }
    m->s = s;
    m->extra = extra;
    m->extra_ctx = extra_ctx;
    int rc = uv_tcp_init(loop, &m->listener);
    if (rc == 0) {
        m->listener.data = m;
        m->live_handles = m->listener_live = 1;
        rc = uv_tcp_open(&m->listener, fd);
    }
    if (rc < 0)
        close(fd); /* not adopted by the handle */
    else
        rc = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
    if (rc == 0 && (rc = uv_timer_init(loop, &m->timer)) == 0) {
        m->timer.data = m;
        m->live_handles++;
        m->timer_live = 1;
        rc = uv_timer_start(&m->timer, on_timer, 1000, 1000);
    }
    if (rc < 0) {
        ddp_err_set(err, rc, "unable to listen on %s:%u: %s", host, port, uv_strerror(rc));
        rdzv_metrics_close(m);
        return rc;
    }
    struct sockaddr_storage sa;
    int salen = sizeof sa;
    uint16_t bound;
    snprintf(m->addr, sizeof m->addr, "%s:%u", host, port);
    if (uv_tcp_getsockname(&m->listener, (struct sockaddr *)&sa, &salen) == 0)
        rdzv__addr_format(&sa, m->addr, sizeof m->addr, &bound);
    *out = m;
    return 0;
}

const char *rdzv_metrics_addr(const rdzv_metrics_t *m) {
    return m->addr;
}

void rdzv_metrics_close(rdzv_metrics_t *m) {
    if (m == NULL || m->closing)
        return;
    m->closing = 1;
    while (m->conns != NULL)
        mconn_close(m->conns);
    if (m->listener_live)
        uv_close((uv_handle_t *)&m->listener, on_handle_closed);
    if (m->timer_live)
        uv_close((uv_handle_t *)&m->timer, on_handle_closed);
    metrics_maybe_free(m);
}
