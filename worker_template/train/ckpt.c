/* SPDX-License-Identifier: Apache-2.0
 * ckpt.c: checkpoints. One file per save, DIR/ckpt-<step>.bin: a fixed header (magic, version,
 * counters, model shape), the parameters, the optimizer state, all covered by a 64-bit FNV-1a
 * checksum. Saves are atomic (temporary file, fsync, rename, fsync of the directory); loads take
 * the newest file that passes every check, so a torn or corrupt file falls back to the previous. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_file.h"
#include "train.h"

#define CKPT_MAGIC "DDPWCKPT"
#define CKPT_VERSION 1
#define CKPT_MAX_FILES 4096

typedef struct ckpt_hdr {
    char magic[8];
    uint32_t version;
    uint32_t hdr_bytes;
    uint64_t step, epoch, pos, opt_t, seed;
    uint32_t opt_kind, nsizes;
    uint32_t sizes[MLP_MAX_SIZES];
    uint64_t nparams, state_len;
    uint64_t checksum; /* over the header with this field 0, then the payload */
} ckpt_hdr_t;

uint64_t ckpt_fnv1a(uint64_t h, const void *p, size_t len) {
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int parse_name(const char *name, unsigned long long *step) {
    char tail[8];
    return sscanf(name, "ckpt-%20llu%7s", step, tail) == 2 && strcmp(tail, ".bin") == 0;
}

static int cmp_desc(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Formats DIR/ckpt-<step>.bin into out (cap bytes). */
static void ckpt_path(char *out, size_t cap, const char *dir, unsigned long long step) {
    snprintf(out, cap, "%s/ckpt-%020llu.bin", dir, step);
}

/* Lists the steps of DIR's checkpoint files, newest first, into steps (cap). */
static int list_steps(const char *dir, unsigned long long *steps, size_t cap, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long s;
        if (parse_name(e->d_name, &s) && *n < cap)
            steps[(*n)++] = s;
    }
    closedir(d);
    qsort(steps, *n, sizeof *steps, cmp_desc);
    return 0;
}

/* The header of a checkpoint of m, shape and state_len, its checksum covering the payload. */
static void make_header(ckpt_hdr_t *h, const mlp_shape_t *shape, const ckpt_meta_t *m,
                        const float *params, const float *state, size_t state_len) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CKPT_MAGIC, 8);
    h->version = CKPT_VERSION;
    h->hdr_bytes = sizeof *h;
    h->step = m->step;
    h->epoch = m->epoch;
    h->pos = m->pos;
    h->opt_t = m->opt_t;
    h->seed = m->seed;
    h->opt_kind = m->opt_kind;
    h->nsizes = (uint32_t)shape->nsizes;
    for (int i = 0; i < shape->nsizes; i++)
        h->sizes[i] = (uint32_t)shape->sizes[i];
    h->nparams = shape->nparams;
    h->state_len = state_len;
    uint64_t c = ckpt_fnv1a(CKPT_FNV_INIT, h, sizeof *h);
    c = ckpt_fnv1a(c, params, shape->nparams * sizeof(float));
    c = ckpt_fnv1a(c, state, state_len * sizeof(float));
    h->checksum = c;
}

/* Writes the header and payload to a temporary file of dir, fsyncs it and renames it to final.
 * Returns 0 or -errno with err naming the file. */
static int write_rename(const char *dir, const char *final, const ckpt_hdr_t *h,
                        const float *params, size_t pbytes, const float *state, size_t sbytes,
                        ddp_err_t *err) {
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/.ckpt-%020llu.tmp.", dir, (unsigned long long)h->step);
    const ddp_file_part_t parts[] = {{h, sizeof *h}, {params, pbytes}, {state, sbytes}};
    int rc = ddp_file_replace(final, prefix, parts, sizeof parts / sizeof parts[0], 0644, 1);
    if (rc != 0)
        return ddp_err_set(err, rc, "unable to write checkpoint %s: %s", final, strerror(-rc));
    return 0;
}

/* The rename is durable only once the directory entry is on disk. */
static int sync_dir(const char *dir, ddp_err_t *err) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (dfd < 0 || fsync(dfd) != 0)
        rc = ddp_err_set(err, -errno, "unable to fsync directory %s: %s", dir, strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

/* Removes all but the newest keep checkpoints of dir (best effort). */
static void prune(const char *dir, int keep) {
    static unsigned long long steps[CKPT_MAX_FILES];
    char path[4096];
    size_t n = 0;
    if (keep <= 0 || list_steps(dir, steps, CKPT_MAX_FILES, &n) != 0)
        return;
    for (size_t i = (size_t)keep; i < n; i++) {
        ckpt_path(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
}

/* Refuses a checkpoint directory where other users may plant or swap files: writable by group
 * or others without the sticky bit. Returns 0, -ENOENT (missing), DDP_EUSAGE or -errno. */
static int dir_check(const char *dir, ddp_err_t *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        return e == ENOENT ? -ENOENT
                           : ddp_err_set(err, -e, "unable to stat checkpoint directory %s: %s", dir,
                                         strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return ddp_err_set(err, -ENOTDIR, "checkpoint directory %s is not a directory", dir);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
        return ddp_err_set(err, DDP_EUSAGE,
                           "checkpoint directory %s (mode 0%o) is writable by group or others "
                           "without the sticky bit",
                           dir, (unsigned)(st.st_mode & 07777));
    return 0;
}

int ckpt_save(const char *dir, const mlp_shape_t *shape, const ckpt_meta_t *m, const float *params,
              const float *state, size_t state_len, int keep, ddp_err_t *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ddp_err_set(err, -errno, "unable to create checkpoint directory %s: %s", dir,
                           strerror(errno));
    int rc = dir_check(dir, err);
    if (rc != 0)
        return rc == -ENOENT ? ddp_err_set(err, rc, "checkpoint directory %s vanished", dir) : rc;
    ckpt_hdr_t h;
    make_header(&h, shape, m, params, state, state_len);
    char final[4096];
    ckpt_path(final, sizeof final, dir, (unsigned long long)m->step);
    rc = write_rename(dir, final, &h, params, shape->nparams * sizeof(float), state,
                      state_len * sizeof(float), err);
    if (rc == 0)
        rc = sync_dir(dir, err);
    if (rc == 0)
        prune(dir, keep);
    return rc;
}

/* 1 when h is of this version and for this model and optimizer; else 0 with why filled. */
static int header_fits(const ckpt_hdr_t *h, const mlp_shape_t *shape, size_t state_len, char *why,
                       size_t cap) {
    if (h->version != CKPT_VERSION || h->hdr_bytes != sizeof *h) {
        snprintf(why, cap, "version %u not supported", h->version);
        return 0;
    }
    int same = h->nsizes == (uint32_t)shape->nsizes && h->nparams == shape->nparams &&
               h->state_len == state_len;
    for (int i = 0; same && i < shape->nsizes; i++)
        same = h->sizes[i] == (uint32_t)shape->sizes[i];
    if (!same)
        snprintf(why, cap, "saved for another model or optimizer");
    return same;
}

/* Reads and checks one file; returns 0 or a code with why (cap bytes) filled. */
/* Opens path for reading only when it is a regular file: O_NOFOLLOW refuses a symlink, and
 * O_NONBLOCK keeps a FIFO from blocking the open until a writer comes (it is cleared once fstat
 * has shown a regular file). Returns the fd with *st filled, or -errno with why filled. */
static int open_regular(const char *path, struct stat *st, char *why, size_t cap) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, cap, "%s", e == ELOOP ? "a symbolic link (not followed)" : strerror(e));
        return -e;
    }
    int rc = 0;
    if (fstat(fd, st) != 0) {
        rc = -errno;
        snprintf(why, cap, "fstat: %s", strerror(-rc));
    } else if (!S_ISREG(st->st_mode)) {
        rc = -EINVAL;
        snprintf(why, cap, "not a regular file (mode 0%o)", (unsigned)st->st_mode);
    } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        rc = -errno;
        snprintf(why, cap, "fcntl: %s", strerror(-rc));
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int load_one(const char *path, const mlp_shape_t *shape, ckpt_meta_t *m, float *params,
                    float *state, size_t state_len, char *why, size_t cap) {
    struct stat st;
    int fd = open_regular(path, &st, why, cap);
    if (fd < 0)
        return fd;
    ckpt_hdr_t h;
    size_t want_p = shape->nparams * sizeof(float), want_s = state_len * sizeof(float);
    int rc = DDP_ECORRUPT;
    if ((size_t)st.st_size != sizeof h + want_p + want_s) {
        snprintf(why, cap, "size %lld, expected %zu (torn or for another model)",
                 (long long)st.st_size, sizeof h + want_p + want_s);
        goto out;
    }
    if (read(fd, &h, sizeof h) != (ssize_t)sizeof h || memcmp(h.magic, CKPT_MAGIC, 8) != 0) {
        snprintf(why, cap, "bad magic");
        goto out;
    }
    if (!header_fits(&h, shape, state_len, why, cap))
        goto out;
    if (read(fd, params, want_p) != (ssize_t)want_p ||
        (want_s && read(fd, state, want_s) != (ssize_t)want_s)) {
        snprintf(why, cap, "short read");
        goto out;
    }
    uint64_t sum = h.checksum;
    h.checksum = 0;
    uint64_t c = ckpt_fnv1a(CKPT_FNV_INIT, &h, sizeof h);
    c = ckpt_fnv1a(c, params, want_p);
    c = ckpt_fnv1a(c, state, want_s);
    if (c != sum) {
        snprintf(why, cap, "checksum mismatch");
        goto out;
    }
    m->step = h.step;
    m->epoch = h.epoch;
    m->pos = h.pos;
    m->opt_t = h.opt_t;
    m->opt_kind = h.opt_kind;
    m->seed = h.seed;
    rc = 0;
out:
    close(fd);
    return rc;
}

int ckpt_load_latest(const char *dir, const mlp_shape_t *shape, ckpt_meta_t *m, float *params,
                     float *state, size_t state_len, int *found, char *used, int *skipped,
                     char *skipped_text, size_t cap, ddp_err_t *err) {
    static unsigned long long steps[CKPT_MAX_FILES];
    size_t n = 0;
    *found = 0;
    *skipped = 0;
    if (cap)
        used[0] = skipped_text[0] = '\0';
    int rc = dir_check(dir, err);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return rc;
    rc = list_steps(dir, steps, CKPT_MAX_FILES, &n);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return ddp_err_set(err, rc, "unable to read checkpoint directory %s: %s", dir,
                           strerror(-rc));
    char path[4096], why[128];
    for (size_t i = 0; i < n; i++) {
        ckpt_path(path, sizeof path, dir, steps[i]);
        if (load_one(path, shape, m, params, state, state_len, why, sizeof why) == 0) {
            *found = 1;
            snprintf(used, cap, "%s", path);
            return 0;
        }
        if ((*skipped)++ == 0)
            snprintf(skipped_text, cap, "%s: %s", path, why);
    }
    /* A file that failed its checksum has already been read into params and state. Without a
     * valid file the caller starts fresh (new parameters, zero optimizer state), so leave no
     * bytes of a corrupt file behind: Adam would otherwise start from garbage moments. */
    memset(params, 0, shape->nparams * sizeof(float));
    if (state_len)
        memset(state, 0, state_len * sizeof(float));
    return 0;
}
