/* SPDX-License-Identifier: Apache-2.0
 * rdzv_straggler.c: the straggler detector (rdzv_straggler.h). Each window costs O(n log n) in
 * the ranks judged (one sort); the median of the others is read from the sorted values for every
 * rank in O(1). */
#include "rdzv_straggler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_parse.h"

void rdzv__strag_init(rdzv_strag_t *st) {
    memset(st, 0, sizeof *st);
    st->cfg.threshold = RDZV_STRAG_DEFAULT_THRESHOLD;
    st->cfg.windows = RDZV_STRAG_DEFAULT_WINDOWS;
    st->cfg.window_ms = RDZV_STRAG_DEFAULT_WINDOW_MS;
    st->round = -1;
}

void rdzv__strag_free(rdzv_strag_t *st) {
    free(st->v);
    rdzv_strag_cfg_t cfg = st->cfg;
    rdzv__strag_init(st);
    st->cfg = cfg;
}

void rdzv__strag_reset(rdzv_strag_t *st, int64_t round, uint64_t now_ms) {
    if (st->v != NULL)
        memset(st->v, 0, st->cap * sizeof *st->v);
    st->n = 0;
    st->named = 0;
    st->round = round;
    st->window_start_ms = now_ms;
}

int rdzv__strag_add(rdzv_strag_t *st, int64_t rank, int64_t group_rank, const char *host,
                    uint64_t compute_us, uint64_t steps) {
    if (rank < 0 || rank >= RDZV_STRAG_MAX_RANKS)
        return -EINVAL;
    size_t want = (size_t)rank + 1;
    if (want > st->cap) {
        size_t cap = st->cap ? st->cap : 16;
        while (cap < want)
            cap *= 2;
        rdzv_strag_rank_t *v = realloc(st->v, cap * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        memset(v + st->cap, 0, (cap - st->cap) * sizeof *v);
        st->v = v;
        st->cap = cap;
    }
    if (want > st->n)
        st->n = want;
    rdzv_strag_rank_t *k = &st->v[rank];
    k->known = 1;
    k->group_rank = group_rank;
    snprintf(k->host, sizeof k->host, "%s", host);
    /* Sums saturate rather than wrap: a report of absurd values names nobody else. */
    k->compute_us =
        compute_us > UINT64_MAX - k->compute_us ? UINT64_MAX : k->compute_us + compute_us;
    k->steps = steps > UINT64_MAX - k->steps ? UINT64_MAX : k->steps + steps;
    return 0;
}

typedef struct judged {
    double per_step;
    size_t rank;
} judged_t;

static int judged_cmp(const void *a, const void *b) {
    double x = ((const judged_t *)a)->per_step, y = ((const judged_t *)b)->per_step;
    return x < y ? -1 : x > y;
}

/* The median of the n sorted values s without the one at position p. */
static double median_without(const judged_t *s, size_t n, size_t p) {
    size_t m = n - 1;
#define AT(j) s[(j) < p ? (j) : (j) + 1].per_step
    if (m % 2 == 1)
        return AT(m / 2);
    return (AT(m / 2 - 1) + AT(m / 2)) / 2;
#undef AT
}

/* One rank's verdict for a window: above or not, and what follows from the run of verdicts. */
static int judge(rdzv_strag_t *st, rdzv_strag_rank_t *k, int above) {
    int windows = st->cfg.windows > 0 ? st->cfg.windows : 1;
    if (above) {
        if (k->above++ == 0)
            k->first_above_ms = st->window_start_ms;
        k->below = 0;
        if (!k->named && k->above >= windows) {
            k->named = 1;
            k->kept[0] = '\0';
            k->since_ms = k->first_above_ms;
            st->named++;
            return 1;
        }
        return -1;
    }
    k->above = 0;
    k->below++;
    if (k->named && k->below >= windows) {
        k->named = 0;
        st->named--;
        return 0;
    }
    return -1;
}

size_t rdzv__strag_window(rdzv_strag_t *st, uint64_t now_ms, rdzv_strag_change_t *ch, size_t cap) {
    if (now_ms < st->window_start_ms + st->cfg.window_ms)
        return 0;
    size_t nj = 0, nch = 0;
    judged_t *s = st->n > 0 ? malloc(st->n * sizeof *s) : NULL;
    for (size_t i = 0; s != NULL && i < st->n; i++) {
        rdzv_strag_rank_t *k = &st->v[i];
        if (k->known && k->steps >= RDZV_STRAG_MIN_STEPS)
            s[nj++] = (judged_t){(double)k->compute_us / (double)k->steps, i};
    }
    if (nj >= 2) {
        qsort(s, nj, sizeof *s, judged_cmp);
        for (size_t p = 0; p < nj; p++) {
            rdzv_strag_rank_t *k = &st->v[s[p].rank];
            double med = median_without(s, nj, p), mine = s[p].per_step;
            k->per_step_us = mine;
            k->ratio = med > 0 ? mine / med : (mine > 0 ? st->cfg.threshold * 2 : 1);
            int above = mine > med * st->cfg.threshold && mine - med >= RDZV_STRAG_MIN_EXCESS_US;
            int verdict = judge(st, k, above);
            if (verdict >= 0 && nch < cap)
                ch[nch++] = (rdzv_strag_change_t){(int64_t)s[p].rank, verdict};
        }
    }
    free(s);
    for (size_t i = 0; i < st->n; i++)
        st->v[i].compute_us = st->v[i].steps = 0;
    st->window_start_ms = now_ms;
    return nch;
}

/* The next space-separated field of *p into out (cap bytes); 0, or -EINVAL at the end or for a
 * field too long. */
static int field(const char **p, char *out, size_t cap) {
    const char *s = *p;
    while (*s == ' ')
        s++;
    size_t n = strcspn(s, " ");
    if (n == 0 || n >= cap)
        return -EINVAL;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = s + n;
    return 0;
}

/* "name=<integer in [min, max]>" */
static int named_int(const char *f, const char *name, int64_t min, int64_t max, int64_t *v) {
    size_t n = strlen(name);
    if (strncmp(f, name, n) != 0 || f[n] != '=')
        return -EINVAL;
    return ddp_parse_i64(f + n + 1, min, max, v);
}

int rdzv__strag_parse(const char *text, rdzv_strag_cfg_t *cfg, rdzv_strag_entry_t *out,
                      size_t cap) {
    const char *p = text;
    char f[96];
    int64_t w, t, n;
    if (field(&p, f, sizeof f) < 0 || named_int(f, "w", 100, 3600000, &w) < 0 ||
        field(&p, f, sizeof f) < 0 || named_int(f, "t", 1001, 1000000, &t) < 0 ||
        field(&p, f, sizeof f) < 0 || named_int(f, "n", 1, 1000, &n) < 0 ||
        field(&p, f, sizeof f) < 0 || (strcmp(f, "a=warn") != 0 && strcmp(f, "a=exclude") != 0))
        return -EINVAL;
    int exclude = strcmp(f, "a=exclude") == 0;
    size_t k = 0;
    while (field(&p, f, sizeof f) == 0) {
        char *parts[4], *save = NULL, *tok = strtok_r(f, ":", &save);
        int np = 0;
        for (; tok != NULL && np < 4; tok = strtok_r(NULL, ":", &save))
            parts[np++] = tok;
        int64_t v[4];
        if (np != 4 || tok != NULL || k == cap)
            return -EINVAL;
        for (int i = 0; i < 4; i++)
            if (ddp_parse_i64(parts[i], 0, i == 0 ? RDZV_STRAG_MAX_RANKS - 1 : INT64_MAX, &v[i]) <
                0)
                return -EINVAL;
        out[k++] = (rdzv_strag_entry_t){v[0], (uint64_t)v[1], (uint64_t)v[2], (uint64_t)v[3]};
    }
    while (*p == ' ')
        p++;
    if (*p != '\0')
        return -EINVAL;
    cfg->window_ms = (uint64_t)w;
    cfg->threshold = (double)t / 1000.0;
    cfg->windows = (int)n;
    cfg->exclude = exclude;
    return (int)k;
}
