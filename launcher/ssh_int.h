/* SPDX-License-Identifier: Apache-2.0
 * Internals of the ssh launcher shared by its two files and their unit test: the run and its
 * hosts, each host's phases and events, and a section per file. ssh.c prepares the run and drives
 * it on a libuv loop (the ssh processes, their pipes, the signals and timers); ssh_host.c holds
 * each host's phase x event table and the run's decisions, and reaches the loop only through
 * the primitives of ssh_loop_ops_t below (ssh.c's; test_launch_ssh_host's record them). */
#ifndef LAUNCH_SSH_INT_H
#define LAUNCH_SSH_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ddp_buf.h"
#include "launch_hosts.h"
#include "launch_spec.h"

/* After the hosts are told to stop: --shutdown_timeout plus this, then the ssh clients are
 * killed (the agents then see their sessions end and stop by themselves). After a second signal
 * (the agents kill their workers at once): this long. */
#define SSH_STOP_EXTRA_S 15
#define SSH_KILL_WAIT_MS 5000
/* Bytes of one output line kept before it is written out in pieces, and of a host's stderr held
 * until its agent is ready (shown if it never is). */
#define SSH_LINE_MAX 65536
#define SSH_HELD_MAX 16384
/* The most words --ssh may have. */
#define SSH_MAX_WORDS 64
/* A host's agent that ended with a failure: the others know the job failed (the rendezvous
 * refuses them) and end by themselves, each with its own summary; they are given this long
 * before their sessions are closed. Longer than an agent's wait for a store that went away
 * (agent/rdzv.c, AGENT_EMBEDDED_CHECK_MS) and the store's host's lingering. */
#define SSH_FAIL_GRACE_MS 5000

/* A host's life (ssh_host.c draws the table). */
typedef enum {
    SSH_PENDING = 0, /* not started */
    SSH_WAITING,     /* ssh started; its agent waits on stdin for the store's address */
    SSH_STARTING,    /* its agent has what it needs and reads the launcher's lines; not ready */
    SSH_READY,       /* its agent said it is ready: it runs the job */
    SSH_CLOSING,     /* told to stop before it was ready */
    SSH_STOPPING,    /* told to stop once ready */
    SSH_DONE,        /* ssh has exited and its output is read (or it was never started) */
    SSH_LOST,        /* could not be started: the job went on without it, or stopped */
    SSH_NPHASES
} ssh_phase_t;

typedef enum {
    SSH_EV_START,      /* the scheduler's turn for it (--ssh_fanout) */
    SSH_EV_ADDRESS,    /* the store's address is known (the first host is ready) */
    SSH_EV_SEND,       /* a launcher line (heartbeat, "signal N", "pause") for its session */
    SSH_EV_READY_LINE, /* a stdout line "AGENT_SSH_READY ADDR:PORT" */
    SSH_EV_OUT_LINE,   /* another stdout line */
    SSH_EV_ERR_LINE,   /* a stderr line */
    SSH_EV_NO_ANSWER,  /* its agent was not ready by the host's deadline */
    SSH_EV_STOP,       /* the job stops (the line: "signal N") */
    SSH_EV_ENDED,      /* ssh exited (code) and its output is read */
    SSH_NEVENTS
} ssh_event_t;

/* The run as a whole (ssh_host.c decides it). */
typedef enum {
    SSH_RUN_GOING = 0, /* hosts start as --ssh_fanout allows */
    SSH_RUN_FAILED,    /* a host's agent failed: none starts, the others have SSH_FAIL_GRACE_MS */
    SSH_RUN_STOPPING,  /* every host was told to stop */
} ssh_run_phase_t;

/* One of ssh's output pipes, read line by line. */
typedef struct ssh_stream {
    uv_pipe_t pipe;
    int open; /* being read: not at its end yet */
    char *buf;
    size_t len;
} ssh_stream_t;

typedef struct ssh_host {
    struct ssh_run *run;
    const launch_host_t *h;
    int rank;
    ssh_phase_t phase;
    /* The loop's (ssh.c): */
    uv_process_t proc;
    uv_timer_t answer_timer; /* the deadline below */
    int running;             /* ssh has not exited */
    int code;                /* its exit code once exited (128+N after signal N) */
    int in_fd; /* ssh's stdin (non-blocking): the token, then the launcher's lines until ssh ends */
    ssh_stream_t out, err;
    /* The table's (ssh_host.c): */
    ddp_buf_t held;     /* stderr before the agent was ready */
    char last_err[256]; /* its last line (or why ssh could not start) */
    uint64_t deadline;  /* WAITING, STARTING: ms by which the agent must be ready */
    int root_cause; /* its agent's summary holds the job's root cause (AGENT_ROOT_CAUSE_TITLE) */
} ssh_host_t;

typedef struct ssh_loop_ops ssh_loop_ops_t;

typedef struct ssh_run {
    const launch_spec_t *spec;
    const ssh_loop_ops_t *io; /* the loop's primitives (below) */
    char *const *argv;        /* ddprun's own, whose flags are passed on to the hosts */
    launch_hosts_t hosts;
    ssh_host_t *v;
    char *words[SSH_MAX_WORDS + 1]; /* --ssh split on spaces (pointers into ssh_copy) */
    int n_words;
    char *ssh_copy;
    char ddprun[PATH_MAX];
    char cwd[PATH_MAX];
    char token_hex[2 * 32 + 2];
    char run_id[40];
    char endpoint[96]; /* where the agents meet; "" until the first host says */
    ddp_buf_t env;     /* the remote command's `env 'VAR=VAL' ...` words, quoted; may be empty */
    int endpoint_given;
    int etcd;                   /* --rdzv_backend=etcd: the agents elect the store */
    int nnodes_min, nnodes_max; /* what the agents are given: n:n, or MIN:n (--nnodes=MIN:MAX) */
    /* The loop's (ssh.c): */
    uv_loop_t loop;
    uv_signal_t sigs[AGENT_MAX_SIGNALS + 1];
    int n_sigs;
    uv_timer_t beat_timer, grace_timer, stop_timer;
    int stop_signal;        /* the first termination signal the launcher got */
    uint64_t stop_deadline; /* STOPPING: when the ssh clients still running are killed */
    int over;               /* no host is open any more */
    /* The run's decisions (ssh_host.c): */
    ssh_run_phase_t phase;
    size_t n_down;    /* hosts LOST */
    int told_down;    /* the hosts the job goes on without have been named */
    int start_failed; /* a host could not be started and the job cannot go on */
    int failed_rank;  /* the first host whose agent ended with a failure, or -1 */
    int failed_code;
} ssh_run_t;

/* ---- ssh_host.c: the table and the run's decisions ---------------------------------------- */

/* Feeds event ev to host h's phase x event table; p[0..n) is the event's line (READY_LINE,
 * OUT_LINE, ERR_LINE: with its '\n'; SEND, STOP: the line for the session), else NULL. */
void ssh__host_event(ssh_run_t *r, ssh_host_t *h, ssh_event_t ev, const char *p, size_t n);

/* Starts pending hosts in the list's order, up to --ssh_fanout connections being set up at once;
 * none unless the run is GOING. */
void ssh__schedule(ssh_run_t *r);

/* Tells every host to stop, once: "signal sig" down each session that reads the launcher's lines,
 * the end of stdin for an agent still waiting for the address; pending hosts never start. The
 * ssh clients still running at stop_deadline are killed (ssh.c). */
void ssh__stop(ssh_run_t *r, int sig);

/* Line (with its '\n') down every host's session that reads the launcher's lines. */
void ssh__send_all(ssh_run_t *r, const char *line);

/* The grace after a failed agent is over: the hosts still running are stopped. */
void ssh__grace_over(ssh_run_t *r);

/* Once no host is left to start, names those the job goes on without (--nnodes=MIN:MAX). */
void ssh__tell_down(ssh_run_t *r);

/* 1 while host h's ssh is started and not ended (WAITING .. STOPPING). */
int ssh__host_open(const ssh_host_t *h);

/* ---- ssh.c: the loop's primitives the table calls ---------------------------------------- */

/* The loop's primitives, through a table the run holds (ssh.c's, or the unit test's recorders),
 * so that the table reaches the loop without ssh_host.c and ssh.c calling each other. */
struct ssh_loop_ops {
    /* Starts ssh for host h with its stdin, stdout and stderr piped to the launcher and the token
     * written first. Returns 0, or a negative code with the reason in h->last_err. */
    int (*host_spawn)(ssh_run_t *r, ssh_host_t *h);

    /* Writes line (with its '\n'; under PIPE_BUF bytes, so written whole or not at all) down host
     * h's stdin while it is open. A pipe that is full (an agent or a connection that stalled for
     * minutes) loses it: the deadlines still stop that host. */
    void (*host_write)(ssh_host_t *h, const char *line);

    /* Closes host h's stdin (the agent sees its end). */
    void (*host_stdin_close)(ssh_host_t *h);

    /* SIGKILLs host h's ssh while it runs. */
    void (*host_kill)(ssh_host_t *h);

    /* Host h's agent must be ready by at_ms (the loop's clock): SSH_EV_NO_ANSWER then. */
    void (*host_answer_by)(ssh_host_t *h, uint64_t at_ms);

    /* Writes p[0..n) to the launcher's stdout (std 1) or stderr (std 2) in one write. */
    void (*output)(int std, const char *p, size_t n);

    /* The loop's clock, in ms. */
    uint64_t (*now)(ssh_run_t *r);

    /* The ssh clients still running at at_ms are killed (and every second after). */
    void (*stop_at)(ssh_run_t *r, uint64_t at_ms);

    /* SSH_FAIL_GRACE_MS from now, ssh__grace_over. */
    void (*grace_start)(ssh_run_t *r);
};

#endif
