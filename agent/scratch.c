/* SPDX-License-Identifier: Apache-2.0
 * The workers' scratch directory: a private directory on /dev/shm (tmpfs), made at start and
 * given to every worker as DDPRUN_SHM_DIR, for what they share in memory on this node (the CPU
 * backend's segment). A worker killed before it unlinks its segment cannot leak it: the agent
 * empties the directory at every group stop, once every worker of the group is reaped, removes
 * it at exit, and the orphan guard removes it when the agent itself is SIGKILLed. Without a
 * writable /dev/shm there is none, and the workers fall back to shm_open's names. */
#include "agent_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"

#define SCRATCH_PARENT "/dev/shm"

void agent__scratch_start(agent_t *a) {
    a->scratch.dir[0] = '\0';
    if (access(SCRATCH_PARENT, W_OK | X_OK) != 0) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", SCRATCH_PARENT, strerror(errno));
        return;
    }
    char id[64];
    agent__file_safe(a->cfg.job->run_id, id, sizeof id);
    snprintf(a->scratch.dir, sizeof a->scratch.dir, SCRATCH_PARENT "/ddprun-shm-%s-XXXXXX", id);
    if (mkdtemp(a->scratch.dir) == NULL) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", a->scratch.dir, strerror(errno));
        a->scratch.dir[0] = '\0';
    }
}

void agent__scratch_clear(agent_t *a) {
    if (a->scratch.dir[0] == '\0')
        return;
    int n = ddp_dir_empty(a->scratch.dir);
    if (n > 0)
        DDP_DEBUG("removed %d entries of %s left by workers of the stopped group", n,
                  a->scratch.dir);
}

void agent__scratch_stop(agent_t *a) {
    if (a->scratch.dir[0] != '\0')
        ddp_dir_remove(a->scratch.dir);
    a->scratch.dir[0] = '\0';
}
