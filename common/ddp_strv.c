/* SPDX-License-Identifier: Apache-2.0
 * ddp_strv_t: argv/envp vectors (git's strvec, with environment helpers). */
#include "ddp_strv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int strv_push_owned(ddp_strv_t *sv, char *s) {
    if (s == NULL)
        return -ENOMEM;
    if (sv->n + 2 > sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 16;
        char **v = realloc(sv->v, cap * sizeof *v);
        if (v == NULL) {
            free(s);
            return -ENOMEM;
        }
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = s;
    sv->v[sv->n] = NULL;
    return 0;
}

int ddp_strv_push(ddp_strv_t *sv, const char *s) {
    return strv_push_owned(sv, strdup(s));
}

int ddp_strv_pushf(ddp_strv_t *sv, const char *fmt, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return strv_push_owned(sv, n < 0 ? NULL : s);
}

int ddp_strv_setenv(ddp_strv_t *sv, const char *name, const char *fmt, ...) {
    char *val = NULL, *entry = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&val, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    n = asprintf(&entry, "%s=%s", name, val);
    free(val);
    if (n < 0)
        return -ENOMEM;
    size_t nlen = strlen(name);
    for (size_t i = 0; i < sv->n; i++) {
        if (strncmp(sv->v[i], name, nlen) == 0 && sv->v[i][nlen] == '=') {
            free(sv->v[i]);
            sv->v[i] = entry;
            return 0;
        }
    }
    return strv_push_owned(sv, entry);
}

void ddp_strv_free(ddp_strv_t *sv) {
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = sv->cap = 0;
}
