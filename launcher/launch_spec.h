/* SPDX-License-Identifier: Apache-2.0
 * launch_spec_t: everything the command line (and PET_* / SLURM_* environment) says about a job,
 * produced by launch_cli_parse (launcher/cli.c). It is the launcher's own: launch_job_build
 * (launcher/job.c) resolves it into the agent_job_t the agent runs. */
#ifndef LAUNCH_SPEC_H
#define LAUNCH_SPEC_H

#include <stddef.h>
#include <stdio.h>

#include "agent.h"
#include "ddp_err.h"
#include "launch_numa.h"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "0.1.0"
#endif

/* --duplicate_std{out,err}_filters: at most this many filter strings each. */
#define LAUNCH_MAX_DUP_FILTERS 64

/* One id per flag. Bit LAUNCH_OPT_x of launch_spec_t.given (LAUNCH_GIVEN_SET) is set when the flag
 * came from the command line or from its PET_* variable (--standalone sets the bits of what it
 * forces). Derivation from SLURM_* (launch_slurm_derive) only fills fields whose bit is clear. */
typedef enum launch_opt {
    LAUNCH_OPT_NNODES = 0,
    LAUNCH_OPT_NPROC_PER_NODE,
    LAUNCH_OPT_NODE_RANK,
    LAUNCH_OPT_RDZV_BACKEND,
    LAUNCH_OPT_RDZV_ENDPOINT,
    LAUNCH_OPT_RDZV_ID,
    LAUNCH_OPT_RDZV_CONF,
    LAUNCH_OPT_STANDALONE,
    LAUNCH_OPT_MAX_RESTARTS,
    LAUNCH_OPT_MONITOR_INTERVAL,
    LAUNCH_OPT_START_METHOD,
    LAUNCH_OPT_ROLE,
    LAUNCH_OPT_LOG_DIR,
    LAUNCH_OPT_REDIRECTS,
    LAUNCH_OPT_TEE,
    LAUNCH_OPT_LOCAL_RANKS_FILTER,
    LAUNCH_OPT_TIMESTAMP_OUTPUT,
    LAUNCH_OPT_MASTER_ADDR,
    LAUNCH_OPT_MASTER_PORT,
    LAUNCH_OPT_LOCAL_ADDR,
    LAUNCH_OPT_NO_PYTHON,
    LAUNCH_OPT_MODULE,
    LAUNCH_OPT_RUN_PATH,
    LAUNCH_OPT_SIGNALS_TO_HANDLE,
    LAUNCH_OPT_SHUTDOWN_TIMEOUT,
    LAUNCH_OPT_LOGS_SPECS,
    LAUNCH_OPT_LOG_LINE_PREFIX_TEMPLATE,
    LAUNCH_OPT_EVENT_LOG_HANDLER,
    LAUNCH_OPT_DUPLICATE_STDOUT_FILTERS,
    LAUNCH_OPT_DUPLICATE_STDERR_FILTERS,
    LAUNCH_OPT_VIRTUAL_LOCAL_RANK,
    LAUNCH_OPT_NUMA_BINDING,
    LAUNCH_OPT_NUMA_BINDING_FALLBACK,
    LAUNCH_OPT_PRINT_TOPOLOGY,
    LAUNCH_OPT_JSON,
    LAUNCH_OPT_PRINT_COMPLETION,
    LAUNCH_OPT_HEARTBEAT_TIMEOUT,
    LAUNCH_OPT_INITIAL_HEARTBEAT_TIMEOUT,
    LAUNCH_OPT_HEARTBEAT_ON_OUTPUT,
    LAUNCH_OPT_STACKS_TIMEOUT,
    LAUNCH_OPT_MAX_NO_PROGRESS_RESTARTS,
    LAUNCH_OPT_GPU_MEMORY_RECLAIM_TIMEOUT,
    LAUNCH_OPT_HEALTH_CHECK,
    LAUNCH_OPT_HEALTH_CHECK_TIMEOUT,
    LAUNCH_OPT_NO_GPU_HEALTH_CHECK,
    LAUNCH_OPT_MAX_NODE_FAILURES,
    LAUNCH_OPT_WORKER_STORE,
    LAUNCH_OPT_METRICS,
    LAUNCH_OPT_STRAGGLER_THRESHOLD,
    LAUNCH_OPT_STRAGGLER_WINDOWS,
    LAUNCH_OPT_STRAGGLER_WINDOW,
    LAUNCH_OPT_STRAGGLER_ACTION,
    LAUNCH_OPT_HOSTFILE,
    LAUNCH_OPT_HOSTS,
    LAUNCH_OPT_INCLUDE,
    LAUNCH_OPT_EXCLUDE,
    LAUNCH_OPT_SSH,
    LAUNCH_OPT_REMOTE_DDPRUN,
    LAUNCH_OPT_SSH_FANOUT,
    LAUNCH_OPT_SSH_SESSION,
    LAUNCH_OPT_ENV,
    LAUNCH_OPT_ENV_POLICY,
    LAUNCH_OPT_VERBOSE,
    LAUNCH_OPT_HELP,
    LAUNCH_OPT_VERSION,
    LAUNCH_OPT__COUNT
} launch_opt_t;

#define LAUNCH_GIVEN_WORDS 2
_Static_assert(LAUNCH_OPT__COUNT <= 64 * LAUNCH_GIVEN_WORDS,
               "launch_spec_t.given holds one bit per flag");

/* Nonzero when flag opt was given explicitly (command line, PET_*, or forced by --standalone). */
#define LAUNCH_GIVEN(spec, opt) ((int)(((spec)->given[(opt) / 64] >> ((opt) % 64)) & 1u))
/* Marks flag opt given. */
#define LAUNCH_GIVEN_SET(spec, opt) ((spec)->given[(opt) / 64] |= 1ull << ((opt) % 64))

/* Bounds of the --rdzv_conf durations: 1 ms to about 23 days (they become int milliseconds). */
#define LAUNCH_RDZV_CONF_MIN_S 0.001
#define LAUNCH_RDZV_CONF_MAX_S 2000000.0
/* Bounds of the other durations (--shutdown_timeout, --monitor_interval and
 * TORCH_ELASTIC_SHUTDOWN_TIMEOUT): 0 (SIGKILL right after SIGTERM) to the same 23 days. They
 * become int64 milliseconds and a libuv timer; a larger value would overflow into one that
 * fires at once. */
#define LAUNCH_DURATION_MIN_S 0.0
#define LAUNCH_DURATION_MAX_S LAUNCH_RDZV_CONF_MAX_S
/* The agent's timers count milliseconds: a positive duration below this one becomes 0. */
#define LAUNCH_TIMER_RESOLUTION_S 0.001
/* Hang detection defaults: the stack capture of a hung group gets 20 s, since gdb attaching to
 * a large CUDA process spends seconds loading its symbols and py-spy walks every thread (a
 * capture happens once per hang, after the job has already stood still for a whole
 * --heartbeat_timeout); a restart waits up to 50 s for the GPU memory of the stopped group. */
#define LAUNCH_DEFAULT_STACKS_TIMEOUT_S 20.0
/* Straggler detection defaults: a rank computing 1.2x the median of the others' time per step
 * over 3 windows of 5 s (15 s: long enough that a burst of load on one machine is not named). */
#define LAUNCH_DEFAULT_STRAGGLER_THRESHOLD 1.2
#define LAUNCH_DEFAULT_STRAGGLER_WINDOWS 3
#define LAUNCH_DEFAULT_STRAGGLER_WINDOW_S 5.0
/* Their bounds (the store's report carries them; rdzv_straggler.c checks the same). */
#define LAUNCH_STRAGGLER_THRESHOLD_MIN 1.001
#define LAUNCH_STRAGGLER_THRESHOLD_MAX 1000.0
#define LAUNCH_STRAGGLER_WINDOWS_MAX 1000
#define LAUNCH_STRAGGLER_WINDOW_MIN_S 0.1
#define LAUNCH_STRAGGLER_WINDOW_MAX_S 3600.0
#define LAUNCH_DEFAULT_GPU_MEMORY_RECLAIM_TIMEOUT_S 50.0
/* --health_check's bound: a check that takes longer is killed and counts as failed. */
#define LAUNCH_DEFAULT_HEALTH_CHECK_TIMEOUT_S 60.0
/* --initial_heartbeat_timeout defaults to this many times --heartbeat_timeout: start-up (imports,
 * NCCL init, data loading) comes before the first step. */
#define LAUNCH_INITIAL_HEARTBEAT_FACTOR 10
/* The most nodes a job may have (--nnodes), the rendezvous protocol's bound; and the most
 * workers per node (--nproc_per_node). */
#define LAUNCH_MAX_NODES 65536
#define LAUNCH_MAX_NPROC 65536

/* Room for one of --rdzv_conf's etcd texts (a key prefix, a file name), NUL included. */
#define LAUNCH_ETCD_TEXT_MAX 512
/* Room for --rdzv_conf etcd_stores (AGENT_ETCD_STORES_MAX addresses), NUL included. */
#define LAUNCH_ETCD_STORES_TEXT_MAX 1024

/* --rdzv_conf parsed, with torchrun's defaults for the keys that were not given. */
typedef struct launch_rdzv_conf {
    double join_timeout;            /* 600 s */
    double last_call_timeout;       /* 30 s */
    double close_timeout;           /* 30 s */
    double timeout;                 /* 600 s (static rendezvous) */
    double keep_alive_interval;     /* 5 s; "heartbeat" is the same key */
    int keep_alive_max_attempt;     /* 3 */
    double read_timeout;            /* 60 s */
    int is_host;                    /* -1 when not given (decide from the endpoint), else 0 or 1 */
    double store_reconnect_timeout; /* 60 s; ddprun's own key */
    int max_node_failures;          /* 0: off; ddprun's own key (--max_node_failures too) */
    /* The etcd backend's keys ("" when not given; the prefix defaults to /ddprun): */
    char etcd_prefix[LAUNCH_ETCD_TEXT_MAX];
    int lease_ttl; /* seconds */
    /* 1 (default): the agents stand for election too; 0: they only follow the store that
     * ddp-rendezvous --etcd daemons elect among themselves. */
    int etcd_agents_campaign;
    /* Only the agents of node rank below this stand for election; 0: every agent. */
    int etcd_candidates;
    char etcd_cacert[LAUNCH_ETCD_TEXT_MAX], etcd_cert[LAUNCH_ETCD_TEXT_MAX];
    char etcd_key[LAUNCH_ETCD_TEXT_MAX];
    /* The store candidates at addresses known in advance, "HOST:PORT+HOST:PORT..." ("": none):
     * node rank i serves the i-th; every other agent JOINs through them and never asks etcd. */
    char etcd_stores[LAUNCH_ETCD_STORES_TEXT_MAX];
} launch_rdzv_conf_t;

/* A getenv-like lookup: returns the value of name or NULL. ctx is passed through. The launcher's
 * parsers take one so that tests can feed recorded environments. */
typedef const char *(*launch_getenv_fn)(void *ctx, const char *name);

typedef enum {
    LAUNCH_NPROC_NUM = 0, /* nproc_per_node holds the number */
    LAUNCH_NPROC_GPU,     /* one per visible CUDA device; error when there is none */
    LAUNCH_NPROC_CPU,     /* one per CPU */
    LAUNCH_NPROC_AUTO,    /* GPUs when there are some, else CPUs */
} launch_nproc_kind_t;

typedef struct launch_spec {
    int min_nodes, max_nodes;       /* --nnodes N or MIN:MAX; default 1:1 */
    int node_rank;                  /* --node_rank; default 0 */
    launch_nproc_kind_t nproc_kind; /* --nproc_per_node kind */
    int nproc_per_node;             /* resolved count (launch_nproc_resolve fills it) */
    char *rdzv_backend;             /* "static" (default), "c10d", "etcd" */
    char *rdzv_id;                  /* default "none" */
    char *rdzv_conf;                /* raw "k=v,..."; NULL when not given */
    int standalone;                 /* --standalone */
    int max_restarts;               /* default 0 */
    int max_node_failures;          /* --max_node_failures; rdzv_opts' when not given */
    double monitor_interval;        /* seconds; accepted for compatibility, default 0.1 */
    char *role;                     /* default "default" */
    char *log_dir;                  /* NULL = a fresh directory under $TMPDIR only when needed */
    agent_std_map_t redirects;      /* -r/--redirects */
    agent_std_map_t tee;            /* -t/--tee */
    int *local_ranks_filter;        /* NULL = every rank shown on the console */
    int n_local_ranks_filter;
    int timestamp_output;           /* each worker output line stamped with the time it was read */
    char *master_addr;              /* default "127.0.0.1" */
    int master_port;                /* default 29500; -1 when not given explicitly */
    char *local_addr;               /* NULL when not given */
    int no_python;                  /* --no_python */
    int module;                     /* -m/--module */
    char *run_path;                 /* --run_path (script given as path under python3) */
    int signals[AGENT_MAX_SIGNALS]; /* --signals_to_handle, default TERM,INT,HUP,QUIT */
    int n_signals;
    double shutdown_timeout; /* seconds before SIGKILL; default 30 */
    int verbose;             /* -v count */
    char *const *prog_argv;  /* training program and its args (borrowed from argv) */
    int prog_argc;
    /* Added by the launcher module (cli.c): */
    unsigned long long given[LAUNCH_GIVEN_WORDS]; /* bit per launch_opt_t (LAUNCH_GIVEN) */
    char *rdzv_host; /* --rdzv_endpoint's host ([v6] brackets removed); NULL = none */
    int rdzv_port;   /* --rdzv_endpoint's port; -1 when absent */
    /* --rdzv_endpoint as etcd members, each with its port (2379 when absent); NULL = none. A
     * list of several leaves rdzv_host the whole text (only the etcd backend takes one). */
    char *etcd_endpoints;
    launch_rdzv_conf_t rdzv_opts; /* rdzv_conf parsed and validated, defaults filled */
    char *start_method;           /* --start_method spawn|fork|forkserver: accepted, unused */
    int virtual_local_rank;       /* --virtual_local_rank: LOCAL_RANK=0, one device per worker */
    int worker_store_own;         /* --worker_store own: rank 0 of the workers hosts their store */
    launch_numa_mode_t numa_binding; /* --numa_binding; LAUNCH_NUMA_OFF when not given */
    int numa_binding_fallback;       /* warn once and run unbound when binding is impossible */
    int print_topology;              /* --print_topology: print every mode's plan and exit */
    char *metrics_host;              /* --metrics HOST:PORT; NULL = none */
    int metrics_port;
    int json; /* --json: --print_topology as one JSON object */
    /* Filled by launch_numa_setup: each local rank's binding, as the agent applies it. */
    cpu_set_t *bind_cpus;
    uint64_t *bind_mems; /* bit = NUMA node id */
    char **bind_cpus_text, **bind_nodes_text;
    char *log_line_prefix_template; /* NULL = AGENT_DEFAULT_LOG_LINE_PREFIX */
    char *event_log_handler;        /* "null" (default) or "console": accepted, unused */
    char **dup_stdout_filters;      /* NULL-terminated strings; NULL = no duplication */
    char **dup_stderr_filters;      /* same for stderr */
    int info_printed;     /* --help, --version (printed) or --print_completion: nothing to run */
    int print_completion; /* --print_completion bash: the caller prints launch_completion_bash */
    /* Stragglers (agent/straggler.c; the store judges): */
    double straggler_threshold; /* LAUNCH_DEFAULT_STRAGGLER_THRESHOLD; 0 = off */
    int straggler_windows;      /* consecutive windows that name (and clear) a straggler */
    double straggler_window;    /* seconds between two comparisons */
    int straggler_exclude;      /* --straggler_action=exclude */
    /* Hangs (seconds, as given): */
    double heartbeat_timeout;         /* 0 = off (default) */
    double initial_heartbeat_timeout; /* -1 = LAUNCH_INITIAL_HEARTBEAT_FACTOR x heartbeat_timeout */
    int heartbeat_on_output;          /* a whole output line counts as a beat */
    double stacks_timeout;            /* LAUNCH_DEFAULT_STACKS_TIMEOUT_S */
    int max_no_progress_restarts;     /* 0 = off (default) */
    double
        gpu_memory_reclaim_timeout; /* LAUNCH_DEFAULT_GPU_MEMORY_RECLAIM_TIMEOUT_S; 0 = no wait */
    /* The node's health check before each start and JOIN: */
    char *health_check;          /* --health_check CMD; NULL = none */
    double health_check_timeout; /* LAUNCH_DEFAULT_HEALTH_CHECK_TIMEOUT_S */
    int no_gpu_health_check;     /* --no_gpu_health_check: skip the GPUs' fault counters */
    /* Many hosts over ssh (launcher/ssh.c); NULL when not given: */
    char *hostfile;      /* --hostfile FILE */
    char *hosts;         /* --hosts NAME[:N],... */
    char *include;       /* --include NAMES */
    char *exclude;       /* --exclude NAMES */
    char *ssh;           /* --ssh CMD (else $DDPRUN_SSH, else "ssh") */
    char *remote_ddprun; /* --remote_ddprun PATH (else this ddprun's absolute path) */
    int ssh_fanout;      /* --ssh_fanout N: ssh connections being set up at once */
    /* --ssh_session NAME: this agent was started over ssh by a launching ddprun that knows this
     * host as NAME; the job token comes on stdin, and stdin's end means the launcher is gone. */
    char *ssh_session;
    /* -x VAR / -x VAR=VAL (mpirun's): variables the hosts' agents get, in order; NULL-terminated,
     * n_env of them. --env_policy none: only those (no default set). */
    char **env;
    int n_env;
    int env_policy_none;
    /* Where each flag of the command line was: argv[arg_first[i]] up to argv[arg_first[i] +
     * arg_count[i]) gave flag arg_id[i] (what launcher/ssh.c passes on to the hosts). */
    int n_args, last_opt;
    int *arg_first, *arg_count;
    launch_opt_t *arg_id;
} launch_spec_t;

/* ddprun's exit code for a node whose health check failed until join_timeout (main.c decides
 * it; ssh.c reads it in a host agent's exit). */
#define LAUNCH_EXIT_NODE_UNFIT 4

/* --ssh_fanout's default: ssh connections set up at once (pdsh's default is 32). */
#define LAUNCH_DEFAULT_SSH_FANOUT 32

/* Fills spec from argv and PET_* variables (command line wins). Returns 0, or DDP_EUSAGE with
 * err->text a one-line message naming the flag ("--nproc_per_node: 'x' is not a number, gpu, cpu
 * or auto"), or -ENOMEM. After --help or --version (printed to stdout) it returns 0 with
 * spec->info_printed set: the caller exits 0 (after --print_completion bash spec->print_completion
 * is set too: the caller prints the script first). Strings in spec are owned by spec: free with
 * launch_spec_free (also safe after an error). */
int launch_cli_parse(int argc, char *const *argv, launch_spec_t *spec, ddp_err_t *err);

/* launch_cli_parse with the PET_* variables read through getenv_fn(ctx, name) instead of the
 * process environment (getenv_fn NULL = getenv). Same returns. On any error spec is left zeroed
 * (launch_spec_free is still safe to call). */
int launch_cli_parse_env(int argc, char *const *argv, launch_getenv_fn getenv_fn, void *ctx,
                         launch_spec_t *spec, ddp_err_t *err);

/* A launch_getenv_fn over the process environment (ctx unused). Borrowed; valid until the
 * environment changes. */
const char *launch_getenv_process(void *ctx, const char *name);

/* Splits "host", "host:port" or "[v6addr]:port" into *host (caller owns; free()) and *port
 * (-1 when absent). Returns 0, DDP_EUSAGE naming flag on a malformed value, or -ENOMEM. */
int launch_endpoint_split(const char *flag, const char *ep, char **host, int *port, ddp_err_t *err);

/* The argv a worker execs, built from spec by torchrun's rules: "-m" -> python3 -u -m module args;
 * --run_path or a target ending in .py (unless --no_python) -> python3 -u script args (python3 is
 * $PYTHON_EXEC when set); anything else is exec'd directly. path is what to hand to execve: the
 * program (or python3) found through $PATH before anything starts, so no search happens after
 * fork. */
typedef struct launch_argv {
    char *path;  /* resolved file to execve (owned) */
    char **argv; /* NULL-terminated, every string owned */
    int argc;
} launch_argv_t;

/* Builds out from spec->prog_argv. Checks that the program (script or executable) and python3 when
 * needed exist and are usable. Returns 0; DDP_EUSAGE with a message naming the path ("program
 * './trian' not found") -> exit 2 before anything starts; -ENOMEM.
 * out: free with launch_argv_free (zeroed on error). */
int launch_program_argv(const launch_spec_t *spec, launch_argv_t *out, ddp_err_t *err);

/* The name the failure summary gives the user's program, as torchrun's: the script (or -m's
 * module) when ddprun starts Python itself, and also when the program given is a Python
 * interpreter (`ddprun /opt/venv/bin/python train.py`, `--no_python python3 -u -m pkg.train`):
 * the first argument that is not one of the interpreter's options, or the module of -m. Anything
 * else (another executable, python -c, python reading stdin) is named by the program itself.
 * Borrowed from spec->prog_argv. */
const char *launch_program_name(const launch_spec_t *spec);

/* Frees what launch_program_argv filled; out is left zeroed. NULL-safe. */
void launch_argv_free(launch_argv_t *out);

/* Parses a --redirects/--tee value ("3" or "0:1,1:2") into m. flag names the option in messages.
 * Returns 0 or DDP_EUSAGE. */
int launch_std_map_parse(const char *flag, const char *s, agent_std_map_t *m, ddp_err_t *err);

/* Parses a --rdzv_conf value into c (defaults first, then the keys given). Keys: join_timeout,
 * last_call_timeout, close_timeout, timeout, heartbeat, keep_alive_interval,
 * keep_alive_max_attempt, read_timeout, is_host. Returns 0 or DDP_EUSAGE naming the key. */
int launch_rdzv_conf_parse(const char *flag, const char *s, launch_rdzv_conf_t *c, ddp_err_t *err);

/* Resolves nproc_kind into nproc_per_node (GPU count via libcuda, CUDA_VISIBLE_DEVICES honoured).
 * Returns 0, or DDP_ENOGPU with a message for "gpu" on a machine without one. */
int launch_nproc_resolve(launch_spec_t *spec, ddp_err_t *err);

/* Number of CUDA devices this process sees: dlopen("libcuda.so.1"), cuInit(0), cuDeviceGetCount.
 * libcuda stays loaded afterwards. Returns the count (>= 0; 0 when there is no driver or no
 * device), and writes why there is none to why (may be NULL) when it returns 0. */
int launch_gpu_count(char *why, size_t why_len);

/* Number of CPUs this process may run on (sched_getaffinity, else online CPUs); at least 1. */
int launch_cpu_count(void);

/* Frees what launch_cli_parse allocated; spec is left zeroed. */
void launch_spec_free(launch_spec_t *spec);

/* Prints the --help text (flags, defaults, exit codes) to stdout. */
void launch_usage(void);

/* Resolves spec (parsed, Slurm-derived, nproc resolved) and prog into the job the agent runs:
 * the backend's endpoint with its default port, durations in milliseconds, the visible-device
 * list read through getenv_fn(ctx, name) (NULL = getenv). job borrows from spec and prog, which
 * must outlive it; its prepared fields are left empty (agent_job_prepare fills them). */
void launch_job_build(const launch_spec_t *spec, const launch_argv_t *prog,
                      launch_getenv_fn getenv_fn, void *ctx, agent_job_t *job);

/* Checks the --rdzv_endpoint of a one-node c10d job given explicitly (flag or PET_*), which the
 * agent does not use (it hosts the job's store itself): it must resolve and be this machine's.
 * Multi-node jobs are checked by agent_job_prepare. Fills addr (cap bytes, at least 46) with the
 * resolved address, or "" when there was nothing to check. Returns 0 or DDP_EUSAGE naming the
 * flag. */
int launch_endpoint_check(const launch_spec_t *spec, char *addr, size_t cap, ddp_err_t *err);

/* One node with torchrun's default rendezvous (static, no --rdzv_endpoint, no --master_port from
 * the flag or PET_MASTER_PORT) and a run id nothing set (still "none": neither --rdzv_id nor
 * Slurm): torchrun 2.x runs that as --standalone, with a fresh uuid4 as the run id, so every such
 * run gets its own id here too. Call once the Slurm and Kubernetes derivations are done. Returns 1
 * when it gave the run an id, 0 when the job keeps its own, or -ENOMEM. */
int launch_run_id_resolve(launch_spec_t *spec);

/* Slurm: see launcher/launch_slurm.h (detection and derivation, call after launch_cli_parse). */

/* --numa_binding: plans every local rank's CPUs and NUMA nodes into spec (bind_*), once
 * nproc_per_node is known. 0; or DDP_EUSAGE with err naming the mode, the rank and why (the
 * job must not start), unless --numa_binding_fallback (one warning, no binding, 0). */
int launch_numa_setup(launch_spec_t *spec, ddp_err_t *err);

/* --print_topology: this node's topology and, per local rank (--nproc_per_node, resolved), the
 * GPU, NUMA node, socket, L3 group and the CPUs each --numa_binding mode would give, as a table
 * (or one JSON object with --json) on out. Returns 0, or DDP_EUSAGE (err) when the topology
 * cannot be read. */
int launch_numa_print(const launch_spec_t *spec, FILE *out, ddp_err_t *err);

#endif
