/* SPDX-License-Identifier: Apache-2.0
 * loop.c: train's training loop, cut into its parts: resume (newest valid checkpoint or rank 0's
 * initial parameters), one step (forward, backward, gradient allreduce, update), progress and
 * metrics, checkpoint, --check-sync and the epoch-end evaluation; the agent's heartbeat with the
 * global step after every step and around the long parts (resume, checkpoint, evaluation). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_log.h"
#include "ddp_time.h"
#include "ddpw_keys.h"
#include "trainer.h"

/* Records the failed stage for main's message and passes rc through. */
static int failed(trainer_t *t, const char *stage, int rc) {
    t->stage = stage;
    return rc;
}

void trainer_heartbeat(const trainer_t *t, uint64_t step, int flush) {
    ddp_err_t e;
    ddp_err_clear(&e);
    /* libddpw reports a heartbeat file it cannot use once, then ignores it: warn, train on. */
    int rc = ddpw_heartbeat((int64_t)step, &e);
    if (rc == 0 && flush)
        rc = ddpw_heartbeat_flush(&e);
    if (rc != 0)
        DDP_WARN("rank %d: %s (training goes on without a heartbeat)", t->rank, e.text);
}

/* Broadcasts len bytes of host memory from rank 0: through the CPU backend, or through the
 * store when the collectives run on GPUs (small metadata only). */
static int bcast_host(trainer_t *t, void *buf, size_t len, const char *key, ddp_err_t *err) {
    if (t->world == 1)
        return 0;
    if (ddpw_backend(t->w) == DDPW_BACKEND_CPU)
        return ddpw_broadcast(t->w, buf, len, 0, err);
    if (t->rank == 0)
        return ddpw_store_set(t->w, key, buf, len, err);
    size_t got = 0;
    int rc = ddpw_store_get(t->w, key, buf, len, &got, -1, err);
    if (rc == 0 && got != len)
        rc = ddp_err_set(err, DDP_EPROTO, "store key %s: %zu bytes, expected %zu", key, got, len);
    return rc;
}

int trainer_pull_state(trainer_t *t, ddp_err_t *err) {
#ifdef DDP_HAVE_CUDA
    if (t->gm != NULL)
        return gpu_model_get_state(t->gm, t->params, t->opt.m, &t->opt.t, err);
#endif
    (void)t;
    (void)err;
    return 0;
}

/* Rank 0: loads the newest valid checkpoint into t->params, t->opt and *meta, or draws the
 * initial parameters. hdr gets {found, step, epoch, pos, opt_t} for the broadcast. */
static int load_or_init(trainer_t *t, ckpt_meta_t *meta, uint64_t hdr[5], ddp_err_t *err) {
    if (t->a->ckpt_dir == NULL) {
        mlp_init_params(&t->shape, t->params, (uint64_t)t->a->seed);
        return 0;
    }
    int found = 0, skipped = 0;
    char used[4096], why[4096];
    int rc =
        ckpt_load_latest(t->a->ckpt_dir, &t->shape, meta, t->params, t->opt.m,
                         optim_state_len(&t->opt), &found, used, &skipped, why, sizeof used, err);
    if (rc != 0)
        return failed(t, "resume", rc);
    if (skipped)
        DDP_WARN("skipped %d unusable checkpoint(s), newest: %s", skipped, why);
    if (!found) {
        mlp_init_params(&t->shape, t->params, (uint64_t)t->a->seed);
        return 0;
    }
    if (!t->a->quiet)
        printf("resuming from %s (step %llu, epoch %llu, batch %llu)\n", used,
               (unsigned long long)meta->step, (unsigned long long)meta->epoch,
               (unsigned long long)meta->pos);
    hdr[0] = 1;
    hdr[1] = meta->step;
    hdr[2] = meta->epoch;
    hdr[3] = meta->pos;
    hdr[4] = meta->opt_t;
    return 0;
}

int trainer_resume(trainer_t *t, ckpt_meta_t *meta, ddp_err_t *err) {
    uint64_t hdr[5] = {0, 0, 0, 0, 0}; /* found, step, epoch, pos, opt_t */
    size_t slen = optim_state_len(&t->opt);
    int rc;
    if (t->rank == 0 && (rc = load_or_init(t, meta, hdr, err)) != 0)
        return rc;
    if ((rc = bcast_host(t, hdr, sizeof hdr, DDPW_KEY_TRAIN_RESUME, err)) != 0)
        return failed(t, "broadcast resume point", rc);
    meta->step = hdr[1];
    meta->epoch = hdr[2];
    meta->pos = hdr[3];
    t->opt.t = hdr[4];
    trainer_heartbeat(t, meta->step, 0);
#ifdef DDP_HAVE_CUDA
    if (t->gm != NULL) {
        if ((rc = gpu_model_set_state(t->gm, t->params, t->opt.m, t->opt.t, err)) != 0 ||
            (t->world > 1 && (rc = gpu_model_broadcast(t->gm, t->w, 0, err)) != 0))
            return failed(t, "broadcast parameters", rc);
        return 0;
    }
#endif
    if (t->world > 1) {
        /* DDP does the same at construction: every rank starts from rank 0's parameters. */
        if ((rc = ddpw_broadcast(t->w, t->params, t->shape.nparams * sizeof(float), 0, err)) != 0 ||
            (rc = ddpw_broadcast(t->w, t->opt.m, slen * sizeof(float), 0, err)) != 0)
            return failed(t, "broadcast parameters", rc);
    }
    return 0;
}

/* Rank 0 writes a checkpoint at (step, epoch, pos); then every rank waits for it. */
static int save(trainer_t *t, uint64_t step, uint64_t epoch, uint64_t pos, ddp_err_t *err) {
    /* Writing and syncing a checkpoint can be long: beat before and after. */
    trainer_heartbeat(t, step, 0);
    int rc = trainer_pull_state(t, err);
    if (rc != 0)
        return failed(t, "checkpoint", rc);
    if (t->rank == 0) {
        ckpt_meta_t m = {step, epoch, pos, t->opt.t, (uint32_t)t->opt.kind, (uint64_t)t->a->seed};
        rc = ckpt_save(t->a->ckpt_dir, &t->shape, &m, t->params, t->opt.m, optim_state_len(&t->opt),
                       t->a->keep, err);
        if (rc != 0)
            return failed(t, "checkpoint", rc);
    }
    /* Nobody runs ahead of a checkpoint that is not on disk yet. */
    if ((rc = ddpw_barrier(t->w, err)) != 0)
        return failed(t, "barrier after checkpoint", rc);
    trainer_heartbeat(t, step, 0);
    return 0;
}

/* Fails unless every rank holds rank 0's parameters bit for bit. */
static int check_sync(trainer_t *t, uint64_t epoch, ddp_err_t *err) {
    int rc = trainer_pull_state(t, err);
    if (rc != 0)
        return failed(t, "check-sync", rc);
    uint64_t mine = ckpt_fnv1a(CKPT_FNV_INIT, t->params, t->shape.nparams * sizeof(float));
    uint64_t root = mine;
    ddpw_name_t key = ddpw__key_train_sync(epoch);
    if ((rc = bcast_host(t, &root, sizeof root, key.s, err)) != 0)
        return failed(t, "check-sync", rc);
    if (root != mine)
        return failed(t, NULL,
                      ddp_err_set(err, DDP_ECORRUPT,
                                  "parameters differ from rank 0's after epoch %llu",
                                  (unsigned long long)epoch + 1));
    return 0;
}

/* Scores the first eval_samples samples with the current parameters (rank 0), beating with
 * step after every batch (a large evaluation takes as long as many steps). */
static double evaluate(trainer_t *t, uint64_t step) {
    size_t n = (size_t)t->a->eval_samples < t->data.n ? (size_t)t->a->eval_samples : t->data.n;
    size_t hits = 0;
    for (size_t off = 0; off < n; off += (size_t)t->a->batch) {
        int B = (int)(n - off < (size_t)t->a->batch ? n - off : (size_t)t->a->batch);
        int c = 0;
        mlp_forward_backward(&t->shape, &t->ws, t->params, t->data.x + off * t->data.dim,
                             t->data.y + off, B, NULL, &c);
        hits += (size_t)c;
        trainer_heartbeat(t, step, 0);
    }
    return n ? (double)hits / (double)n : 0;
}

/* Running sums of loss and hits: over the logging window (w*) and the epoch (e*). */
typedef struct tally {
    double wloss, eloss;
    size_t wcorrect, wcount, ecorrect, ecount;
    uint64_t t0, te; /* window start, epoch start (ns) */
} tally_t;

static void progress(const trainer_t *t, uint64_t step, uint64_t epoch, size_t b, size_t nb,
                     double loss, double acc, double sps, int tty) {
    if (t->a->quiet)
        return;
    if (tty) {
        int width = 30, done = (int)((b * (size_t)width) / (nb ? nb : 1));
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '=' : i == done ? '>' : ' ';
        bar[width] = '\0';
        printf("\repoch %llu/%d [%s] step %llu loss %.4f acc %.3f %.0f samples/s ",
               (unsigned long long)epoch + 1, t->a->epochs, bar, (unsigned long long)step, loss,
               acc, sps);
    } else
        printf("epoch %llu/%d step %llu loss %.4f acc %.3f samples/s %.0f\n",
               (unsigned long long)epoch + 1, t->a->epochs, (unsigned long long)step, loss, acc,
               sps);
    fflush(stdout);
}

/* Rank 0, every --log-every steps and at the epoch's last batch: progress line and metrics for
 * the window, which then starts again. */
static void report_window(trainer_t *t, tally_t *y, uint64_t step, uint64_t epoch, size_t b,
                          size_t nb, int tty) {
    double dt = (double)(ddp_now_ns() - y->t0) / 1e9;
    double sps = dt > 0 ? (double)y->wcount * t->world / dt : 0;
    double l = y->wloss / (double)y->wcount, acc = (double)y->wcorrect / (double)y->wcount;
    progress(t, step, epoch, b + 1, nb, l, acc, sps, tty);
    if (t->metrics != NULL) {
        /* Wall-clock time, so that a window can be placed against events outside the job (a
         * slowdown a benchmark injects, an agent's line) on the same machine or synced ones. */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        fprintf(t->metrics,
                "{\"step\":%llu,\"epoch\":%llu,\"loss\":%.6f,\"accuracy\":%.6f,"
                "\"samples_per_s\":%.1f,\"world_size\":%d,\"time\":%lld.%03ld}\n",
                (unsigned long long)step, (unsigned long long)epoch, l, acc, sps, t->world,
                (long long)now.tv_sec, now.tv_nsec / 1000000);
        fflush(t->metrics);
    }
    y->wloss = 0;
    y->wcorrect = y->wcount = 0;
    y->t0 = ddp_now_ns();
}

/* Rank 0 at an epoch's end: evaluation, summary line and metrics. tend: when the last step
 * ended (the epoch's throughput excludes the checkpoint and the evaluation). */
static int report_epoch(trainer_t *t, const tally_t *y, uint64_t step, uint64_t epoch,
                        uint64_t tend, int tty, ddp_err_t *err) {
    int rc = trainer_pull_state(t, err);
    if (rc != 0)
        return failed(t, "evaluate", rc);
    double esec = (double)(tend - y->te) / 1e9;
    double eps = esec > 0 ? (double)y->ecount * t->world / esec : 0;
    double ev = evaluate(t, step);
    double el = y->ecount ? y->eloss / (double)y->ecount : 0;
    double eacc = y->ecount ? (double)y->ecorrect / (double)y->ecount : 0;
    if (tty && !t->a->quiet)
        printf("\n");
    if (!t->a->quiet)
        printf("epoch %llu/%d done: step %llu loss %.4f acc %.3f eval_accuracy %.4f\n",
               (unsigned long long)epoch + 1, t->a->epochs, (unsigned long long)step, el, eacc, ev);
    if (t->metrics != NULL) {
        fprintf(t->metrics,
                "{\"step\":%llu,\"epoch\":%llu,\"loss\":%.6f,\"accuracy\":%.6f,"
                "\"eval_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_end\":true}\n",
                (unsigned long long)step, (unsigned long long)epoch, el, eacc, ev, eps);
        fflush(t->metrics);
    }
    fflush(stdout);
    return 0;
}

/* 1 when none of the n values is NaN or infinite. */
static int all_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

/* The error of a step whose loss or gradient (what) is NaN or infinite: training on it would
 * only spread it into the parameters and every later step. step counts from 1. */
static int nonfinite(ddp_err_t *err, uint64_t step, const char *what) {
    return ddp_err_set(err, DDP_ECORRUPT,
                       "step %llu: %s is not finite (NaN or infinite); stopping (check the data "
                       "and --lr)",
                       (unsigned long long)step, what);
}

/* One step on batch b of this rank's shard: gather the rows, forward and backward, average the
 * gradients, update. *loss gets the batch's summed loss, *correct its hits, *B its rows. step is
 * this step's number (from 1), for messages. */
static int step_once(trainer_t *t, uint64_t step, size_t b, size_t per, double *loss, int *correct,
                     int *B, ddp_err_t *err) {
    int dim = t->data.dim, rc;
    size_t lo = b * (size_t)t->a->batch, hi = lo + (size_t)t->a->batch;
    if (hi > per)
        hi = per;
    *B = (int)(hi - lo);
    for (int i = 0; i < *B; i++) {
        size_t s = t->idx[lo + (size_t)i];
        memcpy(t->bx + (size_t)i * dim, t->data.x + s * dim, (size_t)dim * sizeof(float));
        t->by[i] = t->data.y[s];
    }
    *loss = 0;
    *correct = 0;
#ifdef DDP_HAVE_CUDA
    if (t->gm != NULL) {
        rc = gpu_model_step(t->gm, t->world > 1 ? t->w : NULL, t->bx, t->by, *B, loss, correct,
                            NULL, err);
        if (rc != 0)
            return failed(t, "training step", rc);
        return isfinite(*loss) ? 0 : failed(t, NULL, nonfinite(err, step, "the loss"));
    }
#endif
    *loss = mlp_forward_backward(&t->shape, &t->ws, t->params, t->bx, t->by, *B, t->grad, correct);
    /* A rank whose loss is not finite poisons its gradient: the allreduce carries the NaN to
     * every rank, so all of them stop at this step instead of waiting for the one that left. */
    int bad_loss = !isfinite(*loss);
    if (bad_loss)
        t->grad[0] = NAN;
    if ((rc = ddpw_allreduce(t->w, t->grad, t->shape.nparams, DDPW_AVG, err)) != 0)
        return failed(t, "gradient allreduce", rc);
    if (bad_loss || !all_finite(t->grad, t->shape.nparams))
        return failed(t, NULL, nonfinite(err, step, bad_loss ? "the loss" : "the gradient"));
    optim_step(&t->opt, t->params, t->grad);
    return 0;
}

/* Whether this is the job's first attempt (--fail-at-step fails only there). */
static int first_attempt(void) {
    const char *n = getenv(DDP_ENV_RESTART_COUNT);
    return n == NULL || strcmp(n, "0") == 0;
}

/* One epoch from batch start; *step counts steps in total. *stop is set when --max-steps is
 * reached (the run then ends without the epoch-end work). */
static int run_epoch(trainer_t *t, uint64_t epoch, size_t start, uint64_t *step, int *stop,
                     ddp_err_t *err) {
    const train_args_t *a = t->a;
    size_t per = train_sampler_num_samples(t->data.n, t->world);
    size_t nb = (per + (size_t)a->batch - 1) / (size_t)a->batch;
    int tty = isatty(STDOUT_FILENO), rc;
    if ((rc = train_sampler_indices(t->data.n, t->world, t->rank, (uint64_t)a->seed, epoch, 1,
                                    t->idx, err)) != 0)
        return failed(t, "sampler", rc);
    tally_t y = {0};
    y.t0 = y.te = ddp_now_ns();
    for (size_t b = start; b < nb; b++) {
        if (a->max_steps >= 0 && *step >= (uint64_t)a->max_steps) {
            *stop = 1;
            return 0;
        }
        double loss;
        int correct, B;
        if ((rc = step_once(t, *step + 1, b, per, &loss, &correct, &B, err)) != 0)
            return rc;
        (*step)++;
        trainer_heartbeat(t, *step, 0);
        y.wloss += loss;
        y.eloss += loss;
        y.wcorrect += (size_t)correct;
        y.ecorrect += (size_t)correct;
        y.wcount += (size_t)B;
        y.ecount += (size_t)B;
        if (t->rank == 0 && (*step % (uint64_t)a->log_every == 0 || b + 1 == nb))
            report_window(t, &y, *step, epoch, b, nb, tty);
        if (a->ckpt_dir != NULL && a->ckpt_every > 0 && *step % (uint64_t)a->ckpt_every == 0 &&
            b + 1 < nb && (rc = save(t, *step, epoch, b + 1, err)) != 0)
            return rc;
        if ((int64_t)*step == a->fail_at_step && first_attempt()) {
            trainer_heartbeat(t, *step, 1); /* the agent sees the step it failed at */
            return failed(t, NULL,
                          ddp_err_set(err, -ECANCELED, "--fail-at-step %lld reached",
                                      (long long)a->fail_at_step));
        }
        if (a->step_delay_ms > 0) {
            struct timespec ts = {a->step_delay_ms / 1000, (a->step_delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    uint64_t tend = ddp_now_ns();
    if (a->ckpt_dir != NULL && (rc = save(t, *step, epoch + 1, 0, err)) != 0)
        return rc;
    if (a->check_sync && (rc = check_sync(t, epoch, err)) != 0)
        return rc;
    if (t->rank == 0)
        return report_epoch(t, &y, *step, epoch, tend, tty, err);
    return 0;
}

int trainer_run(trainer_t *t, const ckpt_meta_t *meta, ddp_err_t *err) {
    uint64_t step = meta->step;
    int stop = 0;
    for (uint64_t epoch = meta->epoch; epoch < (uint64_t)t->a->epochs && !stop; epoch++) {
        int rc = run_epoch(t, epoch, epoch == meta->epoch ? meta->pos : 0, &step, &stop, err);
        if (rc != 0)
            return rc;
    }
    /* The newest step may still wait in the rate limit: the file ends with the final step. */
    trainer_heartbeat(t, step, 1);
    return 0;
}
