/* SPDX-License-Identifier: Apache-2.0
 * launch_job_build: the launcher's parse result (launch_spec_t) resolved into the job the agent
 * runs (agent_job_t): the rendezvous endpoint of the chosen backend with its default port,
 * durations in milliseconds, and the visible-device list in use. */
#include "launch_spec.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ddp_addr.h"
#include "ddp_devices.h"

/* Seconds (already range-checked by the parser) as int64 milliseconds. */
static int64_t ms(double s) {
    return (int64_t)(s * 1000.0);
}

static void rdzv_opts_build(const launch_rdzv_conf_t *c, agent_rdzv_opts_t *o) {
    o->join_timeout_ms = ms(c->join_timeout);
    o->last_call_timeout_ms = ms(c->last_call_timeout);
    o->close_timeout_ms = ms(c->close_timeout);
    o->keep_alive_interval_ms = ms(c->keep_alive_interval);
    o->keep_alive_max_attempt = c->keep_alive_max_attempt;
    o->read_timeout_ms = ms(c->read_timeout);
    o->is_host = c->is_host;
    o->store_reconnect_timeout_ms = ms(c->store_reconnect_timeout);
    o->max_node_failures = c->max_node_failures;
}

/* The rendezvous endpoint: static meets at --master_addr:--master_port, c10d at
 * --rdzv_endpoint; a port that is absent (or 0) is the backend's default. */
static void endpoint_build(const launch_spec_t *spec, agent_job_t *job) {
    if (job->backend == AGENT_RDZV_STATIC) {
        job->rdzv_host = spec->master_addr;
        job->rdzv_port = spec->master_port > 0 ? spec->master_port : AGENT_DEFAULT_MASTER_PORT;
    } else {
        job->rdzv_host = spec->rdzv_host;
        job->rdzv_port = spec->rdzv_port > 0 ? spec->rdzv_port : AGENT_DEFAULT_C10D_PORT;
    }
}

/* The etcd backend: --rdzv_endpoint's members and --rdzv_conf's etcd keys (the credentials come
 * from the environment, read by the agent). */
static void etcd_opts_build(const launch_spec_t *spec, agent_job_t *job) {
    const launch_rdzv_conf_t *c = &spec->rdzv_opts;
    job->etcd.endpoints = spec->etcd_endpoints;
    job->etcd.prefix = c->etcd_prefix;
    job->etcd.lease_ttl_s = c->lease_ttl;
    job->etcd.cacert = c->etcd_cacert[0] ? c->etcd_cacert : NULL;
    job->etcd.cert = c->etcd_cert[0] ? c->etcd_cert : NULL;
    job->etcd.key = c->etcd_key[0] ? c->etcd_key : NULL;
    job->etcd.follow_only = !c->etcd_agents_campaign;
    job->etcd.candidates = c->etcd_candidates;
    job->etcd.stores = c->etcd_stores[0] ? c->etcd_stores : NULL;
}

/* Hang detection: the initial timeout defaults to a multiple of the heartbeat timeout, capped so
 * that it stays a valid libuv timer like every other duration. */
static void hang_opts_build(const launch_spec_t *spec, agent_job_t *job) {
    job->heartbeat_timeout_ms = ms(spec->heartbeat_timeout);
    double initial = spec->initial_heartbeat_timeout;
    if (initial < 0)
        initial = spec->heartbeat_timeout * LAUNCH_INITIAL_HEARTBEAT_FACTOR;
    if (initial > LAUNCH_DURATION_MAX_S)
        initial = LAUNCH_DURATION_MAX_S;
    job->initial_heartbeat_timeout_ms = ms(initial);
    job->heartbeat_on_output = spec->heartbeat_on_output;
    job->stacks_timeout_ms = ms(spec->stacks_timeout);
    job->max_no_progress_restarts = spec->max_no_progress_restarts;
    job->gpu_memory_reclaim_timeout_ms = ms(spec->gpu_memory_reclaim_timeout);
    job->straggler_threshold = spec->straggler_threshold;
    job->straggler_windows = spec->straggler_windows;
    job->straggler_window_ms = ms(spec->straggler_window);
    job->straggler_exclude = spec->straggler_exclude;
    job->health_check = spec->health_check;
    job->health_check_timeout_ms = ms(spec->health_check_timeout);
    job->gpu_health_check = !spec->no_gpu_health_check;
}

void launch_job_build(const launch_spec_t *spec, const launch_argv_t *prog,
                      launch_getenv_fn getenv_fn, void *ctx, agent_job_t *job) {
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    memset(job, 0, sizeof *job);
    job->min_nodes = spec->min_nodes;
    job->max_nodes = spec->max_nodes;
    /* Slurm derives node_rank without marking it given: any rank above 0 was asked for. */
    job->node_rank =
        LAUNCH_GIVEN(spec, LAUNCH_OPT_NODE_RANK) || spec->node_rank > 0 ? spec->node_rank : -1;
    job->nproc = spec->nproc_per_node;
    job->max_restarts = spec->max_restarts;
    job->role = spec->role;
    job->run_id = spec->rdzv_id;
    job->backend =
        spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "static") == 0 ? AGENT_RDZV_STATIC
        : spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "etcd") == 0 ? AGENT_RDZV_ETCD
                                                                                : AGENT_RDZV_C10D;
    endpoint_build(spec, job);
    etcd_opts_build(spec, job);
    rdzv_opts_build(&spec->rdzv_opts, &job->rdzv);
    /* The flag wins over --rdzv_conf's key of the same name. */
    if (LAUNCH_GIVEN(spec, LAUNCH_OPT_MAX_NODE_FAILURES))
        job->rdzv.max_node_failures = spec->max_node_failures;
    job->master_addr = spec->master_addr;
    /* --standalone never uses 29500: a free port, so that jobs on one machine never race. */
    job->master_port = spec->standalone ? -1 : spec->master_port;
    job->local_addr = spec->local_addr;
    job->log_dir = spec->log_dir;
    job->redirects = spec->redirects;
    job->tee = spec->tee;
    job->ranks_shown = spec->local_ranks_filter;
    job->n_ranks_shown = spec->n_local_ranks_filter;
    job->timestamp_output = spec->timestamp_output;
    job->prefix_template = spec->log_line_prefix_template;
    job->dup_stdout_filters = spec->dup_stdout_filters;
    job->dup_stderr_filters = spec->dup_stderr_filters;
    memcpy(job->signals, spec->signals, sizeof job->signals);
    job->n_signals = spec->n_signals;
    job->shutdown_timeout_ms = ms(spec->shutdown_timeout);
    job->virtual_local_rank = spec->virtual_local_rank;
    job->worker_store_own = spec->worker_store_own;
    job->metrics_host = spec->metrics_host;
    job->metrics_port = spec->metrics_port;
    if (spec->numa_binding != LAUNCH_NUMA_OFF && spec->bind_cpus != NULL) {
        job->bind_cpus = spec->bind_cpus;
        job->bind_mems = spec->bind_mems;
        job->bind_cpus_text = spec->bind_cpus_text;
        job->bind_nodes_text = spec->bind_nodes_text;
    }
    job->devices = ddp_devices_select(getenv_fn(ctx, "HIP_VISIBLE_DEVICES"),
                                      getenv_fn(ctx, "CUDA_VISIBLE_DEVICES"), &job->devices_var);
    hang_opts_build(spec, job);
    job->path = prog->path;
    job->argv = prog->argv;
    /* The summary names the user's program (the script, not python3), as torchrun does. */
    job->prog_name = spec->prog_argc > 0 ? launch_program_name(spec) : prog->argv[0];
}

int launch_endpoint_check(const launch_spec_t *spec, char *addr, size_t cap, ddp_err_t *err) {
    if (cap > 0)
        addr[0] = '\0';
    /* Several nodes: agent_job_prepare resolves the endpoint they meet at. An endpoint derived
     * from Slurm or forced by --standalone is this machine's by construction. */
    if (spec->max_nodes > 1 || spec->standalone || spec->rdzv_host == NULL ||
        !LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ENDPOINT) || spec->rdzv_backend == NULL ||
        strcmp(spec->rdzv_backend, "c10d") != 0)
        return 0;
    ddp_err_t why;
    ddp_err_clear(&why);
    if (ddp_addr_resolve(spec->rdzv_host, addr, cap, &why) < 0)
        return ddp_err_set(err, DDP_EUSAGE, "--rdzv_endpoint: %s", why.text);
    /* A one-node job hosts its own store: an endpoint elsewhere would never be contacted, and
     * a job meant to meet others there would run alone without a word. */
    if (!ddp_addr_is_local(addr)) {
        char shown[DDP_ADDR_MAX + 4] = "";
        if (strcmp(addr, spec->rdzv_host) != 0)
            snprintf(shown, sizeof shown, " (%s)", addr);
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_endpoint: '%.48s'%s is not this machine; a one-node job "
                           "meets nobody there (set --nnodes)",
                           spec->rdzv_host, shown);
    }
    return 0;
}
