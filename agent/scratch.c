/* SPDX-License-Identifier: Apache-2.0
 * The workers' scratch directory: a private directory on /dev/shm (tmpfs), made at start and
 * given to every worker as DDPRUN_SHM_DIR, for what they share in memory on this node (the CPU
 * backend's segment). A worker killed before it unlinks its segment cannot leak it: the agent
 * empties the directory at every group stop, once every worker of the group is reaped, removes
 * it at exit, and the orphan guard removes it when the agent itself is SIGKILLed. Without a
 * writable /dev/shm there is none, and the workers fall back to shm_open's names.
 * When the guard dies with the agent (a whole Slurm step or container killed at once, every
 * process of a host), nobody is left to remove it: so the agent holds an flock on its directory
 * while it lives, marks it as one that does (the sticky bit, which changes nothing else in a
 * 0700 directory), and an agent starting on the host removes the marked directories of its user
 * that nobody holds and that have not changed for SCRATCH_STALE_S. An unmarked directory (made
 * by an older ddprun, which holds no lock) is never taken for a dead one. */
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
/* A dead agent's directory is removed once unchanged this long: a new one is locked within
 * microseconds of its making, which this leaves far behind. */
#define SCRATCH_STALE_S 60

/* Whether the entry name of parent (an open directory) is a dead agent's scratch directory,
 * by the rules above; when it is, it comes back locked (*lock_fd, which the caller closes once
 * it is removed). */
static int scratch_is_dead(int parent, const char *name, int *lock_fd) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int dead = fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & S_ISVTX) &&
               time(NULL) - st.st_mtime >= SCRATCH_STALE_S && flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!dead) {
        close(fd);
        return 0;
    }
    *lock_fd = fd;
    return 1;
}

/* Removes the scratch directories of this user's agents that died with their guard. */
static void scratch_sweep(void) {
    DIR *d = opendir(SCRATCH_PARENT);
    if (d == NULL)
        return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int fd;
        if (strncmp(de->d_name, SCRATCH_PREFIX, strlen(SCRATCH_PREFIX)) != 0 ||
            !scratch_is_dead(dirfd(d), de->d_name, &fd))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, SCRATCH_PARENT "/%s", de->d_name);
        ddp_dir_remove(path); /* under its lock: another agent's sweep passes it by */
        close(fd);
        n++;
    }
    closedir(d);
    if (n > 0)
        DDP_INFO("removed %d scratch director%s in " SCRATCH_PARENT " left by agents that were "
                 "killed with their orphan guard",
                 n, n == 1 ? "y" : "ies");
}

void agent__scratch_start(agent_t *a) {
    a->scratch.dir[0] = '\0';
    a->scratch.lock_fd = -1;
    if (access(SCRATCH_PARENT, W_OK | X_OK) != 0) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", SCRATCH_PARENT, strerror(errno));
        return;
    }
    scratch_sweep();
    char id[64];
    agent__file_safe(a->cfg.job->run_id, id, sizeof id);
    snprintf(a->scratch.dir, sizeof a->scratch.dir, SCRATCH_PARENT "/" SCRATCH_PREFIX "%s-XXXXXX",
             id);
    if (mkdtemp(a->scratch.dir) == NULL) {
        DDP_DEBUG("no scratch directory for the workers: %s: %s", a->scratch.dir, strerror(errno));
        a->scratch.dir[0] = '\0';
        return;
    }
    /* Held until this process ends (no worker inherits it); marked only once held. */
    int fd = open(a->scratch.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fchmod(fd, S_ISVTX | S_IRWXU) == 0) {
        a->scratch.lock_fd = fd;
    } else {
        DDP_DEBUG("scratch directory %s unmarked: %s", a->scratch.dir, strerror(errno));
        if (fd >= 0)
            close(fd);
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
    if (a->scratch.dir[0] != '\0') {
        ddp_dir_remove(a->scratch.dir);
        if (a->scratch.lock_fd >= 0)
            close(a->scratch.lock_fd);
    }
    a->scratch.dir[0] = '\0';
    a->scratch.lock_fd = -1;
}
