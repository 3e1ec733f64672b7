/* SPDX-License-Identifier: Apache-2.0
 * bench_store: store benchmarks (not tests), driven by bench/store.sh. The same raw-protocol
 * client drives any TCPStore-compatible server, so ddp-rendezvous and PyTorch's own TCPStore
 * are measured with identical client code; only the servers differ.
 *
 *   bench_store latency PORT [ITERS]          RTT medians: raw TCP ping-pong (own echo thread,
 *                                             same byte counts) vs GET, SET+GET, PING, and
 *                                             rdzv_client_get (ddprun servers only, --ddprun)
 *   bench_store throughput PORT CLIENTS SECS  SET+GET of each client's own key, 16-byte
 *                                             values, one request in flight per connection
 *   bench_store rendezvous PORT N             N connections: ADD(count), WAIT(barrier set by
 *                                             the last), GET(128-byte id); wall time
 *   bench_store idle-rss PORT PID N           server RSS growth per idle connection
 * A job token (rdzv_token_load: DDPRUN_TOKEN, DDPRUN_TOKEN_FILE or DDPRUN_STORE_TOKEN) makes every
 * connection authenticate (ddprun only).
 * BENCH_SERVER_PID adds the server's CPU time (from /proc) to throughput and rendezvous rows,
 * next to the client's own.
 * Output: markdown table rows on stdout. Every phase is bounded (60 s). Exit status: 0 with the
 * figure printed; 1 when it cannot be measured (a phase timed out: its row says "timed out"; a
 * connection failed; no request completed); 2 on bad arguments. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_stats.h"
#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "rdzv_auth_int.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"

#define PHASE_BOUND_MS 60000
#define VALUE_LEN 16
#define ID_LEN 128

static ddp_buf_t token = DDP_BUF_INIT;
static uint16_t port;

static void die(const char *what) {
    fprintf(stderr, "bench_store: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void raise_nofile(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

static int tcp_socket(int nonblock) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static struct sockaddr_in loopback(uint16_t p) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(p);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int dial_blocking(uint16_t p) {
    int fd = tcp_socket(0);
    struct sockaddr_in a = loopback(p);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    return fd;
}

static void send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("send");
        b += w;
        n -= (size_t)w;
    }
}

static void recv_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            errno = r == 0 ? ECONNRESET : errno;
            die("recv");
        }
        b += r;
        n -= (size_t)r;
    }
}

/* Blocking client handshake on fd (rdzv__handshake_*_encode): VALIDATE, then the HMAC exchange
 * when a token is set, else a PING whose echo is read. */
static void handshake_blocking(int fd) {
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_handshake_t hs = {.token = token.data, .token_len = token.len, .ping_nonce = 1};
    if (rdzv__handshake_hello_encode(&hs, &b) < 0)
        die("handshake");
    send_all(fd, b.data, b.len);
    ddp_buf_reset(&b);
    if (token.len > 0) {
        uint8_t sn[RDZV_HELLO_REPLY_LEN], ok[RDZV_PROOF_REPLY_LEN];
        recv_all(fd, sn, sizeof sn);
        if (rdzv__handshake_proof_encode(&hs, sn + 1, &b) < 0)
            die("handshake");
        send_all(fd, b.data, b.len);
        recv_all(fd, ok, sizeof ok);
        if (ok[0] != RDZV_AUTH_OK) {
            fprintf(stderr, "bench_store: token refused\n");
            exit(1);
        }
    } else {
        uint8_t echo[4];
        recv_all(fd, echo, sizeof echo);
    }
    ddp_buf_free(&b);
}

/* BENCH_SERVER_CPU=N (bench/store.sh sets it when it pins the servers with taskset): the echo
 * reference runs on CPU N like the servers, and this client on another CPU. -1 = no pinning. */
static int server_cpu = -1;

static void pin_to(int cpu) {
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- latency ---- */

static int echo_listen_fd;

/* The reference: a blocking echo loop that reads a request of the size of a GET frame and
 * answers with the size of a GET reply, like the store does. */
static void *echo_thread(void *arg) {
    size_t *sizes = arg;
    int fd = accept(echo_listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t buf[256] = {0};
    for (;;) {
        size_t got = 0;
        while (got < sizes[0]) {
            ssize_t r = recv(fd, buf + got, sizes[0] - got, 0);
            if (r <= 0) {
                close(fd);
                return NULL;
            }
            got += (size_t)r;
        }
        if (send(fd, buf, sizes[1], MSG_NOSIGNAL) <= 0)
            break;
    }
    close(fd);
    return NULL;
}

typedef struct lat {
    uint64_t *ns;
    int n;
} lat_t;

static double median_us(lat_t *l) {
    qsort(l->ns, (size_t)l->n, sizeof l->ns[0], cmp_u64);
    return (double)l->ns[l->n / 2] / 1000.0;
}

static double p99_us(lat_t *l) {
    return (double)l->ns[(size_t)l->n * 99 / 100] / 1000.0;
}

static void bench_latency(int iters, int ddprun) {
    uint8_t getreq[64], reply[64];
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv__put_u8(&b, RDZV_CMD_GET);
    rdzv__put_blob(&b, "lat/key0", 8);
    size_t getlen = b.len;
    memcpy(getreq, b.data, getlen);
    size_t replylen = 8 + VALUE_LEN;

    /* Reference ping-pong with identical byte counts. */
    echo_listen_fd = tcp_socket(0);
    struct sockaddr_in a = loopback(0);
    socklen_t al = sizeof a;
    if (bind(echo_listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(echo_listen_fd, 4) < 0 ||
        getsockname(echo_listen_fd, (struct sockaddr *)&a, &al) < 0)
        die("echo listen");
    /* The echo server is a child process, so that its round trips cross processes as the
     * store's do (a thread of this process would wake up faster). */
    size_t sizes[2] = {getlen, replylen};
    fflush(stdout);
    pid_t echo_pid = fork();
    if (echo_pid < 0)
        die("fork");
    if (echo_pid == 0) {
        pin_to(server_cpu);
        echo_thread(sizes);
        _exit(0);
    }
    close(echo_listen_fd);
    int efd = dial_blocking(ntohs(a.sin_port));

    int fd = dial_blocking(port);
    handshake_blocking(fd);
    uint8_t val[VALUE_LEN];
    memset(val, 'v', sizeof val);
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_SET);
    rdzv__put_blob(&b, "lat/key0", 8);
    rdzv__put_blob(&b, val, sizeof val);
    send_all(fd, b.data, b.len);
    size_t setlen = b.len;
    uint8_t setget[128];
    memcpy(setget, b.data, setlen);
    memcpy(setget + setlen, getreq, getlen);
    uint8_t pingreq[5] = {RDZV_CMD_PING, 1, 2, 3, 4};
    rdzv_client_t *c = NULL;
    ddp_buf_t v = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (ddprun) {
        rdzv_client_opts_t o = {0};
        o.host = "127.0.0.1";
        o.port = port;
        o.token = token.data;
        o.token_len = token.len;
        if (rdzv_client_connect(&o, &c, &err) < 0) {
            fprintf(stderr, "bench_store: %s\n", err.text);
            exit(1);
        }
    }

    /* The reference and every store operation are measured in interleaved rounds, so that a
     * change in machine load during the run affects them alike. Round 0 is warm-up. */
    enum { ROUNDS = 10, KINDS = 5 };
    lat_t lt[KINDS];
    for (int k = 0; k < KINDS; k++)
        lt[k] = (lat_t){calloc((size_t)iters, 8), 0};
    int per = iters / ROUNDS;
    for (int r = 0; r <= ROUNDS; r++) {
        for (int k = 0; k < KINDS; k++) {
            if (k == 4 && !ddprun)
                continue;
            for (int i = 0; i < per; i++) {
                uint64_t t = ddp_now_ns();
                switch (k) {
                case 0:
                    send_all(efd, getreq, getlen);
                    recv_all(efd, reply, replylen);
                    break;
                case 1:
                    send_all(fd, getreq, getlen);
                    recv_all(fd, reply, replylen);
                    break;
                case 2:
                    send_all(fd, setget, setlen + getlen);
                    recv_all(fd, reply, replylen);
                    break;
                case 3:
                    send_all(fd, pingreq, 5);
                    recv_all(fd, reply, 4);
                    break;
                default:
                    if (rdzv_client_get(c, "lat/key0", 1000, &v, &err) < 0) {
                        fprintf(stderr, "bench_store: %s\n", err.text);
                        exit(1);
                    }
                }
                if (r > 0)
                    lt[k].ns[lt[k].n++] = ddp_now_ns() - t;
            }
        }
    }
    close(efd);
    waitpid(echo_pid, NULL, 0);
    close(fd);
    lat_t pp = lt[0], get = lt[1], sg = lt[2], ping = lt[3], cget = lt[4];
    double ref = median_us(&pp);
    printf("| loopback TCP ping-pong (%zu B -> %zu B), reference | %.1f | %.1f | 1.00 |\n", getlen,
           replylen, ref, p99_us(&pp));
    double m = median_us(&get);
    printf("| GET 16-byte value (raw frames) | %.1f | %.1f | %.2f |\n", m, p99_us(&get), m / ref);
    m = median_us(&sg);
    printf("| SET+GET 16-byte value (SET has no reply: one round trip) | %.1f | %.1f | %.2f |\n", m,
           p99_us(&sg), m / ref);
    m = median_us(&ping);
    printf("| PING | %.1f | %.1f | %.2f |\n", m, p99_us(&ping), m / ref);
    if (ddprun) {
        m = median_us(&cget);
        printf("| rdzv_client_get (blocking get = wait + get in one round trip) | %.1f | %.1f | "
               "%.2f |\n",
               m, p99_us(&cget), m / ref);
        ddp_buf_free(&v);
        rdzv_client_free(c);
    }
    free(pp.ns);
    free(get.ns);
    free(sg.ns);
    free(ping.ns);
    free(cget.ns);
    ddp_buf_free(&b);
}

/* ---- many connections on one epoll loop ---- */

enum { C_CONNECTING, C_HELLO, C_PROOF, C_PING, C_ADD, C_WAIT, C_GET, C_OP, C_DONE };

typedef struct bconn {
    int fd;
    int state;
    size_t want, got;
    rdzv_handshake_t hs;
    uint8_t in[256];
    ddp_buf_t out;
} bconn_t;

typedef struct engine {
    int ep;
    bconn_t *c;
    int n;
    int mode; /* 0 throughput, 1 rendezvous, 2 idle */
    char prefix[64];
    uint64_t ops;
    int done, ready, connecting, next_connect;
    int window;
} engine_t;

static void conn_send(bconn_t *c) {
    send_all(c->fd, c->out.data, c->out.len); /* small: fits the socket buffer */
    ddp_buf_reset(&c->out);
}

static void expect(bconn_t *c, int state, size_t n) {
    c->state = state;
    c->want = n;
    c->got = 0;
}

static void start_connect(engine_t *e) {
    bconn_t *c = &e->c[e->next_connect++];
    c->fd = tcp_socket(1);
    /* Thousands of connections from one process: spread them over 64 loopback source addresses
     * and let connect() pick the port (IP_BIND_ADDRESS_NO_PORT), so the kernel's ephemeral-port
     * search stays short. This only lowers the client's cost, the same for every server. */
    int one = 1;
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    struct sockaddr_in src = loopback(0);
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (uint32_t)(e->next_connect % 64));
    if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0)
        die("bind");
    struct sockaddr_in a = loopback(port);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
        die("connect");
    c->state = C_CONNECTING;
    struct epoll_event ev = {EPOLLOUT, {.ptr = c}};
    epoll_ctl(e->ep, EPOLL_CTL_ADD, c->fd, &ev);
    e->connecting++;
}

/* Sends the next request of the workload once the handshake is over. */
static void next_request(engine_t *e, bconn_t *c) {
    char key[128];
    int idx = (int)(c - e->c);
    if (e->mode == 0) {
        uint8_t val[VALUE_LEN];
        memset(val, 'a' + idx % 26, sizeof val);
        int kl = snprintf(key, sizeof key, "%s/k%d", e->prefix, idx);
        rdzv__put_u8(&c->out, RDZV_CMD_SET);
        rdzv__put_blob(&c->out, key, (size_t)kl);
        rdzv__put_blob(&c->out, val, sizeof val);
        rdzv__put_u8(&c->out, RDZV_CMD_GET);
        rdzv__put_blob(&c->out, key, (size_t)kl);
        conn_send(c);
        expect(c, C_OP, 8 + VALUE_LEN);
    } else if (e->mode == 1) {
        int kl = snprintf(key, sizeof key, "%s/count", e->prefix);
        rdzv__put_u8(&c->out, RDZV_CMD_ADD);
        rdzv__put_blob(&c->out, key, (size_t)kl);
        rdzv__put_i64(&c->out, 1);
        conn_send(c);
        expect(c, C_ADD, 8);
    } else {
        c->state = C_DONE;
        e->ready++;
    }
}

static void on_ready_conn(bconn_t *c) {
    /* With no token, as PyTorch's client does: VALIDATE, then a PING whose echo ends the
     * handshake. */
    c->hs = (rdzv_handshake_t){.token = token.data, .token_len = token.len, .ping_nonce = 1};
    if (rdzv__handshake_hello_encode(&c->hs, &c->out) < 0)
        die("handshake");
    conn_send(c);
    if (token.len > 0)
        expect(c, C_HELLO, RDZV_HELLO_REPLY_LEN);
    else
        expect(c, C_PING, 4);
}

/* A whole reply for c's state has arrived. */
static void on_reply(engine_t *e, bconn_t *c) {
    char key[128];
    switch (c->state) {
    case C_HELLO:
        if (rdzv__handshake_proof_encode(&c->hs, c->in + 1, &c->out) < 0)
            die("handshake");
        conn_send(c);
        expect(c, C_PROOF, RDZV_PROOF_REPLY_LEN);
        return;
    case C_PROOF:
        if (c->in[0] != 0) {
            fprintf(stderr, "bench_store: token refused\n");
            exit(1);
        }
        e->connecting--;
        next_request(e, c);
        return;
    case C_PING:
        e->connecting--;
        next_request(e, c);
        return;
    case C_OP:
        e->ops++;
        next_request(e, c);
        return;
    case C_ADD: {
        int64_t v;
        memcpy(&v, c->in, 8);
        int kl = snprintf(key, sizeof key, "%s/barrier", e->prefix);
        if (v == e->n) {
            rdzv__put_u8(&c->out, RDZV_CMD_SET);
            rdzv__put_blob(&c->out, key, (size_t)kl);
            rdzv__put_blob(&c->out, "1", 1);
        }
        rdzv__put_u8(&c->out, RDZV_CMD_WAIT);
        rdzv__put_u64(&c->out, 1);
        rdzv__put_blob(&c->out, key, (size_t)kl);
        conn_send(c);
        expect(c, C_WAIT, 1);
        return;
    }
    case C_WAIT: {
        int kl = snprintf(key, sizeof key, "%s/id", e->prefix);
        rdzv__put_u8(&c->out, RDZV_CMD_GET);
        rdzv__put_blob(&c->out, key, (size_t)kl);
        conn_send(c);
        expect(c, C_GET, 8 + ID_LEN);
        return;
    }
    case C_GET:
        c->state = C_DONE;
        e->done++;
        return;
    default: return;
    }
}

/* Runs the loop until stop() says so or the phase bound passes. Returns 0 or -1 (timed out). */
static int run_engine(engine_t *e, uint64_t until_ns, int (*stop)(engine_t *)) {
    struct epoll_event evs[512];
    uint64_t bound = ddp_now_ms() + PHASE_BOUND_MS;
    while (!stop(e)) {
        while (e->next_connect < e->n && e->connecting < e->window)
            start_connect(e);
        if (until_ns && ddp_now_ns() >= until_ns)
            return 0;
        if (ddp_now_ms() > bound)
            return -1;
        int k = epoll_wait(e->ep, evs, 512, 100);
        for (int i = 0; i < k; i++) {
            bconn_t *c = evs[i].data.ptr;
            if (c->state == C_CONNECTING) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                if (soerr != 0) {
                    errno = soerr;
                    die("connect");
                }
                struct epoll_event ev = {EPOLLIN, {.ptr = c}};
                epoll_ctl(e->ep, EPOLL_CTL_MOD, c->fd, &ev);
                on_ready_conn(c);
                continue;
            }
            for (;;) {
                ssize_t r = recv(c->fd, c->in + c->got, c->want - c->got, 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    break;
                if (r <= 0) {
                    fprintf(stderr, "bench_store: server closed a connection (state %d)\n",
                            c->state);
                    exit(1);
                }
                c->got += (size_t)r;
                if (c->got < c->want)
                    continue;
                /* One request in flight: the next reply cannot be here before the request just
                 * sent is served, and level-triggered epoll reports it when it is, so no recv
                 * is spent on EAGAIN (the same for every server). */
                on_reply(e, c);
                break;
            }
        }
    }
    return 0;
}

static int stop_never(engine_t *e) {
    (void)e;
    return 0;
}

static int stop_all_done(engine_t *e) {
    return e->done == e->n;
}

static int stop_all_connected(engine_t *e) {
    return e->next_connect == e->n && e->connecting == 0;
}

static int stop_all_ready(engine_t *e) {
    return e->ready == e->n;
}

static void engine_init(engine_t *e, int n, int mode) {
    memset(e, 0, sizeof *e);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    if (e->ep < 0)
        die("epoll_create1");
    e->c = calloc((size_t)n, sizeof *e->c);
    if (e->c == NULL)
        die("calloc");
    e->n = n;
    e->mode = mode;
    /* Connections still in their handshake (connect, VALIDATE, PING or AUTH): PyTorch's
     * TCPStore stalls for seconds when many more arrive at once, so every server gets the
     * same bounded connect window. */
    int64_t w = 32;
    const char *ws = getenv("BENCH_CONNECT_WINDOW");
    if (ws != NULL && ddp_parse_i64(ws, 1, 1 << 20, &w) < 0)
        w = 32;
    e->window = (int)w;
    snprintf(e->prefix, sizeof e->prefix, "b%d/%llu", (int)getpid(),
             (unsigned long long)ddp_now_ns());
}

static void engine_free(engine_t *e) {
    /* Reset instead of FIN: no TIME_WAIT sockets pile up between runs. */
    struct linger lg = {1, 0};
    for (int i = 0; i < e->next_connect; i++) {
        setsockopt(e->c[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(e->c[i].fd);
        ddp_buf_free(&e->c[i].out);
    }
    free(e->c);
    close(e->ep);
}

/* CPU seconds (user + system) process pid has used, from /proc/PID/stat; -1 when unknown. */
static double proc_cpu_s(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The server's PID from BENCH_SERVER_PID (its CPU time is read from /proc), or 0. */
static int server_pid(void) {
    int64_t pid = 0;
    const char *sp = getenv("BENCH_SERVER_PID");
    if (sp == NULL || ddp_parse_i64(sp, 1, INT32_MAX, &pid) < 0)
        return 0;
    return (int)pid;
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Prints | clients | pairs/s | requests/s | server CPU us per pair | client CPU us per pair |
 * (server CPU "-" without BENCH_SERVER_PID): with both sides near 100% of a CPU, the CPU each
 * spends per pair says which is the bottleneck. Returns 0, or -1 when the clients could not all
 * connect or no pair completed (nothing printed). */
static int bench_throughput(int clients, double secs) {
    engine_t e;
    engine_init(&e, clients, 0);
    int spid = server_pid();
    /* Connect everyone, warm up for a fifth of the time, then count. */
    if (run_engine(&e, 0, stop_all_connected) < 0) {
        fprintf(stderr, "bench_store: %d clients did not all connect within %d s\n", clients,
                PHASE_BOUND_MS / 1000);
        engine_free(&e);
        return -1;
    }
    run_engine(&e, ddp_now_ns() + (uint64_t)(secs * 0.2e9), stop_never);
    e.ops = 0;
    double s0 = spid ? proc_cpu_s(spid) : -1, c0 = self_cpu_s();
    uint64_t t0 = ddp_now_ns();
    run_engine(&e, t0 + (uint64_t)(secs * 1e9), stop_never);
    double dt = (double)(ddp_now_ns() - t0) / 1e9;
    double s1 = spid ? proc_cpu_s(spid) : -1, c1 = self_cpu_s();
    if (e.ops == 0) {
        fprintf(stderr, "bench_store: no SET+GET pair completed in %.0f s\n", secs);
        engine_free(&e);
        return -1;
    }
    double pairs = (double)e.ops;
    char scpu[32] = "-";
    if (s0 >= 0 && s1 >= 0)
        snprintf(scpu, sizeof scpu, "%.2f", (s1 - s0) * 1e6 / pairs);
    printf("| %d | %.0f | %.0f | %s | %.2f |\n", clients, (double)e.ops / dt,
           2.0 * (double)e.ops / dt, scpu, (c1 - c0) * 1e6 / pairs);
    engine_free(&e);
    return 0;
}

/* Prints | N | seconds | ranks/s | server CPU s | client CPU s |, or a "timed out" row. Returns 0,
 * or -1 when the rendezvous did not complete within PHASE_BOUND_MS. */
static int bench_rendezvous(int n) {
    engine_t e;
    engine_init(&e, n, 1);
    /* Rank 0's 128-byte id is in the store before the others arrive. */
    int fd = dial_blocking(port);
    handshake_blocking(fd);
    ddp_buf_t b = DDP_BUF_INIT;
    char key[128], id[ID_LEN];
    memset(id, 'i', sizeof id);
    int kl = snprintf(key, sizeof key, "%s/id", e.prefix);
    rdzv__put_u8(&b, RDZV_CMD_SET);
    rdzv__put_blob(&b, key, (size_t)kl);
    rdzv__put_blob(&b, id, sizeof id);
    rdzv__put_u8(&b, RDZV_CMD_PING);
    rdzv__put_u32(&b, 9);
    send_all(fd, b.data, b.len);
    uint32_t echo;
    recv_all(fd, &echo, 4);
    close(fd);
    ddp_buf_free(&b);
    int spid = server_pid();
    double s0 = spid ? proc_cpu_s(spid) : -1, c0 = self_cpu_s();
    uint64_t t0 = ddp_now_ns();
    int rc = run_engine(&e, 0, stop_all_done);
    double dt = (double)(ddp_now_ns() - t0) / 1e9;
    double s1 = spid ? proc_cpu_s(spid) : -1, c1 = self_cpu_s();
    char scpu[32] = "-";
    if (s0 >= 0 && s1 >= 0)
        snprintf(scpu, sizeof scpu, "%.2f", s1 - s0);
    if (rc < 0)
        printf("| %d | timed out (%d done) | | | |\n", n, e.done);
    else
        printf("| %d | %.3f | %.0f | %s | %.2f |\n", n, dt, (double)n / dt, scpu, c1 - c0);
    engine_free(&e);
    return rc;
}

/* Prints | connections | RSS before KiB | RSS after KiB | bytes per connection | for n idle
 * connections to the server of PID pid. Returns 0, or -1 when they were not all ready within
 * PHASE_BOUND_MS (a "timed out" row) or the server's RSS cannot be read (nothing printed). */
static int bench_idle_rss(int pid, int n) {
    engine_t e;
    engine_init(&e, n, 2);
    long before = bench_proc_kib(pid, "VmRSS");
    if (run_engine(&e, 0, stop_all_ready) < 0) {
        printf("| %d | timed out | |\n", n);
        engine_free(&e);
        return -1;
    }
    /* One PING round on the last connection makes sure the server has processed all. */
    usleep(200000);
    long after = bench_proc_kib(pid, "VmRSS");
    engine_free(&e);
    if (before < 0 || after < 0) {
        fprintf(stderr, "bench_store: cannot read the RSS of pid %d\n", pid);
        return -1;
    }
    printf("| %d | %ld | %ld | %.0f |\n", n, before, after, (double)(after - before) * 1024.0 / n);
    return 0;
}

int main(int argc, char **argv) {
    int64_t v, w;
    int rc = 0;
    raise_nofile();
    const char *sc = getenv("BENCH_SERVER_CPU");
    if (sc != NULL && ddp_parse_i64(sc, 0, 1023, &v) == 0) {
        server_cpu = (int)v;
        pin_to(server_cpu == 0 ? 1 : 0);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_token_load(NULL, &token, NULL, &err) < 0) {
        fprintf(stderr, "bench_store: %s\n", err.text);
        return 2;
    }
    if (argc < 3 || ddp_parse_i64(argv[2], 1, 65535, &v) < 0) {
        fprintf(stderr, "usage: bench_store latency|throughput|rendezvous|idle-rss PORT ...\n");
        return 2;
    }
    port = (uint16_t)v;
    if (strcmp(argv[1], "latency") == 0) {
        int iters = 20000, ddprun = 0;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--ddprun") == 0)
                ddprun = 1;
            else if (ddp_parse_i64(argv[i], 100, 10000000, &w) == 0)
                iters = (int)w;
        }
        bench_latency(iters, ddprun);
    } else if (strcmp(argv[1], "throughput") == 0 && argc == 5 &&
               ddp_parse_i64(argv[3], 1, 16384, &v) == 0 &&
               ddp_parse_i64(argv[4], 1, 60, &w) == 0) {
        rc = bench_throughput((int)v, (double)w);
    } else if (strcmp(argv[1], "rendezvous") == 0 && argc == 4 &&
               ddp_parse_i64(argv[3], 1, 1000000, &v) == 0) {
        rc = bench_rendezvous((int)v);
    } else if (strcmp(argv[1], "idle-rss") == 0 && argc == 5 &&
               ddp_parse_i64(argv[3], 1, 4194304, &v) == 0 &&
               ddp_parse_i64(argv[4], 1, 1000000, &w) == 0) {
        rc = bench_idle_rss((int)v, (int)w);
    } else {
        fprintf(stderr, "bench_store: bad arguments\n");
        return 2;
    }
    ddp_buf_free(&token);
    return rc < 0 ? 1 : 0;
}
