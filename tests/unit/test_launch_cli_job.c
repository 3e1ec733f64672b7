/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for what a parsed command line becomes (launcher/cli.c, cli_rules.c, job.c): the
 * prepared job's devices and multi-node settings, the run id's rule, the TORCH_* defaults, the log
 * line prefix and the duplicate-output filters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_cli_fixture.h"
#include "launch_int.h"
#include "launch_spec.h"
#include "rdzv_proto.h"

/* Parses "ddprun" + the arguments with envp as the environment, resolves the job (nproc as
 * parsed; envp's visible-device list) and prepares it, as launcher/main.c does before the agent
 * starts. Returns the first error, or 0. */
static int prepare_env(ddp_err_t *e, const char *const *envp, ...) {
    launch_spec_t s;
    va_list ap;
    va_start(ap, envp);
    int rc = parse_v(&s, e, envp, ap);
    va_end(ap);
    if (rc < 0)
        return rc;
    char *argv[] = {"x", NULL};
    launch_argv_t prog = {"x", argv, 1};
    agent_job_t job;
    launch_job_build(&s, &prog, fake_env, (void *)envp, &job);
    rc = agent_job_prepare(&job, e);
    if (rc == 0)
        agent_job_release(&job);
    launch_spec_free(&s);
    return rc;
}

/* --virtual_local_rank checks the worker count against the visible-device list before anything
 * starts, whatever gave the count. */
static void test_virtual_local_rank_devices(void **state) {
    (void)state;
    ddp_err_t e;
    const char *two[] = {"CUDA_VISIBLE_DEVICES=4, 6", NULL};
    assert_int_equal(prepare_env(&e, two, "--virtual_local_rank", "--nproc_per_node=2", "x", END),
                     0);
    assert_int_equal(prepare_env(&e, two, "--virtual_local_rank", "--nproc_per_node=3", "x", END),
                     DDP_EUSAGE);
    assert_string_equal(e.text, "--virtual_local_rank: 3 workers but CUDA_VISIBLE_DEVICES='4, 6' "
                                "lists 2 device(s)");
    /* A non-empty HIP_VISIBLE_DEVICES is the list that counts (ROCm reads it first). */
    const char *hip[] = {"CUDA_VISIBLE_DEVICES=0,1,2", "HIP_VISIBLE_DEVICES=1", NULL};
    assert_int_equal(prepare_env(&e, hip, "--virtual_local_rank", "--nproc_per_node=2", "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "HIP_VISIBLE_DEVICES='1'"));
    const char *hip0[] = {"CUDA_VISIBLE_DEVICES=0,1", "HIP_VISIBLE_DEVICES=", NULL};
    assert_int_equal(prepare_env(&e, hip0, "--virtual_local_rank", "--nproc_per_node=2", "x", END),
                     0);
    /* Slurm's "no GPU" list makes no device visible. */
    const char *nodev[] = {"CUDA_VISIBLE_DEVICES=NoDevFiles", NULL};
    assert_int_equal(prepare_env(&e, nodev, "--virtual_local_rank", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "lists 0 device(s)"));
    /* Without the flag, or without a list (device i for local rank i), nothing is checked. */
    assert_int_equal(prepare_env(&e, two, "--nproc_per_node=3", "x", END), 0);
    assert_int_equal(prepare_env(&e, NULL, "--virtual_local_rank", "--nproc_per_node=8", "x", END),
                     0);
}

/* A multi-node job's usage errors are found before the agent starts: no endpoint, a run id longer
 * than the rendezvous protocol keeps. */
static void test_multinode_prepare(void **state) {
    (void)state;
    ddp_err_t e;
    assert_int_equal(prepare_env(&e, NULL, "--nnodes=2", "--rdzv_backend=c10d", "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--nnodes=2:2 needs --rdzv_endpoint"));
    char id[300];
    memset(id, 'a', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    char flag[320];
    snprintf(flag, sizeof flag, "--rdzv_id=%s", id);
    assert_int_equal(prepare_env(&e, NULL, "--nnodes=2", "--rdzv_backend=c10d",
                                 "--rdzv_endpoint=127.0.0.1:1", flag, "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--rdzv_id: 'aaa"));
    assert_int_equal(prepare_env(&e, NULL, "--nnodes=2", "--rdzv_backend=c10d",
                                 "--rdzv_endpoint=127.0.0.1:1", "--rdzv_id=j", "x", END),
                     0);
}

/* Parses the arguments (environment envp) and resolves the run id; returns the resolve's result
 * with the id in out. */
static int run_id_of(const char *const *envp, char *out, size_t cap, ...) {
    launch_spec_t s;
    ddp_err_t e;
    va_list ap;
    va_start(ap, cap);
    int rc = parse_v(&s, &e, envp, ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    rc = launch_run_id_resolve(&s);
    snprintf(out, cap, "%s", s.rdzv_id);
    launch_spec_free(&s);
    return rc;
}

/* One node with torchrun's default rendezvous gets a fresh uuid4 per run (torchrun 2.x runs it
 * as --standalone); any run id or endpoint the user set keeps the job as it was. */
static void test_run_id_fresh(void **state) {
    (void)state;
    char a[64], b[64];
    assert_int_equal(run_id_of(NULL, a, sizeof a, "x", END), 1);
    assert_int_equal(run_id_of(NULL, b, sizeof b, "--nproc_per_node=2", "x", END), 1);
    assert_int_equal(strlen(a), 36);
    assert_true(a[8] == '-' && a[13] == '-' && a[14] == '4' && a[18] == '-' && a[23] == '-');
    assert_string_not_equal(a, b);
    /* --master_addr alone still meets on a free port of this machine. */
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--master_addr=127.0.0.1", "x", END), 1);
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--rdzv_backend=static", "x", END), 1);
    /* What the job keeps. */
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--rdzv_id=mine", "x", END), 0);
    assert_string_equal(a, "mine");
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--rdzv_id=none", "x", END), 0);
    assert_string_equal(a, "none");
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--master_port=29501", "x", END), 0);
    assert_string_equal(a, "none");
    const char *pet[] = {"PET_MASTER_PORT=29501", NULL};
    assert_int_equal(run_id_of(pet, a, sizeof a, "x", END), 0);
    assert_string_equal(a, "none");
    const char *petid[] = {"PET_RDZV_ID=job7", NULL};
    assert_int_equal(run_id_of(petid, a, sizeof a, "x", END), 0);
    assert_string_equal(a, "job7");
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--nnodes=2", "x", END), 0);
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--nnodes=1:2", "x", END), 0);
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--rdzv_backend=c10d",
                               "--rdzv_endpoint=localhost:0", "x", END),
                     0);
    assert_string_equal(a, "none");
    /* --standalone has its own uuid already. */
    assert_int_equal(run_id_of(NULL, a, sizeof a, "--standalone", "x", END), 0);
    assert_int_equal(strlen(a), 36);
}

/* Run ids follow the store's rule on every path, one node included: printable ASCII, at most
 * RDZV_RUN_ID_MAX bytes. */
static void test_run_id_rule(void **state) {
    (void)state;
    ddp_err_t e;
    assert_int_equal(prepare_env(&e, NULL,
                                 "--rdzv_id=ab\xff"
                                 "cd",
                                 "x", END),
                     DDP_EUSAGE);
    assert_string_equal(e.text, "--rdzv_id: 'ab\\xffcd' holds byte 0xff at position 2: a run id "
                                "is printable ASCII only");
    assert_int_equal(prepare_env(&e, NULL, "--rdzv_id=caf\xc3\xa9", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "holds byte 0xc3 at position 3"));
    assert_int_equal(prepare_env(&e, NULL, "--rdzv_id=a\tb", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "'a\\tb' holds byte 0x09 at position 1"));
    const char *pet[] = {"PET_RDZV_ID=x\x1b[2J", NULL};
    assert_int_equal(prepare_env(&e, pet, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--rdzv_id: 'x\\e[2J' holds byte 0x1b"));
    char id[RDZV_RUN_ID_MAX + 2];
    memset(id, 'a', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    char flag[RDZV_RUN_ID_MAX + 16];
    snprintf(flag, sizeof flag, "--rdzv_id=%s", id);
    assert_int_equal(prepare_env(&e, NULL, flag, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "is longer than 128 characters"));
    id[RDZV_RUN_ID_MAX] = '\0';
    snprintf(flag, sizeof flag, "--rdzv_id=%s", id);
    assert_int_equal(prepare_env(&e, NULL, flag, "x", END), 0);
    assert_int_equal(prepare_env(&e, NULL, "--rdzv_id=job 7/\"x\"", "x", END), 0);
    assert_int_equal(rdzv_run_id_check("", NULL), -EINVAL);
}

/* torchrun's own variables: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE and
 * TORCH_ELASTIC_SHUTDOWN_TIMEOUT, below the flag and its PET_* variable. */
static void test_torch_env_defaults(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    const char *sd[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7", NULL};
    assert_int_equal(parse_env(&s, &e, sd, "x", END), 0);
    assert_true(s.shutdown_timeout == 7);
    assert_false(LAUNCH_GIVEN(&s, LAUNCH_OPT_SHUTDOWN_TIMEOUT)); /* a default, not a flag */
    launch_spec_free(&s);
    assert_int_equal(parse_env(&s, &e, sd, "--shutdown_timeout=3", "x", END), 0);
    assert_true(s.shutdown_timeout == 3);
    launch_spec_free(&s);
    const char *sdpet[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7", "PET_SHUTDOWN_TIMEOUT=4", NULL};
    assert_int_equal(parse_env(&s, &e, sdpet, "x", END), 0);
    assert_true(s.shutdown_timeout == 4);
    launch_spec_free(&s);
    const char *sdbad[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon", NULL};
    assert_int_equal(parse_env(&s, &e, sdbad, "x", END), DDP_EUSAGE);
    assert_string_equal(e.text,
                        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: 'soon' is not a number of seconds");
    /* A bad value the command line overrides is never read. */
    assert_int_equal(parse_env(&s, &e, sdbad, "--shutdown-timeout", "1", "x", END), 0);
    launch_spec_free(&s);

    const char *pt[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<${rank}>", NULL};
    assert_int_equal(parse_env(&s, &e, pt, "x", END), 0);
    assert_string_equal(s.log_line_prefix_template, "<${rank}>");
    launch_spec_free(&s);
    /* torchrun: `args.log_line_prefix_template or os.getenv(...)`: "" falls through. */
    assert_int_equal(parse_env(&s, &e, pt, "--log_line_prefix_template=", "x", END), 0);
    assert_string_equal(s.log_line_prefix_template, "<${rank}>");
    launch_spec_free(&s);
    assert_int_equal(parse_env(&s, &e, pt, "--log_line_prefix_template=$rank:", "x", END), 0);
    assert_string_equal(s.log_line_prefix_template, "$rank:");
    launch_spec_free(&s);
    const char *ptbad[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=${node}", NULL};
    assert_int_equal(parse_env(&s, &e, ptbad, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: unknown macro 'node'"));
}

/* Python string.Template semantics, rendered once per worker. */
static void test_prefix_render(void **state) {
    (void)state;
    char out[AGENT_PREFIX_MAX];
    size_t n = agent_prefix_render(NULL, "default", 3, 11, "h", out, sizeof out);
    assert_string_equal(out, "[default3]:");
    assert_int_equal(n, strlen(out));
    agent_prefix_render("${hostname}:${rank}: ", "r", 0, 12, "r12i0n8", out, sizeof out);
    assert_string_equal(out, "r12i0n8:12: ");
    agent_prefix_render("$role_name/$local_rank $$ ${rank}x $9 ${ $", "trainer", 2, 5, "h", out,
                        sizeof out);
    assert_string_equal(out, "trainer/2 $ 5x $9 ${ $");
    agent_prefix_render("[${role_name}]", "averyveryverylongrole", 0, 0, "h", out, 8);
    assert_string_equal(out, "[averyv"); /* cut to the buffer */
    agent_prefix_render("", "r", 0, 0, "h", out, sizeof out);
    assert_string_equal(out, "");

    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(agent_prefix_check("--t", "$$foo ${rank}$rank $5 ${", &e), 0);
    assert_int_equal(agent_prefix_check("--t", "${rankx}", &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--t: unknown macro 'rankx' (known: ${role_name}, ${local_rank}, "
                                "${rank}, ${hostname})");
    ddp_err_clear(&e);
    assert_int_equal(agent_prefix_check("--t", "$host:", &e), DDP_EUSAGE);
    char big[AGENT_MAX_PREFIX_TEMPLATE + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ddp_err_clear(&e);
    assert_int_equal(agent_prefix_check("--t", big, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "longer than"));
}

/* --timestamp_output's stamp: ISO 8601, UTC, microseconds (truncated, not rounded), fixed width. */
static void test_stamp_render(void **state) {
    (void)state;
    char out[AGENT_STAMP_LEN + 1];
    memset(out, 'x', sizeof out);
    struct timespec t = {1796611267, 123456789}; /* 2026-12-07 02:41:07 UTC */
    agent_stamp_render(&t, out);
    assert_string_equal(out, "2026-12-07T02:41:07.123456Z ");
    assert_int_equal(strlen(out), AGENT_STAMP_LEN);
    t = (struct timespec){0, 999};
    agent_stamp_render(&t, out);
    assert_string_equal(out, "1970-01-01T00:00:00.000000Z ");
    t = (struct timespec){951868799, 999999999}; /* the last microsecond of 2000-02-29 */
    agent_stamp_render(&t, out);
    assert_string_equal(out, "2000-02-29T23:59:59.999999Z ");
    t = (struct timespec){253402300800, 0}; /* year 10000: the width holds, the digits do not */
    agent_stamp_render(&t, out);
    assert_string_equal(out, "0000-00-00T00:00:00.000000Z ");
    t = (struct timespec){5, 1000000000};
    agent_stamp_render(&t, out);
    assert_string_equal(out, "0000-00-00T00:00:00.000000Z ");
}

/* --duplicate_std*_filters: torchrun's comma_separated_list (",," is a comma); empty items and
 * an empty value mean no filter. */
static void test_duplicate_filters(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--duplicate_stdout_filters", ",a,,,b,", "x", END), 0);
    assert_string_equal(s.dup_stdout_filters[0], "a,");
    assert_string_equal(s.dup_stdout_filters[1], "b");
    assert_null(s.dup_stdout_filters[2]);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--duplicate-stderr-filters=", "x", END), 0);
    assert_null(s.dup_stderr_filters);
    launch_spec_free(&s);
    /* The last occurrence wins, as argparse. */
    assert_int_equal(
        parse(&s, &e, "--duplicate-stdout-filters=a", "--duplicate-stdout-filters=b", "x", END), 0);
    assert_string_equal(s.dup_stdout_filters[0], "b");
    assert_null(s.dup_stdout_filters[1]);
    launch_spec_free(&s);
    char many[4 * (LAUNCH_MAX_DUP_FILTERS + 1)];
    size_t k = 0;
    for (int i = 0; i <= LAUNCH_MAX_DUP_FILTERS; i++) {
        many[k++] = 'x';
        many[k++] = ',';
    }
    many[k - 1] = '\0';
    assert_int_equal(parse(&s, &e, "--duplicate_stdout_filters", many, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--duplicate_stdout_filters: more than 64 filters"));
}

/* --rdzv_backend=etcd (and torchrun's etcd-v2): the members with their ports (2379 when absent),
 * the conf keys and their defaults reach the agent's job; credentials come from the environment
 * only, both or neither. */
static void test_etcd_job(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    char *argv[] = {"x", NULL};
    launch_argv_t prog = {"x", argv, 1};
    agent_job_t job;
    assert_int_equal(parse(&s, &e, "--nnodes=2", "--rdzv_backend=etcd-v2",
                           "--rdzv_endpoint=e1,10.0.0.2:2380,[::1]",
                           "--rdzv_conf=lease_ttl=7,etcd_cacert=/ca.pem", "x", END),
                     0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.backend, AGENT_RDZV_ETCD);
    assert_string_equal(job.etcd.endpoints, "e1:2379,10.0.0.2:2380,[::1]:2379");
    assert_string_equal(job.etcd.prefix, AGENT_DEFAULT_ETCD_PREFIX);
    assert_int_equal(job.etcd.lease_ttl_s, 7);
    assert_string_equal(job.etcd.cacert, "/ca.pem");
    assert_null(job.etcd.cert);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h",
                           "--rdzv_conf=etcd_prefix=/a/b", "x", END),
                     0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_string_equal(job.etcd.endpoints, "h:2379");
    assert_string_equal(job.etcd.prefix, "/a/b");
    assert_int_equal(job.etcd.lease_ttl_s, AGENT_DEFAULT_ETCD_LEASE_TTL_S);
    launch_spec_free(&s);
    /* The c10d backend meets at one endpoint: a list does not resolve. */
    assert_int_equal(prepare_env(&e, NULL, "--nnodes=2", "--rdzv_backend=c10d",
                                 "--rdzv_endpoint=a:1,b:2", "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--rdzv_endpoint"));
    assert_int_equal(prepare_env(&e, NULL, "--nnodes=2", "--rdzv_backend=etcd", "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--rdzv_backend=etcd needs --rdzv_endpoint"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_virtual_local_rank_devices),
        cmocka_unit_test(test_run_id_rule),
        cmocka_unit_test(test_run_id_fresh),
        cmocka_unit_test(test_multinode_prepare),
        cmocka_unit_test(test_torch_env_defaults),
        cmocka_unit_test(test_prefix_render),
        cmocka_unit_test(test_stamp_render),
        cmocka_unit_test(test_duplicate_filters),
        cmocka_unit_test(test_etcd_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
