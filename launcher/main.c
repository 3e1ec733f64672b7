/* SPDX-License-Identifier: Apache-2.0
 * ddprun: parse the command line (and PET_* / SLURM_* environment), resolve the worker count, the
 * program to exec and the job, then hand the job to the agent. Every usage error is found before
 * the agent starts and exits 2 with one line; the exit code is decided here, once. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "ddp_buf.h"
#include "ddp_log.h"
#include "launch_int.h"
#include "launch_k8s.h"
#include "launch_report.h"
#include "launch_slurm.h"
#include "launch_spec.h"
#include "launch_ssh.h"
#include "launch_status.h"

/* ddprun's exit codes (--help, docs/cli.md). 126/127 and 128+N come from the job's end. */
enum {
    EXIT_OK = 0,
    EXIT_JOB_FAILED = 1,
    EXIT_USAGE = 2,
    EXIT_INTERNAL = 3,
    EXIT_NODE_UNFIT = LAUNCH_EXIT_NODE_UNFIT
};

/* The most ranks one job may have: WORLD_SIZE and every RANK are ints for the agent and for
 * PyTorch. --nnodes and --nproc_per_node are each bounded (65536), their product is not. */
#define LAUNCH_WORLD_SIZE_MAX INT_MAX

/* Prints "ddprun: <message>" and returns the usage exit code. */
static int usage_error(const ddp_err_t *err, int rc) {
    fprintf(stderr, "ddprun: %s\n", err->text[0] ? err->text : ddp_strerror(rc));
    return EXIT_USAGE;
}
/* Opens /dev/null on whichever of fds 0-2 is closed. Returns 0, or -1 when that fails. */
static int std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0)
            continue;
        /* The lowest free number: fd itself, since the ones below it are open. */
        int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got != fd) {
            if (got >= 0)
                close(got);
            return -1;
        }
    }
    return 0;
}

/* The exit code for agent_run's return rc and the job's end res: the agent's own failure (2 for a
 * setting the machine refuses, else 3), then how the job ended. */
static int exit_code(int rc, const agent_result_t *res) {
    if (rc < 0)
        return rc == DDP_EUSAGE ? EXIT_USAGE : EXIT_INTERNAL;
    if (res->exec_errno != 0)
        return res->exec_errno == ENOENT ? 127 : 126;
    if (res->signal != 0)
        return 128 + res->signal;
    if (res->unfit)
        return EXIT_NODE_UNFIT;
    return res->failed ? EXIT_JOB_FAILED : EXIT_OK;
}

/* -v on the command line raises the log level (DDPRUN_LOG_LEVEL may have raised it further). */
static void verbosity_apply(int verbose) {
    if (verbose > 0 && ddp_log_level() < DDP_LOG_INFO + verbose - 1)
        ddp_log_set_level(DDP_LOG_INFO + verbose - 1);
}

/* Slurm derivation (a no-op outside Slurm); -v prints what was derived from which variable.
 * Returns 0 or a usage error in err. */
static int slurm_apply(launch_spec_t *spec, ddp_err_t *err) {
    launch_slurm_t slurm;
    memset(&slurm, 0, sizeof slurm);
    int rc = launch_slurm_derive(spec, NULL, NULL, &slurm, err);
    if (rc == 0 && slurm.detected && spec->verbose > 0) {
        ddp_buf_t b = DDP_BUF_INIT;
        if (launch_slurm_describe(&slurm, &b) == 0 && b.len > 0)
            fprintf(stderr, "%s", (char *)b.data);
        ddp_buf_free(&b);
    }
    if (rc < 0 || slurm.detected)
        return rc;
    /* In a Kubernetes pod: PyTorchJob's and Indexed Jobs' variables, the same way. */
    launch_k8s_t k8s;
    rc = launch_k8s_derive(spec, NULL, NULL, &k8s, err);
    if (rc == 0 && k8s.detected && spec->verbose > 0) {
        ddp_buf_t b = DDP_BUF_INIT;
        if (launch_k8s_describe(&k8s, &b) == 0 && b.len > 0)
            fprintf(stderr, "%s", (char *)b.data);
        ddp_buf_free(&b);
    }
    return rc;
}

/* Parses, derives and resolves everything up to a prepared job; every failure here is a usage
 * error (err says which flag). On success free prog and the job's token. */
static int job_resolve(launch_spec_t *spec, launch_argv_t *prog, agent_job_t *job, ddp_err_t *err) {
    char ep_addr[64];
    int rc = slurm_apply(spec, err);
    if (rc == 0 && (rc = launch_run_id_resolve(spec)) > 0) {
        DDP_INFO("one node, no --rdzv_endpoint or --master_port: run id %s, a fresh one for each "
                 "run (as torchrun; --rdzv_id names the run)",
                 spec->rdzv_id);
        rc = 0;
    }
    if (rc == 0 && (rc = launch_endpoint_check(spec, ep_addr, sizeof ep_addr, err)) == 0 &&
        ep_addr[0] != '\0')
        DDP_INFO("--rdzv_endpoint %s:%d (%s) is this machine; a one-node job hosts its own store",
                 spec->rdzv_host, spec->rdzv_port > 0 ? spec->rdzv_port : AGENT_DEFAULT_C10D_PORT,
                 ep_addr);
    if (rc == 0)
        rc = launch_nproc_resolve(spec, err);
    /* Checked once the count is known (gpu, cpu and auto resolve only now), against the largest
     * group the job may form. */
    if (rc == 0 && (long long)spec->max_nodes * spec->nproc_per_node > LAUNCH_WORLD_SIZE_MAX)
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "--nnodes (max %d) x --nproc_per_node (%d) is %lld ranks; the world size "
                         "is at most %d",
                         spec->max_nodes, spec->nproc_per_node,
                         (long long)spec->max_nodes * spec->nproc_per_node, LAUNCH_WORLD_SIZE_MAX);
    if (rc == 0)
        rc = launch_numa_setup(spec, err);
    if (rc == 0)
        rc = launch_program_argv(spec, prog, err);
    if (rc < 0)
        return rc;
    launch_job_build(spec, prog, NULL, NULL, job);
    if (strncmp(spec->event_log_handler, "json", 4) == 0) {
        /* Opened here, so that a path that cannot be written is a usage error. */
        const char *path = spec->event_log_handler[4] == ':' ? spec->event_log_handler + 5 : NULL;
        job->event_log_on = 1;
        job->event_log_fd = path ? agent_event_log_open(path, err) : 2;
        if (job->event_log_fd < 0) {
            launch_argv_free(prog);
            return job->event_log_fd;
        }
    }
    if ((rc = agent_job_prepare(job, err)) < 0)
        launch_argv_free(prog);
    return rc;
}

int main(int argc, char **argv) {
    /* Started with stderr (or stdout) closed, ddprun would hand that number to its first pipe or
     * its event loop's epoll fd, then log into it: libuv aborted on the result. */
    if (std_fds_open() < 0)
        return EXIT_INTERNAL;
    ddp_log_init("agent", DDP_LOG_WARN);
    if (argc > 1 && strcmp(argv[1], "status") == 0)
        return launch_status_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "report") == 0)
        return launch_report_main(argc - 1, argv + 1);
    launch_spec_t spec;
    launch_argv_t prog;
    agent_job_t job;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = launch_cli_parse(argc, argv, &spec, &err);
    if (rc == 0 && spec.info_printed) {
        if (spec.print_completion)
            launch_completion_bash(stdout);
        launch_spec_free(&spec); /* --help, --version, --print_completion */
        return EXIT_OK;
    }
    if (rc == 0)
        verbosity_apply(spec.verbose);
    if (rc == 0 && spec.print_topology) { /* no job: what each --numa_binding mode would give */
        if ((rc = launch_nproc_resolve(&spec, &err)) == 0)
            rc = launch_numa_print(&spec, stdout, &err);
        launch_spec_free(&spec);
        return rc < 0 ? usage_error(&err, rc) : EXIT_OK;
    }
    if (rc == 0 && (spec.hostfile != NULL || spec.hosts != NULL)) {
        /* Many hosts: an agent on each, started over ssh; this process only relays and waits. */
        rc = launch_ssh_run(&spec, argv, &err);
        launch_spec_free(&spec);
        return rc < 0 ? usage_error(&err, rc) : rc;
    }
    launch_ssh_session_t session = {.fd = -1};
    if (rc == 0 && spec.ssh_session != NULL)
        rc = launch_ssh_session_begin(&spec, &session, &err);
    if (rc < 0 || (rc = job_resolve(&spec, &prog, &job, &err)) < 0) {
        launch_spec_free(&spec);
        return usage_error(&err, rc);
    }
    if (spec.ssh_session != NULL)
        launch_ssh_session_apply(&session, &job);
    agent_result_t res;
    rc = agent_run(&job, &res);
    agent_job_release(&job);
    launch_argv_free(&prog);
    launch_spec_free(&spec);
    return exit_code(rc, &res);
}
