/* SPDX-License-Identifier: Apache-2.0
 * Kubernetes launches (launcher/k8s.c): the environments the operators document for a pod,
 * replayed through the parser (PET_*) and launch_k8s_derive: the Kubeflow training operator's
 * PyTorchJob (non-elastic, and elastic), Kubeflow Trainer's torch runtime, an Indexed Job, a
 * JobSet; flags win over the environment; wrong values name their variable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "launch_k8s.h"
#include "launch_spec.h"

#define END ((const char *)0)

/* ENV... END ARGV... END: parses ddprun's command line in that environment, then derives. */
typedef struct job {
    launch_spec_t spec;
    launch_k8s_t k8s;
    ddp_err_t err;
    int rc;
} job_t;

static const char *const *g_env;

static const char *env_get(void *ctx, const char *name) {
    (void)ctx;
    size_t n = strlen(name);
    for (const char *const *e = g_env; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static void run(job_t *j, ...) {
    const char *env[32], *argv[32];
    int ne = 0, na = 0;
    va_list ap;
    va_start(ap, j);
    for (const char *s; (s = va_arg(ap, const char *)) != END;)
        env[ne++] = s;
    env[ne] = NULL;
    argv[na++] = "ddprun";
    for (const char *s; (s = va_arg(ap, const char *)) != END;)
        argv[na++] = s;
    argv[na++] = "prog";
    argv[na] = NULL;
    va_end(ap);
    g_env = env;
    memset(j, 0, sizeof *j);
    ddp_err_clear(&j->err);
    j->rc = launch_cli_parse_env(na, (char *const *)argv, env_get, NULL, &j->spec, &j->err);
    if (j->rc == 0)
        j->rc = launch_k8s_derive(&j->spec, env_get, NULL, &j->k8s, &j->err);
}

static int has_line(const job_t *j, const char *text) {
    for (int i = 0; i < j->k8s.n_lines; i++)
        if (strstr(j->k8s.lines[i], text) != NULL)
            return 1;
    return 0;
}

/* The training operator's PyTorchJob with a Master replica: no flag needed. */
static void test_pytorchjob(void **state) {
    (void)state;
    job_t j;
    run(&j, "KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=mnist-master-0", "MASTER_PORT=23456",
        "WORLD_SIZE=4", "RANK=2", "PYTHONUNBUFFERED=0", END, "--nproc_per_node=8", END);
    assert_int_equal(j.rc, 0);
    assert_true(j.k8s.detected);
    assert_string_equal(j.k8s.kind, "PyTorchJob");
    assert_int_equal(j.spec.min_nodes, 4);
    assert_int_equal(j.spec.max_nodes, 4);
    assert_int_equal(j.spec.node_rank, 2);
    assert_string_equal(j.spec.master_addr, "mnist-master-0");
    assert_int_equal(j.spec.master_port, 23456);
    assert_string_equal(j.spec.rdzv_backend, "static");
    assert_int_equal(j.spec.nproc_per_node, 8);
    assert_true(has_line(&j, "nnodes=4 from WORLD_SIZE"));
    launch_spec_free(&j.spec);
    /* Flags win, and -v says the variable was not used. */
    run(&j, "KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=mnist-master-0", "MASTER_PORT=23456",
        "WORLD_SIZE=4", "RANK=2", END, "--node_rank=3", END);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.spec.node_rank, 3);
    assert_true(has_line(&j, "node_rank given: RANK=2 not used"));
    launch_spec_free(&j.spec);
    /* Wrong values name their variable. */
    run(&j, "KUBERNETES_SERVICE_HOST=1", "MASTER_ADDR=m", "WORLD_SIZE=four", "RANK=0", END, END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_non_null(strstr(j.err.text, "WORLD_SIZE: 'four'"));
    launch_spec_free(&j.spec);
    run(&j, "KUBERNETES_SERVICE_HOST=1", "MASTER_ADDR=m", "WORLD_SIZE=2", "RANK=2", END, END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_string_equal(j.err.text, "RANK=2 is not below WORLD_SIZE=2");
    launch_spec_free(&j.spec);
    /* Outside a pod the same variables mean nothing to ddprun. */
    run(&j, "MASTER_ADDR=m", "WORLD_SIZE=4", "RANK=1", END, END);
    assert_int_equal(j.rc, 0);
    assert_false(j.k8s.detected);
    assert_int_equal(j.spec.max_nodes, 1);
    launch_spec_free(&j.spec);
}

/* Elastic PyTorchJobs and Kubeflow Trainer's torch runtime set PET_* variables: the flags
 * themselves. */
static void test_pet_launches(void **state) {
    (void)state;
    job_t j;
    /* The training operator's elasticPolicy. */
    run(&j, "KUBERNETES_SERVICE_HOST=10.96.0.1", "PET_RDZV_ENDPOINT=elastic-worker-0:23456",
        "PET_RDZV_BACKEND=c10d", "PET_NNODES=2:4", "PET_MAX_RESTARTS=3", "PET_NPROC_PER_NODE=2",
        "PET_RDZV_ID=elastic", "PET_RDZV_CONF=join_timeout=300", END, END);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.spec.min_nodes, 2);
    assert_int_equal(j.spec.max_nodes, 4);
    assert_string_equal(j.spec.rdzv_host, "elastic-worker-0");
    assert_int_equal(j.spec.rdzv_port, 23456);
    assert_int_equal(j.spec.max_restarts, 3);
    launch_spec_free(&j.spec);
    /* Kubeflow Trainer's torch runtime: the node rank from the pod's completion index. */
    run(&j, "KUBERNETES_SERVICE_HOST=10.96.0.1", "PET_NNODES=2", "PET_NPROC_PER_NODE=4",
        "PET_NODE_RANK=1", "PET_MASTER_ADDR=train-node-0-0.train", "PET_MASTER_PORT=29400",
        "JOB_COMPLETION_INDEX=1", END, END);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.spec.max_nodes, 2);
    assert_int_equal(j.spec.node_rank, 1);
    assert_string_equal(j.spec.master_addr, "train-node-0-0.train");
    assert_int_equal(j.spec.master_port, 29400);
    assert_int_equal(j.spec.nproc_per_node, 4);
    assert_true(has_line(&j, "node_rank given: JOB_COMPLETION_INDEX=1 not used"));
    launch_spec_free(&j.spec);
}

/* Indexed Jobs and JobSets: the completion index is the node rank. */
static void test_indexed_job(void **state) {
    (void)state;
    job_t j;
    run(&j, "KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=3", END, "--nnodes=4",
        "--rdzv_backend=c10d", "--rdzv_endpoint=train-0.train:29400", END);
    assert_int_equal(j.rc, 0);
    assert_string_equal(j.k8s.kind, "Indexed Job");
    assert_int_equal(j.spec.node_rank, 3);
    launch_spec_free(&j.spec);
    /* A JobSet's first replicated job: JOB_INDEX 0. */
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOBSET_NAME=js", "JOB_INDEX=0", "JOB_COMPLETION_INDEX=1",
        END, "--nnodes=2", END);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.spec.node_rank, 1);
    launch_spec_free(&j.spec);
    /* A later replica: its global place is not in the environment. */
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOB_INDEX=2", "JOB_COMPLETION_INDEX=1", END, "--nnodes=6",
        END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_non_null(strstr(j.err.text, "JOB_INDEX=2"));
    assert_non_null(strstr(j.err.text, "pass --node_rank"));
    launch_spec_free(&j.spec);
    /* An index past the job's nodes: RANK would reach WORLD_SIZE. */
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOB_COMPLETION_INDEX=5", END, END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_string_equal(j.err.text,
                        "JOB_COMPLETION_INDEX=5 is not below the node count 1 (--nnodes)");
    launch_spec_free(&j.spec);
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOB_COMPLETION_INDEX=2", END, "--nnodes=1:2", END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_non_null(strstr(j.err.text, "JOB_COMPLETION_INDEX=2 is not below the node count 2"));
    launch_spec_free(&j.spec);
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOB_COMPLETION_INDEX=1", END, "--nnodes=1:2", END);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.spec.node_rank, 1);
    launch_spec_free(&j.spec);
    run(&j, "KUBERNETES_SERVICE_HOST=1", "JOB_COMPLETION_INDEX=-1", END, "--nnodes=2", END);
    assert_int_equal(j.rc, DDP_EENV);
    assert_non_null(strstr(j.err.text, "JOB_COMPLETION_INDEX: '-1'"));
    launch_spec_free(&j.spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorchjob),
        cmocka_unit_test(test_pet_launches),
        cmocka_unit_test(test_indexed_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
