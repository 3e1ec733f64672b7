/* SPDX-License-Identifier: Apache-2.0
 * mlp_cuda.cu: the GPU path of train. Same layout and math as mlp.c: cuBLAS for the products,
 * small kernels for bias/ReLU, softmax cross-entropy, bias gradients and the optimizers. During
 * backward each layer's gradient range is handed to NCCL on a second stream as soon as it is
 * written (buckets of at least bucket_floats), so communication overlaps the remaining layers. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "ddp_time.h"
#include "train_gpu.h"
}

#define GPU_STEP_TIMEOUT_MS 300000

struct gpu_model {
    mlp_shape_t s;
    int max_batch, dev;
    optim_kind_t kind;
    float lr, momentum, b1, b2, eps;
    uint64_t t;
    size_t bucket_floats;
    cublasHandle_t blas;
    cudaStream_t comp, comm;
    cudaEvent_t ev_bucket[MLP_MAX_SIZES], ev_comm, ev_done;
    float *params, *grad, *m, *v;
    float *act[MLP_MAX_SIZES]; /* act[0]: the input batch */
    float *d0, *d1, *loss_rows;
    int32_t *y;
    int *correct;
    float *h_loss;  /* pinned */
    int *h_correct; /* pinned */
};

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t ce_ = (x);                                                                     \
        if (ce_ != cudaSuccess)                                                                    \
            return ddp_err_set(err, DDP_ECUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #x,            \
                               cudaGetErrorString(ce_));                                           \
    } while (0)

#define CB(x)                                                                                      \
    do {                                                                                           \
        cublasStatus_t cs_ = (x);                                                                  \
        if (cs_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return ddp_err_set(err, DDP_ECUDA, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__,  \
                               #x, (int)cs_);                                                      \
    } while (0)

__global__ void k_bias_act(float *z, const float *b, int B, int O, int relu) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * O)
        return;
    float v = z[i] + b[i % O];
    z[i] = relu && v < 0 ? 0 : v;
}

/* One thread per row: softmax cross-entropy, delta = (p - onehot) / B, hits. */
__global__ void k_softmax_ce(const float *z, const int32_t *y, int B, int C, float *delta,
                             float *loss_rows, int *correct) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B)
        return;
    const float *zr = z + (size_t)i * C;
    float mx = zr[0];
    int best = 0;
    for (int c = 1; c < C; c++)
        if (zr[c] > mx) {
            mx = zr[c];
            best = c;
        }
    double sum = 0;
    for (int c = 0; c < C; c++)
        sum += exp((double)(zr[c] - mx));
    loss_rows[i] = (float)(log(sum) - (double)(zr[y[i]] - mx));
    if (best == y[i])
        atomicAdd(correct, 1);
    for (int c = 0; c < C; c++) {
        double p = exp((double)(zr[c] - mx)) / sum;
        delta[(size_t)i * C + c] = (float)((p - (c == y[i] ? 1.0 : 0.0)) / B);
    }
}

__global__ void k_relu_mask(float *dh, const float *h, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n && h[i] <= 0)
        dh[i] = 0;
}

/* One thread per column: db[j] = sum over rows of delta[:, j] (coalesced across threads). */
__global__ void k_col_sum(const float *delta, int B, int O, float *db) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= O)
        return;
    float s = 0;
    for (int i = 0; i < B; i++)
        s += delta[(size_t)i * O + j];
    db[j] = s;
}

__global__ void k_sgd(float *p, const float *g, float *m, size_t n, float lr, float mom,
                      int first) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float b = first ? g[i] : mom * m[i] + g[i];
    m[i] = b;
    p[i] -= lr * b;
}

__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float step, float b1,
                       float b2, float sc2, float eps) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = g[i];
    float mi = b1 * m[i] + (1 - b1) * gi;
    float vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) / sc2 + eps);
}

static unsigned blocks(size_t n, unsigned t) {
    return (unsigned)((n + t - 1) / t);
}

extern "C" int gpu_model_new(const mlp_shape_t *s, const optim_t *opt, int max_batch, int dev,
                             size_t bucket_floats, gpu_model_t **out, ddp_err_t *err) {
    *out = NULL;
    int ndev = 0;
    cudaError_t qe = cudaGetDeviceCount(&ndev);
    if (qe != cudaSuccess) { /* CUDA's own error (an old driver is not "no device") */
        (void)cudaGetLastError();
        return ddp_err_set(err, DDP_ENOGPU, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(qe),
                           cudaGetErrorString(qe));
    }
    if (ndev <= dev)
        return ddp_err_set(err, DDP_ENOGPU, "no CUDA device %d (%d visible)", dev, ndev);
    gpu_model_t *m = (gpu_model_t *)calloc(1, sizeof *m);
    if (m == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    *out = m; /* partially built models are freed by the caller with gpu_model_free */
    m->s = *s;
    m->max_batch = max_batch;
    m->dev = dev;
    m->kind = opt->kind;
    m->lr = opt->lr;
    m->momentum = opt->momentum;
    m->b1 = opt->beta1;
    m->b2 = opt->beta2;
    m->eps = opt->eps;
    m->bucket_floats = bucket_floats ? bucket_floats : (1u << 18);
    CK(cudaSetDevice(dev));
    CB(cublasCreate(&m->blas));
    CK(cudaStreamCreateWithFlags(&m->comp, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&m->comm, cudaStreamNonBlocking));
    CB(cublasSetStream(m->blas, m->comp));
    for (int l = 0; l < MLP_MAX_SIZES; l++)
        CK(cudaEventCreateWithFlags(&m->ev_bucket[l], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&m->ev_comm, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&m->ev_done, cudaEventDisableTiming));
    size_t n = s->nparams;
    CK(cudaMalloc(&m->params, n * sizeof(float)));
    CK(cudaMalloc(&m->grad, n * sizeof(float)));
    CK(cudaMalloc(&m->m, n * sizeof(float)));
    CK(cudaMemset(m->m, 0, n * sizeof(float)));
    if (m->kind == OPT_ADAM) {
        CK(cudaMalloc(&m->v, n * sizeof(float)));
        CK(cudaMemset(m->v, 0, n * sizeof(float)));
    }
    int widest = 0;
    for (int l = 0; l < s->nsizes; l++) {
        widest = s->sizes[l] > widest ? s->sizes[l] : widest;
        CK(cudaMalloc(&m->act[l], (size_t)max_batch * s->sizes[l] * sizeof(float)));
    }
    CK(cudaMalloc(&m->d0, (size_t)max_batch * widest * sizeof(float)));
    CK(cudaMalloc(&m->d1, (size_t)max_batch * widest * sizeof(float)));
    CK(cudaMalloc(&m->loss_rows, (size_t)max_batch * sizeof(float)));
    CK(cudaMalloc(&m->y, (size_t)max_batch * sizeof(int32_t)));
    CK(cudaMalloc(&m->correct, sizeof(int)));
    CK(cudaMallocHost(&m->h_loss, (size_t)max_batch * sizeof(float)));
    CK(cudaMallocHost(&m->h_correct, sizeof(int)));
    return 0;
}

extern "C" int gpu_model_set_state(gpu_model_t *m, const float *params, const float *state,
                                   uint64_t t, ddp_err_t *err) {
    size_t n = m->s.nparams;
    CK(cudaMemcpy(m->params, params, n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(m->m, state, n * sizeof(float), cudaMemcpyHostToDevice));
    if (m->v != NULL)
        CK(cudaMemcpy(m->v, state + n, n * sizeof(float), cudaMemcpyHostToDevice));
    /* cudaMemcpy from pageable memory may return before its DMA lands, and it (like the
     * cudaMemset of gpu_model_new) runs on the legacy default stream, which the non-blocking
     * compute stream does not wait for: without this, the first step of a world of one (no
     * broadcast, which synchronizes) could read half-copied parameters. */
    CK(cudaDeviceSynchronize());
    m->t = t;
    return 0;
}

extern "C" int gpu_model_get_state(gpu_model_t *m, float *params, float *state, uint64_t *t,
                                   ddp_err_t *err) {
    size_t n = m->s.nparams;
    CK(cudaStreamSynchronize(m->comp));
    CK(cudaMemcpy(params, m->params, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(state, m->m, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (m->v != NULL)
        CK(cudaMemcpy(state + n, m->v, n * sizeof(float), cudaMemcpyDeviceToHost));
    *t = m->t;
    return 0;
}

extern "C" int gpu_model_broadcast(gpu_model_t *m, ddpw_t *w, int root, ddp_err_t *err) {
    size_t bytes = m->s.nparams * sizeof(float);
    int rc;
    CK(cudaDeviceSynchronize());
    if ((rc = ddpw_broadcast(w, m->params, bytes, root, err)) != 0 ||
        (rc = ddpw_broadcast(w, m->m, bytes, root, err)) != 0)
        return rc;
    if (m->v != NULL && (rc = ddpw_broadcast(w, m->v, bytes, root, err)) != 0)
        return rc;
    return 0;
}

/* Waits for ev with a deadline, so a dead peer never hangs the step forever. */
static int wait_event(cudaEvent_t ev, ddp_err_t *err) {
    uint64_t deadline = ddp_now_ms() + GPU_STEP_TIMEOUT_MS;
    for (;;) {
        cudaError_t ce = cudaEventQuery(ev);
        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady)
            return ddp_err_set(err, DDP_ECUDA, "training step: %s", cudaGetErrorString(ce));
        if (ddp_now_ms() >= deadline)
            return ddp_err_set(err, DDP_ETIMEOUT, "training step did not finish within %d ms",
                               GPU_STEP_TIMEOUT_MS);
        struct timespec ts = {0, 20000L};
        nanosleep(&ts, NULL);
    }
}

/* Kept whole (~90 lines): one ordered sequence of stream operations, forward, backward with each
 * bucket's allreduce enqueued as its gradients are written, then the optimizer behind an event. */
extern "C" int gpu_model_step(gpu_model_t *m, ddpw_t *w, const float *x, const int32_t *y, int B,
                              double *loss_sum, int *correct, float *grad_out, ddp_err_t *err) {
    const mlp_shape_t *s = &m->s;
    int L = s->nsizes - 1, rc;
    const float one = 1.0f, zero = 0.0f;
    if (B > m->max_batch)
        return ddp_err_set(err, -EINVAL, "batch %d exceeds %d", B, m->max_batch);
    CK(cudaMemcpyAsync(m->act[0], x, (size_t)B * s->sizes[0] * sizeof(float),
                       cudaMemcpyHostToDevice, m->comp));
    CK(cudaMemcpyAsync(m->y, y, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice, m->comp));
    CK(cudaMemsetAsync(m->correct, 0, sizeof(int), m->comp));
    for (int l = 0; l < L; l++) {
        int ni = s->sizes[l], no = s->sizes[l + 1];
        CB(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, no, B, ni, &one, m->params + s->w_off[l],
                       ni, m->act[l], ni, &zero, m->act[l + 1], no));
        size_t cnt = (size_t)B * no;
        k_bias_act<<<blocks(cnt, 256), 256, 0, m->comp>>>(m->act[l + 1], m->params + s->b_off[l], B,
                                                          no, l + 1 < L);
    }
    int C = s->sizes[L];
    k_softmax_ce<<<blocks((size_t)B, 128), 128, 0, m->comp>>>(m->act[L], m->y, B, C, m->d0,
                                                              m->loss_rows, m->correct);
    CK(cudaGetLastError());
    float *delta = m->d0;
    size_t pend_end = s->nparams; /* gradient range [w_off[l], pend_end) not yet reduced */
    for (int l = L - 1; l >= 0; l--) {
        int ni = s->sizes[l], no = s->sizes[l + 1];
        CB(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, ni, no, B, &one, m->act[l], ni, delta, no,
                       &zero, m->grad + s->w_off[l], ni));
        k_col_sum<<<blocks((size_t)no, 128), 128, 0, m->comp>>>(delta, B, no,
                                                                m->grad + s->b_off[l]);
        /* Hand this layer's gradients to NCCL now; the other layers keep computing. */
        size_t start = s->w_off[l];
        if (w != NULL && (pend_end - start >= m->bucket_floats || l == 0)) {
            CK(cudaEventRecord(m->ev_bucket[l], m->comp));
            CK(cudaStreamWaitEvent(m->comm, m->ev_bucket[l], 0));
            if ((rc = ddpw_allreduce_async(w, m->grad + start, pend_end - start, DDPW_AVG, m->comm,
                                           err)) != 0)
                return rc;
            pend_end = start;
        }
        if (l == 0)
            break;
        float *dh = delta == m->d0 ? m->d1 : m->d0;
        CB(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, B, no, &one, m->params + s->w_off[l],
                       ni, delta, no, &zero, dh, ni));
        size_t cnt = (size_t)B * ni;
        k_relu_mask<<<blocks(cnt, 256), 256, 0, m->comp>>>(dh, m->act[l], cnt);
        delta = dh;
    }
    if (w != NULL) {
        CK(cudaEventRecord(m->ev_comm, m->comm));
        CK(cudaStreamWaitEvent(m->comp, m->ev_comm, 0));
    }
    if (grad_out != NULL)
        CK(cudaMemcpyAsync(grad_out, m->grad, s->nparams * sizeof(float), cudaMemcpyDeviceToHost,
                           m->comp));
    m->t++;
    size_t n = s->nparams;
    if (m->kind == OPT_SGD)
        k_sgd<<<blocks(n, 256), 256, 0, m->comp>>>(m->params, m->grad, m->m, n, m->lr, m->momentum,
                                                   m->t == 1);
    else {
        float c1 = (float)(1.0 - pow(m->b1, (double)m->t));
        float c2 = (float)(1.0 - pow(m->b2, (double)m->t));
        k_adam<<<blocks(n, 256), 256, 0, m->comp>>>(m->params, m->grad, m->m, m->v, n, m->lr / c1,
                                                    m->b1, m->b2, sqrtf(c2), m->eps);
    }
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(m->h_loss, m->loss_rows, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost,
                       m->comp));
    CK(cudaMemcpyAsync(m->h_correct, m->correct, sizeof(int), cudaMemcpyDeviceToHost, m->comp));
    CK(cudaEventRecord(m->ev_done, m->comp));
    /* With peers, wait through libddpw: it also polls the communicator, so a dead peer is
     * reported (and the communicator aborted, freeing the spinning NCCL kernels) as soon as NCCL
     * notices, within the job's collective timeout rather than a fixed 300 s. The event wait
     * after it returns at once then; it is what waits in a world of one. */
    if ((w != NULL && (rc = ddpw_stream_wait(w, m->comp, err)) != 0) ||
        (rc = wait_event(m->ev_done, err)) != 0)
        return rc;
    double sum = 0;
    for (int i = 0; i < B; i++)
        sum += m->h_loss[i];
    *loss_sum = sum;
    *correct = *m->h_correct;
    return 0;
}

extern "C" void gpu_model_free(gpu_model_t *m) {
    if (m == NULL)
        return;
    cudaDeviceSynchronize();
    for (int l = 0; l < MLP_MAX_SIZES; l++) {
        cudaFree(m->act[l]);
        if (m->ev_bucket[l])
            cudaEventDestroy(m->ev_bucket[l]);
    }
    cudaFree(m->params);
    cudaFree(m->grad);
    cudaFree(m->m);
    cudaFree(m->v);
    cudaFree(m->d0);
    cudaFree(m->d1);
    cudaFree(m->loss_rows);
    cudaFree(m->y);
    cudaFree(m->correct);
    cudaFreeHost(m->h_loss);
    cudaFreeHost(m->h_correct);
    if (m->ev_comm)
        cudaEventDestroy(m->ev_comm);
    if (m->ev_done)
        cudaEventDestroy(m->ev_done);
    if (m->blas)
        cublasDestroy(m->blas);
    if (m->comp)
        cudaStreamDestroy(m->comp);
    if (m->comm)
        cudaStreamDestroy(m->comm);
    free(m);
}
