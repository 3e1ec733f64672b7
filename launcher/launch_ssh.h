/* SPDX-License-Identifier: Apache-2.0
 * Jobs started over ssh: the launching side (--hostfile, --hosts; launcher/ssh.c) and the
 * agent's side (--ssh_session; launcher/ssh_session.c). */
#ifndef LAUNCH_SSH_H
#define LAUNCH_SSH_H

#include "launch_spec.h"

/* ssh's ConnectTimeout unless --ssh sets one (the first value ssh obtains wins, and the user's
 * words come first); then how long an agent may take to answer once connected (login, start).
 * The agents' wait for the store's address follows from them. */
#define LAUNCH_SSH_CONNECT_TIMEOUT_S 10
#define LAUNCH_SSH_READY_EXTRA_S 30
/* ssh's ServerAliveInterval and ServerAliveCountMax unless --ssh sets them: an ssh client whose
 * host stopped answering gives up after about their product in seconds. */
#define LAUNCH_SSH_ALIVE_INTERVAL_S 5
#define LAUNCH_SSH_ALIVE_COUNT 2

/* Starts the job on every host of spec's --hostfile or --hosts over ssh, relays the hosts'
 * output and waits for them (argv: ddprun's own, whose flags are passed on to the hosts). Returns
 * the exit code (>= 0): the job's, 128+N after signal N, 1 when a host could not be started (with
 * --nnodes=MIN:MAX: when fewer than MIN could, or not the first, which hosts the store; one
 * line names it and what ssh said); or, before anything is started, DDP_EUSAGE with err naming
 * the flag, file or line, or -ENOMEM. */
int launch_ssh_run(const launch_spec_t *spec, char *const *argv, ddp_err_t *err);

/* What --ssh_session set up before the job is built. */
typedef struct launch_ssh_session {
    int fd;       /* the session (the ssh stdin, moved off fd 0; CLOEXEC) */
    int port_any; /* the first host: host the store on a port the kernel picks */
} launch_ssh_session_t;

/* --ssh_session: reads the job token from stdin (put where agent_job_prepare finds it) and, on a
 * host other than the first without --rdzv_endpoint, the store's address on the next line (the
 * launcher writes it once the first host is up), moves the session off fd 0 (workers get
 * /dev/null), and completes spec: the first host's endpoint is the address its ssh session
 * reached (SSH_CONNECTION), hosted there; the console prefix names the host. Returns 0 or
 * DDP_EUSAGE / -errno with err set. */
int launch_ssh_session_begin(launch_spec_t *spec, launch_ssh_session_t *s, ddp_err_t *err);

/* Marks the prepared job as started over ssh (the session watched, every line tagged, the
 * store port) and takes the token out of the environment. */
void launch_ssh_session_apply(const launch_ssh_session_t *s, agent_job_t *job);

#endif
