/* SPDX-License-Identifier: Apache-2.0
 * The store's queues, barriers and rounds, driven in raw frames (store_client_fixture.h) where
 * rdzv_client does not make the sequences: TCPStore's queue semantics and bounds, BARRIER,
 * reentrant closes inside a wake, a round's answers by member, and the keys of old rounds
 * forgotten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <poll.h>

#include <cmocka.h>
#include <uv.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "store_client_fixture.h"

static void put_wait1(ddp_buf_t *b, const char *key) {
    assert_int_equal(rdzv__put_u8(b, RDZV_CMD_WAIT), 0);
    assert_int_equal(rdzv__put_u64(b, 1), 0);
    assert_int_equal(rdzv__put_blob(b, key, strlen(key)), 0);
}

/* 1 when nothing arrives on fd within ms. */
static int raw_quiet(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 0;
}

/* Queues as TCPStore keeps them: FIFO, beside the key's value (GETNUMKEYS and DELETE_KEY see
 * values only, CHECK and WAIT count a non-empty queue as ready), and a push answers the oldest
 * parked WAIT on its key only. Popped items leave the memory account. */
static void test_queues(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    stat_of(c, "mem_used"); /* its reply buffer is on the account from the next one on */
    long long mem0 = stat_of(c, "mem_used");
    int w1 = raw_connect(st->port), w2 = raw_connect(st->port), p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_wait1(&b, "/q");
    assert_int_equal(raw_send_sync(w1, &b), 0); /* w1 parks first, */
    put_wait1(&b, "/q");
    assert_int_equal(raw_send_sync(w2, &b), 0); /* then w2 */
    assert_int_equal(stat_of(c, "waiting"), 2);
    put_push(&b, "/q", "one");
    put_key_cmd(&b, RDZV_CMD_QUEUE_LEN, "/q");
    assert_int_equal(raw_send_sync(p, &b), 8); /* the push has no reply; QUEUE_LEN's i64 */
    uint8_t r[64];
    raw_read(w1, r, 1);
    assert_int_equal(r[0], RDZV_WAIT_STOP_WAITING);
    assert_true(raw_quiet(w2, 100)); /* one item, one waiter released */
    put_push(&b, "/q", "two");
    assert_int_equal(raw_send_sync(p, &b), 0);
    raw_read(w2, r, 1);
    assert_int_equal(r[0], RDZV_WAIT_STOP_WAITING);
    assert_int_equal(stat_of(c, "queued"), 2);
    assert_int_equal(stat_of(c, "waiting"), 0);

    /* A queue is not a value, but it makes its key ready. */
    int64_t nkeys = -1;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_num_keys(c, &nkeys, &err), 0);
    assert_int_equal(nkeys, 0);
    const char *qk[] = {"/q"};
    int ready = 0;
    assert_int_equal(rdzv_client_check(c, qk, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    put_key_cmd(&b, RDZV_CMD_DELETE_KEY, "/q");
    assert_int_equal(raw_send_sync(p, &b), 8);
    put_wait1(&b, "/q"); /* ready at once */
    assert_int_equal(raw_send_sync(p, &b), 1);

    /* FIFO pops, each answered with the length before it; then 0 for empty or unknown. */
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_LEN, "/nothing");
    assert_int_equal(raw_send_sync(p, &b), (8 + 8 + 3) * 2 + 8 + 8);
    ready = 1;
    assert_int_equal(rdzv_client_check(c, qk, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    assert_int_equal(stat_of(c, "queued"), 0);
    close(w1);
    close(w2);
    close(p);
    /* Every item and the queue itself freed: back to the account before, once the server has
     * closed the three connections (their buffers are on it too). */
    long long mem = -1;
    for (int i = 0; i < 100 && (mem = stat_of(c, "mem_used")) != mem0; i++)
        usleep(10000);
    assert_int_equal(mem, mem0);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* The replies of the pops above, checked byte for byte, and LIST_KEYS listing values only. */
static void test_queue_pop_and_list_replies(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    int p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_push(&b, "/q", "a");
    put_push(&b, "/q", "bc");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    put_key_cmd(&b, RDZV_CMD_QUEUE_POP, "/q");
    ddp_buf_t want = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_i64(&want, 2), 0);
    assert_int_equal(rdzv__put_blob(&want, "a", 1), 0);
    assert_int_equal(rdzv__put_i64(&want, 1), 0);
    assert_int_equal(rdzv__put_blob(&want, "bc", 2), 0);
    assert_int_equal(rdzv__put_i64(&want, 0), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&b, 7), 0);
    assert_int_equal(write(p, b.data, b.len), (ssize_t)b.len);
    uint8_t r[64];
    raw_read(p, r, want.len + 4);
    assert_memory_equal(r, want.data, want.len);
    ddp_buf_reset(&b);
    ddp_buf_reset(&want);
    /* One value and one queue: LIST_KEYS names the value only. */
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_SET), 0);
    assert_int_equal(rdzv__put_blob(&b, "/k", 2), 0);
    assert_int_equal(rdzv__put_blob(&b, "v", 1), 0);
    put_push(&b, "/q2", "x");
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_LIST_KEYS), 0);
    assert_int_equal(rdzv__put_i64(&want, 1), 0);
    assert_int_equal(rdzv__put_blob(&want, "/k", 2), 0);
    assert_int_equal(raw_send_sync(p, &b), want.len);
    close(p);
    ddp_buf_free(&b);
    ddp_buf_free(&want);
    server_down(st);
}

/* BARRIER parks every arrival but the last, which answers all of them; the count is the key's
 * value. A BARRIER given up with CANCEL_WAIT leaves the count as it is (TCPStore's behaviour). */
static void test_barrier(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int a = raw_connect(st->port), d = raw_connect(st->port), e = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(d, &b), 0);
    put_wait1(&b, "/bar"); /* the key has a value (the count): a WAIT returns at once */
    assert_int_equal(raw_send_sync(e, &b), 1);
    assert_int_equal(stat_of(c, "waiting"), 2);
    ddp_buf_t v = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_get(c, "/bar", 0, &v, &err), 0);
    assert_int_equal(v.len, 1);
    assert_memory_equal(v.data, "2", 1);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/bar");
    assert_int_equal(rdzv__put_i64(&b, 3), 0);
    assert_int_equal(raw_send_sync(e, &b), 1); /* the last one: answered at once */
    uint8_t r[4];
    raw_read(a, r, 1);
    raw_read(d, r + 1, 1);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    assert_int_equal(stat_of(c, "waiting"), 0);
    /* Alone at a barrier of 2, then given up. */
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/b2");
    assert_int_equal(rdzv__put_i64(&b, 2), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_CANCEL_WAIT), 0);
    assert_int_equal(raw_send_sync(a, &b), 1);
    assert_int_equal(stat_of(c, "waiting"), 0);
    assert_int_equal(rdzv_client_get(c, "/b2", 0, &v, &err), 0);
    assert_memory_equal(v.data, "1", 1);
    /* A barrier on a key that is not a count closes that connection alone. */
    assert_int_equal(rdzv_client_set(c, "/text", "abc", 3, &err), 0);
    put_key_cmd(&b, RDZV_CMD_BARRIER, "/text");
    assert_int_equal(rdzv__put_i64(&b, 2), 0);
    assert_int_equal(write(d, b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    assert_true(raw_closed(d));
    assert_int_equal(rdzv_client_ping(c, &err), 0);
    close(a);
    close(d);
    close(e);
    ddp_buf_free(&v);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* A server without a token and with max_total_mem (0: the default). */
static server_thread_t *server_up_mem(size_t max_total_mem) {
    rdzv_server_opts_t o = {0};
    o.no_auth = 1;
    o.max_total_mem = max_total_mem;
    return server_up_with(&o);
}

/* Writes all of b to fd, or as much as the server takes before it closes fd; empties b. */
static void write_until_closed(int fd, ddp_buf_t *b) {
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    ddp_buf_reset(b);
}

/* Queues are bounded: their bytes by max_total_mem and their length by RDZV_MAX_QUEUE_LEN. The
 * pushing connection is closed there; the store keeps serving, its items intact. */
static void test_queue_bounds(void **state) {
    (void)state;
    server_thread_t *st = server_up_mem(8u << 20);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int p = raw_connect(st->port);
    ddp_buf_t b = DDP_BUF_INIT;
    char *big = malloc(1 << 20);
    assert_non_null(big);
    memset(big, 'x', 1 << 20);
    big[(1 << 20) - 1] = '\0';
    for (int i = 0; i < 12; i++) /* 12 MiB into an 8 MiB store */
        put_push(&b, "/big", big);
    write_until_closed(p, &b);
    assert_true(raw_closed(p));
    close(p);
    long long kept = stat_of(c, "queued");
    if (kept < 4 || kept >= 8)
        fail_msg("%lld items of 1 MiB kept in an 8 MiB store", kept);
    assert_int_equal(stat_of(c, "mem_refused"), 1);
    free(big);
    rdzv_client_free(c);
    server_down(st);

    /* RDZV_MAX_QUEUE_LEN empty items fit (the default memory limit); one more does not. */
    st = server_up_mem(0);
    c = must_connect(st->port, NULL, 0);
    p = raw_connect(st->port);
    for (size_t i = 0; i <= RDZV_MAX_QUEUE_LEN; i++)
        put_push(&b, "/n", "");
    write_until_closed(p, &b);
    assert_true(raw_closed(p));
    close(p);
    assert_int_equal(stat_of(c, "queued"), RDZV_MAX_QUEUE_LEN);
    assert_int_equal(stat_of(c, "mem_refused"), 0);
    ddp_buf_free(&b);
    rdzv_client_free(c);
    server_down(st);
}

/* Reentrancy: waking a key answers member A, whose reply is over the output cap, so A is closed;
 * A's death ends its round, the next round closes at once with the waiting joiner C, and C's
 * JOIN reply is over the cap too, so C is closed while its WAIT on the same key is the next
 * waiter wake() would visit. The server must unlink C's waiter, not use it after freeing it
 * (ASan build), and keep serving. */
static void test_close_members_inside_wake(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 100, 0);
    ddp_buf_t b = DDP_BUF_INIT;
    int a = raw_connect(st->port), c = raw_connect(st->port);
    join_frame(&b, "a"); /* its reply (91 bytes) fits in 100 */
    assert_int_equal(raw_send_sync(a, &b), 91);
    char host_c[61];
    memset(host_c, 'c', 60);
    host_c[60] = '\0';
    join_frame(&b, host_c); /* the run is at max_nodes=1: C waits for the next round */
    assert_int_equal(raw_send_sync(c, &b), 0);
    /* C waits on K first, A last: A's waiter is at the head, C's is the next one. */
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_WAIT), 0);
    assert_int_equal(rdzv__put_u64(&b, 1), 0);
    assert_int_equal(rdzv__put_blob(&b, "K", 1), 0);
    assert_int_equal(raw_send_sync(c, &b), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_GET_WAIT), 0);
    assert_int_equal(rdzv__put_blob(&b, "K", 1), 0);
    assert_int_equal(rdzv__put_u8(&b, 0), 0);
    assert_int_equal(raw_send_sync(a, &b), 0);

    rdzv_client_t *d = must_connect(st->port, NULL, 0);
    ddp_err_t err;
    ddp_err_clear(&err);
    char big[200];
    memset(big, 'v', sizeof big);
    assert_int_equal(rdzv_client_set(d, "K", big, sizeof big, &err), 0);
    assert_int_equal(rdzv_client_ping(d, &err), 0);
    assert_true(raw_closed(a));
    assert_true(raw_closed(c));
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(d, "__rdzv/r/end/0", 0, &v, &err), 0);
    assert_non_null(memmem(v.data, v.len, "round 0 ended: node 0 (a) lost", 30));
    /* K and two end keys: C ran round 1 alone, and its closing ended that round too. */
    int64_t nkeys = 0;
    assert_int_equal(rdzv_client_num_keys(d, &nkeys, &err), 0);
    assert_int_equal(nkeys, 3);
    const char *end1[] = {"__rdzv/r/end/1"}; /* its value names C: over the cap to read */
    int ready = 0;
    assert_int_equal(rdzv_client_check(d, end1, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    ddp_buf_free(&v);
    ddp_buf_free(&b);
    rdzv_client_free(d);
    close(a);
    close(c);
    server_down(st);
}

/* A round of 20 members closes in one batch of answers (the server looks the connections up in
 * a sorted index then, not the list): every member gets its own answer, and connections that
 * are not members, opened in between, get nothing. */
static void test_round_answers_by_member(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    enum { N = 20 };
    int fd[N], other[N];
    ddp_buf_t b = DDP_BUF_INIT;
    for (int i = 0; i < N; i++) {
        other[i] = raw_connect(st->port);
        fd[i] = raw_connect(st->port);
        char host[16];
        snprintf(host, sizeof host, "n%d", i);
        rdzv_join_req_t q = {0};
        snprintf(q.run_id, sizeof q.run_id, "many");
        snprintf(q.host, sizeof q.host, "%s", host);
        q.want_node_rank = N - 1 - i; /* ranks in the reverse of the join order */
        q.nproc = 1;
        q.cfg.min_nodes = q.cfg.max_nodes = N;
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        if (i < N - 1)
            assert_int_equal(raw_send_sync(fd[i], &b), 0);
        else
            assert_int_equal(write(fd[i], b.data, b.len), (ssize_t)b.len);
        ddp_buf_reset(&b);
    }
    int seen[N] = {0};
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    for (int i = 0; i < N; i++) {
        uint8_t in[256];
        size_t n = 0, need = 0;
        long rn = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        while ((rn = rdzv_round_reply_parse(in, n, &rep, &need, &err)) == 0) {
            ssize_t r = read(fd[i], in + n, need - n);
            assert_true(r > 0);
            n += (size_t)r;
        }
        assert_true(rn > 0);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
        assert_int_equal(rep.status, 0);
        assert_int_equal(rep.join.group_rank, N - 1 - i);
        assert_int_equal(rep.join.group_world_size, N);
        assert_string_equal(rep.join.master_addr, "n19");
        seen[rep.join.group_rank]++;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    /* A HEARTBEAT from a connection that is no member: status 1, round and state 0. */
    assert_int_equal(rdzv_heartbeat_req_encode(&b, "many"), 0);
    assert_int_equal(write(other[0], b.data, b.len), (ssize_t)b.len);
    ddp_buf_reset(&b);
    uint8_t hb[18];
    size_t got = 0;
    while (got < sizeof hb) {
        ssize_t r = read(other[0], hb + got, sizeof hb - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_int_equal(hb[0], RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(hb[1], 1);
    assert_int_equal(rdzv__get_u64(hb + 2), 0);
    assert_int_equal(rdzv__get_u64(hb + 10), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(raw_send_sync(other[i], &b), 0); /* nothing came before the PING's */
        close(other[i]);
        close(fd[i]);
    }
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
    server_down(st);
}

/* SETs key=value on fd (today's numbering, after VALIDATE) and turns loop until the store ran it
 * (a PING's answer). */
static void loop_set(uv_loop_t *loop, int fd, const char *key) {
    ddp_buf_t b = DDP_BUF_INIT;
    put_key_cmd(&b, RDZV_CMD_SET, key);
    assert_int_equal(rdzv__put_blob(&b, "value", 5), 0);
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_PING), 0);
    assert_int_equal(rdzv__put_u32(&b, 7), 0);
    send_all(fd, &b);
    ddp_buf_free(&b);
    loop_until_readable(loop, fd);
    uint8_t r[4];
    raw_read(fd, r, 4);
}

/* Old rounds' keys go (rdzv_server_forget_rounds): the round keys under the prefix the caller
 * names ("ddpw/<run>/<round>/" here) and the round-end keys of rounds below the given one, of
 * that run only; everything else stays, and the memory account comes back to what the kept keys
 * hold. The store knows no prefix of its own: under another one, or none, the same "ddpw/" keys
 * stay and only the end keys go. */
static void test_forget_rounds(void **state) {
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    rdzv_server_opts_t o = {.host = "127.0.0.1", .no_auth = 1};
    rdzv_server_t *s = NULL;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_server_start(&loop, &o, &s, &err), 0);
    int fd = raw_connect(rdzv_server_port(s));
    static const char *kept[] = {"ddpw/r/2/c",          "ddpw/rx/0/d",    "ddpw/r/x/e",
                                 "__rdzv/r/end/2",      "other",          "ddpw/r",
                                 "__rdzv/r/progress/0", "__rdzv/rx/end/0"};
    static const char *dropped[] = {"ddpw/r/0/a", "ddpw/r/1/b", "ddpw/r/1/nested/key",
                                    "__rdzv/r/end/0", "__rdzv/r/end/1"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        loop_set(&loop, fd, kept[i]);
    rdzv_server_stats_t st0, st1;
    rdzv_server_stats(s, &st0);
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        loop_set(&loop, fd, dropped[i]);
    /* Another layer's prefix, then none: only the end keys of old rounds go. */
    rdzv_server_forget_rounds(s, "r", "lib/", 2);
    rdzv_server_forget_rounds(s, "r", NULL, 2);
    rdzv_server_forget_rounds(s, "r", "", 2);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, st0.keys + 3);
    rdzv_server_forget_rounds(s, "r", "ddpw/", 2);
    rdzv_server_stats(s, &st1);
    assert_int_equal(st1.keys, st0.keys);
    assert_int_equal(st1.mem_used, st0.mem_used);
    /* Which ones: CHECK each. */
    for (int pass = 0; pass < 2; pass++) {
        const char **list = pass ? dropped : kept;
        size_t n = pass ? sizeof dropped / sizeof dropped[0] : sizeof kept / sizeof kept[0];
        for (size_t i = 0; i < n; i++) {
            ddp_buf_t b = DDP_BUF_INIT;
            assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_CHECK), 0);
            assert_int_equal(rdzv__put_u64(&b, 1), 0);
            assert_int_equal(rdzv__put_blob(&b, list[i], strlen(list[i])), 0);
            send_all(fd, &b);
            ddp_buf_free(&b);
            loop_until_readable(&loop, fd);
            uint8_t r;
            raw_read(fd, &r, 1);
            if (r != (pass ? RDZV_CHECK_NOT_READY : RDZV_CHECK_READY))
                fail_msg("%s: %s", list[i], pass ? "still there" : "gone");
        }
    }
    close(fd);
    rdzv_server_close(s, NULL, NULL);
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    }
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Reads one rendezvous reply from fd into rep (SO_RCVTIMEO bounds each read). */
static void raw_round_reply(int fd, rdzv_round_reply_t *rep) {
    uint8_t in[512];
    size_t n = 0, need = 0;
    long rn;
    while ((rn = rdzv_round_reply_parse(in, n, rep, &need, NULL)) == 0) {
        assert_true(need <= sizeof in);
        ssize_t r = read(fd, in + n, need - n);
        assert_true(r > 0);
        n += (size_t)r;
    }
    assert_true(rn > 0);
}

/* The prefix of the round keys reaches the store with the run's first JOIN: when round 2 closes
 * the store drops round 0's keys under that prefix ("lib/" here) and keeps the same shape under
 * any other ("ddpw/"): it holds no prefix of its own. */
static void test_join_round_keys(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = must_connect(st->port, NULL, 0);
    int fd = raw_connect(st->port);
    ddp_err_t err;
    ddp_err_clear(&err);
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    ddp_buf_t b = DDP_BUF_INIT;
    for (int64_t round = 0; round <= 2; round++) {
        rdzv_join_req_t q = {0};
        snprintf(q.run_id, sizeof q.run_id, "r");
        snprintf(q.host, sizeof q.host, "n0");
        q.want_node_rank = -1;
        q.nproc = 1;
        q.cfg.min_nodes = q.cfg.max_nodes = 1;
        q.cfg.max_restarts = 5;
        snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "lib/");
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        send_all(fd, &b);
        ddp_buf_reset(&b);
        raw_round_reply(fd, &rep);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
        assert_int_equal(rep.status, 0);
        assert_int_equal(rep.join.round, round);
        if (round == 0) {
            assert_int_equal(rdzv_client_set(c, "lib/r/0/a", "x", 1, &err), 0);
            assert_int_equal(rdzv_client_set(c, "ddpw/r/0/a", "x", 1, &err), 0);
        }
        if (round == 2)
            break;
        /* Round r failed: the next JOIN closes round r + 1. */
        assert_int_equal(rdzv_fail_req_encode(&b, "r", round, "test"), 0);
        send_all(fd, &b);
        ddp_buf_reset(&b);
        raw_round_reply(fd, &rep);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_FAIL);
        assert_int_equal(rep.status, RDZV_FAIL_COUNTED);
    }
    const char *dropped[] = {"lib/r/0/a"}, *kept[] = {"ddpw/r/0/a"};
    int ready = -1;
    assert_int_equal(rdzv_client_check(c, dropped, 1, &ready, &err), 0);
    assert_int_equal(ready, 0);
    assert_int_equal(rdzv_client_check(c, kept, 1, &ready, &err), 0);
    assert_int_equal(ready, 1);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
    close(fd);
    rdzv_client_free(c);
    server_down(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queues),
        cmocka_unit_test(test_queue_pop_and_list_replies),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_queue_bounds),
        cmocka_unit_test(test_close_members_inside_wake),
        cmocka_unit_test(test_round_answers_by_member),
        cmocka_unit_test(test_forget_rounds),
        cmocka_unit_test(test_join_round_keys),
    };
    return cmocka_run_group_tests_name("rdzv_client_queues", tests, NULL, NULL);
}
