/* SPDX-License-Identifier: Apache-2.0
 * rdzv_sim: simulated agents for the rendezvous benchmarks (see rdzv_sim.h). */
#include "rdzv_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp_err.h"
#include "ddp_time.h"
#include "rdzv_etcd_store.h"
#include "rdzv_frame_int.h"
#include "rdzv_layout.h"
#include "rdzv_server.h"

__attribute__((format(printf, 2, 3))) static int fail(rdzv_sim_t *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

void rdzv_sim_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int rdzv_sim_init(rdzv_sim_t *s, uint16_t port, const rdzv_join_req_t *tmpl, int rejoin,
                  int progress) {
    memset(s, 0, sizeof *s);
    s->port = port;
    s->tmpl = *tmpl;
    s->rejoin = rejoin;
    s->progress = progress;
    s->target = -1;
    struct sockaddr_in *sin = (struct sockaddr_in *)&s->stores[0].sa;
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->stores[0].sa_len = sizeof *sin;
    snprintf(s->stores[0].name, sizeof s->stores[0].name, "127.0.0.1:%u", (unsigned)port);
    s->n_stores = 1;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0)
        return fail(s, "epoll_create1: %s", strerror(errno));
    return 0;
}

void rdzv_sim_free(rdzv_sim_t *s) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->a[i].fd >= 0)
            close(s->a[i].fd);
        if (s->a[i].pend_fd >= 0)
            close(s->a[i].pend_fd);
        ddp_buf_free(&s->a[i].in);
    }
    free(s->a);
    free(s->retry.q);
    free(s->conn_wait.q);
    if (s->epfd >= 0)
        close(s->epfd);
    memset(s, 0, sizeof *s);
    s->epfd = -1;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        /* A store that died (the failover) must not kill the simulator with SIGPIPE. */
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The index in s->stores of "HOST:PORT" (a numeric address; brackets around IPv6), added when
 * new. Returns it, or -1 (s->err says why). */
static long store_index(rdzv_sim_t *s, const char *text, size_t len) {
    char host[RDZV_ETCD_STORE_HOST_MAX + 1], serv[8];
    int port;
    if (rdzv_etcd_store_addr_parse((const uint8_t *)text, len, host, sizeof host, &port) < 0)
        return fail(s, "'%.*s' is not a store's HOST:PORT", (int)(len > 200 ? 200 : len), text);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *ai = NULL;
    snprintf(serv, sizeof serv, "%d", port);
    int rc = getaddrinfo(host, serv, &hints, &ai);
    if (rc != 0)
        return fail(s, "store %.*s: %s (a numeric address is needed: no name is looked up)",
                    (int)(len > 200 ? 200 : len), text, gai_strerror(rc));
    size_t i;
    for (i = 0; i < s->n_stores; i++)
        if (s->stores[i].sa_len == ai->ai_addrlen &&
            memcmp(&s->stores[i].sa, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
    if (i == s->n_stores) {
        if (s->n_stores == RDZV_SIM_STORES_MAX) {
            freeaddrinfo(ai);
            return fail(s, "more than %d stores named", RDZV_SIM_STORES_MAX);
        }
        memcpy(&s->stores[i].sa, ai->ai_addr, ai->ai_addrlen);
        s->stores[i].sa_len = (socklen_t)ai->ai_addrlen;
        snprintf(s->stores[i].name, sizeof s->stores[i].name, "%.*s", (int)len, text);
        s->n_stores++;
    }
    freeaddrinfo(ai);
    return (long)i;
}

int rdzv_sim_set_candidates(rdzv_sim_t *s, const char *list) {
    s->n_cands = 0;
    for (const char *p = list; *p != '\0';) {
        const char *plus = strchr(p, '+');
        size_t len = plus != NULL ? (size_t)(plus - p) : strlen(p);
        long i = store_index(s, p, len);
        if (i < 0)
            return -1;
        if (s->n_cands == RDZV_SIM_STORES_MAX)
            return fail(s, "more than %d candidates", RDZV_SIM_STORES_MAX);
        s->cands[s->n_cands++] = (size_t)i;
        p += len;
        if (*p == '+')
            p++;
    }
    return s->n_cands > 0 ? 0 : fail(s, "no store candidates in '%s'", list);
}

/* VALIDATE, the first frame on every connection. Returns 0 or a negative errno. */
static int hello_send(int fd) {
    ddp_buf_t hello = DDP_BUF_INIT;
    int rc = 0;
    if (rdzv__put_u8(&hello, RDZV_CMD_VALIDATE) < 0 ||
        rdzv__put_u32(&hello, RDZV_VALIDATE_MAGIC) < 0)
        rc = -ENOMEM;
    else if (write_all(fd, hello.data, hello.len) < 0)
        rc = errno ? -errno : -EIO;
    ddp_buf_free(&hello);
    return rc;
}

/* A new connection to store `store`: its descriptor, or a negative errno. Blocking: connected
 * and VALIDATE sent. Else the connect is under way (EINPROGRESS) and nothing is sent: the
 * simulator waits for many at once, as many hosts would, instead of for each in turn (a connect
 * whose SYN the listener's full queue dropped waits a second for the retransmission). */
static int store_open(rdzv_sim_t *s, size_t store, int nonblock) {
    const rdzv_sim_store_t *st = &s->stores[store];
    int one = 1, rc = 0;
    int fd =
        socket(st->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        rc = -errno;
    else if (connect(fd, (const struct sockaddr *)&st->sa, st->sa_len) < 0 &&
             !(nonblock && errno == EINPROGRESS))
        rc = -errno;
    else if (!nonblock)
        rc = hello_send(fd);
    if (rc < 0 && fd >= 0)
        close(fd);
    return rc < 0 ? rc : fd;
}

/* Agent i's connection becomes fd, to store `store`: the old one closed, its unread replies
 * dropped. Returns 0 or a negative errno (the agent is left without a connection). */
static int agent_adopt(rdzv_sim_t *s, size_t i, int fd, size_t store) {
    rdzv_sim_agent_t *a = &s->a[i];
    if (a->fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
    }
    a->in.len = 0;
    a->store = (int)store;
    a->fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int e = errno;
        close(fd);
        a->fd = -1;
        return -e;
    }
    return 0;
}

/* Connects agent i to store `store` in place of its connection. Returns 0 or a negative errno. */
static int agent_connect(rdzv_sim_t *s, size_t i, size_t store) {
    s->a[i].store = (int)store;
    int fd = store_open(s, store, 0);
    return fd < 0 ? fd : agent_adopt(s, i, fd, store);
}

long rdzv_sim_add(rdzv_sim_t *s, size_t k) {
    if (s->n + k > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + k)
            cap *= 2;
        rdzv_sim_agent_t *a = realloc(s->a, cap * sizeof *a);
        if (a == NULL)
            return fail(s, "out of memory for %zu agents", cap);
        s->a = a;
        s->cap = cap;
    }
    size_t first = s->n;
    for (size_t j = 0; j < k; j++) {
        rdzv_sim_agent_t *a = &s->a[s->n];
        memset(a, 0, sizeof *a);
        a->round = a->group_rank = -1;
        a->fd = a->pend_fd = -1;
        int rc = agent_connect(s, s->n, 0);
        if (rc < 0)
            return fail(s, "agent %zu: unable to connect to %s: %s", s->n, s->stores[0].name,
                        strerror(-rc));
        s->n++;
    }
    return (long)first;
}

/* Agent i's JOIN; its host names it uniquely ("10.A.B.C"). */
static int join_encode(rdzv_sim_t *s, size_t i, ddp_buf_t *b) {
    rdzv_join_req_t req = s->tmpl;
    snprintf(req.host, sizeof req.host, "10.%zu.%zu.%zu", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    return rdzv_join_req_encode(b, &req);
}

int rdzv_sim_join(rdzv_sim_t *s, size_t from, size_t to) {
    ddp_buf_t *frames = calloc(to - from + 1, sizeof *frames);
    if (frames == NULL)
        return fail(s, "out of memory");
    int rc = 0;
    for (size_t i = from; i < to && rc == 0; i++)
        if (join_encode(s, i, &frames[i - from]) < 0)
            rc = fail(s, "agent %zu: unable to encode its JOIN", i);
    for (size_t i = from; i < to && rc == 0; i++) {
        s->a[i].state = RDZV_SIM_JOINING;
        if (write_all(s->a[i].fd, frames[i - from].data, frames[i - from].len) < 0)
            rc = fail(s, "agent %zu: unable to send its JOIN: %s", i, strerror(errno));
    }
    for (size_t i = from; i < to; i++)
        ddp_buf_free(&frames[i - from]);
    free(frames);
    return rc;
}

void rdzv_sim_drop(rdzv_sim_t *s, size_t i) {
    rdzv_sim_agent_t *a = &s->a[i];
    if (a->fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
    }
    if (a->pend_fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, a->pend_fd, NULL);
        close(a->pend_fd);
        s->connecting--;
    }
    a->fd = a->pend_fd = -1;
    a->pend_queued = 0;
    a->state = RDZV_SIM_GONE;
}

void rdzv_sim_expect(rdzv_sim_t *s, int64_t round) {
    s->expect_gen++;
    s->target = round;
    s->assigned = 0;
    s->last_assigned_ns = 0;
}

long rdzv_sim_find_rank(const rdzv_sim_t *s, int64_t rank) {
    for (size_t i = 0; i < s->n; i++)
        if (s->a[i].state == RDZV_SIM_RUNNING && s->a[i].group_rank == rank)
            return (long)i;
    return -1;
}

/* Appends i to q. Returns 0 or -1. */
static int queue_push(rdzv_sim_t *s, rdzv_sim_queue_t *q, size_t i) {
    if (q->len == q->cap && q->head > 0) {
        memmove(q->q, q->q + q->head, (q->len - q->head) * sizeof *q->q);
        q->len -= q->head;
        q->head = 0;
    }
    if (q->len == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 1024;
        size_t *n = realloc(q->q, cap * sizeof *n);
        if (n == NULL)
            return fail(s, "out of memory for a queue of %zu agents", cap);
        q->q = n;
        q->cap = cap;
    }
    q->q[q->len++] = i;
    return 0;
}

/* Agent i's JOIN again RDZV_SIM_RETRY_MS from now (once: an agent waits in the queue at most
 * once). Returns 0 or -1. */
static int retry_later(rdzv_sim_t *s, size_t i, uint64_t now) {
    if (s->a[i].retry_ns != 0)
        return 0;
    if (queue_push(s, &s->retry, i) < 0)
        return -1;
    s->a[i].retry_ns = now + (uint64_t)RDZV_SIM_RETRY_MS * 1000000u;
    return 0;
}

/* Sends agent i's JOIN alone. Returns 0, 1 when the connection is gone (nothing sent), -1. */
static int join_one(rdzv_sim_t *s, size_t i) {
    ddp_buf_t b = DDP_BUF_INIT;
    if (join_encode(s, i, &b) < 0) {
        ddp_buf_free(&b);
        return fail(s, "agent %zu: unable to encode its JOIN", i);
    }
    s->a[i].state = RDZV_SIM_JOINING;
    int rc = write_all(s->a[i].fd, b.data, b.len) < 0 ? 1 : 0;
    ddp_buf_free(&b);
    return rc;
}

static int pending_done(rdzv_sim_t *s, size_t i, int err, uint64_t now);
static int store_lost(rdzv_sim_t *s, size_t i, uint64_t now, const char *what);

/* Starts agent i's connection to a->pend_store. Returns 0 or -1. */
static int connect_start(rdzv_sim_t *s, size_t i, uint64_t now) {
    rdzv_sim_agent_t *a = &s->a[i];
    int fd = store_open(s, (size_t)a->pend_store, 1);
    if (fd == -EMFILE && a->fd >= 0) {
        /* Two connections an agent pass the open-file limit: the candidate's goes first (a
         * redirect to a store that turns out dead then goes through the candidates again). */
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
        a->fd = -1;
        fd = store_open(s, (size_t)a->pend_store, 1);
    }
    if (fd < 0)
        return pending_done(s, i, -fd, now);
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = i | RDZV_SIM_PENDING};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int e = errno;
        close(fd);
        return pending_done(s, i, e, now);
    }
    a->pend_fd = fd;
    s->connecting++;
    return 0;
}

/* Agent i's connection to store `store` (why: PEND_REDIRECT or PEND_CANDIDATE), started now or,
 * with RDZV_SIM_CONNECTING_MAX under way, once one ends; its current connection, if any, stays
 * until this one is made (pending_done). Returns 0 or -1. */
static int connect_begin(rdzv_sim_t *s, size_t i, size_t store, int why, uint64_t now) {
    rdzv_sim_agent_t *a = &s->a[i];
    a->pend_store = (int)store;
    a->pend_why = why;
    if (s->connecting < RDZV_SIM_CONNECTING_MAX && s->conn_wait.head == s->conn_wait.len)
        return connect_start(s, i, now);
    a->pend_queued = 1;
    return queue_push(s, &s->conn_wait, i);
}

/* Starts the waiting connections there is room for. Returns 0 or -1. */
static int connects_due(rdzv_sim_t *s, uint64_t now) {
    rdzv_sim_queue_t *q = &s->conn_wait;
    while (s->connecting < RDZV_SIM_CONNECTING_MAX && q->head < q->len) {
        size_t i = q->q[q->head++];
        if (!s->a[i].pend_queued)
            continue; /* dropped meanwhile */
        s->a[i].pend_queued = 0;
        if (connect_start(s, i, now) < 0)
            return -1;
    }
    if (q->head == q->len)
        q->head = q->len = 0;
    return 0;
}

/* Agent i connects to the next candidate (in order from the one after its last store) and JOINs
 * there; once every candidate has refused in turn, it tries again later. Returns 0 or -1. */
static int to_candidate(rdzv_sim_t *s, size_t i, uint64_t now) {
    rdzv_sim_agent_t *a = &s->a[i];
    if (a->cand_tries >= s->n_cands) {
        a->cand_tries = 0;
        return retry_later(s, i, now);
    }
    a->cand_tries++;
    return connect_begin(s, i, s->cands[a->cand_next++ % s->n_cands], PEND_CANDIDATE, now);
}

/* Agent i's connection under way is made (err 0) or refused (an errno). Made: it replaces the
 * agent's connection and the JOIN goes on it. Refused: a redirect's target (a leader that died,
 * its lease not lapsed yet) is asked about again later, through the candidate; a candidate, the
 * next one. Returns 0 or -1. */
static int pending_done(rdzv_sim_t *s, size_t i, int err, uint64_t now) {
    rdzv_sim_agent_t *a = &s->a[i];
    int fd = a->pend_fd;
    a->pend_fd = -1;
    if (fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
        s->connecting--;
    }
    if (err == 0) {
        /* Connected: blocking from now on, as the agents' other connections. */
        int fl = fcntl(fd, F_GETFL);
        int rc = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? -errno : hello_send(fd);
        err = rc < 0 ? -rc : 0;
    }
    if (err != 0) {
        if (fd >= 0)
            close(fd);
        if (s->n_cands == 0)
            return fail(s, "agent %zu: unable to connect to %s: %s", i,
                        s->stores[a->pend_store].name, strerror(err));
        if (a->pend_why == PEND_CANDIDATE) {
            s->refused_conns++;
            return to_candidate(s, i, now);
        }
        s->stale_redirects++;
        return retry_later(s, i, now); /* on the candidate's connection, or through them */
    }
    if (a->pend_why == PEND_CANDIDATE) {
        s->reconnects++;
        a->cand_tries = 0;
    }
    int rc = agent_adopt(s, i, fd, (size_t)a->pend_store);
    if (rc < 0)
        return fail(s, "agent %zu: epoll: %s", i, strerror(-rc));
    rc = join_one(s, i);
    return rc > 0 ? store_lost(s, i, now, "unable to send its JOIN") : rc;
}

/* Agent i's store closed its connection or refused a write. With candidates, the agent finds the
 * store again through them (its round is over: it JOINs anew); without, the run has failed.
 * Returns 0 or -1. */
static int store_lost(rdzv_sim_t *s, size_t i, uint64_t now, const char *what) {
    rdzv_sim_agent_t *a = &s->a[i];
    if (s->n_cands == 0)
        return fail(s, "agent %zu (group rank %lld): %s", i, (long long)a->group_rank, what);
    if (a->fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
        a->fd = -1;
    }
    a->state = RDZV_SIM_JOINING;
    a->group_rank = -1;
    if (a->retry_ns != 0 || a->pend_fd >= 0 || a->pend_queued)
        return 0; /* already on its way to a store */
    a->cand_tries = 0;
    a->cand_next = 0;
    for (size_t k = 0; k < s->n_cands; k++)
        if (s->cands[k] == (size_t)a->store)
            a->cand_next = k + 1;
    return to_candidate(s, i, now);
}

/* Sends the JOINs whose retry has come. Returns 0 or -1. */
static int retries_due(rdzv_sim_t *s, uint64_t now) {
    rdzv_sim_queue_t *q = &s->retry;
    while (q->head < q->len) {
        size_t i = q->q[q->head];
        rdzv_sim_agent_t *a = &s->a[i];
        if (a->retry_ns > now)
            break;
        q->head++;
        a->retry_ns = 0;
        if (a->state == RDZV_SIM_GONE || a->pend_fd >= 0 || a->pend_queued)
            continue;
        int rc = a->fd < 0 ? to_candidate(s, i, now) : join_one(s, i);
        if (rc > 0)
            rc = store_lost(s, i, now, "unable to send its JOIN: the store closed its connection");
        if (rc < 0)
            return -1;
    }
    if (q->head == q->len)
        q->head = q->len = 0;
    return 0;
}

/* Agent i's JOIN was refused with DDP_ERDZV_MOVED: it connects to the store the text names and
 * JOINs there. Returns 0 or -1. */
static int redirected(rdzv_sim_t *s, size_t i, const ddp_buf_t *text, uint64_t now) {
    const char *addr = text->data != NULL ? (const char *)text->data : "";
    long st = store_index(s, addr, strlen(addr));
    if (st < 0) {
        char why[sizeof s->err];
        snprintf(why, sizeof why, "%s", s->err);
        return fail(s, "agent %zu: redirected: %s", i, why);
    }
    s->redirects++;
    return connect_begin(s, i, (size_t)st, PEND_REDIRECT, now);
}

/* Agent a's keep-alive: its progress report first (when asked for), then HEARTBEAT. */
static int beat(rdzv_sim_t *s, rdzv_sim_agent_t *a, uint64_t now) {
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = 0;
    if (s->progress) {
        char key[RDZV_LAYOUT_KEY_MAX], val[RDZV_PROGRESS_VALUE_MAX];
        /* As an agent whose workers beat: its goodput too (STATUS sums it over the run). */
        rdzv_progress_t p = {.round = a->round,
                             .step = (int64_t)a->beats,
                             .beat_age_ms = 100,
                             .has_goodput = 1,
                             .wall_ms = (int64_t)a->beats * 5000 + 1000,
                             .productive_ms = (int64_t)a->beats * 4500,
                             .lost_ms = 0,
                             .restarts = 0};
        int n = rdzv_progress_format(val, sizeof val, &p);
        if (rdzv_layout_progress_key(key, sizeof key, s->tmpl.run_id, a->group_rank) < 0 || n < 0 ||
            rdzv__put_u8(&b, RDZV_CMD_SET) < 0 || rdzv__put_blob(&b, key, strlen(key)) < 0 ||
            rdzv__put_blob(&b, val, (size_t)n) < 0)
            rc = -1;
    }
    if (rc == 0)
        rc = rdzv_heartbeat_req_encode(&b, s->tmpl.run_id);
    if (rc == 0)
        rc = write_all(a->fd, b.data, b.len);
    ddp_buf_free(&b);
    a->last_beat_ns = now;
    a->beats++;
    s->beats_sent++;
    return rc;
}

/* Sends every keep-alive whose slot has come. */
static int beats_due(rdzv_sim_t *s, uint64_t now) {
    uint64_t interval = (uint64_t)s->tmpl.cfg.keep_alive_interval_ms * 1000000u;
    if (s->n == 0 || interval == 0)
        return 0;
    if (s->beat_next_ns == 0)
        s->beat_next_ns = now;
    while (s->beat_next_ns <= now) {
        if (s->beat_cursor >= s->n)
            s->beat_cursor = 0;
        rdzv_sim_agent_t *a = &s->a[s->beat_cursor++];
        if (a->state == RDZV_SIM_RUNNING && !a->silent && beat(s, a, now) < 0 &&
            store_lost(s, (size_t)(a - s->a), now, "unable to send its keep-alive") < 0)
            return -1;
        s->beat_next_ns += interval / s->n;
    }
    return 0;
}

/* Parks agent i's WAIT on the end key of its round. */
static int watch_end(rdzv_sim_t *s, size_t i) {
    char key[RDZV_LAYOUT_KEY_MAX];
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = rdzv_layout_end_key(key, sizeof key, s->tmpl.run_id, s->a[i].round) < 0 ||
                     rdzv__put_u8(&b, RDZV_CMD_WAIT) < 0 || rdzv__put_u64(&b, 1) < 0 ||
                     rdzv__put_blob(&b, key, strlen(key)) < 0
                 ? -1
                 : write_all(s->a[i].fd, b.data, b.len);
    ddp_buf_free(&b);
    return rc;
}

/* Handles every whole reply in agent i's buffer. */
static int replies(rdzv_sim_t *s, size_t i, uint64_t now) {
    rdzv_sim_agent_t *a = &s->a[i];
    size_t off = 0;
    int rc = 0;
    while (rc == 0 && off < a->in.len) {
        const uint8_t *p = a->in.data + off;
        size_t left = a->in.len - off;
        if (p[0] == RDZV_WAIT_STOP_WAITING) {
            /* The end key of its round: re-join, as the agent does once its group stopped. */
            off += 1;
            if (s->rejoin && a->state == RDZV_SIM_RUNNING)
                rc = rdzv_sim_join(s, i, i + 1);
            continue;
        }
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        long len = rdzv_round_reply_parse(p, left, &rep, &need, &err);
        if (len == 0) {
            ddp_buf_free(&rep.text);
            break;
        }
        if (len < 0) {
            ddp_buf_free(&rep.text);
            return fail(s, "agent %zu: bad reply: %s", i, err.text);
        }
        off += (size_t)len;
        if (rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status != 0 && rep.code == DDP_ERDZV_SPARE) {
            /* The run is at max_nodes: the store answers a spare once every keep-alive bound,
             * and its JOIN again is its keep-alive (agent/rdzv.c does the same). */
            s->spare_answers++;
            rc = rdzv_sim_join(s, i, i + 1);
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status != 0 &&
                   rep.code == DDP_ERDZV_MOVED) {
            /* A candidate that does not lead: what follows on this connection answers nothing
             * the agent still waits for (it JOINs again, there or here). */
            ddp_buf_consume(&a->in, off);
            rc = redirected(s, i, &rep.text, now);
            ddp_buf_free(&rep.text);
            return rc;
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status != 0 && rep.code == RDZV_NOT_YET) {
            /* No leader named yet: the same JOIN on the same connection shortly. */
            s->not_yet++;
            rc = retry_later(s, i, now);
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status != 0) {
            rc = fail(s, "agent %zu was refused: %s", i,
                      rep.text.data ? (const char *)rep.text.data : "?");
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN) {
            a->state = RDZV_SIM_RUNNING;
            a->round = rep.join.round;
            a->group_rank = rep.join.group_rank;
            if (a->round == s->target ||
                (s->target == RDZV_SIM_ANY_ROUND && a->counted != s->expect_gen)) {
                a->counted = s->expect_gen;
                s->assigned++;
                s->last_assigned_ns = now;
            }
            if (s->rejoin)
                rc = watch_end(s, i);
        } else if (rep.cmd == RDZV_CMD_RDZV_HEARTBEAT && rep.status != 0) {
            s->beats_refused++;
        }
        ddp_buf_free(&rep.text);
    }
    ddp_buf_consume(&a->in, off);
    return rc;
}

int rdzv_sim_step(rdzv_sim_t *s, int timeout_ms) {
    uint64_t now = ddp_now_ns();
    if (beats_due(s, now) < 0 || retries_due(s, now) < 0 || connects_due(s, now) < 0)
        return -1;
    /* Wake for the next keep-alive slot, and for the next retry. */
    if (s->beat_next_ns > now) {
        uint64_t until = (s->beat_next_ns - now) / 1000000u + 1;
        if (until < (uint64_t)timeout_ms)
            timeout_ms = (int)until;
    }
    if (s->conn_wait.head < s->conn_wait.len && s->connecting < RDZV_SIM_CONNECTING_MAX)
        timeout_ms = 0;
    if (s->retry.head < s->retry.len) {
        uint64_t due = s->a[s->retry.q[s->retry.head]].retry_ns;
        uint64_t until = due > now ? (due - now) / 1000000u + 1 : 0;
        if (until < (uint64_t)timeout_ms)
            timeout_ms = (int)until;
    }
    struct epoll_event ev[256];
    int k = epoll_wait(s->epfd, ev, 256, timeout_ms);
    if (k < 0 && errno != EINTR)
        return fail(s, "epoll_wait: %s", strerror(errno));
    now = ddp_now_ns();
    uint8_t buf[16384];
    for (int j = 0; j < k; j++) {
        size_t i = (size_t)(ev[j].data.u64 & ~RDZV_SIM_PENDING);
        rdzv_sim_agent_t *a = &s->a[i];
        if (ev[j].data.u64 & RDZV_SIM_PENDING) {
            /* A connection under way: made, or refused. */
            int err = 0;
            socklen_t len = sizeof err;
            if (a->pend_fd < 0)
                continue;
            if (getsockopt(a->pend_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            if (pending_done(s, i, err, now) < 0)
                return -1;
            continue;
        }
        if (a->fd < 0)
            continue;
        ssize_t r = read(a->fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (!a->silent) {
                if (store_lost(s, i, now, "the store closed its connection") < 0)
                    return -1;
                continue;
            }
            s->closed_by_store++;
            rdzv_sim_drop(s, i);
            continue;
        }
        if (ddp_buf_append(&a->in, buf, (size_t)r) < 0 || replies(s, i, now) < 0)
            return s->err[0] ? -1 : fail(s, "out of memory");
    }
    return 0;
}

int rdzv_sim_wait_assigned(rdzv_sim_t *s, size_t want, uint64_t deadline_ns) {
    while (s->assigned < want) {
        if (ddp_now_ns() >= deadline_ns)
            return fail(s, "%zu of %zu agents assigned to round %lld in time", s->assigned, want,
                        (long long)s->target);
        if (rdzv_sim_step(s, 10) < 0)
            return -1;
    }
    return 0;
}

int rdzv_sim_idle_until(rdzv_sim_t *s, uint64_t deadline_ns) {
    for (uint64_t now = ddp_now_ns(); now < deadline_ns; now = ddp_now_ns()) {
        uint64_t left_ms = (deadline_ns - now) / 1000000u;
        if (rdzv_sim_step(s, left_ms < 10 ? (int)left_ms : 10) < 0)
            return -1;
    }
    return 0;
}
