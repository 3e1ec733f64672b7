/* SPDX-License-Identifier: Apache-2.0
 * What a parsed command line must satisfy and what it implies, once every flag, PET_* variable
 * and torchrun variable is in (cli.c parses them): flags that only act together, --standalone's
 * rules, and the random run id of a run that names none. Each refusal is one line naming the
 * flag. */
#include "launch_spec.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "launch_int.h"
#include "launch_slurm.h"
#include "rdzv_proto.h"

/* A random rendezvous id like torchrun's uuid4 for --standalone. */
static void random_id(char out[37]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
        for (size_t i = 0; i < sizeof b; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[i] = (unsigned char)x;
        }
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* --standalone: one node hosting its own c10d store on a free local port (torchrun's rules). */
int launch__standalone_apply(launch_spec_t *spec) {
    char id[37];
    random_id(id);
    if (launch__str_set(&spec->rdzv_backend, "c10d") < 0 ||
        launch__str_set(&spec->rdzv_host, "localhost") < 0 ||
        launch__str_set(&spec->rdzv_id, id) < 0)
        return -ENOMEM;
    spec->rdzv_port = 0;
    spec->min_nodes = spec->max_nodes = 1;
    spec->node_rank = 0;
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_RDZV_BACKEND);
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_RDZV_ENDPOINT);
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_RDZV_ID);
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_NNODES);
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_NODE_RANK);
    return 0;
}

int launch_run_id_resolve(launch_spec_t *spec) {
    /* A run id that was given (even "none"), or one Slurm derived, is the job's own. torchrun
     * replaces a given one too, as under --standalone; a user who names the run means that name
     * (trackers and log collectors group by it). */
    if (spec->standalone || spec->max_nodes != 1 || LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ID) ||
        LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ENDPOINT) ||
        LAUNCH_GIVEN(spec, LAUNCH_OPT_MASTER_PORT) || spec->rdzv_id == NULL ||
        strcmp(spec->rdzv_id, "none") != 0 || spec->rdzv_backend == NULL ||
        strcmp(spec->rdzv_backend, "static") != 0)
        return 0;
    char id[37];
    random_id(id);
    return launch__str_set(&spec->rdzv_id, id) < 0 ? -ENOMEM : 1;
}

/* Hang detection's flags: a timeout the millisecond timer would round to 0, and flags that only
 * act with --heartbeat_timeout (0 turns hang detection off), which would be accepted and do
 * nothing. */
static int check_hang_flags(const launch_spec_t *spec, ddp_err_t *err) {
    if (spec->heartbeat_timeout > 0 && spec->heartbeat_timeout < LAUNCH_TIMER_RESOLUTION_S)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--heartbeat_timeout: %g s rounds to 0 ms, which turns hang detection "
                           "off; give 0 (off) or at least 0.001",
                           spec->heartbeat_timeout);
    if (spec->initial_heartbeat_timeout > 0 &&
        spec->initial_heartbeat_timeout < LAUNCH_TIMER_RESOLUTION_S)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--initial_heartbeat_timeout: %g s rounds to 0 ms (no time for a first "
                           "beat); give at least 0.001",
                           spec->initial_heartbeat_timeout);
    if (spec->heartbeat_timeout > 0)
        return 0;
    const char *flag = LAUNCH_GIVEN(spec, LAUNCH_OPT_INITIAL_HEARTBEAT_TIMEOUT)
                           ? "--initial_heartbeat_timeout"
                       : spec->heartbeat_on_output          ? "--heartbeat_on_output"
                       : spec->max_no_progress_restarts > 0 ? "--max_no_progress_restarts"
                                                            : NULL;
    if (flag != NULL)
        return ddp_err_set(err, DDP_EUSAGE,
                           "%s needs --heartbeat_timeout (without it hang detection is off and "
                           "%s does nothing)",
                           flag, flag);
    return 0;
}

/* The health check's bound: one the millisecond timer rounds to 0 would kill every check at
 * once, and a bound without a command bounds nothing (the GPU check has none). */
static int check_health_flags(const launch_spec_t *spec, ddp_err_t *err) {
    if (spec->health_check_timeout < LAUNCH_TIMER_RESOLUTION_S)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--health_check_timeout: %g s leaves the check no time; give at "
                           "least 0.001",
                           spec->health_check_timeout);
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_HEALTH_CHECK_TIMEOUT) && spec->health_check == NULL)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--health_check_timeout needs --health_check (it bounds that command)");
    return 0;
}

/* --max_node_failures is a field of every JOIN: past the store's bound the store would refuse
 * them all (--rdzv_conf's key is parsed with the same bound). */
static int check_node_failures(const launch_spec_t *spec, ddp_err_t *err) {
    if (spec->max_node_failures > RDZV_ROUND_MAX_RESTARTS)
        return ddp_err_set(err, DDP_EUSAGE, "--max_node_failures: %d is over %d",
                           spec->max_node_failures, RDZV_ROUND_MAX_RESTARTS);
    return 0;
}

/* Checks that need several flags at once. Under Slurm the node count may still come from
 * SLURM_* (launch_slurm_derive checks the node rank against it then); anywhere else both are
 * known here, and a node rank outside the job would start workers with RANK >= WORLD_SIZE. */
/* Straggler detection's bounds (the store refuses a report outside them), and flags that only
 * act with it on. */
static int check_straggler_flags(const launch_spec_t *spec, ddp_err_t *err) {
    if (spec->straggler_windows < 1 || spec->straggler_windows > LAUNCH_STRAGGLER_WINDOWS_MAX)
        return ddp_err_set(err, DDP_EUSAGE, "--straggler_windows: %d is not in 1..%d",
                           spec->straggler_windows, LAUNCH_STRAGGLER_WINDOWS_MAX);
    if (spec->straggler_window < LAUNCH_STRAGGLER_WINDOW_MIN_S ||
        spec->straggler_window > LAUNCH_STRAGGLER_WINDOW_MAX_S)
        return ddp_err_set(err, DDP_EUSAGE, "--straggler_window: %g s is not in %g..%g s",
                           spec->straggler_window, LAUNCH_STRAGGLER_WINDOW_MIN_S,
                           LAUNCH_STRAGGLER_WINDOW_MAX_S);
    if (spec->straggler_threshold == 0 && spec->straggler_exclude)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--straggler_action=exclude needs straggler detection "
                           "(--straggler_threshold 0 turns it off)");
    return 0;
}

int launch__check_combinations(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                               ddp_err_t *err) {
    if (spec->module && spec->no_python)
        return ddp_err_set(err, DDP_EUSAGE, "-m/--module and --no_python cannot be used together");
    if (spec->run_path != NULL && spec->no_python)
        return ddp_err_set(err, DDP_EUSAGE, "--run_path and --no_python cannot be used together");
    if (spec->run_path != NULL && spec->module)
        return ddp_err_set(err, DDP_EUSAGE, "--run_path and -m/--module cannot be used together");
    int rc = check_hang_flags(spec, err);
    if (rc < 0 || (rc = check_health_flags(spec, err)) < 0 ||
        (rc = check_node_failures(spec, err)) < 0 || (rc = check_straggler_flags(spec, err)) < 0)
        return rc;
    int many = spec->hostfile != NULL || spec->hosts != NULL;
    if (spec->hostfile != NULL && spec->hosts != NULL)
        return ddp_err_set(err, DDP_EUSAGE, "--hostfile and --hosts cannot be used together");
    if (!many && (spec->include != NULL || spec->exclude != NULL))
        return ddp_err_set(err, DDP_EUSAGE, "--%s filters the hosts of --hostfile or --hosts",
                           spec->include != NULL ? "include" : "exclude");
    if (!many && (spec->n_env > 0 || spec->env_policy_none))
        return ddp_err_set(err, DDP_EUSAGE,
                           "-x and --env_policy are for the hosts of --hostfile or --hosts");
    if (!many && spec->remote_ddprun != NULL)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--remote_ddprun is for the hosts of --hostfile or --hosts");
    if (many && spec->ssh_session != NULL)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--ssh_session is for the hosts' agents, which take "
                           "no --hostfile or --hosts");
    if (many && spec->standalone)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--standalone is one node; --hostfile and --hosts "
                           "are several");
    if (many && LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK))
        return ddp_err_set(err, DDP_EUSAGE,
                           "--node_rank: with --hostfile or --hosts each host's "
                           "rank is its place in the list");
    if (spec->node_rank >= spec->max_nodes &&
        (LAUNCH_GIVEN(spec, LAUNCH_OPT_NNODES) ||
         (!launch_slurm_detect(getenv_fn, ctx) && !launch__k8s_sets_nnodes(getenv_fn, ctx))))
        return ddp_err_set(err, DDP_EUSAGE, "--node_rank: %d is not below the node count %d",
                           spec->node_rank, spec->max_nodes);
    return 0;
}
