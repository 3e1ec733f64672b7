/* SPDX-License-Identifier: Apache-2.0
 * Stack capture of a worker's process group (agent/stacks.c): where a hung worker is, written to a
 * file before the group is stopped. Private to agent/. */
#ifndef AGENT_STACKS_H
#define AGENT_STACKS_H

#include <stddef.h>
#include <sys/types.h>

#include "ddp_err.h"

/* Flags of agent__stacks_capture and agent__stacks_start. */
#define AGENT_STACKS_PROC_ONLY 1 /* the kernel's view from /proc only: no py-spy, gdb, eu-stack */

/* The most processes of one group and threads of one process a capture writes; the rest are
 * counted in the file. A group larger than this is a fork bomb, not a training job. */
#define AGENT_STACKS_MAX_PROCS 64
#define AGENT_STACKS_MAX_THREADS 512

/* Lines of a stacks file the failure summary quotes (agent__stacks_head). */
#define AGENT_STACKS_SUMMARY_LINES 20

/* Writes every thread's stack of every process in process group pgid to out_path (made afresh,
 * mode 0644, by ddp_file_open: out_path's first `trusted` bytes name the directory taken as given,
 * and no link below it is followed). Per process: a header (pid, comm, state, cmdline), then the
 * output of the best tool installed (py-spy dump for a Python process, else gdb, else eu-stack;
 * none with AGENT_STACKS_PROC_ONLY), then the kernel's view of each thread from /proc (comm, state,
 * wchan, system call, and the kernel stack, which only root can read). Each tool runs as a child in
 * its own process group and is SIGKILLed at its share of the budget: the call returns within about
 * budget_ms, and the file says "cut after N ms" wherever something was cut.
 * The calling process and its parent are never inspected. The call forks and reaps its tool
 * children, so it must not run in a process whose SIGCHLD handler reaps every child (the agent):
 * the agent uses agent__stacks_start. Returns 0 (the file is written, cut or not), -EINVAL for a
 * pgid below 2, -ESRCH when the group has no process, or -errno from creating out_path; err (may be
 * NULL) names the group or the file. */
int agent__stacks_capture(pid_t pgid, const char *out_path, size_t trusted, int budget_ms,
                          int flags, ddp_err_t *err);

/* Forks a helper process that runs agent__stacks_capture(pgid, out_path, trusted, budget_ms,
 * flags) and exits: 0 when the file was written, 1 otherwise (said on stderr). The helper resets
 * every signal disposition and the signal mask, closes every inherited descriptor above 2, and dies
 * with the caller (PR_SET_PDEATHSIG); it stays in the caller's process group. The caller reaps it
 * like any other child and should SIGKILL it if it outlives budget_ms plus a second. Returns the
 * helper's pid, or -errno when fork fails. */
pid_t agent__stacks_start(pid_t pgid, const char *out_path, size_t trusted, int budget_ms,
                          int flags);

/* The processes of group pgid, read from /proc/<pid>/stat, in ascending pid order: the first cap
 * go to out (may be NULL when cap is 0). Returns how many there are (possibly more than cap), or
 * -errno when /proc cannot be read. */
int agent__stacks_group_pids(pid_t pgid, pid_t *out, int cap);

/* The scheduler state of pid from /proc/PID/stat ('R', 'S', 'D', 'T', 't', 'Z', ...), or '?'
 * when it cannot be read. */
char agent__stacks_proc_state(pid_t pid);

/* Copies the first max_lines lines of the stacks file path into out (NUL-terminated, cut to
 * cap - 1 bytes), leaving out gdb's attach chatter ("[New LWP ...]") so that the lines quoted by
 * a failure summary are stack frames. Returns the number of lines copied, or -errno when the file
 * cannot be read. */
int agent__stacks_head(const char *path, int max_lines, char *out, size_t cap);

#endif
