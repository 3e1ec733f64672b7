/* SPDX-License-Identifier: Apache-2.0
 * train: a data-parallel MLP trainer, the example users copy. Reads the worker environment
 * through libddpw, shards a dataset with DistributedSampler semantics, averages gradients with
 * allreduce (CPU shared memory or NCCL), checkpoints atomically from rank 0 and resumes from the
 * newest valid checkpoint after a restart. Without DDPRUN_* / RANK it runs as a world of one.
 * main.c sets up (flags, data, model, buffers), runs the loop (loop.c) and reports failures. */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"
#include "trainer.h"

/* Failure at the top: log once, leave the message for the agent's summary, exit 1. */
static void die(int rank, const char *msg) __attribute__((noreturn));
static void die(int rank, const char *msg) {
    DDP_ERROR("rank %d: %s", rank, msg);
    char line[512];
    snprintf(line, sizeof line, "rank %d: %s", rank, msg);
    ddpw_record_error(line);
    exit(1);
}

/* die() with "what: <error text>" (what may be NULL: the text alone). */
static void die_err(int rank, const char *what, int rc, const ddp_err_t *e)
    __attribute__((noreturn));
static void die_err(int rank, const char *what, int rc, const ddp_err_t *e) {
    char msg[400];
    const char *text = e->code != 0 ? e->text : ddp_strerror(rc);
    if (what != NULL)
        snprintf(msg, sizeof msg, "%s: %s", what, text);
    else
        snprintf(msg, sizeof msg, "%s", text);
    die(rank, msg);
}

/* --dump-params: rank 0 writes the parameters, or every rank when the path holds {rank}. */
static void dump_params(trainer_t *t) {
    const char *spec = t->a->dump;
    const char *mark = strstr(spec, "{rank}");
    if (mark == NULL && t->rank != 0)
        return;
    char path[4096];
    if (mark != NULL)
        snprintf(path, sizeof path, "%.*s%d%s", (int)(mark - spec), spec, t->rank, mark + 6);
    else
        snprintf(path, sizeof path, "%s", spec);
    /* Replaced through an exclusive temporary file: a symlink at path is not followed. */
    ddp_file_part_t part = {t->params, t->shape.nparams * sizeof(float)};
    int rc = ddp_file_replace(path, NULL, &part, 1, 0644, 0);
    if (rc != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "unable to write %.300s: %s", path, strerror(-rc));
        die(t->rank, msg);
    }
}

/* The data and the model shape, before any wait so a usage error is reported at once. spec
 * (cap bytes) holds the default widths for --data; *layers points at the widths in use. Exits
 * 2 on a shape that does not fit, 1 on data errors. */
static void load_data(trainer_t *t, char *spec, size_t cap, const char **layers) {
    const train_args_t *a = t->a;
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc;
    *layers = a->layers ? a->layers : TRAIN_DEFAULT_LAYERS;
    if (a->data != NULL) {
        if ((rc = train_data_load_csv(&t->data, a->data, &e)) != 0)
            die_err(t->rank, "--data", rc, &e);
        if (a->layers == NULL) {
            snprintf(spec, cap, "%d," TRAIN_DEFAULT_HIDDEN ",%d", t->data.dim, t->data.classes);
            *layers = spec;
        }
    }
    if ((rc = mlp_shape_parse(&t->shape, *layers, &e)) != 0) {
        fprintf(stderr, "train: %s\n", e.text);
        exit(2);
    }
    int in = t->shape.sizes[0], out = t->shape.sizes[t->shape.nsizes - 1];
    if (a->data == NULL && (rc = train_data_synth(&t->data, (size_t)a->samples, in, out,
                                                  (uint64_t)a->data_seed, &e)) != 0)
        die_err(t->rank, "synthetic data", rc, &e);
    if (t->data.dim != in || t->data.classes > out) {
        fprintf(stderr, "train: --layers: %s does not fit the data (%d features, %d classes)\n",
                *layers, t->data.dim, t->data.classes);
        exit(2);
    }
}

/* --metrics (rank 0): appended to; a symlink or a non-regular file there is refused. */
static void open_metrics(trainer_t *t) {
    int fd = train_open_append(t->a->metrics, 0644);
    if (fd >= 0 && (t->metrics = fdopen(fd, "a")) == NULL) {
        int e = errno;
        close(fd);
        fd = -e;
    }
    if (fd < 0) {
        char msg[512];
        const char *why = fd == -ELOOP    ? "a symbolic link (not followed)"
                          : fd == -EINVAL ? "not a regular file"
                                          : strerror(-fd);
        snprintf(msg, sizeof msg, "--metrics: unable to open %.300s: %s", t->a->metrics, why);
        die(t->rank, msg);
    }
}

/* The trainer's buffers, the optimizer, the GPU model on NCCL and the metrics file. */
static void alloc_trainer(trainer_t *t) {
    const train_args_t *a = t->a;
    size_t n = t->shape.nparams, per = train_sampler_num_samples(t->data.n, t->world);
    t->params = malloc(n * sizeof(float));
    t->grad = malloc(n * sizeof(float));
    t->idx = malloc(per * sizeof(size_t));
    t->bx = malloc((size_t)a->batch * t->data.dim * sizeof(float));
    t->by = malloc((size_t)a->batch * sizeof(int32_t));
    if (!t->params || !t->grad || !t->idx || !t->bx || !t->by ||
        optim_init(&t->opt, a->optim, n, (float)a->lr, (float)a->momentum) != 0 ||
        mlp_ws_init(&t->ws, &t->shape, a->batch) != 0)
        die(t->rank, "out of memory");
    memset(t->params, 0, n * sizeof(float));
#ifdef DDP_HAVE_CUDA
    if (ddpw_backend(t->w) == DDPW_BACKEND_NCCL) {
        ddp_err_t e;
        ddp_err_clear(&e);
        int rc =
            gpu_model_new(&t->shape, &t->opt, a->batch, ddpw_device(t->w), 1u << 18, &t->gm, &e);
        if (rc != 0)
            die_err(t->rank, "GPU model", rc, &e);
    }
#endif
    if (a->metrics != NULL && t->rank == 0)
        open_metrics(t);
}

static void free_trainer(trainer_t *t) {
    if (t->metrics != NULL)
        fclose(t->metrics);
#ifdef DDP_HAVE_CUDA
    gpu_model_free(t->gm);
#endif
    ddpw_free(t->w);
    mlp_ws_free(&t->ws);
    optim_free(&t->opt);
    train_data_free(&t->data);
    free(t->params);
    free(t->grad);
    free(t->idx);
    free(t->bx);
    free(t->by);
}

int main(int argc, char **argv) {
    train_args_t a;
    ddp_err_t e;
    ddp_err_clear(&e);
    if (train_args_parse(argc, argv, &a, &e) != 0) {
        fprintf(stderr, "train: %s (see --help)\n", e.text);
        return 2;
    }
    if (a.help) {
        fputs(train_usage_text, stdout);
        return 0;
    }
    ddp_log_init("train", DDP_LOG_INFO);
    /* One BLAS thread: reproducible sums (bitwise-identical restarts) and no oversubscription
     * when several ranks share the cores. */
    openblas_set_num_threads(1);
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.a = &a;
    ddpw_env_t env;
    int rc = ddpw_env_read(&env, &e);
    if (rc != 0)
        die_err(0, "environment", rc, &e);
    t.rank = env.rank;
    t.world = env.world_size;
    /* Beat from the start: loading the data and waiting for the other ranks take time too. */
    trainer_heartbeat(&t, 0, 0);
    char spec[256]; /* outlives load_data: layers may point here until the banner */
    const char *layers;
    load_data(&t, spec, sizeof spec, &layers);
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = a.backend;
    if ((rc = ddpw_init_env(&t.w, &env, &o, &e)) != 0)
        die_err(t.rank, "worker init", rc, &e);
    trainer_heartbeat(&t, 0, 0);
    alloc_trainer(&t);
    if (t.rank == 0 && ddpw_backend_note(t.w) != NULL) /* the same on every rank: said once */
        fprintf(stderr, "train: warning: %s\n", ddpw_backend_note(t.w));
    if (t.rank == 0 && !a.quiet) {
        printf("train: world %d, backend %s, layers %s (%zu parameters), %zu samples, batch %d "
               "per rank, %s lr %g\n",
               t.world, ddpw_backend_name(ddpw_backend(t.w)), layers, t.shape.nparams, t.data.n,
               a.batch, a.optim == OPT_ADAM ? "adam" : "sgd", a.lr);
        fflush(stdout);
    }
    ckpt_meta_t meta;
    memset(&meta, 0, sizeof meta);
    if ((rc = trainer_resume(&t, &meta, &e)) != 0 || (rc = trainer_run(&t, &meta, &e)) != 0)
        die_err(t.rank, t.stage, rc, &e);
    if ((rc = trainer_pull_state(&t, &e)) != 0)
        die_err(t.rank, "final state", rc, &e);
    if (a.dump != NULL)
        dump_params(&t);
    if ((rc = ddpw_barrier(t.w, &e)) != 0)
        die_err(t.rank, "final barrier", rc, &e);
    free_trainer(&t);
    return 0;
}
