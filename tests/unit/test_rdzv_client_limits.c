/* SPDX-License-Identifier: Apache-2.0
 * Admission and what connections cost the store (store_client_fixture.h): sockets that never
 * finish the handshake are evicted, the eviction log is rate-limited, max_conns meets
 * RLIMIT_NOFILE, and an answered read pushes no ACK of its own (setsockopt is wrapped by the
 * linker, module.mk). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_time.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "rdzv_server_int.h"
#include "store_client_fixture.h"

/* A token server on its own thread with the given connection caps (0 = default). */
static server_thread_t *server_up_conns(size_t max_conns, size_t max_unauth) {
    server_thread_t *st = calloc(1, sizeof *st);
    assert_non_null(st);
    rdzv_server_opts_t o = {0};
    o.host = "127.0.0.1";
    o.token = good_token;
    o.token_len = strlen(good_token);
    o.max_conns = max_conns;
    o.max_unauth_conns = max_unauth;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_server_thread_start(&o, &st->t, &err) < 0)
        fail_msg("server start: %s", err.text);
    st->port = rdzv_server_thread_port(st->t);
    return st;
}

/* Sockets that stop after VALIDATE never authenticate: each newcomer past the handshake cap
 * evicts the oldest, a token holder always gets in, and a newcomer is refused only once every
 * slot holds an authenticated connection. Accepts follow the listen backlog's order, so which
 * sockets go is known. */
static void test_idle_handshakes_evicted(void **state) {
    (void)state;
    server_thread_t *st = server_up_conns(4, 2);
    int fd[6];
    for (int i = 0; i < 6; i++)
        fd[i] = raw_connect(st->port);
    rdzv_client_t *c[5] = {NULL};
    c[0] = must_connect(st->port, good_token, strlen(good_token));
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_ping(c[0], &err), 0);
    for (int i = 0; i < 5; i++)
        assert_true(raw_closed(fd[i])); /* the four idle ones past the cap, then c[0]'s turn */
    assert_true(raw_still_open(fd[5]));
    /* Two more authenticated clients fill max_conns with fd[5]; a fourth evicts fd[5]. */
    for (int i = 1; i < 4; i++)
        c[i] = must_connect(st->port, good_token, strlen(good_token));
    assert_true(raw_closed(fd[5]));
    /* Every slot authenticated: the newcomer is refused, the others keep working. */
    assert_true(connect_to(st->port, good_token, strlen(good_token), &c[4], &err) < 0);
    assert_null(c[4]);
    ddp_buf_t text = DDP_BUF_INIT;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_stats(c[1], &text, &err), 0);
    assert_int_equal(ddp_buf_append(&text, "", 1), 0);
    assert_non_null(strstr((char *)text.data, "hs_evicted 6\n"));
    assert_non_null(strstr((char *)text.data, "conns_refused 1\n"));
    ddp_buf_free(&text);
    for (int i = 0; i < 6; i++)
        close(fd[i]);
    for (int i = 0; i < 4; i++)
        rdzv_client_free(c[i]);
    server_down(st);
}

/* setsockopt, wrapped by the linker (module.mk): counts the ACKs pushed with TCP_QUICKACK = 2
 * (the store's ack_now), then does the call. */
int __wrap_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int __real_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
static atomic_int acks_pushed;
int __wrap_setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
    if (level == IPPROTO_TCP && name == TCP_QUICKACK && len == sizeof(int) &&
        *(const int *)val == 2)
        atomic_fetch_add(&acks_pushed, 1);
    return __real_setsockopt(fd, level, name, val, len);
}

/* A read whose commands were answered gets no ACK of its own (the reply carries it), even when
 * the reply was written before the read's handling ended, as rendezvous replies are: at 16,000
 * nodes every keep-alive paid a fourth system call for it. A read answered by nothing (a SET)
 * still has its ACK pushed. */
static void test_answered_reads_push_no_ack(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    int fd = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    raw_send_sync(fd, &b); /* the handshake is over */
    atomic_store(&acks_pushed, 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(rdzv_heartbeat_req_encode(&b, "no-such-run"), 0);
        assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
        ddp_buf_reset(&b);
        uint8_t rep[18]; /* 0x51, status 1 (not a member), i64 round, i64 state */
        raw_read(fd, rep, sizeof rep);
        assert_int_equal(rep[0], RDZV_CMD_RDZV_HEARTBEAT);
        assert_int_equal(rep[1], 1);
    }
    assert_int_equal(atomic_load(&acks_pushed), 0);
    put_key_cmd(&b, RDZV_CMD_SET, "k");
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    for (int i = 0; i < 200 && atomic_load(&acks_pushed) == 0; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&acks_pushed), 1);
    ddp_buf_free(&b);
    close(fd);
    server_down(st);
}

typedef struct log_capture {
    int lines, evicted, summary;
    char last[512];
} log_capture_t;

static void capture_log(void *arg, int level, const char *msg) {
    log_capture_t *lc = arg;
    (void)level;
    lc->lines++;
    lc->evicted += strstr(msg, ": evicted, unauthenticated after ") != NULL;
    lc->summary += strstr(msg, "3 more connections refused, evicted or idle on") != NULL;
    snprintf(lc->last, sizeof lc->last, "%s", msg);
}

/* A burst of evictions logs one line naming both peers; the timer then says how many lines were
 * left out, once a second has passed (bounded: 5 s). */
static void test_admission_log_rate_limited(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .token = good_token};
    o.token_len = strlen(good_token);
    o.max_unauth_conns = 1;
    o.auth_idle_ms = 60000;
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    log_capture_t lc = {0};
    rdzv_server_set_log(s, 1 /* warn */, capture_log, &lc);
    int fd[5];
    for (int i = 0; i < 5; i++)
        fd[i] = raw_connect(rdzv_server_port(s));
    rdzv_server_stats_t st = {0};
    uint64_t deadline = ddp_now_ms() + 5000;
    while (lc.summary == 0 && ddp_now_ms() < deadline) {
        uv_run(&loop, UV_RUN_ONCE);
        rdzv_server_stats(s, &st);
    }
    assert_int_equal(st.hs_evicted, 4);
    assert_int_equal(lc.evicted, 1);
    assert_int_equal(lc.summary, 1);
    assert_int_equal(lc.lines, 2);
    for (int i = 0; i < 5; i++)
        close(fd[i]);
    int closed = 0;
    rdzv_server_close(s, mark_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* max_conns against RLIMIT_NOFILE: raised when the hard limit allows, else the file limit wins
 * with a reserve of at most a quarter of it. */
static void test_nofile_plan(void **state) {
    (void)state;
    uint64_t want = 0;
    assert_int_equal(rdzv__nofile_plan(1000, 4096, 4096, &want), 1000);
    assert_int_equal(want, 4096);
    assert_int_equal(rdzv__nofile_plan(1000, 1024, 1048576, &want), 1000);
    assert_int_equal(want, 1000 + RDZV_NOFILE_RESERVE);
    assert_int_equal(rdzv__nofile_plan(65536, 1024, (uint64_t)RLIM_INFINITY, &want), 65536);
    assert_int_equal(want, 65536 + RDZV_NOFILE_RESERVE);
    assert_int_equal(rdzv__nofile_plan(65536, 1024, 20000, &want), 20000 - RDZV_NOFILE_RESERVE);
    assert_int_equal(want, 20000);
    assert_int_equal(rdzv__nofile_plan(1000, 64, 64, &want), 48);
    assert_int_equal(want, 64);
    assert_int_equal(rdzv__nofile_plan(1000, 2, 2, &want), 2);
    assert_int_equal(rdzv__nofile_plan(1000, 0, 0, &want), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_handshakes_evicted),
        cmocka_unit_test(test_admission_log_rate_limited),
        cmocka_unit_test(test_nofile_plan),
        cmocka_unit_test(test_answered_reads_push_no_ack),
    };
    return cmocka_run_group_tests_name("rdzv_client_limits", tests, NULL, NULL);
}
