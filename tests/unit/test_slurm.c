/* Unit tests for launcher/slurm.c: detection and derivation from recorded SLURM_* environments
 * (tests/data/slurm/NAME.env): single node, multi node with GPUs, a step on a subset of the job's
 * nodes, the batch step, refusal of several tasks per node, explicit flags winning, bad values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_slurm.h"

/* The end of a variadic argument list (a typed null pointer, unlike a bare NULL). */
#define END ((const char *)0)

#define MAXVARS 96

/* A recorded environment; lookups take the last entry, so tests can override a variable. */
typedef struct fenv {
    char *v[MAXVARS];
    int n;
} fenv_t;

static const char *fenv_get(void *ctx, const char *name) {
    const fenv_t *f = ctx;
    size_t n = strlen(name);
    for (int i = f->n - 1; i >= 0; i--)
        if (strncmp(f->v[i], name, n) == 0 && f->v[i][n] == '=')
            return f->v[i] + n + 1;
    return NULL;
}

static void fenv_add(fenv_t *f, const char *kv) {
    assert_true(f->n < MAXVARS);
    f->v[f->n] = strdup(kv);
    assert_non_null(f->v[f->n]);
    f->n++;
}

static void fenv_free(fenv_t *f) {
    for (int i = 0; i < f->n; i++)
        free(f->v[i]);
    f->n = 0;
}

static char datadir[PATH_MAX];

/* tests/data/slurm from the repository root, or found from the binary (build/tests/unit/x). */
static int setup(void **state) {
    (void)state;
    if (access("tests/data/slurm/single_node.env", R_OK) == 0) {
        snprintf(datadir, sizeof datadir, "tests/data/slurm");
        return 0;
    }
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(datadir, sizeof datadir, "%s/../../../tests/data/slurm", exe);
    return 0;
}

static void fenv_load(fenv_t *f, const char *name) {
    char path[PATH_MAX + 64], line[512];
    snprintf(path, sizeof path, "%s/%s", datadir, name);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        print_error("cannot open %s\n", path);
    assert_non_null(fp);
    f->n = 0;
    while (fgets(line, sizeof line, fp) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || strchr(line, '=') == NULL)
            continue;
        fenv_add(f, line);
    }
    fclose(fp);
}

/* Parses "ddprun <args...> ./train" with the PET_* variables of f, then derives from f. */
static int run(fenv_t *f, launch_spec_t *spec, launch_slurm_t *sl, ddp_err_t *e, ...) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "ddprun";
    va_list ap;
    va_start(ap, e);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(argc < 30); /* room for "./train" and the NULL */
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc++] = "./train";
    argv[argc] = NULL;
    ddp_err_clear(e);
    int rc = launch_cli_parse_env(argc, argv, fenv_get, f, spec, e);
    if (rc != 0)
        print_error("parse: %s\n", e->text);
    assert_int_equal(rc, 0);
    return launch_slurm_derive(spec, fenv_get, f, sl, e);
}

static int has_line(const launch_slurm_t *sl, const char *needle) {
    for (int i = 0; i < sl->n_lines; i++)
        if (strstr(sl->lines[i], needle) != NULL)
            return 1;
    for (int i = 0; i < sl->n_lines; i++)
        print_message("  line: %s\n", sl->lines[i]);
    return 0;
}

/* Loads file (plus kv, when not NULL), derives, and expects code with needle in the error text. */
static void expect_refused(const char *file, const char *kv, int code, const char *needle) {
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, file);
    if (kv != NULL)
        fenv_add(&f, kv);
    int rc = run(&f, &s, &sl, &e, END);
    if (rc != code || strstr(e.text, needle) == NULL)
        print_error("%s %s: rc %d '%s'\n", file, kv != NULL ? kv : "", rc, e.text);
    assert_int_equal(rc, code);
    assert_non_null(strstr(e.text, needle));
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_single_node(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "single_node.env");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_true(sl.detected);
    assert_true(sl.in_step);
    assert_int_equal(s.min_nodes, 1);
    assert_int_equal(s.max_nodes, 1);
    assert_int_equal(s.node_rank, 0);
    assert_string_equal(s.rdzv_id, "1.0");
    assert_string_equal(s.rdzv_backend, "c10d");
    assert_string_equal(sl.head, "vm");
    assert_int_equal(sl.port, 29400 + 8 * 1 + 0);
    assert_string_equal(s.rdzv_host, "vm");
    assert_int_equal(s.rdzv_port, 29408);
    assert_int_equal(s.nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s.nproc_per_node, 1); /* no GPU variables: the default stays */
    assert_true(has_line(&sl, "nnodes=1 from SLURM_STEP_NUM_NODES=1"));
    assert_true(has_line(&sl, "nproc_per_node unchanged"));
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_multi_node_gpu(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "multi_node_gpu.env");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_int_equal(s.min_nodes, 2);
    assert_int_equal(s.max_nodes, 2);
    assert_int_equal(s.node_rank, 1);
    assert_string_equal(s.rdzv_id, "57.0");
    assert_string_equal(s.rdzv_host, "n1");
    assert_int_equal(s.rdzv_port, 29856); /* 29400 + 8 * 57 */
    assert_int_equal(s.nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s.nproc_per_node, 2);
    assert_true(has_line(&sl, "nproc_per_node=2 from SLURM_GPUS_ON_NODE=2"));
    assert_true(has_line(&sl, "node_rank=1 from SLURM_NODEID=1"));
    assert_true(has_line(&sl, "from the first host of SLURM_STEP_NODELIST=n[1-2]"));
    ddp_buf_t buf = DDP_BUF_INIT;
    assert_int_equal(launch_slurm_describe(&sl, &buf), 0);
    assert_non_null(strstr((char *)buf.data, "slurm: nnodes=2 from SLURM_STEP_NUM_NODES=2\n"));
    assert_non_null(strstr((char *)buf.data, "slurm: rdzv_id=57.0 from SLURM_JOB_ID=57"));
    ddp_buf_free(&buf);
    launch_spec_free(&s);
    fenv_free(&f);
}

/* `srun -N2 -r2` in a 4-node job: head and rank come from the step, not from the job. */
static void test_step_on_subset(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "step_subset.env");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_int_equal(s.max_nodes, 2);
    assert_int_equal(s.node_rank, 1);
    assert_string_equal(sl.head, "n3");
    assert_string_equal(s.rdzv_host, "n3");
    assert_int_equal(s.rdzv_port, 30042); /* 29400 + 8 * 80 + 2 */
    assert_string_equal(s.rdzv_id, "80.2");
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_refuses_tasks_per_node(void **state) {
    (void)state;
    static const struct {
        const char *file, *needle;
    } cases[] = {
        {"ntasks4.env", "4 ddprun tasks on a node (SLURM_STEP_TASKS_PER_NODE=4); ddprun starts "
                        "the workers itself, run one per node: srun -N1 --ntasks-per-node=1 "
                        "ddprun ..."},
        {"ntasks_2x2.env", "srun -N2 --ntasks-per-node=1 ddprun"},
        {"uneven_tasks.env", "3 ddprun tasks on a node (SLURM_STEP_TASKS_PER_NODE=3,1(x3))"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(cases[i].file, NULL, DDP_EUSAGE, cases[i].needle);
    /* Without SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE decides. */
    expect_refused("ntasks4.env", "SLURM_STEP_TASKS_PER_NODE=", DDP_EUSAGE,
                   "(SLURM_NTASKS_PER_NODE=4)");
}

/* sbatch --ntasks-per-node=4 then srun -N2 -n2: the step's own count (1 per node) wins. */
static void test_inherited_ntasks_accepted(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "inherited_ntasks.env");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_int_equal(s.max_nodes, 2);
    assert_int_equal(sl.restart_count, 2);
    assert_true(has_line(&sl, "requeued 2 times"));
    launch_spec_free(&s);
    fenv_free(&f);
}

/* ddprun straight in an sbatch script: one node, whatever SLURM_NNODES says. */
static void test_batch_step(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "batch_step.env");
    assert_int_equal(launch_slurm_detect(fenv_get, &f), 1);
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_false(sl.in_step);
    assert_int_equal(s.max_nodes, 1);
    assert_int_equal(s.node_rank, 0);
    assert_string_equal(s.rdzv_id, "21.batch");
    assert_string_equal(s.rdzv_host, "n1");
    assert_int_equal(s.rdzv_port, 29575); /* 29400 + 8 * 21 + 7 (batch slot) */
    assert_int_equal(s.nproc_per_node, 2);
    assert_true(has_line(&sl, "batch step"));
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_cvd_and_padding(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "gres_cvd.env");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_int_equal(s.nproc_per_node, 3);
    assert_true(has_line(&sl, "nproc_per_node=3 from CUDA_VISIBLE_DEVICES=0,1,2"));
    assert_string_equal(s.rdzv_host, "gpu-a01");
    assert_int_equal(s.rdzv_port, 29413); /* 29400 + 8 * (4001 % 400) + 5 */
    launch_spec_free(&s);
    /* Without the step's list the job's is used; its first host keeps the padding. */
    fenv_add(&f, "SLURM_STEP_NODELIST=");
    fenv_add(&f, "CUDA_VISIBLE_DEVICES=NoDevFiles");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_string_equal(sl.head, "gpu-a01");
    assert_int_equal(s.nproc_per_node, 1);
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_not_slurm(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "salloc_shell.env");
    assert_int_equal(launch_slurm_detect(fenv_get, &f), 0);
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_false(sl.detected);
    assert_int_equal(sl.n_lines, 0);
    assert_string_equal(s.rdzv_backend, "static");
    assert_null(s.rdzv_host);
    assert_string_equal(s.rdzv_id, "none");
    launch_spec_free(&s);
    fenv_free(&f);
    fenv_t none = {.n = 0};
    assert_int_equal(launch_slurm_detect(fenv_get, &none), 0);
    fenv_add(&none, "SLURM_JOBID=5"); /* the old spellings count too */
    fenv_add(&none, "SLURM_STEPID=0");
    assert_int_equal(launch_slurm_detect(fenv_get, &none), 1);
    fenv_free(&none);
}

static void test_explicit_flags_win(void **state) {
    (void)state;
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
    fenv_load(&f, "multi_node_gpu.env");
    assert_int_equal(run(&f, &s, &sl, &e, "--nnodes=1:3", "--node_rank=2", "--rdzv_id=mine",
                         "--rdzv_endpoint=head:1", "--rdzv_backend=static", "--nproc_per_node=gpu",
                         END),
                     0);
    assert_int_equal(s.min_nodes, 1);
    assert_int_equal(s.max_nodes, 3);
    assert_int_equal(s.node_rank, 2);
    assert_string_equal(s.rdzv_id, "mine");
    assert_string_equal(s.rdzv_host, "head");
    assert_int_equal(s.rdzv_port, 1);
    assert_string_equal(s.rdzv_backend, "static");
    assert_int_equal(s.nproc_kind, LAUNCH_NPROC_GPU);
    assert_true(has_line(&sl, "nnodes=1:3 kept"));
    assert_true(has_line(&sl, "nproc_per_node kept"));
    launch_spec_free(&s);
    /* PET_* counts as explicit too. */
    fenv_add(&f, "PET_NNODES=3");
    fenv_add(&f, "PET_NPROC_PER_NODE=8");
    assert_int_equal(run(&f, &s, &sl, &e, END), 0);
    assert_int_equal(s.max_nodes, 3);
    assert_int_equal(s.node_rank, 1); /* still derived */
    assert_int_equal(s.nproc_per_node, 8);
    launch_spec_free(&s);
    /* --standalone under Slurm: one local node; only nproc is derived. */
    assert_int_equal(run(&f, &s, &sl, &e, "--standalone", END), 0);
    assert_int_equal(s.max_nodes, 1);
    assert_int_equal(s.node_rank, 0);
    assert_string_equal(s.rdzv_host, "localhost");
    assert_int_equal(s.rdzv_port, 0);
    assert_int_equal(s.nproc_per_node, 8);
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_bad_environment(void **state) {
    (void)state;
    static const struct {
        const char *kv, *needle;
        int code;
    } cases[] = {
        {"SLURM_STEP_NODELIST=n[1-", "SLURM_STEP_NODELIST: malformed hostlist 'n[1-' at offset 4",
         DDP_EENV},
        {"SLURM_NODEID=5",
         "node rank 5 (SLURM_NODEID or --node_rank) is not below the node "
         "count 2",
         DDP_EENV},
        {"SLURM_NODEID=x", "SLURM_NODEID: 'x' is not a number", DDP_EENV},
        {"SLURM_STEP_NUM_NODES=0", "SLURM_STEP_NUM_NODES: '0'", DDP_EENV},
        {"SLURM_GPUS_ON_NODE=two", "SLURM_GPUS_ON_NODE: 'two'", DDP_EENV},
        {"SLURM_JOB_ID=abc", "SLURM_JOB_ID: 'abc' is not a job number", DDP_EENV},
        {"SLURM_STEP_ID=x", "SLURM_STEP_ID: 'x' is not a step number", DDP_EENV},
        {"SLURM_STEP_TASKS_PER_NODE=1(", "SLURM_STEP_TASKS_PER_NODE: malformed count list",
         DDP_EENV},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused("multi_node_gpu.env", cases[i].kv, cases[i].code, cases[i].needle);
    /* No nodelist at all: no rendezvous host, unless --rdzv_endpoint is given. */
    fenv_t f = {.n = 0};
    launch_spec_t s;
    ddp_err_t e;
    fenv_add(&f, "SLURM_JOB_ID=7");
    fenv_add(&f, "SLURM_STEP_ID=0");
    assert_int_equal(run(&f, &s, NULL, &e, END), DDP_EENV);
    assert_non_null(strstr(e.text, "give --rdzv_endpoint"));
    launch_spec_free(&s);
    assert_int_equal(run(&f, &s, NULL, &e, "--rdzv_endpoint=h", END), 0);
    assert_string_equal(s.rdzv_id, "7.0");
    launch_spec_free(&s);
    fenv_free(&f);
}

static void test_port_formula(void **state) {
    (void)state;
    static unsigned char used[65536];
    memset(used, 0, sizeof used);
    /* 400 consecutive job ids, steps 0..6 and the batch step: all distinct, all in range. */
    for (uint64_t job = 123456; job < 123456 + LAUNCH_SLURM_JOB_SLOTS; job++) {
        for (uint64_t step = 0; step <= 7; step++) {
            int p = step < 7 ? launch_slurm_port(job, 1, step) : launch_slurm_port(job, 0, 0);
            assert_true(p >= 29400 && p <= 32599);
            assert_int_equal(used[p], 0);
            used[p] = 1;
        }
    }
    assert_int_equal(launch_slurm_port(0, 1, 0), 29400);
    assert_int_equal(launch_slurm_port(399, 0, 0), 32599);
    assert_int_equal(launch_slurm_port(5, 1, 9), launch_slurm_port(5, 1, 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_multi_node_gpu),
        cmocka_unit_test(test_step_on_subset),
        cmocka_unit_test(test_refuses_tasks_per_node),
        cmocka_unit_test(test_inherited_ntasks_accepted),
        cmocka_unit_test(test_batch_step),
        cmocka_unit_test(test_cvd_and_padding),
        cmocka_unit_test(test_not_slurm),
        cmocka_unit_test(test_explicit_flags_win),
        cmocka_unit_test(test_bad_environment),
        cmocka_unit_test(test_port_formula),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
