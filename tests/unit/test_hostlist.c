/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/hostlist.c: Slurm hostlists (ranges, zero padding, several bracket
 * groups, separators, malformed input with offsets) and per-node count lists ("3,1(x3)"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_slurm.h"

/* The end of a variadic argument list (a typed null pointer, unlike a bare NULL). */
#define END ((const char *)0)

/* Expands s and compares with the NULL-terminated expected hosts. */
static void expect_hosts(const char *s, ...) {
    launch_hostlist_t hl;
    ddp_err_t e = {0};
    int rc = launch_hostlist_parse(s, &hl, &e);
    if (rc != 0)
        print_error("'%s': %s\n", s, e.text);
    assert_int_equal(rc, 0);
    va_list ap;
    va_start(ap, s);
    size_t i = 0;
    const char *want;
    while ((want = va_arg(ap, const char *)) != NULL) {
        assert_true(i < hl.n);
        assert_string_equal(hl.hosts[i], want);
        i++;
    }
    va_end(ap);
    assert_int_equal(hl.n, i);
    launch_hostlist_free(&hl);
    assert_null(hl.hosts);
}

static void expect_malformed(const char *s, long offset, const char *what) {
    launch_hostlist_t hl;
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = launch_hostlist_parse(s, &hl, &e);
    if (rc != DDP_EUSAGE || e.offset != offset || strstr(e.text, what) == NULL)
        print_error("'%s': rc %d offset %ld text '%s'\n", s, rc, e.offset, e.text);
    assert_int_equal(rc, DDP_EUSAGE);
    assert_int_equal(e.offset, offset);
    assert_non_null(strstr(e.text, what));
    assert_non_null(strstr(e.text, "malformed hostlist"));
    assert_null(hl.hosts);
    assert_int_equal(hl.n, 0);
}

static void test_single_hosts(void **state) {
    (void)state;
    expect_hosts("vm", "vm", END);
    expect_hosts("n1", "n1", END);
    expect_hosts("host.example.com", "host.example.com", END);
    expect_hosts("a,b,c", "a", "b", "c", END);
    expect_hosts("a b\tc\n", "a", "b", "c", END);
    expect_hosts(" , a ,, b ", "a", "b", END);
}

static void test_ranges(void **state) {
    (void)state;
    expect_hosts("n[1-2]", "n1", "n2", END);
    expect_hosts("n[1-4]", "n1", "n2", "n3", "n4", END);
    expect_hosts("n[1,3-4]", "n1", "n3", "n4", END);
    expect_hosts("node[01-04,07]", "node01", "node02", "node03", "node04", "node07", END);
    expect_hosts("node[8-11]", "node8", "node9", "node10", "node11", END);
    expect_hosts("node[098-101]", "node098", "node099", "node100", "node101", END);
    expect_hosts("gpu-a[1-2],gpu-b3", "gpu-a1", "gpu-a2", "gpu-b3", END);
    expect_hosts("n[5]", "n5", END);
    expect_hosts("n[1-2]-ib", "n1-ib", "n2-ib", END);
    expect_hosts("[1-2]x", "1x", "2x", END);
}

static void test_several_groups(void **state) {
    (void)state;
    expect_hosts("r[1-2]n[01-02]", "r1n01", "r1n02", "r2n01", "r2n02", END);
    expect_hosts("rack[1,3]-n[1-2],login", "rack1-n1", "rack1-n2", "rack3-n1", "rack3-n2", "login",
                 END);
    expect_hosts("a[1-2] b[3-4]", "a1", "a2", "b3", "b4", END);
}

static void test_malformed(void **state) {
    (void)state;
    expect_malformed("n[1-", 4, "expected a number after '-'");
    expect_malformed("n[1-2", 5, "missing ']'");
    expect_malformed("n[]", 2, "empty range");
    expect_malformed("n[a-b]", 2, "expected a number");
    expect_malformed("n[3-1]", 4, "range goes downwards");
    expect_malformed("n1]", 2, "']' without '['");
    expect_malformed("n[1 2]", 3, "unexpected character in brackets");
    expect_malformed("n[[1]]", 2, "expected a number");
    expect_malformed("n[1-2]@x", 6, "character not allowed");
    expect_malformed("", 0, "no host");
    expect_malformed(" ,, ", 0, "no host");
    expect_malformed("n[1234567890]", 2, "a number longer than 9 digits");
    expect_malformed("n[1-1234567890]", 4, "a number longer than 9 digits");
    expect_malformed("n[123456789]x[", 14, "expected a number in brackets");
}

static void test_limits(void **state) {
    (void)state;
    launch_hostlist_t hl;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_hostlist_parse("n[1-100000]", &hl, &e), DDP_ETOOBIG);
    assert_non_null(strstr(e.text, "more than"));
    ddp_err_clear(&e);
    assert_int_equal(launch_hostlist_parse("a[1-300]b[1-300]", &hl, &e), DDP_ETOOBIG);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ddp_err_clear(&e);
    assert_int_equal(launch_hostlist_parse(longname, &hl, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "longer than"));
    assert_non_null(strstr(e.text, "...")); /* long input quoted shortened */
    assert_int_equal(launch_hostlist_parse("n[1-65536]", &hl, NULL), 0);
    assert_int_equal(hl.n, 65536);
    assert_string_equal(hl.hosts[65535], "n65536");
    launch_hostlist_free(&hl);
}

static void expect_counts(const char *s, size_t n, ...) {
    launch_counts_t c;
    ddp_err_t e = {0};
    int rc = launch_counts_parse(s, &c, &e);
    if (rc != 0)
        print_error("'%s': %s\n", s, e.text);
    assert_int_equal(rc, 0);
    assert_int_equal(c.n, n);
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(c.v[i], va_arg(ap, int));
    va_end(ap);
    launch_counts_free(&c);
}

static void test_counts(void **state) {
    (void)state;
    expect_counts("2", 1, 2);
    expect_counts("1(x2)", 2, 1, 1);
    expect_counts("2(x2)", 2, 2, 2);
    expect_counts("2,1", 2, 2, 1);
    expect_counts("3,1(x3)", 4, 3, 1, 1, 1);
    expect_counts("4(x2),2,1(x2)", 5, 4, 4, 2, 1, 1);
    static const struct {
        const char *s;
        long off;
    } bad[] = {{"", 0},     {"2(x", 3}, {"(x2)", 0}, {"2(2)", 2}, {"2(x0)", 3},
               {"2(x2", 4}, {"2,", 2},  {"2;1", 1},  {"a", 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        launch_counts_t c;
        ddp_err_t e;
        ddp_err_clear(&e);
        int rc = launch_counts_parse(bad[i].s, &c, &e);
        if (rc != DDP_EUSAGE || e.offset != bad[i].off)
            print_error("'%s': rc %d offset %ld '%s'\n", bad[i].s, rc, e.offset, e.text);
        assert_int_equal(rc, DDP_EUSAGE);
        assert_int_equal(e.offset, bad[i].off);
        assert_non_null(strstr(e.text, "malformed count list"));
        assert_null(c.v);
    }
    launch_counts_t c;
    assert_int_equal(launch_counts_parse("1(x70000)", &c, NULL), DDP_ETOOBIG);
    /* A number too long for any count says so, not "expected a number". */
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_counts_parse("2,1234567890", &c, &e), DDP_EUSAGE);
    assert_int_equal(e.offset, 2);
    assert_non_null(strstr(e.text, "a number longer than 9 digits"));
    ddp_err_clear(&e);
    assert_int_equal(launch_counts_parse("1(x1234567890)", &c, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "a number longer than 9 digits"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_hosts),   cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_several_groups), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_limits),         cmocka_unit_test(test_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
