/* SPDX-License-Identifier: Apache-2.0
 * ddp_buf_t: a growable byte buffer owned by the struct that embeds it.
 * Growth happens only through these calls, so no pointer is invalidated behind the caller. */
#ifndef DDP_BUF_H
#define DDP_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct ddp_buf {
    uint8_t *data; /* owned; NULL when cap == 0 */
    size_t len;
    size_t cap;
} ddp_buf_t;

#define DDP_BUF_INIT                                                                               \
    { NULL, 0, 0 }

/* Makes room for at least extra more bytes. Returns 0 or -ENOMEM; data may move. */
int ddp_buf_reserve(ddp_buf_t *b, size_t extra);

/* Appends n bytes. Returns 0 or -ENOMEM. */
int ddp_buf_append(ddp_buf_t *b, const void *p, size_t n);

/* Appends a formatted string (without its NUL; data stays NUL-terminated past len). */
int ddp_buf_printf(ddp_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Drops the first n bytes (n <= len), moving the rest to the front. */
void ddp_buf_consume(ddp_buf_t *b, size_t n);

/* Sets len to 0 and keeps the memory. */
static inline void ddp_buf_reset(ddp_buf_t *b) {
    b->len = 0;
}

/* Frees the memory and resets the buffer to DDP_BUF_INIT. */
void ddp_buf_free(ddp_buf_t *b);

#endif
