/* bench_floor: the kernel's floor for bench_store's throughput workload, not a store.
 *
 * One thread, one epoll loop, level-triggered, one read() and one write() per request batch:
 * it parses just enough of the TCPStore frames bench_store sends (VALIDATE, PING, SET, GET) to
 * answer them with canned replies (PING's echo, a GET of 16 'f' bytes), and keeps no keys. Any
 * store server pays at least these system calls and this TCP work per request; the gap between
 * this row and a real server in bench/store.sh is what the server's own code costs, and the
 * ratio of this row to TCPStore bounds what any server could show against it on this machine.
 *
 *   bench_floor           prints "listening on 127.0.0.1:PORT", serves until SIGTERM */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv_frame_int.h"

#define MAX_CONNS 65536
#define IN_CAP 4096
#define REPLY_LEN 16

typedef struct {
    uint8_t in[IN_CAP];
    size_t len;
} floor_conn_t;

static floor_conn_t *conns[MAX_CONNS];

static void die(const char *what) {
    fprintf(stderr, "bench_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Length of a blob (u64 length + bytes) at p, or 0 when it is not all there. */
static size_t blob_len(const uint8_t *p, size_t avail) {
    uint64_t n;
    if (avail < 8)
        return 0;
    memcpy(&n, p, 8);
    return n <= avail - 8 ? 8 + (size_t)n : 0;
}

/* Parses one whole frame at p: returns its length and appends its reply to out (*olen), or
 * returns 0 when the frame is not all there yet, or -1 for a command this floor does not know. */
static long one_frame(const uint8_t *p, size_t avail, uint8_t *out, size_t *olen) {
    if (avail < 1)
        return 0;
    size_t k, v;
    switch (p[0]) {
    case RDZV_CMD_VALIDATE: return avail >= 5 ? 5 : 0;
    case RDZV_CMD_PING:
        if (avail < 5)
            return 0;
        memcpy(out + *olen, p + 1, 4);
        *olen += 4;
        return 5;
    case RDZV_CMD_SET:
        if ((k = blob_len(p + 1, avail - 1)) == 0 || (v = blob_len(p + 1 + k, avail - 1 - k)) == 0)
            return 0;
        return (long)(1 + k + v);
    case RDZV_CMD_GET: {
        if ((k = blob_len(p + 1, avail - 1)) == 0)
            return 0;
        uint64_t n = REPLY_LEN;
        memcpy(out + *olen, &n, 8);
        memset(out + *olen + 8, 'f', REPLY_LEN);
        *olen += 8 + REPLY_LEN;
        return (long)(1 + k);
    }
    default: return -1;
    }
}

static void drop(int ep, int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    free(conns[fd]);
    conns[fd] = NULL;
}

static void on_readable(int ep, int fd) {
    floor_conn_t *c = conns[fd];
    ssize_t r = read(fd, c->in + c->len, IN_CAP - c->len);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        drop(ep, fd);
        return;
    }
    c->len += (size_t)r;
    uint8_t out[IN_CAP];
    size_t olen = 0, off = 0;
    long n = 0;
    while (olen + 8 + REPLY_LEN <= sizeof out &&
           (n = one_frame(c->in + off, c->len - off, out, &olen)) > 0)
        off += (size_t)n;
    if (n < 0 || (off == 0 && c->len == IN_CAP)) {
        drop(ep, fd);
        return;
    }
    memmove(c->in, c->in + off, c->len - off);
    c->len -= off;
    if (olen > 0 && write(fd, out, olen) != (ssize_t)olen)
        drop(ep, fd); /* replies are small: a short write means the client is gone */
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0)
        die("socket");
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* accepted sockets inherit it */
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4096) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0)
        die("listen");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {EPOLLIN, {.fd = l}};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0)
        die("epoll");
    printf("listening on 127.0.0.1:%u\n", ntohs(a.sin_port));
    fflush(stdout);
    struct epoll_event evs[512];
    for (;;) {
        int k = epoll_wait(ep, evs, 512, -1);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd != l) {
                on_readable(ep, fd);
                continue;
            }
            int c;
            while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                struct epoll_event ce = {EPOLLIN, {.fd = c}};
                if (c >= MAX_CONNS) {
                    close(c);
                    continue;
                }
                conns[c] = calloc(1, sizeof *conns[c]);
                if (conns[c] == NULL || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0) {
                    free(conns[c]);
                    conns[c] = NULL;
                    close(c);
                }
            }
        }
    }
}
