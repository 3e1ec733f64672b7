/* SPDX-License-Identifier: Apache-2.0
 * Strict number parsing (no atoi): the whole string must be a number in range. */
#ifndef DDP_PARSE_H
#define DDP_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Parses a base-10 integer in [min, max]. Returns 0, or -EINVAL (junk) / -ERANGE. */
int ddp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Parses a non-negative decimal number of seconds ("30", "0.5"). Returns 0 or -EINVAL. */
int ddp_parse_seconds(const char *s, double *out);

/* Writes ms milliseconds as seconds the way ddp_parse_seconds reads them, without an exponent or
 * trailing zeros: "50", "0.5", "2000000", "0.001". Returns out (cap >= 32), for use as a printf
 * argument. */
const char *ddp_seconds_text(int64_t ms, char *out, size_t cap);

#endif
