/* SPDX-License-Identifier: Apache-2.0
 * The job's cgroup v2. Where ddprun may create one (as root, or in a delegated subtree: a writable
 * cgroup of its own, as under systemd's Delegate= or Slurm), every worker starts in
 * <ddprun's cgroup>/ddprun-<pid>/g<N>, one fresh cgroup per worker group, and the whole cgroup,
 * with whatever left the workers' process groups (setsid, double fork), is killed through
 * cgroup.kill (Linux >= 5.14): at every group stop, at exit, and by the orphan guard when ddprun
 * itself dies. The cgroup is removed afterwards. Elsewhere (DDPRUN_CGROUP=0, cgroup v1, no write
 * access, an older kernel) process groups, PDEATHSIG and the guard are all there is. */
#include "agent_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_log.h"
#include "ddp_time.h"

/* How long removal waits for a killed cgroup to empty (SIGKILL is quick; a process in
 * uninterruptible sleep, such as one on a hung NFS mount, is not). */
#define CGROUP_EMPTY_WAIT_MS 2000

/* The mount point of the cgroup2 file system, from /proc/self/mountinfo, into out. Returns 0 or
 * -ENOENT when none is mounted. */
static int cgroup2_mount(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return -errno;
    char line[4096];
    int rc = -ENOENT;
    while (rc < 0 && fgets(line, sizeof line, f) != NULL) {
        /* id parent maj:min root mount-point options [optional...] - fstype source super */
        char *sep = strstr(line, " - ");
        if (sep == NULL || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        char root[2048], mnt[2048];
        if (sscanf(line, "%*s %*s %*s %2047s %2047s", root, mnt) != 2 || strcmp(root, "/") != 0)
            continue;
        if (strlen(mnt) < cap) {
            snprintf(out, cap, "%s", mnt);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* ddprun's own cgroup v2 path ("/..." from the "0::" line of /proc/self/cgroup). Returns 0 or
 * -ENOENT. */
static int own_cgroup(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return -errno;
    char line[4096];
    int rc = -ENOENT;
    while (rc < 0 && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        /* A cgroup removed under us reads "/... (deleted)": unusable. */
        if (strstr(line, " (deleted)") == NULL && strlen(line + 3) < cap) {
            snprintf(out, cap, "%s", line + 3);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* Creates dir as a fresh cgroup; a stale one of the same name (a dead ddprun with our pid whose
 * guard could not remove it) is removed first. Returns 0 or -errno. */
static int cgroup_make(const char *dir) {
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    agent__cgroup_remove_dir(dir);
    return mkdir(dir, 0755) == 0 ? 0 : -errno;
}

/* Long: each way of not getting a cgroup has its own reason, said once at -v. */
int agent__cgroup_start(agent_t *a) {
    a->cgroup.dir[0] = '\0';
    a->cgroup.procs_fd = a->cgroup.dir_fd = -1;
    char mnt[2048], own[2048], why[512];
    const char *env = getenv("DDPRUN_CGROUP");
    int rc = 0;
    if (env != NULL && strcmp(env, "0") == 0) {
        snprintf(why, sizeof why, "DDPRUN_CGROUP=0");
        goto none;
    }
    if (cgroup2_mount(mnt, sizeof mnt) < 0 || own_cgroup(own, sizeof own) < 0) {
        snprintf(why, sizeof why, "no cgroup v2 hierarchy");
        goto none;
    }
    int len = snprintf(a->cgroup.dir, sizeof a->cgroup.dir, "%s%s/ddprun-%d", mnt,
                       strcmp(own, "/") == 0 ? "" : own, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof a->cgroup.dir - 32) {
        snprintf(why, sizeof why, "cgroup path too long");
        goto none;
    }
    if ((rc = cgroup_make(a->cgroup.dir)) < 0) {
        snprintf(why, sizeof why, "unable to create %.256s: %s", a->cgroup.dir, strerror(-rc));
        goto none;
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.kill", a->cgroup.dir);
    if (access(path, W_OK) < 0) {
        snprintf(why, sizeof why, "no cgroup.kill (Linux < 5.14): %s", strerror(errno));
        goto remove;
    }
    DDP_DEBUG("workers run in cgroup %s", a->cgroup.dir);
    return 0;

remove:
    rmdir(a->cgroup.dir);
none:
    a->cgroup.dir[0] = '\0';
    DDP_INFO("no job cgroup (%s): a worker's descendants that leave its process group are "
             "killed when ddprun stops the group or exits, but not if ddprun is SIGKILLed",
             why);
    return rc < 0 ? rc : -ENOENT;
}

int agent__cgroup_kill_dir(const char *dir) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.kill", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = write(fd, "1", 1) == 1 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Closes the descriptors of the current group's cgroup. */
static void leaf_close(agent_t *a) {
    if (a->cgroup.procs_fd >= 0)
        close(a->cgroup.procs_fd);
    if (a->cgroup.dir_fd >= 0)
        close(a->cgroup.dir_fd);
    a->cgroup.procs_fd = a->cgroup.dir_fd = -1;
}

/* Long: each step that can fail says which. */
void agent__cgroup_group_begin(agent_t *a) {
    if (a->cgroup.dir[0] == '\0')
        return;
    char leaf[PATH_MAX + 32], path[PATH_MAX + 64];
    leaf_close(a);
    if (a->cgroup.seq > 0) {
        /* The previous group's cgroup was killed when that group stopped; one that is not empty
         * yet goes with the job's cgroup at exit. */
        snprintf(leaf, sizeof leaf, "%s/g%d", a->cgroup.dir, a->cgroup.seq - 1);
        rmdir(leaf);
    }
    /* A fresh cgroup for every group: after cgroup.kill some kernels also kill what is later
     * cloned into the same cgroup (CLONE_INTO_CGROUP). */
    snprintf(leaf, sizeof leaf, "%s/g%d", a->cgroup.dir, a->cgroup.seq++);
    const char *what = leaf;
    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        goto fail;
    snprintf(path, sizeof path, "%s/cgroup.procs", leaf);
    what = path;
    if ((a->cgroup.procs_fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
        goto fail;
    what = leaf;
    if ((a->cgroup.dir_fd = open(leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        goto fail;
    return;
fail:
    DDP_WARN("unable to open %s: %s; this worker group runs outside the job's cgroup", what,
             strerror(errno));
    leaf_close(a);
}

void agent__cgroup_procs_drop(agent_t *a) {
    if (a->cgroup.procs_fd >= 0)
        close(a->cgroup.procs_fd);
    a->cgroup.procs_fd = -1;
}

void agent__cgroup_kill(agent_t *a) {
    if (a->cgroup.dir[0] == '\0')
        return;
    int rc = agent__cgroup_kill_dir(a->cgroup.dir);
    if (rc < 0)
        DDP_WARN("unable to kill cgroup %s: %s", a->cgroup.dir, strerror(-rc));
}

/* Waits (bounded) until cgroup dir holds no live process. Returns 0, or -ETIMEDOUT / -errno. */
static int cgroup_wait_empty(const char *dir) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.events", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint64_t deadline = ddp_now_ms() + CGROUP_EMPTY_WAIT_MS;
    int rc = -ETIMEDOUT;
    for (;;) {
        char buf[256];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n < 0) {
            rc = -errno;
            break;
        }
        buf[n] = '\0';
        if (strstr(buf, "populated 0") != NULL) {
            rc = 0;
            break;
        }
        uint64_t now = ddp_now_ms();
        if (now >= deadline)
            break;
        /* cgroup.events signals a change with POLLPRI; the short timeout covers a change that
         * happened between the read and the poll. */
        struct pollfd pfd = {.fd = fd, .events = POLLPRI};
        poll(&pfd, 1, deadline - now < 10 ? (int)(deadline - now) : 10);
    }
    close(fd);
    return rc;
}

/* rmdir of dir and the cgroups below it (a worker may have made its own), deepest first. */
static void cgroup_rmdir_tree(const char *dir, int depth) {
    if (rmdir(dir) == 0 || errno != EBUSY || depth > 16)
        return;
    /* opendir allocates: this runs in the agent or in the single-threaded guard. */
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) < (int)sizeof sub)
            cgroup_rmdir_tree(sub, depth + 1);
    }
    closedir(d);
    rmdir(dir);
}

int agent__cgroup_remove_dir(const char *dir) {
    int rc = agent__cgroup_kill_dir(dir);
    if (rc == -ENOENT)
        return 0; /* already gone */
    rc = cgroup_wait_empty(dir);
    cgroup_rmdir_tree(dir, 0);
    if (access(dir, F_OK) == 0)
        return rc < 0 ? rc : -EBUSY;
    return 0;
}

void agent__cgroup_stop(agent_t *a) {
    leaf_close(a);
    if (a->cgroup.dir[0] == '\0')
        return;
    int rc = agent__cgroup_remove_dir(a->cgroup.dir);
    if (rc < 0)
        DDP_WARN("unable to remove cgroup %s: %s", a->cgroup.dir, strerror(-rc));
    a->cgroup.dir[0] = '\0';
}
