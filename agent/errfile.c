/* SPDX-License-Identifier: Apache-2.0
 * Bounds a worker's error file (TORCHELASTIC_ERROR_FILE): one larger than AGENT_ERROR_FILE_MAX is
 * rewritten, when its worker exits, as a small valid one holding the start of its text. So the
 * summary never reads more than the bound, and a worker cannot leave a huge file in the run
 * directory (RAM-backed /dev/shm) for as long as ddprun runs. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_log.h"

/* How much of an oversized file is kept: printable ASCII escapes to at most twice its size in
 * JSON, so the rewritten file stays well below the bound. */
#define ERROR_FILE_KEEP 16384

/* Long: read, sanitise, build and write back read best as one sequence with one exit. */
void agent__error_file_bound(const char *path) {
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return; /* the worker wrote none */
    struct stat st;
    char *head = NULL, *dump = NULL;
    json_t *root = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= AGENT_ERROR_FILE_MAX)
        goto out;
    head = malloc(ERROR_FILE_KEEP + 160);
    ssize_t n = head ? pread(fd, head, ERROR_FILE_KEEP, 0) : -1;
    if (n < 0)
        goto cut;
    /* The cut may fall inside a UTF-8 sequence or a JSON escape: keep it readable and valid. */
    for (ssize_t i = 0; i < n; i++)
        if ((head[i] < 0x20 && head[i] != '\n' && head[i] != '\t') || head[i] == 0x7f ||
            (unsigned char)head[i] >= 0x80)
            head[i] = '?';
    char note[160];
    int note_len =
        snprintf(note, sizeof note, "\n[error file of %lld bytes: only its first %zd are kept]",
                 (long long)st.st_size, n);
    memcpy(head + n, note, (size_t)note_len + 1); /* head has room: see its malloc */
    root = json_pack("{s:s%}", "message", head, (size_t)n + (size_t)note_len);
    dump = root ? json_dumps(root, JSON_COMPACT) : NULL;
cut:
    /* Whatever happened above, the file does not stay larger than the bound. */
    if (ftruncate(fd, 0) < 0)
        DDP_WARN("unable to cut error file %s: %s", path, strerror(errno));
    else if (dump != NULL && pwrite(fd, dump, strlen(dump), 0) < 0)
        DDP_WARN("unable to rewrite error file %s: %s", path, strerror(errno));
    DDP_DEBUG("error file %s: %lld bytes cut to %zu", path, (long long)st.st_size,
              dump ? strlen(dump) : 0);
out:
    json_decref(root);
    free(dump);
    free(head);
    close(fd);
}
