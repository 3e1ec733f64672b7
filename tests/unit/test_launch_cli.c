/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/cli.c and launcher/program.c: every torchrun flag in both spellings and
 * both value forms, PET_* precedence, bad values naming the flag, --standalone, the help text, and
 * the worker argv (.py, -m, --no_python, --run_path, missing programs). */
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

#include "launch_int.h"
#include "launch_spec.h"
#include "rdzv_proto.h"

/* The end of a variadic argument list (a typed null pointer, unlike a bare NULL). */
#define END ((const char *)0)

#define MAXARGS 32

/* A recorded environment: "NAME=value" strings, NULL-terminated. */
static const char *fake_env(void *ctx, const char *name) {
    size_t n = strlen(name);
    for (const char *const *e = ctx; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static char *argv_buf[MAXARGS];

/* Parses "ddprun" + the NULL-terminated arguments with envp as the whole environment. */
static int parse_v(launch_spec_t *s, ddp_err_t *e, const char *const *envp, va_list ap) {
    int argc = 0;
    argv_buf[argc++] = "ddprun";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < MAXARGS - 1)
        argv_buf[argc++] = (char *)a;
    argv_buf[argc] = NULL;
    ddp_err_clear(e);
    return launch_cli_parse_env(argc, argv_buf, fake_env, (void *)envp, s, e);
}

static int parse_env(launch_spec_t *s, ddp_err_t *e, const char *const *envp, ...) {
    va_list ap;
    va_start(ap, envp);
    int rc = parse_v(s, e, envp, ap);
    va_end(ap);
    return rc;
}

static int parse(launch_spec_t *s, ddp_err_t *e, ...) {
    va_list ap;
    va_start(ap, e);
    int rc = parse_v(s, e, NULL, ap);
    va_end(ap);
    return rc;
}

/* Expects a usage error whose text contains both needles (the flag and the value). */
static void expect_bad(const char *flag, const char *val, const char *needle) {
    launch_spec_t s;
    ddp_err_t e;
    int rc = parse(&s, &e, flag, val, "prog", END);
    if (rc != DDP_EUSAGE || strstr(e.text, needle) == NULL)
        print_error("flag %s value '%s': rc %d text '%s' (wanted '%s')\n", flag, val, rc, e.text,
                    needle);
    assert_int_equal(rc, DDP_EUSAGE);
    assert_non_null(strstr(e.text, needle));
    assert_null(s.rdzv_backend); /* the spec is left empty on error */
}

static void test_defaults(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "./train", "--lr", "1", END), 0);
    assert_int_equal(s.min_nodes, 1);
    assert_int_equal(s.max_nodes, 1);
    assert_int_equal(s.nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s.nproc_per_node, 1);
    assert_int_equal(s.node_rank, 0);
    assert_string_equal(s.rdzv_backend, "static");
    assert_null(s.rdzv_host);
    assert_int_equal(s.rdzv_port, -1);
    assert_string_equal(s.rdzv_id, "none");
    assert_null(s.rdzv_conf);
    assert_int_equal(s.standalone, 0);
    assert_int_equal(s.max_restarts, 0);
    assert_true(s.monitor_interval > 0.0999 && s.monitor_interval < 0.1001);
    assert_string_equal(s.role, "default");
    assert_null(s.log_dir);
    assert_int_equal(s.redirects.dflt, 0);
    assert_int_equal(s.tee.n, 0);
    assert_null(s.local_ranks_filter);
    assert_string_equal(s.master_addr, "127.0.0.1");
    assert_int_equal(s.master_port, -1);
    assert_null(s.local_addr);
    assert_int_equal(s.n_signals, 4);
    assert_int_equal(s.signals[0], SIGTERM);
    assert_int_equal(s.signals[1], SIGINT);
    assert_int_equal(s.signals[2], SIGHUP);
    assert_int_equal(s.signals[3], SIGQUIT);
    assert_true(s.shutdown_timeout == 30);
    assert_true(s.rdzv_opts.join_timeout == 600);
    assert_true(s.rdzv_opts.last_call_timeout == 30);
    assert_true(s.rdzv_opts.close_timeout == 30);
    assert_true(s.rdzv_opts.keep_alive_interval == 5);
    assert_int_equal(s.rdzv_opts.keep_alive_max_attempt, 3);
    assert_true(s.rdzv_opts.read_timeout == 60);
    assert_int_equal(s.rdzv_opts.is_host, -1);
    assert_int_equal(s.rdzv_opts.max_node_failures, 0);
    assert_string_equal(s.start_method, "spawn");
    assert_int_equal(s.virtual_local_rank, 0);
    assert_null(s.log_line_prefix_template); /* torchrun's "[${role_name}${local_rank}]:" */
    assert_string_equal(s.event_log_handler, "null");
    assert_null(s.dup_stdout_filters);
    assert_null(s.dup_stderr_filters);
    assert_int_equal(s.given, 0);
    assert_int_equal(s.prog_argc, 3);
    assert_ptr_equal(s.prog_argv, argv_buf + 1); /* borrowed from argv */
    assert_string_equal(s.prog_argv[2], "1");
    launch_spec_free(&s);
    assert_null(s.rdzv_backend);
    launch_spec_free(&s); /* twice is harmless */
}

/* One row per flag that takes a value: the dashed name, a value, and a check of the result. */
typedef struct flag_case {
    const char *name;
    const char *val;
    launch_opt_t id;
    void (*check)(const launch_spec_t *s);
} flag_case_t;

static void ck_nnodes(const launch_spec_t *s) {
    assert_int_equal(s->min_nodes, 2);
    assert_int_equal(s->max_nodes, 4);
}
static void ck_nproc(const launch_spec_t *s) {
    assert_int_equal(s->nproc_kind, LAUNCH_NPROC_NUM);
    assert_int_equal(s->nproc_per_node, 4);
}
/* Alone, the only node rank is 0 (test_combinations has the others, with --nnodes). */
static void ck_node_rank(const launch_spec_t *s) {
    assert_int_equal(s->node_rank, 0);
}
static void ck_backend(const launch_spec_t *s) {
    assert_string_equal(s->rdzv_backend, "c10d");
}
static void ck_endpoint(const launch_spec_t *s) {
    assert_string_equal(s->rdzv_host, "head");
    assert_int_equal(s->rdzv_port, 1234);
}
static void ck_id(const launch_spec_t *s) {
    assert_string_equal(s->rdzv_id, "job7");
}
static void ck_conf(const launch_spec_t *s) {
    assert_string_equal(s->rdzv_conf, "join_timeout=5, is_host=1, max_node_failures=3");
    assert_int_equal(s->rdzv_opts.max_node_failures, 3);
    assert_true(s->rdzv_opts.join_timeout == 5);
    assert_int_equal(s->rdzv_opts.is_host, 1);
    assert_true(s->rdzv_opts.read_timeout == 60);
}
static void ck_restarts(const launch_spec_t *s) {
    assert_int_equal(s->max_restarts, 3);
}
static void ck_monitor(const launch_spec_t *s) {
    assert_true(s->monitor_interval == 0.5);
}
static void ck_start(const launch_spec_t *s) {
    assert_string_equal(s->start_method, "fork");
}
static void ck_role(const launch_spec_t *s) {
    assert_string_equal(s->role, "trainer");
}
static void ck_log_dir(const launch_spec_t *s) {
    assert_string_equal(s->log_dir, "/tmp");
}
static void ck_redirects(const launch_spec_t *s) {
    assert_int_equal(s->redirects.dflt, 3);
    assert_int_equal(s->redirects.n, 0);
}
static void ck_tee(const launch_spec_t *s) {
    assert_int_equal(s->tee.dflt, 0);
    assert_int_equal(s->tee.n, 2);
    assert_int_equal(agent_std_for(&s->tee, 0), AGENT_STD_OUT);
    assert_int_equal(agent_std_for(&s->tee, 1), AGENT_STD_ERR);
    assert_int_equal(agent_std_for(&s->tee, 2), AGENT_STD_NONE);
}
static void ck_filter(const launch_spec_t *s) {
    assert_int_equal(s->n_local_ranks_filter, 2);
    assert_int_equal(s->local_ranks_filter[0], 0);
    assert_int_equal(s->local_ranks_filter[1], 2);
}
static void ck_maddr(const launch_spec_t *s) {
    assert_string_equal(s->master_addr, "10.0.0.1");
}
static void ck_mport(const launch_spec_t *s) {
    assert_int_equal(s->master_port, 1234);
}
static void ck_laddr(const launch_spec_t *s) {
    assert_string_equal(s->local_addr, "n1");
}
static void ck_signals(const launch_spec_t *s) {
    assert_int_equal(s->n_signals, 3);
    assert_int_equal(s->signals[0], SIGUSR1);
    assert_int_equal(s->signals[1], SIGTERM);
    assert_int_equal(s->signals[2], SIGUSR2);
}
static void ck_shutdown(const launch_spec_t *s) {
    assert_true(s->shutdown_timeout == 5);
}

static void ck_prefix(const launch_spec_t *s) {
    assert_string_equal(s->log_line_prefix_template, "${hostname}:${rank}: ");
}
static void ck_event(const launch_spec_t *s) {
    assert_string_equal(s->event_log_handler, "console");
}
static void ck_dup_out(const launch_spec_t *s) {
    assert_non_null(s->dup_stdout_filters);
    assert_string_equal(s->dup_stdout_filters[0], "apple");
    assert_string_equal(s->dup_stdout_filters[1], "or,ange");
    assert_null(s->dup_stdout_filters[2]);
    assert_null(s->dup_stderr_filters);
}
static void ck_dup_err(const launch_spec_t *s) {
    assert_non_null(s->dup_stderr_filters);
    assert_string_equal(s->dup_stderr_filters[0], "NaN");
    assert_null(s->dup_stderr_filters[1]);
    assert_null(s->dup_stdout_filters);
}

static void ck_wstore(const launch_spec_t *s) {
    assert_int_equal(s->worker_store_own, 1);
}
static void ck_metrics(const launch_spec_t *s) {
    assert_string_equal(s->metrics_host, "::1");
    assert_int_equal(s->metrics_port, 9464);
}

static const flag_case_t value_flags[] = {
    {"nnodes", "2:4", LAUNCH_OPT_NNODES, ck_nnodes},
    {"nproc-per-node", "4", LAUNCH_OPT_NPROC_PER_NODE, ck_nproc},
    {"node-rank", "0", LAUNCH_OPT_NODE_RANK, ck_node_rank},
    {"rdzv-backend", "c10d", LAUNCH_OPT_RDZV_BACKEND, ck_backend},
    {"rdzv-endpoint", "head:1234", LAUNCH_OPT_RDZV_ENDPOINT, ck_endpoint},
    {"rdzv-id", "job7", LAUNCH_OPT_RDZV_ID, ck_id},
    {"rdzv-conf", "join_timeout=5, is_host=1, max_node_failures=3", LAUNCH_OPT_RDZV_CONF, ck_conf},
    {"max-restarts", "3", LAUNCH_OPT_MAX_RESTARTS, ck_restarts},
    {"monitor-interval", "0.5", LAUNCH_OPT_MONITOR_INTERVAL, ck_monitor},
    {"start-method", "fork", LAUNCH_OPT_START_METHOD, ck_start},
    {"role", "trainer", LAUNCH_OPT_ROLE, ck_role},
    {"log-dir", "/tmp", LAUNCH_OPT_LOG_DIR, ck_log_dir},
    {"redirects", "3", LAUNCH_OPT_REDIRECTS, ck_redirects},
    {"tee", "0:1,1:2", LAUNCH_OPT_TEE, ck_tee},
    {"local-ranks-filter", "2,0,2", LAUNCH_OPT_LOCAL_RANKS_FILTER, ck_filter},
    {"master-addr", "10.0.0.1", LAUNCH_OPT_MASTER_ADDR, ck_maddr},
    {"master-port", "1234", LAUNCH_OPT_MASTER_PORT, ck_mport},
    {"local-addr", "n1", LAUNCH_OPT_LOCAL_ADDR, ck_laddr},
    {"worker-store", "own", LAUNCH_OPT_WORKER_STORE, ck_wstore},
    {"metrics", "[::1]:9464", LAUNCH_OPT_METRICS, ck_metrics},
    {"signals-to-handle", "SIGUSR1,TERM,usr2,SIGTERM", LAUNCH_OPT_SIGNALS_TO_HANDLE, ck_signals},
    {"shutdown-timeout", "5", LAUNCH_OPT_SHUTDOWN_TIMEOUT, ck_shutdown},
    {"log-line-prefix-template", "${hostname}:${rank}: ", LAUNCH_OPT_LOG_LINE_PREFIX_TEMPLATE,
     ck_prefix},
    {"event-log-handler", "console", LAUNCH_OPT_EVENT_LOG_HANDLER, ck_event},
    {"duplicate-stdout-filters", "apple,or,,ange", LAUNCH_OPT_DUPLICATE_STDOUT_FILTERS, ck_dup_out},
    {"duplicate-stderr-filters", "NaN", LAUNCH_OPT_DUPLICATE_STDERR_FILTERS, ck_dup_err},
};

/* Every value flag: --dashed=v, --dashed v, --under_scored=v, --under_scored v, PET_UNDER=v. */
static void test_value_flags_all_spellings(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof value_flags / sizeof value_flags[0]; k++) {
        const flag_case_t *c = &value_flags[k];
        char dashed[64], under[64], pet[64], eqd[128], equ[128], petv[128];
        snprintf(dashed, sizeof dashed, "--%s", c->name);
        snprintf(under, sizeof under, "--%s", c->name);
        snprintf(pet, sizeof pet, "PET_%s", c->name);
        for (char *p = under; *p; p++)
            if (*p == '-' && p > under + 1)
                *p = '_';
        for (char *p = pet; *p; p++)
            *p = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        snprintf(eqd, sizeof eqd, "%s=%s", dashed, c->val);
        snprintf(equ, sizeof equ, "%s=%s", under, c->val);
        snprintf(petv, sizeof petv, "%s=%s", pet, c->val);
        const char *envp[] = {petv, NULL};
        for (int form = 0; form < 5; form++) {
            launch_spec_t s;
            ddp_err_t e;
            int rc;
            switch (form) {
            case 0: rc = parse(&s, &e, eqd, "prog", END); break;
            case 1: rc = parse(&s, &e, dashed, c->val, "prog", END); break;
            case 2: rc = parse(&s, &e, equ, "prog", END); break;
            case 3: rc = parse(&s, &e, under, c->val, "prog", END); break;
            default: rc = parse_env(&s, &e, envp, "prog", END); break;
            }
            if (rc != 0)
                print_error("%s form %d: %s\n", c->name, form, e.text);
            assert_int_equal(rc, 0);
            c->check(&s);
            assert_true(LAUNCH_GIVEN(&s, c->id));
            assert_int_equal(s.prog_argc, 1);
            launch_spec_free(&s);
        }
    }
}

static void test_bool_flags_all_spellings(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--no-python", "./x", END), 0);
    assert_int_equal(s.no_python, 1);
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_NO_PYTHON));
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--no_python", "./x", END), 0);
    assert_int_equal(s.no_python, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--run-path", "./x", END), 0);
    assert_string_equal(s.run_path, "./x");
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--run_path", "./x", END), 0);
    assert_string_equal(s.run_path, "./x");
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_RUN_PATH));
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--module", "pkg.train", END), 0);
    assert_int_equal(s.module, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "-m", "pkg.train", END), 0);
    assert_int_equal(s.module, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--standalone", "x", END), 0);
    assert_int_equal(s.standalone, 1);
    launch_spec_free(&s);
    const char *env1[] = {"PET_STANDALONE=1", "PET_NO_PYTHON=true", NULL};
    assert_int_equal(parse_env(&s, &e, env1, "x", END), 0);
    assert_int_equal(s.standalone, 1);
    assert_int_equal(s.no_python, 1);
    launch_spec_free(&s);
    const char *env0[] = {"PET_STANDALONE=0", "PET_MODULE=1", NULL};
    assert_int_equal(parse_env(&s, &e, env0, "x", END), 0);
    assert_int_equal(s.standalone, 0);
    assert_int_equal(s.module, 1);
    launch_spec_free(&s);
    const char *envbad[] = {"PET_STANDALONE=maybe", NULL};
    assert_int_equal(parse_env(&s, &e, envbad, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "PET_STANDALONE"));
    assert_int_equal(parse(&s, &e, "--standalone=1", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--standalone takes no value");
    assert_int_equal(parse(&s, &e, "--virtual-local-rank", "x", END), 0);
    assert_int_equal(s.virtual_local_rank, 1);
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_VIRTUAL_LOCAL_RANK));
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--virtual_local_rank", "x", END), 0);
    assert_int_equal(s.virtual_local_rank, 1);
    launch_spec_free(&s);
    const char *envv[] = {"PET_VIRTUAL_LOCAL_RANK=1", NULL};
    assert_int_equal(parse_env(&s, &e, envv, "x", END), 0);
    assert_int_equal(s.virtual_local_rank, 1);
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_VIRTUAL_LOCAL_RANK));
    launch_spec_free(&s);
    const char *envvbad[] = {"PET_VIRTUAL_LOCAL_RANK=sometimes", NULL};
    assert_int_equal(parse_env(&s, &e, envvbad, "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "PET_VIRTUAL_LOCAL_RANK"));
    assert_int_equal(parse(&s, &e, "--virtual_local_rank=1", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--virtual_local_rank takes no value");
}

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

static void test_nproc_kinds(void **state) {
    (void)state;
    static const struct {
        const char *v;
        launch_nproc_kind_t k;
    } kinds[] = {{"gpu", LAUNCH_NPROC_GPU}, {"cpu", LAUNCH_NPROC_CPU}, {"auto", LAUNCH_NPROC_AUTO}};
    for (size_t i = 0; i < 3; i++) {
        launch_spec_t s;
        ddp_err_t e;
        assert_int_equal(parse(&s, &e, "--nproc_per_node", kinds[i].v, "x", END), 0);
        assert_int_equal(s.nproc_kind, kinds[i].k);
        launch_spec_free(&s);
    }
}

static void test_nnodes_forms(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--nnodes", "3", "x", END), 0);
    assert_int_equal(s.min_nodes, 3);
    assert_int_equal(s.max_nodes, 3);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--nnodes=1:1", "x", END), 0);
    assert_int_equal(s.max_nodes, 1);
    launch_spec_free(&s);
    expect_bad("--nnodes", "0", "--nnodes: '0'");
    expect_bad("--nnodes", "3:2", "--nnodes: '3:2' has MIN above MAX");
    expect_bad("--nnodes", "0:2", "--nnodes: '0:2'");
    expect_bad("--nnodes", "2:", "--nnodes: '2:'");
    expect_bad("--nnodes", "a", "--nnodes: 'a' is not a number");
}

static void test_short_flags(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "-r", "3", "-t1", "-vvv", "-v", "x", END), 0);
    assert_int_equal(s.redirects.dflt, 3);
    assert_int_equal(s.tee.dflt, 1);
    assert_int_equal(s.verbose, 4);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "-t=0:3", "-mv", "mod", END), 0);
    assert_int_equal(agent_std_for(&s.tee, 0), AGENT_STD_ALL);
    assert_int_equal(s.module, 1);
    assert_int_equal(s.verbose, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--verbose", "--verbose", "x", END), 0);
    assert_int_equal(s.verbose, 2);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "-q", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "unknown flag '-q' (see ddprun --help)");
    assert_int_equal(parse(&s, &e, "-r", END), DDP_EUSAGE);
    assert_string_equal(e.text, "-r: missing value");
}

static void test_pet_precedence(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    const char *envp[] = {"PET_NPROC_PER_NODE=4", "PET_NNODES=2", "PET_MAX_RESTARTS=oops", NULL};
    /* The command line wins, and a bad PET value that the command line overrides is not read. */
    assert_int_equal(parse_env(&s, &e, envp, "--nproc_per_node=2", "--max-restarts", "1", "x", END),
                     0);
    assert_int_equal(s.nproc_per_node, 2);
    assert_int_equal(s.max_nodes, 2);
    assert_int_equal(s.max_restarts, 1);
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_NNODES));
    launch_spec_free(&s);
    /* A bad PET value that is used is an error naming the variable. */
    assert_int_equal(parse_env(&s, &e, envp, "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "PET_MAX_RESTARTS: 'oops' is not a number");
    const char *envp2[] = {"PET_NPROC_PER_NODE=gpu", "PET_RDZV_ENDPOINT=h:7", NULL};
    assert_int_equal(parse_env(&s, &e, envp2, "x", END), 0);
    assert_int_equal(s.nproc_kind, LAUNCH_NPROC_GPU);
    assert_int_equal(s.rdzv_port, 7);
    launch_spec_free(&s);
}

static void test_program_boundary(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--nnodes", "1", "prog", "--nnodes", "5", "-v", END), 0);
    assert_int_equal(s.prog_argc, 4);
    assert_string_equal(s.prog_argv[0], "prog");
    assert_string_equal(s.prog_argv[1], "--nnodes");
    assert_int_equal(s.verbose, 0);
    assert_int_equal(s.max_nodes, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "-v", "--", "-weird", "a", END), 0);
    assert_int_equal(s.prog_argc, 2);
    assert_string_equal(s.prog_argv[0], "-weird");
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--nnodes", "2", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "missing program"));
    assert_int_equal(parse(&s, &e, "--", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "missing program"));
    assert_int_equal(parse(&s, &e, "--nnodes", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--nnodes: missing value");
}

static void test_unknown_and_prefix(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--foo", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "unknown flag '--foo' (see ddprun --help)");
    assert_int_equal(parse(&s, &e, "--foo=3", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "unknown flag '--foo' (see ddprun --help)");
    assert_int_equal(parse(&s, &e, "--rdzv", "x", "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "ambiguous flag '--rdzv'"));
    /* argparse's unique prefixes work, in either spelling. */
    assert_int_equal(parse(&s, &e, "--nproc", "3", "--max_res=2", "prog", END), 0);
    assert_int_equal(s.nproc_per_node, 3);
    assert_int_equal(s.max_restarts, 2);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--logs_specs", "x", "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--logs_specs"));
    /* torch's own entry point name is the behaviour ddprun has; both spellings. */
    assert_int_equal(parse(&s, &e, "--logs_specs", "default", "prog", END), 0);
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_LOGS_SPECS));
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--logs-specs=default", "prog", END), 0);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--logs-specs=my_specs", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text,
                        "--logs-specs: 'my_specs' is a Python log spec plugin, which ddprun "
                        "cannot load (only 'default'; use --log_dir)");
    /* torchrun 2.x's --numa-binding: its four modes, both spellings, PET_NUMA_BINDING. */
    const char *modes[] = {"node", "socket", "exclusive", "core-complex"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(parse(&s, &e, "--numa-binding", modes[i], "prog", END), 0);
        assert_string_equal(launch_numa_mode_name(s.numa_binding), modes[i]);
        assert_int_equal(s.numa_binding_fallback, 0);
        launch_spec_free(&s);
    }
    assert_int_equal(parse(&s, &e, "--numa_binding=socket", "--numa_binding_fallback", "prog", END),
                     0);
    assert_int_equal(s.numa_binding, LAUNCH_NUMA_SOCKET);
    assert_int_equal(s.numa_binding_fallback, 1);
    launch_spec_free(&s);
    const char *envp[] = {"PET_NUMA_BINDING=exclusive", NULL};
    assert_int_equal(parse_env(&s, &e, envp, "prog", END), 0);
    assert_int_equal(s.numa_binding, LAUNCH_NUMA_EXCLUSIVE);
    launch_spec_free(&s);
    /* --print_topology needs no program; --json goes with it. */
    assert_int_equal(parse(&s, &e, "--print_topology", "--json", END), 0);
    assert_true(s.print_topology && s.json);
    assert_int_equal(s.prog_argc, 0);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--numa-binding", "cores", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--numa-binding: 'cores' is not node, socket, exclusive or "
                                "core-complex");
    /* torchrun 2.x flags ddprun lacks are refused by name, saying so, not as unknown flags. */
}

/* Every value the completion script offers after a flag is one the parser accepts: the script
 * is generated from the flag table, and its value sets cannot drift from the parser. */
static void test_completion_values_parse(void **state) {
    (void)state;
    int sets = 0;
    for (size_t k = 0; k < launch_cli_flag_count(); k++) {
        const char *name;
        char shortc;
        if (!launch_cli_flag(k, &name, &shortc) || strcmp(name, "print-completion") == 0)
            continue;
        const char *v = launch_completion_values(name);
        if (v == NULL || v[0] == '@')
            continue;
        sets++;
        char words[256], flag[80];
        snprintf(words, sizeof words, "%s", v);
        snprintf(flag, sizeof flag, "--%s", name);
        for (char *w = strtok(words, " "); w != NULL; w = strtok(NULL, " ")) {
            launch_spec_t s;
            ddp_err_t e;
            if (parse(&s, &e, flag, w, "prog", END) != 0)
                fail_msg("completion offers %s %s, which the parser refuses: %s", flag, w, e.text);
            launch_spec_free(&s);
        }
    }
    assert_true(sets >= 10);
}

static void test_bad_values_name_the_flag(void **state) {
    (void)state;
    expect_bad("--nproc_per_node", "x", "--nproc_per_node: 'x' is not a number, gpu, cpu or auto");
    expect_bad("--nproc-per-node", "0", "--nproc-per-node: '0' is out of range");
    expect_bad("--node_rank", "-1", "--node_rank: '-1'");
    expect_bad("--rdzv_backend", "etcd", "--rdzv_backend: 'etcd' is not supported");
    expect_bad("--rdzv_backend", "zk", "--rdzv_backend: 'zk' is not a rendezvous backend");
    expect_bad("--rdzv_endpoint", "::1:29400", "--rdzv_endpoint: '::1:29400' has an IPv6");
    expect_bad("--rdzv_endpoint", "h:99999", "--rdzv_endpoint: 'h:99999' has a port");
    expect_bad("--rdzv_endpoint", ":29400", "--rdzv_endpoint: ':29400' has no host");
    expect_bad("--rdzv_endpoint", "[::1", "--rdzv_endpoint: '[::1'");
    expect_bad("--rdzv_id", "", "--rdzv_id: empty value");
    expect_bad("--rdzv_conf", "foo=1", "--rdzv_conf: unknown key 'foo'");
    expect_bad("--rdzv_conf", "join_timeout=-1", "--rdzv_conf: join_timeout='-1'");
    expect_bad("--rdzv_conf", "read_timeout=0", "--rdzv_conf: read_timeout='0'");
    expect_bad("--rdzv_conf", "join_timeout=1e9", "--rdzv_conf: join_timeout='1e9' is outside");
    expect_bad("--rdzv_conf", "keep_alive_interval=0.0001",
               "keep_alive_interval='0.0001' is outside");
    expect_bad("--rdzv_conf", "timeout=abc", "--rdzv_conf: timeout='abc'");
    expect_bad("--rdzv_conf", "keep_alive_max_attempt=0", "keep_alive_max_attempt='0'");
    expect_bad("--rdzv_conf", "is_host=maybe", "--rdzv_conf: is_host='maybe'");
    expect_bad("--rdzv_conf", "max_node_failures=-1", "--rdzv_conf: max_node_failures='-1' is not");
    expect_bad("--rdzv_conf", "novalue", "--rdzv_conf: 'novalue' is not key=value");
    expect_bad("--max_restarts", "-1", "--max_restarts: '-1'");
    expect_bad("--max_restarts", "x", "--max_restarts: 'x' is not a number");
    expect_bad("--monitor_interval", "abc", "--monitor_interval: 'abc' is not a number of seconds");
    expect_bad("--start_method", "thread", "--start_method: 'thread'");
    expect_bad("--worker_store", "rank0", "--worker_store: 'rank0' is not agent or own");
    expect_bad("--metrics", "9464", "--metrics: '9464' is not HOST:PORT");
    expect_bad("--role", "", "--role: empty value");
    expect_bad("--log_dir", "/etc/passwd", "--log_dir: '/etc/passwd' is not a directory");
    expect_bad("--log_dir", "/etc/passwd/x", "--log_dir: '/etc/passwd/x'");
    expect_bad("--redirects", "4", "--redirects: '4' is not 0-3");
    expect_bad("--event_log_handler", "file",
               "--event_log_handler: 'file' is not an event log "
               "handler (null, console, json or json:PATH)");
    expect_bad("--event_log_handler", "json:", "--event_log_handler: 'json:' is not an event log");
    expect_bad("--event-log-handler", "", "--event-log-handler: '' is not an event log handler");
    expect_bad("--log_line_prefix_template", "${node}:",
               "--log_line_prefix_template: unknown "
               "macro 'node'");
    expect_bad("--log-line-prefix-template", "$ranks",
               "--log-line-prefix-template: unknown macro "
               "'ranks'");
    expect_bad("-r", "0:5", "-r: '0:5'");
    expect_bad("--tee", "a", "--tee: 'a'");
    expect_bad("--tee", "0:1,0:2", "--tee: local rank 0 given twice");
    expect_bad("--local_ranks_filter", "a,1", "--local_ranks_filter: 'a'");
    expect_bad("--local_ranks_filter", ",", "--local_ranks_filter: ','");
    expect_bad("--master_port", "0", "--master_port: '0' is out of range");
    expect_bad("--master_port", "70000", "--master_port: '70000'");
    expect_bad("--master_addr", "", "--master_addr: empty value");
    expect_bad("--signals_to_handle", "SIGFOO", "--signals_to_handle: 'SIGFOO' is not a signal");
    expect_bad("--signals_to_handle", "KILL", "--signals_to_handle: SIGKILL cannot be handled");
    expect_bad("--signals_to_handle", "SIGSTOP", "SIGSTOP cannot be handled");
    expect_bad("--signals_to_handle", ",", "--signals_to_handle: ',' names no signal");
    expect_bad("--shutdown_timeout", "-1", "--shutdown_timeout: '-1'");
}

/* Every number has a bound named in its message: durations become int64 milliseconds and a
 * timer (1e17 s overflowed into one that fired at once), counts become ints. */
/* The hang flags: defaults, values, PET_* variables, bad values naming the flag, and what
 * reaches the agent (milliseconds; the initial timeout 10x the heartbeat timeout by default). */
static void test_hang_flags(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "prog", END), 0);
    assert_true(s.heartbeat_timeout == 0);
    assert_true(s.initial_heartbeat_timeout < 0);
    assert_true(s.stacks_timeout == LAUNCH_DEFAULT_STACKS_TIMEOUT_S);
    assert_true(s.gpu_memory_reclaim_timeout == LAUNCH_DEFAULT_GPU_MEMORY_RECLAIM_TIMEOUT_S);
    assert_int_equal(s.max_no_progress_restarts, 0);
    assert_int_equal(s.heartbeat_on_output, 0);
    launch_spec_free(&s);

    assert_int_equal(parse(&s, &e, "--heartbeat_timeout", "2.5", "--heartbeat-on-output",
                           "--stacks_timeout=3", "--max_no_progress_restarts", "4",
                           "--gpu_memory_reclaim_timeout", "0", "prog", END),
                     0);
    launch_argv_t prog = {.path = "/bin/true", .argv = (char *[]){"prog", NULL}, .argc = 1};
    agent_job_t job;
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.heartbeat_timeout_ms, 2500);
    assert_int_equal(job.initial_heartbeat_timeout_ms, 25000);
    assert_int_equal(job.heartbeat_on_output, 1);
    assert_int_equal(job.stacks_timeout_ms, 3000);
    assert_int_equal(job.max_no_progress_restarts, 4);
    assert_int_equal(job.gpu_memory_reclaim_timeout_ms, 0);
    launch_spec_free(&s);

    const char *const env[] = {"PET_HEARTBEAT_TIMEOUT=7", "PET_INITIAL_HEARTBEAT_TIMEOUT=9",
                               "PET_HEARTBEAT_ON_OUTPUT=1", NULL};
    assert_int_equal(parse_env(&s, &e, env, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.heartbeat_timeout_ms, 7000);
    assert_int_equal(job.initial_heartbeat_timeout_ms, 9000);
    assert_int_equal(job.heartbeat_on_output, 1);
    launch_spec_free(&s);

    const char *const flags[] = {"--heartbeat_timeout", "--initial_heartbeat_timeout",
                                 "--stacks_timeout", "--gpu_memory_reclaim_timeout"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "%s: '-1'", flags[i]);
        expect_bad(flags[i], "-1", want);
        snprintf(want, sizeof want, "%s: 'abc' is not a number of seconds", flags[i]);
        expect_bad(flags[i], "abc", want);
        snprintf(want, sizeof want, "%s: '1e17' is outside", flags[i]);
        expect_bad(flags[i], "1e17", want);
    }
    /* A timeout the millisecond timers would round to 0 is refused, not turned off. */
    assert_int_equal(parse(&s, &e, "--heartbeat_timeout=0.0001", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--heartbeat_timeout: 0.0001 s rounds to 0 ms, which turns hang "
                                "detection off; give 0 (off) or at least 0.001");
    assert_int_equal(
        parse(&s, &e, "--heartbeat_timeout=1", "--initial_heartbeat_timeout=1e-5", "prog", END),
        DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--initial_heartbeat_timeout: 1e-05 s rounds to 0 ms"));
    assert_int_equal(parse(&s, &e, "--heartbeat_timeout=0.001", "prog", END), 0);
    launch_spec_free(&s);
    /* The flags that act only with --heartbeat_timeout are refused without it. */
    assert_int_equal(parse(&s, &e, "--heartbeat_on_output", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--heartbeat_on_output needs --heartbeat_timeout (without it hang "
                                "detection is off and --heartbeat_on_output does nothing)");
    assert_int_equal(parse(&s, &e, "--initial_heartbeat_timeout=5", "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--initial_heartbeat_timeout needs --heartbeat_timeout"));
    assert_int_equal(
        parse(&s, &e, "--heartbeat_timeout=0", "--max_no_progress_restarts=2", "prog", END),
        DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--max_no_progress_restarts needs --heartbeat_timeout"));
    const char *const pet_only[] = {"PET_HEARTBEAT_ON_OUTPUT=1", NULL};
    assert_int_equal(parse_env(&s, &e, pet_only, "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--heartbeat_on_output needs --heartbeat_timeout"));
    /* Their "off" values ask for nothing. */
    assert_int_equal(parse(&s, &e, "--max_no_progress_restarts=0", "prog", END), 0);
    launch_spec_free(&s);
    const char *const pet_off[] = {"PET_HEARTBEAT_ON_OUTPUT=0", NULL};
    assert_int_equal(parse_env(&s, &e, pet_off, "prog", END), 0);
    launch_spec_free(&s);
    expect_bad("--max_no_progress_restarts", "-1", "--max_no_progress_restarts: '-1' is out of");
    expect_bad("--max_no_progress_restarts", "abc", "--max_no_progress_restarts: 'abc' is not");
    expect_bad("--max_no_progress_restarts", "1e17", "--max_no_progress_restarts: '1e17'");
}

/* The health check's flags: defaults (no command, 60 s, the GPU check on), values and PET_*
 * variables as the agent gets them, and bad values refused naming the flag. */
/* --max_node_failures: the store's bound on each JOIN; it overrides --rdzv_conf's key of the same
 * name in either order; past the store's bound it is refused naming the flag. */
static void test_max_node_failures(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    launch_argv_t prog = {.path = "/bin/true", .argv = (char *[]){"prog", NULL}, .argc = 1};
    agent_job_t job;
    assert_int_equal(parse(&s, &e, "--rdzv_conf", "max_node_failures=5", "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.rdzv.max_node_failures, 5);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--max_node_failures", "2", "--rdzv_conf", "max_node_failures=5",
                           "prog", END),
                     0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.rdzv.max_node_failures, 2);
    launch_spec_free(&s);
    const char *const env[] = {"PET_MAX_NODE_FAILURES=3", NULL};
    assert_int_equal(parse_env(&s, &e, env, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.rdzv.max_node_failures, 3);
    launch_spec_free(&s);
    expect_bad("--max_node_failures", "1000001", "--max_node_failures: 1000001 is over 1000000");
    expect_bad("--max_node_failures", "-1", "--max_node_failures: '-1'");
}

static void test_health_flags(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    launch_argv_t prog = {.path = "/bin/true", .argv = (char *[]){"prog", NULL}, .argc = 1};
    agent_job_t job;
    assert_int_equal(parse(&s, &e, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_null(job.health_check);
    assert_int_equal(job.health_check_timeout_ms, 60000);
    assert_int_equal(job.gpu_health_check, 1);
    launch_spec_free(&s);

    assert_int_equal(parse(&s, &e, "--health-check", "test -w /scratch",
                           "--health_check_timeout=2.5", "--no_gpu_health_check", "prog", END),
                     0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_string_equal(job.health_check, "test -w /scratch");
    assert_int_equal(job.health_check_timeout_ms, 2500);
    assert_int_equal(job.gpu_health_check, 0);
    launch_spec_free(&s);

    const char *const env[] = {"PET_HEALTH_CHECK=nvidia-smi -q >/dev/null",
                               "PET_HEALTH_CHECK_TIMEOUT=9", "PET_NO_GPU_HEALTH_CHECK=1", NULL};
    assert_int_equal(parse_env(&s, &e, env, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_string_equal(job.health_check, "nvidia-smi -q >/dev/null");
    assert_int_equal(job.health_check_timeout_ms, 9000);
    assert_int_equal(job.gpu_health_check, 0);
    launch_spec_free(&s);

    expect_bad("--health_check", "", "--health_check: empty value");
    expect_bad("--health_check", "  ", "--health_check: empty value");
    expect_bad("--health_check_timeout", "abc",
               "--health_check_timeout: 'abc' is not a number of seconds");
    expect_bad("--health_check_timeout", "-1", "--health_check_timeout: '-1'");
    expect_bad("--health_check_timeout", "1e17", "--health_check_timeout: '1e17' is outside");
    assert_int_equal(parse(&s, &e, "--no_gpu_health_check=1", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--no_gpu_health_check takes no value");
    assert_int_equal(parse(&s, &e, "--health_check=true", "--health_check_timeout=0", "prog", END),
                     DDP_EUSAGE);
    assert_string_equal(e.text, "--health_check_timeout: 0 s leaves the check no time; give at "
                                "least 0.001");
    /* A bound for a command that is not there bounds nothing. */
    assert_int_equal(parse(&s, &e, "--health_check_timeout=5", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text,
                        "--health_check_timeout needs --health_check (it bounds that command)");
    const char *const pet_bad[] = {"PET_NO_GPU_HEALTH_CHECK=maybe", NULL};
    assert_int_equal(parse_env(&s, &e, pet_bad, "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "PET_NO_GPU_HEALTH_CHECK: 'maybe' is not 0 or 1"));
}

static void test_numeric_bounds(void **state) {
    (void)state;
    expect_bad("--shutdown_timeout", "1e17",
               "--shutdown_timeout: '1e17' is outside 0..2000000 seconds");
    expect_bad("--shutdown_timeout", "2000000.5", "is outside 0..2000000 seconds");
    expect_bad("--monitor_interval", "1e17",
               "--monitor_interval: '1e17' is outside 0..2000000 seconds");
    expect_bad("--shutdown_timeout", "1e999", "is outside 0..2000000 seconds");
    expect_bad("--shutdown_timeout", "0x10",
               "--shutdown_timeout: '0x10' is not a number of seconds");
    expect_bad("--shutdown_timeout", "inf", "--shutdown_timeout: 'inf' is not a number of seconds");
    expect_bad("--shutdown_timeout", "nan", "--shutdown_timeout: 'nan' is not a number of seconds");
    expect_bad("--shutdown_timeout", "5s", "--shutdown_timeout: '5s' is not a number of seconds");
    expect_bad("--shutdown_timeout", "", "--shutdown_timeout: '' is not a number of seconds");
    expect_bad("--rdzv_conf", "join_timeout=0x10", "join_timeout='0x10' is not a positive number");
    expect_bad("--rdzv_conf", "close_timeout=1e17",
               "close_timeout='1e17' is outside 0.001..2000000 seconds");
    expect_bad("--nnodes", "70000", "--nnodes: '70000' is out of range (1..65536)");
    expect_bad("--nnodes", "1:70000",
               "--nnodes: '1:70000' is out of range (MIN and MAX in 1..65536)");
    expect_bad("--nnodes", "1:99999999999999999999", "is out of range");
    expect_bad("--nnodes", "1:2x", "is not N or MIN:MAX");
    expect_bad("--nproc_per_node", "65537", "--nproc_per_node: '65537' is out of range (1..65536)");
    expect_bad("--nproc_per_node", "99999999999999999999", "is out of range (1..65536)");
    expect_bad("--nproc_per_node", "4x", "is not a number, gpu, cpu or auto");
    expect_bad("--max_restarts", "2147483648", "--max_restarts: '2147483648' is out of range");
    expect_bad("--max_restarts", "1.5", "--max_restarts: '1.5' is not a number");
    expect_bad("--master_port", "-1", "--master_port: '-1' is out of range (1..65535)");
    expect_bad("--master_port", "80x", "--master_port: '80x' is not a number");
    expect_bad("--rdzv_endpoint", "h:65536", "has a port that is not 0..65535");
    expect_bad("--rdzv_conf", "keep_alive_max_attempt=1e3", "is not a positive number");

    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--shutdown_timeout=0", "--monitor_interval=2e6", "x", END), 0);
    assert_true(s.shutdown_timeout == 0);
    assert_true(s.monitor_interval == 2000000);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--shutdown_timeout=2000000", "--nnodes=65536", "x", END), 0);
    assert_true(s.shutdown_timeout == 2000000);
    launch_spec_free(&s);
    const char *env[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e17", NULL};
    assert_int_equal(parse_env(&s, &e, env, "x", END), DDP_EUSAGE);
    assert_string_equal(e.text,
                        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '1e17' is outside 0..2000000 seconds");
}

static void test_combinations(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--nnodes=2", "--node_rank=2", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--node_rank: 2 is not below the node count 2");
    assert_int_equal(parse(&s, &e, "-m", "--no_python", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--module and --no_python"));
    assert_int_equal(parse(&s, &e, "--run_path", "-m", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--nnodes=2", "--node_rank=1", "x", END), 0);
    launch_spec_free(&s);
    /* One node (the default) has node rank 0 only, from the flag or PET_NODE_RANK. */
    assert_int_equal(parse(&s, &e, "--node_rank=5", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--node_rank: 5 is not below the node count 1");
    const char *pet[] = {"PET_NODE_RANK=1", NULL};
    assert_int_equal(parse_env(&s, &e, pet, "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--node_rank: 1 is not below the node count 1");
    assert_int_equal(parse(&s, &e, "--nnodes=1:3", "--node_rank=3", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--nnodes=1:3", "--node_rank=2", "x", END), 0);
    assert_int_equal(s.node_rank, 2);
    launch_spec_free(&s);
    /* Under Slurm the node count is derived later (launch_slurm_derive checks it then). */
    const char *slurm[] = {"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL};
    assert_int_equal(parse_env(&s, &e, slurm, "--node_rank=1", "x", END), 0);
    launch_spec_free(&s);
    /* A log directory that does not exist yet is fine when its nearest parent is writable. */
    assert_int_equal(parse(&s, &e, "--log_dir=/tmp/ddprun-no-such-dir/a/b/", "x", END), 0);
    assert_string_equal(s.log_dir, "/tmp/ddprun-no-such-dir/a/b/");
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--log_dir=relative/logs", "x", END), 0);
    launch_spec_free(&s);
}

static void test_standalone(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--nnodes=4", "--rdzv_backend=static", "--standalone",
                           "--nproc_per_node=2", "x", END),
                     0);
    assert_int_equal(s.standalone, 1);
    assert_string_equal(s.rdzv_backend, "c10d");
    assert_string_equal(s.rdzv_host, "localhost");
    assert_int_equal(s.rdzv_port, 0);
    assert_int_equal(s.min_nodes, 1);
    assert_int_equal(s.max_nodes, 1);
    assert_int_equal(strlen(s.rdzv_id), 36); /* uuid4 like torchrun */
    assert_int_equal(s.rdzv_id[14], '4');
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_RDZV_ENDPOINT));
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_NNODES));
    assert_true(LAUNCH_GIVEN(&s, LAUNCH_OPT_NODE_RANK));
    assert_int_equal(s.nproc_per_node, 2);
    launch_spec_free(&s);
}

static void test_endpoint_split(void **state) {
    (void)state;
    char *h;
    int p;
    ddp_err_t e = {0};
    assert_int_equal(launch_endpoint_split("--x", "[::1]:29400", &h, &p, &e), 0);
    assert_string_equal(h, "::1");
    assert_int_equal(p, 29400);
    free(h);
    assert_int_equal(launch_endpoint_split("--x", "node1", &h, &p, &e), 0);
    assert_string_equal(h, "node1");
    assert_int_equal(p, -1);
    free(h);
    assert_int_equal(launch_endpoint_split("--x", "[fe80::1]", &h, &p, &e), 0);
    assert_string_equal(h, "fe80::1");
    free(h);
    assert_int_equal(launch_endpoint_split("--x", "[::1]x", &h, &p, &e), DDP_EUSAGE);
    /* Hosts are names or addresses: what no host has is refused, named, and quoted escaped. */
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", "a b:1", &h, &p, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--x: 'a b:1' has a character no host name has (' ')");
    assert_null(h);
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", "a\x1b[2Jb", &h, &p, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--x: 'a\\e[2Jb' has a character no host name has (\\x1b)");
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", "[::1;x]:5", &h, &p, &e), DDP_EUSAGE);
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", "host/x:5", &h, &p, &e), DDP_EUSAGE);
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", "[fe80::1%eth0]:5", &h, &p, &e), 0);
    assert_string_equal(h, "fe80::1%eth0");
    free(h);
    assert_int_equal(launch_endpoint_split("--x", "node-1.cluster_a:5", &h, &p, &e), 0);
    free(h);
    char longhost[300];
    memset(longhost, 'a', 254);
    longhost[254] = '\0';
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_split("--x", longhost, &h, &p, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "has a host longer than 253 characters"));
}

/* A one-node c10d job does not use its endpoint, so it is checked instead of ignored: it must
 * resolve and be this machine (no name is looked up here: addresses only). */
static void test_one_node_endpoint(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    char addr[64];
    assert_int_equal(
        parse(&s, &e, "--rdzv_backend=c10d", "--rdzv_endpoint=192.0.2.1:29400", "x", END), 0);
    assert_int_equal(launch_endpoint_check(&s, addr, sizeof addr, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--rdzv_endpoint: '192.0.2.1' is not this machine; a one-node "
                                "job meets nobody there (set --nnodes)");
    launch_spec_free(&s);
    const char *pet[] = {"PET_RDZV_BACKEND=c10d", "PET_RDZV_ENDPOINT=127.0.0.1:5", NULL};
    assert_int_equal(parse_env(&s, &e, pet, "x", END), 0);
    ddp_err_clear(&e);
    assert_int_equal(launch_endpoint_check(&s, addr, sizeof addr, &e), 0);
    assert_string_equal(addr, "127.0.0.1");
    launch_spec_free(&s);
    /* Nothing to check: several nodes (agent_job_prepare's part), static, --standalone, none. */
    assert_int_equal(
        parse(&s, &e, "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=192.0.2.1", "x", END),
        0);
    assert_int_equal(launch_endpoint_check(&s, addr, sizeof addr, &e), 0);
    assert_string_equal(addr, "");
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--rdzv_endpoint=192.0.2.1", "x", END), 0);
    assert_int_equal(launch_endpoint_check(&s, addr, sizeof addr, &e), 0);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--standalone", "x", END), 0);
    assert_int_equal(launch_endpoint_check(&s, addr, sizeof addr, &e), 0);
    launch_spec_free(&s);
    /* --master_addr and --local_addr are hosts too (IPv6 without brackets, as torchrun). */
    assert_int_equal(parse(&s, &e, "--master_addr=::1", "--local_addr=10.0.0.2", "x", END), 0);
    launch_spec_free(&s);
    expect_bad("--master_addr", "a;b", "--master_addr: 'a;b' has a character no host name has");
    expect_bad("--local_addr", "a b", "--local_addr: 'a b' has a character no host name has");
}

/* Runs fn with stdout captured into buf. */
static void capture_stdout(void (*fn)(void *), void *arg, char *buf, size_t cap) {
    fflush(stdout);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    int saved = dup(STDOUT_FILENO);
    dup2(fileno(tmp), STDOUT_FILENO);
    fn(arg);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, cap - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static void run_usage(void *arg) {
    (void)arg;
    launch_usage();
}

/* -h and --version: 0 (not an error) with info_printed set, and nothing left to run. arg gets
 * 10 * (-h's verdict) + --version's, each 1 when as expected. */
static void run_help_parse(void *arg) {
    launch_spec_t s;
    ddp_err_t e;
    int h = parse(&s, &e, "--nnodes=2", (const char *)"-h", "x", END) == 0 && s.info_printed;
    launch_spec_free(&s);
    int v = parse(&s, &e, "--version", END) == 0 && s.info_printed;
    launch_spec_free(&s);
    *(int *)arg = h * 10 + v;
}

static void test_help(void **state) {
    (void)state;
    static char buf[16384];
    capture_stdout(run_usage, NULL, buf, sizeof buf);
    static const char *const needles[] = {
        "--nnodes",
        "--nproc_per_node",
        "--node_rank",
        "--standalone",
        "--rdzv_backend",
        "--rdzv_endpoint",
        "--rdzv_id",
        "--rdzv_conf",
        "--master_addr",
        "--master_port",
        "--local_addr",
        "--max_restarts",
        "--monitor_interval",
        "--signals_to_handle",
        "--shutdown_timeout",
        "--role",
        "--log_dir",
        "--redirects",
        "--tee",
        "--local_ranks_filter",
        "--log_line_prefix_template",
        "${role_name}",
        "--event_log_handler",
        "--duplicate_stdout_filters",
        "--duplicate_stderr_filters",
        "filtered_stdout.log",
        "--virtual_local_rank",
        "--logs_specs",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
        "--no_python",
        "--module",
        "--run_path",
        "--verbose",
        "--help",
        "--version",
        "default 1:1",
        "default 29500",
        "29400",
        "default 30",
        "PET_",
        "Exit codes",
        /* Every code ddprun returns (launcher/main.c's exit_code) and those of ddprun status. */
        "  0        every worker succeeded",
        "  1        the job failed",
        "  2        usage error",
        "  3        ddprun itself could not run the job",
        "126/127",
        "128+N",
        "ddprun status: 0 printed; 1 ",
        "2 usage error",
        "--timeout",
    };
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++) {
        if (strstr(buf, needles[i]) == NULL)
            print_error("help lacks '%s'\n", needles[i]);
        assert_non_null(strstr(buf, needles[i]));
    }
    int rc = -1;
    capture_stdout(run_help_parse, &rc, buf, sizeof buf);
    assert_int_equal(rc, 11); /* -h and --version: 0 with info_printed */
    assert_non_null(strstr(buf, "usage: ddprun"));
    assert_non_null(strstr(buf, "ddprun " DDPRUN_VERSION));
}

/* ---- launch_program_argv ------------------------------------------------------------------- */

static char tmpdir[64];
static char bindir[96];
static char oldcwd[4096];

static void write_file(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
}

static int prog_setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ddprun-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL || getcwd(oldcwd, sizeof oldcwd) == NULL)
        return -1;
    snprintf(bindir, sizeof bindir, "%s/bin", tmpdir);
    mkdir(bindir, 0755);
    char p[160];
    snprintf(p, sizeof p, "%s/python3", bindir);
    write_file(p, "#!/bin/sh\n", 0755);
    snprintf(p, sizeof p, "%s/noexec", bindir);
    write_file(p, "#!/bin/sh\n", 0644);
    if (chdir(tmpdir) != 0)
        return -1;
    write_file("train.py", "print(1)\n", 0644);
    write_file("exec.py", "#!/bin/sh\n", 0755);
    write_file("script", "#!/bin/sh\n", 0644);
    write_file("tool", "#!/bin/sh\n", 0755);
    write_file("data.txt", "x\n", 0644);
    mkdir("adir", 0755);
    char path[256];
    snprintf(path, sizeof path, "%s:/usr/bin:/bin", bindir);
    setenv("PATH", path, 1);
    unsetenv("PYTHON_EXEC");
    return 0;
}

static int prog_teardown(void **state) {
    (void)state;
    if (chdir(oldcwd) != 0)
        return -1;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Builds the worker argv for the given ddprun arguments; returns the launch_program_argv code. */
static int build(launch_argv_t *out, ddp_err_t *e, ...) {
    launch_spec_t s;
    va_list ap;
    va_start(ap, e);
    int rc = parse_v(&s, e, NULL, ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    rc = launch_program_argv(&s, out, e);
    launch_spec_free(&s);
    return rc;
}

static void expect_argv(const launch_argv_t *a, const char *path_suffix, ...) {
    va_list ap;
    va_start(ap, path_suffix);
    int i = 0;
    const char *want;
    while ((want = va_arg(ap, const char *)) != NULL) {
        assert_true(i < a->argc);
        assert_string_equal(a->argv[i], want);
        i++;
    }
    va_end(ap);
    assert_int_equal(a->argc, i);
    assert_null(a->argv[i]);
    size_t n = strlen(a->path), m = strlen(path_suffix);
    assert_true(n >= m);
    assert_string_equal(a->path + n - m, path_suffix);
}

static void test_argv_python(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "--nproc_per_node=2", "train.py", "--lr", "1", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "train.py", "--lr", "1", END);
    assert_true(a.path[0] == '/');
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "-m", "pkg.train", "x", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "-m", "pkg.train", "x", END);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--run_path", "script", "y", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "script", "y", END);
    launch_argv_free(&a);
    setenv("PYTHON_EXEC", "/bin/sh", 1);
    assert_int_equal(build(&a, &e, "train.py", END), 0);
    expect_argv(&a, "/bin/sh", "/bin/sh", "-u", "train.py", END);
    launch_argv_free(&a);
    setenv("PYTHON_EXEC", "python-missing-xyz", 1);
    assert_int_equal(build(&a, &e, "train.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "python interpreter 'python-missing-xyz' not found");
    unsetenv("PYTHON_EXEC");
}

/* The summary's title for the given ddprun arguments. */
static void expect_name(const char *want, ...) {
    launch_spec_t s;
    ddp_err_t e;
    va_list ap;
    va_start(ap, want);
    int rc = parse_v(&s, &e, NULL, ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    if (strcmp(launch_program_name(&s), want) != 0)
        print_error("name '%s', want '%s'\n", launch_program_name(&s), want);
    assert_string_equal(launch_program_name(&s), want);
    launch_spec_free(&s);
}

/* A Python worker is named by its script or module, whoever starts the interpreter. */
static void test_program_name(void **state) {
    (void)state;
    expect_name("train.py", "train.py", "--lr", "1", END);
    expect_name("pkg.train", "-m", "pkg.train", END);
    expect_name("train.py", "/opt/venv/bin/python", "train.py", "--lr", "1", END);
    expect_name("train.py", "--no_python", "python3", "-u", "train.py", END);
    expect_name("pkg.train", "--no_python", "python3.12", "-u", "-m", "pkg.train", "x", END);
    expect_name("pkg.train", "python3", "-mpkg.train", END);
    expect_name("pkg.train", "python3", "-uBm", "pkg.train", END);
    expect_name("t.py", "python3.13t", "-W", "ignore", "-X", "dev", "-Wd", "t.py", END);
    expect_name("t.py", "pypy3", "--check-hash-based-pycs", "never", "t.py", END);
    expect_name("-odd.py", "python", "--", "-odd.py", END);
    /* Nothing to name: the program stands. */
    expect_name("python3", "python3", "-c", "import os", END);
    expect_name("python3", "python3", "-", END);
    expect_name("python3", "python3", END);
    expect_name("python3", "python3", "--version", END);
    expect_name("./tool", "./tool", "train.py", END);
    expect_name("pythonic", "pythonic", "train.py", END);
    expect_name("/usr/bin/env", "/usr/bin/env", "python3", "t.py", END);
}

static void test_argv_direct(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "./tool", "a", END), 0);
    expect_argv(&a, "./tool", "./tool", "a", END);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "true", END), 0); /* bare name: searched in PATH */
    expect_argv(&a, "/bin/true", "true", END);
    assert_true(a.path[0] == '/');
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--no_python", "./exec.py", "z", END), 0);
    expect_argv(&a, "./exec.py", "./exec.py", "z", END);
    launch_argv_free(&a);
}

static void test_argv_missing(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "./trian", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './trian' not found");
    assert_null(a.argv);
    assert_int_equal(build(&a, &e, "no-such-program-xyz", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'no-such-program-xyz' not found");
    assert_int_equal(build(&a, &e, "tool", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "not found in PATH (use ./tool"));
    assert_int_equal(build(&a, &e, "noexec", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'noexec' found in PATH but not executable");
    assert_int_equal(build(&a, &e, "./data.txt", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './data.txt' is not executable");
    assert_int_equal(build(&a, &e, "./adir", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './adir' is a directory");
    assert_int_equal(build(&a, &e, "missing.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'missing.py' not found");
    assert_int_equal(build(&a, &e, "--no_python", "train.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'train.py' not found in PATH (use ./train.py for the "
                                "file here)");
}

/* A script whose #! interpreter is missing would fail at exec with ENOENT as if the script were
 * missing: the interpreter is named before anything starts. */
static void test_argv_interpreter(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    write_file("nointerp", "#!/nonexistent/python9 -u\nprint(1)\n", 0755);
    write_file("crlf", "#!/bin/sh\r\necho hi\r\n", 0755);
    write_file("empty", "#!  \n", 0755);
    write_file("dirinterp", "#!/tmp\n", 0755);
    assert_int_equal(build(&a, &e, "./nointerp", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './nointerp': its interpreter '/nonexistent/python9' (#! "
                                "line) not found");
    assert_int_equal(build(&a, &e, "./crlf", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './crlf': its interpreter '/bin/sh\\r' (#! line) not "
                                "found");
    assert_int_equal(build(&a, &e, "./empty", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "has a #! line without an interpreter"));
    assert_int_equal(build(&a, &e, "./dirinterp", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "'/tmp' (#! line) is not executable"));
    /* A working script and a binary pass. */
    assert_int_equal(build(&a, &e, "./tool", END), 0);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--no_python", "/bin/true", END), 0);
    launch_argv_free(&a);
}

/* A --log_dir that stat refuses is described by errno, not guessed at. */
static void test_log_dir_errno(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--log_dir=/etc/passwd/x/y", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--log_dir: '/etc/passwd/x/y' cannot be used: a component of the "
                                "path is not a directory");
}

/* A directory on the way that may not be searched: permission denied, as errno says. */
static void test_log_dir_eacces(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    if (geteuid() == 0) {
        skip(); /* root searches any directory: no EACCES to see */
        return;
    }
    char dir[64], val[96];
    snprintf(dir, sizeof dir, "/tmp/ddprun-noacc-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(val, sizeof val, "%s/sub/logs", dir);
    assert_int_equal(chmod(dir, 0), 0);
    int rc = parse(&s, &e, "--log_dir", val, "x", END);
    chmod(dir, 0700);
    rmdir(dir);
    assert_int_equal(rc, DDP_EUSAGE);
    assert_non_null(strstr(e.text, "cannot be used: permission denied"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_value_flags_all_spellings),
        cmocka_unit_test(test_bool_flags_all_spellings),
        cmocka_unit_test(test_virtual_local_rank_devices),
        cmocka_unit_test(test_run_id_rule),
        cmocka_unit_test(test_run_id_fresh),
        cmocka_unit_test(test_program_name),
        cmocka_unit_test(test_multinode_prepare),
        cmocka_unit_test(test_torch_env_defaults),
        cmocka_unit_test(test_prefix_render),
        cmocka_unit_test(test_duplicate_filters),
        cmocka_unit_test(test_nproc_kinds),
        cmocka_unit_test(test_nnodes_forms),
        cmocka_unit_test(test_short_flags),
        cmocka_unit_test(test_pet_precedence),
        cmocka_unit_test(test_program_boundary),
        cmocka_unit_test(test_unknown_and_prefix),
        cmocka_unit_test(test_bad_values_name_the_flag),
        cmocka_unit_test(test_completion_values_parse),
        cmocka_unit_test(test_numeric_bounds),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_standalone),
        cmocka_unit_test(test_endpoint_split),
        cmocka_unit_test(test_one_node_endpoint),
        cmocka_unit_test(test_help),
        cmocka_unit_test_setup_teardown(test_argv_python, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_direct, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_missing, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_interpreter, prog_setup, prog_teardown),
        cmocka_unit_test(test_log_dir_errno),
        cmocka_unit_test(test_log_dir_eacces),
        cmocka_unit_test(test_hang_flags),
        cmocka_unit_test(test_health_flags),
        cmocka_unit_test(test_max_node_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
