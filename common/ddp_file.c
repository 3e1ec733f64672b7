/* SPDX-License-Identifier: Apache-2.0
 * ddp_file: files and directories made without following what another user planted (ddp_file.h). */
#include "ddp_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_time.h"

/* What a non-regular file is, for the message. */
static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "not a regular file";
}

/* Says why path[0..len) (whose last component is name, in dirfd) could not be opened: e is the
 * errno of the open. A link opened with O_PATH | O_NOFOLLOW | O_DIRECTORY fails ENOTDIR, a FIFO
 * opened O_NONBLOCK without a reader ENXIO: lstat tells what is really there. */
static int refuse(int dirfd, const char *name, const char *path, size_t len, int e,
                  ddp_err_t *err) {
    struct stat st;
    if ((e == ENOTDIR || e == ELOOP || e == ENXIO || e == EISDIR) &&
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode))
            return ddp_err_set(err, -ELOOP, "%.*s: a symbolic link, not followed", (int)len, path);
        if (e != ENOTDIR)
            return ddp_err_set(err, -EINVAL, "%.*s: %s, not a regular file", (int)len, path,
                               file_kind(st.st_mode));
    }
    return ddp_err_set(err, -e, "%.*s: %s", (int)len, path, strerror(e));
}

/* Opens the trusted directory path[0..trusted) as given (links followed). */
static int trusted_open(const char *path, size_t trusted, ddp_err_t *err) {
    char dir[PATH_MAX];
    if (trusted >= sizeof dir)
        return ddp_err_set(err, -ENAMETOOLONG, "%.64s...: %s", path, strerror(ENAMETOOLONG));
    if (trusted == 0)
        snprintf(dir, sizeof dir, "%s", path[0] == '/' ? "/" : ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)trusted, path);
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ddp_err_set(err, -errno, "%s: %s", path, strerror(errno));
    return fd;
}

/* The component of path starting at *pos (slashes skipped) into name; *pos moves past it.
 * Returns its length, 0 at the end of path, or a negative code (too long, or "..", which would
 * leave the trusted directory). */
static int next_component(const char *path, size_t *pos, char name[NAME_MAX + 1], ddp_err_t *err) {
    size_t i = *pos;
    while (path[i] == '/')
        i++;
    size_t n = strcspn(path + i, "/");
    if (n > NAME_MAX)
        return ddp_err_set(err, -ENAMETOOLONG, "%.*s: %s", (int)(i + n), path,
                           strerror(ENAMETOOLONG));
    if (n == 2 && path[i] == '.' && path[i + 1] == '.')
        return ddp_err_set(err, -EINVAL, "%.*s: a \"..\" component", (int)(i + n), path);
    memcpy(name, path + i, n);
    name[n] = '\0';
    *pos = i + n;
    return (int)n;
}

/* Walks path below its trusted part to the directory holding its last component, without
 * following a link, making missing directories (perm) when make is set. Returns that
 * directory's descriptor (O_PATH) with the last component in name and its end in *end, or a
 * negative code. With make set and no component left (the whole path is made), name is "". */
static int walk(const char *path, size_t trusted, int make, mode_t perm, char name[NAME_MAX + 1],
                size_t *end, ddp_err_t *err) {
    int dirfd = trusted_open(path, trusted, err);
    if (dirfd < 0)
        return dirfd;
    size_t pos = trusted;
    int n = next_component(path, &pos, name, err);
    while (n > 0) {
        char next[NAME_MAX + 1];
        size_t next_pos = pos;
        int m = next_component(path, &next_pos, next, err);
        if (m < 0) {
            n = m;
            break;
        }
        if (m == 0 && !make)
            break; /* name is the last component: the file */
        if (make && mkdirat(dirfd, name, perm) < 0 && errno != EEXIST) {
            n = ddp_err_set(err, -errno, "%.*s: %s", (int)pos, path, strerror(errno));
            break;
        }
        int sub = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            n = refuse(dirfd, name, path, pos, errno, err);
            break;
        }
        close(dirfd);
        dirfd = sub;
        if (m == 0) { /* made the whole path */
            name[0] = '\0';
            break;
        }
        memcpy(name, next, (size_t)m + 1);
        pos = next_pos;
        n = m;
    }
    if (n < 0) {
        close(dirfd);
        return n;
    }
    if (name[0] == '\0' && !make) {
        close(dirfd);
        return ddp_err_set(err, -EISDIR, "%s: names no file", path);
    }
    *end = pos;
    return dirfd;
}

int ddp_file_open(const char *path, size_t trusted, ddp_file_mode_t how, mode_t perm,
                  ddp_err_t *err) {
    char name[NAME_MAX + 1];
    size_t end;
    int dirfd = walk(path, trusted, 0, 0, name, &end, err);
    if (dirfd < 0)
        return dirfd;
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    if (how == DDP_FILE_REPLACE) {
        /* unlinkat removes a link itself, never its target. */
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT && errno != EISDIR) {
            int e = errno;
            close(dirfd);
            return ddp_err_set(err, -e, "%s: unable to replace it: %s", path, strerror(e));
        }
        flags |= O_EXCL;
    } else {
        flags |= O_APPEND;
    }
    int fd = openat(dirfd, name, flags, perm);
    if (fd < 0) {
        int e = errno;
        int rc = e == EEXIST ? ddp_err_set(err, -EEXIST,
                                           "%s: made again by someone else while "
                                           "being replaced",
                                           path)
                             : refuse(dirfd, name, path, end, e, err);
        close(dirfd);
        return rc;
    }
    close(dirfd);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return ddp_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ddp_err_set(err, -EINVAL, "%s: %s, not a regular file", path, file_kind(st.st_mode));
    }
    if (st.st_nlink != 1) {
        /* A hard link to a file elsewhere: appending here would write into that file. */
        close(fd);
        return ddp_err_set(err, -EINVAL, "%s: has %lu hard links, not written through", path,
                           (unsigned long)st.st_nlink);
    }
    return fd;
}

int ddp_dir_make(const char *path, size_t trusted, mode_t perm, ddp_err_t *err) {
    char name[NAME_MAX + 1];
    size_t end;
    int dirfd = walk(path, trusted, 1, perm, name, &end, err);
    if (dirfd < 0)
        return dirfd;
    close(dirfd);
    return 0;
}

size_t ddp_file_dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash == NULL ? 0 : (size_t)(slash - path);
}

/* ---- whole files replaced at once ---- */

/* Names tried by ddp_file_tmp_open before it gives up: a taken name is another writer's. */
#define TMP_TRIES 16

int ddp_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int ddp_file_tmp_open(const char *prefix, mode_t perm, char *out, size_t cap) {
    for (int i = 0; i < TMP_TRIES; i++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = ddp_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)i;
        if ((size_t)snprintf(out, cap, "%s%016llx", prefix, (unsigned long long)r) >= cap)
            return -ENAMETOOLONG;
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
        if (fd >= 0 || errno != EEXIST)
            return fd >= 0 ? fd : -errno;
    }
    return -EEXIST;
}

int ddp_file_replace(const char *path, const char *tmp_prefix, const ddp_file_part_t *parts,
                     size_t nparts, mode_t perm, int sync) {
    char prefix[PATH_MAX], tmp[PATH_MAX + 17];
    if (tmp_prefix == NULL) {
        if ((size_t)snprintf(prefix, sizeof prefix, "%s.tmp.", path) >= sizeof prefix)
            return -ENAMETOOLONG;
        tmp_prefix = prefix;
    }
    int fd = ddp_file_tmp_open(tmp_prefix, perm, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc = 0;
    for (size_t i = 0; i < nparts && rc == 0; i++)
        rc = ddp_write_all(fd, parts[i].p, parts[i].n);
    if (rc == 0 && sync && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* ---- trees ---- */

int ddp_dir_empty(const char *path) {
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX + sizeof de->d_name + 1];
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            ddp_dir_remove(sub);
        else
            unlink(sub);
        n++;
    }
    closedir(d);
    return n;
}

void ddp_dir_remove(const char *path) {
    ddp_dir_empty(path);
    rmdir(path);
}
