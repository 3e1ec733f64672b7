/* train: a data-parallel MLP trainer, the example users copy. Reads the worker environment
 * through libddpw, shards a dataset with DistributedSampler semantics, averages gradients with
 * allreduce (CPU shared memory or NCCL), checkpoints atomically from rank 0 and resumes from the
 * newest valid checkpoint after a restart. Without DDPRUN_* / RANK it runs as a world of one. */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "ddpw.h"
#include "train.h"
#ifdef DDP_HAVE_CUDA
#include "train_gpu.h"
#endif

#define DEFAULT_LAYERS "512,1024,512,10"
#define DEFAULT_HIDDEN "1024,512"

typedef struct args {
    int epochs, batch, log_every, ckpt_every, keep, eval_samples, step_delay_ms, check_sync;
    int64_t samples, max_steps, seed, data_seed;
    double lr, momentum;
    int lr_set;
    ddpw_backend_t backend;
    optim_kind_t optim;
    const char *layers, *ckpt_dir, *metrics, *dump, *data;
    int quiet;
} args_t;

static const char usage_text[] =
    "usage: train [options]\n"
    "A data-parallel MLP trainer. Under ddprun (or torchrun) it reads RANK, WORLD_SIZE, "
    "LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, DDPRUN_STORE_ADDR/PORT/TOKEN, DDPRUN_ROUND, DDPRUN_RUN_ID;\n"
    "without them it trains alone (world of one).\n"
    "  --epochs N            passes over the data (default 3)\n"
    "  --batch-size N        samples per rank per step (default 64)\n"
    "  --lr X                learning rate (default 0.05 for sgd, 0.001 for adam)\n"
    "  --momentum X          SGD momentum (default 0.9)\n"
    "  --optimizer sgd|adam  (default sgd)\n"
    "  --seed N              initialization and shuffling seed (default 1)\n"
    "  --layers A,B,...,C    widths, input first, classes last (default " DEFAULT_LAYERS ",\n"
    "                        about 1M parameters; with --data: features," DEFAULT_HIDDEN
    ",classes)\n"
    "  --samples N           synthetic dataset size (default 8192)\n"
    "  --data-seed N         synthetic dataset seed (default 1234)\n"
    "  --data FILE.csv       rows of label,feature,... instead of the synthetic set\n"
    "  --backend auto|nccl|cpu  collectives (default auto: nccl when a GPU is visible)\n"
    "  --checkpoint-dir DIR  save there each epoch (rank 0) and resume from the newest valid one\n"
    "  --checkpoint-every N  also save every N steps (default 0: epoch ends only)\n"
    "  --keep N              checkpoints kept (default 3)\n"
    "  --metrics FILE        JSON lines: step, epoch, loss, accuracy, samples_per_s (rank 0)\n"
    "  --dump-params FILE    rank 0 writes the final parameters as raw little-endian float32;\n"
    "                        a FILE containing {rank} is written by every rank\n"
    "  --log-every N         progress every N steps (default 20)\n"
    "  --max-steps N         stop after N steps in total (default: no limit)\n"
    "  --eval-samples N      samples of the dataset scored at each epoch end (default 2048)\n"
    "  --check-sync          after each epoch, fail unless every rank holds rank 0's parameters\n"
    "  --step-delay-ms N     sleep N ms after each step (demos and fault tests)\n"
    "  --quiet               no progress lines\n"
    "  --help                this text\n"
    "exit status: 0 done; 1 failed (message on stderr and in TORCHELASTIC_ERROR_FILE); 2 usage\n";

/* Usage errors: one line naming the flag, exit 2. */
static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "train: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    exit(2);
}

static int64_t num_arg(const char *flag, const char *v, int64_t min, int64_t max) {
    int64_t x;
    if (ddp_parse_i64(v, min, max, &x) != 0)
        usage_error("%s: '%s' is not an integer in [%lld, %lld]", flag, v, (long long)min,
                    (long long)max);
    return x;
}

/* A non-negative finite decimal: the same grammar as a duration in seconds. */
static double real_arg(const char *flag, const char *v) {
    double x;
    if (ddp_parse_seconds(v, &x) != 0)
        usage_error("%s: '%s' is not a non-negative number", flag, v);
    return x;
}

static void parse_args(int argc, char **argv, args_t *a) {
    enum {
        F_EPOCHS = 256,
        F_BATCH,
        F_LR,
        F_MOM,
        F_OPT,
        F_SEED,
        F_LAYERS,
        F_SAMPLES,
        F_DSEED,
        F_DATA,
        F_BACKEND,
        F_CKPT,
        F_CKPT_EVERY,
        F_KEEP,
        F_METRICS,
        F_DUMP,
        F_LOG,
        F_MAXSTEPS,
        F_EVAL,
        F_SYNC,
        F_DELAY,
        F_QUIET,
        F_HELP
    };
    static const struct option opts[] = {{"epochs", 1, 0, F_EPOCHS},
                                         {"batch-size", 1, 0, F_BATCH},
                                         {"lr", 1, 0, F_LR},
                                         {"momentum", 1, 0, F_MOM},
                                         {"optimizer", 1, 0, F_OPT},
                                         {"seed", 1, 0, F_SEED},
                                         {"layers", 1, 0, F_LAYERS},
                                         {"samples", 1, 0, F_SAMPLES},
                                         {"data-seed", 1, 0, F_DSEED},
                                         {"data", 1, 0, F_DATA},
                                         {"backend", 1, 0, F_BACKEND},
                                         {"checkpoint-dir", 1, 0, F_CKPT},
                                         {"checkpoint-every", 1, 0, F_CKPT_EVERY},
                                         {"keep", 1, 0, F_KEEP},
                                         {"metrics", 1, 0, F_METRICS},
                                         {"dump-params", 1, 0, F_DUMP},
                                         {"log-every", 1, 0, F_LOG},
                                         {"max-steps", 1, 0, F_MAXSTEPS},
                                         {"eval-samples", 1, 0, F_EVAL},
                                         {"check-sync", 0, 0, F_SYNC},
                                         {"step-delay-ms", 1, 0, F_DELAY},
                                         {"quiet", 0, 0, F_QUIET},
                                         {"help", 0, 0, F_HELP},
                                         {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    a->epochs = 3;
    a->batch = 64;
    a->momentum = 0.9;
    a->seed = 1;
    a->data_seed = 1234;
    a->samples = 8192;
    a->log_every = 20;
    a->keep = 3;
    a->eval_samples = 2048;
    a->max_steps = -1;
    a->backend = DDPW_BACKEND_AUTO;
    a->optim = OPT_SGD;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (c) {
        case F_EPOCHS: a->epochs = (int)num_arg("--epochs", optarg, 1, 1000000); break;
        case F_BATCH: a->batch = (int)num_arg("--batch-size", optarg, 1, 1 << 20); break;
        case F_LR:
            a->lr = real_arg("--lr", optarg);
            a->lr_set = 1;
            break;
        case F_MOM: a->momentum = real_arg("--momentum", optarg); break;
        case F_OPT:
            if (strcmp(optarg, "sgd") == 0)
                a->optim = OPT_SGD;
            else if (strcmp(optarg, "adam") == 0)
                a->optim = OPT_ADAM;
            else
                usage_error("--optimizer: '%s' is not sgd or adam", optarg);
            break;
        case F_SEED: a->seed = num_arg("--seed", optarg, 0, INT64_MAX); break;
        case F_LAYERS: a->layers = optarg; break;
        case F_SAMPLES: a->samples = num_arg("--samples", optarg, 1, 100000000); break;
        case F_DSEED: a->data_seed = num_arg("--data-seed", optarg, 0, INT64_MAX); break;
        case F_DATA: a->data = optarg; break;
        case F_BACKEND:
            if (strcmp(optarg, "auto") == 0)
                a->backend = DDPW_BACKEND_AUTO;
            else if (strcmp(optarg, "cpu") == 0)
                a->backend = DDPW_BACKEND_CPU;
            else if (strcmp(optarg, "nccl") == 0)
                a->backend = DDPW_BACKEND_NCCL;
            else
                usage_error("--backend: '%s' is not auto, nccl or cpu", optarg);
            break;
        case F_CKPT: a->ckpt_dir = optarg; break;
        case F_CKPT_EVERY:
            a->ckpt_every = (int)num_arg("--checkpoint-every", optarg, 0, INT32_MAX);
            break;
        case F_KEEP: a->keep = (int)num_arg("--keep", optarg, 1, 1000); break;
        case F_METRICS: a->metrics = optarg; break;
        case F_DUMP: a->dump = optarg; break;
        case F_LOG: a->log_every = (int)num_arg("--log-every", optarg, 1, INT32_MAX); break;
        case F_MAXSTEPS: a->max_steps = num_arg("--max-steps", optarg, 0, INT64_MAX); break;
        case F_EVAL: a->eval_samples = (int)num_arg("--eval-samples", optarg, 0, 1 << 30); break;
        case F_SYNC: a->check_sync = 1; break;
        case F_DELAY: a->step_delay_ms = (int)num_arg("--step-delay-ms", optarg, 0, 600000); break;
        case F_QUIET: a->quiet = 1; break;
        case F_HELP: fputs(usage_text, stdout); exit(0);
        case ':': usage_error("%s: needs a value", flag); break;
        default: usage_error("unknown option '%s'", flag); break;
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->lr_set)
        a->lr = a->optim == OPT_ADAM ? 0.001 : 0.05;
}

/* Failure at the top: log once, leave the message for the agent's summary, exit 1. */
static void die(int rank, const char *msg) {
    DDP_ERROR("rank %d: %s", rank, msg);
    char line[512];
    snprintf(line, sizeof line, "rank %d: %s", rank, msg);
    ddpw_record_error(line);
    exit(1);
}

static void die_err(int rank, const char *what, int rc, const ddp_err_t *e) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s", what, e->code != 0 ? e->text : ddp_strerror(rc));
    die(rank, msg);
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "we");
    if (f == NULL)
        return -errno;
    size_t k = fwrite(p, 1, n, f);
    int rc = k == n ? 0 : -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* The trainer's state: the same on every rank after each step. */
typedef struct trainer {
    args_t *a;
    ddpw_t *w;
    int rank, world, gpu;
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
} trainer_t;

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

static int pull_state(trainer_t *t, ddp_err_t *err) {
#ifdef DDP_HAVE_CUDA
    if (t->gm != NULL)
        return gpu_model_get_state(t->gm, t->params, t->opt.m, &t->opt.t, err);
#endif
    (void)t;
    (void)err;
    return 0;
}

/* Resumes from the newest valid checkpoint (rank 0 reads, everyone receives), else starts
 * from rank 0's initial parameters. */
static void resume(trainer_t *t, ckpt_meta_t *meta) {
    ddp_err_t e;
    ddp_err_clear(&e);
    uint64_t hdr[5] = {0, 0, 0, 0, 0}; /* found, step, epoch, pos, opt_t */
    size_t slen = optim_state_len(&t->opt);
    float *state = t->opt.m; /* the whole state, m then v */
    if (t->rank == 0 && t->a->ckpt_dir != NULL) {
        int found = 0, skipped = 0;
        char used[4096], why[4096];
        int rc = ckpt_load_latest(t->a->ckpt_dir, &t->shape, meta, t->params, state, slen, &found,
                                  used, &skipped, why, sizeof used, &e);
        if (rc != 0)
            die_err(t->rank, "resume", rc, &e);
        if (skipped)
            DDP_WARN("skipped %d unusable checkpoint(s), newest: %s", skipped, why);
        if (found) {
            if (!t->a->quiet)
                printf("resuming from %s (step %llu, epoch %llu, batch %llu)\n", used,
                       (unsigned long long)meta->step, (unsigned long long)meta->epoch,
                       (unsigned long long)meta->pos);
            hdr[0] = 1;
            hdr[1] = meta->step;
            hdr[2] = meta->epoch;
            hdr[3] = meta->pos;
            hdr[4] = meta->opt_t;
        } else
            mlp_init_params(&t->shape, t->params, (uint64_t)t->a->seed);
    } else if (t->rank == 0)
        mlp_init_params(&t->shape, t->params, (uint64_t)t->a->seed);
    int rc = bcast_host(t, hdr, sizeof hdr, "train/resume", &e);
    if (rc != 0)
        die_err(t->rank, "broadcast resume point", rc, &e);
    meta->step = hdr[1];
    meta->epoch = hdr[2];
    meta->pos = hdr[3];
    t->opt.t = hdr[4];
#ifdef DDP_HAVE_CUDA
    if (t->gm != NULL) {
        if ((rc = gpu_model_set_state(t->gm, t->params, t->opt.m, t->opt.t, &e)) != 0 ||
            (t->world > 1 && (rc = gpu_model_broadcast(t->gm, t->w, 0, &e)) != 0))
            die_err(t->rank, "broadcast parameters", rc, &e);
        return;
    }
#endif
    if (t->world > 1) {
        /* DDP does the same at construction: every rank starts from rank 0's parameters. */
        if ((rc = ddpw_broadcast(t->w, t->params, t->shape.nparams * sizeof(float), 0, &e)) != 0 ||
            (rc = ddpw_broadcast(t->w, t->opt.m, slen * sizeof(float), 0, &e)) != 0)
            die_err(t->rank, "broadcast parameters", rc, &e);
    }
}

static void save(trainer_t *t, uint64_t step, uint64_t epoch, uint64_t pos) {
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = pull_state(t, &e);
    if (rc != 0)
        die_err(t->rank, "checkpoint", rc, &e);
    if (t->rank == 0) {
        ckpt_meta_t m = {step, epoch, pos, t->opt.t, (uint32_t)t->opt.kind, (uint64_t)t->a->seed};
        rc = ckpt_save(t->a->ckpt_dir, &t->shape, &m, t->params, t->opt.m, optim_state_len(&t->opt),
                       t->a->keep, &e);
        if (rc != 0)
            die_err(t->rank, "checkpoint", rc, &e);
    }
    /* Nobody runs ahead of a checkpoint that is not on disk yet. */
    if ((rc = ddpw_barrier(t->w, &e)) != 0)
        die_err(t->rank, "barrier after checkpoint", rc, &e);
}

/* Fails unless every rank holds rank 0's parameters bit for bit. */
static void check_sync(trainer_t *t, uint64_t epoch) {
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = pull_state(t, &e);
    if (rc != 0)
        die_err(t->rank, "check-sync", rc, &e);
    uint64_t mine = ckpt_fnv1a(CKPT_FNV_INIT, t->params, t->shape.nparams * sizeof(float));
    uint64_t root = mine;
    char key[64];
    snprintf(key, sizeof key, "train/sync/%llu", (unsigned long long)epoch);
    if ((rc = bcast_host(t, &root, sizeof root, key, &e)) != 0)
        die_err(t->rank, "check-sync", rc, &e);
    if (root != mine) {
        char msg[200];
        snprintf(msg, sizeof msg, "parameters differ from rank 0's after epoch %llu",
                 (unsigned long long)epoch + 1);
        die(t->rank, msg);
    }
}

/* Scores the first eval_samples samples with the current parameters (rank 0). */
static double evaluate(trainer_t *t) {
    size_t n = (size_t)t->a->eval_samples < t->data.n ? (size_t)t->a->eval_samples : t->data.n;
    size_t hits = 0;
    for (size_t off = 0; off < n; off += (size_t)t->a->batch) {
        int B = (int)(n - off < (size_t)t->a->batch ? n - off : (size_t)t->a->batch);
        int c = 0;
        mlp_forward_backward(&t->shape, &t->ws, t->params, t->data.x + off * t->data.dim,
                             t->data.y + off, B, NULL, &c);
        hits += (size_t)c;
    }
    return n ? (double)hits / (double)n : 0;
}

static void progress(trainer_t *t, uint64_t step, uint64_t epoch, size_t b, size_t nb, double loss,
                     double acc, double sps, int tty) {
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

static void train_loop(trainer_t *t, ckpt_meta_t *meta) {
    args_t *a = t->a;
    ddp_err_t e;
    ddp_err_clear(&e);
    size_t per = train_sampler_num_samples(t->data.n, t->world);
    size_t nb = (per + (size_t)a->batch - 1) / (size_t)a->batch;
    uint64_t step = meta->step;
    int tty = isatty(STDOUT_FILENO);
    int dim = t->data.dim;
    for (uint64_t epoch = meta->epoch; epoch < (uint64_t)a->epochs; epoch++) {
        int rc = train_sampler_indices(t->data.n, t->world, t->rank, (uint64_t)a->seed, epoch, 1,
                                       t->idx, &e);
        if (rc != 0)
            die_err(t->rank, "sampler", rc, &e);
        size_t start = epoch == meta->epoch ? meta->pos : 0;
        double wloss = 0, eloss = 0;
        size_t wcorrect = 0, wcount = 0, ecorrect = 0, ecount = 0;
        uint64_t t0 = ddp_now_ns(), te = t0;
        for (size_t b = start; b < nb; b++) {
            if (a->max_steps >= 0 && step >= (uint64_t)a->max_steps)
                return;
            size_t lo = b * (size_t)a->batch, hi = lo + (size_t)a->batch;
            if (hi > per)
                hi = per;
            int B = (int)(hi - lo);
            for (int i = 0; i < B; i++) {
                size_t s = t->idx[lo + (size_t)i];
                memcpy(t->bx + (size_t)i * dim, t->data.x + s * dim, (size_t)dim * sizeof(float));
                t->by[i] = t->data.y[s];
            }
            double loss = 0;
            int correct = 0;
#ifdef DDP_HAVE_CUDA
            if (t->gm != NULL) {
                rc = gpu_model_step(t->gm, t->world > 1 ? t->w : NULL, t->bx, t->by, B, &loss,
                                    &correct, NULL, &e);
                if (rc != 0)
                    die_err(t->rank, "training step", rc, &e);
            } else
#endif
            {
                loss = mlp_forward_backward(&t->shape, &t->ws, t->params, t->bx, t->by, B, t->grad,
                                            &correct);
                if ((rc = ddpw_allreduce(t->w, t->grad, t->shape.nparams, DDPW_AVG, &e)) != 0)
                    die_err(t->rank, "gradient allreduce", rc, &e);
                optim_step(&t->opt, t->params, t->grad);
            }
            step++;
            wloss += loss;
            eloss += loss;
            wcorrect += (size_t)correct;
            ecorrect += (size_t)correct;
            wcount += (size_t)B;
            ecount += (size_t)B;
            if (t->rank == 0 && (step % (uint64_t)a->log_every == 0 || b + 1 == nb)) {
                double dt = (double)(ddp_now_ns() - t0) / 1e9;
                double sps = dt > 0 ? (double)wcount * t->world / dt : 0;
                double l = wloss / (double)wcount, acc = (double)wcorrect / (double)wcount;
                progress(t, step, epoch, b + 1, nb, l, acc, sps, tty);
                if (t->metrics != NULL) {
                    fprintf(t->metrics,
                            "{\"step\":%llu,\"epoch\":%llu,\"loss\":%.6f,\"accuracy\":%.6f,"
                            "\"samples_per_s\":%.1f,\"world_size\":%d}\n",
                            (unsigned long long)step, (unsigned long long)epoch, l, acc, sps,
                            t->world);
                    fflush(t->metrics);
                }
                wloss = 0;
                wcorrect = wcount = 0;
                t0 = ddp_now_ns();
            }
            if (a->ckpt_dir != NULL && a->ckpt_every > 0 && step % (uint64_t)a->ckpt_every == 0 &&
                b + 1 < nb)
                save(t, step, epoch, b + 1);
            if (a->step_delay_ms > 0) {
                struct timespec ts = {a->step_delay_ms / 1000,
                                      (a->step_delay_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
        uint64_t tend = ddp_now_ns();
        if (a->ckpt_dir != NULL)
            save(t, step, epoch + 1, 0);
        if (a->check_sync)
            check_sync(t, epoch);
        if (t->rank == 0) {
            int rc2 = pull_state(t, &e);
            if (rc2 != 0)
                die_err(t->rank, "evaluate", rc2, &e);
            /* Epoch throughput over the steps (epoch-end checkpoint and evaluation excluded). */
            double esec = (double)(tend - te) / 1e9;
            double eps = esec > 0 ? (double)ecount * t->world / esec : 0;
            double ev = evaluate(t);
            double el = ecount ? eloss / (double)ecount : 0;
            double eacc = ecount ? (double)ecorrect / (double)ecount : 0;
            if (tty && !a->quiet)
                printf("\n");
            if (!a->quiet)
                printf("epoch %llu/%d done: step %llu loss %.4f acc %.3f eval_accuracy %.4f\n",
                       (unsigned long long)epoch + 1, a->epochs, (unsigned long long)step, el, eacc,
                       ev);
            if (t->metrics != NULL) {
                fprintf(t->metrics,
                        "{\"step\":%llu,\"epoch\":%llu,\"loss\":%.6f,\"accuracy\":%.6f,"
                        "\"eval_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_end\":true}\n",
                        (unsigned long long)step, (unsigned long long)epoch, el, eacc, ev, eps);
                fflush(t->metrics);
            }
            fflush(stdout);
        }
    }
}

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
    int rc = write_file(path, t->params, t->shape.nparams * sizeof(float));
    if (rc != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "unable to write %.300s: %s", path, strerror(-rc));
        die(t->rank, msg);
    }
}

int main(int argc, char **argv) {
    args_t a;
    parse_args(argc, argv, &a);
    ddp_log_init("train", DDP_LOG_INFO);
    /* One BLAS thread: reproducible sums (bitwise-identical restarts) and no oversubscription
     * when several ranks share the cores. */
    openblas_set_num_threads(1);
    ddp_err_t e;
    ddp_err_clear(&e);
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.a = &a;

    ddpw_env_t env;
    int rc = ddpw_env_read(&env, &e);
    if (rc != 0)
        die_err(0, "environment", rc, &e);
    t.rank = env.rank;
    t.world = env.world_size;

    /* The data and the model shape come first: a usage error is reported before any wait. */
    const char *layers = a.layers ? a.layers : DEFAULT_LAYERS;
    char spec[256]; /* outlives the block: layers may point here until the banner */
    if (a.data != NULL) {
        if ((rc = train_data_load_csv(&t.data, a.data, &e)) != 0)
            die_err(t.rank, "--data", rc, &e);
        if (a.layers == NULL) {
            snprintf(spec, sizeof spec, "%d," DEFAULT_HIDDEN ",%d", t.data.dim, t.data.classes);
            layers = spec;
        }
    }
    if ((rc = mlp_shape_parse(&t.shape, layers, &e)) != 0) {
        fprintf(stderr, "train: %s\n", e.text);
        return 2;
    }
    if (a.data == NULL) {
        rc = train_data_synth(&t.data, (size_t)a.samples, t.shape.sizes[0],
                              t.shape.sizes[t.shape.nsizes - 1], (uint64_t)a.data_seed, &e);
        if (rc != 0)
            die_err(t.rank, "synthetic data", rc, &e);
    }
    if (t.data.dim != t.shape.sizes[0] || t.data.classes > t.shape.sizes[t.shape.nsizes - 1]) {
        fprintf(stderr, "train: --layers: %s does not fit the data (%d features, %d classes)\n",
                layers, t.data.dim, t.data.classes);
        return 2;
    }

    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = a.backend;
    if ((rc = ddpw_init_env(&t.w, &env, &o, &e)) != 0)
        die_err(t.rank, "worker init", rc, &e);

    size_t n = t.shape.nparams;
    t.params = malloc(n * sizeof(float));
    t.grad = malloc(n * sizeof(float));
    size_t per = train_sampler_num_samples(t.data.n, t.world);
    t.idx = malloc(per * sizeof(size_t));
    t.bx = malloc((size_t)a.batch * t.data.dim * sizeof(float));
    t.by = malloc((size_t)a.batch * sizeof(int32_t));
    if (!t.params || !t.grad || !t.idx || !t.bx || !t.by ||
        optim_init(&t.opt, a.optim, n, (float)a.lr, (float)a.momentum) != 0 ||
        mlp_ws_init(&t.ws, &t.shape, a.batch) != 0)
        die(t.rank, "out of memory");
    memset(t.params, 0, n * sizeof(float));
#ifdef DDP_HAVE_CUDA
    if (ddpw_backend(t.w) == DDPW_BACKEND_NCCL) {
        rc = gpu_model_new(&t.shape, &t.opt, a.batch, ddpw_device(t.w), 1u << 18, &t.gm, &e);
        if (rc != 0)
            die_err(t.rank, "GPU model", rc, &e);
    }
#endif
    if (a.metrics != NULL && t.rank == 0 && (t.metrics = fopen(a.metrics, "ae")) == NULL) {
        char msg[512];
        snprintf(msg, sizeof msg, "--metrics: unable to open %.300s: %s", a.metrics,
                 strerror(errno));
        die(t.rank, msg);
    }
    if (t.rank == 0 && !a.quiet) {
        printf("train: world %d, backend %s, layers %s (%zu parameters), %zu samples, batch %d "
               "per rank, %s lr %g\n",
               t.world, ddpw_backend_name(ddpw_backend(t.w)), layers, n, t.data.n, a.batch,
               a.optim == OPT_ADAM ? "adam" : "sgd", a.lr);
        fflush(stdout);
    }
    ckpt_meta_t meta;
    memset(&meta, 0, sizeof meta);
    resume(&t, &meta);
    train_loop(&t, &meta);
    if ((rc = pull_state(&t, &e)) != 0)
        die_err(t.rank, "final state", rc, &e);
    if (a.dump != NULL)
        dump_params(&t);
    if ((rc = ddpw_barrier(t.w, &e)) != 0)
        die_err(t.rank, "final barrier", rc, &e);
    if (t.metrics != NULL)
        fclose(t.metrics);
#ifdef DDP_HAVE_CUDA
    gpu_model_free(t.gm);
#endif
    ddpw_free(t.w);
    mlp_ws_free(&t.ws);
    optim_free(&t.opt);
    train_data_free(&t.data);
    free(t.params);
    free(t.grad);
    free(t.idx);
    free(t.bx);
    free(t.by);
    return 0;
}
