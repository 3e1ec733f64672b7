/* SPDX-License-Identifier: Apache-2.0
 * ddp_buf_t growth with doubling; all allocation failures are reported, never fatal. */
#include "ddp_buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ddp_buf_reserve(ddp_buf_t *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1)
        return -ENOMEM;
    size_t need = b->len + extra + 1; /* +1 keeps room for a terminating NUL */
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int ddp_buf_append(ddp_buf_t *b, const void *p, size_t n) {
    int rc = ddp_buf_reserve(b, n);
    if (rc < 0)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int ddp_buf_printf(ddp_buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    int rc = ddp_buf_reserve(b, (size_t)n);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void ddp_buf_consume(ddp_buf_t *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void ddp_buf_free(ddp_buf_t *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
