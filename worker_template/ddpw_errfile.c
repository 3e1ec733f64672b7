/* SPDX-License-Identifier: Apache-2.0
 * ddpw_errfile.c: the TORCHELASTIC_ERROR_FILE writer, in the JSON shape of PyTorch's
 * torch/distributed/elastic/multiprocessing/errors/error_handler.py (_write_error). */
#include "ddpw.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_file.h"

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when p does not start one. */
static size_t utf8_seq(const unsigned char *p) {
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0)
        return 0;
    /* The second byte's range excludes overlong forms, surrogates and code points > U+10FFFF. */
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* A copy of msg with the bytes that are not UTF-8 replaced by '?'. Caller owns; free with free.
 * NULL when out of memory. */
static char *utf8_clean(const char *msg) {
    size_t mlen = strlen(msg);
    char *clean = malloc(mlen + 1);
    if (clean == NULL)
        return NULL;
    for (size_t i = 0; i < mlen;) {
        size_t k = utf8_seq((const unsigned char *)msg + i);
        if (k == 0) {
            clean[i++] = '?';
            continue;
        }
        memcpy(clean + i, msg + i, k);
        i += k;
    }
    clean[mlen] = '\0';
    return clean;
}

/* The error file's JSON text for msg. Caller owns; free with free. NULL when out of memory. */
static char *error_json(const char *msg) {
    /* jansson refuses strings that are not UTF-8, and the message may quote a path or a peer's
     * bytes: replace invalid bytes with '?' so the error file is still written. */
    char *clean = utf8_clean(msg);
    if (clean == NULL)
        return NULL;
    char ts[32];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    /* PyTorch puts the Python traceback in py_callstack; a C worker has none, so it is empty
     * and the agent's summary shows the message. */
    json_t *root = json_pack("{s:{s:s, s:{s:s, s:s}}}", "message", "message", clean, "extraInfo",
                             "py_callstack", "", "timestamp", ts);
    free(clean);
    if (root == NULL)
        return NULL;
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

int ddpw_record_error_to(const char *path, const char *msg) {
    char *text = error_json(msg);
    if (text == NULL)
        return -ENOMEM;
    /* Through a temporary file beside path, renamed over it: the agent never reads half a
     * message, and a link planted at path is replaced, not written through. */
    ddp_file_part_t part = {text, strlen(text)};
    int rc = ddp_file_replace(path, NULL, &part, 1, 0644, 0);
    free(text);
    return rc;
}

int ddpw_record_error(const char *msg) {
    const char *path = getenv(DDP_ENV_ERROR_FILE);
    if (path == NULL || *path == '\0')
        return 0;
    return ddpw_record_error_to(path, msg);
}
