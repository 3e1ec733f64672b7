/* SPDX-License-Identifier: Apache-2.0
 * ddp_timing.c: the timing record's codec (layout in ddp_timing.h). */
#include "ddp_timing.h"

#include <errno.h>
#include <stdio.h>

/* Offsets of the fields in the record. */
#define TIMING_COMPUTE 3
#define TIMING_WAIT 24
#define TIMING_STEPS 45
#define TIMING_HASH 56

static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

/* width decimal digits of v, zero-padded, at out (the high digits are dropped). */
static void put_digits(char *out, int width, uint64_t v) {
    for (int i = width - 1; i >= 0; i--, v /= 10)
        out[i] = (char)('0' + v % 10);
}

static int get_digits(const char *s, int width, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < width; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - d) / 10)
            return -EINVAL;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

void ddp_timing_format(const ddp_timing_t *t, char out[DDP_TIMING_LEN]) {
    out[0] = 't';
    out[1] = '1';
    out[2] = out[TIMING_WAIT - 1] = out[TIMING_STEPS - 1] = out[TIMING_HASH - 1] = ' ';
    /* 20 digits hold every uint64_t (the largest has 20). */
    put_digits(out + TIMING_COMPUTE, 20, t->compute_ns);
    put_digits(out + TIMING_WAIT, 20, t->wait_ns);
    put_digits(out + TIMING_STEPS, 10, t->steps);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", fnv1a(out, TIMING_HASH - 1));
    for (int i = 0; i < 8; i++)
        out[TIMING_HASH + i] = hex[i];
    out[DDP_TIMING_LEN - 1] = '\n';
}

int ddp_timing_parse(const char *s, size_t len, ddp_timing_t *t) {
    if (len < DDP_TIMING_LEN || s[0] != 't' || s[1] != '1' || s[2] != ' ' ||
        s[TIMING_WAIT - 1] != ' ' || s[TIMING_STEPS - 1] != ' ' || s[TIMING_HASH - 1] != ' ' ||
        s[DDP_TIMING_LEN - 1] != '\n')
        return -EINVAL;
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", fnv1a(s, TIMING_HASH - 1));
    for (int i = 0; i < 8; i++)
        if (s[TIMING_HASH + i] != hex[i])
            return -EINVAL;
    uint64_t c, w, n;
    if (get_digits(s + TIMING_COMPUTE, 20, &c) < 0 || get_digits(s + TIMING_WAIT, 20, &w) < 0 ||
        get_digits(s + TIMING_STEPS, 10, &n) < 0 || n > UINT32_MAX)
        return -EINVAL;
    t->compute_ns = c;
    t->wait_ns = w;
    t->steps = (uint32_t)n;
    return 0;
}
