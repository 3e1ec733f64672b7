/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd: the etcd v3 client on the caller's libuv loop. libcurl's multi interface does the
 * HTTP: curl says which sockets it waits on (on_socket: one uv_poll_t each) and when it wants a
 * timeout (on_curl_timer: one uv_timer_t); the loop tells curl what happened through
 * curl_multi_socket_action, after which finished transfers are read with curl_multi_info_read.
 *
 * A call's life: submitted (WAIT_AUTH while a token is being fetched, else ACTIVE: its easy
 * handle in the multi), then DONE: its status and decoded reply are kept and its callback runs
 * from the "defer" timer on the next loop turn. Deferring every completion means no callback
 * runs inside curl or inside an rdzv_etcd_* call, and a callback may close the client. A watch
 * is a call whose reply streams: each complete line of it is decoded and delivered after the
 * socket action that brought it, and its end is a completion like any other. */
#include "rdzv_etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_buf.h"
#include "rdzv_etcd_curl.h"
#include "rdzv_etcd_json.h"

#define ERRTEXT_LEN 640
#define URL_LEN 320
/* The shortest connect attempt per endpoint: a list of dead members still gets its turns. */
#define MIN_CONNECT_MS 100
/* grpc status codes etcd's gateway puts in its error replies. */
enum {
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_PERMISSION = 7,
    GRPC_UNAUTH = 16
};

typedef enum { WAIT_AUTH, ACTIVE, DONE } req_state_t;

typedef struct rdzv_etcd_watch req_t;
struct rdzv_etcd_watch {
    rdzv_etcd_t *c;
    req_t *prev, *next;
    rdzv__etcd_kind_t kind;
    req_state_t state;
    char *body;
    CURL *easy;
    struct curl_slist *headers;
    ddp_buf_t reply;
    int overflow;   /* the reply passed the limit (the write callback stopped it) */
    int has_data;   /* watch: bytes arrived since the last delivery */
    uint64_t start; /* uv_now at submission: the call's timeout runs from there */
    int ep, tries;  /* the endpoint of this try; endpoints tried */
    char url[URL_LEN];
    rdzv_etcd_cb cb; /* unary calls; NULL for the client's own AUTH */
    rdzv_etcd_watch_cb watch_cb;
    void *arg;
    int status;
    rdzv__etcd_reply_t decoded;
    char errtext[ERRTEXT_LEN];
};

typedef struct sock {
    uv_poll_t poll;
    curl_socket_t fd;
    rdzv_etcd_t *c;
    struct sock *prev, *next;
} sock_t;

struct rdzv_etcd {
    uv_loop_t *loop;
    const rdzv__etcd_curl_t *curl;
    CURLM *multi;
    uv_timer_t timer; /* curl's timeout */
    uv_timer_t defer; /* completions, on the next loop turn */
    int handles_open;
    req_t *reqs;
    sock_t *socks;
    char eps[RDZV_ETCD_MAX_ENDPOINTS][URL_LEN / 2];
    int n_eps, cur_ep;
    int timeout_ms;
    size_t reply_limit;
    char *user, *password, *ca_file, *cert_file, *key_file;
    char *token;
    int auth_inflight;
    int watch_data;
    int closing;
    void (*close_cb)(void *arg);
    void *close_arg;
};

static void after_action(rdzv_etcd_t *c);
static int start_transfer(req_t *r);

/* ---- completion ---- */

static void on_defer(uv_timer_t *t);

static void req_free(req_t *r) {
    rdzv_etcd_t *c = r->c;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    if (r->easy != NULL)
        c->curl->easy_cleanup(r->easy);
    c->curl->slist_free_all(r->headers);
    rdzv__etcd_reply_free(&r->decoded);
    ddp_buf_free(&r->reply);
    free(r->body);
    free(r);
}

/* Takes r's transfer out of the multi (not from inside a curl callback). */
static void req_detach(req_t *r) {
    if (r->easy == NULL)
        return;
    if (r->c->multi != NULL)
        r->c->curl->multi_remove_handle(r->c->multi, r->easy);
    r->c->curl->easy_cleanup(r->easy);
    r->easy = NULL;
    r->c->curl->slist_free_all(r->headers);
    r->headers = NULL;
}

/* Marks r DONE with status (0: r->decoded holds the result); its callback runs from on_defer. */
static void req_done(req_t *r, int status) {
    req_detach(r);
    r->state = DONE;
    r->status = status;
    if (!r->c->closing)
        uv_timer_start(&r->c->defer, on_defer, 0, 0);
}

static void req_fail(req_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail(req_t *r, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errtext, sizeof r->errtext, fmt, ap);
    va_end(ap);
    rdzv__etcd_reply_free(&r->decoded);
    req_done(r, status);
}

/* Runs r's callback once and frees it. */
static void req_finish(req_t *r) {
    int st = r->status;
    const char *why = st != 0 ? r->errtext : NULL;
    if (r->watch_cb != NULL)
        r->watch_cb(r->arg, st != 0 ? st : DDP_ECLOSED, NULL, st != 0 ? why : "stream ended");
    else if (r->cb != NULL)
        r->cb(r->arg, st, st == 0 ? &r->decoded.res : NULL, why);
    req_free(r);
}

static void on_defer(uv_timer_t *t) {
    rdzv_etcd_t *c = t->data;
    req_t *r = c->reqs;
    while (r != NULL && !c->closing) {
        req_t *next = r->next;
        if (r->state == DONE) {
            req_finish(r);
            /* A callback may have completed or submitted others: start again. */
            next = c->reqs;
        }
        r = next;
    }
}

/* ---- handles and close ---- */

static void finish_close(rdzv_etcd_t *c) {
    /* Cancelled calls complete in submission order, newest first in the list. */
    while (c->reqs != NULL) {
        req_t *last = c->reqs;
        while (last->next != NULL)
            last = last->next;
        req_finish(last);
    }
    if (c->close_cb != NULL)
        c->close_cb(c->close_arg);
    free(c->user);
    free(c->password);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->token);
    free(c);
}

static void on_handle_closed(uv_handle_t *h) {
    rdzv_etcd_t *c = h->data;
    if (h->type == UV_POLL)
        free(((sock_t *)((char *)h - offsetof(sock_t, poll))));
    if (--c->handles_open == 0)
        finish_close(c);
}

static void sock_close(rdzv_etcd_t *c, sock_t *s) {
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->socks = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    s->poll.data = c;
    uv_close((uv_handle_t *)&s->poll, on_handle_closed);
}

void rdzv_etcd_close(rdzv_etcd_t *c, void (*close_cb)(void *arg), void *arg) {
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    c->close_cb = close_cb;
    c->close_arg = arg;
    /* The polls stop before curl closes any socket, so that no poll outlives its fd. */
    while (c->socks != NULL)
        sock_close(c, c->socks);
    for (req_t *r = c->reqs; r != NULL; r = r->next) {
        if (r->state == DONE)
            continue;
        snprintf(r->errtext, sizeof r->errtext, "%s: canceled: the etcd client closed",
                 r->url[0] ? r->url : c->eps[c->cur_ep]);
        rdzv__etcd_reply_free(&r->decoded);
        req_done(r, DDP_ECANCELED);
    }
    c->curl->multi_cleanup(c->multi);
    c->multi = NULL;
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->defer, on_handle_closed);
}

/* ---- curl on the loop ---- */

static void on_poll(uv_poll_t *h, int status, int events) {
    sock_t *s = (sock_t *)((char *)h - offsetof(sock_t, poll));
    rdzv_etcd_t *c = s->c;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    c->curl->multi_socket_action(c->multi, s->fd, flags, &running);
    after_action(c);
}

static void on_timer(uv_timer_t *t) {
    rdzv_etcd_t *c = t->data;
    int running = 0;
    c->curl->multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    after_action(c);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    rdzv_etcd_t *c = userp;
    sock_t *s = socketp;
    if (c->closing)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            c->curl->multi_assign(c->multi, fd, NULL);
            sock_close(c, s);
        }
        return 0;
    }
    if (s == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL || uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
            free(s);
            return -1; /* curl fails the transfer */
        }
        s->fd = fd;
        s->c = c;
        s->next = c->socks;
        if (c->socks != NULL)
            c->socks->prev = s;
        c->socks = s;
        c->handles_open++;
        c->curl->multi_assign(c->multi, fd, s);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    return uv_poll_start(&s->poll, ev, on_poll) == 0 ? 0 : -1;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    rdzv_etcd_t *c = userp;
    if (c->closing)
        return 0;
    if (timeout_ms < 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, on_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    req_t *r = ud;
    size_t len = size * n;
    if (r->reply.len + len > r->c->reply_limit) {
        r->overflow = 1;
        return 0; /* curl stops the transfer with CURLE_WRITE_ERROR */
    }
    if (ddp_buf_append(&r->reply, p, len) != 0)
        return 0;
    if (r->kind == RDZV_ETCD_WATCH) {
        r->has_data = 1;
        r->c->watch_data = 1;
    }
    return len;
}

/* ---- transfers ---- */

static long elapsed_ms(const req_t *r) {
    return (long)(uv_now(r->c->loop) - r->start);
}

/* Sets r's easy handle up for endpoint r->ep and adds it to the multi. */
static int start_transfer(req_t *r) {
    rdzv_etcd_t *c = r->c;
    const rdzv__etcd_curl_t *cu = c->curl;
    long left = c->timeout_ms - elapsed_ms(r);
    if (left <= 0)
        return DDP_ETIMEOUT;
    snprintf(r->url, sizeof r->url, "%s%s", c->eps[r->ep], rdzv__etcd_path(r->kind));
    r->easy = cu->easy_init();
    if (r->easy == NULL)
        return -ENOMEM;
    struct curl_slist *h = cu->slist_append(NULL, "Content-Type: application/json");
    /* No "Expect: 100-continue" round trip before a large body. */
    h = h ? cu->slist_append(h, "Expect:") : NULL;
    if (h != NULL && c->token != NULL && r->kind != RDZV_ETCD_AUTH) {
        char auth[4200];
        snprintf(auth, sizeof auth, "Authorization: %s", c->token);
        h = cu->slist_append(h, auth);
    }
    if (h == NULL)
        return -ENOMEM;
    r->headers = h;
    CURL *e = r->easy;
    /* A connect gets its share of the time left, so that later endpoints get their turn. */
    long remaining_eps = c->n_eps - r->tries;
    long connect_ms = left / (remaining_eps > 0 ? remaining_eps : 1);
    if (connect_ms < MIN_CONNECT_MS)
        connect_ms = MIN_CONNECT_MS;
    cu->easy_setopt(e, CURLOPT_URL, r->url);
    cu->easy_setopt(e, CURLOPT_POST, 1L);
    cu->easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    cu->easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
    cu->easy_setopt(e, CURLOPT_HTTPHEADER, h);
    cu->easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    cu->easy_setopt(e, CURLOPT_WRITEDATA, r);
    cu->easy_setopt(e, CURLOPT_PRIVATE, r);
    cu->easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* etcd members are named by the caller: never through a proxy from the environment. */
    cu->easy_setopt(e, CURLOPT_PROXY, "");
    cu->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    if (r->kind == RDZV_ETCD_WATCH) {
        /* A watch lasts; TCP keepalive notices a member that vanished without a FIN. */
        cu->easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        cu->easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
        cu->easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
    } else {
        cu->easy_setopt(e, CURLOPT_TIMEOUT_MS, left);
    }
    if (c->ca_file != NULL)
        cu->easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    if (c->cert_file != NULL) {
        cu->easy_setopt(e, CURLOPT_SSLCERT, c->cert_file);
        cu->easy_setopt(e, CURLOPT_SSLKEY, c->key_file);
    }
    ddp_buf_reset(&r->reply);
    r->overflow = 0;
    if (cu->multi_add_handle(c->multi, e) != CURLM_OK)
        return -ENOMEM;
    r->state = ACTIVE;
    return 0;
}

/* A failure to reach the endpoint at all (refused, unresolved, the connect timed out: nothing
 * connected, nothing answered): the next endpoint may answer, and nothing was sent. */
static int is_connect_failure(const req_t *r, CURLcode rc, long http) {
    curl_off_t connected_us = 0;
    r->c->curl->easy_getinfo(r->easy, CURLINFO_CONNECT_TIME_T, &connected_us);
    if (http != 0 || connected_us != 0)
        return 0;
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_OPERATION_TIMEDOUT;
}

/* The code for a grpc status and etcd's message. etcd says that a call came without a token
 * (auth is on and no user was given) with InvalidArgument and this one message. */
static int grpc_status(int code, const char *msg) {
    switch (code) {
    case GRPC_INVALID_ARGUMENT:
        return strstr(msg, "user name is empty") != NULL ? DDP_EAUTH : DDP_EUSAGE;
    case GRPC_DEADLINE: return DDP_ETIMEOUT;
    case GRPC_NOT_FOUND: return DDP_ENOKEY;
    case GRPC_PERMISSION:
    case GRPC_UNAUTH: return DDP_EAUTH;
    default: return DDP_EPROTO;
    }
}

static void auth_done(rdzv_etcd_t *c, req_t *auth);

/* Delivers the complete lines a watch holds; ends it on an error or a cancel from etcd. */
static void watch_deliver(req_t *r) {
    while (r->state == ACTIVE && !r->c->closing) {
        uint8_t *nl = memchr(r->reply.data, '\n', r->reply.len);
        if (nl == NULL || r->reply.len == 0)
            return;
        size_t n = (size_t)(nl - r->reply.data);
        rdzv__etcd_reply_t m;
        char why[160];
        int st = n == 0 ? 1
                        : rdzv__etcd_decode(RDZV_ETCD_WATCH, (char *)r->reply.data, n, &m, why,
                                            sizeof why);
        ddp_buf_consume(&r->reply, n + 1);
        if (st == 1)
            continue; /* an empty line */
        if (st != 0) {
            req_fail(r, DDP_EPROTO, "%s: %s", r->url, why);
            return;
        }
        if (m.stream_err) {
            req_fail(r, grpc_status(m.grpc_code, why), "%s: %s", r->url, why);
        } else if (m.canceled) {
            req_fail(r, m.watch.compact_revision > 0 ? DDP_ENOKEY : DDP_ECLOSED,
                     "%s: etcd ended the watch (compacted at revision %" PRId64 ")", r->url,
                     m.watch.compact_revision);
        } else {
            r->watch_cb(r->arg, 0, &m.watch, NULL);
        }
        rdzv__etcd_reply_free(&m);
    }
}

static void watch_done(req_t *r, CURLcode rc, long http) {
    if (http == 200)
        watch_deliver(r);
    if (r->state != ACTIVE)
        return;
    char why[160];
    if (http != 200 && http != 0) {
        int code = rdzv__etcd_decode_error((char *)r->reply.data, r->reply.len, why, sizeof why);
        req_fail(r, grpc_status(code, why), "%s: HTTP %ld: %s", r->url, http, why);
    } else if (r->overflow)
        req_fail(r, DDP_ETOOBIG, "%s: a watch message passed %zu bytes", r->url, r->c->reply_limit);
    else if (rc != CURLE_OK)
        req_fail(r, DDP_ECLOSED, "%s: watch stream lost: %s", r->url,
                 r->c->curl->easy_strerror(rc));
    else
        req_fail(r, DDP_ECLOSED, "%s: the watch stream ended", r->url);
}

/* Decodes a unary call's reply (HTTP code http) into r and completes it. */
static void unary_done(req_t *r, long http) {
    rdzv_etcd_t *c = r->c;
    char why[160];
    if (http != 200) {
        int code = rdzv__etcd_decode_error((char *)r->reply.data, r->reply.len, why, sizeof why);
        int st = grpc_status(code, why);
        if (st == DDP_EAUTH) {
            free(c->token); /* expired or revoked: the next call authenticates again */
            c->token = NULL;
        }
        req_fail(r, st, "%s: HTTP %ld: %s", r->url, http, why);
        return;
    }
    if (rdzv__etcd_decode(r->kind, (char *)r->reply.data, r->reply.len, &r->decoded, why,
                          sizeof why) != 0) {
        req_fail(r, DDP_EPROTO, "%s: %s", r->url, why);
        return;
    }
    if (r->decoded.stream_err) {
        req_fail(r, grpc_status(r->decoded.grpc_code, why), "%s: %s", r->url, why);
        return;
    }
    if (r->kind == RDZV_ETCD_KEEPALIVE && r->decoded.res.lease_ttl <= 0) {
        req_fail(r, DDP_ENOKEY, "%s: lease %" PRId64 " expired or unknown", r->url,
                 r->decoded.res.lease_id);
        return;
    }
    req_done(r, 0);
}

/* Member ep took no call or never answered one (killed, hung, cut off from the others): a watch
 * on it would wait forever on a stream that says nothing, so each ends as lost, and its owner
 * watches again where the calls go now. */
static void abandon_watches(rdzv_etcd_t *c, int ep) {
    for (req_t *w = c->reqs; w != NULL; w = w->next)
        if (w->kind == RDZV_ETCD_WATCH && w->state == ACTIVE && w->ep == ep)
            req_fail(w, DDP_ECLOSED, "%s: watch stream lost: %s does not answer", w->url,
                     c->eps[ep]);
}

/* A transfer ended with rc: retry on the next endpoint, or complete r. */
static void transfer_done(req_t *r, CURLcode rc) {
    rdzv_etcd_t *c = r->c;
    long http = 0;
    c->curl->easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    int no_connect = is_connect_failure(r, rc, http);
    if (no_connect && r->kind != RDZV_ETCD_WATCH)
        abandon_watches(c, r->ep);
    if (no_connect && ++r->tries < c->n_eps) {
        req_detach(r);
        r->ep = (r->ep + 1) % c->n_eps;
        int st = start_transfer(r);
        if (st == 0)
            return;
        if (st == DDP_ETIMEOUT)
            req_fail(r, st, "%s: timed out after %d ms (%d endpoints tried)", r->url, c->timeout_ms,
                     r->tries);
        else
            req_fail(r, st, "%s: unable to start a request: %s", r->url, ddp_strerror(st));
    } else if (no_connect) {
        req_fail(r, rc == CURLE_OPERATION_TIMEDOUT ? DDP_ETIMEOUT : -ECONNREFUSED,
                 "%s: unable to connect (%d endpoint%s tried): %s", r->url, c->n_eps,
                 c->n_eps > 1 ? "s" : "", c->curl->easy_strerror(rc));
    } else {
        /* It connected: later calls start there, unless the transfer broke off (the member
         * killed or hung after the connect, a reused connection found dead, a watch stream
         * lost): then at the next member. */
        c->cur_ep = rc != CURLE_OK ? (r->ep + 1) % c->n_eps : r->ep;
        if (rc != CURLE_OK && http == 0 && r->kind != RDZV_ETCD_WATCH)
            abandon_watches(c, r->ep);
        if (r->kind == RDZV_ETCD_WATCH)
            watch_done(r, rc, http);
        else if (rc == CURLE_OK)
            unary_done(r, http);
        else if (r->overflow)
            req_fail(r, DDP_ETOOBIG, "%s: the reply passed %zu bytes", r->url, c->reply_limit);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
            req_fail(r, DDP_ETIMEOUT, "%s: timed out after %d ms", r->url, c->timeout_ms);
        else
            req_fail(r, -ECONNRESET, "%s: %s", r->url, c->curl->easy_strerror(rc));
    }
    if (r->kind == RDZV_ETCD_AUTH)
        auth_done(c, r);
}

static void after_action(rdzv_etcd_t *c) {
    if (c->closing)
        return;
    if (c->watch_data) {
        c->watch_data = 0;
        for (req_t *r = c->reqs; r != NULL && !c->closing; r = r->next) {
            if (r->kind == RDZV_ETCD_WATCH && r->has_data && r->state == ACTIVE) {
                r->has_data = 0;
                long http = 0;
                c->curl->easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
                if (http == 200)
                    watch_deliver(r);
            }
        }
    }
    CURLMsg *msg;
    int left;
    while (!c->closing && (msg = c->curl->multi_info_read(c->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURLcode rc = msg->data.result;
        req_t *r = NULL;
        c->curl->easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r != NULL && r->state == ACTIVE)
            transfer_done(r, rc);
    }
}

/* ---- authentication ---- */

/* The token came (or did not): start the calls that waited for it, or fail them alike. */
static void auth_done(rdzv_etcd_t *c, req_t *auth) {
    c->auth_inflight = 0;
    if (auth->status == 0) {
        free(c->token);
        c->token = auth->decoded.token;
        auth->decoded.token = NULL;
    }
    for (req_t *r = c->reqs; r != NULL; r = r->next) {
        if (r->state != WAIT_AUTH)
            continue;
        /* etcd refuses a wrong password as an invalid argument: it is a refusal all the same. */
        int refused = auth->status == DDP_EUSAGE ? DDP_EAUTH : auth->status;
        int st = auth->status != 0 ? refused : start_transfer(r);
        if (auth->status != 0)
            req_fail(r, st, "%s", auth->errtext);
        else if (st != 0)
            req_fail(r, st, "%s: unable to start a request: %s", r->url, ddp_strerror(st));
    }
}

/* ---- submission ---- */

static req_t *req_new(rdzv_etcd_t *c, rdzv__etcd_kind_t kind, char *body) {
    req_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->c = c;
    r->kind = kind;
    r->body = body;
    r->start = uv_now(c->loop);
    r->ep = c->cur_ep;
    r->next = c->reqs;
    if (c->reqs != NULL)
        c->reqs->prev = r;
    c->reqs = r;
    return r;
}

/* Starts r now, or after the token (fetching one when none is on its way). */
static int req_launch(req_t *r) {
    rdzv_etcd_t *c = r->c;
    if (c->user == NULL || c->token != NULL || r->kind == RDZV_ETCD_AUTH)
        return start_transfer(r);
    r->state = WAIT_AUTH;
    if (c->auth_inflight)
        return 0;
    char *body = NULL;
    int st = rdzv__etcd_enc_auth(c->user, c->password, &body);
    req_t *a = st == 0 ? req_new(c, RDZV_ETCD_AUTH, body) : NULL;
    if (a == NULL) {
        free(body);
        return st != 0 ? st : -ENOMEM;
    }
    st = start_transfer(a);
    if (st != 0) {
        req_free(a);
        return st;
    }
    c->auth_inflight = 1;
    return 0;
}

/* Submits a call whose body enc produced (st its status); on failure nothing stays behind. */
static int submit(rdzv_etcd_t *c, rdzv__etcd_kind_t kind, int st, char *body, rdzv_etcd_cb cb,
                  rdzv_etcd_watch_cb wcb, void *arg, req_t **out, ddp_err_t *err) {
    if (c->closing) {
        free(body);
        return ddp_err_set(err, DDP_ECANCELED, "etcd client is closing");
    }
    if (st != 0)
        return ddp_err_set(err, st, "unable to encode the %s request: %s", rdzv__etcd_path(kind),
                           ddp_strerror(st));
    if (strlen(body) > c->reply_limit) {
        free(body);
        return ddp_err_set(err, DDP_ETOOBIG, "the %s request passes %zu bytes",
                           rdzv__etcd_path(kind), c->reply_limit);
    }
    req_t *r = req_new(c, kind, body);
    if (r == NULL) {
        free(body);
        return ddp_err_set(err, -ENOMEM, "out of memory");
    }
    r->cb = cb;
    r->watch_cb = wcb;
    r->arg = arg;
    st = req_launch(r);
    if (st != 0) {
        req_free(r);
        return ddp_err_set(err, st, "unable to start the %s request to %s: %s",
                           rdzv__etcd_path(kind), c->eps[c->cur_ep], ddp_strerror(st));
    }
    if (out != NULL)
        *out = r;
    return 0;
}

int rdzv_etcd_get(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags, int64_t limit,
                  rdzv_etcd_cb cb, void *arg, ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_range(key, key_len, flags, limit, &body);
    return submit(c, RDZV_ETCD_RANGE, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_put(rdzv_etcd_t *c, const void *key, size_t key_len, const void *val, size_t val_len,
                  int64_t lease, rdzv_etcd_cb cb, void *arg, ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_put(key, key_len, val, val_len, lease, &body);
    return submit(c, RDZV_ETCD_PUT, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_delete(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags,
                     rdzv_etcd_cb cb, void *arg, ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_delete(key, key_len, flags, &body);
    return submit(c, RDZV_ETCD_DELETE, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_txn(rdzv_etcd_t *c, const rdzv_etcd_txn_t *txn, rdzv_etcd_cb cb, void *arg,
                  ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_txn(txn, &body);
    return submit(c, RDZV_ETCD_TXN, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_lease_grant(rdzv_etcd_t *c, int64_t ttl_s, rdzv_etcd_cb cb, void *arg,
                          ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_lease(RDZV_ETCD_GRANT, ttl_s, &body);
    return submit(c, RDZV_ETCD_GRANT, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_lease_keepalive(rdzv_etcd_t *c, int64_t id, rdzv_etcd_cb cb, void *arg,
                              ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_lease(RDZV_ETCD_KEEPALIVE, id, &body);
    return submit(c, RDZV_ETCD_KEEPALIVE, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_lease_revoke(rdzv_etcd_t *c, int64_t id, rdzv_etcd_cb cb, void *arg, ddp_err_t *err) {
    char *body = NULL;
    int st = rdzv__etcd_enc_lease(RDZV_ETCD_REVOKE, id, &body);
    return submit(c, RDZV_ETCD_REVOKE, st, body, cb, NULL, arg, NULL, err);
}

int rdzv_etcd_watch(rdzv_etcd_t *c, const void *key, size_t key_len, unsigned flags,
                    int64_t start_revision, rdzv_etcd_watch_cb cb, void *arg,
                    rdzv_etcd_watch_t **out, ddp_err_t *err) {
    char *body = NULL;
    if (cb == NULL)
        return ddp_err_set(err, -EINVAL, "a watch needs a callback");
    int st = rdzv__etcd_enc_watch(key, key_len, flags, start_revision, &body);
    return submit(c, RDZV_ETCD_WATCH, st, body, NULL, cb, arg, out, err);
}

void rdzv_etcd_watch_cancel(rdzv_etcd_watch_t *w) {
    if (w == NULL || w->state == DONE)
        return;
    req_fail(w, DDP_ECANCELED, "%s: watch canceled", w->url[0] ? w->url : "watch");
}

/* ---- the client ---- */

/* Parses "HOST:PORT[,...]" (each optionally with http:// or https://) into c->eps. */
static int parse_endpoints(rdzv_etcd_t *c, const char *list, ddp_err_t *err) {
    if (list == NULL || list[0] == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "etcd: no endpoint given");
    const char *p = list;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        const char *scheme = c->ca_file != NULL ? "https://" : "http://";
        const char *s = p;
        size_t len = n;
        if (len >= 7 && !strncmp(s, "http://", 7)) {
            scheme = "http://";
            s += 7, len -= 7;
        } else if (len >= 8 && !strncmp(s, "https://", 8)) {
            scheme = "https://";
            s += 8, len -= 8;
        }
        const char *colon = memrchr(s, ':', len);
        size_t digits = colon != NULL ? len - (size_t)(colon - s) - 1 : 0;
        long port = 0;
        for (size_t i = 0; colon != NULL && i < digits && i < 6; i++)
            port = colon[1 + i] >= '0' && colon[1 + i] <= '9' ? port * 10 + (colon[1 + i] - '0')
                                                              : 100000;
        int bad_host = colon == NULL || colon == s;
        for (const char *q = s; q < colon && !bad_host; q++)
            bad_host = *q <= ' ' || *q == '/' || *q == '@' || *q == '?' || *q == '#';
        if (bad_host || digits == 0 || digits > 5 || port < 1 || port > 65535)
            return ddp_err_set(err, DDP_EUSAGE, "etcd endpoint '%.*s' is not HOST:PORT",
                               (int)(n > 64 ? 64 : n), p);
        if (c->n_eps == RDZV_ETCD_MAX_ENDPOINTS)
            return ddp_err_set(err, DDP_EUSAGE, "more than %d etcd endpoints",
                               RDZV_ETCD_MAX_ENDPOINTS);
        if (len + strlen(scheme) >= sizeof c->eps[0])
            return ddp_err_set(err, DDP_EUSAGE, "etcd endpoint '%.40s...' is too long", p);
        snprintf(c->eps[c->n_eps++], sizeof c->eps[0], "%s%.*s", scheme, (int)len, s);
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int dup_opt(char **dst, const char *src) {
    if (src == NULL)
        return 0;
    *dst = strdup(src);
    return *dst != NULL ? 0 : -ENOMEM;
}

int rdzv_etcd_new(uv_loop_t *loop, const rdzv_etcd_opts_t *opts, rdzv_etcd_t **out,
                  ddp_err_t *err) {
    *out = NULL;
    if ((opts->user == NULL) != (opts->password == NULL))
        return ddp_err_set(err, DDP_EUSAGE, "etcd: a user needs a password and the reverse");
    if ((opts->cert_file == NULL) != (opts->key_file == NULL))
        return ddp_err_set(err, DDP_EUSAGE, "etcd: a client certificate needs its key");
    if (opts->timeout_ms < 0)
        return ddp_err_set(err, DDP_EUSAGE, "etcd: negative timeout");
    const rdzv__etcd_curl_t *cu = rdzv__etcd_curl_load(err);
    if (cu == NULL)
        return DDP_EUSAGE;
    rdzv_etcd_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    c->loop = loop;
    c->curl = cu;
    c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : RDZV_ETCD_DEFAULT_TIMEOUT_MS;
    c->reply_limit = opts->reply_limit > 0 ? opts->reply_limit : RDZV_ETCD_REPLY_LIMIT;
    int st = 0;
    if (dup_opt(&c->user, opts->user) || dup_opt(&c->password, opts->password) ||
        dup_opt(&c->ca_file, opts->ca_file) || dup_opt(&c->cert_file, opts->cert_file) ||
        dup_opt(&c->key_file, opts->key_file)) {
        st = ddp_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    st = parse_endpoints(c, opts->endpoints, err);
    if (st != 0)
        goto fail;
    c->multi = cu->multi_init();
    if (c->multi == NULL) {
        st = ddp_err_set(err, -ENOMEM, "curl_multi_init failed");
        goto fail;
    }
    cu->multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    cu->multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    cu->multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    cu->multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    /* uv_timer_init cannot fail on a live loop. */
    uv_timer_init(loop, &c->timer);
    uv_timer_init(loop, &c->defer);
    c->timer.data = c;
    c->defer.data = c;
    c->handles_open = 2;
    *out = c;
    return 0;
fail:
    if (c->multi != NULL)
        cu->multi_cleanup(c->multi);
    free(c->user);
    free(c->password);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
    return st;
}

const char *rdzv_etcd_endpoint(const rdzv_etcd_t *c) {
    return c->eps[c->cur_ep];
}

uv_loop_t *rdzv_etcd_loop(const rdzv_etcd_t *c) {
    return c->loop;
}

size_t rdzv_etcd_pending(const rdzv_etcd_t *c) {
    size_t n = 0;
    for (const req_t *r = c->reqs; r != NULL; r = r->next)
        n += r->kind != RDZV_ETCD_AUTH;
    return n;
}
