/* SPDX-License-Identifier: Apache-2.0
 * rdzv_sim: simulated agents for the rendezvous benchmarks (see rdzv_sim.h). */
#include "rdzv_sim.h"

#include <errno.h>
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
#include "rdzv_frame_int.h"
#include "rdzv_layout.h"

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
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0)
        return fail(s, "epoll_create1: %s", strerror(errno));
    return 0;
}

void rdzv_sim_free(rdzv_sim_t *s) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->a[i].fd >= 0)
            close(s->a[i].fd);
        ddp_buf_free(&s->a[i].in);
    }
    free(s->a);
    if (s->epfd >= 0)
        close(s->epfd);
    memset(s, 0, sizeof *s);
    s->epfd = -1;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
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
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons(s->port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ddp_buf_t hello = DDP_BUF_INIT;
    rdzv__put_u8(&hello, RDZV_CMD_VALIDATE);
    rdzv__put_u32(&hello, RDZV_VALIDATE_MAGIC);
    size_t first = s->n;
    for (size_t j = 0; j < k; j++) {
        rdzv_sim_agent_t *a = &s->a[s->n];
        memset(a, 0, sizeof *a);
        a->round = a->group_rank = -1;
        a->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = s->n};
        if (a->fd < 0 || setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
            connect(a->fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
            write_all(a->fd, hello.data, hello.len) < 0 ||
            epoll_ctl(s->epfd, EPOLL_CTL_ADD, a->fd, &ev) < 0) {
            int e = errno;
            if (a->fd >= 0)
                close(a->fd);
            ddp_buf_free(&hello);
            return fail(s, "agent %zu: unable to connect to 127.0.0.1:%u: %s", s->n,
                        (unsigned)s->port, strerror(e));
        }
        s->n++;
    }
    ddp_buf_free(&hello);
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
    a->fd = -1;
    a->state = RDZV_SIM_GONE;
}

void rdzv_sim_expect(rdzv_sim_t *s, int64_t round) {
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
        if (a->state == RDZV_SIM_RUNNING && !a->silent && beat(s, a, now) < 0)
            return fail(s, "agent %zu: unable to send its keep-alive: %s", (size_t)(a - s->a),
                        strerror(errno));
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
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status != 0) {
            rc = fail(s, "agent %zu was refused: %s", i,
                      rep.text.data ? (const char *)rep.text.data : "?");
        } else if (rep.cmd == RDZV_CMD_RDZV_JOIN) {
            a->state = RDZV_SIM_RUNNING;
            a->round = rep.join.round;
            a->group_rank = rep.join.group_rank;
            if (a->round == s->target) {
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
    if (beats_due(s, now) < 0)
        return -1;
    /* Wake for the next keep-alive slot. */
    if (s->beat_next_ns > now) {
        uint64_t until = (s->beat_next_ns - now) / 1000000u + 1;
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
        size_t i = (size_t)ev[j].data.u64;
        rdzv_sim_agent_t *a = &s->a[i];
        if (a->fd < 0)
            continue;
        ssize_t r = read(a->fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (!a->silent)
                return fail(s, "agent %zu (group rank %lld): the store closed its connection", i,
                            (long long)a->group_rank);
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
