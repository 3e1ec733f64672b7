/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for the values of launcher/cli.c's flags (cli_values.c): bad values naming the flag,
 * the hang flags, --max_node_failures, the health check flags, every number's bound, and a
 * --log_dir that cannot be used. */
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

static void test_bad_values_name_the_flag(void **state) {
    (void)state;
    expect_bad("--nproc_per_node", "x", "--nproc_per_node: 'x' is not a number, gpu, cpu or auto");
    expect_bad("--nproc-per-node", "0", "--nproc-per-node: '0' is out of range");
    expect_bad("--node_rank", "-1", "--node_rank: '-1'");
    expect_bad("--rdzv_backend", "etcd3", "--rdzv_backend: 'etcd3' is not a rendezvous backend");
    expect_bad("--rdzv_endpoint", "a:1,b:99999", "--rdzv_endpoint: 'b:99999' has a port");
    expect_bad("--rdzv_endpoint", "a:1,,", "--rdzv_endpoint: 'a:1,,'");
    expect_bad("--rdzv_conf", "lease_ttl=1", "--rdzv_conf: lease_ttl='1' is not a number");
    expect_bad("--rdzv_conf", "lease_ttl=601", "--rdzv_conf: lease_ttl='601'");
    expect_bad("--rdzv_conf", "etcd_prefix=x", "--rdzv_conf: etcd_prefix='x' must start with '/'");
    expect_bad("--rdzv_conf", "etcd_prefix=/x/", "--rdzv_conf: etcd_prefix='/x/'");
    expect_bad("--rdzv_conf", "etcd_key=", "--rdzv_conf: etcd_key='' is empty");
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

/* --timestamp_output: off by default; both spellings and PET_TIMESTAMP_OUTPUT turn it on and it
 * reaches the agent; a value on the command line, or a PET_ value not 0/1, is refused naming it. */
static void test_timestamp_output(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    launch_argv_t prog = {.path = "/bin/true", .argv = (char *[]){"prog", NULL}, .argc = 1};
    agent_job_t job;
    assert_int_equal(parse(&s, &e, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_int_equal(job.timestamp_output, 0);
    launch_spec_free(&s);
    const char *const spellings[] = {"--timestamp_output", "--timestamp-output"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(parse(&s, &e, spellings[i], "prog", END), 0);
        launch_job_build(&s, &prog, fake_env, NULL, &job);
        assert_int_equal(job.timestamp_output, 1);
        launch_spec_free(&s);
    }
    const char *const on[] = {"PET_TIMESTAMP_OUTPUT=1", NULL};
    assert_int_equal(parse_env(&s, &e, on, "prog", END), 0);
    assert_int_equal(s.timestamp_output, 1);
    launch_spec_free(&s);
    const char *const off[] = {"PET_TIMESTAMP_OUTPUT=0", NULL};
    assert_int_equal(parse_env(&s, &e, off, "prog", END), 0);
    assert_int_equal(s.timestamp_output, 0);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--timestamp_output=maybe", "prog", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--timestamp_output takes no value");
    const char *const bad[] = {"PET_TIMESTAMP_OUTPUT=maybe", NULL};
    assert_int_equal(parse_env(&s, &e, bad, "prog", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "PET_TIMESTAMP_OUTPUT: 'maybe' is not 0 or 1"));
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

/* Straggler detection's flags: defaults, values, PET_* spellings, and what is refused. */
static void test_straggler_flags(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    launch_argv_t prog = {.path = "/bin/true", .argv = (char *[]){"prog", NULL}, .argc = 1};
    agent_job_t job;
    assert_int_equal(parse(&s, &e, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_true(job.straggler_threshold == 1.2);
    assert_int_equal(job.straggler_windows, 3);
    assert_int_equal(job.straggler_window_ms, 5000);
    assert_int_equal(job.straggler_exclude, 0);
    launch_spec_free(&s);

    assert_int_equal(parse(&s, &e, "--straggler_threshold", "1.5", "--straggler-windows=4",
                           "--straggler_window", "0.5", "--straggler_action", "exclude", "prog",
                           END),
                     0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_true(job.straggler_threshold == 1.5);
    assert_int_equal(job.straggler_windows, 4);
    assert_int_equal(job.straggler_window_ms, 500);
    assert_int_equal(job.straggler_exclude, 1);
    launch_spec_free(&s);

    const char *const env[] = {"PET_STRAGGLER_THRESHOLD=0", "PET_STRAGGLER_ACTION=warn", NULL};
    assert_int_equal(parse_env(&s, &e, env, "prog", END), 0);
    launch_job_build(&s, &prog, fake_env, NULL, &job);
    assert_true(job.straggler_threshold == 0);
    launch_spec_free(&s);

    expect_bad("--straggler_threshold", "1", "--straggler_threshold: '1' is not 0 (off)");
    expect_bad("--straggler_threshold", "1.2x", "--straggler_threshold: '1.2x'");
    expect_bad("--straggler_threshold", "nan", "--straggler_threshold: 'nan'");
    expect_bad("--straggler_action", "kill", "--straggler_action: 'kill' is not warn or exclude");
    expect_bad("--straggler_windows", "0", "--straggler_windows: 0 is not in 1..1000");
    expect_bad("--straggler_window", "0.01", "--straggler_window: 0.01 s is not in");
    assert_int_equal(
        parse(&s, &e, "--straggler_threshold", "0", "--straggler_action", "exclude", "prog", END),
        DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--straggler_action=exclude needs straggler detection"));
    launch_spec_free(&s);
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

/* Every number has a bound named in its message: durations become int64 milliseconds and a
 * timer (1e17 s overflowed into one that fired at once), counts become ints. */
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
        cmocka_unit_test(test_bad_values_name_the_flag),
        cmocka_unit_test(test_numeric_bounds),
        cmocka_unit_test(test_log_dir_errno),
        cmocka_unit_test(test_log_dir_eacces),
        cmocka_unit_test(test_hang_flags),
        cmocka_unit_test(test_timestamp_output),
        cmocka_unit_test(test_health_flags),
        cmocka_unit_test(test_straggler_flags),
        cmocka_unit_test(test_max_node_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
