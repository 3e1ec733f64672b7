/* SPDX-License-Identifier: Apache-2.0
 * ddpw_tcp.c: the CPU backend across nodes, between node leaders (LOCAL_RANK 0): a TCP ring, each
 * leader connected to the next (GROUP_RANK + 1) and accepting from the previous. The ring sums
 * node leaders' buffers (reduce-scatter then allgather, full duplex) and passes broadcasts along;
 * ddpw.c composes it with the shared memory of each node (node allreduce, ring, node broadcast
 * from each node's leader), so every rank ends with its node leader's bits and the summation order
 * depends only on the world's shape. Addresses are exchanged through the store under the round
 * prefix (ddpw__key_ring: "ADDR PORT"). */
#include "ddpw_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_net.h"
#include "ddp_time.h"

#define TCP_MAGIC 0x44445754u /* "TWDD" */

typedef struct ddpw_tcp {
    const ddpw_ctx_t *ctx;
    int fd_next, fd_prev;
    int node, nodes;
    float *tmp; /* receive scratch, allocated once per size high-water mark */
    size_t tmp_cap;
} ddpw_tcp_t;

typedef struct hello {
    uint32_t magic;
    uint32_t node;
    int64_t round;
    uint64_t run_hash;
} hello_t;

static uint64_t run_hash(const ddpw_ctx_t *c) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = c->env.run_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

/* Socket buffers of the ring's connections, set before connect() and on the listener (accepted
 * sockets inherit them): TCP agrees the window scale in the handshake, from the size then. */
#define RING_SOCK_BUF (4 << 20)

static void set_buf_sizes(int fd) {
    int buf = RING_SOCK_BUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

static void set_sock_opts(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Sends slen bytes on out while receiving rlen bytes from in (either may be 0), so that a ring
 * of peers doing the same never deadlocks on full socket buffers. Bounded by timeout_ms. */
static int exchange(const ddpw_tcp_t *t, int timeout_ms, int out, const void *sbuf, size_t slen,
                    int in, void *rbuf, size_t rlen, ddp_err_t *err) {
    const char *s = sbuf;
    char *r = rbuf;
    uint64_t deadline = ddp_now_ms() + (uint64_t)timeout_ms;
    while (slen > 0 || rlen > 0) {
        struct pollfd p[2];
        int n = 0, is = -1, ir = -1;
        if (slen > 0) {
            p[n] = (struct pollfd){out, POLLOUT, 0};
            is = n++;
        }
        if (rlen > 0) {
            p[n] = (struct pollfd){in, POLLIN, 0};
            ir = n++;
        }
        uint64_t now = ddp_now_ms();
        if (now >= deadline)
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "cpu collective: node ring timed out after %d ms (%s node %d's "
                               "leader)",
                               timeout_ms, rlen > 0 ? "receiving from" : "sending to",
                               rlen > 0 ? (t->node + t->nodes - 1) % t->nodes
                                        : (t->node + 1) % t->nodes);
        int k = poll(p, (nfds_t)n, (int)(deadline - now > 100 ? 100 : deadline - now));
        if (k < 0 && errno != EINTR)
            return ddp_err_set(err, -errno, "cpu collective: poll: %s", strerror(errno));
        if (k <= 0)
            continue;
        if (is >= 0 && (p[is].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t m = send(out, s, slen, MSG_NOSIGNAL);
            if (m < 0 && errno != EAGAIN && errno != EINTR)
                return ddp_err_set(err, DDP_ECLOSED, "cpu collective: send to node %d failed: %s",
                                   (t->node + 1) % t->nodes, strerror(errno));
            if (m > 0)
                s += m, slen -= (size_t)m;
        }
        if (ir >= 0 && (p[ir].revents & (POLLIN | POLLERR | POLLHUP))) {
            ssize_t m = recv(in, r, rlen, 0);
            if (m == 0 || (m < 0 && errno != EAGAIN && errno != EINTR))
                return ddp_err_set(err, DDP_ECLOSED,
                                   "cpu collective: node %d's leader closed the connection",
                                   (t->node + t->nodes - 1) % t->nodes);
            if (m > 0)
                r += m, rlen -= (size_t)m;
        }
    }
    return 0;
}

/* The local address that routes to the store: other nodes reach this leader through it. */
static int local_addr(const ddpw_ctx_t *c, struct sockaddr_storage *ss, socklen_t *len,
                      ddp_err_t *err) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_DGRAM;
    char port[16];
    snprintf(port, sizeof port, "%u", c->env.store_port);
    int g = getaddrinfo(c->env.store_host, port, &hints, &ai);
    if (g != 0)
        return ddp_err_set(err, -EHOSTUNREACH, "cpu backend: unable to resolve %s: %s",
                           c->env.store_host, gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = 0;
    *len = sizeof *ss;
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        getsockname(fd, (struct sockaddr *)ss, len) != 0)
        rc = ddp_err_set(err, -errno, "cpu backend: no route to the store %s: %s",
                         c->env.store_host, strerror(errno));
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

/* Connects to node `next`'s leader at ai (peer = "ADDR:PORT" for messages) before deadline.
 * Each try is bounded by DDP_CONNECT_TRY_* (an unanswered SYN is abandoned and sent again on a
 * new socket: the kernel's SYN backoff held a group's first collective past --heartbeat_timeout); a
 * refusal (a leader not listening yet, or gone) is retried with a short doubling backoff; all until
 * the deadline. Returns the connected fd, or a negative code (DDP_ETIMEOUT when it timed out or
 * kept being refused, else -errno) with err naming the peer. */
static int connect_leader(const ddpw_ctx_t *c, int next, const struct addrinfo *ai,
                          const char *peer, uint64_t deadline, ddp_err_t *err) {
    int rank = next * c->env.local_world_size;
    uint64_t backoff = 5, try_ms = DDP_CONNECT_TRY_FIRST_MS;
    int refused = 0;
    for (;;) {
        uint64_t now = ddp_now_ms();
        uint64_t try_end = now + try_ms < deadline ? now + try_ms : deadline;
        int fd = ddp_tcp_connect(ai->ai_addr, ai->ai_addrlen, try_end, RING_SOCK_BUF);
        if (fd >= 0)
            return fd;
        now = ddp_now_ms();
        if (fd == -ETIMEDOUT && now < deadline) {
            /* No answer within this try: a new SYN, with a longer bound. */
            try_ms = try_ms * 2 > DDP_CONNECT_TRY_MAX_MS ? DDP_CONNECT_TRY_MAX_MS : try_ms * 2;
            continue;
        }
        if (fd == -ETIMEDOUT && !refused)
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "cpu backend: connecting to node %d's leader (rank %d) at %s timed "
                               "out after %d ms (no answer)",
                               next, rank, peer, c->timeout_ms);
        if (fd != -ETIMEDOUT && fd != -ECONNREFUSED)
            return ddp_err_set(err, fd,
                               "cpu backend: unable to connect to node %d's leader (rank %d) at "
                               "%s: %s",
                               next, rank, peer, strerror(-fd));
        refused = 1;
        if (fd == -ETIMEDOUT || now >= deadline) /* refused, then no answer: refused */
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "cpu backend: node %d's leader (rank %d) at %s refused the "
                               "connection until the %d ms timeout (nothing listening there)",
                               next, rank, peer, c->timeout_ms);
        uint64_t nap = backoff < deadline - now ? backoff : deadline - now;
        struct timespec ts = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 100 ? 100 : backoff * 2;
    }
}

/* Accepts the previous node's leader on lfd before deadline; anything else that connects (wrong
 * hello, another run or round, silence for 5 s) is closed. */
static int accept_prev(ddpw_tcp_t *t, int lfd, uint64_t deadline, ddp_err_t *err) {
    const ddpw_ctx_t *c = t->ctx;
    int prev = (t->node + t->nodes - 1) % t->nodes;
    while (t->fd_prev < 0) {
        uint64_t now = ddp_now_ms();
        if (now >= deadline)
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "cpu backend: node %d's leader did not connect within %d ms", prev,
                               c->timeout_ms);
        struct pollfd p = {lfd, POLLIN, 0};
        if (poll(&p, 1, (int)(deadline - now > 100 ? 100 : deadline - now)) <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        set_sock_opts(fd);
        hello_t in;
        ddp_err_t ignored;
        ddp_err_clear(&ignored);
        /* A silent stranger costs 5 s at most. */
        int limit = c->timeout_ms < 5000 ? c->timeout_ms : 5000;
        int rc = exchange(t, limit, -1, NULL, 0, fd, &in, sizeof in, &ignored);
        if (rc == 0 && in.magic == TCP_MAGIC && in.node == (uint32_t)prev &&
            in.round == c->env.round && in.run_hash == run_hash(c))
            t->fd_prev = fd;
        else
            close(fd);
    }
    return 0;
}

/* Connects to the next node's leader (address from the store) and says hello, then accepts the
 * previous one, all within one timeout. */
static int ring_connect(ddpw_tcp_t *t, int lfd, ddp_err_t *err) {
    const ddpw_ctx_t *c = t->ctx;
    char val[128];
    size_t len = 0;
    int next = (t->node + 1) % t->nodes, rc;
    ddpw_name_t name = ddpw__key_ring(next);
    const char *key = name.s;
    if ((rc = ddpw__store_get(c, key, val, sizeof val - 1, &len, -1, err)) != 0)
        return rc;
    val[len] = '\0';
    char host[100], port[16], peer[128];
    if (sscanf(val, "%99s %15s", host, port) != 2)
        return ddp_err_set(err, DDP_EPROTO, "store key %s: malformed address '%s'", key, val);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return ddp_err_set(err, DDP_EPROTO, "store key %s: bad address '%s'", key, val);
    snprintf(peer, sizeof peer, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
    uint64_t deadline = ddp_now_ms() + (uint64_t)c->timeout_ms;
    rc = connect_leader(c, next, ai, peer, deadline, err);
    freeaddrinfo(ai);
    if (rc < 0)
        return rc;
    t->fd_next = rc; /* non-blocking, TCP_NODELAY */
    hello_t h = {TCP_MAGIC, (uint32_t)t->node, c->env.round, run_hash(c)};
    if ((rc = exchange(t, c->timeout_ms, t->fd_next, &h, sizeof h, -1, NULL, 0, err)) != 0)
        return rc;
    return accept_prev(t, lfd, deadline, err);
}

/* Listens on the address that routes to the store (port 0) and publishes "ADDR PORT" under
 * this node's ring key (ddpw__key_ring). Returns the listening fd (caller closes it) or a negative
 * code. */
static int listen_publish(ddpw_tcp_t *t, ddp_err_t *err) {
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = local_addr(t->ctx, &ss, &sl, err);
    if (rc != 0)
        return rc;
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd >= 0)
        set_buf_sizes(lfd);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, sl) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0) {
        rc = ddp_err_set(err, -errno, "cpu backend: unable to listen for node peers: %s",
                         strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return rc;
    }
    char host[INET6_ADDRSTRLEN], val[128];
    ddpw_name_t key = ddpw__key_ring(t->node);
    uint16_t port;
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    snprintf(val, sizeof val, "%s %u", host, port);
    if ((rc = ddpw__store_set(t->ctx, key.s, val, strlen(val), err)) != 0) {
        close(lfd);
        return rc;
    }
    return lfd;
}

static void tcp_fini(void *state);

static int tcp_init(const ddpw_ctx_t *ctx, void **state, ddp_err_t *err) {
    const ddpw_env_t *e = &ctx->env;
    int lws = e->local_world_size, ws = e->world_size;
    *state = NULL;
    if (ws % lws != 0)
        return ddp_err_set(err, DDP_EUSAGE,
                           "backend cpu: " DDP_ENV_WORLD_SIZE
                           "=%d is not a multiple of " DDP_ENV_LOCAL_WORLD_SIZE "=%d "
                           "(nodes must run the same number of ranks)",
                           ws, lws);
    int nodes = ws / lws;
    if (e->group_rank >= nodes || e->rank != e->group_rank * lws + e->node_local_rank)
        return ddp_err_set(err, DDP_EUSAGE,
                           "backend cpu: " DDP_ENV_RANK "=%d is not " DDP_ENV_GROUP_RANK
                           "*" DDP_ENV_LOCAL_WORLD_SIZE "+" DDP_ENV_LOCAL_RANK " "
                           "(%d*%d+%d)",
                           e->rank, e->group_rank, lws, e->node_local_rank);
    if (e->node_local_rank != 0)
        return 0; /* only leaders talk TCP */
    ddpw_tcp_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    t->ctx = ctx;
    t->fd_next = t->fd_prev = -1;
    t->node = e->group_rank;
    t->nodes = nodes;
    int lfd = listen_publish(t, err), rc = lfd;
    if (lfd >= 0) {
        rc = ring_connect(t, lfd, err);
        close(lfd);
    }
    if (rc < 0) {
        tcp_fini(t);
        return rc;
    }
    *state = t;
    return 0;
}

static void tcp_fini(void *state) {
    ddpw_tcp_t *t = state;
    if (t == NULL)
        return;
    if (t->fd_next >= 0)
        close(t->fd_next);
    if (t->fd_prev >= 0)
        close(t->fd_prev);
    free(t->tmp);
    free(t);
}

static void seg(size_t count, int nodes, int j, size_t *lo, size_t *hi) {
    size_t q = (count + (size_t)nodes - 1) / (size_t)nodes;
    size_t a = (size_t)j * q, b = a + q;
    *lo = a < count ? a : count;
    *hi = b < count ? b : count;
}

/* Ring allreduce (sum) of the node leaders' buffers: reduce-scatter, then allgather. */
static int tcp_allreduce(void *state, float *buf, size_t count, ddpw_op_t op, void *stream,
                         int wait, ddp_err_t *err) {
    ddpw_tcp_t *t = state;
    (void)stream, (void)wait;
    if (op != DDPW_SUM)
        return ddp_err_set(err, DDP_EUSAGE, "cpu backend: the node ring only sums");
    int G = t->nodes, g = t->node, rc, tmo = t->ctx->timeout_ms;
    size_t q = (count + (size_t)G - 1) / (size_t)G;
    if (q > t->tmp_cap) {
        float *p = realloc(t->tmp, q * sizeof(float));
        if (p == NULL)
            return ddp_err_set(err, -ENOMEM, "out of memory");
        t->tmp = p;
        t->tmp_cap = q;
    }
    size_t slo, shi, rlo, rhi;
    for (int s = 0; s < G - 1; s++) { /* reduce-scatter */
        seg(count, G, ((g - s) % G + G) % G, &slo, &shi);
        seg(count, G, ((g - s - 1) % G + G) % G, &rlo, &rhi);
        if ((rc = exchange(t, tmo, t->fd_next, buf + slo, (shi - slo) * sizeof(float), t->fd_prev,
                           t->tmp, (rhi - rlo) * sizeof(float), err)) != 0)
            return rc;
        for (size_t i = 0; i < rhi - rlo; i++)
            buf[rlo + i] += t->tmp[i];
    }
    for (int s = 0; s < G - 1; s++) { /* allgather */
        seg(count, G, ((g + 1 - s) % G + G) % G, &slo, &shi);
        seg(count, G, ((g - s) % G + G) % G, &rlo, &rhi);
        if ((rc = exchange(t, tmo, t->fd_next, buf + slo, (shi - slo) * sizeof(float), t->fd_prev,
                           buf + rlo, (rhi - rlo) * sizeof(float), err)) != 0)
            return rc;
    }
    return 0;
}

/* Passes the root node's leader's buffer along the ring, starting at the root's node. */
static int tcp_broadcast(void *state, void *buf, size_t len, int root, ddp_err_t *err) {
    ddpw_tcp_t *t = state;
    int root_node = root / t->ctx->env.local_world_size, rc, tmo = t->ctx->timeout_ms;
    int last = (root_node + t->nodes - 1) % t->nodes;
    if (t->node != root_node &&
        (rc = exchange(t, tmo, -1, NULL, 0, t->fd_prev, buf, len, err)) != 0)
        return rc;
    if (t->node != last && (rc = exchange(t, tmo, t->fd_next, buf, len, -1, NULL, 0, err)) != 0)
        return rc;
    return 0;
}

const ddpw_backend_ops_t ddpw__tcp_ops = {
    .name = "tcp",
    .init = tcp_init,
    .fini = tcp_fini,
    .allreduce = tcp_allreduce,
    .broadcast = tcp_broadcast,
    .barrier = NULL,
    .stream_wait = NULL,
};
