/* SPDX-License-Identifier: Apache-2.0
 * ddp_proc: reading /proc (ddp_proc.h). */
#include "ddp_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ssize_t ddp_proc_read(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

int ddp_proc_stat_parse(const char *text, ddp_proc_stat_t *out) {
    const char *open_p = strchr(text, '(');
    const char *close_p = strrchr(text, ')');
    if (open_p == NULL || close_p == NULL || close_p < open_p)
        return -EINVAL;
    int ppid = 0, pgrp = 0;
    char state = '?';
    if (sscanf(close_p + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
        return -EINVAL;
    snprintf(out->comm, sizeof out->comm, "%.*s", (int)(close_p - open_p - 1), open_p + 1);
    out->state = state;
    out->ppid = (pid_t)ppid;
    out->pgrp = (pid_t)pgrp;
    return 0;
}

int ddp_proc_stat(pid_t pid, pid_t tid, ddp_proc_stat_t *out) {
    char path[64], buf[1024];
    if (tid > 0)
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    else
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    ssize_t n = ddp_proc_read(path, buf, sizeof buf);
    if (n < 0)
        return (int)n;
    return ddp_proc_stat_parse(buf, out);
}
