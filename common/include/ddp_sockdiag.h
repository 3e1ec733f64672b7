/* SPDX-License-Identifier: Apache-2.0
 * ddp_sockdiag: who owns the other end of a TCP connection whose peer lives on this host, asked
 * of the kernel (NETLINK_SOCK_DIAG, inet_diag), and whether an address is loopback. The workers'
 * store uses it to serve only its own user's processes (docs/protocol.md, "The workers' store"). */
#ifndef DDP_SOCKDIAG_H
#define DDP_SOCKDIAG_H

#include <stdint.h>
#include <sys/socket.h>

/* What the kernel says of one socket. */
typedef struct ddp_sock_owner {
    uint32_t uid;   /* the socket's owner: the effective uid of the process that created it */
    uint64_t inode; /* the socket's inode; 0 when no file holds it any more (its owner closed
                       it, or it lingers in TIME_WAIT): uid then says nothing (the kernel
                       reports 0) */
    uint8_t state;  /* its TCP state (TCP_ESTABLISHED, ...) */
} ddp_sock_owner_t;

/* 1 when sa (AF_INET or AF_INET6) is a loopback address: 127.0.0.0/8, ::1, or 127.0.0.0/8
 * mapped into IPv6 (::ffff:127.x.y.z); 0 otherwise. */
int ddp_sock_is_loopback(const struct sockaddr *sa);

/* Looks up, in this network namespace, the TCP socket at the other end of a connection this
 * process holds: the one whose own address is peer and whose remote address is local (peer and
 * local as getpeername and getsockname give them on our socket). Both must be AF_INET, or both
 * AF_INET6 (v4-mapped ones are looked up as IPv4). The query is one netlink round trip answered
 * by the kernel at once; timeout_ms bounds the wait for it all the same.
 * Returns 0 with *out filled; -ENOENT when no such socket is found (the peer is on another host
 * or in another network namespace, or the kernel has no TCP socket diagnostics); -ETIMEDOUT
 * when no answer came in time; -EAFNOSUPPORT for other families; another -errno when the query
 * fails (-EPROTO for a reply that does not parse or does not name the socket asked for). */
int ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local, int timeout_ms,
                       ddp_sock_owner_t *out);

#endif
