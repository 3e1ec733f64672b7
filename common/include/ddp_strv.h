/* SPDX-License-Identifier: Apache-2.0
 * ddp_strv_t: a NULL-terminated vector of owned strings, for argv and envp built before fork. */
#ifndef DDP_STRV_H
#define DDP_STRV_H

#include <stddef.h>

typedef struct ddp_strv {
    char **v; /* NULL-terminated once anything was pushed; owned, with every string */
    size_t n;
    size_t cap;
} ddp_strv_t;

#define DDP_STRV_INIT                                                                              \
    { NULL, 0, 0 }

/* Appends a copy of s. Returns 0 or -ENOMEM. */
int ddp_strv_push(ddp_strv_t *sv, const char *s);

/* Appends a formatted string. Returns 0 or -ENOMEM. */
int ddp_strv_pushf(ddp_strv_t *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets "NAME=value" in an environment vector, replacing an existing NAME. Returns 0 or -ENOMEM. */
int ddp_strv_setenv(ddp_strv_t *sv, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees every string and the vector; sv is left empty. */
void ddp_strv_free(ddp_strv_t *sv);

#endif
