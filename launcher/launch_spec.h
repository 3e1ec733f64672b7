/* launch_spec_t: everything the command line (and PET_* / SLURM_* environment) says about a job,
 * produced by launch_cli_parse (launcher/cli.c) and consumed by the agent (agent/agent.c). */
#ifndef LAUNCH_SPEC_H
#define LAUNCH_SPEC_H

#include <stddef.h>

#include "ddp_err.h"

#define LAUNCH_MAX_SIGNALS 16
#define LAUNCH_MAX_STD_OVERRIDES 64

/* Which streams of a worker go to a file (--redirects) or to file and console (--tee). */
enum { LAUNCH_STD_NONE = 0, LAUNCH_STD_OUT = 1, LAUNCH_STD_ERR = 2, LAUNCH_STD_ALL = 3 };

/* "-r 3" or "-r 0:1,1:2": a default mask and per-local-rank overrides. */
typedef struct launch_std_map {
    int dflt;
    int n;
    int rank[LAUNCH_MAX_STD_OVERRIDES];
    int mask[LAUNCH_MAX_STD_OVERRIDES];
} launch_std_map_t;

typedef enum {
    LAUNCH_NPROC_NUM = 0, /* nproc_per_node holds the number */
    LAUNCH_NPROC_GPU,     /* one per visible CUDA device; error when there is none */
    LAUNCH_NPROC_CPU,     /* one per CPU */
    LAUNCH_NPROC_AUTO,    /* GPUs when there are some, else CPUs */
} launch_nproc_kind_t;

typedef struct launch_spec {
    int min_nodes, max_nodes;        /* --nnodes N or MIN:MAX; default 1:1 */
    int node_rank;                   /* --node_rank; default 0 */
    launch_nproc_kind_t nproc_kind;  /* --nproc_per_node kind */
    int nproc_per_node;              /* resolved count (launch_nproc_resolve fills it) */
    char *rdzv_backend;              /* "static" (default), "c10d" */
    char *rdzv_endpoint;             /* host[:port]; NULL when not given */
    char *rdzv_id;                   /* default "none" */
    char *rdzv_conf;                 /* raw "k=v,..."; NULL when not given */
    int standalone;                  /* --standalone */
    int max_restarts;                /* default 0 */
    double monitor_interval;         /* seconds; accepted for compatibility, default 0.1 */
    char *role;                      /* default "default" */
    char *log_dir;                   /* NULL = a fresh directory under $TMPDIR only when needed */
    launch_std_map_t redirects;      /* -r/--redirects */
    launch_std_map_t tee;            /* -t/--tee */
    int *local_ranks_filter;         /* NULL = every rank shown on the console */
    int n_local_ranks_filter;
    char *master_addr;               /* default "127.0.0.1" */
    int master_port;                 /* default 29500; -1 when not given explicitly */
    char *local_addr;                /* NULL when not given */
    int no_python;                   /* --no_python */
    int module;                      /* -m/--module */
    char *run_path;                  /* --run_path (script given as path under python3) */
    int signals[LAUNCH_MAX_SIGNALS]; /* --signals_to_handle, default TERM,INT,HUP,QUIT */
    int n_signals;
    double shutdown_timeout;         /* seconds before SIGKILL; default 30 */
    int verbose;                     /* -v count */
    char *const *prog_argv;          /* training program and its args (borrowed from argv) */
    int prog_argc;
} launch_spec_t;

/* Fills spec from argv and PET_* variables (command line wins). On a usage error returns
 * DDP_EUSAGE with err->text a one-line message naming the flag ("--nproc_per_node: 'x' is not
 * a number, gpu, cpu or auto"). Strings in spec are owned by spec: free with launch_spec_free.
 * Returns 1 (not an error) when --help was printed and the caller should exit 0. */
int launch_cli_parse(int argc, char *const *argv, launch_spec_t *spec, ddp_err_t *err);

/* Resolves nproc_kind into nproc_per_node (GPU count via libcuda, CUDA_VISIBLE_DEVICES honoured).
 * Returns 0, or DDP_ENOGPU with a message for "gpu" on a machine without one. */
int launch_nproc_resolve(launch_spec_t *spec, ddp_err_t *err);

/* The std mask for local_rank from a --redirects/--tee map. */
int launch_std_for(const launch_std_map_t *m, int local_rank);

/* Frees what launch_cli_parse allocated; spec is left zeroed. */
void launch_spec_free(launch_spec_t *spec);

/* Prints the --help text (flags, defaults, exit codes) to stdout. */
void launch_usage(void);

#endif
