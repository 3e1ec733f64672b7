/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/slurm.c: detection and derivation from recorded SLURM_* environments
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

/* Group setup: tests/data/slurm from the repository root, or found from the binary
 * (build/tests/unit/x). Fails the whole group when neither has the recorded environments. */
static int find_datadir(void **state) {
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
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/single_node.env", datadir);
    if (access(probe, R_OK) != 0) {
        print_error("no recorded environments: neither tests/data/slurm nor %s has "
                    "single_node.env (run from the repository root)\n",
                    datadir);
        return -1;
    }
    return 0;
}

/* Replaces f with the recorded environment in datadir/name; one without a variable fails. */
static void fenv_load(fenv_t *f, const char *name) {
    char path[PATH_MAX + 64], line[512];
    snprintf(path, sizeof path, "%s/%s", datadir, name);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        print_error("cannot open %s\n", path);
    assert_non_null(fp);
    fenv_free(f);
    while (fgets(line, sizeof line, fp) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || strchr(line, '=') == NULL)
            continue;
        fenv_add(f, line);
    }
    fclose(fp);
    if (f->n == 0)
        print_error("%s holds no KEY=VALUE line\n", path);
    assert_true(f->n > 0);
}

/* One test's environment and what ddprun made of it. */
typedef struct slurm_case {
    fenv_t f;
    launch_spec_t s;
    launch_slurm_t sl;
    ddp_err_t e;
} slurm_case_t;

/* Fixture: the recorded environment named by the test's prestate (NULL: an empty one). */
static int case_setup(void **state) {
    const char *file = *state;
    slurm_case_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    if (file != NULL)
        fenv_load(&t->f, file);
    *state = t;
    return 0;
}

static int case_teardown(void **state) {
    slurm_case_t *t = *state;
    launch_spec_free(&t->s);
    fenv_free(&t->f);
    free(t);
    return 0;
}

#define SLURM_TEST(fn, file)                                                                       \
    cmocka_unit_test_prestate_setup_teardown(fn, case_setup, case_teardown, file)

/* Parses "ddprun <args...> ./train" (the args end with END) with the PET_* variables of t->f into
 * t->s, freeing what an earlier run left there, then derives from t->f into out. */
static int run_into(slurm_case_t *t, launch_slurm_t *out, ...) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "ddprun";
    va_list ap;
    va_start(ap, out);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(argc < 30); /* room for "./train" and the NULL */
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc++] = "./train";
    argv[argc] = NULL;
    launch_spec_free(&t->s);
    ddp_err_clear(&t->e);
    int rc = launch_cli_parse_env(argc, argv, fenv_get, &t->f, &t->s, &t->e);
    if (rc != 0)
        print_error("parse: %s\n", t->e.text);
    assert_int_equal(rc, 0);
    return launch_slurm_derive(&t->s, fenv_get, &t->f, out, &t->e);
}

/* run_into the case's own t->sl. */
#define run(t, ...) run_into((t), &(t)->sl, __VA_ARGS__)

static int has_line(const launch_slurm_t *sl, const char *needle) {
    for (int i = 0; i < sl->n_lines; i++)
        if (strstr(sl->lines[i], needle) != NULL)
            return 1;
    for (int i = 0; i < sl->n_lines; i++)
        print_message("  line: %s\n", sl->lines[i]);
    return 0;
}

/* Loads file (plus kv, when not NULL), derives, and expects code with needle in the error text. */
static void expect_refused(slurm_case_t *t, const char *file, const char *kv, int code,
                           const char *needle) {
    fenv_load(&t->f, file);
    if (kv != NULL)
        fenv_add(&t->f, kv);
    int rc = run(t, END);
    if (rc != code || strstr(t->e.text, needle) == NULL)
        print_error("%s %s: rc %d '%s'\n", file, kv != NULL ? kv : "", rc, t->e.text);
    assert_int_equal(rc, code);
    assert_non_null(strstr(t->e.text, needle));
}

static void test_single_node(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    const launch_slurm_t *sl = &t->sl;
    assert_int_equal(run(t, END), 0);
    assert_true(sl->detected);
    assert_true(sl->in_step);
    assert_int_equal(s->min_nodes, 1);
    assert_int_equal(s->max_nodes, 1);
    assert_int_equal(s->node_rank, 0);
    assert_string_equal(s->rdzv_id, "1.0");
    assert_string_equal(s->rdzv_backend, "c10d");
    assert_string_equal(sl->head, "vm");
    assert_int_equal(sl->port, 29400 + 8 * 1 + 0);
    assert_string_equal(s->rdzv_host, "vm");
    assert_int_equal(s->rdzv_port, 29408);
    assert_int_equal(s->nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s->nproc_per_node, 1); /* no GPU variables: the default stays */
    assert_true(has_line(sl, "nnodes=1 from SLURM_STEP_NUM_NODES=1"));
    assert_true(has_line(sl, "nproc_per_node unchanged"));
    /* The step's id is the run's: one node does not get a fresh one, even meeting statically. */
    assert_int_equal(launch_run_id_resolve(&t->s), 0);
    assert_string_equal(s->rdzv_id, "1.0");
    assert_int_equal(run(t, "--rdzv_backend=static", END), 0);
    assert_int_equal(launch_run_id_resolve(&t->s), 0);
    assert_string_equal(s->rdzv_id, "1.0");
}

static void test_multi_node_gpu(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    const launch_slurm_t *sl = &t->sl;
    assert_int_equal(run(t, END), 0);
    assert_int_equal(s->min_nodes, 2);
    assert_int_equal(s->max_nodes, 2);
    assert_int_equal(s->node_rank, 1);
    assert_string_equal(s->rdzv_id, "57.0");
    assert_string_equal(s->rdzv_host, "n1");
    assert_int_equal(s->rdzv_port, 29856); /* 29400 + 8 * 57 */
    assert_int_equal(s->nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s->nproc_per_node, 2);
    assert_true(has_line(sl, "nproc_per_node=2 from SLURM_GPUS_ON_NODE=2"));
    assert_true(has_line(sl, "node_rank=1 from SLURM_NODEID=1"));
    assert_true(has_line(sl, "from the first host of SLURM_STEP_NODELIST=n[1-2]"));
    ddp_buf_t buf = DDP_BUF_INIT;
    assert_int_equal(launch_slurm_describe(sl, &buf), 0);
    assert_non_null(strstr((char *)buf.data, "slurm: nnodes=2 from SLURM_STEP_NUM_NODES=2\n"));
    assert_non_null(strstr((char *)buf.data, "slurm: rdzv_id=57.0 from SLURM_JOB_ID=57"));
    ddp_buf_free(&buf);
    /* etcd with etcd_candidates: the first hosts (at most all 2) at the step's port are the
     * store candidates; without etcd_candidates, or with etcd_stores given, nothing is made. */
    assert_int_equal(run(t, "--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.9:2379",
                         "--rdzv_conf=etcd_candidates=3", END),
                     0);
    assert_string_equal(s->rdzv_opts.etcd_stores, "n1:29856+n2:29856");
    assert_int_equal(s->rdzv_opts.etcd_candidates, 2);
    assert_true(has_line(sl, "etcd_stores=n1:29856+n2:29856 from the first 2 hosts of "
                             "SLURM_STEP_NODELIST (etcd_candidates), port 29856"));
    assert_int_equal(run(t, "--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.9:2379", END), 0);
    assert_string_equal(s->rdzv_opts.etcd_stores, "");
    assert_int_equal(run(t, "--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.9:2379",
                         "--rdzv_conf=etcd_stores=10.0.0.1:5", END),
                     0);
    assert_string_equal(s->rdzv_opts.etcd_stores, "10.0.0.1:5");
    assert_true(has_line(sl, "etcd_stores kept (given explicitly)"));
}

/* `srun -N2 -r2` in a 4-node job: head and rank come from the step, not from the job. */
static void test_step_on_subset(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    assert_int_equal(run(t, END), 0);
    assert_int_equal(s->max_nodes, 2);
    assert_int_equal(s->node_rank, 1);
    assert_string_equal(t->sl.head, "n3");
    assert_string_equal(s->rdzv_host, "n3");
    assert_int_equal(s->rdzv_port, 30042); /* 29400 + 8 * 80 + 2 */
    assert_string_equal(s->rdzv_id, "80.2");
}

static void test_refuses_tasks_per_node(void **state) {
    slurm_case_t *t = *state;
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
        expect_refused(t, cases[i].file, NULL, DDP_EUSAGE, cases[i].needle);
    /* Without SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE decides. */
    expect_refused(t, "ntasks4.env", "SLURM_STEP_TASKS_PER_NODE=", DDP_EUSAGE,
                   "(SLURM_NTASKS_PER_NODE=4)");
}

/* sbatch --ntasks-per-node=4 then srun -N2 -n2: the step's own count (1 per node) wins. */
static void test_inherited_ntasks_accepted(void **state) {
    slurm_case_t *t = *state;
    assert_int_equal(run(t, END), 0);
    assert_int_equal(t->s.max_nodes, 2);
    assert_int_equal(t->sl.restart_count, 2);
    assert_true(has_line(&t->sl, "requeued 2 times"));
}

/* ddprun straight in an sbatch script: one node, whatever SLURM_NNODES says. */
static void test_batch_step(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    assert_int_equal(launch_slurm_detect(fenv_get, &t->f), 1);
    assert_int_equal(run(t, END), 0);
    assert_false(t->sl.in_step);
    assert_int_equal(s->max_nodes, 1);
    assert_int_equal(s->node_rank, 0);
    assert_string_equal(s->rdzv_id, "21.batch");
    assert_string_equal(s->rdzv_host, "n1");
    assert_int_equal(s->rdzv_port, 29575); /* 29400 + 8 * 21 + 7 (batch slot) */
    assert_int_equal(s->nproc_per_node, 2);
    assert_true(has_line(&t->sl, "batch step"));
}

static void test_cvd_and_padding(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    assert_int_equal(run(t, END), 0);
    assert_int_equal(s->nproc_per_node, 3);
    assert_true(has_line(&t->sl, "nproc_per_node=3 from CUDA_VISIBLE_DEVICES=0,1,2"));
    assert_string_equal(s->rdzv_host, "gpu-a01");
    assert_int_equal(s->rdzv_port, 29413); /* 29400 + 8 * (4001 % 400) + 5 */
    /* Without the step's list the job's is used; its first host keeps the padding. */
    fenv_add(&t->f, "SLURM_STEP_NODELIST=");
    fenv_add(&t->f, "CUDA_VISIBLE_DEVICES=NoDevFiles");
    assert_int_equal(run(t, END), 0);
    assert_string_equal(t->sl.head, "gpu-a01");
    assert_int_equal(s->nproc_per_node, 1);
}

static void test_not_slurm(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    assert_int_equal(launch_slurm_detect(fenv_get, &t->f), 0);
    assert_int_equal(run(t, END), 0);
    assert_false(t->sl.detected);
    assert_int_equal(t->sl.n_lines, 0);
    assert_string_equal(s->rdzv_backend, "static");
    assert_null(s->rdzv_host);
    assert_string_equal(s->rdzv_id, "none");
    fenv_t none = {.n = 0};
    assert_int_equal(launch_slurm_detect(fenv_get, &none), 0);
    fenv_add(&none, "SLURM_JOBID=5"); /* the old spellings count too */
    fenv_add(&none, "SLURM_STEPID=0");
    assert_int_equal(launch_slurm_detect(fenv_get, &none), 1);
    fenv_free(&none);
}

static void test_explicit_flags_win(void **state) {
    slurm_case_t *t = *state;
    const launch_spec_t *s = &t->s;
    assert_int_equal(run(t, "--nnodes=1:3", "--node_rank=2", "--rdzv_id=mine",
                         "--rdzv_endpoint=head:1", "--rdzv_backend=static", "--nproc_per_node=gpu",
                         END),
                     0);
    assert_int_equal(s->min_nodes, 1);
    assert_int_equal(s->max_nodes, 3);
    assert_int_equal(s->node_rank, 2);
    assert_string_equal(s->rdzv_id, "mine");
    assert_string_equal(s->rdzv_host, "head");
    assert_int_equal(s->rdzv_port, 1);
    assert_string_equal(s->rdzv_backend, "static");
    assert_int_equal(s->nproc_kind, LAUNCH_NPROC_GPU);
    assert_true(has_line(&t->sl, "nnodes=1:3 kept"));
    assert_true(has_line(&t->sl, "nproc_per_node kept"));
    /* PET_* counts as explicit too. */
    fenv_add(&t->f, "PET_NNODES=3");
    fenv_add(&t->f, "PET_NPROC_PER_NODE=8");
    assert_int_equal(run(t, END), 0);
    assert_int_equal(s->max_nodes, 3);
    assert_int_equal(s->node_rank, 1); /* still derived */
    assert_int_equal(s->nproc_per_node, 8);
    /* --standalone under Slurm: one local node; only nproc is derived. */
    assert_int_equal(run(t, "--standalone", END), 0);
    assert_int_equal(s->max_nodes, 1);
    assert_int_equal(s->node_rank, 0);
    assert_string_equal(s->rdzv_host, "localhost");
    assert_int_equal(s->rdzv_port, 0);
    assert_int_equal(s->nproc_per_node, 8);
}

static void test_bad_environment(void **state) {
    slurm_case_t *t = *state;
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
        {"SLURM_STEP_NUM_NODES=99999999",
         "SLURM_STEP_NUM_NODES: 99999999 nodes is more than a job may have (at most 65536, as "
         "--nnodes)",
         DDP_EENV},
        {"SLURM_STEP_NUM_NODES=99999999999999999999",
         "SLURM_STEP_NUM_NODES: '99999999999999999999' is out of range (1..65536)", DDP_EENV},
        {"SLURM_STEP_NODELIST=n[1-12345678901]",
         "SLURM_STEP_NODELIST: malformed hostlist 'n[1-12345678901]' at offset 4: a number "
         "longer than 9 digits",
         DDP_EENV},
        {"SLURM_STEP_NUM_NODES=0", "SLURM_STEP_NUM_NODES: '0'", DDP_EENV},
        {"SLURM_GPUS_ON_NODE=two", "SLURM_GPUS_ON_NODE: 'two'", DDP_EENV},
        {"SLURM_JOB_ID=abc", "SLURM_JOB_ID: 'abc' is not a job number", DDP_EENV},
        {"SLURM_STEP_ID=x", "SLURM_STEP_ID: 'x' is not a step number", DDP_EENV},
        {"SLURM_STEP_TASKS_PER_NODE=1(", "SLURM_STEP_TASKS_PER_NODE: malformed count list",
         DDP_EENV},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(t, "multi_node_gpu.env", cases[i].kv, cases[i].code, cases[i].needle);
    /* SLURM_NNODES, read when the step's count is unset, has the same bound. */
    fenv_load(&t->f, "multi_node_gpu.env");
    fenv_add(&t->f, "SLURM_STEP_NUM_NODES=");
    fenv_add(&t->f, "SLURM_NNODES=99999999");
    assert_int_equal(run(t, END), DDP_EENV);
    assert_non_null(strstr(t->e.text, "SLURM_NNODES: 99999999 nodes is more than a job may have"));
    fenv_add(&t->f, "SLURM_NNODES=65536");
    assert_int_equal(run(t, END), 0);
    assert_int_equal(t->s.max_nodes, 65536);
    /* No nodelist at all: no rendezvous host, unless --rdzv_endpoint is given. */
    fenv_free(&t->f);
    fenv_add(&t->f, "SLURM_JOB_ID=7");
    fenv_add(&t->f, "SLURM_STEP_ID=0");
    assert_int_equal(run_into(t, NULL, END), DDP_EENV);
    assert_non_null(strstr(t->e.text, "give --rdzv_endpoint"));
    assert_int_equal(run_into(t, NULL, "--rdzv_endpoint=h", END), 0);
    assert_string_equal(t->s.rdzv_id, "7.0");
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
        SLURM_TEST(test_single_node, "single_node.env"),
        SLURM_TEST(test_multi_node_gpu, "multi_node_gpu.env"),
        SLURM_TEST(test_step_on_subset, "step_subset.env"),
        SLURM_TEST(test_refuses_tasks_per_node, NULL),
        SLURM_TEST(test_inherited_ntasks_accepted, "inherited_ntasks.env"),
        SLURM_TEST(test_batch_step, "batch_step.env"),
        SLURM_TEST(test_cvd_and_padding, "gres_cvd.env"),
        SLURM_TEST(test_not_slurm, "salloc_shell.env"),
        SLURM_TEST(test_explicit_flags_win, "multi_node_gpu.env"),
        SLURM_TEST(test_bad_environment, NULL),
        cmocka_unit_test(test_port_formula),
    };
    return cmocka_run_group_tests(tests, find_datadir, NULL);
}
