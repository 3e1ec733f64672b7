/* SPDX-License-Identifier: Apache-2.0
 * ddp_parse_*: range-checked conversions used by every parser of user input, and
 * ddp_seconds_text, their way back for durations in messages. */
#include "ddp_parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int ddp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (s == NULL || *s == '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int ddp_parse_seconds(const char *s, double *out) {
    if (s == NULL || *s == '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v) || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

const char *ddp_seconds_text(int64_t ms, char *out, size_t cap) {
    const char *sign = ms < 0 ? "-" : "";
    uint64_t m = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
    uint64_t frac = m % 1000;
    if (frac == 0)
        snprintf(out, cap, "%s%llu", sign, (unsigned long long)(m / 1000));
    else if (frac % 100 == 0)
        snprintf(out, cap, "%s%llu.%llu", sign, (unsigned long long)(m / 1000),
                 (unsigned long long)(frac / 100));
    else if (frac % 10 == 0)
        snprintf(out, cap, "%s%llu.%02llu", sign, (unsigned long long)(m / 1000),
                 (unsigned long long)(frac / 10));
    else
        snprintf(out, cap, "%s%llu.%03llu", sign, (unsigned long long)(m / 1000),
                 (unsigned long long)frac);
    return out;
}
