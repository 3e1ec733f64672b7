/* SPDX-License-Identifier: Apache-2.0
 * data.c: the datasets train reads: a synthetic teacher-labelled set and a CSV loader. */
#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define TEACHER_HIDDEN 64

void train_data_free(train_data_t *d) {
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* Labels each of n samples with the argmax of its logits (n x classes) after standardizing each
 * class's logit over the set, so that no class dominates the argmax (a raw random teacher often
 * gives one class most of the samples). logit is overwritten. */
static void label_by_logits(float *logit, size_t n, int classes, int32_t *y) {
    for (int c = 0; c < classes; c++) {
        double mean = 0, sq = 0;
        for (size_t i = 0; i < n; i++)
            mean += logit[i * classes + c];
        mean /= (double)n;
        for (size_t i = 0; i < n; i++) {
            double dv = logit[i * classes + c] - mean;
            sq += dv * dv;
        }
        double sd = sqrt(sq / (double)n) + 1e-12;
        for (size_t i = 0; i < n; i++)
            logit[i * classes + c] = (float)((logit[i * classes + c] - mean) / sd);
    }
    for (size_t i = 0; i < n; i++) {
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (logit[i * classes + c] > logit[i * classes + best])
                best = c;
        y[i] = best;
    }
}

int train_data_synth(train_data_t *d, size_t n, int dim, int classes, uint64_t seed,
                     ddp_err_t *err) {
    memset(d, 0, sizeof *d);
    if (n == 0 || dim < 1 || classes < 2)
        return ddp_err_set(err, DDP_EUSAGE,
                           "synthetic data needs samples >= 1, dim >= 1 and "
                           "classes >= 2");
    const int H = TEACHER_HIDDEN;
    float *w1 = malloc((size_t)dim * H * sizeof(float));
    float *w2 = malloc((size_t)H * classes * sizeof(float));
    float *b1 = malloc((size_t)H * sizeof(float));
    float *hid = malloc(n * H * sizeof(float));
    float *logit = malloc(n * (size_t)classes * sizeof(float));
    d->x = malloc(n * (size_t)dim * sizeof(float));
    d->y = malloc(n * sizeof(int32_t));
    int rc = 0;
    if (!w1 || !w2 || !b1 || !hid || !logit || !d->x || !d->y) {
        rc = ddp_err_set(err, -ENOMEM, "out of memory for %zu samples of %d features", n, dim);
        goto out;
    }
    train_rng_t r;
    train_rng_seed(&r, seed);
    float s1 = (float)(1.0 / sqrt((double)dim)), s2 = (float)(1.0 / sqrt((double)H));
    for (size_t i = 0; i < (size_t)dim * H; i++)
        w1[i] = (float)train_rng_normal(&r) * s1;
    for (int i = 0; i < H; i++)
        b1[i] = (float)train_rng_normal(&r) * 0.1f;
    for (size_t i = 0; i < (size_t)H * classes; i++)
        w2[i] = (float)train_rng_normal(&r) * s2;
    for (size_t i = 0; i < n * (size_t)dim; i++)
        d->x[i] = (float)train_rng_normal(&r);
    /* hid = relu(x w1 + b1); logits = hid w2. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, H, dim, 1.0f, d->x, dim, w1, H,
                0.0f, hid, H);
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < H; j++) {
            float v = hid[i * H + j] + b1[j];
            hid[i * H + j] = v > 0 ? v : 0;
        }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, classes, H, 1.0f, hid, H, w2,
                classes, 0.0f, logit, classes);
    label_by_logits(logit, n, classes, d->y);
    d->n = n;
    d->dim = dim;
    d->classes = classes;
out:
    free(w1);
    free(w2);
    free(b1);
    free(hid);
    free(logit);
    if (rc != 0)
        train_data_free(d);
    return rc;
}

/* Appends to a growable float array. */
static int push_f(float **a, size_t *len, size_t *cap, float v) {
    if (*len == *cap) {
        size_t nc = *cap ? *cap * 2 : 4096;
        float *p = realloc(*a, nc * sizeof(float));
        if (p == NULL)
            return -ENOMEM;
        *a = p;
        *cap = nc;
    }
    (*a)[(*len)++] = v;
    return 0;
}

/* The CSV reader's running state: the rows so far and where we are. */
typedef struct csv {
    const char *path;
    long lineno;
    float *xs, *ys;
    size_t xlen, xcap, ylen, ycap;
    int dim, maxlabel, first;
} csv_t;

/* Parses one line p (trimmed, not blank, not a comment): "label,f1,f2,...". Appends the row, or
 * sets *header when it is the first line with content and starts with something not numeric. */
static int parse_row(csv_t *c, char *p, int *header, ddp_err_t *err) {
    /* The header is the first line with content, which may follow comments or blank lines
     * (not necessarily line 1). */
    int may_be_header = c->first, field = 0;
    size_t row_start = c->xlen;
    c->first = 0;
    *header = 0;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        while (*end == ' ' || *end == '\t')
            end++;
        if (end == p || (*end != ',' && *end != '\0') || errno == ERANGE || !isfinite(v)) {
            if (may_be_header && field == 0) {
                *header = 1; /* a non-numeric first line is a header */
                return 0;
            }
            char *comma = strchr(p, ',');
            int flen = comma ? (int)(comma - p) : (int)strlen(p);
            return ddp_err_set(err, DDP_ECORRUPT, "%s:%ld: field %d ('%.*s') is not a number",
                               c->path, c->lineno, field + 1, flen > 40 ? 40 : flen, p);
        }
        if (fabs(v) > FLT_MAX) { /* finite as a double, infinite once stored as a float */
            int flen = (int)(end - p);
            return ddp_err_set(err, DDP_ECORRUPT,
                               "%s:%ld: field %d ('%.*s') is not a finite float32", c->path,
                               c->lineno, field + 1, flen > 40 ? 40 : flen, p);
        }
        if (field > MLP_MAX_WIDTH)
            return ddp_err_set(err, DDP_ETOOBIG, "%s:%ld: more than %d features", c->path,
                               c->lineno, MLP_MAX_WIDTH);
        if (field == 0) {
            if (v < 0 || v != floor(v) || v > 1e6)
                return ddp_err_set(err, DDP_ECORRUPT,
                                   "%s:%ld: label '%g' is not an integer in [0, 1000000]", c->path,
                                   c->lineno, v);
            if (push_f(&c->ys, &c->ylen, &c->ycap, (float)v) != 0)
                return ddp_err_set(err, -ENOMEM, "%s:%ld: out of memory", c->path, c->lineno);
            if ((int)v > c->maxlabel)
                c->maxlabel = (int)v;
        } else if (push_f(&c->xs, &c->xlen, &c->xcap, (float)v) != 0)
            return ddp_err_set(err, -ENOMEM, "%s:%ld: out of memory", c->path, c->lineno);
        field++;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    int nf = (int)(c->xlen - row_start);
    if (nf < 1)
        return ddp_err_set(err, DDP_ECORRUPT, "%s:%ld: a row needs a label and features", c->path,
                           c->lineno);
    if (c->dim < 0)
        c->dim = nf;
    else if (nf != c->dim)
        return ddp_err_set(err, DDP_ECORRUPT, "%s:%ld: %d features where earlier rows have %d",
                           c->path, c->lineno, nf, c->dim);
    return 0;
}

/* Reads every line of f into c, each at most TRAIN_CSV_MAX_LINE bytes: the buffer is allocated
 * once, so a file without line ends costs 1 MiB, not its size. */
static int read_rows(csv_t *c, FILE *f, ddp_err_t *err) {
    size_t cap = TRAIN_CSV_MAX_LINE + 2; /* the line, its '\n', the NUL */
    char *line = malloc(cap);
    if (line == NULL)
        return ddp_err_set(err, -ENOMEM, "%s: out of memory", c->path);
    int rc = 0, header;
    while (rc == 0 && fgets(line, (int)cap, f) != NULL) {
        c->lineno++;
        size_t got = strlen(line);
        if (got > 0 && line[got - 1] != '\n' && !feof(f)) {
            rc = ddp_err_set(err, DDP_ETOOBIG, "%s:%ld: line longer than %u bytes", c->path,
                             c->lineno, TRAIN_CSV_MAX_LINE);
            break;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != '\0' && *p != '#')
            rc = parse_row(c, p, &header, err);
    }
    free(line);
    if (rc == 0 && ferror(f))
        rc = ddp_err_set(err, -EIO, "unable to read %s", c->path);
    return rc;
}

int train_data_load_csv(train_data_t *d, const char *path, ddp_err_t *err) {
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return ddp_err_set(err, -errno, "unable to open %s: %s", path, strerror(errno));
    csv_t c = {.path = path, .dim = -1, .maxlabel = -1, .first = 1};
    int rc = read_rows(&c, f, err);
    fclose(f);
    if (rc == 0 && c.ylen == 0)
        rc = ddp_err_set(err, DDP_ECORRUPT, "%s: no data rows", path);
    if (rc == 0 && (d->y = malloc(c.ylen * sizeof(int32_t))) == NULL)
        rc = ddp_err_set(err, -ENOMEM, "%s:%ld: out of memory", path, c.lineno);
    if (rc == 0) {
        for (size_t i = 0; i < c.ylen; i++)
            d->y[i] = (int32_t)c.ys[i];
        d->x = c.xs;
        c.xs = NULL;
        d->n = c.ylen;
        d->dim = c.dim;
        d->classes = c.maxlabel + 1 < 2 ? 2 : c.maxlabel + 1;
    }
    free(c.xs);
    free(c.ys);
    return rc;
}
