/* SPDX-License-Identifier: Apache-2.0
 * The node health check (--health_check CMD), run by the agent before each join: CMD under
 * /bin/sh -c in a process group of its own, with the node's facts in its environment, bounded by
 * a timeout. Exit 0 is healthy; an exit status, a signal, the timeout or a command that cannot
 * start is not, and the result carries the reason and the last lines the check printed.
 *
 * It runs on the caller's loop: output through a pipe, the timeout as a timer that kills the
 * check's group, and the exit through the caller's one waitpid (agent__health_reaped), since the
 * agent reaps every child itself (it is a subreaper). Private to agent/. */
#ifndef AGENT_HEALTH_H
#define AGENT_HEALTH_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

/* Output kept for the result: the last lines within this many bytes, at most this many lines. */
#define AGENT_HEALTH_TAIL_BYTES 2048
#define AGENT_HEALTH_TAIL_LINES 5
/* After the check exits, what it left running in its group is killed and its output read for
 * at most this long (a descendant that left the group may hold the pipe open). */
#define AGENT_HEALTH_DRAIN_MS 1000

typedef struct agent_health agent_health_t;

typedef struct agent_health_result {
    int healthy;
    int timed_out;
    int status;         /* the wait status, when the check ran and was reaped */
    int64_t elapsed_ms; /* from the start to the exit */
    char reason[160];   /* "exit status 3", "killed by SIGSEGV", "timed out after 60 s" ... */
    /* The last lines it printed (stdout and stderr together), escaped, joined by " | ". */
    char tail[AGENT_HEALTH_TAIL_BYTES + 64];
} agent_health_result_t;

/* Called once, from the loop, with the result (borrowed for the call). The check's handles are
 * closed by then; h must not be used after the callback returns. */
typedef void (*agent_health_cb)(void *arg, const agent_health_result_t *res);

/* Starts cmd. extra_env: NULL-terminated "NAME=VALUE" strings added to (or replacing in) this
 * process's environment for the check. Returns 0 with *out set, or a negative code with *out
 * NULL (cb never runs): -ENOMEM, or -errno of the pipe or fork. A check that cannot be
 * executed still starts, and ends unhealthy with "unable to run /bin/sh". */
int agent__health_start(uv_loop_t *loop, const char *cmd, const char *const *extra_env,
                        int timeout_ms, agent_health_cb cb, void *arg, agent_health_t **out);

/* The caller reaped pid with status: returns 1 when it was h's check (h takes it), else 0.
 * NULL-safe. */
int agent__health_reaped(agent_health_t *h, pid_t pid, int status);

/* The check's process (its group has the same id), or 0 once it was reaped. */
pid_t agent__health_pid(const agent_health_t *h);

/* Stops a check whose result is no longer wanted (the agent is stopping): kills its group; cb
 * never runs; h is freed once its handles are closed. The caller still reaps the process. */
void agent__health_cancel(agent_health_t *h);

#endif
