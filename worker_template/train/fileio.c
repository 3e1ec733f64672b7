/* fileio.c: how train creates files in directories other users may share (checkpoint
 * directories, --dump-params): a new file under a random name, created exclusively (O_EXCL never
 * opens an existing file and never follows a symlink), then renamed over the final name, so a
 * planted symlink is replaced, never written through. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_time.h"
#include "train.h"

#define TMP_TRIES 16

int train_tmpfile_open(const char *prefix, mode_t mode, char *out, size_t cap) {
    for (int i = 0; i < TMP_TRIES; i++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = ddp_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)i;
        if ((size_t)snprintf(out, cap, "%s%016llx", prefix, (unsigned long long)r) >= cap)
            return -ENAMETOOLONG;
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0 || errno != EEXIST)
            return fd >= 0 ? fd : -errno;
    }
    return -EEXIST;
}

/* Writes n bytes, retrying short writes and EINTR. Returns 0 or -errno. */
int train_write_all(int fd, const void *p, size_t n) {
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

int train_file_replace(const char *path, const void *p, size_t n, mode_t mode) {
    char prefix[4096], tmp[4200];
    if ((size_t)snprintf(prefix, sizeof prefix, "%s.tmp.", path) >= sizeof prefix)
        return -ENAMETOOLONG;
    int fd = train_tmpfile_open(prefix, mode, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc = train_write_all(fd, p, n);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

int train_open_append(const char *path, mode_t mode) {
    /* O_NONBLOCK: a FIFO planted at path must not block the open; cleared below. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int rc = S_ISREG(st.st_mode) ? -errno : -EINVAL;
        close(fd);
        return rc;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}
