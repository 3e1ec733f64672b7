/* SPDX-License-Identifier: Apache-2.0 */
#include "ddp_net.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "ddp_time.h"

int ddp_ms_left(uint64_t deadline) {
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = ddp_now_ms();
    if (now >= deadline)
        return 0;
    uint64_t left = deadline - now;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

int ddp_wait_fd(int fd, short events, uint64_t deadline) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int rc = poll(&p, 1, ddp_ms_left(deadline));
        if (rc > 0)
            return 1;
        if (rc == 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int ddp_tcp_is_self_connected(int fd) {
    struct sockaddr_storage self, peer;
    socklen_t sl = sizeof self, pl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&self, &sl) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || sl != pl)
        return 0;
    if (self.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&self, *b = (const void *)&peer;
        return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    if (self.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&self, *b = (const void *)&peer;
        return a->sin6_port == b->sin6_port &&
               memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
    }
    return 0;
}

int ddp_tcp_connect(const struct sockaddr *addr, socklen_t addrlen, uint64_t deadline,
                    int bufsize) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bufsize > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    int rc = 0;
    /* After EINTR the connect goes on in the background: wait for it like EINPROGRESS. */
    if (connect(fd, addr, addrlen) < 0) {
        rc = -errno;
        if (rc == -EINPROGRESS || rc == -EINTR) {
            int ready = ddp_wait_fd(fd, POLLOUT, deadline);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (ready == 0)
                rc = -ETIMEDOUT;
            else if (ready < 0)
                rc = ready;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                rc = -errno;
            else
                rc = -soerr;
        }
    }
    /* Nothing listening yet, and the kernel picked the target port as our source port: TCP's
     * simultaneous open connected the socket to itself. That is a refusal, to be retried. */
    if (rc == 0 && ddp_tcp_is_self_connected(fd))
        rc = -ECONNREFUSED;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}
