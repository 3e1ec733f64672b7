/* SPDX-License-Identifier: Apache-2.0
 * ddp_net: TCP helpers shared by the store client (rendezvous/) and the CPU backend's ring
 * (worker_template/). Every wait is bounded by a deadline on the ddp_now_ms() clock, so an
 * unreachable peer costs the caller's timeout, never the kernel's SYN retries (minutes). */
#ifndef DDP_NET_H
#define DDP_NET_H

#include <stdint.h>
#include <sys/socket.h>

/* Milliseconds from now until deadline for poll(): 0 once it has passed, -1 (forever) for
 * UINT64_MAX, at most INT32_MAX. */
int ddp_ms_left(uint64_t deadline);

/* Waits until fd is ready for events (POLLIN, POLLOUT) or deadline passes (EINTR retried).
 * Returns 1 when ready, 0 when the deadline came first, or -errno. */
int ddp_wait_fd(int fd, short events, uint64_t deadline);

/* 1 when fd, a connected TCP socket, is connected to itself: a connect to a local port where
 * nothing listens can be given that same port as its source, and TCP's simultaneous open then
 * completes it. Such a socket holds the port, so the server meant to listen there cannot bind
 * it: callers treat it as refused. */
int ddp_tcp_is_self_connected(int fd);

/* Bounds on one connect that gets no answer (its SYN lost to a link that was down, or to a full
 * accept queue): callers that retry abandon a try after DDP_CONNECT_TRY_FIRST_MS, double the
 * bound per try up to DDP_CONNECT_TRY_MAX_MS, and connect again on a new socket. Waiting on the
 * kernel's own SYN backoff (1 s, 3 s, 7 s, 15 s, ...) left a peer connecting seconds after the
 * link came back. */
#define DDP_CONNECT_TRY_FIRST_MS 250
#define DDP_CONNECT_TRY_MAX_MS 4000

/* Connects a new TCP socket of addr's family to addr before deadline. bufsize > 0 sets
 * SO_SNDBUF and SO_RCVBUF before connecting (TCP agrees the window scale in the handshake).
 * Returns the connected fd (non-blocking, close-on-exec, TCP_NODELAY), or -errno: -ETIMEDOUT
 * when the deadline came first, -ECONNREFUSED when nothing listens there (a socket connected to
 * itself included). */
int ddp_tcp_connect(const struct sockaddr *addr, socklen_t addrlen, uint64_t deadline, int bufsize);

#endif
