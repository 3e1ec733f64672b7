/* SPDX-License-Identifier: Apache-2.0
 * ddp_str_escape: control bytes and malformed UTF-8 written as visible escapes (ddp_escape.h). */
#include "ddp_escape.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 character at s[0..len) (2-4 bytes; s[0] >= 0x80), or 0 when it is
 * malformed, overlong, a surrogate, above U+10FFFF, or a C1 control (U+0080..U+009F). */
static size_t utf8_len(const unsigned char *s, size_t len) {
    size_t n;
    uint32_t cp;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2, cp = s[0] & 0x1fu;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3, cp = s[0] & 0x0fu;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4, cp = s[0] & 0x07u;
    else
        return 0; /* a continuation byte, or a lead byte no valid character starts with */
    if (n > len)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f)
        return 0;
    return n;
}

/* The escape of the control or stray byte c, into esc (5 bytes); returns its length. */
static size_t escape_byte(unsigned char c, char esc[5]) {
    static const char named[] = {
        ['\a'] = 'a', ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\v'] = 'v',
        ['\f'] = 'f', ['\r'] = 'r', [0x1b] = 'e', ['\\'] = '\\'};
    if (c < sizeof named && named[c] != '\0') {
        esc[0] = '\\';
        esc[1] = named[c];
        return 2;
    }
    snprintf(esc, 5, "\\x%02x", c);
    return 4;
}

size_t ddp_str_escape(char *out, size_t cap, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t need = 0, used = 0;
    int cut = cap == 0;
    for (size_t i = 0; i < len;) {
        char esc[5];
        const char *unit;
        size_t n, advance;
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
            unit = (const char *)p + i, n = advance = 1;
        } else if (p[i] >= 0x80 && (advance = utf8_len(p + i, len - i)) > 0) {
            unit = (const char *)p + i, n = advance;
        } else {
            n = escape_byte(p[i], esc), unit = esc, advance = 1;
        }
        /* Once one unit did not fit, none after it is written: the output stays a prefix. */
        if (!cut && used + n < cap) {
            memcpy(out + used, unit, n);
            used += n;
        } else {
            cut = 1;
        }
        need += n;
        i += advance;
    }
    if (cap > 0)
        out[used] = '\0';
    return need;
}

const char *ddp_str_escaped(const char *s, char *buf, size_t cap) {
    if (s == NULL)
        s = "";
    ddp_str_escape(buf, cap, s, strlen(s));
    return cap > 0 ? buf : "";
}
