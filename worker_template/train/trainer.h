/* SPDX-License-Identifier: Apache-2.0
 * trainer.h: the `train` program's own pieces: its command line (args.c) and the trainer state
 * with the training loop cut into resume, step, evaluation and checkpoint (loop.c). Internal to
 * train (not installed). Functions return 0 or a negative code (DDP_E*, -errno) with err filled;
 * main.c reports the failure once and chooses the exit status. */
#ifndef TRAINER_H
#define TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "ddpw.h"
#include "train.h"
#ifdef DDP_HAVE_CUDA
#include "train_gpu.h"
#endif

#define TRAIN_DEFAULT_LAYERS "512,1024,512,10"
#define TRAIN_DEFAULT_HIDDEN "1024,512"
/* Largest --lr: far above any useful rate, far below float32 overflow. */
#define TRAIN_MAX_LR 1e6

/* ---- args.c ---- */
typedef struct train_args {
    int epochs, batch, log_every, ckpt_every, keep, eval_samples, step_delay_ms, check_sync;
    int64_t samples, max_steps, seed, data_seed;
    int64_t fail_at_step; /* -1: never */
    double lr, momentum;
    int lr_set;
    ddpw_backend_t backend;
    optim_kind_t optim;
    const char *layers, *ckpt_dir, *metrics, *dump, *data; /* borrowed from argv */
    int quiet;
    int help; /* --help was given: print train_usage_text and exit 0 */
} train_args_t;

/* The --help text, exit statuses included. */
extern const char train_usage_text[];

/* Parses argv into *a (defaults first). Returns 0, or DDP_EUSAGE with err naming the flag and
 * its value in one line. Strings in *a are borrowed from argv. */
int train_args_parse(int argc, char **argv, train_args_t *a, ddp_err_t *err);

/* ---- loop.c ---- */

/* The trainer's state: the same on every rank after each step. Buffers are owned by the trainer
 * and freed by main. */
typedef struct trainer {
    const train_args_t *a;
    ddpw_t *w;
    int rank, world;
    mlp_shape_t shape;
    train_data_t data;
    float *params, *grad;
    optim_t opt;
    mlp_ws_t ws;
    float *bx;
    int32_t *by;
    size_t *idx;
#ifdef DDP_HAVE_CUDA
    gpu_model_t *gm;
#endif
    FILE *metrics;
    /* Set with a failure: the stage that failed ("resume", "training step", ...), which main
     * puts before the error text; NULL when the text says it all. */
    const char *stage;
} trainer_t;

/* Resumes from the newest valid checkpoint of --checkpoint-dir (rank 0 reads, every rank
 * receives), else starts from rank 0's initial parameters. Fills *meta with the resume point. */
int trainer_resume(trainer_t *t, ckpt_meta_t *meta, ddp_err_t *err);

/* Trains from *meta to the last epoch (or --max-steps): steps, progress and metrics, checkpoints,
 * --check-sync and the epoch-end evaluation. */
int trainer_run(trainer_t *t, const ckpt_meta_t *meta, ddp_err_t *err);

/* Beats the agent's heartbeat (ddpw_heartbeat) with the global step; flush: also write the
 * step now (ddpw_heartbeat_flush). An unusable heartbeat file is logged once as a warning and
 * never fails the run. */
void trainer_heartbeat(const trainer_t *t, uint64_t step, int flush);

/* Copies the model's state from the device to t->params and t->opt (no-op on the CPU path). */
int trainer_pull_state(trainer_t *t, ddp_err_t *err);

#endif
