/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the store codec: the golden frames in tests/data/rdzv/<case>/ (one cmocka test
 * per case; none found is a failure, not an empty pass), every prefix of every golden input, the
 * encoders and the key formatter. Run from the repository root. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"
#include "rdzv_proto.h"

#define DATA_DIR "tests/data/rdzv"
#define MAX_CASES 256

typedef struct golden {
    char name[300];
    char dir[400];
} golden_t;

static golden_t cases[MAX_CASES];

static int read_file(const char *path, ddp_buf_t *out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -errno;
    uint8_t tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (ddp_buf_append(out, tmp, n) < 0)
            break;
    fclose(f);
    return 0;
}

static rdzv_frame_limits_t default_limits(void) {
    rdzv_frame_limits_t l = {RDZV_MAX_KEY_LEN, RDZV_MAX_VALUE_LEN, RDZV_MAX_KEYS_PER_REQ,
                             RDZV_MAX_FRAME_LEN};
    return l;
}

/* Applies "name=value" lines of a case's optional limits file. */
static void load_limits(const char *dir, rdzv_frame_limits_t *l) {
    char path[500];
    snprintf(path, sizeof path, "%s/limits", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char name[64];
    unsigned long long v;
    while (fscanf(f, " %63[a-z_]=%llu", name, &v) == 2) {
        if (strcmp(name, "max_frame") == 0)
            l->max_frame = v;
        else if (strcmp(name, "max_key_len") == 0)
            l->max_key_len = v;
        else if (strcmp(name, "max_value_len") == 0)
            l->max_value_len = v;
        else if (strcmp(name, "max_keys") == 0)
            l->max_keys = v;
        else
            fail_msg("unknown limit %s in %s", name, path);
    }
    fclose(f);
}

static const char *code_name(int code) {
    switch (code) {
    case DDP_EFRAME: return "DDP_EFRAME";
    case DDP_ETOOBIG: return "DDP_ETOOBIG";
    default: return "OTHER";
    }
}

/* One line describing a parsed request, as the expect files spell it. */
static void describe(const rdzv_req_t *r, ddp_buf_t *o) {
    char k[300];
    const char *name = rdzv__cmd_name(r->cmd);
    ddp_buf_printf(o, "%s", name);
    switch (r->cmd) {
    case RDZV_CMD_VALIDATE: ddp_buf_printf(o, " magic=0x%08x", r->u32); break;
    case RDZV_CMD_PING: ddp_buf_printf(o, " nonce=%u", r->u32); break;
    case RDZV_CMD_SET:
    case RDZV_CMD_APPEND:
    case RDZV_CMD_QUEUE_PUSH:
        ddp_buf_printf(o, " key='%s' value_len=%zu",
                       rdzv__key_repr(r->key.p, r->key.n, k, sizeof k), r->val.n);
        break;
    case RDZV_CMD_COMPARE_SET:
        ddp_buf_printf(o, " key='%s' expected_len=%zu desired_len=%zu",
                       rdzv__key_repr(r->key.p, r->key.n, k, sizeof k), r->val.n, r->val2.n);
        break;
    case RDZV_CMD_GET:
    case RDZV_CMD_DELETE_KEY:
    case RDZV_CMD_QUEUE_POP:
    case RDZV_CMD_QUEUE_LEN:
        ddp_buf_printf(o, " key='%s'", rdzv__key_repr(r->key.p, r->key.n, k, sizeof k));
        break;
    case RDZV_CMD_ADD:
        ddp_buf_printf(o, " key='%s' delta=%lld", rdzv__key_repr(r->key.p, r->key.n, k, sizeof k),
                       (long long)r->delta);
        break;
    case RDZV_CMD_BARRIER:
        ddp_buf_printf(o, " key='%s' world_size=%lld",
                       rdzv__key_repr(r->key.p, r->key.n, k, sizeof k), (long long)r->delta);
        break;
    case RDZV_CMD_GET_WAIT:
        ddp_buf_printf(o, " key='%s' mode=%u", rdzv__key_repr(r->key.p, r->key.n, k, sizeof k),
                       r->mode);
        break;
    case RDZV_CMD_CHECK:
    case RDZV_CMD_WAIT:
    case RDZV_CMD_MULTI_GET:
    case RDZV_CMD_MULTI_SET: {
        int mset = r->cmd == RDZV_CMD_MULTI_SET;
        ddp_buf_printf(o, " keys=%llu", (unsigned long long)r->nkeys);
        const uint8_t *cur = r->list.p;
        for (uint64_t i = 0; i < r->nkeys; i++) {
            rdzv_slice_t key, val;
            rdzv__list_next(&cur, mset, &key, &val);
            ddp_buf_printf(o, " '%s'", rdzv__key_repr(key.p, key.n, k, sizeof k));
            if (mset)
                ddp_buf_printf(o, "=%zu", val.n);
        }
        assert_ptr_equal(cur, r->list.p + r->list.n);
        break;
    }
    case RDZV_CMD_AUTH_HELLO:
    case RDZV_CMD_AUTH_PROOF: ddp_buf_printf(o, " payload=%zu", r->val.n); break;
    case RDZV_CMD_AUTH_HELLO_RUN:
        ddp_buf_printf(o, " payload=%zu run='%s'", r->val.n,
                       rdzv__key_repr(r->key.p, r->key.n, k, sizeof k));
        break;
    default: break;
    }
    ddp_buf_printf(o, "\n");
}

/* Parses all of input the way the server does and renders the result. */
static void run_parser(const uint8_t *in, size_t len, const rdzv_frame_limits_t *lim,
                       ddp_buf_t *o) {
    size_t off = 0;
    for (;;) {
        rdzv_req_t req;
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        long n = rdzv__frame_parse(in + off, len - off, lim, &req, &need, &err);
        if (n < 0) {
            assert_int_equal(n, err.code);
            ddp_buf_printf(o, "error %s at %ld: %s\n", code_name(err.code), err.offset, err.text);
            return;
        }
        if (n == 0) {
            if (off == len && need == 1) {
                ddp_buf_printf(o, off == 0 ? "incomplete need=1\n" : "end\n");
                return;
            }
            assert_true(need > len - off);
            ddp_buf_printf(o, "incomplete need=%zu\n", need);
            return;
        }
        assert_true((size_t)n <= len - off);
        describe(&req, o);
        off += (size_t)n;
    }
}

static void test_golden(void **state) {
    const golden_t *g = *state;
    char path[500];
    ddp_buf_t in = DDP_BUF_INIT, want = DDP_BUF_INIT, got = DDP_BUF_INIT;
    snprintf(path, sizeof path, "%s/input.bin", g->dir);
    assert_int_equal(read_file(path, &in), 0);
    snprintf(path, sizeof path, "%s/expect", g->dir);
    assert_int_equal(read_file(path, &want), 0);
    rdzv_frame_limits_t lim = default_limits();
    load_limits(g->dir, &lim);
    /* Copy the input to an exact-size heap block so ASan catches any read past its end. */
    uint8_t *exact = malloc(in.len ? in.len : 1);
    assert_non_null(exact);
    if (in.len)
        memcpy(exact, in.data, in.len);
    run_parser(exact, in.len, &lim, &got);
    assert_string_equal(got.len ? (char *)got.data : "", want.len ? (char *)want.data : "");

    /* Every proper prefix must parse as whole frames followed by "incomplete" (never an
     * error the full input does not have, and never a need at or below what is there). */
    for (size_t cut = 0; cut < in.len; cut++) {
        ddp_buf_t part = DDP_BUF_INIT;
        uint8_t *pre = malloc(cut ? cut : 1);
        assert_non_null(pre);
        memcpy(pre, in.data, cut);
        run_parser(pre, cut, &lim, &part);
        const char *last = strrchr((char *)part.data, '\n');
        assert_non_null(last);
        const char *line = last;
        while (line > (char *)part.data && line[-1] != '\n')
            line--;
        if (strncmp(line, "error", 5) == 0)
            assert_non_null(strstr((char *)want.data, line));
        free(pre);
        ddp_buf_free(&part);
    }
    free(exact);
    ddp_buf_free(&in);
    ddp_buf_free(&want);
    ddp_buf_free(&got);
}

static void test_encoders(void **state) {
    (void)state;
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(rdzv__put_u8(&b, RDZV_CMD_SET), 0);
    assert_int_equal(rdzv__put_blob(&b, "key", 3), 0);
    assert_int_equal(rdzv__put_blob(&b, NULL, 0), 0);
    assert_int_equal(rdzv__put_u32(&b, 0x01020304u), 0);
    assert_int_equal(rdzv__put_i64(&b, -2), 0);
    assert_int_equal(b.len, 1 + 8 + 3 + 8 + 4 + 8);
    static const uint8_t want[] = {1,   3, 0,    0,    0,    0,    0,    0,    0,    'k', 'e',
                                   'y', 0, 0,    0,    0,    0,    0,    0,    0,    4,   3,
                                   2,   1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_memory_equal(b.data, want, sizeof want);
    rdzv_frame_limits_t lim = default_limits();
    rdzv_req_t r;
    size_t need;
    /* The SET part parses back to the same key and an empty value. */
    assert_int_equal(rdzv__frame_parse(b.data, 20, &lim, &r, &need, NULL), 20);
    assert_int_equal(r.key.n, 3);
    assert_memory_equal(r.key.p, "key", 3);
    assert_int_equal(r.val.n, 0);
    assert_int_equal(rdzv__get_u32(b.data + 20), 0x01020304u);
    ddp_buf_free(&b);
}

static void test_key_repr(void **state) {
    (void)state;
    char out[300];
    assert_string_equal(rdzv__key_repr("r1/nccl/0", 9, out, sizeof out), "r1/nccl/0");
    assert_string_equal(rdzv__key_repr("a\nb\\", 4, out, sizeof out), "a\\x0ab\\x5c");
    char big[100];
    memset(big, 'x', sizeof big);
    rdzv__key_repr(big, sizeof big, out, sizeof out);
    assert_int_equal(strlen(out), 67);
    /* A tiny output buffer is still terminated. */
    rdzv__key_repr("abcdef", 6, out, 4);
    assert_true(strlen(out) < 4);
}

static void test_null_err(void **state) {
    (void)state;
    /* err may be NULL: errors are still returned. */
    static const uint8_t bad[] = {0xee};
    rdzv_frame_limits_t lim = default_limits();
    rdzv_req_t r;
    size_t need;
    assert_int_equal(rdzv__frame_parse(bad, 1, &lim, &r, &need, NULL), DDP_EFRAME);
    assert_string_equal(rdzv__cmd_name(0xee), "UNKNOWN");
    assert_string_equal(rdzv__cmd_name(RDZV_CMD_CANCEL_WAIT), "CANCEL_WAIT");
    /* Every rendezvous command has its name, as the store's log lines give it. */
    for (int c = RDZV_CMD_RDZV_JOIN; c <= RDZV_CMD_RDZV_LAST; c++)
        assert_string_equal(rdzv__cmd_name(c), rdzv_round_cmd_name(c));
    assert_string_equal(rdzv__cmd_name(RDZV_CMD_RDZV_STATUS), "RDZV_STATUS");
    assert_string_equal(rdzv__cmd_name(RDZV_CMD_RDZV_UNFIT), "RDZV_UNFIT");
    assert_string_equal(rdzv__cmd_name(RDZV_CMD_RDZV_FINISH), "RDZV_FINISH");
    assert_string_equal(rdzv__cmd_name(RDZV_CMD_RDZV_LAST + 1), "UNKNOWN");
}

static int cmp_case(const void *a, const void *b) {
    return strcmp(((const golden_t *)a)->name, ((const golden_t *)b)->name);
}

/* Why no golden case runs (the data directory is missing, empty or too full), for test_no_cases. */
static char no_cases_why[600];

/* Stands in for the golden cases when there are none, so the run fails instead of passing
 * without having parsed a single frame. */
static void test_no_cases(void **state) {
    (void)state;
    fail_msg("%s", no_cases_why);
}

/* Every directory under DATA_DIR is a case (a file such as gen.py is not); a case without its
 * input.bin or expect fails in test_golden. Returns the number found, or -1 with no_cases_why. */
static int find_cases(void) {
    DIR *d = opendir(DATA_DIR);
    if (d == NULL) {
        snprintf(no_cases_why, sizeof no_cases_why,
                 "cannot open %s: %s (run from the repository root)", DATA_DIR, strerror(errno));
        return -1;
    }
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[sizeof cases[0].dir];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", DATA_DIR, de->d_name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == MAX_CASES) {
            snprintf(no_cases_why, sizeof no_cases_why,
                     "more than %d cases under %s: raise MAX_CASES", MAX_CASES, DATA_DIR);
            closedir(d);
            return -1;
        }
        snprintf(cases[n].name, sizeof cases[n].name, "golden_%s", de->d_name);
        memcpy(cases[n].dir, path, sizeof path);
        n++;
    }
    closedir(d);
    if (n == 0) {
        snprintf(no_cases_why, sizeof no_cases_why, "no golden case (a <case>/ directory) under %s",
                 DATA_DIR);
        return -1;
    }
    qsort(cases, (size_t)n, sizeof cases[0], cmp_case);
    return n;
}

int main(void) {
    int found = find_cases();
    size_t n = found > 0 ? (size_t)found : 1;
    struct CMUnitTest *tests = calloc(n + 3, sizeof *tests);
    if (tests == NULL)
        return 1;
    if (found > 0) {
        for (size_t i = 0; i < n; i++) {
            tests[i].name = cases[i].name;
            tests[i].test_func = test_golden;
            tests[i].initial_state = &cases[i];
        }
    } else {
        tests[0].name = "golden_cases";
        tests[0].test_func = test_no_cases;
    }
    tests[n].name = "encoders";
    tests[n].test_func = test_encoders;
    tests[n + 1].name = "key_repr";
    tests[n + 1].test_func = test_key_repr;
    tests[n + 2].name = "null_err";
    tests[n + 2].test_func = test_null_err;
    int rc = _cmocka_run_group_tests("rdzv_frame", tests, n + 3, NULL, NULL);
    free(tests);
    return rc;
}
