/* The per-node agent: hosts the job's store, forks and supervises the workers, restarts the
 * group on failure and prints the failure summary. */
#ifndef AGENT_H
#define AGENT_H

#include "launch_spec.h"

/* Exit codes of ddprun (documented in --help and the README). */
enum {
    AGENT_EXIT_OK = 0,
    AGENT_EXIT_JOB_FAILED = 1,
    AGENT_EXIT_USAGE = 2,
    AGENT_EXIT_INTERNAL = 3,
};

/* Runs the job described by spec, workers exec'ing path (resolved, so that no search happens after
 * fork) with worker_argv (argv[0] as the user gave it, as torchrun passes it), until it succeeds,
 * fails for good or is stopped by a signal. Returns ddprun's exit code: 0, 1 (job failed, summary
 * printed), 3 (agent could not start: message logged), or 128+N after signal N. */
int agent_run(const launch_spec_t *spec, const char *path, char *const *worker_argv);

#endif
