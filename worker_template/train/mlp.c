/* SPDX-License-Identifier: Apache-2.0
 * mlp.c: the MLP on the CPU (OpenBLAS sgemm for the products, plain loops for the rest),
 * softmax cross-entropy, and the SGD-momentum and Adam optimizers over one flat buffer.
 * Parameters are laid out layer by layer: W_l (out x in, row-major) then b_l (out). */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_parse.h"
#include "train.h"

int mlp_shape_init(mlp_shape_t *s, const int *sizes, int nsizes, ddp_err_t *err) {
    memset(s, 0, sizeof *s);
    if (nsizes < 2 || nsizes > MLP_MAX_SIZES)
        return ddp_err_set(err, DDP_EUSAGE, "--layers: need 2 to %d widths, got %d", MLP_MAX_SIZES,
                           nsizes);
    size_t off = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 1 || sizes[i] > MLP_MAX_WIDTH)
            return ddp_err_set(err, DDP_EUSAGE, "--layers: width %d is not in [1, %d]", sizes[i],
                               MLP_MAX_WIDTH);
        s->sizes[i] = sizes[i];
    }
    if (sizes[nsizes - 1] < 2)
        return ddp_err_set(err, DDP_EUSAGE, "--layers: the last width (classes) must be >= 2");
    s->nsizes = nsizes;
    for (int l = 0; l + 1 < nsizes; l++) {
        s->w_off[l] = off;
        off += (size_t)sizes[l] * (size_t)sizes[l + 1];
        s->b_off[l] = off;
        off += (size_t)sizes[l + 1];
    }
    s->nparams = off;
    return 0;
}

int mlp_shape_parse(mlp_shape_t *s, const char *spec, ddp_err_t *err) {
    int sizes[MLP_MAX_SIZES], n = 0;
    const char *p = spec;
    char tok[32];
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof tok || n == MLP_MAX_SIZES)
            return ddp_err_set(err, DDP_EUSAGE, "--layers: bad list '%s' (want e.g. 64,256,10)",
                               spec);
        memcpy(tok, p, len);
        tok[len] = '\0';
        int64_t v;
        if (ddp_parse_i64(tok, 1, 65536, &v) != 0)
            return ddp_err_set(err, DDP_EUSAGE, "--layers: '%s' is not a width in [1, 65536]", tok);
        sizes[n++] = (int)v;
        p += len;
        if (*p == ',')
            p++;
    }
    return mlp_shape_init(s, sizes, n, err);
}

void mlp_init_params(const mlp_shape_t *s, float *params, uint64_t seed) {
    train_rng_t r;
    train_rng_seed(&r, seed ^ 0x6d6c7069ull);
    memset(params, 0, s->nparams * sizeof(float));
    for (int l = 0; l + 1 < s->nsizes; l++) {
        size_t cnt = (size_t)s->sizes[l] * (size_t)s->sizes[l + 1];
        double bound = sqrt(6.0 / (double)s->sizes[l]);
        float *w = params + s->w_off[l];
        for (size_t i = 0; i < cnt; i++)
            w[i] = (float)((2.0 * train_rng_uniform(&r) - 1.0) * bound);
    }
}

int mlp_ws_init(mlp_ws_t *ws, const mlp_shape_t *s, int max_batch) {
    memset(ws, 0, sizeof *ws);
    ws->max_batch = max_batch;
    int widest = 0;
    for (int l = 0; l < s->nsizes; l++) {
        if (s->sizes[l] > widest)
            widest = s->sizes[l];
        if (l > 0 && (ws->act[l] = malloc((size_t)max_batch * s->sizes[l] * sizeof(float))) == NULL)
            goto oom;
    }
    ws->d0 = malloc((size_t)max_batch * widest * sizeof(float));
    ws->d1 = malloc((size_t)max_batch * widest * sizeof(float));
    if (ws->d0 == NULL || ws->d1 == NULL)
        goto oom;
    return 0;
oom:
    mlp_ws_free(ws);
    return -ENOMEM;
}

void mlp_ws_free(mlp_ws_t *ws) {
    for (int l = 0; l < MLP_MAX_SIZES; l++)
        free(ws->act[l]);
    free(ws->d0);
    free(ws->d1);
    memset(ws, 0, sizeof *ws);
}

/* Forward pass: ws->act[l + 1] = relu(act[l] W_l^T + b_l), the last layer without ReLU. */
static void forward(const mlp_shape_t *s, mlp_ws_t *ws, const float *params, const float *x,
                    int B) {
    int L = s->nsizes - 1; /* weight layers */
    const float *in = x;
    for (int l = 0; l < L; l++) {
        int ni = s->sizes[l], no = s->sizes[l + 1];
        float *z = ws->act[l + 1];
        const float *W = params + s->w_off[l], *b = params + s->b_off[l];
        /* z = in W^T: (B x ni)(ni x no). */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, no, ni, 1.0f, in, ni, W, ni, 0.0f,
                    z, no);
        int relu = l + 1 < L;
        for (int i = 0; i < B; i++) {
            float *zr = z + (size_t)i * no;
            for (int j = 0; j < no; j++) {
                float v = zr[j] + b[j];
                zr[j] = relu && v < 0 ? 0 : v;
            }
        }
        in = z;
    }
}

/* Softmax cross-entropy on the logits (B x C): returns the summed loss, counts argmax hits into
 * *hits and writes delta = (p - onehot) / B. */
static double softmax_ce(const float *logits, const int32_t *y, int B, int C, float *delta,
                         int *hits) {
    double loss = 0;
    *hits = 0;
    for (int i = 0; i < B; i++) {
        const float *zr = logits + (size_t)i * C;
        int best = 0;
        float mx = zr[0];
        for (int c = 1; c < C; c++)
            if (zr[c] > mx) {
                mx = zr[c];
                best = c;
            }
        *hits += best == y[i];
        double sum = 0;
        for (int c = 0; c < C; c++)
            sum += exp((double)(zr[c] - mx));
        /* sum >= 1: the max logit's own term is exp(0). */
        // cppcheck-suppress invalidFunctionArg
        loss += log(sum) - (double)(zr[y[i]] - mx);
        float *dr = delta + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            double p = exp((double)(zr[c] - mx)) / sum;
            dr[c] = (float)((p - (c == y[i] ? 1.0 : 0.0)) / B);
        }
    }
    return loss;
}

/* Backward pass from the output delta (in ws->d0): dW_l = delta^T h_l, db_l = column sums of
 * delta, then delta through W_l and the ReLU of layer l, alternating ws->d0 and ws->d1. */
static void backward(const mlp_shape_t *s, mlp_ws_t *ws, const float *params, const float *x, int B,
                     float *grad) {
    float *delta = ws->d0;
    for (int l = s->nsizes - 2; l >= 0; l--) {
        int ni = s->sizes[l], no = s->sizes[l + 1];
        const float *h = l == 0 ? x : ws->act[l];
        const float *W = params + s->w_off[l];
        float *dW = grad + s->w_off[l], *db = grad + s->b_off[l];
        /* dW = delta^T h: (no x B)(B x ni); db = column sums of delta. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, no, ni, B, 1.0f, delta, no, h, ni,
                    0.0f, dW, ni);
        for (int j = 0; j < no; j++)
            db[j] = 0;
        for (int i = 0; i < B; i++) {
            const float *dr = delta + (size_t)i * no;
            for (int j = 0; j < no; j++)
                db[j] += dr[j];
        }
        if (l == 0)
            break;
        /* dh = delta W: (B x no)(no x ni), then through the ReLU of layer l. */
        float *dh = delta == ws->d0 ? ws->d1 : ws->d0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, ni, no, 1.0f, delta, no, W, ni,
                    0.0f, dh, ni);
        size_t cnt = (size_t)B * ni;
        for (size_t k = 0; k < cnt; k++)
            if (h[k] <= 0)
                dh[k] = 0;
        delta = dh;
    }
}

double mlp_forward_backward(const mlp_shape_t *s, mlp_ws_t *ws, const float *params, const float *x,
                            const int32_t *y, int B, float *grad, int *correct) {
    int L = s->nsizes - 1, hits = 0;
    forward(s, ws, params, x, B);
    double loss = softmax_ce(ws->act[L], y, B, s->sizes[L], ws->d0, &hits);
    if (correct != NULL)
        *correct = hits;
    if (grad != NULL)
        backward(s, ws, params, x, B, grad);
    return loss;
}

int optim_init(optim_t *o, optim_kind_t kind, size_t n, float lr, float momentum) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = lr;
    o->momentum = momentum;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->n = n;
    /* One block: m, then v for Adam, so the whole state is one array of optim_state_len floats
     * (checkpoints and the GPU copy use it as such). */
    o->m = calloc(kind == OPT_ADAM ? 2 * n : n, sizeof(float));
    if (o->m == NULL)
        return -ENOMEM;
    if (kind == OPT_ADAM)
        o->v = o->m + n;
    return 0;
}

size_t optim_state_len(const optim_t *o) {
    return o->kind == OPT_ADAM ? 2 * o->n : o->n;
}

void optim_step(optim_t *o, float *params, const float *grad) {
    o->t++;
    if (o->kind == OPT_SGD) {
        /* PyTorch's SGD: buf = momentum * buf + g (buf = g on the first step); p -= lr * buf. */
        for (size_t i = 0; i < o->n; i++) {
            float b = o->t == 1 ? grad[i] : o->momentum * o->m[i] + grad[i];
            o->m[i] = b;
            params[i] -= o->lr * b;
        }
        return;
    }
    float b1 = o->beta1, b2 = o->beta2;
    float c1 = (float)(1.0 - pow(b1, (double)o->t)), c2 = (float)(1.0 - pow(b2, (double)o->t));
    float step = o->lr / c1, sc2 = sqrtf(c2);
    for (size_t i = 0; i < o->n; i++) {
        float g = grad[i];
        float m = b1 * o->m[i] + (1 - b1) * g;
        float v = b2 * o->v[i] + (1 - b2) * g * g;
        o->m[i] = m;
        o->v[i] = v;
        params[i] -= step * m / (sqrtf(v) / sc2 + o->eps);
    }
}

void optim_free(optim_t *o) {
    free(o->m);
    o->m = o->v = NULL;
}
