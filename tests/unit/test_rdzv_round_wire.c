/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of what the round machine's server and clients agree on (rendezvous/protocol/):
 * the key layout of a run, the progress record's codec, and the wire codec of the rendezvous
 * commands (rdzv_commands.h; every prefix of a frame is incomplete, bad requests are refused with
 * their reason). */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_layout.h"
#include "rdzv_round_fixture.h"

/* The key layout (rdzv_layout.h): each key's name, refusals, and the parsers reading back the
 * round of exactly the keys the builders make. */
static void test_key_layout(void **state) {
    (void)state;
    char key[RDZV_LAYOUT_KEY_MAX], longid[RDZV_RUN_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(rdzv_layout_progress_key(key, sizeof key, "job", 3), 0);
    assert_string_equal(key, "__rdzv/job/progress/3");
    assert_int_equal(rdzv_layout_progress_key(key, sizeof key, "job", -1), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, "job", 12), 0);
    assert_string_equal(key, "__rdzv/job/end/12");
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key), "job"), 12);
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key), "jo"), -1);
    assert_int_equal(rdzv_layout_end_round_of(key, strlen(key) - 3, "job"), -1); /* "end/" */
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, longid, 0), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, sizeof key, "job", -1), -EINVAL);
    assert_int_equal(rdzv_layout_end_key(key, 10, "job", 1), -EINVAL); /* does not fit */
    assert_int_equal(rdzv_layout_exit_key(key, sizeof key, "job", 4), 0);
    assert_string_equal(key, "__rdzv/job/4/exit");
    assert_int_equal(rdzv_layout_exit_done_key(key, sizeof key, "job", 4), 0);
    assert_string_equal(key, "__rdzv/job/4/exit/done");
    /* The largest run id and round fit RDZV_LAYOUT_KEY_MAX. */
    longid[RDZV_RUN_ID_MAX] = '\0';
    assert_int_equal(rdzv_layout_exit_done_key(key, sizeof key, longid, INT64_MAX), 0);
    assert_int_equal(rdzv_layout_round_key(key, sizeof key, "ddpw/", "job", 3, "backend"), 0);
    assert_string_equal(key, "ddpw/job/3/backend");
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "ddpw/", "job"), 3);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "lib/", "job"), -1);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "", "job"), -1);
    assert_int_equal(rdzv_layout_round_of(key, strlen(key), "ddpw/", "jo"), -1);
    assert_int_equal(rdzv_layout_round_of("ddpw/job/3", 10, "ddpw/", "job"), -1);
    assert_int_equal(rdzv_layout_round_of("ddpw/job/x/k", 12, "ddpw/", "job"), -1);
    char prefix[RDZV_ROUND_KEYS_MAX + 2];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    assert_int_equal(rdzv_layout_round_key(key, sizeof key, prefix, "job", 0, "k"), -EINVAL);
}

/* The progress value's codec: what it writes it reads back; anything else is refused. */
static void test_progress_codec(void **state) {
    (void)state;
    char val[RDZV_PROGRESS_VALUE_MAX];
    rdzv_progress_t p = {.round = INT64_MAX, .step = -1, .beat_age_ms = INT64_MAX}, q;
    int n = rdzv_progress_format(val, sizeof val, &p);
    assert_true(n > 0);
    assert_int_equal(rdzv_progress_parse(val, (size_t)n, &q), 0);
    assert_true(q.round == p.round && q.step == -1 && q.beat_age_ms == p.beat_age_ms);
    static const char *const bad[] = {"",        "1 2",
                                      "1 2 3 ",  " 1 2 3",
                                      "a b c",   "-1 0 0",
                                      "1 -2 0",  "1 2 -3",
                                      "1 2 3 4", "1  2 3",
                                      "1 2 3\n", "1 2 99999999999999999999",
                                      "- 2 3",   "1 2 9223372036854775808"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(rdzv_progress_parse(bad[k], strlen(bad[k]), &q), -EINVAL);
    assert_int_equal(rdzv_progress_parse("0 9223372036854775807 0", 23, &q), 0);
    assert_true(q.step == INT64_MAX && !q.has_goodput);
}

/* With the node's goodput: seven fields, the largest of each fits RDZV_PROGRESS_VALUE_MAX; the
 * three-field value of an agent without it still parses, with has_goodput 0. */
static void test_progress_goodput_codec(void **state) {
    (void)state;
    char val[RDZV_PROGRESS_VALUE_MAX];
    rdzv_progress_t p = {.round = INT64_MAX,
                         .step = INT64_MAX,
                         .beat_age_ms = INT64_MAX,
                         .has_goodput = 1,
                         .wall_ms = INT64_MAX,
                         .productive_ms = INT64_MAX,
                         .lost_ms = INT64_MAX,
                         .restarts = INT64_MAX},
                    q;
    int n = rdzv_progress_format(val, sizeof val, &p);
    assert_true(n > 0);
    assert_int_equal(rdzv_progress_parse(val, (size_t)n, &q), 0);
    assert_true(q.round == INT64_MAX && q.step == INT64_MAX && q.beat_age_ms == INT64_MAX &&
                q.has_goodput && q.wall_ms == INT64_MAX && q.productive_ms == INT64_MAX &&
                q.lost_ms == INT64_MAX && q.restarts == INT64_MAX);
    p = (rdzv_progress_t){.round = 3,
                          .step = 120,
                          .beat_age_ms = 40,
                          .has_goodput = 1,
                          .wall_ms = 412000,
                          .productive_ms = 383600,
                          .lost_ms = 28050,
                          .restarts = 3};
    n = rdzv_progress_format(val, sizeof val, &p);
    assert_string_equal(val, "3 120 40 412000 383600 28050 3");
    assert_int_equal(rdzv_progress_parse(val, (size_t)n, &q), 0);
    assert_true(q.has_goodput && q.wall_ms == 412000 && q.productive_ms == 383600 &&
                q.lost_ms == 28050 && q.restarts == 3 && q.step == 120);
    /* Without it the value is the three fields alone. */
    p.has_goodput = 0;
    n = rdzv_progress_format(val, sizeof val, &p);
    assert_string_equal(val, "3 120 40");
    assert_int_equal(rdzv_progress_parse("3 -1 40", 7, &q), 0);
    assert_true(!q.has_goodput && q.step == -1 && q.wall_ms == 0 && q.restarts == 0);
    /* A value that does not fit the buffer is refused, not cut. */
    assert_int_equal(
        rdzv_progress_format(
            val, 12,
            &(rdzv_progress_t){.round = 3, .step = 120, .beat_age_ms = 40, .has_goodput = 1}),
        -EINVAL);
    static const char *const bad[] = {
        "1 2 3 4",          "1 2 3 4 5",
        "1 2 3 4 5 6",      "1 2 3 4 5 6 7 8",
        "1 2 3 10 5 1 0 ",  "1 2 3 10 5 1  0",
        "1 2 3 -10 5 1 0",  "1 2 3 10 -5 1 0",
        "1 2 3 10 5 -1 0",  "1 2 3 10 5 1 -1",
        "1 2 3 10 11 1 0",  "1 2 3 10 5 11 0",
        "1 2 3 10 5 1 x",   "1 2 3 10 5 1 0\n",
        "1 2 3 10 5.0 1 0", "1 2 3 10 5 1 99999999999999999999",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(rdzv_progress_parse(bad[k], strlen(bad[k]), &q), -EINVAL);
    /* Longer than any value the format writes. */
    char big[RDZV_PROGRESS_VALUE_MAX + 2];
    memset(big, '1', sizeof big);
    big[1] = big[3] = ' ';
    assert_int_equal(rdzv_progress_parse(big, sizeof big, &q), -EINVAL);
    assert_int_equal(rdzv_progress_parse("1 2 3 10 10 10 0", 16, &q), 0);
}

/* ---- wire codec ---- */

static void check_all_prefixes_incomplete(const ddp_buf_t *b, int reply) {
    for (size_t k = 0; k < b->len; k++) {
        size_t need = 0;
        long rc;
        if (reply) {
            rdzv_round_reply_t rep = {0};
            rc = rdzv_round_reply_parse(b->data, k, &rep, &need, NULL);
            ddp_buf_free(&rep.text);
        } else {
            rdzv_round_req_t q;
            rc = rdzv_round_req_parse(b->data, k, &q, &need, NULL);
        }
        assert_int_equal(rc, 0);
        assert_true(need > k && need <= b->len);
    }
}

static void test_wire_join_req(void **state) {
    (void)state;
    rdzv_join_req_t q = req("job7", "10.0.0.2", 3, 8, 29500, 2, 4);
    q.cfg.max_restarts = 5;
    q.min_round = 12;
    q.restarts_used = 4;
    q.cfg.max_node_failures = 3;
    snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "ddpw/");
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8 + 12 * 8 + 8 + 5 + 8);
    assert_int_equal(b.data[0], 0x50);
    rdzv_round_req_t p;
    size_t need = 0;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_JOIN);
    assert_memory_equal(&p.join, &q, sizeof q);
    check_all_prefixes_incomplete(&b, 0);
    /* Pipelined: the first frame's length only. */
    assert_int_equal(rdzv_heartbeat_req_encode(&b, "job7"), 0);
    size_t first = 1 + 8 + 4 + 8 + 8 + 12 * 8 + 8 + 5 + 8;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)first);
    assert_int_equal(rdzv_round_req_parse(b.data + first, b.len - first, &p, &need, NULL), 13);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_string_equal(p.join.run_id, "job7");
    /* u8 0x55, blob "job7", i64 member, i64 key */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_beat_for_req_encode(&b, "job7", 42, -7), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8);
    assert_int_equal(b.data[0], 0x55);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_BEAT_FOR);
    assert_string_equal(p.join.run_id, "job7");
    assert_int_equal(p.member, 42);
    assert_int_equal(p.member_key, -7);
    check_all_prefixes_incomplete(&b, 0);
    /* u8 0x57, blob "job7", blob host, blob reason */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_unfit_req_encode(&b, "job7", "10.0.0.2", "gpu 1: ECC"), 0);
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 8 + 8 + 10);
    assert_int_equal(b.data[0], 0x57);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_UNFIT);
    assert_string_equal(p.join.host, "10.0.0.2");
    assert_string_equal(p.what, "gpu 1: ECC");
    check_all_prefixes_incomplete(&b, 0);
    assert_int_equal(rdzv_unfit_req_encode(&b, "job7", "", "x"), -EINVAL);
    ddp_buf_reset(&b);
    rdzv_round_reply_t rep = {0};
    assert_int_equal(rdzv_unfit_reply_encode(&b, 0), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 2);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_UNFIT);
    assert_int_equal(rep.status, 1);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
}

static void test_wire_bad_requests(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_round_req_t p;
    size_t need = 0;
    ddp_err_t err = {0};
    uint8_t unknown = RDZV_CMD_RDZV_LAST + 1;
    assert_int_equal(rdzv_round_req_parse(&unknown, 1, &p, &need, &err), DDP_EFRAME);
    /* A host longer than 255 bytes is refused as soon as its length arrives. */
    ddp_buf_append(&b, "\x50", 1);
    uint64_t n = 4;
    ddp_buf_append(&b, &n, 8);
    ddp_buf_append(&b, "job7", 4);
    n = 256;
    ddp_buf_append(&b, &n, 8);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_ETOOBIG);
    assert_int_equal(err.offset, 13);
    assert_non_null(strstr(err.text, "host"));
    /* A negative (huge) run id length. */
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x53", 1);
    n = UINT64_MAX;
    ddp_buf_append(&b, &n, 8);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_ETOOBIG);
    /* An empty run id, and a NUL inside one. */
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x51", 1);
    n = 0;
    ddp_buf_append(&b, &n, 8);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_EFRAME);
    ddp_buf_reset(&b);
    ddp_buf_append(&b, "\x51", 1);
    n = 3;
    ddp_buf_append(&b, &n, 8);
    ddp_buf_append(&b, "a\0b", 3);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), DDP_EFRAME);
    /* Run ids and hosts are printable ASCII: ESC, BEL, CR, LF and DEL are refused, naming the
     * field and the byte. */
    const char *bad[] = {"job\x1b[2J", "job\x07", "job\r", "job\n", "job\x7f", "job\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rdzv_join_req_t q;
        memset(&q, 0, sizeof q);
        snprintf(q.run_id, sizeof q.run_id, "%s", bad[i]);
        snprintf(q.host, sizeof q.host, "10.0.0.1");
        q.nproc = 1;
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "run id"));
        assert_non_null(strstr(err.text, "printable ASCII"));
        snprintf(q.run_id, sizeof q.run_id, "job7");
        snprintf(q.host, sizeof q.host, "%s", bad[i]);
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "host"));
        assert_int_equal(err.offset, 13);
    }
    /* round_keys may be empty, else printable ASCII of at most RDZV_ROUND_KEYS_MAX bytes. */
    {
        rdzv_join_req_t q = req("job7", "10.0.0.2", -1, 1, 0, 1, 1);
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_join_req_encode(&b, &q), 0);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
        assert_string_equal(p.join.cfg.round_keys, "");
        snprintf(q.cfg.round_keys, sizeof q.cfg.round_keys, "ddpw\x1b/");
        assert_int_equal(rdzv_join_req_encode(&b, &q), -EINVAL);
        /* The same bytes from another client: refused by the parser, naming the field. */
        /* b holds the empty-prefix frame: its last 16 bytes are that blob's length and
         * max_node_failures. */
        uint64_t six = 6;
        b.len -= 8;
        memcpy(b.data + b.len - 8, &six, 8);
        ddp_buf_append(&b, "ddpw\x1b/", 6);
        int64_t bound = 0;
        ddp_buf_append(&b, &bound, 8);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_EFRAME);
        assert_non_null(strstr(err.text, "round_keys"));
        uint64_t big = RDZV_ROUND_KEYS_MAX + 1;
        memcpy(b.data + b.len - 8 - 6 - 8, &big, 8);
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &err), DDP_ETOOBIG);
    }
    /* Encoders refuse what the parser would. */
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_req_encode(&b, ""), -EINVAL);
    char longid[RDZV_RUN_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(rdzv_heartbeat_req_encode(&b, longid), -EINVAL);
    assert_int_equal(b.len, 0);
    ddp_buf_free(&b);
}

static void test_wire_fail_status_req(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_fail_req_encode(&b, "job7", 3, "rank 5 exited with code 1"), 0);
    rdzv_round_req_t p;
    size_t need = 0;
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_FAIL);
    assert_int_equal(p.round, 3);
    assert_string_equal(p.what, "rank 5 exited with code 1");
    check_all_prefixes_incomplete(&b, 0);
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_fail_req_encode(&b, "job7", 0, NULL), 0); /* empty text is allowed */
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_string_equal(p.what, "");
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_req_encode(&b, "job7"), 0);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), 13);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_STATUS);
    ddp_buf_reset(&b);
    /* u8 0x56, blob "job7", i64 first, i64 limit */
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", 40, 20), 0);
    assert_int_equal(b.len, 13 + 16);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_STATUS_PAGE);
    assert_int_equal(p.first, 40);
    assert_int_equal(p.limit, 20);
    check_all_prefixes_incomplete(&b, 0);
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", -1, 20), -EINVAL);
    assert_int_equal(rdzv_status_page_req_encode(&b, "job7", 0, RDZV_ROUND_MAX_NODES + 1), -EINVAL);
    /* A page out of range on the wire is a malformed frame naming it. */
    b.data[b.len - 1] = 0x80; /* limit < 0 */
    ddp_err_t perr = {0};
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, &perr), DDP_EFRAME);
    assert_non_null(strstr(perr.text, "status page"));
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_page_reply_encode(&b, 1, "{}", 2), 0);
    rdzv_round_reply_t rr;
    memset(&rr, 0, sizeof rr);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rr, &need, NULL), (long)b.len);
    assert_int_equal(rr.cmd, RDZV_CMD_RDZV_STATUS_PAGE);
    assert_int_equal(rr.status, 0);
    assert_string_equal((const char *)rr.text.data, "{}");
    ddp_buf_free(&rr.text);
    ddp_buf_reset(&b);
    assert_int_equal(rdzv_abort_req_encode(&b, "job7", "no progress in 3 attempts"), 0);
    /* u8 0x54, blob "job7", blob reason */
    assert_int_equal(b.len, 1 + 8 + 4 + 8 + 25);
    assert_int_equal(b.data[0], 0x54);
    assert_int_equal(rdzv_round_req_parse(b.data, b.len, &p, &need, NULL), (long)b.len);
    assert_int_equal(p.cmd, RDZV_CMD_RDZV_ABORT);
    assert_string_equal(p.join.run_id, "job7");
    assert_string_equal(p.what, "no progress in 3 attempts");
    check_all_prefixes_incomplete(&b, 0);
    ddp_buf_free(&b);
}

static void test_wire_replies(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_join_result_t res = {
        4, 1, 3, 8, 24, "10.0.0.1", 29500, 2, RDZV_STORE_EMBEDDED, 17, 0x123456789abcdefLL};
    assert_int_equal(rdzv_join_reply_encode(&b, &res), 0);
    assert_int_equal(b.len, 2 + 5 * 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8);
    rdzv_round_reply_t rep = {0};
    size_t need = 0;
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), (long)b.len);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_JOIN);
    assert_int_equal(rep.status, 0);
    assert_memory_equal(&rep.join, &res, sizeof res);
    check_all_prefixes_incomplete(&b, 1);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_join_reply_encode_err(&b, DDP_ETIMEOUT, "1 of min 2 nodes joined"), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), (long)b.len);
    assert_int_equal(rep.status, 1);
    assert_int_equal(rep.code, DDP_ETIMEOUT);
    assert_string_equal((const char *)rep.text.data, "1 of min 2 nodes joined");
    check_all_prefixes_incomplete(&b, 1);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_heartbeat_reply_encode(&b, 1, 7, RDZV_RUN_RUNNING), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 18);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_HEARTBEAT);
    assert_int_equal(rep.round, 7);
    assert_int_equal(rep.state, RDZV_RUN_RUNNING);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_beat_for_reply_encode(&b, 1, 8, RDZV_RUN_LAST_CALL), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 18);
    assert_int_equal(rep.cmd, RDZV_CMD_RDZV_BEAT_FOR);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.round, 8);
    assert_int_equal(rep.state, RDZV_RUN_LAST_CALL);

    ddp_buf_reset(&b);
    rdzv_fail_reply_t fr = {RDZV_FAIL_RUN_FAILED, 5, 4, 3};
    assert_int_equal(rdzv_fail_reply_encode(&b, &fr), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 26);
    assert_int_equal(rep.fail.status, RDZV_FAIL_RUN_FAILED);
    assert_int_equal(rep.fail.round, 5);
    assert_int_equal(rep.fail.restarts_used, 4);
    assert_int_equal(rep.fail.max_restarts, 3);

    ddp_buf_reset(&b);
    assert_int_equal(rdzv_status_reply_encode(&b, 1, "{\"round\":1}", 11), 0);
    assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 21);
    assert_int_equal(rep.status, 0);
    assert_string_equal((const char *)rep.text.data, "{\"round\":1}");
    check_all_prefixes_incomplete(&b, 1);

    for (int stopped = 0; stopped <= 1; stopped++) {
        ddp_buf_reset(&b);
        assert_int_equal(rdzv_abort_reply_encode(&b, stopped), 0);
        assert_int_equal(b.len, 2);
        assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), 2);
        assert_int_equal(rep.cmd, RDZV_CMD_RDZV_ABORT);
        assert_int_equal(rep.status, stopped ? 0 : 1);
    }
    uint8_t badabort[2] = {0x54, 2};
    assert_int_equal(rdzv_round_reply_parse(badabort, 2, &rep, &need, NULL), DDP_EPROTO);

    /* Unknown reply command and JOIN status are protocol errors. */
    ddp_err_t err = {0};
    uint8_t junk[2] = {0x06, 0};
    assert_int_equal(rdzv_round_reply_parse(junk, 2, &rep, &need, &err), DDP_EPROTO);
    uint8_t badst[2] = {0x50, 9};
    assert_int_equal(rdzv_round_reply_parse(badst, 2, &rep, &need, NULL), DDP_EPROTO);
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_layout),
        cmocka_unit_test(test_progress_codec),
        cmocka_unit_test(test_progress_goodput_codec),
        cmocka_unit_test(test_wire_join_req),
        cmocka_unit_test(test_wire_bad_requests),
        cmocka_unit_test(test_wire_fail_status_req),
        cmocka_unit_test(test_wire_replies),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
