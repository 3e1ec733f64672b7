/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/cli.c: every torchrun flag in both spellings and both value forms,
 * --nproc_per_node and --nnodes forms, short flags, PET_* precedence, where the program starts,
 * unknown flags and prefixes, the completion script's values, the flags that act together,
 * --standalone, endpoints and the help text. The values' checks are test_launch_cli_values.c's,
 * the job a parse leads to test_launch_cli_job.c's, the worker argv test_launch_cli_program.c's. */
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
    assert_int_equal(s.given[0] | s.given[1], 0);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_value_flags_all_spellings),
        cmocka_unit_test(test_bool_flags_all_spellings),
        cmocka_unit_test(test_nproc_kinds),
        cmocka_unit_test(test_nnodes_forms),
        cmocka_unit_test(test_short_flags),
        cmocka_unit_test(test_pet_precedence),
        cmocka_unit_test(test_program_boundary),
        cmocka_unit_test(test_unknown_and_prefix),
        cmocka_unit_test(test_completion_values_parse),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_standalone),
        cmocka_unit_test(test_endpoint_split),
        cmocka_unit_test(test_one_node_endpoint),
        cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
