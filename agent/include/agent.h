/* SPDX-License-Identifier: Apache-2.0
 * The per-node agent: hosts the job's store, forks and supervises the workers, restarts the
 * group on failure and prints the failure summary. It runs an agent_job_t, the job resolved from
 * the command line by the launcher, and depends on nothing of the launcher. */
#ifndef AGENT_H
#define AGENT_H

#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_etcd_store.h"

#define AGENT_MAX_SIGNALS 16
#define AGENT_MAX_STD_OVERRIDES 64

/* The default port of each rendezvous backend's endpoint (torchrun's). */
#define AGENT_DEFAULT_MASTER_PORT 29500
#define AGENT_DEFAULT_C10D_PORT 29400
/* etcd's client port, the etcd backend's members' default. */
#define AGENT_DEFAULT_ETCD_PORT RDZV_ETCD_STORE_PORT

/* Log line prefix of tee'd console lines: torchrun's default template, the longest template
 * accepted, and the most bytes a rendered prefix keeps (a longer one is cut). */
#define AGENT_DEFAULT_LOG_LINE_PREFIX "[${role_name}${local_rank}]:"
#define AGENT_MAX_PREFIX_TEMPLATE 256
#define AGENT_PREFIX_MAX 1024

/* --timestamp_output: the stamp after the tag of each line of worker output, ISO 8601 in UTC
 * with microseconds and a space ("2026-12-07T02:41:07.123456Z "): AGENT_STAMP_LEN bytes. */
#define AGENT_STAMP_LEN 28

/* Which streams of a worker go to a file (redirects) or to file and console (tee). */
enum { AGENT_STD_NONE = 0, AGENT_STD_OUT = 1, AGENT_STD_ERR = 2, AGENT_STD_ALL = 3 };

/* A per-local-rank stream mask: a default and overrides ("3", or "0:1,1:2"). */
typedef struct agent_std_map {
    int dflt;
    int n;
    int rank[AGENT_MAX_STD_OVERRIDES];
    int mask[AGENT_MAX_STD_OVERRIDES];
} agent_std_map_t;

typedef enum agent_rdzv_backend {
    AGENT_RDZV_STATIC = 0, /* the endpoint is --master_addr:--master_port */
    AGENT_RDZV_C10D,       /* the endpoint is --rdzv_endpoint */
    AGENT_RDZV_ETCD,       /* --rdzv_endpoint names etcd members; the agents elect the store */
} agent_rdzv_backend_t;

/* The etcd backend (docs/ARCHITECTURE.md "The rendezvous on etcd"): every agent stands for
 * election on <prefix>/<run_id>/leader with its embedded store's address; the leader's agent
 * serves the rendezvous and the others connect to the address they read there. */
typedef struct agent_etcd_opts {
    const char *endpoints; /* "HOST:PORT[,HOST:PORT...]", every port given */
    const char *prefix;    /* the key prefix, "/..." */
    int lease_ttl_s;       /* the leader's lease: how long a dead leader holds the store */
    const char *cacert, *cert, *key; /* TLS files; NULL: none */
    /* 1: this agent never stands for election, it follows the store that others (ddp-rendezvous
     * --etcd daemons) are elected to serve (--rdzv_conf etcd_agents_campaign=0). */
    int follow_only;
    /* > 0: only the agents whose node rank is known and below it stand for election; the others
     * read the leader key (no lease, no watch) at a jittered moment and again only when their
     * store connection is lost (--rdzv_conf etcd_candidates). 0: every agent stands. */
    int candidates;
    /* "HOST:PORT+HOST:PORT..." or NULL (--rdzv_conf etcd_stores): store candidates at addresses
     * known in advance. Node rank i < their number serves the i-th (unless follow_only: then
     * they are ddp-rendezvous --etcd daemons); every other agent is a follower: it never talks
     * to etcd, it JOINs a candidate, which answers with the leader's address when it does not
     * lead. */
    const char *stores;
    /* Filled by agent_job_prepare from DDPRUN_ETCD_USER / DDPRUN_ETCD_PASSWORD: */
    const char *user, *password;
} agent_etcd_opts_t;

/* The etcd backend's defaults and bounds. */
/* The most etcd members --rdzv_endpoint names (the client's bound). */
#define AGENT_ETCD_MAX_MEMBERS 16
/* The most --rdzv_conf etcd_candidates. */
#define AGENT_ETCD_CANDIDATES_MAX 1024
/* The most --rdzv_conf etcd_stores addresses. */
#define AGENT_ETCD_STORES_MAX 16
/* Those every candidate for the store shares, ddp-rendezvous --etcd included (rdzv_etcd_store.h).
 */
#define AGENT_DEFAULT_ETCD_PREFIX RDZV_ETCD_STORE_PREFIX
#define AGENT_DEFAULT_ETCD_LEASE_TTL_S RDZV_ETCD_STORE_TTL_S
#define AGENT_ETCD_LEASE_TTL_MIN_S RDZV_ETCD_STORE_TTL_MIN_S
#define AGENT_ETCD_LEASE_TTL_MAX_S RDZV_ETCD_STORE_TTL_MAX_S
#define AGENT_ENV_ETCD_USER RDZV_ETCD_ENV_USER
#define AGENT_ENV_ETCD_PASSWORD RDZV_ETCD_ENV_PASSWORD

/* Rendezvous timing and hosting (torchrun's --rdzv_conf), in milliseconds. */
typedef struct agent_rdzv_opts {
    int64_t join_timeout_ms;
    int64_t last_call_timeout_ms;
    int64_t close_timeout_ms;
    int64_t keep_alive_interval_ms;
    int keep_alive_max_attempt;
    int64_t read_timeout_ms;
    int is_host; /* -1: host the store when the endpoint is this machine's; else 0 or 1 */
    /* How long to keep trying to reach a lost store that is not an agent's (a restarted
     * ddp-rendezvous daemon, a link that was down); 0: do not. */
    int64_t store_reconnect_timeout_ms;
    /* A host that was the root cause of this many group failures is excluded from the run's
     * later rounds while the others meet min_nodes (docs/protocol-rdzv.md); 0: never. */
    int64_t max_node_failures;
} agent_rdzv_opts_t;

/* store_reconnect_timeout's default: a daemon restarted by systemd is back well within it. */
#define AGENT_DEFAULT_STORE_RECONNECT_TIMEOUT_MS 60000

/* The job one agent runs. Every pointer is borrowed from the caller and must stay valid until
 * agent_run returns; agent_job_prepare fills the last two fields (free with agent_job_release).
 * Multi-node (max_nodes > 1) jobs meet at the rendezvous endpoint rdzv_host:rdzv_port; one-node
 * jobs host a private store and ignore the rendezvous fields. */
typedef struct agent_job {
    int min_nodes, max_nodes;
    int node_rank;      /* wanted node rank; -1 = the rendezvous assigns one */
    int nproc;          /* workers on this node */
    int max_restarts;   /* restarts of the worker group before the job fails */
    const char *role;   /* ROLE_NAME */
    const char *run_id; /* --rdzv_id: TORCHELASTIC_RUN_ID, the rendezvous run */
    agent_rdzv_backend_t backend;
    const char *rdzv_host; /* the rendezvous endpoint (NULL or "" = none given) */
    int rdzv_port;         /* its port, the backend's default applied */
    agent_rdzv_opts_t rdzv;
    agent_etcd_opts_t etcd;  /* backend AGENT_RDZV_ETCD */
    const char *master_addr; /* one node: MASTER_ADDR for the workers */
    int master_port;         /* one node: MASTER_PORT, or -1 to pick a free one */
    const char *local_addr;  /* this node's address as the others see it; NULL = the route's */
    const char *log_dir;     /* NULL: a private run directory, and log files only when needed */
    agent_std_map_t redirects, tee;
    const int *ranks_shown; /* local ranks shown on the console (sorted); NULL = all */
    int n_ranks_shown;
    const char *prefix_template; /* checked by agent_prefix_check; NULL = the default */
    /* Each line of worker output (console, log files) starts, after the tag, with the time the
     * agent read its first bytes (agent_stamp_render); its streams then all pass through the
     * agent, also those --redirects sends to a file only. */
    int timestamp_output;
    char *const *dup_stdout_filters; /* NULL-terminated; NULL = no filtered copy */
    char *const *dup_stderr_filters;
    int signals[AGENT_MAX_SIGNALS]; /* forwarded to the workers; TERM/INT/HUP/QUIT stop the job */
    int n_signals;
    int64_t shutdown_timeout_ms; /* SIGTERM to SIGKILL */
    int virtual_local_rank;      /* LOCAL_RANK=0 and one visible device per worker */
    /* 0: the agent serves the workers' store at MASTER_ADDR:MASTER_PORT (group rank 0's node),
     * as torchrun 2.x; 1: the workers' rank 0 hosts it (TORCHELASTIC_USE_AGENT_STORE=False). */
    int worker_store_own;
    /* --event_log_handler json: one JSON object a line per event (agent/events.c) written to
     * event_log_fd when event_log_on; the caller opened it (agent_event_log_open, or 2 for
     * stderr) and closes it after agent_run. */
    int event_log_on, event_log_fd;
    const char *metrics_host; /* --metrics: the Prometheus listener; NULL = none */
    int metrics_port;
    /* --numa_binding: worker i (local rank) runs on bind_cpus[i] with its memory preferred on
     * the NUMA nodes of bind_mems[i] (bit = node id); the texts go to its environment
     * (DDPRUN_CPU_BINDING, DDPRUN_NUMA_NODE). NULL: no binding. */
    const cpu_set_t *bind_cpus;
    const uint64_t *bind_mems;
    char *const *bind_cpus_text;
    char *const *bind_nodes_text;
    const char *devices_var; /* the visible-device list in use (ddp_devices_select) */
    const char *devices;     /* its value; NULL = unset */
    const char *path;        /* what workers exec, resolved (no search after fork) */
    char *const *argv;       /* their argv, argv[0] as the user gave it */
    const char *prog_name;   /* the user's program, named by the summary */
    /* Hangs (README "Hangs"): a worker that does not beat within the timeout is hung; the agent
     * captures the stacks of every worker's process group, then restarts the group. */
    int64_t heartbeat_timeout_ms;         /* 0 = no hang detection */
    int64_t initial_heartbeat_timeout_ms; /* until the first beat of each attempt */
    int heartbeat_on_output;              /* a whole line of stdout/stderr counts as a beat */
    int64_t stacks_timeout_ms;            /* budget of the stack capture */
    int max_no_progress_restarts;         /* 0 = off; else stop after N attempts without progress */
    int64_t gpu_memory_reclaim_timeout_ms; /* before a restart; 0 = do not wait */
    /* Stragglers (agent/straggler.c): each worker publishes its compute and collective-wait
     * totals (DDPRUN_TIMING_FILE); every straggler_window_ms the agent sends its ranks' to the
     * store, which names a rank computing straggler_threshold x the median of the others' time
     * per step over straggler_windows windows, and with straggler_exclude excludes its host when
     * a spare can take its place. straggler_threshold 0: off. */
    double straggler_threshold;
    int straggler_windows;
    int64_t straggler_window_ms;
    int straggler_exclude;
    /* The node's health check before each start of the group and each JOIN (agent/node_check.c):
     * health_check runs under /bin/sh -c (NULL = none) within health_check_timeout_ms; then,
     * unless gpu_health_check is 0, the GPUs' fault counters through NVML. A node that stays
     * unfit for join_timeout (rdzv.join_timeout_ms, also on one node) gives up: result.unfit. */
    const char *health_check;
    int64_t health_check_timeout_ms;
    int gpu_health_check;
    /* Started over ssh by a launching ddprun (launcher/ssh.c): session_fd (CLOEXEC) is the ssh
     * session's standard input, which brings the launcher's lines (AGENT_SSH_* below, read by
     * agent/session.c) and whose end (EOF, hang-up), or AGENT_SSH_SILENCE_MS without a line,
     * means the launcher or the connection is gone and stops the job as SIGHUP does; the agent
     * reports on its stdout, once its store connection is set up, the line
     * "AGENT_SSH_READY ADDR PORT" (the store it meets at). */
    int ssh_session;
    int session_fd;
    /* Every worker's console line passes through the agent, tagged with the prefix, whatever
     * --tee says (lines from many hosts meet on one terminal). */
    int console_tag_all;
    /* Filled by agent_job_prepare: */
    char rdzv_addr[64]; /* rdzv_host resolved to a numeric address */
    ddp_buf_t token;    /* the job token (rdzv_token_load's sources); may stay empty */
} agent_job_t;

/* The first word of the line an agent started over ssh prints once it is ready; then the address
 * and port of the store it meets at (the first host's own, port picked by the kernel when
 * rdzv_port is 0). */
#define AGENT_SSH_READY "ddprun-agent-ready"

/* The line that opens the root cause block of a failed job's summary (torchrun's words). Of a
 * job's nodes, only the one whose failure the store counted first prints it as a whole line; the
 * others name that node after it ("... on another node"). A launching ddprun names that host in
 * its last line. */
#define AGENT_ROOT_CAUSE_TITLE "Root Cause (first observed failure):"

/* What a launching ddprun writes down an agent's ssh session after the token (and the store's
 * address): one line per message, each shorter than AGENT_SSH_LINE_MAX.
 *   ""               a heartbeat, every AGENT_SSH_HEARTBEAT_MS. Once it has had one, the agent
 *                    stops its job, as at the session's end, when AGENT_SSH_SILENCE_MS pass
 *                    without a line: the launcher's machine or the network to it is gone, which
 *                    the session itself may not show for many minutes.
 *   "signal N"       the launcher got signal N: the agent acts as on that signal of its own (a
 *                    termination signal stops the job with it and a second one kills the
 *                    workers; another is forwarded to the workers).
 *   "pause"          the launcher is about to be suspended (Ctrl-Z): its silence means nothing
 *                    until its next line.
 * Other lines are ignored. */
#define AGENT_SSH_HEARTBEAT_MS 2000
#define AGENT_SSH_SILENCE_MS 10000
#define AGENT_SSH_SIGNAL "signal"
#define AGENT_SSH_PAUSE "pause"
#define AGENT_SSH_LINE_MAX 64

/* The signals that stop a job: the others of --signals_to_handle are forwarded to the workers
 * and the job goes on (by the agent, and over ssh by the launcher too). */
static inline int agent_signal_stops_job(int sig) {
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/* How a job that ran ended (agent_run fills it; ddprun's exit code follows from it). */
typedef struct agent_result {
    int failed;     /* the job failed; the summary was printed */
    int exec_errno; /* nonzero: the program could not be executed (ENOENT: not found) */
    int signal;     /* nonzero: a termination signal stopped the job */
    int unfit;      /* the node's health check failed until join_timeout: nothing ran */
} agent_result_t;

/* Checks job against what the agent can run and resolves what it needs before anything starts:
 * the worker count against a --virtual_local_rank device list, and for a multi-node job the
 * endpoint (given, resolvable), the run id (short enough for the rendezvous protocol) and the
 * job token. Returns 0, DDP_EUSAGE with err naming the flag or variable, or -ENOMEM. On success
 * free the token with agent_job_release. */
int agent_job_prepare(agent_job_t *job, ddp_err_t *err);

/* Opens the file of --event_log_handler json:PATH for appending events: a regular file, opened
 * without blocking and without following a link planted in its place (ddp_file_open); a line
 * an earlier writer left torn is ended first, so that the first event starts a line of its own.
 * Returns the descriptor or DDP_EUSAGE with err naming the flag and the file. */
int agent_event_log_open(const char *path, ddp_err_t *err);

/* Frees what agent_job_prepare filled. NULL-safe. */
void agent_job_release(agent_job_t *job);

/* Runs the prepared job until it succeeds, fails for good or is stopped by a signal. Returns 0
 * with *res saying how the job ended, or a negative code when the agent could not run it (logged):
 * DDP_EUSAGE for a setting the machine refuses (an unusable log directory, is_host=1 with the
 * endpoint's port taken), -errno otherwise. */
int agent_run(const agent_job_t *job, agent_result_t *res);

/* The stream mask (AGENT_STD_*) of local_rank in m. */
int agent_std_for(const agent_std_map_t *m, int local_rank);

/* Checks a log line prefix template (Python string.Template syntax: ${name}, $name, $$; macros
 * role_name, local_rank, rank, hostname). Returns 0, or DDP_EUSAGE naming flag and the unknown
 * macro (or the length limit). */
int agent_prefix_check(const char *flag, const char *tmpl, ddp_err_t *err);

/* Renders tmpl (checked; NULL = the default) for one worker into out, NUL-terminated and cut to
 * cap - 1 bytes. An unknown macro is left as written, as Python's safe_substitute does. Returns
 * the length written. */
size_t agent_prefix_render(const char *tmpl, const char *role, int local_rank, int rank,
                           const char *hostname, char *out, size_t cap);

/* Renders the wall-clock time t as the stamp of --timestamp_output into out: AGENT_STAMP_LEN
 * bytes ("2026-12-07T02:41:07.123456Z ", UTC), then a NUL. A year outside 0..9999 renders as
 * "0000-00-00T00:00:00.000000Z ", keeping the width. */
void agent_stamp_render(const struct timespec *t, char out[AGENT_STAMP_LEN + 1]);

#endif
