/* SPDX-License-Identifier: Apache-2.0
 * fileio.c: how train appends to files in directories other users may share (its --log file).
 * Whole files (checkpoints, --dump-params) are replaced through ddp_file_replace (ddp_file.h): a
 * new file under a random name, created exclusively, then renamed over the final name, so a
 * planted symlink is replaced, never written through. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"

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
