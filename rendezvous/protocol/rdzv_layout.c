/* SPDX-License-Identifier: Apache-2.0
 * rdzv_layout: the key names of a multi-node job in the store (rdzv_layout.h), both directions. */
#include "rdzv_layout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The store's namespace and the words inside it. */
#define NS "__rdzv/"
#define END_WORD "/end/"

/* snprintf's result as the builders' return: 0 when the key fit cap. */
static int fitted(int n, size_t cap) {
    return n > 0 && (size_t)n < cap ? 0 : -EINVAL;
}

static int run_ok(const char *run_id) {
    return run_id != NULL && strlen(run_id) <= RDZV_RUN_ID_MAX;
}

int rdzv_layout_end_key(char *key, size_t cap, const char *run_id, int64_t round) {
    if (!run_ok(run_id) || round < 0)
        return -EINVAL;
    return fitted(snprintf(key, cap, NS "%s" END_WORD "%" PRId64, run_id, round), cap);
}

int rdzv_layout_exit_key(char *key, size_t cap, const char *run_id, int64_t round) {
    if (!run_ok(run_id) || round < 0)
        return -EINVAL;
    return fitted(snprintf(key, cap, NS "%s/%" PRId64 "/exit", run_id, round), cap);
}

int rdzv_layout_exit_done_key(char *key, size_t cap, const char *run_id, int64_t round) {
    if (!run_ok(run_id) || round < 0)
        return -EINVAL;
    return fitted(snprintf(key, cap, NS "%s/%" PRId64 "/exit/done", run_id, round), cap);
}

int rdzv_layout_progress_key(char *key, size_t cap, const char *run_id, int64_t group_rank) {
    if (!run_ok(run_id) || group_rank < 0)
        return -EINVAL;
    return fitted(snprintf(key, cap, NS "%s/progress/%" PRId64, run_id, group_rank), cap);
}

int rdzv_layout_round_key(char *key, size_t cap, const char *prefix, const char *run_id,
                          int64_t round, const char *name) {
    if (prefix == NULL || strlen(prefix) > RDZV_ROUND_KEYS_MAX || !run_ok(run_id) || round < 0 ||
        name == NULL)
        return -EINVAL;
    return fitted(snprintf(key, cap, "%s%s/%" PRId64 "/%s", prefix, run_id, round, name), cap);
}

/* The round number at p[0..n) when it is all digits and fits 18 of them; -1 otherwise. */
static int64_t digits(const uint8_t *p, size_t n) {
    int64_t r = 0;
    if (n == 0 || n > 18)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        r = r * 10 + (p[i] - '0');
    }
    return r;
}

/* Skips the bytes of s at k[*off..n): 1 when they are there, else 0. */
static int skip(const uint8_t *k, size_t n, size_t *off, const char *s, size_t len) {
    if (n - *off < len || memcmp(k + *off, s, len) != 0)
        return 0;
    *off += len;
    return 1;
}

int64_t rdzv_layout_end_round_of(const void *key, size_t n, const char *run_id) {
    const uint8_t *k = key;
    size_t off = 0;
    if (!skip(k, n, &off, NS, sizeof NS - 1) || !skip(k, n, &off, run_id, strlen(run_id)) ||
        !skip(k, n, &off, END_WORD, sizeof END_WORD - 1))
        return -1;
    return digits(k + off, n - off);
}

int64_t rdzv_layout_round_of(const void *key, size_t n, const char *prefix, const char *run_id) {
    const uint8_t *k = key;
    size_t off = 0;
    if (prefix == NULL || prefix[0] == '\0' || !skip(k, n, &off, prefix, strlen(prefix)) ||
        !skip(k, n, &off, run_id, strlen(run_id)) || !skip(k, n, &off, "/", 1))
        return -1;
    const uint8_t *slash = memchr(k + off, '/', n - off);
    return slash != NULL ? digits(k + off, (size_t)(slash - (k + off))) : -1;
}
