/* ddprun: parse the command line (and PET_* / SLURM_* environment), resolve the worker count and
 * the program to exec, then hand the job to the agent. Usage errors exit 2 with one line. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "ddp_buf.h"
#include "ddp_log.h"
#include "launch_slurm.h"
#include "launch_spec.h"
#include "launch_status.h"

/* Prints "ddprun: <message>" and returns the usage exit code. */
static int usage_error(const ddp_err_t *err, int rc) {
    fprintf(stderr, "ddprun: %s\n", err->text[0] ? err->text : ddp_strerror(rc));
    return AGENT_EXIT_USAGE;
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

int main(int argc, char **argv) {
    /* Started with stderr (or stdout) closed, ddprun would hand that number to its first pipe or
     * its event loop's epoll fd, then log into it: libuv aborted on the result. */
    if (std_fds_open() < 0)
        return AGENT_EXIT_INTERNAL;
    ddp_log_init("agent", DDP_LOG_WARN);
    if (argc > 1 && strcmp(argv[1], "status") == 0)
        return launch_status_main(argc - 1, argv + 1);
    launch_spec_t spec;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = launch_cli_parse(argc, argv, &spec, &err);
    if (rc == 1)
        return 0; /* --help or --version */
    if (rc < 0)
        return usage_error(&err, rc);
    if (spec.verbose > 0 && ddp_log_level() < DDP_LOG_INFO + spec.verbose - 1)
        ddp_log_set_level(DDP_LOG_INFO + spec.verbose - 1);

    launch_slurm_t slurm;
    memset(&slurm, 0, sizeof slurm);
    if ((rc = launch_slurm_derive(&spec, NULL, NULL, &slurm, &err)) < 0)
        goto usage;
    if (slurm.detected && spec.verbose > 0) {
        ddp_buf_t b = DDP_BUF_INIT;
        if (launch_slurm_describe(&slurm, &b) == 0 && b.len > 0)
            fprintf(stderr, "%s", (char *)b.data);
        ddp_buf_free(&b);
    }
    if ((rc = launch_nproc_resolve(&spec, &err)) < 0)
        goto usage;
    launch_argv_t prog;
    if ((rc = launch_program_argv(&spec, &prog, &err)) < 0)
        goto usage;
    rc = agent_run(&spec, prog.path, prog.argv);
    launch_argv_free(&prog);
    launch_spec_free(&spec);
    return rc;

usage:
    launch_spec_free(&spec);
    return usage_error(&err, rc);
}
