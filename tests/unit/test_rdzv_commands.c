/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the registry of rendezvous commands (rdzv_commands.h): its codes run
 * consecutively and carry their names; every command's request and reply encoders write what
 * the parsers read back as that command; the refusal is written for the commands whose reply
 * carries a text; and docs/protocol-rdzv.md's table and sections name exactly the registry's
 * commands with their codes, in its order. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_proto.h"

typedef struct row {
    int code;
    const char *name; /* "JOIN" */
} row_t;

static const row_t rows[] = {
#define X(code, NAME, name, req, rep) {code, #NAME},
    RDZV_COMMANDS(X)
#undef X
};
#define NROWS (sizeof rows / sizeof rows[0])

static void test_codes_and_names(void **state) {
    (void)state;
    assert_int_equal(NROWS, RDZV_CMD_RDZV_COUNT);
    assert_int_equal(RDZV_CMD_RDZV_LAST, RDZV_CMD_RDZV_FIRST + RDZV_CMD_RDZV_COUNT - 1);
    for (size_t i = 0; i < NROWS; i++) {
        char want[64];
        snprintf(want, sizeof want, "RDZV_%s", rows[i].name);
        assert_int_equal(rows[i].code, RDZV_CMD_RDZV_FIRST + (int)i);
        assert_non_null(rdzv_round_cmd_name(rows[i].code));
        assert_string_equal(rdzv_round_cmd_name(rows[i].code), want);
    }
    assert_null(rdzv_round_cmd_name(RDZV_CMD_RDZV_FIRST - 1));
    assert_null(rdzv_round_cmd_name(RDZV_CMD_RDZV_LAST + 1));
    assert_int_equal(RDZV_CMD_RDZV_JOIN, 0x50);
    assert_int_equal(RDZV_CMD_RDZV_FINISH, 0x58);
}

/* Arguments for each layout's encoders. */
static const rdzv_join_req_t join_req = {.run_id = "job7",
                                         .host = "10.0.0.1",
                                         .want_node_rank = -1,
                                         .nproc = 8,
                                         .master_port = 29500,
                                         .cfg = {.min_nodes = 2, .max_nodes = 4}};
static const rdzv_join_result_t join_res = {
    .round = 3, .group_world_size = 2, .world_size = 16, .master_addr = "10.0.0.1"};
static const rdzv_fail_reply_t fail_rep = {.status = RDZV_FAIL_COUNTED, .round = 3};

#define REQ_ARGS_run_only "job7"
#define REQ_ARGS_join &join_req
#define REQ_ARGS_round_what "job7", 3, "rank 5 exited with code 1"
#define REQ_ARGS_what "job7", "no progress"
#define REQ_ARGS_member "job7", 17, 4242
#define REQ_ARGS_page "job7", 0, 20
#define REQ_ARGS_host_what "job7", "10.0.0.2", "GPU 3 lost"
#define REQ_ARGS_round_only "job7", 3
#define REP_ARGS_join &join_res
#define REP_ARGS_beat 1, 3, RDZV_RUN_RUNNING
#define REP_ARGS_fail &fail_rep
#define REP_ARGS_json 1, "{}", 2
#define REP_ARGS_ack 1

/* Each command's encoders, with the arguments of its layouts. */
typedef struct codec_case {
    int code;
    int (*req)(ddp_buf_t *b);
    int (*rep)(ddp_buf_t *b);
} codec_case_t;

#define X(code, NAME, name, req, rep)                                                              \
    static int req_##name(ddp_buf_t *b) {                                                          \
        return rdzv_##name##_req_encode(b, REQ_ARGS_##req);                                        \
    }                                                                                              \
    static int rep_##name(ddp_buf_t *b) {                                                          \
        return rdzv_##name##_reply_encode(b, REP_ARGS_##rep);                                      \
    }
RDZV_COMMANDS(X)
#undef X

static const codec_case_t cases[] = {
#define X(code, NAME, name, req, rep) {code, req_##name, rep_##name},
    RDZV_COMMANDS(X)
#undef X
};

static void test_each_command_round_trips(void **state) {
    (void)state;
    assert_int_equal(sizeof cases / sizeof cases[0], NROWS);
    for (size_t i = 0; i < NROWS; i++) {
        const codec_case_t *k = &cases[i];
        ddp_buf_t b = DDP_BUF_INIT;
        assert_int_equal(k->req(&b), 0);
        assert_int_equal(b.data[0], k->code);
        rdzv_round_req_t q;
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        assert_int_equal(rdzv_round_req_parse(b.data, b.len, &q, &need, &err), (long)b.len);
        assert_int_equal(q.cmd, k->code);
        assert_string_equal(q.join.run_id, "job7");
        /* Cut short by a byte, the frame is incomplete and asks for its whole length. */
        assert_int_equal(rdzv_round_req_parse(b.data, b.len - 1, &q, &need, &err), 0);
        assert_int_equal(need, b.len);

        ddp_buf_reset(&b);
        assert_int_equal(k->rep(&b), 0);
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, &err), (long)b.len);
        assert_int_equal(rep.cmd, k->code);
        assert_int_equal(rep.status, 0);
        ddp_buf_free(&rep.text);
        ddp_buf_free(&b);
    }
}

static void test_refusal(void **state) {
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        int code = rows[i].code;
        ddp_buf_t b = DDP_BUF_INIT;
        int rc = rdzv_round_refusal_encode(&b, code, DDP_EAUTH, "refused: not your run");
        /* Every command's reply carries the refusal: JOIN's and the JSON ones (STATUS,
         * STATUS_PAGE, TIMING) with their own status 1, the others with RDZV_REPLY_REFUSED, a code
         * and a text. */
        int json = code == RDZV_CMD_RDZV_STATUS || code == RDZV_CMD_RDZV_STATUS_PAGE ||
                   code == RDZV_CMD_RDZV_TIMING;
        int own = code == RDZV_CMD_RDZV_JOIN || json;
        assert_int_equal(rc, 0);
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        size_t need = 0;
        assert_int_equal(rdzv_round_reply_parse(b.data, b.len, &rep, &need, NULL), (long)b.len);
        assert_int_equal(rep.cmd, code);
        assert_int_equal(rep.status, own ? 1 : RDZV_REPLY_REFUSED);
        assert_string_equal((const char *)rep.text.data, "refused: not your run");
        if (!json)
            assert_int_equal(rep.code, DDP_EAUTH);
        /* Cut anywhere, it is incomplete, never misread. */
        for (size_t cut = 1; cut < b.len; cut++)
            assert_int_equal(rdzv_round_reply_parse(b.data, cut, &rep, &need, NULL), 0);
        ddp_buf_free(&rep.text);
        ddp_buf_free(&b);
    }
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv_round_refusal_encode(&b, RDZV_CMD_RDZV_LAST + 1, DDP_EAUTH, "x"),
                     -ENOTSUP);
    assert_int_equal(rdzv_round_refusal_encode(&b, 1, DDP_EAUTH, "x"), -ENOTSUP);
}

/* ---- the docs ---- */

#define DOC "docs/protocol-rdzv.md"

/* Opens DOC from the repository root, or found from the binary (build/tests/unit/x). */
static FILE *doc_open(void) {
    FILE *fp = fopen(DOC, "r");
    if (fp != NULL)
        return fp;
    char exe[PATH_MAX - 64], path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(path, sizeof path, "%s/../../../" DOC, exe);
    return fopen(path, "r");
}

/* What the doc says of the commands: its table's rows ("| `0x50` | JOIN | ...") and its
 * sections ("## 0x50 JOIN"), each as code and name, in the order they come. */
typedef struct doc_cmds {
    row_t table[64], sections[64];
    char names[128][32];
    size_t ntable, nsections, nnames;
} doc_cmds_t;

static const char *doc_name(doc_cmds_t *d, const char *p, size_t n) {
    assert_true(d->nnames < 128 && n > 0 && n < 32);
    memcpy(d->names[d->nnames], p, n);
    d->names[d->nnames][n] = '\0';
    return d->names[d->nnames++];
}

/* Reads a hex code at *p ("0x50"), moving past it. Returns it, or -1. */
static int doc_code(const char **p) {
    unsigned v;
    int used = 0;
    if (sscanf(*p, "0x%2x%n", &v, &used) != 1 || used != 4)
        return -1;
    *p += used;
    return (int)v;
}

static void doc_read(FILE *fp, doc_cmds_t *d) {
    char line[1024];
    memset(d, 0, sizeof *d);
    while (fgets(line, sizeof line, fp) != NULL) {
        const char *p = line;
        row_t *r = NULL;
        if (strncmp(p, "| `0x", 5) == 0) {
            p += 3;
            assert_true(d->ntable < 64);
            r = &d->table[d->ntable++];
            r->code = doc_code(&p);
            assert_true(strncmp(p, "` | ", 4) == 0);
            p += 4;
            r->name = doc_name(d, p, strcspn(p, " |"));
        } else if (strncmp(p, "## 0x", 5) == 0) {
            p += 3;
            assert_true(d->nsections < 64);
            r = &d->sections[d->nsections++];
            r->code = doc_code(&p);
            assert_true(*p == ' ');
            p++;
            r->name = doc_name(d, p, strcspn(p, " \n"));
        }
        if (r != NULL && r->code < 0)
            fail_msg(DOC ": no code of the form 0xNN in: %s", line);
    }
}

/* The table lists the registry's rows in order; the sections, each once, in any order. */
static int doc_check(const doc_cmds_t *d, char *why, size_t cap) {
    if (d->ntable != NROWS)
        return snprintf(why, cap, "the table has %zu rows, the registry %zu", d->ntable, NROWS);
    for (size_t i = 0; i < NROWS; i++)
        if (d->table[i].code != rows[i].code || strcmp(d->table[i].name, rows[i].name) != 0)
            return snprintf(why, cap, "table row %zu is 0x%02x %s, the registry's 0x%02x %s", i + 1,
                            d->table[i].code, d->table[i].name, rows[i].code, rows[i].name);
    if (d->nsections != NROWS)
        return snprintf(why, cap, "%zu sections, %zu commands", d->nsections, NROWS);
    for (size_t i = 0; i < NROWS; i++) {
        size_t found = 0;
        for (size_t j = 0; j < d->nsections; j++)
            found += d->sections[j].code == rows[i].code &&
                     strcmp(d->sections[j].name, rows[i].name) == 0;
        if (found != 1)
            return snprintf(why, cap, "%zu sections \"## 0x%02x %s\"", found, rows[i].code,
                            rows[i].name);
    }
    return 0;
}

static void test_docs_list_the_registry(void **state) {
    (void)state;
    FILE *fp = doc_open();
    if (fp == NULL)
        fail_msg("cannot open " DOC " (run from the repository root)");
    doc_cmds_t d;
    doc_read(fp, &d);
    fclose(fp);
    char why[256] = "";
    if (doc_check(&d, why, sizeof why) != 0)
        fail_msg(DOC " disagrees with RDZV_COMMANDS (rdzv_commands.h): %s", why);
}

/* The check fails on a table that disagrees: a code changed, a row missing, a section gone. */
static void test_docs_check_fails(void **state) {
    (void)state;
    FILE *fp = doc_open();
    assert_non_null(fp);
    doc_cmds_t good, bad;
    doc_read(fp, &good);
    fclose(fp);
    char why[256];
    assert_int_equal(doc_check(&good, why, sizeof why), 0);
    bad = good;
    bad.table[2].code = 0x5f;
    assert_true(doc_check(&bad, why, sizeof why) > 0);
    assert_non_null(strstr(why, "table row 3 is 0x5f"));
    bad = good;
    bad.table[4].name = "ABORTS";
    assert_true(doc_check(&bad, why, sizeof why) > 0);
    bad = good;
    bad.ntable--;
    assert_true(doc_check(&bad, why, sizeof why) > 0);
    bad = good;
    bad.sections[0] = bad.sections[1];
    assert_true(doc_check(&bad, why, sizeof why) > 0);
    bad = good;
    bad.nsections--;
    assert_true(doc_check(&bad, why, sizeof why) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_and_names),  cmocka_unit_test(test_each_command_round_trips),
        cmocka_unit_test(test_refusal),          cmocka_unit_test(test_docs_list_the_registry),
        cmocka_unit_test(test_docs_check_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
