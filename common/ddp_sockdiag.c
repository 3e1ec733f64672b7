/* SPDX-License-Identifier: Apache-2.0
 * ddp_sockdiag: the owner of a local peer's TCP socket, from the kernel's socket diagnostics
 * (NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY with an exact 4-tuple: one socket, no dump). */
#include "ddp_sockdiag.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp_net.h"
#include "ddp_time.h"

int ddp_sock_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)sa;
        return (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a6))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127;
    }
    return 0;
}

/* One end of the 4-tuple as the kernel's inet_diag_sockid holds it: the address in 16 bytes
 * (an IPv4 address in the first 4) and the port, both in network order. */
typedef struct endpoint {
    int family;
    uint8_t addr[16];
    uint16_t port;
} endpoint_t;

/* Reads sa into *e; a v4-mapped IPv6 address becomes the IPv4 one, as the kernel keeps such a
 * connection in its IPv4 table. Returns 0 or -EAFNOSUPPORT. */
static int endpoint_of(const struct sockaddr *sa, endpoint_t *e) {
    memset(e, 0, sizeof *e);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)sa;
        e->family = AF_INET;
        memcpy(e->addr, &a4->sin_addr, 4);
        e->port = a4->sin_port;
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
        e->port = a6->sin6_port;
        if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
            e->family = AF_INET;
            memcpy(e->addr, &a6->sin6_addr.s6_addr[12], 4);
        } else {
            e->family = AF_INET6;
            memcpy(e->addr, &a6->sin6_addr, 16);
        }
        return 0;
    }
    return -EAFNOSUPPORT;
}

/* 1 when the reply's address (family fam, 16 bytes at got) is e's: an IPv4 socket asked for may
 * be an IPv6 one that holds it v4-mapped. */
static int addr_matches(int fam, const void *got, const endpoint_t *e) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const uint8_t *g = got;
    if (e->family == AF_INET6)
        return fam == AF_INET6 && memcmp(g, e->addr, 16) == 0;
    if (fam == AF_INET)
        return memcmp(g, e->addr, 4) == 0;
    return fam == AF_INET6 && memcmp(g, mapped, 12) == 0 && memcmp(g + 12, e->addr, 4) == 0;
}

/* Reads the kernel's answer to request seq from fd. Returns 0 with *out filled, or -errno. */
static int read_answer(int fd, uint32_t seq, const endpoint_t *peer, const endpoint_t *local,
                       uint64_t deadline, ddp_sock_owner_t *out) {
    /* One inet_diag_msg and its attributes: 8 KiB holds it many times over (the kernel sizes
     * its answer to the page, and the attributes asked for are none). */
    union {
        struct nlmsghdr h;
        uint8_t b[8192];
    } buf;
    for (;;) {
        int rc = ddp_wait_fd(fd, POLLIN, deadline);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return -ETIMEDOUT;
        ssize_t n = recv(fd, buf.b, sizeof buf.b, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return -errno;
        int len = (int)n;
        for (struct nlmsghdr *h = &buf.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_seq != seq)
                continue; /* not ours (cannot happen on a fresh socket, but costs nothing) */
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e))
                    return -EPROTO;
                return e->error < 0 ? e->error : -EPROTO;
            }
            if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
                h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                return -EPROTO;
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            /* The kernel's exact lookup falls back to a listener on peer's address and port
             * when no connection matches: only the connection itself is an answer. */
            if (m->id.idiag_sport != peer->port || m->id.idiag_dport != local->port ||
                !addr_matches(m->idiag_family, m->id.idiag_src, peer) ||
                !addr_matches(m->idiag_family, m->id.idiag_dst, local))
                return -ENOENT;
            out->uid = m->idiag_uid;
            out->inode = m->idiag_inode;
            out->state = m->idiag_state;
            return 0;
        }
        return -EPROTO;
    }
}

int ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local, int timeout_ms,
                       ddp_sock_owner_t *out) {
    endpoint_t p, l;
    if (endpoint_of(peer, &p) < 0 || endpoint_of(local, &l) < 0 || p.family != l.family)
        return -EAFNOSUPPORT;
    struct {
        struct nlmsghdr h;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST; /* no NLM_F_DUMP: the one socket with this 4-tuple */
    req.h.nlmsg_seq = 1;
    req.r.sdiag_family = (uint8_t)p.family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0U;
    /* Seen from the peer's side: its own address is the source, ours the destination. */
    req.r.id.idiag_sport = p.port;
    req.r.id.idiag_dport = l.port;
    memcpy(req.r.id.idiag_src, p.addr, sizeof req.r.id.idiag_src);
    memcpy(req.r.id.idiag_dst, l.addr, sizeof req.r.id.idiag_dst);
    if (p.family == AF_INET6 && peer->sa_family == AF_INET6)
        req.r.id.idiag_if = ((const struct sockaddr_in6 *)peer)->sin6_scope_id;
    req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

    uint64_t deadline = ddp_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -errno;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    int rc = 0;
    if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0)
        rc = -errno;
    else
        rc = read_answer(fd, req.h.nlmsg_seq, &p, &l, deadline, out);
    close(fd);
    return rc;
}
