/* SPDX-License-Identifier: Apache-2.0
 * ddp_file: the files ddprun writes (worker logs, heartbeat and stack files, the event log) and
 * the directories that hold them, made so that nothing planted there is written through.
 *
 * ddprun often runs as root and writes into directories it did not make itself: a --log_dir
 * that already exists, an event log under /tmp. Another user who can write there could leave,
 * under the name ddprun is about to use, a symbolic link to a file of root's (which root would
 * then truncate or append to), a hard link to one (where fs.protected_hardlinks is off), or a
 * FIFO (whose open or write would block the agent for as long as nobody reads it). These
 * helpers refuse all three, without blocking:
 *   - a path is split in two: its first `trusted` bytes name a directory taken as given (the
 *     user named it, symbolic links and all); every component after that is opened relative to
 *     its parent with O_NOFOLLOW, so no link below the trusted directory is followed, including
 *     one swapped in for a directory after ddprun made it;
 *   - the file is opened O_NONBLOCK (a FIFO without a reader fails at once, with one it is
 *     refused after fstat) and must be a regular file with one link. */
#ifndef DDP_FILE_H
#define DDP_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "ddp_err.h"

typedef enum ddp_file_mode {
    /* Open for appending; create it if missing. An existing regular file keeps its content. */
    DDP_FILE_APPEND,
    /* Start it empty: an existing file is unlinked and a new one made with O_EXCL, which proves
     * that what is written goes into a file of ours. */
    DDP_FILE_REPLACE,
} ddp_file_mode_t;

/* Opens path for writing as `how` says, creating it with the permission bits perm (umask
 * applies). path's first `trusted` bytes name the directory taken as given (0: the current
 * directory, or "/" for an absolute path); the directories below it must exist. Returns the
 * descriptor (close-on-exec, write-only, O_NONBLOCK set), or a negative code with a one-line
 * message naming path in err: -ELOOP for a symbolic link, -EINVAL for a file that is not
 * regular or has other hard links, -errno of the open otherwise. */
int ddp_file_open(const char *path, size_t trusted, ddp_file_mode_t how, mode_t perm,
                  ddp_err_t *err);

/* mkdir -p of path's components below its first `trusted` bytes (the trusted part must exist),
 * each with perm; an existing component must be a real directory, not a link to one. Returns 0,
 * or a negative code with a message in err (-ELOOP, -ENOTDIR, -errno of mkdirat or openat). */
int ddp_dir_make(const char *path, size_t trusted, mode_t perm, ddp_err_t *err);

/* The length of path's directory part, the `trusted` of a path whose directories the user chose
 * (--event_log_handler json:PATH): only its last component is guarded. */
size_t ddp_file_dir_len(const char *path);

/* ---- whole files replaced at once (error files, checkpoints, --dump-params) ---- */

/* Writes all n bytes of p to fd, retrying short writes and EINTR. Returns 0 or -errno. */
int ddp_write_all(int fd, const void *p, size_t n);

/* Creates a new file named prefix and 16 random hex digits, with O_CREAT | O_EXCL | O_NOFOLLOW
 * (never an existing file, never through a link planted under a name it picks) and perm (umask
 * applies); out (cap bytes) gets the name. Returns the descriptor (write-only, close-on-exec;
 * the caller closes it) or -errno: -ENAMETOOLONG when the name does not fit cap, -EEXIST when 16
 * names in a row were taken. */
int ddp_file_tmp_open(const char *prefix, mode_t perm, char *out, size_t cap);

/* One piece of the content ddp_file_replace writes. */
typedef struct ddp_file_part {
    const void *p;
    size_t n;
} ddp_file_part_t;

/* Replaces path's content with the nparts parts, in order: they go to a new temporary file
 * (ddp_file_tmp_open with tmp_prefix, or "<path>.tmp." when NULL; in path's directory so that the
 * rename is one), fsync'ed first when sync is set, which is then renamed over path. A reader sees
 * the old content or the new one, never a part; a link planted at path is replaced, not written
 * through. The temporary file is removed on any error. Returns 0 or -errno. */
int ddp_file_replace(const char *path, const char *tmp_prefix, const ddp_file_part_t *parts,
                     size_t nparts, mode_t perm, int sync);

/* ---- trees ddprun made itself (the scratch and private run directories) ---- */

/* Removes everything in directory path, recursively; a link is removed, never followed. Returns
 * the number of entries that were directly in path (0 when it is missing or cannot be read).
 * Failures to remove are ignored: whoever empties a tree has nothing better to do with them. */
int ddp_dir_empty(const char *path);

/* ddp_dir_empty, then path itself. */
void ddp_dir_remove(const char *path);

#endif
