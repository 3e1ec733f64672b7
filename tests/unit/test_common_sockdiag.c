/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for ddp_sockdiag: the owner of the other end of real loopback connections (IPv4,
 * IPv6 ::1, v4-mapped), as this process's uid and, run as root, as another uid; a 4-tuple that
 * no socket has; a peer that closed its end; and the loopback test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_sockdiag.h"

/* A listener on addr (port 0), returned with its address in *bound. */
static int listen_on(const struct sockaddr *addr, socklen_t len, struct sockaddr_storage *bound) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (addr->sa_family == AF_INET6) {
        int off = 0; /* a v4-mapped address needs a dual-stack socket */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    }
    socklen_t bl = sizeof *bound;
    if (bind(fd, addr, len) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)bound, &bl) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Connects a new socket to bound; returns it. */
static int connect_to(const struct sockaddr_storage *bound) {
    int fd = socket(bound->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len =
        bound->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)bound, len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Looks up the owner of the far end of the accepted socket afd, as the store does. */
static int owner_of(int afd, ddp_sock_owner_t *o) {
    struct sockaddr_storage peer, local;
    socklen_t pl = sizeof peer, ll = sizeof local;
    assert_int_equal(getpeername(afd, (struct sockaddr *)&peer, &pl), 0);
    assert_int_equal(getsockname(afd, (struct sockaddr *)&local, &ll), 0);
    return ddp_tcp_peer_owner((struct sockaddr *)&peer, (struct sockaddr *)&local, 1000, o);
}

/* One connection to a listener on addr: the far end is ours (our uid, the client socket's
 * inode, established). Returns 0, or -1 when the address cannot be bound (no IPv6). */
static int check_own(const struct sockaddr *addr, socklen_t len) {
    struct sockaddr_storage bound;
    int lfd = listen_on(addr, len, &bound);
    if (lfd < 0)
        return -1;
    int cfd = connect_to(&bound);
    assert_true(cfd >= 0);
    int afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(afd >= 0);
    ddp_sock_owner_t o;
    memset(&o, 0xff, sizeof o);
    assert_int_equal(owner_of(afd, &o), 0);
    struct stat st;
    assert_int_equal(fstat(cfd, &st), 0);
    assert_int_equal(o.uid, geteuid());
    assert_int_equal(o.inode, (uint64_t)st.st_ino);
    assert_int_equal(o.state, TCP_ESTABLISHED);

    /* Our own end, asked the other way round, is the accepted socket (not the client's). */
    struct sockaddr_storage peer, local;
    socklen_t pl = sizeof peer, ll = sizeof local;
    assert_int_equal(getpeername(afd, (struct sockaddr *)&peer, &pl), 0);
    assert_int_equal(getsockname(afd, (struct sockaddr *)&local, &ll), 0);
    ddp_sock_owner_t mine;
    assert_int_equal(
        ddp_tcp_peer_owner((struct sockaddr *)&local, (struct sockaddr *)&peer, 1000, &mine), 0);
    assert_int_equal(fstat(afd, &st), 0);
    assert_int_equal(mine.inode, (uint64_t)st.st_ino);

    /* The peer closes its end: what is left of its socket has no file, so no owner to trust. */
    close(cfd);
    usleep(20000);
    int rc = owner_of(afd, &o);
    assert_true(rc == -ENOENT || (rc == 0 && o.inode == 0));
    close(afd);
    close(lfd);
    return 0;
}

static void test_owner_ipv4(void **state) {
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(check_own((struct sockaddr *)&a, sizeof a), 0);
    /* Another loopback address than 127.0.0.1. */
    a.sin_addr.s_addr = htonl(0x7f000102);
    assert_int_equal(check_own((struct sockaddr *)&a, sizeof a), 0);
}

static void test_owner_ipv6(void **state) {
    (void)state;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (check_own((struct sockaddr *)&a, sizeof a) < 0)
        skip(); /* no IPv6 on this host */
}

static void test_owner_v4_mapped(void **state) {
    (void)state;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, "::ffff:127.0.0.1", &a.sin6_addr), 1);
    if (check_own((struct sockaddr *)&a, sizeof a) < 0)
        skip();
}

/* A 4-tuple that no socket has: not found, never a listener on the same port. */
static void test_owner_not_found(void **state) {
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_storage bound;
    int lfd = listen_on((struct sockaddr *)&a, sizeof a, &bound);
    assert_true(lfd >= 0);
    /* "From" the listener's own address and port to a port nobody uses: the kernel's exact
     * lookup would fall back to the listener itself; the helper does not take it. */
    struct sockaddr_in local = a;
    local.sin_port = htons(1);
    ddp_sock_owner_t o;
    assert_int_equal(
        ddp_tcp_peer_owner((struct sockaddr *)&bound, (struct sockaddr *)&local, 1000, &o),
        -ENOENT);
    close(lfd);
    struct sockaddr_un_like {
        sa_family_t f;
    } u = {AF_UNIX};
    assert_int_equal(ddp_tcp_peer_owner((struct sockaddr *)&u, (struct sockaddr *)&a, 1000, &o),
                     -EAFNOSUPPORT);
}

/* Run as root: a client made by a child that dropped to uid 65534 is reported as 65534. */
static void test_owner_other_uid(void **state) {
    (void)state;
    if (geteuid() != 0)
        skip();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_storage bound;
    int lfd = listen_on((struct sockaddr *)&a, sizeof a, &bound);
    assert_true(lfd >= 0);
    int go[2];
    assert_int_equal(pipe2(go, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char b;
        if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
            setresuid(65534, 65534, 65534) < 0)
            _exit(1);
        int cfd = connect_to(&bound);
        if (cfd < 0)
            _exit(2);
        /* Hold the connection until the parent has looked. */
        close(go[1]);
        _exit(read(go[0], &b, 1) < 0 ? 3 : 0);
    }
    close(go[0]);
    int afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(afd >= 0);
    ddp_sock_owner_t o;
    int rc = owner_of(afd, &o);
    close(go[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(rc, 0);
    assert_int_equal(o.uid, 65534);
    assert_true(o.inode != 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(afd);
    close(lfd);
}

static void test_is_loopback(void **state) {
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET};
    struct sockaddr_in6 b = {.sin6_family = AF_INET6};
    const char *v4[] = {"127.0.0.1", "127.255.0.9"}, *not4[] = {"10.0.0.1", "128.0.0.1", "0.0.0.0"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(inet_pton(AF_INET, v4[i], &a.sin_addr), 1);
        assert_true(ddp_sock_is_loopback((struct sockaddr *)&a));
    }
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(inet_pton(AF_INET, not4[i], &a.sin_addr), 1);
        assert_false(ddp_sock_is_loopback((struct sockaddr *)&a));
    }
    const char *v6[] = {"::1", "::ffff:127.0.0.1"}, *not6[] = {"::", "fe80::1", "::ffff:10.0.0.1"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(inet_pton(AF_INET6, v6[i], &b.sin6_addr), 1);
        assert_true(ddp_sock_is_loopback((struct sockaddr *)&b));
    }
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(inet_pton(AF_INET6, not6[i], &b.sin6_addr), 1);
        assert_false(ddp_sock_is_loopback((struct sockaddr *)&b));
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner_ipv4),      cmocka_unit_test(test_owner_ipv6),
        cmocka_unit_test(test_owner_v4_mapped), cmocka_unit_test(test_owner_not_found),
        cmocka_unit_test(test_owner_other_uid), cmocka_unit_test(test_is_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
