/* SPDX-License-Identifier: Apache-2.0
 * The log line prefix of tee'd console lines (--log_line_prefix_template): Python's
 * string.Template syntax, rendered as torchrun's safe_substitute does. The check (at parse time,
 * by the launcher) and the render (once per worker stream) share the macro list below. The stamp of
 * --timestamp_output follows the tag; it is rendered here too, once per read that starts a line. */
#include "agent.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* An unknown macro's name is quoted in messages up to this many characters. */
#define NAME_QUOTE_MAX 48

static const char *const prefix_macros[] = {"role_name", "local_rank", "rank", "hostname"};
#define N_PREFIX_MACROS (sizeof prefix_macros / sizeof prefix_macros[0])

/* Length of the identifier ([_a-zA-Z][_a-zA-Z0-9]*) at p, 0 when there is none. */
static size_t ident_len(const char *p) {
    size_t n = 0;
    if (!(isalpha((unsigned char)*p) || *p == '_'))
        return 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_')
        n++;
    return n;
}

/* Finds the placeholder a '$' at t starts: *name and *nlen are its identifier, *skip the
 * characters it spans. Returns the index in prefix_macros; -1 for an unknown identifier; -3 for
 * "$$" (skip 2); -2 when t starts no placeholder (a lone '$' that stays as written). */
static int macro_at(const char *t, const char **name, size_t *nlen, size_t *skip) {
    if (t[1] == '$') {
        *skip = 2;
        return -3;
    }
    const char *id = t[1] == '{' ? t + 2 : t + 1;
    size_t n = ident_len(id);
    if (n == 0 || (t[1] == '{' && id[n] != '}'))
        return -2;
    *name = id;
    *nlen = n;
    *skip = (size_t)(id - t) + n + (t[1] == '{');
    for (size_t i = 0; i < N_PREFIX_MACROS; i++)
        if (strlen(prefix_macros[i]) == n && strncmp(prefix_macros[i], id, n) == 0)
            return (int)i;
    return -1;
}

int agent_prefix_check(const char *flag, const char *tmpl, ddp_err_t *err) {
    if (strlen(tmpl) > AGENT_MAX_PREFIX_TEMPLATE)
        return ddp_err_set(err, DDP_EUSAGE, "%s: longer than %d characters", flag,
                           AGENT_MAX_PREFIX_TEMPLATE);
    for (const char *t = tmpl; *t; t++) {
        const char *name = NULL;
        size_t n = 0, skip = 1;
        if (*t != '$')
            continue;
        int m = macro_at(t, &name, &n, &skip);
        if (m == -1)
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s: unknown macro '%.*s' (known: ${role_name}, ${local_rank}, "
                               "${rank}, ${hostname})",
                               flag, (int)(n < NAME_QUOTE_MAX ? n : NAME_QUOTE_MAX), name);
        if (m != -2)
            t += skip - 1;
    }
    return 0;
}

/* Appends n bytes of s to out (len so far, cap with room for the NUL), cutting at the end. */
static size_t put(char *out, size_t len, size_t cap, const char *s, size_t n) {
    if (len + n > cap - 1)
        n = cap - 1 - len;
    memcpy(out + len, s, n);
    return len + n;
}

size_t agent_prefix_render(const char *tmpl, const char *role, int local_rank, int rank,
                           const char *hostname, char *out, size_t cap) {
    if (cap == 0)
        return 0;
    if (tmpl == NULL)
        tmpl = AGENT_DEFAULT_LOG_LINE_PREFIX;
    size_t len = 0;
    for (const char *t = tmpl; *t; t++) {
        const char *name = NULL;
        size_t n = 0, skip = 1;
        int m = *t == '$' ? macro_at(t, &name, &n, &skip) : -2;
        char num[16];
        const char *v;
        if (m == -2 || m == -1) { /* not a placeholder, or unknown: kept as written */
            v = t;
            skip = m == -1 ? skip : 1;
        } else if (m == -3) {
            v = "$";
        } else if (m == 0) {
            v = role;
        } else if (m == 3) {
            v = hostname;
        } else {
            snprintf(num, sizeof num, "%d", m == 1 ? local_rank : rank);
            v = num;
        }
        len = put(out, len, cap, v, v == t ? skip : strlen(v));
        t += skip - 1;
    }
    out[len] = '\0';
    return len;
}

/* Writes v as exactly width decimal digits at out (v fits: the callers' ranges). */
static void digits(char *out, long v, int width) {
    for (int i = width - 1; i >= 0; i--, v /= 10)
        out[i] = (char)('0' + v % 10);
}

void agent_stamp_render(const struct timespec *t, char out[AGENT_STAMP_LEN + 1]) {
    /* Fixed width, digits written in place: no snprintf and no locale on the output path. */
    memcpy(out, "0000-00-00T00:00:00.000000Z ", AGENT_STAMP_LEN + 1);
    struct tm tm;
    if (t->tv_nsec < 0 || t->tv_nsec >= 1000000000 || gmtime_r(&t->tv_sec, &tm) == NULL ||
        tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
        return;
    digits(out, tm.tm_year + 1900L, 4);
    digits(out + 5, tm.tm_mon + 1L, 2);
    digits(out + 8, tm.tm_mday, 2);
    digits(out + 11, tm.tm_hour, 2);
    digits(out + 14, tm.tm_min, 2);
    digits(out + 17, tm.tm_sec, 2);
    digits(out + 20, t->tv_nsec / 1000, 6);
}
