/* SPDX-License-Identifier: Apache-2.0
 * train_gpu.h: the GPU path of train (mlp_cuda.cu): the same MLP as mlp.c with cuBLAS and CUDA
 * kernels, gradients in one flat device buffer allreduced in buckets on a second stream while
 * backward is still running (DDP's overlap). Built only when HAVE_CUDA=1 (DDP_HAVE_CUDA). */
#ifndef TRAIN_GPU_H
#define TRAIN_GPU_H

#include "ddpw.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_model gpu_model_t;

/* Creates the model on device dev with room for batches of max_batch rows; opt gives the
 * optimizer kind and hyper-parameters (its host buffers are not used). bucket_floats: gradient
 * bucket size for the overlapped allreduce. *out: caller owns; free with gpu_model_free.
 * Errors: DDP_ENOGPU, DDP_ECUDA. */
int gpu_model_new(const mlp_shape_t *s, const optim_t *opt, int max_batch, int dev,
                  size_t bucket_floats, gpu_model_t **out, ddp_err_t *err);

/* Copies params (nparams floats), optimizer state (optim_state_len floats) and step count t to
 * the device, or back. */
int gpu_model_set_state(gpu_model_t *m, const float *params, const float *state, uint64_t t,
                        ddp_err_t *err);
int gpu_model_get_state(gpu_model_t *m, float *params, float *state, uint64_t *t, ddp_err_t *err);

/* Broadcasts parameters and optimizer state from root through w (NCCL, device memory). */
int gpu_model_broadcast(gpu_model_t *m, ddpw_t *w, int root, ddp_err_t *err);

/* One step: forward, backward with bucketed allreduce (average) through w (NULL: world of one),
 * optimizer update. x: B * sizes[0] host floats, y: B labels. *loss_sum: summed cross-entropy;
 * *correct: argmax hits. If grad_out != NULL, the averaged gradient is copied there (tests). */
int gpu_model_step(gpu_model_t *m, ddpw_t *w, const float *x, const int32_t *y, int B,
                   double *loss_sum, int *correct, float *grad_out, ddp_err_t *err);

/* Waits for the device, frees every device and pinned buffer and m itself. NULL is allowed. */
void gpu_model_free(gpu_model_t *m);

#ifdef __cplusplus
}
#endif

#endif
