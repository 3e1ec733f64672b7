/* SPDX-License-Identifier: Apache-2.0
 * ddp_proc: reading /proc, the one parser of /proc/<pid>/stat (stack captures, the GPU wait's
 * process groups, the CPU backend's dead-peer check). */
#ifndef DDP_PROC_H
#define DDP_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* What ddprun reads of a task's stat line. */
typedef struct ddp_proc_stat {
    char comm[64]; /* the command name (the kernel's TASK_COMM_LEN is 16), cut to fit */
    char state;    /* R, S, D, Z, X, ... */
    pid_t ppid, pgrp;
} ddp_proc_stat_t;

/* Reads up to cap - 1 bytes of a small file (one of /proc's), NUL-terminated. Returns the length
 * or -errno. */
ssize_t ddp_proc_read(const char *path, char *buf, size_t cap);

/* Parses a stat line: "pid (comm) state ppid pgrp ...". comm may hold spaces and parentheses,
 * so it ends at the last ')'. Returns 0, or -EINVAL for anything else (out unchanged). */
int ddp_proc_stat_parse(const char *text, ddp_proc_stat_t *out);

/* Reads and parses /proc/<pid>/stat, or /proc/<pid>/task/<tid>/stat when tid > 0. Returns 0,
 * -errno of the read (-ENOENT: gone), or -EINVAL. */
int ddp_proc_stat(pid_t pid, pid_t tid, ddp_proc_stat_t *out);

#endif
