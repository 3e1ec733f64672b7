/* SPDX-License-Identifier: Apache-2.0
 * The workers' store (rdzv_server_opts_t.worker_store) in the same process
 * (store_client_fixture.h): PyTorch <= 2.0's numbering, no rendezvous commands, reset between
 * groups, limits that follow the workers, and owner_only (ddp_tcp_peer_owner is wrapped by the
 * linker, module.mk, so that its lookup can fail). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_sockdiag.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_server.h"
#include "rdzv_server_int.h"
#include "store_client_fixture.h"

static server_thread_t *server_up_workers(int auth_idle_ms) {
    rdzv_server_opts_t o = {0};
    o.no_auth = 1;
    o.worker_store = 1;
    o.auth_idle_ms = auth_idle_ms;
    return server_up_with(&o);
}

static int64_t read_i64(int fd) {
    uint8_t r[8];
    raw_read(fd, r, 8);
    return (int64_t)rdzv__get_u64(r);
}

/* PyTorch <= 2.0's numbering, byte for byte as its client sends it (SET 0, COMPARE_SET 1, GET
 * 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, DELETE_KEY 8; no VALIDATE), on a connection whose
 * first frame is not VALIDATE; WATCH_KEY (7) closes the connection. Today's numbering works on
 * the same store beside it, and a connection that never sends stays open past the handshake
 * deadline of the authenticated store (PyTorch <= 2.0's callback connection does that). */
static void test_worker_store_legacy_numbering(void **state) {
    (void)state;
    server_thread_t *st = server_up_workers(100);
    int idle = raw_connect_bare(st->port);
    int fd = raw_connect_bare(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, 0, "/a"); /* SET /a = "one" */
    assert_int_equal(rdzv__put_blob(&b, "one", 3), 0);
    put_key_cmd(&b, 3, "/n"); /* ADD /n 5 -> 5 */
    assert_int_equal(rdzv__put_u64(&b, 5), 0);
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 5);
    put_key_cmd(&b, 2, "/a"); /* GET /a -> "one" */
    send_all(fd, &b);
    uint8_t r[16];
    assert_int_equal(read_i64(fd), 3);
    raw_read(fd, r, 3);
    assert_memory_equal(r, "one", 3);
    put_key_cmd(&b, 1, "/a"); /* COMPARE_SET /a one -> two */
    assert_int_equal(rdzv__put_blob(&b, "one", 3), 0);
    assert_int_equal(rdzv__put_blob(&b, "two", 3), 0);
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 3);
    raw_read(fd, r, 3);
    assert_memory_equal(r, "two", 3);
    for (uint8_t cmd = 4; cmd <= 5; cmd++) { /* CHECK, then WAIT, on /a and /n: ready */
        assert_int_equal(rdzv__put_u8(&b, cmd), 0);
        assert_int_equal(rdzv__put_u64(&b, 2), 0);
        assert_int_equal(rdzv__put_blob(&b, "/a", 2), 0);
        assert_int_equal(rdzv__put_blob(&b, "/n", 2), 0);
        send_all(fd, &b);
        raw_read(fd, r, 1);
        assert_int_equal(r[0], 0);
    }
    assert_int_equal(rdzv__put_u8(&b, 6), 0); /* GETNUMKEYS -> 2 */
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 2);
    put_key_cmd(&b, 8, "/a"); /* DELETE_KEY /a -> 1 */
    send_all(fd, &b);
    assert_int_equal(read_i64(fd), 1);
    /* Today's numbering on another connection: /n is 5, /a is gone. */
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int64_t v = 0;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_add(c, "/n", 1, &v, &err), 0);
    assert_int_equal(v, 6);
    int ready = 1;
    const char *ka[] = {"/a"};
    assert_int_equal(rdzv_client_check(c, ka, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    usleep(300 * 1000); /* three handshake deadlines */
    assert_true(raw_still_open(idle));
    put_key_cmd(&b, 7, "/a"); /* WATCH_KEY: not served */
    send_all(fd, &b);
    assert_true(raw_closed(fd));
    assert_true(raw_still_open(idle));
    assert_int_equal(stat_of(c, "idle_closed"), 0);
    close(fd);
    close(idle);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* The workers' store serves no rendezvous command (a JOIN closes the connection, the store
 * keeps serving) and cannot be started with a token. */
static void test_worker_store_refuses_rendezvous(void **state) {
    (void)state;
    server_thread_t *st = server_up_workers(0);
    int fd = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    join_frame(&b, "127.0.0.1");
    send_all(fd, &b);
    ddp_buf_free(&b);
    assert_true(raw_closed(fd));
    close(fd);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    assert_int_equal(stat_of(c, "bad_frames"), 1);
    rdzv_client_free(c);
    server_down(st);
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    o.token = good_token;
    o.token_len = strlen(good_token);
    o.worker_store = 1;
    rdzv_server_thread_t *t = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_thread_start(&o, &t, &err), DDP_EUSAGE);
    assert_null(t);
    assert_non_null(strstr(err.text, "cannot present a token"));
}

/* rdzv_server_reset, on the server's own loop (this thread): every connection is closed (a
 * parked WAIT too), every key and queue dropped, the memory account back where it started, and
 * the same port serves the next group, which sees none of the previous group's keys. */
static void test_worker_store_reset(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    uint16_t port = rdzv_server_port(s);
    rdzv_server_stats_t st0, st1;
    rdzv_server_stats(s, &st0);
    /* w: PyTorch <= 2.0's numbering, a SET and a WAIT that parks; q: today's, a queue item;
     * a: a GETNUMKEYS once those ran. */
    int a = raw_connect_bare(port), w = raw_connect_bare(port), q = raw_connect(port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, 0, "/worker/attempt_0/k");
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    assert_int_equal(rdzv__put_u8(&b, 5), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "/never", 6), 0);
    send_all(w, &b);
    put_push(&b, "/q", "item");
    send_all(q, &b);
    for (int i = 0; i < 50; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(rdzv__put_u8(&b, 6), 0);
    send_all(a, &b);
    loop_until_readable(&loop, a);
    assert_int_equal(read_i64(a), 1);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, 1);
    assert_int_equal(st1.queued, 1);
    assert_int_equal(st1.waiting, 1);
    rdzv_server_reset(s);
    loop_until_readable(&loop, a);
    assert_true(raw_closed(a));
    loop_until_readable(&loop, w);
    assert_true(raw_closed(w));
    loop_until_readable(&loop, q);
    assert_true(raw_closed(q));
    for (int i = 0; i < 10; i++) /* the close callbacks */
        uv_run(&loop, UV_RUN_NOWAIT);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.conns, 0);
    assert_int_equal(st1.keys, 0);
    assert_int_equal(st1.queued, 0);
    assert_int_equal(st1.waiting, 0);
    assert_int_equal(st1.mem_used, st0.mem_used);
    close(a);
    close(w);
    close(q);
    /* The next group, on the same port: CHECK of the old key is not ready. */
    a = raw_connect_bare(port);
    assert_int_equal(rdzv__put_u8(&b, 4), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "/worker/attempt_0/k", 19), 0);
    send_all(a, &b);
    loop_until_readable(&loop, a);
    uint8_t r;
    raw_read(a, &r, 1);
    assert_int_equal(r, RDZV_CHECK_NOT_READY);
    close(a);
    ddp_buf_free(&b);
    rdzv_server_close(s, NULL, NULL);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    }
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A metric line's value from rdzv_server_metrics (-1 when missing). */
static long long metric_of(const rdzv_server_t *s, const char *name) {
    ddp_buf_t m = DDP_BUF_INIT;
    assert_int_equal(rdzv_server_metrics(s, &m), 0);
    assert_int_equal(ddp_buf_append(&m, "", 1), 0);
    char want[160];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr((const char *)m.data, want);
    long long v = at ? strtoll(at + strlen(want), NULL, 10) : -1;
    ddp_buf_free(&m);
    return v;
}

/* The workers' store's default limits follow the workers it serves (RDZV_WSTORE_*), at start
 * and through rdzv_server_set_workers; limits the caller chose stay as given. */
static void test_worker_store_limits_follow_workers(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .workers = 2};
    rdzv_server_t *s = NULL, *fixed = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 2 * 16);
    assert_int_equal(metric_of(s, "ddprun_store_memory_limit_bytes"), (64 + 2 * 16) << 20);
    rdzv_server_set_workers(s, 8);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    assert_int_equal(metric_of(s, "ddprun_store_memory_limit_bytes"), (64LL + 8 * 16) << 20);
    rdzv_server_set_workers(s, 0); /* unknown: unchanged */
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    /* 16,000 nodes x 8 ranks: every worker keeps a connection to group rank 0's store, so the
     * limit passes the shared store's 65,536 (2 a worker), as far as the open-file limit allows
     * (the note names the limit it clipped). */
    rdzv_server_set_workers(s, 128000);
    long long lim = metric_of(s, "ddprun_store_connections_limit");
    if (lim != 64 + 2 * 128000)
        assert_non_null(strstr(s->nofile_note, "connection limit 256064 clipped"));
    rdzv_server_set_workers(s, 8);
    assert_int_equal(metric_of(s, "ddprun_store_connections_limit"), 64 + 8 * 16);
    o.max_conns = 10;
    o.max_total_mem = 1 << 20;
    assert_int_equal(rdzv_server_start(&loop, &o, &fixed, &err), 0);
    rdzv_server_set_workers(fixed, 1000);
    assert_int_equal(metric_of(fixed, "ddprun_store_connections_limit"), 10);
    assert_int_equal(metric_of(fixed, "ddprun_store_memory_limit_bytes"), 1 << 20);
    rdzv_server_close(fixed, NULL, NULL);
    rdzv_server_close(s, NULL, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ddp_tcp_peer_owner, wrapped by the linker (module.mk): answers with lookup_fail when it is
 * set, otherwise asks the kernel. */
int __wrap_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out);
int __real_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out);
static int lookup_fail;
int __wrap_ddp_tcp_peer_owner(const struct sockaddr *peer, const struct sockaddr *local,
                              int timeout_ms, ddp_sock_owner_t *out) {
    if (lookup_fail != 0)
        return lookup_fail;
    return __real_ddp_tcp_peer_owner(peer, local, timeout_ms, out);
}

/* owner_only fails closed: a loopback peer whose socket the lookup does not find, or whose
 * lookup fails, is refused (the job's own connection too); a server whose start-up lookup of its
 * own listener fails does not start, and says why. */
static void test_worker_store_owner_fails_closed(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .owner_only = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    int fails[] = {-ENOENT, -ETIMEDOUT};
    for (size_t i = 0; i < 2; i++) {
        lookup_fail = fails[i];
        int fd = raw_connect_bare(rdzv_server_port(s));
        loop_until_readable(&loop, fd);
        assert_true(raw_closed(fd));
        close(fd);
        lookup_fail = 0;
        rdzv_server_stats_t st;
        rdzv_server_stats(s, &st);
        assert_int_equal(st.owner_refused, i + 1);
    }
    rdzv_server_close(s, NULL, NULL);
    lookup_fail = -ENOENT;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), -ENOENT);
    lookup_fail = 0;
    assert_non_null(strstr(err.text, "unable to check who owns the peers of 127.0.0.1:"));
    assert_non_null(strstr(err.text, "tcp_diag"));
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A child that drops to uid 65534, connects to port, sends VALIDATE and PING, and exits 0 when
 * the store closes the connection unanswered, 1 when it answers, 2 when it cannot run. Plain
 * syscalls only: it must not return into cmocka. */
static void stranger_child(int family, uint16_t port) {
    if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
        setresuid(65534, 65534, 65534) < 0)
        _exit(2);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 sa6 = {
        .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int rc = family == AF_INET6 ? connect(fd, (struct sockaddr *)&sa6, sizeof sa6)
                                : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (fd < 0 || rc < 0)
        _exit(2);
    uint8_t req[10] = {RDZV_CMD_VALIDATE, 0, 0, 0, 0, RDZV_CMD_PING, 1, 2, 3, 4}, r[4];
    uint32_t magic = RDZV_VALIDATE_MAGIC;
    memcpy(req + 1, &magic, 4); /* little-endian hosts only, as the store's wire format */
    if (write(fd, req, sizeof req) != (ssize_t)sizeof req) /* a reset already: refused */
        _exit(0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1)
        _exit(2);
    ssize_t n = read(fd, r, sizeof r);
    _exit(n <= 0 ? 0 : 1);
}

/* Runs stranger_child(family, port) and turns loop until it exits; returns its exit status. */
static int stranger_run(uv_loop_t *loop, int family, uint16_t port) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        stranger_child(family, port);
    int status = -1;
    for (int i = 0; i < 10000 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* owner_only: the server's own user is served; run as root, a client of uid 65534 is refused
 * at once (counted in owner_refused, STATS and metrics) and the store serves on; the same on
 * ::1 where the host has IPv6. */
static void test_worker_store_owner_only(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {
        .host = "127.0.0.1", .no_auth = 1, .worker_store = 1, .workers = 1, .owner_only = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    uint16_t port = rdzv_server_port(s);
    int fd = raw_connect(port);
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&b, 7), 0); /* GETNUMKEYS */
    send_all(fd, &b);
    loop_until_readable(&loop, fd);
    assert_int_equal(read_i64(fd), 0);
    if (geteuid() == 0) {
        assert_int_equal(stranger_run(&loop, AF_INET, port), 0);
        rdzv_server_stats_t st;
        rdzv_server_stats(s, &st);
        assert_int_equal(st.owner_refused, 1);
        assert_int_equal(
            metric_of(s, "ddprun_store_connections_closed_total{reason=\"peer_owner\"}"), 1);
        /* The job's own connection carries on. */
        assert_int_equal(rdzv__put_u8(&b, 7), 0);
        send_all(fd, &b);
        loop_until_readable(&loop, fd);
        assert_int_equal(read_i64(fd), 0);
        rdzv_server_t *s6 = NULL;
        o.host = "::1";
        if (rdzv_server_start(&loop, &o, &s6, &err) == 0) {
            assert_int_equal(stranger_run(&loop, AF_INET6, rdzv_server_port(s6)), 0);
            rdzv_server_stats(s6, &st);
            assert_int_equal(st.owner_refused, 1);
            rdzv_server_close(s6, NULL, NULL);
        }
    }
    ddp_buf_free(&b);
    close(fd);
    rdzv_server_close(s, NULL, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_store_legacy_numbering),
        cmocka_unit_test(test_worker_store_refuses_rendezvous),
        cmocka_unit_test(test_worker_store_reset),
        cmocka_unit_test(test_worker_store_limits_follow_workers),
        cmocka_unit_test(test_worker_store_owner_only),
        cmocka_unit_test(test_worker_store_owner_fails_closed),
    };
    return cmocka_run_group_tests_name("rdzv_client_wstore", tests, NULL, NULL);
}
