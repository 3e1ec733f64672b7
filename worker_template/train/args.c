/* SPDX-License-Identifier: Apache-2.0
 * args.c: train's command line: the --help text and the flags, each checked for range so that a
 * bad value is one usage line naming the flag. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ddp_contract.h"
#include "ddp_parse.h"
#include "trainer.h"

const char train_usage_text[] =
    "usage: train [options]\n"
    "A data-parallel MLP trainer. Under ddprun (or torchrun) it reads " DDP_ENV_RANK
    ", " DDP_ENV_WORLD_SIZE ", " DDP_ENV_LOCAL_RANK ",\n" DDP_ENV_LOCAL_WORLD_SIZE
    ", " DDP_ENV_GROUP_RANK ", " DDP_ENV_STORE_ADDR "/PORT/TOKEN, " DDP_ENV_ROUND
    ", " DDP_ENV_RUN_ID ";\n"
    "without them it trains alone (world of one).\n"
    "  --epochs N            passes over the data (default 3)\n"
    "  --batch-size N        samples per rank per step (default 64)\n"
    "  --lr X                learning rate in (0, 1e6] (default 0.05 for sgd, 0.001 for adam)\n"
    "  --momentum X          SGD momentum in [0, 1) (default 0.9)\n"
    "  --optimizer sgd|adam  (default sgd)\n"
    "  --seed N              initialization and shuffling seed (default 1)\n"
    "  --layers A,B,...,C    widths, input first, classes last (default " TRAIN_DEFAULT_LAYERS ",\n"
    "                        about 1M parameters; with --data: features," TRAIN_DEFAULT_HIDDEN
    ",classes)\n"
    "  --samples N           synthetic dataset size (default 8192)\n"
    "  --data-seed N         synthetic dataset seed (default 1234)\n"
    "  --data FILE.csv       rows of label,feature,... instead of the synthetic set\n"
    "  --backend auto|nccl|cpu  collectives (default auto: nccl when a GPU is visible)\n"
    "  --checkpoint-dir DIR  save there each epoch (rank 0) and resume from the newest valid one;\n"
    "                        DIR must not be writable by group or others without the sticky bit\n"
    "  --checkpoint-every N  also save every N steps (default 0: epoch ends only)\n"
    "  --keep N              checkpoints kept (default 3)\n"
    "  --metrics FILE        JSON lines: step, epoch, loss, accuracy, samples_per_s, time\n"
    "                        (rank 0, every --log-every steps; time: Unix seconds);\n"
    "                        FILE must be a regular file, not a symbolic link\n"
    "  --dump-params FILE    rank 0 writes the final parameters as raw little-endian float32;\n"
    "                        a FILE containing {rank} is written by every rank\n"
    "  --log-every N         progress every N steps (default 20)\n"
    "  --max-steps N         stop after N steps in total (default: no limit)\n"
    "  --eval-samples N      samples of the dataset scored at each epoch end (default 2048)\n"
    "  --check-sync          after each epoch, fail unless every rank holds rank 0's parameters\n"
    "  --step-delay-ms N     sleep N ms after each step (demos and fault tests)\n"
    "  --fail-at-step N      exit 1 once step N is done, in the first attempt only\n"
    "                        (" DDP_ENV_RESTART_COUNT " unset or 0; fault tests)\n"
    "  --quiet               no progress lines\n"
    "  --help                this text\n"
    "exit status: 0 done; 1 failed (message on stderr and in " DDP_ENV_ERROR_FILE "); 2 usage\n";

/* An integer flag in [min, max]; DDP_EUSAGE naming the flag otherwise. */
static int num_arg(const char *flag, const char *v, int64_t min, int64_t max, int64_t *out,
                   ddp_err_t *err) {
    if (ddp_parse_i64(v, min, max, out) != 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s: '%s' is not an integer in [%lld, %lld]", flag, v,
                           (long long)min, (long long)max);
    return 0;
}

/* An int flag in [min, max] (both within int). */
static int int_arg(const char *flag, const char *v, int64_t min, int64_t max, int *out,
                   ddp_err_t *err) {
    int64_t x = 0;
    int rc = num_arg(flag, v, min, max, &x, err);
    if (rc == 0)
        *out = (int)x;
    return rc;
}

/* A non-negative finite decimal: the same grammar as a duration in seconds. */
static int real_arg(const char *flag, const char *v, double *out, ddp_err_t *err) {
    if (ddp_parse_seconds(v, out) != 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s: '%s' is not a non-negative number", flag, v);
    return 0;
}

/* A finite real flag in [lo, hi], or (lo, hi] when open_lo: after parsing, so that a value
 * that overflows float32 (the optimizer's type) is refused too. */
static int range_arg(const char *flag, const char *v, double lo, double hi, int open_lo,
                     int open_hi, double *out, ddp_err_t *err) {
    double x = 0;
    int rc = real_arg(flag, v, &x, err);
    if (rc != 0)
        return rc;
    if (!isfinite(x) || x < lo || (open_lo && x == lo) || x > hi || (open_hi && x == hi))
        return ddp_err_set(err, DDP_EUSAGE, "%s: '%s' is not in %c%g, %g%c", flag, v,
                           open_lo ? '(' : '[', lo, hi, open_hi ? ')' : ']');
    *out = x;
    return 0;
}

static int optim_arg(const char *v, optim_kind_t *out, ddp_err_t *err) {
    if (strcmp(v, "sgd") == 0)
        *out = OPT_SGD;
    else if (strcmp(v, "adam") == 0)
        *out = OPT_ADAM;
    else
        return ddp_err_set(err, DDP_EUSAGE, "--optimizer: '%s' is not sgd or adam", v);
    return 0;
}

static int backend_arg(const char *v, ddpw_backend_t *out, ddp_err_t *err) {
    if (strcmp(v, "auto") == 0)
        *out = DDPW_BACKEND_AUTO;
    else if (strcmp(v, "cpu") == 0)
        *out = DDPW_BACKEND_CPU;
    else if (strcmp(v, "nccl") == 0)
        *out = DDPW_BACKEND_NCCL;
    else
        return ddp_err_set(err, DDP_EUSAGE, "--backend: '%s' is not auto, nccl or cpu", v);
    return 0;
}

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
    F_FAIL_AT,
    F_QUIET,
    F_HELP
};

static const struct option long_opts[] = {{"epochs", 1, 0, F_EPOCHS},
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
                                          {"fail-at-step", 1, 0, F_FAIL_AT},
                                          {"quiet", 0, 0, F_QUIET},
                                          {"help", 0, 0, F_HELP},
                                          {0, 0, 0, 0}};

static void set_defaults(train_args_t *a) {
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
    a->fail_at_step = -1;
    a->backend = DDPW_BACKEND_AUTO;
    a->optim = OPT_SGD;
}

/* Applies one option c with value v (NULL for flags without one). One case per flag. */
static int apply(train_args_t *a, int c, const char *v, ddp_err_t *err) {
    switch (c) {
    case F_EPOCHS: return int_arg("--epochs", v, 1, 1000000, &a->epochs, err);
    case F_BATCH: return int_arg("--batch-size", v, 1, 1 << 20, &a->batch, err);
    case F_LR: a->lr_set = 1; return range_arg("--lr", v, 0, TRAIN_MAX_LR, 1, 0, &a->lr, err);
    case F_MOM: return range_arg("--momentum", v, 0, 1, 0, 1, &a->momentum, err);
    case F_OPT: return optim_arg(v, &a->optim, err);
    case F_SEED: return num_arg("--seed", v, 0, INT64_MAX, &a->seed, err);
    case F_LAYERS: a->layers = v; return 0;
    case F_SAMPLES: return num_arg("--samples", v, 1, 100000000, &a->samples, err);
    case F_DSEED: return num_arg("--data-seed", v, 0, INT64_MAX, &a->data_seed, err);
    case F_DATA: a->data = v; return 0;
    case F_BACKEND: return backend_arg(v, &a->backend, err);
    case F_CKPT: a->ckpt_dir = v; return 0;
    case F_CKPT_EVERY: return int_arg("--checkpoint-every", v, 0, INT32_MAX, &a->ckpt_every, err);
    case F_KEEP: return int_arg("--keep", v, 1, 1000, &a->keep, err);
    case F_METRICS: a->metrics = v; return 0;
    case F_DUMP: a->dump = v; return 0;
    case F_LOG: return int_arg("--log-every", v, 1, INT32_MAX, &a->log_every, err);
    case F_MAXSTEPS: return num_arg("--max-steps", v, 0, INT64_MAX, &a->max_steps, err);
    case F_EVAL: return int_arg("--eval-samples", v, 0, 1 << 30, &a->eval_samples, err);
    case F_SYNC: a->check_sync = 1; return 0;
    case F_DELAY: return int_arg("--step-delay-ms", v, 0, 600000, &a->step_delay_ms, err);
    case F_FAIL_AT: return num_arg("--fail-at-step", v, 1, INT64_MAX, &a->fail_at_step, err);
    case F_QUIET: a->quiet = 1; return 0;
    case F_HELP: a->help = 1; return 0;
    default: return ddp_err_set(err, DDP_EUSAGE, "unknown option");
    }
}

int train_args_parse(int argc, char **argv, train_args_t *a, ddp_err_t *err) {
    set_defaults(a);
    opterr = 0;
    optind = 0; /* a full rescan (GNU), so the parser can run more than once (tests) */
    int c, rc;
    while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
        const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (c == ':')
            return ddp_err_set(err, DDP_EUSAGE, "%s: needs a value", flag);
        if (c == '?')
            return ddp_err_set(err, DDP_EUSAGE, "unknown option '%s'", flag);
        if ((rc = apply(a, c, optarg, err)) != 0)
            return rc;
        if (a->help)
            return 0;
    }
    if (optind < argc)
        return ddp_err_set(err, DDP_EUSAGE, "unexpected argument '%s'", argv[optind]);
    if (!a->lr_set)
        a->lr = a->optim == OPT_ADAM ? 0.001 : 0.05;
    return 0;
}
