/* SPDX-License-Identifier: Apache-2.0
 * The agent's private directories on shared parents, and the workers' scratch directory.
 *
 * The scratch directory: a private directory on /dev/shm (tmpfs), made at start and given to
 * every worker as DDPRUN_SHM_DIR, for what they share in memory on this node (the CPU backend's
 * segment). A worker killed before it unlinks its segment cannot leak it: the agent empties the
 * directory at every group stop, once every worker of the group is reaped, removes it at exit,
 * and the orphan guard removes it when the agent itself is SIGKILLed. Without a writable
 * /dev/shm there is none, and the workers fall back to shm_open's names.
 *
 * It and the private run directory (agent.c: error files, on /dev/shm or TMPDIR) are removed at
 * exit, or by the guard. When the guard dies with the agent (a whole Slurm step or container
 * killed at once, every process of a host), nobody is left to remove them: so the agent holds an
 * flock on each while it lives and marks it as one that does (mode 1700: the sticky bit changes
 * nothing else in a 0700 directory), and an agent starting on the host removes the marked
 * "ddprun-" directories of its user that nobody holds and that have not changed for
 * PRIVATE_DIR_STALE_S. A directory kept for the user (hung workers' stacks) loses its mark
 * first; an unmarked one (kept, or made by an older ddprun, which holds no lock) is never taken
 * for a dead one. */
#include "agent_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"

#define SCRATCH_PARENT "/dev/shm"
#define SCRATCH_PREFIX "ddprun-shm-"
/* Every private directory's name starts so (the run directory's is ddprun-<run id>-XXXXXX). */
#define PRIVATE_DIR_PREFIX "ddprun-"
#define PRIVATE_DIR_MARKED (S_ISVTX | S_IRWXU)
/* A dead agent's directory is removed once unchanged this long: a new one is locked within
 * microseconds of its making, which this leaves far behind. */
#define PRIVATE_DIR_STALE_S 60

/* Whether the entry name of parent (an open directory) is a dead agent's private directory, by
 * the rules above; when it is, it comes back locked (*lock_fd, which the caller closes once it
 * is removed). */
static int private_dir_is_dead(int parent, const char *name, int *lock_fd) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int dead = fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
               (st.st_mode & 07777) == PRIVATE_DIR_MARKED &&
               time(NULL) - st.st_mtime >= PRIVATE_DIR_STALE_S && flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!dead) {
        close(fd);
        return 0;
    }
    *lock_fd = fd;
    return 1;
}

void agent__private_dirs_sweep(const char *parent) {
    DIR *d = opendir(parent);
    if (d == NULL)
        return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int fd;
        if (strncmp(de->d_name, PRIVATE_DIR_PREFIX, strlen(PRIVATE_DIR_PREFIX)) != 0 ||
            !private_dir_is_dead(dirfd(d), de->d_name, &fd))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", parent, de->d_name);
        ddp_dir_remove(path); /* under its lock: another agent's sweep passes it by */
        close(fd);
        n++;
    }
    closedir(d);
    if (n > 0)
        DDP_INFO("removed %d director%s in %s left by agents that were killed with their "
                 "orphan guard",
                 n, n == 1 ? "y" : "ies", parent);
}

int agent__private_dir_hold(const char *dir) {
    /* Held until this process ends (no worker inherits it); marked only once held. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fchmod(fd, PRIVATE_DIR_MARKED) == 0)
        return fd;
    DDP_DEBUG("%s unmarked: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

void agent__private_dir_keep(int fd) {
    if (fd >= 0 && fchmod(fd, S_IRWXU) < 0)
        DDP_DEBUG("unable to unmark a kept directory: %s", strerror(errno));
}

void agent__scratch_start(agent_t *a) {
    a->scratch.dir[0] = '\0';
    a->scratch.lock_fd = -1;
    if (access(SCRATCH_PARENT, W_OK | X_OK) != 0) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", SCRATCH_PARENT, strerror(errno));
        return;
    }
    /* The run directory's parent was swept when it was made (agent.c). */
    if (!a->cfg.run_dir_is_temp ||
        strncmp(a->cfg.run_dir, SCRATCH_PARENT "/", strlen(SCRATCH_PARENT "/")) != 0)
        agent__private_dirs_sweep(SCRATCH_PARENT);
    char id[64];
    agent__file_safe(a->cfg.job->run_id, id, sizeof id);
    snprintf(a->scratch.dir, sizeof a->scratch.dir, SCRATCH_PARENT "/" SCRATCH_PREFIX "%s-XXXXXX",
             id);
    if (mkdtemp(a->scratch.dir) == NULL) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", a->scratch.dir, strerror(errno));
        a->scratch.dir[0] = '\0';
        return;
    }
    a->scratch.lock_fd = agent__private_dir_hold(a->scratch.dir);
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
    if (a->scratch.dir[0] != '\0') {
        ddp_dir_remove(a->scratch.dir);
        if (a->scratch.lock_fd >= 0)
            close(a->scratch.lock_fd);
    }
    a->scratch.dir[0] = '\0';
    a->scratch.lock_fd = -1;
}
