/* SPDX-License-Identifier: Apache-2.0
 * Agent internals shared by the agent/ sources: the agent's state in parts, each written by the
 * file that owns it (agent_t), the worker table, output streams, supervision states and events,
 * and what differs between one node and several (agent_node_ops_t). */
#ifndef AGENT_INT_H
#define AGENT_INT_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <uv.h>

#include "agent.h"
#include "ddp_buf.h"
#include "ddp_strv.h"
#include "ddp_timing.h"
#include "goodput.h"

/* A line longer than this is written out in pieces rather than buffered further. */
#define AGENT_MAX_LINE 65536
/* The most of a worker's error file the agent reads; a larger one is cut (agent/errfile.c). */
#define AGENT_ERROR_FILE_MAX 65536
/* First restart waits this long; each further restart doubles it, up to the cap. */
#define AGENT_RESTART_FLOOR_MS 1
#define AGENT_RESTART_CAP_MS 2000
/* A worker killed by SIGTERM/SIGINT/SIGHUP/SIGQUIT that the agent did not send was probably hit by
 * a signal aimed at the whole job (Slurm's proctrack/linuxproc, a shell's process group): the
 * agent's own copy may be a moment behind. Restarts after such a death wait this long for it. */
#define AGENT_EXTERNAL_TERM_GRACE_MS 250

typedef struct agent agent_t;

/* The cause of a failed group's first failure, as events and metrics name it (events.c). */
enum { AGENT_CAUSE_EXIT, AGENT_CAUSE_SIGNAL, AGENT_CAUSE_HUNG, AGENT_CAUSE_EXEC, AGENT_NCAUSES };
extern const char *const agent__cause_names[AGENT_NCAUSES];
/* The agent's counters since ddprun started, for the metrics (metrics.c): workers and groups
 * started, worker output the log files (stdout.log, stderr.log, filtered_*.log) could not take (a
 * full disk or an I/O error; the job goes on), failed health checks, and failed groups by their
 * first failure's cause (AGENT_COUNT_GROUP_FAILED + cause). */
enum {
    AGENT_COUNT_WORKER_STARTS,
    AGENT_COUNT_GROUP_STARTS,
    AGENT_COUNT_LOG_BYTES_LOST,
    AGENT_COUNT_CHECK_FAILURES,
    AGENT_COUNT_GROUP_FAILED,
    AGENT_NCOUNTS = AGENT_COUNT_GROUP_FAILED + AGENT_NCAUSES
};
typedef struct agent_worker agent_worker_t;
typedef struct agent_console agent_console_t;

/* The console (console.c): worker streams shown there stop being read past HIGH queued bytes
 * and resume below LOW; the agent's own lines are dropped past MAX; at exit the queue gets this
 * long to drain. */
#define AGENT_CONSOLE_HIGH (256u * 1024)
#define AGENT_CONSOLE_LOW (64u * 1024)
#define AGENT_CONSOLE_MAX (4u * 1024 * 1024)
#define AGENT_CONSOLE_EXIT_FLUSH_MS 2000
/* A socket console's queue is retried this often (a pipe's or terminal's is polled). */
#define AGENT_CONSOLE_RETRY_MS 10

/* One of a worker's output streams, read through a pipe. Heap-allocated per attempt and freed in
 * its uv_close callback, so a restart never waits for the previous attempt's pipes. */
typedef struct agent_stream {
    uv_pipe_t pipe; /* must stay first: the handle's data points back here */
    int rank;       /* global rank */
    int console_fd; /* 1 or 2, or -1 when this stream is not shown on the console */
    int tag;        /* prefix console lines (--tee) with prefix */
    int file_fd;    /* per-rank log file (--tee), or -1 */
    int std;        /* 1 or 2: the worker's stdout or stderr (names the log file in messages) */
    int attempt;    /* the attempt whose directory holds the log file */
    int file_lost;  /* a write to file_fd failed: said and counted (an event) once */
    int dup_lost;   /* the same for dup_fd */
    int closing;
    int after_cr;   /* the last line out ended with CR (its LF may follow in the next read) */
    ddp_buf_t line; /* bytes after the last newline */
    /* --log_line_prefix_template rendered once when the worker starts ("[default0]:") */
    char prefix[AGENT_PREFIX_MAX];
    size_t prefix_len;
    char *const *filters; /* --duplicate_std{out,err}_filters (borrowed from the spec), or NULL */
    int dup_fd;           /* attempt_N/filtered_std{out,err}.log when filters is set, else -1 */
    int detached;         /* the console is a closed pipe: the worker's pipe was closed early */
    int finished;         /* agent__stream_finish ran: the worker no longer points here */
    int closed;           /* the close callback ran (s stays allocated until finished) */
    int cut;              /* the console got the start of a too long line; more follows */
    /* --timestamp_output: the stamp of the line being read (the time its first bytes were
     * read), written after the tag of each of its console pieces and at its start in the file */
    int stamped;
    char stamp[AGENT_STAMP_LEN + 1];
    int held; /* not read while the console is backed up (agent__streams_resume) */
    agent_t *a;
    /* --heartbeat_on_output: the monotonic time of the last whole line goes here (the worker's
     * out_beat_ms: the worker table outlives every stream), or NULL. */
    uint64_t *beat_ms;
} agent_stream_t;

/* A worker's states; agent/worker.c says what moves it from one to the next. */
typedef enum { WORKER_NONE = 0, WORKER_RUNNING, WORKER_EXITED } agent_worker_state_t;

/* One worker of the group (agent/worker.c), reused by every attempt: written by worker.c (and
 * group.c, which numbers it), except its hang detection's fields, which are hang.c's. */
struct agent_worker {
    int local_rank;
    int rank;
    pid_t pid; /* also its process group id */
    agent_worker_state_t state;
    int status;       /* wait status once exited */
    int exec_errno;   /* errno reported by a failed exec, else 0 */
    time_t exit_wall; /* wall-clock time of exit (summary) */
    char error_file[PATH_MAX];
    agent_stream_t *out, *err;
    /* Hang detection (agent/hang.c, which writes them), reset when the worker starts. */
    char hb_file[PATH_MAX];     /* DDPRUN_HEARTBEAT_FILE; "" when detection is off */
    struct timespec hb_mtime;   /* its mtime as last seen */
    uint64_t hb_checked_ms;     /* monotonic time of that look */
    uint64_t hb_last_ms;        /* monotonic time of the last beat through the file */
    int hb_beaten;              /* the file has beaten in this attempt */
    uint64_t out_beat_ms;       /* last whole output line (--heartbeat_on_output); 0 = none */
    uint64_t out_fed_ms;        /* the newest output beat given to goodput.c */
    long long step;             /* last progress counter read from the file; -1 = none */
    uint64_t hung_for_ms;       /* silence when it was found hung */
    pid_t stacks_pid;           /* stack capture helper not yet reaped; 0 = none */
    char stacks_file[PATH_MAX]; /* where its group's stacks went; "" = not captured */
    /* Straggler detection (agent/straggler.c, which writes them). */
    char tm_file[PATH_MAX]; /* DDPRUN_TIMING_FILE; "" when detection is off */
    ddp_timing_t tm_last;   /* the totals last read in this attempt */
    int tm_have;            /* tm_last holds a read */
    /* What every attempt of this worker timed, for the metrics. */
    uint64_t tm_sum_compute_ns, tm_sum_wait_ns, tm_sum_steps;
};

/* Supervision states (agent/supervise.c has the state x event table). */
typedef enum {
    SUP_RUNNING = 0, /* the group is up */
    SUP_STOPPING,    /* a worker failed: the rest are being stopped, then restart or fail */
    SUP_SHUTDOWN,    /* a termination signal arrived: stop everything and exit */
    SUP_JOINING,     /* multi-node: waiting for the rendezvous to close a round */
    SUP_BARRIER,     /* multi-node: our workers succeeded; waiting at the exit barrier */
    SUP_DONE,        /* the loop is winding down; no more events matter */
    SUP_CAPTURING,   /* a worker hung: the stacks of every worker are being captured */
    SUP_ABORTING,    /* multi-node: this node stops the run for good; waiting for the store's ack */
    SUP_CHECKING,    /* the node's health check runs, or its next try waits: no worker runs */
    SUP_NSTATES
} agent_sup_state_t;

typedef enum {
    EV_WORKER_FAIL = 0, /* a worker exited non-zero or by a signal */
    EV_GROUP_DOWN,      /* no worker of the attempt is running any more */
    EV_SIGNAL,          /* a termination signal (TERM, INT, HUP, QUIT, ...) */
    EV_KILL_TIMER,      /* shutdown_timeout ran out */
    EV_JOINED,          /* multi-node: the rendezvous closed a round with us in it */
    EV_ROUND_END,       /* multi-node: the running round ended (failure, death or scale-up) */
    EV_RDZV_ERROR,      /* multi-node: the rendezvous refused us or the store was lost */
    EV_BARRIER_DONE,    /* multi-node: every node passed the exit barrier (or its bound ran out) */
    EV_WORKER_HUNG,     /* a worker did not beat within its heartbeat timeout */
    EV_STACKS_DONE,     /* every stack capture helper was reaped, or their budget ran out */
    EV_ABORT_DONE,      /* multi-node: the store answered this node's ABORT (or could not) */
    EV_STORE_LOST,      /* multi-node: the daemon's store was lost; the agent is reconnecting */
    EV_BARRIER_BROKEN,  /* multi-node: the round ended (or the store forgot it) before every node
                         * passed the exit barrier: the job is not done, re-join */
    EV_HEALTH_OK,       /* the node's health check passed (node_check.c) */
    EV_HEALTH_FAILED,   /* it failed; a->check.reason says why */
    EV_RUN_DONE,        /* multi-node: the run finished (passed its exit barrier) without this
                         * node: a spare, or a node that came after the end */
    EV_GPU_RELEASED,    /* the stopped group's GPU memory is free, or the wait for it ran out
                         * (gpu_wait.c): the restart goes on */
    EV_SPARE,           /* multi-node: the run is at max_nodes; this node waits as a spare and
                         * JOINs again (its keep-alive) after its health check */
    EV_NEVENTS
} agent_event_t;

/* The run directory's path is bounded well below PATH_MAX, so that the directories made under it
 * (attempt_<n>/<local_rank>, AGENT_ATTEMPT_DIR_MAX) and the files in them (error.json, stdout.log,
 * stacks.txt) always fit PATH_MAX: a --log_dir too long for that is refused at the start. */
#define AGENT_RUN_DIR_MAX 3072
#define AGENT_ATTEMPT_DIR_MAX (AGENT_RUN_DIR_MAX + 128)

/* One recorded failure, kept for the summary. */
typedef struct agent_failure {
    int rank, local_rank;
    pid_t pid;
    int status;
    int exec_errno;
    time_t when;
    char error_file[PATH_MAX];
    int hung;                   /* no exit: the worker stopped beating */
    uint64_t hung_for_ms;       /* how long it had been silent */
    long long step;             /* its last progress counter; -1 = none */
    char stacks_file[PATH_MAX]; /* its stacks; "" = none captured */
} agent_failure_t;

/* What a round gives this node: its place in the job and where its workers meet (MASTER_*).
 * One node: from the command line, the attempt counting its restarts; several: from each JOIN
 * reply. agent_t's part `as`, written by assignment.c alone (agent__assignment_init,
 * agent__assignment_apply). */
typedef struct agent_assignment {
    int64_t round;        /* DDPRUN_ROUND */
    int attempt;          /* TORCHELASTIC_RESTART_COUNT */
    int node_rank;        /* GROUP_RANK */
    int group_world_size; /* nodes */
    int rank_base;        /* RANK of local rank 0 */
    int world_size;
    char master_addr[256];
    int master_port;
} agent_assignment_t;

/* The agent: one part per owner. A part is written by the file (or the files) its comment names
 * and read by any; the others change it through its owner's functions. agent_run zeroes the
 * whole (descriptors -1) before anything runs. */
struct agent {
    /* The job as this agent runs it, and the loop's own handles (agent.c): set while agent_run
     * sets the job up, read-only while the loop runs. */
    struct {
        const agent_job_t *job; /* borrowed from agent_run's caller */
        uv_loop_t *loop;
        const struct agent_node_ops *ops; /* agent__local_ops or agent__rdzv_ops */
        int nproc;
        char hostname[256];
        char run_dir[AGENT_RUN_DIR_MAX]; /* log_dir, or a private temp dir for error files */
        int run_dir_is_temp;
        int run_dir_lock;     /* a private run directory's flock (scratch.c); -1 none */
        int log_layout;       /* attempt_N/<local_rank>/ directories (log_dir or log files) */
        struct rlimit nofile; /* RLIMIT_NOFILE as ddprun started, restored in every worker */
        int nofile_saved;
        uv_signal_t sigchld;
        uv_signal_t sigs[AGENT_MAX_SIGNALS + 2];
        int nsigs;
    } cfg;
    /* Supervision (supervise.c, with the node operations of rdzv_ops.c that the table calls):
     * the state, how the job ends, and the timers of a stop and a restart. */
    struct {
        agent_sup_state_t state;
        int fatal;             /* a shutdown that must end in exit 1 (rendezvous lost) */
        agent_result_t result; /* how the job ended (agent_run's *res) */
        int error;             /* < 0: the agent itself failed (agent_run returns it) */
        int stop_signal;       /* signal that started a shutdown, else 0 */
        uv_timer_t kill_timer;
        uv_timer_t restart_timer;
        int round_ended;      /* multi-node: the round ended while capturing (nothing to report) */
        int no_progress_stop; /* restarts stopped by --max_no_progress_restarts */
        int summarized;       /* the failure summary was printed (with the goodput line) */
    } sup;
    agent_assignment_t as; /* this node's place in the round (assignment.c) */
    /* The group of workers (group.c and worker.c). */
    struct {
        agent_worker_t *workers;
        int running;               /* workers not yet reaped */
        agent_failure_t *failures; /* failures of the current attempt, in order of exit */
        int nfailures;
        ddp_strv_t base_env; /* environment shared by every worker */
    } grp;
    /* The stores this agent serves and where its workers find the job's (store.c). */
    struct {
        struct rdzv_server *store;
        /* The workers' store (job->worker_store_own == 0): PyTorch's TCPStore commands at
         * MASTER_ADDR:MASTER_PORT when this node is group rank 0; NULL with --worker_store=own. */
        struct rdzv_server *wstore;
        char token_hex[2049]; /* the job token, hex, for DDPRUN_STORE_TOKEN ("" = none) */
        uint16_t port;
        char addr[256]; /* DDPRUN_STORE_ADDR for the workers */
    } stores;
    /* What the agent tells machines (metrics.c and events.c): the --metrics listener, its
     * counters since ddprun started (agent__count) and the events that could not be written. */
    struct {
        struct rdzv_metrics *metrics; /* --metrics, or NULL */
        uint64_t counts[AGENT_NCOUNTS];
        long events_lost; /* --event_log_handler json events that could not be written */
    } obs;
    struct agent_rdzv *rdzv; /* multi-node rendezvous state (rdzv.c); NULL on one node */
    /* job->ssh_session (session.c): the ssh session's stdin, the watch on the launcher's
     * heartbeats (started by the first), and the line being read (len past its size: a line too
     * long, skipped to its end). */
    struct {
        uv_poll_t poll;
        uv_timer_t timer;
        char line[AGENT_SSH_LINE_MAX];
        size_t len;
        int heard; /* a heartbeat came: silence now means the launcher is gone */
    } session;
    /* The orphan guard (guard.c): the write end of the pipe to it, or -1, and its pid. */
    struct {
        int fd;
        pid_t pid;
    } guard;
    /* The job's cgroup v2 (cgroup.c); dir "" when there is none. Each worker group runs in a
     * fresh cgroup below it, g<N>. */
    struct {
        char dir[PATH_MAX];
        int seq;      /* N of the next group's cgroup */
        int procs_fd; /* the group cgroup's cgroup.procs, written by each worker before exec */
        int dir_fd;   /* the group's cgroup, for clone3's CLONE_INTO_CGROUP; or -1 */
    } cgroup;
    /* DDPRUN_SHM_DIR (scratch.c): the workers' directory on /dev/shm, or "". */
    struct {
        char dir[PATH_MAX];
        int lock_fd; /* holds the directory's flock while this agent lives; -1 none */
    } scratch;
    /* Hangs and progress (hang.c). */
    struct {
        uv_timer_t hb_timer;     /* at the earliest heartbeat deadline of the running workers */
        uv_timer_t stacks_timer; /* the capture's budget plus a second */
        uint64_t group_start_ms; /* monotonic start of the running attempt */
        int stacks_kept;         /* a capture wrote into the private run directory: keep it */
        long long best_step;     /* highest progress counter of any earlier attempt; -1 = none */
        int no_progress;         /* attempts in a row that ended without passing best_step */
    } hang;
    /* Where the job's time goes (goodput.c, on goodput.h's arithmetic): fed by agent.c (the
     * start), group.c (each spawn), hang.c (the beats it reads), supervise.c (a failure known,
     * the group down, the end); read by summary.c and metrics.c. */
    agent_goodput_t gp;
    /* Stragglers (straggler.c): the window timer, and the run's stragglers as the store's last
     * TIMING reply listed them (a JSON array; NULL before the first). */
    struct {
        uv_timer_t timer;
        struct json_t *named;
    } strag;
    /* The GPU memory wait before a restart (gpu_wait.c, on gpu_mem.h). */
    struct {
        uv_timer_t timer;
        struct agent_gpu_mem *nvml;
        int skip;               /* NVML is not usable here: never wait */
        uint64_t wait_start_ms; /* when this restart's wait began */
        int delay_ms;           /* the last poll delay */
        pid_t *pids;            /* the stopped workers' pids */
    } gpu;
    /* The node's health check before each start or JOIN (node_check.c). */
    struct {
        struct agent_health *cmd; /* the --health_check command running, or NULL */
        uv_timer_t timer;         /* the back-off before the next try */
        uint64_t since_ms;        /* monotonic start of this start's checks; 0 = none yet */
        int delay_ms;             /* the last back-off */
        int failures;             /* failed checks in a row before this start */
        /* The last failure, one line: "--health_check: exit status 3; output: ...", or the
         * GPU's. */
        char reason[2560];
    } check;
    /* ddprun's stdout ([1]) and stderr ([2]) as the agent writes them (console.c); one object
     * for both when they name the same file. */
    struct {
        agent_console_t *console[3];
    } out;
};

/* What differs between one node and several, as one table of operations: supervise.c, worker.c
 * and agent.c call these and never ask which kind of job runs. agent__local_ops (supervise.c)
 * restarts the group itself and counts the restarts; agent__rdzv_ops (rdzv_ops.c) leaves both to
 * the rendezvous. */
typedef struct agent_node_ops {
    /* Sets the job going: the first group, or the first JOIN. Returns 0 or a negative code. */
    int (*begin)(agent_t *a);
    /* Before a group starts: what the previous group left in this node's stores goes. */
    void (*group_prepare)(agent_t *a);
    /* The group failed (what: its root cause, one line): tell whoever ends the round. */
    void (*report_failure)(agent_t *a, const char *what);
    /* The failed group is down: the next attempt if restarts remain, else the summary and exit. */
    void (*restart)(agent_t *a);
    /* Another attempt cannot help (why: one line): stop the job for good. */
    void (*give_up)(agent_t *a, const char *why);
    /* Every worker of the group exited 0: leave. */
    void (*succeeded)(agent_t *a);
    /* The node passed its health check: start the group (one node) or send the JOIN (several). */
    void (*start)(agent_t *a);
    /* The node's health check failed (reason: one line): say so where the job's state is kept;
     * the node retries until join_timeout. */
    void (*report_unfit)(agent_t *a, const char *reason);
    /* Straggler detection's report of this node's ranks (text: TIMING's, docs/protocol-rdzv.md)
     * to the store that judges; NULL on one node (no store compares nodes). */
    void (*report_timing)(agent_t *a, const char *text);
    /* The store was lost while this node's JOIN was parked: the same JOIN again, on the new
     * connection (several nodes; one node has no store to lose). */
    void (*rejoin)(agent_t *a);
    /* At the exit barrier the round ended or the store was lost: whether every node passed the
     * barrier all the same (EV_BARRIER_DONE) or not (EV_BARRIER_BROKEN) (several nodes; one node
     * has no barrier). */
    void (*barrier_settle)(agent_t *a);
    /* Whether this node's failures are the job's root cause, and what the store named as the
     * root cause (*store_says, "" when none): agent__rdzv_root_cause on several nodes, always 1
     * and "" on one. */
    int (*root_cause)(const agent_t *a, const char **store_says);
} agent_node_ops_t;
extern const agent_node_ops_t agent__local_ops, agent__rdzv_ops;
/* group.c: agent__local_ops' group_prepare. */
void agent__local_group_prepare(agent_t *a);

/* assignment.c: init: the assignment before any round, from the command line (--node_rank,
 * --nnodes' maximum), once before the stores start. get: the agent's current assignment; apply:
 * takes as (its fields and the workers' shared environment). Returns 0 or -ENOMEM (logged). */
void agent__assignment_init(agent_t *a);
void agent__assignment_get(const agent_t *a, agent_assignment_t *as);
int agent__assignment_apply(agent_t *a, const agent_assignment_t *as);

/* group.c: the worker table and the failure list, nproc slots each, once before the first
 * group; -ENOMEM when they cannot be had. free: them and the workers' shared environment, after
 * the loop. */
int agent__group_init(agent_t *a);
void agent__group_free(agent_t *a);
/* group.c: starts every worker of attempt a->as.attempt, the failure list emptied first. Returns
 * 0 or -errno (logged). */
int agent__group_start(agent_t *a);
/* group.c: builds the environment every worker shares. Returns 0 or -ENOMEM. */
int agent__base_env_build(agent_t *a);
/* group.c: sends sig to every running worker's process group. */
void agent__group_signal(agent_t *a, int sig);
/* group.c: mkdir -p of a per-attempt directory below the run directory, none of its components a
 * link. Returns 0 or a negative code (logged). */
int agent__attempt_dirs_make(agent_t *a, const char *path);

/* worker.c (a worker's life; its states are listed there): starts worker w of the attempt.
 * Returns 0 or -errno (logged). */
int agent__worker_start(agent_t *a, agent_worker_t *w);
/* worker.c: the running worker whose pid is pid, or NULL. */
agent_worker_t *agent__worker_by_pid(agent_t *a, pid_t pid);
/* worker.c: records the exit of worker w (wait status status) and feeds the state table. */
void agent__worker_exited(agent_t *a, agent_worker_t *w, int status);
/* worker.c: copies w's end (or, for the caller to complete, its hang) into the attempt's failure
 * list, for the summary: one slot per worker, the first being the root cause. */
void agent__worker_failure_record(agent_t *a, const agent_worker_t *w);
/* worker.c: records w's hang as a failure (agent__worker_failure_record, then how long it was
 * silent and its last step, found now: it has not exited). */
void agent__worker_hang_record(agent_t *a, const agent_worker_t *w);
/* worker.c: the root cause's stacks file, from its worker, once the capture is over. */
void agent__worker_failure_stacks(agent_t *a);
/* worker.c: worker w, reaped while a start is abandoned: EXITED, its streams drained, no event. */
void agent__worker_abandoned(agent_t *a, agent_worker_t *w);
/* job.c: the device (its text in the visible list, or the local rank when there is no list) a
 * worker sees under --virtual_local_rank, into out (cut to cap - 1 bytes). Returns 0, or -ENOENT
 * when the list has no device for local_rank (agent_job_prepare has refused such a job). */
int agent__worker_device(const agent_job_t *job, int local_rank, char *out, size_t cap);

/* console.c: the agent's stdout and stderr, written without blocking the loop (see console.c).
 * The console knows nothing of who writes to it: worker output's reader (output.c) asks it
 * whether to hold back and is told through drained when to read again.
 * start: after the loop exists; drained(a, std) is called when console std, backed up, has
 * drained below its low mark. stop: at the end of teardown (a bounded last flush). write:
 * std 1 or 2; can_wait: worker output, which is held back rather than dropped (its readers
 * stop at agent__console_busy), else the agent's own line, dropped and counted when the queue
 * is full. Returns 0, or -EPIPE once the reader has gone. busy: the queue is past its high
 * mark; the caller stops reading until drained says so. shared: std1 and std2 are one console
 * (they name the same file), nonzero then. */
typedef void (*agent_console_drained_cb)(agent_t *a, int std);
void agent__console_start(agent_t *a, agent_console_drained_cb drained);
int agent__console_write(agent_t *a, int std, const void *p, size_t n, int can_wait);
int agent__console_busy(agent_t *a, int std);
int agent__console_shared(const agent_t *a, int std1, int std2);
void agent__console_stop(agent_t *a);
/* output.c: reads again the worker streams held back for console std (the console's drained
 * callback). */
void agent__streams_resume(agent_t *a, int std);

/* output.c: opens the read side for stream std (1 or 2) of worker w; see agent_stream_t. */
agent_stream_t *agent__stream_open(agent_t *a, int fd, int rank, int std, int console_fd, int tag,
                                   int file_fd);
/* output.c: says how much worker output the log files lost, if any (once, at the end). */
void agent__log_lost_say(const agent_t *a);
/* output.c: drains what the pipe holds without blocking, then closes the stream. */
void agent__stream_finish(agent_stream_t *s);

/* supervise.c: feeds one event to the state table. */
void agent__event(agent_t *a, agent_event_t ev, agent_worker_t *w);
/* supervise.c, what the other parts ask of supervision (its part of agent_t is its own):
 * init: the kill and restart timers, once before the first group; 0 or a negative libuv code.
 * stop_take: a termination signal sig (the first one is the job's stop signal), fed as
 * EV_SIGNAL. abandon: the job could not be set going (error < 0): DONE at once, no event; the
 * caller closes the loop. result_unfit: the store excluded this node: however the job ends, it
 * ends unfit (exit 4). check_enter: CHECKING, and the node's health check starts
 * (agent__node_check_begin); EV_HEALTH_OK or EV_HEALTH_FAILED follows. */
int agent__sup_init(agent_t *a);
void agent__stop_take(agent_t *a, int sig);
void agent__sup_abandon(agent_t *a, int error);
void agent__result_unfit(agent_t *a);
void agent__check_enter(agent_t *a);

/* agent.c: signal sig, caught by the agent or brought by its ssh session: a termination signal
 * stops the job (a second one kills the workers), another is forwarded to the workers. */
void agent__signal_take(agent_t *a, int sig);
/* agent.c: kill-timer callback (feeds EV_KILL_TIMER). */
void agent__on_kill_timer(uv_timer_t *t);
/* agent.c: SIGKILLs orphans the agent adopted as subreaper (not workers, not the guard). */
void agent__kill_adopted(agent_t *a);
/* agent.c: closes every handle so that uv_run returns; the outcome is already recorded. */
void agent__shutdown_loop(agent_t *a);

/* --event_log_handler json: writes event (its name) with the common fields (ts, run_id, host,
 * agent_pid, node_rank, attempt) and the fields fmt packs (jansson's json_pack format of one
 * object; NULL: none) as one line (agent/events.c). A no-op when events are off. */
void agent__evlog(agent_t *a, const char *event, const char *fmt, ...);

/* Says how many events could not be written, if any (once, at the end of the job). */
void agent__evlog_lost_say(const agent_t *a);

/* --metrics: starts the agent's Prometheus listener (agent/metrics.c). 0 or a negative code
 * (logged, naming the flag). */
int agent__metrics_start(agent_t *a);
/* Adds n to counter (AGENT_COUNT_*), whichever part counts it; metrics.c serves the counts. Inline,
 * so that counting ties no part to the metrics page (which reads the hang watch's ages). */
static inline void agent__count(agent_t *a, int counter, uint64_t n) {
    a->obs.counts[counter] += n;
}
/* metrics.c: closes the --metrics listener, if any (agent__shutdown_loop). */
void agent__metrics_stop(agent_t *a);

/* store.c: one node: the job store on 127.0.0.1 with a fresh token (a->stores.token_hex), and the
 * workers' store on MASTER_ADDR (--master_port, or a port the kernel picks: no race with another
 * job); with --worker_store=own a free MASTER_PORT for the workers' rank 0 instead. Then the
 * workers' shared environment. Returns 0 or a negative code (logged). */
int agent__local_store_start(agent_t *a, ddp_err_t *err);
/* store.c: serves the workers' store on host:port (port 0: the kernel picks) into a->stores.wstore,
 * for the agent's user alone (rdzv_server_opts_t.owner_only) and with limits fitted to workers
 * processes (several nodes: refitted to the world size at each JOIN). flag names where the
 * address came from, for the error line. Returns 0 or a negative code (logged). */
int agent__worker_store_start(agent_t *a, const char *host, int port, size_t workers,
                              const char *flag);
/* store.c: logs what a store did about the open-file limit (rdzv_server_nofile_note), if
 * anything. */
void agent__store_nofile_log(const struct rdzv_server *store);
/* store.c: a free TCP port on addr (for MASTER_PORT), or -errno. */
int agent__pick_free_port(const char *addr);
/* store.c, several nodes (rdzv.c): host: serves the job's store here, embedded in this agent
 * (the rendezvous endpoint is ours), with so; 0 or a negative code (err says why). at: where the
 * workers find the job's store (DDPRUN_STORE_ADDR, DDPRUN_STORE_PORT) and its token (hex, for
 * DDPRUN_STORE_TOKEN; none when token is empty): the rendezvous endpoint. */
struct rdzv_server_opts;
int agent__job_store_host(agent_t *a, const struct rdzv_server_opts *so, ddp_err_t *err);
void agent__job_store_at(agent_t *a, const char *addr, int port, const ddp_buf_t *token);
/* store.c: closes the rendezvous store this agent serves, at once (its connections go with it):
 * an etcd leader that lost its lease. */
void agent__job_store_drop(agent_t *a);
/* store.c: closes the job store and the workers' store (agent__shutdown_loop). */
void agent__stores_close(agent_t *a);

/* rdzv.c: nonzero when the job needs a multi-node rendezvous. */
int agent__rdzv_wanted(const agent_job_t *job);
/* rdzv.c: agent_job_prepare's multi-node part: the endpoint given and resolved, the run id short
 * enough for the protocol, the job token loaded. Returns 0, DDP_EUSAGE (err names the flag or
 * variable) or -ENOMEM. */
int agent__rdzv_prepare(agent_job_t *job, ddp_err_t *err);
/* rdzv.c: hosts the store when the endpoint is ours and connects; agent_run then sends the first
 * JOIN (agent__rdzv_join). Returns 0, or DDP_EUSAGE / -errno (logged). */
int agent__rdzv_start(agent_t *a);
/* rdzv.c: joins the first round, or the next one once the group of the previous one is down;
 * the outcome arrives as EV_JOINED or EV_RDZV_ERROR (state SUP_JOINING). */
void agent__rdzv_join(agent_t *a);
/* rdzv.c: tells the store this node failed its health check (reason: why) and does not join;
 * `ddprun status` shows it until the node joins. Best effort: nothing when the store is lost. */
void agent__rdzv_report_unfit(agent_t *a, const char *reason);
/* rdzv.c: whether the failures of this node's last group are the job's root cause: 1 on one
 * node, when the store counted this node's FAIL of its round (only a round's first counts), or
 * when it cannot tell (the FAIL went unanswered; none was sent and the store named no cause); 0
 * when the store ignored the FAIL (the round had ended), or none was sent (its workers failed
 * after the round ended) and the store named the root cause. *store_says:
 * the root cause a failed run's refusal named (escaped; "" when none came). Borrowed: valid
 * while a lives. */
int agent__rdzv_root_cause(const agent_t *a, const char **store_says);
/* rdzv.c: reports a failure of the running round's group (counts against max_restarts). */
void agent__rdzv_report_failure(agent_t *a, const char *what);
/* rdzv.c: stops the run for good on every node (ABORT, docs/protocol-rdzv.md), why saying so in
 * the refusal the other nodes get; EV_ABORT_DONE follows once the store has answered, or at once
 * when the request cannot be sent. */
void agent__rdzv_abort(agent_t *a, const char *why);
/* rdzv.c: enters the exit barrier of the current round; EV_BARRIER_DONE follows. */
void agent__rdzv_exit_barrier(agent_t *a);
/* rdzv.c: at the exit barrier, the round ended or the store was lost: asks the store whether
 * every node passed the barrier all the same (EV_BARRIER_DONE) or not (EV_BARRIER_BROKEN). */
void agent__rdzv_barrier_settle(agent_t *a);
/* rdzv.c: closes the connections and timers (the hosted store is a->stores.store) and leaves
 * the etcd election: returns 1 when the resignation goes on in the
 * background (done(arg) runs from the loop once over), 0 when all is stopped. */
int agent__rdzv_stop(agent_t *a, void (*done)(void *arg), void *arg);
/* rdzv.c: frees the rendezvous state after the loop has closed every handle. */
void agent__rdzv_free(agent_t *a);

/* session.c: watches the ssh session of an agent a launching ddprun started (job->ssh_session):
 * the launcher's lines, their silence and the session's end. Returns 0 or a negative libuv code
 * (logged). */
int agent__session_start(agent_t *a);

/* straggler.c: the window timer (running for the agent's life when detection is on, never
 * keeping the loop alive); once before the first group. Returns 0 or a negative libuv code. */
int agent__straggler_init(agent_t *a);
/* straggler.c: frees the stragglers last told. */
void agent__straggler_fini(agent_t *a);
/* straggler.c: the timing file of worker w for this attempt, created empty (mode 0600) into
 * w->tm_file when detection is on (else ""). A file that cannot be made leaves the worker out
 * (a warning); returns 0. */
int agent__straggler_worker_file(agent_t *a, agent_worker_t *w, const char *dir);
/* straggler.c: the store's TIMING reply, the run's stragglers (JSON array of len bytes): a line
 * and an event for each one named or cleared since the last reply. */
void agent__straggler_told(agent_t *a, const char *json, size_t len);
/* straggler.c: the timing counters of each worker and the stragglers, in Prometheus text.
 * Returns 0 or -ENOMEM. */
int agent__straggler_metrics(agent_t *a, ddp_buf_t *out, const char *run);
/* rdzv.c: sends one TIMING report (text) for the running round, when the link is up (the
 * several-node operations' report_timing). */
void agent__rdzv_timing_send(agent_t *a, const char *text);

/* hang.c: the timers' handles and their data; called once before the first group. Returns 0 or
 * a negative libuv code. */
int agent__hang_init(agent_t *a);
/* hang.c: the heartbeat file of worker w for this attempt, created empty (mode 0600) into
 * w->hb_file, when hang detection is on (else w->hb_file is ""). Returns 0 or -errno (logged). */
int agent__hang_worker_file(agent_t *a, agent_worker_t *w, const char *dir);
/* hang.c: arms hang detection for the group that just started. */
void agent__hang_arm(agent_t *a);
/* hang.c: starts a stack capture of every running worker's process group. Returns how many
 * helpers started (0: nothing to wait for). */
int agent__hang_capture_start(agent_t *a);
/* hang.c: SIGKILLs the capture helpers still running (a signal stops the job). */
void agent__hang_capture_kill(agent_t *a);
/* hang.c: nonzero when pid is a capture helper of ours (agent__kill_adopted spares them). */
int agent__hang_is_helper(agent_t *a, pid_t pid);
/* hang.c: SIGCHLD reaped pid: when it is a capture helper, notes it (EV_STACKS_DONE after the
 * last) and returns 1; else 0. */
int agent__hang_helper_reaped(agent_t *a, pid_t pid);
/* The one wording of a hang, "hung: no heartbeat for 1.0 s (last step 62)", into out: the
 * rendezvous' failure text (supervise.c), the log (hang.c) and the summary all use it. */
static inline void agent__hang_text(const agent_failure_t *f, char *out, size_t cap) {
    char step[48] = "";
    if (f->step >= 0)
        snprintf(step, sizeof step, " (last step %lld)", f->step);
    snprintf(out, cap, "hung: no heartbeat for %.1f s%s", f->hung_for_ms / 1000.0, step);
}
/* hang.c: logs the hang of failure f (a WARN line naming rank, pid, silence, step and stacks
 * file) and the first lines of its stacks. */
void agent__hang_report(agent_t *a, const agent_failure_t *f);
/* hang.c: the age of w's last beat (file or output line; the group's start before its first),
 * read from its heartbeat file now_ms (the monotonic clock), as a scrape or `ddprun status` wants
 * it: never the age of the last look. Returns 0 with *age_ms, or -ENOENT when w is not running or
 * hang detection is off. */
int agent__hang_beat_age(agent_t *a, agent_worker_t *w, uint64_t now_ms, uint64_t *age_ms);
/* hang.c: this node's progress for `ddprun status`: the highest step its running workers wrote
 * (-1 none) and the time since the last beat of its most silent one (since the group started,
 * for one that has not beaten). Returns 0, or -ENOENT when hang detection is off or no worker
 * runs. */
int agent__hang_progress(agent_t *a, int64_t *step, int64_t *beat_age_ms);
/* hang.c: the attempt just ended: updates the progress record from the heartbeat files.
 * Returns 1 when --max_no_progress_restarts says to stop restarting, with why (cap bytes) saying
 * so for the log and the other nodes, else 0. */
int agent__hang_progress_stop(agent_t *a, char *why, size_t cap);
/* hang.c: reads every worker's heartbeat file now (the running ones and those of the attempt that
 * just ended), so that the beats goodput.c is fed are the last ones before a failure or the end. */
void agent__hang_beats_look(agent_t *a);

/* goodput.c, the agent's part `gp` (docs/cli.md "Goodput"): begin: once before the first group;
 * spawn: a group started (group.c); beat: a beat at monotonic t, step or -1 (hang.c, only when it
 * reads a new one); failed: the running group failed, hung or must stop (supervise.c, after
 * agent__hang_beats_look); down: that group is down; end: the job ends (supervise.c), saying the
 * line (WARN after restarts, else INFO) unless the failure summary has it. Each closed restart
 * is a `restart_cost` event. watching: nonzero while a group has not beaten yet or redoes steps
 * (the hang watch then looks at the files more often, for the start's and the redo's end). */
void agent__goodput_begin(agent_t *a);
void agent__goodput_spawn(agent_t *a);
void agent__goodput_beat(agent_t *a, uint64_t t, long long step);
void agent__goodput_failed(agent_t *a);
void agent__goodput_down(agent_t *a);
void agent__goodput_end(agent_t *a, int summarized);
int agent__goodput_watching(const agent_t *a);
/* goodput.c: the summary's goodput line, now, into out (cap bytes). */
void agent__goodput_text(agent_t *a, char *out, size_t cap);
/* goodput.c: the shutdown event's `goodput` object (docs/cli.md), a new reference. */
struct json_t *agent__goodput_json(agent_t *a);
/* goodput.c: the goodput so far, now, into *t and the restarts whose cost is known into
 * *restarts, for `ddprun status` (rdzv.c). Returns 0, or -ENOENT while it is unknown (no beat
 * came yet, or there is no beat source): the summary's line says "goodput unknown" then. */
int agent__goodput_so_far(agent_t *a, agent_goodput_totals_t *t, int *restarts);

/* gpu_wait.c: the wait's timer; called once before the first group. Returns 0 or a negative
 * libuv code. */
int agent__gpu_wait_init(agent_t *a);
/* gpu_wait.c: waits (on the loop) for the GPU memory of the stopped group, then feeds
 * EV_GPU_RELEASED. Returns 1 when a wait started, 0 when there is nothing to wait for. */
int agent__gpu_wait_start(agent_t *a);
/* gpu_wait.c: nonzero while a restart waits for the GPU memory of the stopped group. */
int agent__gpu_wait_active(agent_t *a);
/* gpu_wait.c: cancels a GPU memory wait (a termination signal). */
void agent__gpu_wait_cancel(agent_t *a);
/* gpu_wait.c: frees what the GPU memory wait holds (NVML). */
void agent__gpu_wait_free(agent_t *a);
/* gpu_wait.c: opens NVML once (DDPRUN_NVML_LIB names a stand-in for tests); a machine without
 * it or without a GPU is never asked again. Returns 0 when a->gpu.nvml is usable, else -1. */
int agent__gpu_open(agent_t *a);

/* node_check.c: the node's health check before each start of the group and each JOIN:
 * --health_check CMD (its process group, bounded by --health_check_timeout), then the GPUs'
 * fault counters (agent__gpu_health). init: the back-off timer, once before the first group.
 * begin: runs the check (supervise.c has entered SUP_CHECKING: agent__check_enter);
 * EV_HEALTH_OK or EV_HEALTH_FAILED follows
 * (at once when only the GPU check runs). failed: after EV_HEALTH_FAILED, the event and the
 * next try after a back-off (1 s doubling to 30 s); returns 0 when one is scheduled, or 1 when
 * join_timeout is spent (the node is unfit; nothing scheduled). cancel: kills the check and its
 * group and stops the back-off (a signal, a lost rendezvous). reaped: SIGCHLD reaped pid; 1 when
 * it was the check's. pid: the check's process, or 0. say: the log line of a failed check, one
 * wording on one node and many. */
int agent__node_check_init(agent_t *a);
void agent__node_check_begin(agent_t *a);
int agent__node_check_failed(agent_t *a);
void agent__node_check_cancel(agent_t *a);
int agent__node_check_reaped(agent_t *a, pid_t pid, int status);
pid_t agent__node_check_pid(const agent_t *a);
void agent__node_check_say(agent_t *a, const char *reason);

/* summary.c: prints the failure summary of the last attempt to stderr. */
void agent__summary_print(agent_t *a);

/* summary.c: the error file's message (PyTorch format) for a failure; caller frees. NULL when
 * the file cannot be read or is not such JSON: then bad (when not NULL) says why, in a line, or
 * is "" when the file is missing. */
char *agent__error_file_message(const char *path, char **timestamp_out, char *bad, size_t bad_cap);

/* guard.c: starts the orphan guard, a tiny process that SIGKILLs registered process groups when
 * the agent dies without cleaning up (SIGKILL). Returns 0 or -errno. */
int agent__guard_start(agent_t *a);
/* guard.c: tells the guard about a worker process group (add = 1) or its end (add = 0). */
void agent__guard_update(agent_t *a, pid_t pgid, int add);
/* guard.c: closes the pipe; the guard exits (and is reaped by the SIGCHLD handler). */
void agent__guard_stop(agent_t *a);
/* guard.c: SIGCHLD reaped pid: 1 when it was the guard (then forgotten), else 0. */
int agent__guard_reaped(agent_t *a, pid_t pid);

/* cgroup.c: creates the job's cgroup (a->cgroup.dir) for the workers to move into, unless
 * DDPRUN_CGROUP=0 or none can be made here; then says why once at -v (info). Returns 0, or a
 * negative code when the job runs without one (not an error: the job goes on). */
int agent__cgroup_start(agent_t *a);
/* cgroup.c: makes a fresh cgroup below the job's for the worker group about to start (the
 * workers start in it); on failure says so and the group runs outside it. */
void agent__cgroup_group_begin(agent_t *a);
/* cgroup.c: a worker could not move into the group's cgroup: the others would fail the same
 * way, so the rest of the group starts outside it (cgroup.procs closed). */
void agent__cgroup_procs_drop(agent_t *a);
/* cgroup.c: SIGKILLs every process in the job's cgroup (cgroup.kill), if there is one. */
void agent__cgroup_kill(agent_t *a);
/* cgroup.c: kills what is left in the job's cgroup, waits (bounded) for it to empty and removes
 * it. Logs a failure; the agent has no cgroup afterwards. */
void agent__cgroup_stop(agent_t *a);
/* cgroup.c: writes cgroup.kill of the cgroup at dir. Returns 0 or -errno. Allocates nothing (the
 * orphan guard calls it). */
int agent__cgroup_kill_dir(const char *dir);
/* cgroup.c: kills the cgroup at dir, waits (bounded) for it to empty and removes it with the
 * cgroups below it. Returns 0 (also when dir is already gone) or -errno / -ETIMEDOUT. */
int agent__cgroup_remove_dir(const char *dir);

/* errfile.c: rewrites the error file at path, when it is larger than AGENT_ERROR_FILE_MAX, as a
 * valid PyTorch-format file holding the start of its text and its size. Logs a failure. */
void agent__error_file_bound(const char *path);

/* agent.c: text (the user's run id) as a file name: characters other than [A-Za-z0-9._-] become
 * '_'; cut to cap - 1 bytes. */
void agent__file_safe(const char *text, char *out, size_t cap);

/* scratch.c: the workers' directory on /dev/shm (DDPRUN_SHM_DIR). start makes it ("" when
 * /dev/shm is not writable), after removing the private directories of agents killed with
 * their guard (agent__private_dirs_sweep); clear
 * empties it once a group's workers are reaped; stop removes it. */
void agent__scratch_start(agent_t *a);
void agent__scratch_clear(agent_t *a);
void agent__scratch_stop(agent_t *a);

/* scratch.c: the agent's private directories on a shared parent (/dev/shm, TMPDIR), named
 * "ddprun-...". hold locks dir for this agent's life and marks it (returns the lock's fd, or -1
 * when it cannot: the directory is then never swept); keep unmarks a held directory that is to
 * outlive the agent; sweep removes parent's marked directories of this user that nobody holds
 * and that have not changed for a minute (their agents died with their orphan guard). */
int agent__private_dir_hold(const char *dir);
void agent__private_dir_keep(int fd);
void agent__private_dirs_sweep(const char *parent);

#endif
