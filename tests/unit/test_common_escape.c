/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of ddp_str_escape (common/ddp_escape.c): control bytes as visible escapes, UTF-8
 * kept when valid and escaped byte by byte when not, C1 controls escaped, output cut only between
 * whole escapes, the snprintf-like length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "ddp_escape.h"

/* Escapes the first len bytes of s with room to spare; returns a static buffer. */
static const char *esc_n(const char *s, size_t len) {
    static char buf[512];
    size_t need = ddp_str_escape(buf, sizeof buf, s, len);
    assert_int_equal(need, strlen(buf));
    return buf;
}

static const char *esc(const char *s) {
    return esc_n(s, strlen(s));
}

static void test_plain_text_unchanged(void **state) {
    (void)state;
    assert_string_equal(esc("node-01.cluster_a:29400 [ok] ~!@#$%^&*()"),
                        "node-01.cluster_a:29400 [ok] ~!@#$%^&*()");
    assert_string_equal(esc(""), "");
}

static void test_controls(void **state) {
    (void)state;
    assert_string_equal(esc("\x1b[2J\x1b[Hpwned"), "\\e[2J\\e[Hpwned");
    assert_string_equal(esc("a\ab\bc\td\ne\vf\fg\rh"), "a\\ab\\bc\\td\\ne\\vf\\fg\\rh");
    assert_string_equal(esc("\x01\x1f\x7f"), "\\x01\\x1f\\x7f");
    assert_string_equal(esc("back\\slash"), "back\\\\slash");
    /* A NUL inside the data is shown, not taken as the end. */
    assert_string_equal(esc_n("a\0b", 3), "a\\x00b");
}

static void test_utf8(void **state) {
    (void)state;
    /* Valid characters of 2, 3 and 4 bytes pass. */
    assert_string_equal(esc("h\xc3\xa9te \xe2\x82\xac \xf0\x9f\x98\x80"),
                        "h\xc3\xa9te \xe2\x82\xac \xf0\x9f\x98\x80");
    /* C1 controls (U+009B is CSI on some terminals) are escaped byte by byte. */
    assert_string_equal(esc("\xc2\x9b"
                            "2J"),
                        "\\xc2\\x9b2J");
    assert_string_equal(esc("\xc2\x85"), "\\xc2\\x85");
    assert_string_equal(esc("\xc2\xa0"), "\xc2\xa0"); /* U+00A0 is not a control */
    /* A raw 8-bit CSI, stray continuation bytes, overlong forms, surrogates, truncation. */
    assert_string_equal(esc("\x9b"
                            "2J"),
                        "\\x9b2J");
    assert_string_equal(esc("\x80\xbf"), "\\x80\\xbf");
    assert_string_equal(esc("\xc0\x80"), "\\xc0\\x80");
    assert_string_equal(esc("\xe0\x80\x80"), "\\xe0\\x80\\x80");
    assert_string_equal(esc("\xed\xa0\x80"), "\\xed\\xa0\\x80");
    assert_string_equal(esc("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
    assert_string_equal(esc("\xe2\x82"), "\\xe2\\x82");
    assert_string_equal(esc("\xff\xfe"), "\\xff\\xfe");
}

static void test_cut_between_units(void **state) {
    (void)state;
    char buf[8];
    /* "abc\e" and its NUL need 6 bytes: with 5 the escape is left out whole. */
    size_t need = ddp_str_escape(buf, 5, "abc\x1b", 4);
    assert_int_equal(need, 5);
    assert_string_equal(buf, "abc");
    need = ddp_str_escape(buf, 6, "abc\x1b", 4);
    assert_string_equal(buf, "abc\\e");
    need = ddp_str_escape(buf, sizeof buf,
                          "a\x01"
                          "bc",
                          4);
    assert_int_equal(need, 7);
    assert_string_equal(buf, "a\\x01bc");
    /* Nothing after a unit that did not fit, even a shorter one. */
    need = ddp_str_escape(buf, 4,
                          "a\x01"
                          "b",
                          3);
    assert_int_equal(need, 6);
    assert_string_equal(buf, "a");
    /* A UTF-8 character is not split either. */
    need = ddp_str_escape(buf, 3, "a\xe2\x82\xac", 4);
    assert_int_equal(need, 4);
    assert_string_equal(buf, "a");
    /* cap 0 writes nothing and still tells the length. */
    assert_int_equal(ddp_str_escape(NULL, 0, "\x1b", 1), 2);
    assert_int_equal(ddp_str_escape(buf, 1, "x", 1), 1);
    assert_string_equal(buf, "");
}

static void test_escaped_helper(void **state) {
    (void)state;
    char buf[32];
    assert_string_equal(ddp_str_escaped("x\ry", buf, sizeof buf), "x\\ry");
    assert_string_equal(ddp_str_escaped(NULL, buf, sizeof buf), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text_unchanged),
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_cut_between_units),
        cmocka_unit_test(test_escaped_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
