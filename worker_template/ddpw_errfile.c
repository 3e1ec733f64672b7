/* ddpw_errfile.c: the TORCHELASTIC_ERROR_FILE writer, in the JSON shape of PyTorch's
 * torch/distributed/elastic/multiprocessing/errors/error_handler.py (_write_error). */
#include "ddpw.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int ddpw_record_error_to(const char *path, const char *msg) {
    char ts[32];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    /* PyTorch puts the Python traceback in py_callstack; a C worker has none, so it is empty
     * and the agent's summary shows the message. */
    json_t *root = json_pack("{s:{s:s, s:{s:s, s:s}}}", "message", "message", msg, "extraInfo",
                             "py_callstack", "", "timestamp", ts);
    if (root == NULL)
        return -ENOMEM;
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (text == NULL)
        return -ENOMEM;
    /* Write a temporary file then rename, so the agent never reads half a message. */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    int rc = 0;
    if (tmp == NULL) {
        free(text);
        return -ENOMEM;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t k = write(fd, text + off, n - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = -errno;
            break;
        }
        off += (size_t)k;
    }
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
out:
    free(tmp);
    free(text);
    return rc;
}

int ddpw_record_error(const char *msg) {
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    if (path == NULL || *path == '\0')
        return 0;
    return ddpw_record_error_to(path, msg);
}
