/* SPDX-License-Identifier: Apache-2.0
 * train.h: the pieces of the `train` template shared by main.c, the GPU path and the unit
 * tests: PRNG, datasets, DistributedSampler, the MLP math on the CPU, optimizers, checkpoints.
 * Internal to train (not installed). Functions return 0 or a negative code (DDP_E*, -errno). */
#ifndef TRAIN_H
#define TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ddp_err.h"

/* ---- rng.c: deterministic PRNG (xoshiro256**, seeded through splitmix64) ---- */
typedef struct train_rng {
    uint64_t s[4];
} train_rng_t;

/* Seeds r from one 64-bit value (the four words come from splitmix64). */
void train_rng_seed(train_rng_t *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t train_rng_next(train_rng_t *r);
/* Uniform in [0, 1). */
double train_rng_uniform(train_rng_t *r);
/* Standard normal (Box-Muller). */
double train_rng_normal(train_rng_t *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t train_rng_below(train_rng_t *r, uint64_t n);

/* ---- data.c: datasets ---- */
typedef struct train_data {
    size_t n;    /* samples */
    int dim;     /* features per sample */
    int classes; /* labels are in [0, classes) */
    float *x;    /* n * dim, row-major; owned */
    int32_t *y;  /* n; owned */
} train_data_t;

/* Builds the synthetic set: inputs ~ N(0, 1), labels = argmax of a fixed random teacher MLP
 * (dim -> 64 -> classes, ReLU) drawn from seed. Fills *d (caller frees with train_data_free). */
int train_data_synth(train_data_t *d, size_t n, int dim, int classes, uint64_t seed,
                     ddp_err_t *err);

/* Longest CSV line train reads (bytes, line end excluded): a row of MLP_MAX_WIDTH features fits
 * with room to spare, and a file without line ends fails at once instead of filling memory. */
#define TRAIN_CSV_MAX_LINE (1u << 20)

/* Loads a CSV file of rows "label,f1,f2,...": label an integer >= 0, the same number of features
 * on every row; blank lines and lines starting with '#' are skipped, and a first line that is not
 * numeric is taken as a header. Values must be finite as float32; a line may hold at most
 * TRAIN_CSV_MAX_LINE bytes and MLP_MAX_WIDTH features (DDP_ETOOBIG). Errors name the file and
 * line: "data.csv:7: ...". */
int train_data_load_csv(train_data_t *d, const char *path, ddp_err_t *err);

/* Frees d's arrays and zeroes it; safe on a zeroed or already freed set. */
void train_data_free(train_data_t *d);

/* ---- sampler.c: DistributedSampler semantics (PyTorch's, drop_last=False) ---- */
/* Number of samples each rank gets per epoch: ceil(n / world). */
size_t train_sampler_num_samples(size_t n, int world);

/* Fills idx (train_sampler_num_samples entries) with this rank's indices for epoch: the
 * permutation of [0, n) drawn from seed + epoch (identity when shuffle is 0), padded by
 * repeating its head up to a multiple of world, then every world-th entry from rank. */
int train_sampler_indices(size_t n, int world, int rank, uint64_t seed, uint64_t epoch, int shuffle,
                          size_t *idx, ddp_err_t *err);

/* ---- mlp.c: the model on the CPU (OpenBLAS) ---- */
#define MLP_MAX_SIZES 16
#define MLP_MAX_WIDTH 65536 /* widest layer, input features included */

typedef struct mlp_shape {
    int nsizes; /* layer widths, input first, classes last */
    int sizes[MLP_MAX_SIZES];
    size_t w_off[MLP_MAX_SIZES], b_off[MLP_MAX_SIZES]; /* per weight layer, in floats */
    size_t nparams;
} mlp_shape_t;

/* Parses "64,256,10" into a shape (2..16 widths, each 1..65536). DDP_EUSAGE naming spec. */
int mlp_shape_parse(mlp_shape_t *s, const char *spec, ddp_err_t *err);
/* Same from an array of nsizes widths. Fills the parameter offsets and nparams. */
int mlp_shape_init(mlp_shape_t *s, const int *sizes, int nsizes, ddp_err_t *err);

/* He-uniform weights (bound sqrt(6 / fan_in)) and zero biases, from seed. */
void mlp_init_params(const mlp_shape_t *s, float *params, uint64_t seed);

typedef struct mlp_ws {
    int max_batch;
    float *act[MLP_MAX_SIZES]; /* act[l]: max_batch * sizes[l]; act[0] unused (input) */
    float *d0, *d1;            /* delta buffers, max_batch * max width */
} mlp_ws_t;

/* Allocates the activations and deltas for batches up to max_batch rows. Returns 0 or -ENOMEM;
 * the caller owns ws's buffers and frees them with mlp_ws_free (safe after a failed init). */
int mlp_ws_init(mlp_ws_t *ws, const mlp_shape_t *s, int max_batch);
void mlp_ws_free(mlp_ws_t *ws);

/* Forward and backward over a batch of B rows x (B * sizes[0]) with labels y. Writes the
 * gradient of the mean loss into grad (nparams floats, overwritten) when grad != NULL.
 * Returns the summed (not averaged) cross-entropy; *correct gets the number of argmax hits. */
double mlp_forward_backward(const mlp_shape_t *s, mlp_ws_t *ws, const float *params, const float *x,
                            const int32_t *y, int B, float *grad, int *correct);

/* ---- optimizers (mlp.c) ---- */
typedef enum { OPT_SGD = 0, OPT_ADAM = 1 } optim_kind_t;

typedef struct optim {
    optim_kind_t kind;
    float lr, momentum, beta1, beta2, eps;
    uint64_t t; /* steps taken (Adam bias correction) */
    size_t n;
    float *m, *v; /* state, one owned block: m (momentum / first moment), then v (Adam) */
} optim_t;

/* Sets up an optimizer for n parameters with zeroed state (beta1 0.9, beta2 0.999, eps 1e-8 for
 * Adam). Returns 0 or -ENOMEM; the caller frees the state with optim_free. */
int optim_init(optim_t *o, optim_kind_t kind, size_t n, float lr, float momentum);
/* Number of state floats that a checkpoint stores (n or 2n). */
size_t optim_state_len(const optim_t *o);
/* One update of params from grad (both n floats): PyTorch's SGD-momentum or Adam rule. */
void optim_step(optim_t *o, float *params, const float *grad);
/* Frees the state buffers; the struct may be initialized again. */
void optim_free(optim_t *o);

/* ---- fileio.c: files in directories other users may share ---- */

/* Opens path for appending, creating it with mode; refuses a symlink (-ELOOP) and anything but a
 * regular file (-EINVAL), without blocking on a FIFO. Returns the fd (caller closes) or -errno. */
int train_open_append(const char *path, mode_t mode);

/* ---- ckpt.c: atomic, checksummed checkpoints ---- */
typedef struct ckpt_meta {
    uint64_t step, epoch, pos; /* pos: batches already done in epoch */
    uint64_t opt_t;
    uint32_t opt_kind;
    uint64_t seed;
} ckpt_meta_t;

/* Writes DIR/ckpt-<step>.bin atomically (a temporary file created exclusively, fsync, rename,
 * fsync of DIR) and keeps the newest `keep` files. params: shape->nparams floats; state:
 * state_len floats. DIR is created (0755) when missing; a DIR that group or others may write
 * without the sticky bit is refused (DDP_EUSAGE naming it and its mode). */
int ckpt_save(const char *dir, const mlp_shape_t *shape, const ckpt_meta_t *m, const float *params,
              const float *state, size_t state_len, int keep, ddp_err_t *err);

/* Loads the newest valid checkpoint of DIR matching shape and state_len. Returns 0 with
 * *found = 1 (and the file name in used, cap bytes), or *found = 0 when there is none. Files that
 * fail the checks are skipped (non-regular files and symlinks are never opened for reading):
 * *skipped counts them and skipped_text (cap) names the newest one
 * and why. When files were found but none is valid, params and state are zeroed (a skipped
 * file may have been read into them). Errors only for an unreadable DIR (ENOENT is no error) or
 * one that others may write (DDP_EUSAGE, as for ckpt_save). */
int ckpt_load_latest(const char *dir, const mlp_shape_t *shape, ckpt_meta_t *m, float *params,
                     float *state, size_t state_len, int *found, char *used, int *skipped,
                     char *skipped_text, size_t cap, ddp_err_t *err);

/* 64-bit FNV-1a of len bytes, continuing from h (start with CKPT_FNV_INIT). */
#define CKPT_FNV_INIT 0xcbf29ce484222325ull
uint64_t ckpt_fnv1a(uint64_t h, const void *p, size_t len);

#endif
