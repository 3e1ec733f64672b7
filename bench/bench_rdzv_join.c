/* bench_rdzv_join: N simulated agents join one rendezvous run on a ddp-rendezvous daemon started
 * with --no-auth; reports the time from the last JOIN sent to the last reply received (the round
 * closes at once when max_nodes = N have joined). Usage: bench_rdzv_join PORT N [RUNS]. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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

/* One run: returns ms from the last JOIN written to the last reply read, or -1. */
static double run_once(int port, int n, int run) {
    int *fds = calloc((size_t)n, sizeof *fds);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ddp_buf_t hello = DDP_BUF_INIT;
    rdzv__put_u8(&hello, RDZV_CMD_VALIDATE);
    rdzv__put_u32(&hello, RDZV_VALIDATE_MAGIC);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sin, sizeof sin) < 0 ||
            write_all(fds[i], hello.data, hello.len) < 0) {
            fprintf(stderr, "bench_rdzv_join: connection %d: %s\n", i, strerror(errno));
            return -1;
        }
    }
    ddp_buf_t *frames = calloc((size_t)n, sizeof *frames);
    for (int i = 0; i < n; i++) {
        rdzv_join_req_t req;
        memset(&req, 0, sizeof req);
        snprintf(req.run_id, sizeof req.run_id, "bench-%d-%d-%d", (int)getpid(), n, run);
        snprintf(req.host, sizeof req.host, "10.0.%d.%d", i / 250, i % 250 + 1);
        req.want_node_rank = -1;
        req.nproc = 8;
        req.master_port = 29500;
        req.cfg.min_nodes = n;
        req.cfg.max_nodes = n;
        req.cfg.join_timeout_ms = 60000;
        rdzv_join_req_encode(&frames[i], &req);
    }
    for (int i = 0; i < n; i++)
        if (write_all(fds[i], frames[i].data, frames[i].len) < 0)
            return -1;
    double t0 = now_ms();
    /* Read every reply (they come when the round closes). */
    int left = n;
    size_t *got = calloc((size_t)n, sizeof *got);
    uint8_t buf[4096];
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    while (left > 0) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (got[i] != (size_t)-1)
                p[k++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(p, (nfds_t)k, 30000) <= 0)
            return -1;
        for (int j = 0; j < k; j++) {
            if (!(p[j].revents & POLLIN))
                continue;
            ssize_t r = read(p[j].fd, buf, sizeof buf);
            if (r <= 0)
                return -1;
            for (int i = 0; i < n; i++)
                if (fds[i] == p[j].fd) {
                    /* The first bytes are the command echo and the status: 0 = joined. */
                    if (got[i] == 0 && (r < 2 || buf[0] != RDZV_CMD_RDZV_JOIN || buf[1] != 0)) {
                        fprintf(stderr, "bench_rdzv_join: agent %d was refused\n", i);
                        return -1;
                    }
                    got[i] += (size_t)r;
                    if (got[i] >= 2 + 8 * 5) { /* cmd, status and the first integers */
                        got[i] = (size_t)-1;
                        left--;
                    }
                    break;
                }
        }
    }
    double t = now_ms() - t0;
    for (int i = 0; i < n; i++) {
        close(fds[i]);
        ddp_buf_free(&frames[i]);
    }
    free(fds);
    free(frames);
    free(got);
    free(p);
    ddp_buf_free(&hello);
    return t;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_rdzv_join PORT N [RUNS]\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]), runs = argc > 3 ? atoi(argv[3]) : 5;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    double best = 1e30, sum = 0;
    double *v = calloc((size_t)runs, sizeof *v);
    for (int r = 0; r < runs; r++) {
        v[r] = run_once(port, n, r);
        if (v[r] < 0) {
            fprintf(stderr, "bench_rdzv_join: run %d failed\n", r);
            return 1;
        }
        sum += v[r];
        if (v[r] < best)
            best = v[r];
    }
    /* median */
    for (int i = 0; i < runs; i++)
        for (int j = i + 1; j < runs; j++)
            if (v[j] < v[i]) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    printf("| %d agents join one run: last JOIN -> every reply | %.2f ms median of %d (min %.2f) "
           "| target < 1000 ms |\n",
           n, v[runs / 2], runs, best);
    free(v);
    return 0;
}
