/* SPDX-License-Identifier: Apache-2.0
 * Slurm hostlist ("node[01-04,07],gpu-a[1-2]") and per-node count ("3,1(x3)") parsers.
 * Pure functions over strings: no environment, no I/O. Grammar, as Slurm writes them:
 *   list  := item { sep item }      sep := ',' or whitespace (runs allowed)
 *   item  := { literal | '[' range { ',' range } ']' }
 *   range := digits [ '-' digits ]  (the lower bound's width is kept as zero padding) */
#include "launch_slurm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inputs are quoted in messages up to this many characters, so a message fits DDP_ERR_TEXT_LEN. */
#define QUOTE_MAX 48

typedef struct range {
    unsigned long lo, hi;
    int width;
} range_t;

/* One piece of an item: a literal run (nr == 0) or a bracket group. */
typedef struct seg {
    const char *lit;
    size_t litlen;
    range_t *r;
    size_t nr;
} seg_t;

typedef struct item {
    seg_t *seg;
    size_t nseg, capseg;
} item_t;

static int bad(ddp_err_t *err, const char *s, size_t off, const char *what) {
    if (err != NULL && err->code == 0)
        err->offset = (long)off;
    return ddp_err_set(err, DDP_EUSAGE, "malformed hostlist '%.*s%s' at offset %zu: %s", QUOTE_MAX,
                       s, strlen(s) > QUOTE_MAX ? "..." : "", off, what);
}

static int is_sep(char c) {
    return c == ',' || isspace((unsigned char)c);
}

static int is_name_char(char c) {
    return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

static void item_clear(item_t *it) {
    for (size_t i = 0; i < it->nseg; i++)
        free(it->seg[i].r);
    it->nseg = 0;
}

static seg_t *item_push(item_t *it) {
    if (it->nseg == it->capseg) {
        size_t cap = it->capseg ? it->capseg * 2 : 8;
        seg_t *p = realloc(it->seg, cap * sizeof *p);
        if (p == NULL)
            return NULL;
        it->seg = p;
        it->capseg = cap;
    }
    seg_t *sg = &it->seg[it->nseg++];
    memset(sg, 0, sizeof *sg);
    return sg;
}

/* The most digits a number in a hostlist or count list may have: no real node index or count is
 * that long, and 9 digits fit an int. */
#define NUM_DIGITS_MAX 9
#define TOO_LONG "a number longer than 9 digits (no node index or count is that large)"

/* Reads digits at s[*i]; fills *v and *width. Returns 0, -EINVAL when there are none, -ERANGE when
 * there are more than NUM_DIGITS_MAX (*i is left at the first digit either way). */
static int read_num(const char *s, size_t *i, unsigned long *v, int *width) {
    size_t st = *i, j = st;
    unsigned long x = 0;
    while (isdigit((unsigned char)s[j])) {
        if (j - st >= NUM_DIGITS_MAX)
            return -ERANGE;
        x = x * 10 + (unsigned long)(s[j] - '0');
        j++;
    }
    if (j == st)
        return -EINVAL;
    *i = j;
    *v = x;
    *width = (int)(j - st);
    return 0;
}

/* Parses "[...]" starting at s[*i] == '[' into sg. */
static int parse_group(const char *s, size_t *i, seg_t *sg, ddp_err_t *err) {
    size_t cap = 0;
    (*i)++;
    for (;;) {
        range_t r;
        size_t at = *i;
        int rc = read_num(s, i, &r.lo, &r.width);
        if (rc < 0)
            return bad(err, s, at,
                       rc == -ERANGE  ? TOO_LONG
                       : s[at] == ']' ? "empty range"
                                      : "expected a number in brackets");
        r.hi = r.lo;
        if (s[*i] == '-') {
            (*i)++;
            int w;
            at = *i;
            if ((rc = read_num(s, i, &r.hi, &w)) < 0)
                return bad(err, s, at, rc == -ERANGE ? TOO_LONG : "expected a number after '-'");
            if (r.hi < r.lo)
                return bad(err, s, at, "range goes downwards");
        }
        if (sg->nr == cap) {
            cap = cap ? cap * 2 : 4;
            range_t *p = realloc(sg->r, cap * sizeof *p);
            if (p == NULL)
                return -ENOMEM;
            sg->r = p;
        }
        sg->r[sg->nr++] = r;
        if (s[*i] == ',') {
            (*i)++;
            continue;
        }
        if (s[*i] == ']') {
            (*i)++;
            return 0;
        }
        return bad(err, s, *i, s[*i] == '\0' ? "missing ']'" : "unexpected character in brackets");
    }
}

/* Number of hosts item expands to, saturated at LAUNCH_HOSTLIST_MAX_HOSTS + 1. */
static size_t item_count(const item_t *it) {
    size_t n = 1;
    for (size_t k = 0; k < it->nseg; k++) {
        if (it->seg[k].nr == 0)
            continue;
        size_t g = 0;
        for (size_t j = 0; j < it->seg[k].nr; j++) {
            g += it->seg[k].r[j].hi - it->seg[k].r[j].lo + 1;
            if (g > LAUNCH_HOSTLIST_MAX_HOSTS)
                return LAUNCH_HOSTLIST_MAX_HOSTS + 1;
        }
        n *= g;
        if (n > LAUNCH_HOSTLIST_MAX_HOSTS)
            return LAUNCH_HOSTLIST_MAX_HOSTS + 1;
    }
    return n;
}

/* Appends every name of it from segment k on, with name[0..len) already built. */
static int expand(const item_t *it, size_t k, char *name, size_t len, launch_hostlist_t *out) {
    if (k == it->nseg) {
        char *h = strndup(name, len);
        if (h == NULL)
            return -ENOMEM;
        out->hosts[out->n++] = h;
        return 0;
    }
    const seg_t *sg = &it->seg[k];
    if (sg->nr == 0) {
        if (len + sg->litlen > LAUNCH_HOSTNAME_MAX)
            return DDP_ETOOBIG;
        memcpy(name + len, sg->lit, sg->litlen);
        return expand(it, k + 1, name, len + sg->litlen, out);
    }
    for (size_t j = 0; j < sg->nr; j++) {
        for (unsigned long v = sg->r[j].lo; v <= sg->r[j].hi; v++) {
            char num[32];
            int w = snprintf(num, sizeof num, "%0*lu", sg->r[j].width, v);
            if (len + (size_t)w > LAUNCH_HOSTNAME_MAX)
                return DDP_ETOOBIG;
            memcpy(name + len, num, (size_t)w);
            int rc = expand(it, k + 1, name, len + (size_t)w, out);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Parses one item starting at s[*i] (not a separator) into it. */
static int parse_item(const char *s, size_t *i, item_t *it, ddp_err_t *err) {
    item_clear(it);
    while (s[*i] != '\0' && !is_sep(s[*i])) {
        seg_t *sg = item_push(it);
        if (sg == NULL)
            return -ENOMEM;
        if (s[*i] == '[') {
            int rc = parse_group(s, i, sg, err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (s[*i] == ']')
            return bad(err, s, *i, "']' without '['");
        sg->lit = s + *i;
        while (is_name_char(s[*i]))
            (*i)++;
        sg->litlen = (size_t)(s + *i - sg->lit);
        if (sg->litlen == 0)
            return bad(err, s, *i, "character not allowed in a host name");
    }
    return 0;
}

/* Long: one pass of the hostlist grammar, with its error messages. */
int launch_hostlist_parse(const char *s, launch_hostlist_t *out, ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    if (s == NULL)
        s = "";
    item_t it = {0};
    size_t cap = 0, i = 0;
    int rc = 0;
    char name[LAUNCH_HOSTNAME_MAX + 1];
    for (;;) {
        while (is_sep(s[i]))
            i++;
        if (s[i] == '\0')
            break;
        size_t start = i;
        rc = parse_item(s, &i, &it, err);
        if (rc < 0)
            goto fail;
        size_t n = item_count(&it);
        if (out->n + n > LAUNCH_HOSTLIST_MAX_HOSTS) {
            rc = ddp_err_set(err, DDP_ETOOBIG, "hostlist '%.*s%s': more than %d hosts", QUOTE_MAX,
                             s, strlen(s) > QUOTE_MAX ? "..." : "", LAUNCH_HOSTLIST_MAX_HOSTS);
            goto fail;
        }
        if (out->n + n > cap) {
            size_t ncap = cap ? cap : 16;
            while (ncap < out->n + n)
                ncap *= 2;
            char **p = realloc(out->hosts, ncap * sizeof *p);
            if (p == NULL) {
                rc = -ENOMEM;
                goto fail;
            }
            out->hosts = p;
            cap = ncap;
        }
        rc = expand(&it, 0, name, 0, out);
        if (rc == DDP_ETOOBIG) {
            if (err != NULL && err->code == 0)
                err->offset = (long)start;
            rc = ddp_err_set(err, DDP_EUSAGE,
                             "malformed hostlist '%.*s%s' at offset %zu: host name"
                             " longer than %d",
                             QUOTE_MAX, s, strlen(s) > QUOTE_MAX ? "..." : "", start,
                             LAUNCH_HOSTNAME_MAX);
        }
        if (rc < 0)
            goto fail;
    }
    if (out->n == 0) {
        rc = bad(err, s, 0, "no host");
        goto fail;
    }
    item_clear(&it);
    free(it.seg);
    return 0;
fail:
    item_clear(&it);
    free(it.seg);
    launch_hostlist_free(out);
    return rc;
}

void launch_hostlist_free(launch_hostlist_t *hl) {
    if (hl == NULL)
        return;
    for (size_t i = 0; i < hl->n; i++)
        free(hl->hosts[i]);
    free(hl->hosts);
    hl->hosts = NULL;
    hl->n = 0;
}

static int bad_counts(ddp_err_t *err, const char *s, size_t off, const char *what) {
    if (err != NULL && err->code == 0)
        err->offset = (long)off;
    return ddp_err_set(err, DDP_EUSAGE, "malformed count list '%.*s%s' at offset %zu: %s",
                       QUOTE_MAX, s, strlen(s) > QUOTE_MAX ? "..." : "", off, what);
}

/* Long: one pass of the counts grammar, with its error messages. */
int launch_counts_parse(const char *s, launch_counts_t *out, ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    if (s == NULL)
        s = "";
    size_t i = 0, cap = 0;
    int rc;
    for (;;) {
        unsigned long v, rep = 1;
        int w;
        size_t at = i;
        if ((rc = read_num(s, &i, &v, &w)) < 0) {
            rc = bad_counts(err, s, at,
                            rc == -ERANGE   ? TOO_LONG
                            : s[at] == '\0' ? "expected a count"
                                            : "expected a number");
            goto fail;
        }
        if (s[i] == '(') {
            if (s[i + 1] != 'x') {
                rc = bad_counts(err, s, i + 1, "expected 'x' after '('");
                goto fail;
            }
            i += 2;
            at = i;
            if ((rc = read_num(s, &i, &rep, &w)) < 0 || rep == 0) {
                rc = bad_counts(err, s, at,
                                rc == -ERANGE ? TOO_LONG : "expected a repeat count of at least 1");
                goto fail;
            }
            if (s[i] != ')') {
                rc = bad_counts(err, s, i, "missing ')'");
                goto fail;
            }
            i++;
        }
        if (out->n + rep > LAUNCH_HOSTLIST_MAX_HOSTS) {
            rc = ddp_err_set(err, DDP_ETOOBIG, "count list '%.*s%s': more than %d entries",
                             QUOTE_MAX, s, strlen(s) > QUOTE_MAX ? "..." : "",
                             LAUNCH_HOSTLIST_MAX_HOSTS);
            goto fail;
        }
        if (out->n + rep > cap) {
            size_t ncap = cap ? cap : 8;
            while (ncap < out->n + rep)
                ncap *= 2;
            int *p = realloc(out->v, ncap * sizeof *p);
            if (p == NULL) {
                rc = -ENOMEM;
                goto fail;
            }
            out->v = p;
            cap = ncap;
        }
        for (unsigned long k = 0; k < rep; k++)
            out->v[out->n++] = (int)v;
        if (s[i] == '\0')
            return 0;
        if (s[i] != ',') {
            rc = bad_counts(err, s, i, "expected ',' or '(x'");
            goto fail;
        }
        i++;
    }
fail:
    launch_counts_free(out);
    return rc;
}

void launch_counts_free(launch_counts_t *c) {
    if (c == NULL)
        return;
    free(c->v);
    c->v = NULL;
    c->n = 0;
}
