/* SPDX-License-Identifier: Apache-2.0
 * ddp_devices: the visible-device list by torch.cuda's rule (ddp_devices.h). */
#include "ddp_devices.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* One entry of a list: [b, e) with the blanks around it removed. */
typedef struct entry {
    const char *b, *e;
} entry_t;

/* The entry that starts at p (up to the next comma or the end). */
static entry_t entry_at(const char *p) {
    const char *end = strchr(p, ',');
    entry_t x = {p, end != NULL ? end : p + strlen(p)};
    while (x.b < x.e && isspace((unsigned char)*x.b))
        x.b++;
    while (x.e > x.b && isspace((unsigned char)x.e[-1]))
        x.e--;
    return x;
}

/* The ordinal an entry names, read like strtoul (a leading sign, then digits; what follows the
 * digits is ignored). Returns -1 when it names none (no digits, or negative). */
static long ordinal(entry_t x) {
    const char *p = x.b;
    int neg = 0;
    if (p < x.e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    long v = 0;
    const char *digits = p;
    while (p < x.e && isdigit((unsigned char)*p) && v < 1000000)
        v = v * 10 + (*p++ - '0');
    if (p == digits || (neg && v > 0))
        return -1;
    return v;
}

/* Nonzero when x is a device of the list's kind (prefix "GPU-", "MIG-", or NULL for ordinals). */
static int is_device(entry_t x, const char *prefix) {
    if (prefix == NULL)
        return ordinal(x) >= 0;
    return (size_t)(x.e - x.b) >= 4 && strncmp(x.b, prefix, 4) == 0;
}

/* Nonzero when x and y name the same device. */
static int same_device(entry_t x, entry_t y, const char *prefix) {
    if (prefix == NULL)
        return ordinal(x) == ordinal(y);
    return x.e - x.b == y.e - y.b && memcmp(x.b, y.b, (size_t)(x.e - x.b)) == 0;
}

/* Walks list by the rule. Returns the number of devices it makes visible (0 when one repeats). */
static int walk(const char *list) {
    entry_t first = entry_at(list);
    const char *prefix = NULL;
    if (is_device(first, "GPU-"))
        prefix = "GPU-";
    else if (is_device(first, "MIG-"))
        prefix = "MIG-";
    int n = 0;
    for (const char *p = list;; p++) {
        entry_t x = entry_at(p);
        if (!is_device(x, prefix))
            break;
        /* Earlier entries are re-read from the list: no array is needed to find a repeat. */
        for (const char *q = list; q < p; q++) {
            entry_t y = entry_at(q);
            if (same_device(x, y, prefix))
                return 0;
            q = strchr(q, ',');
        }
        n++;
        p = strchr(p, ',');
        if (p == NULL)
            break;
    }
    return n;
}

const char *ddp_devices_select(const char *hip, const char *cuda, const char **var) {
    if (hip != NULL && *hip != '\0') {
        *var = "HIP_VISIBLE_DEVICES";
        return hip;
    }
    *var = "CUDA_VISIBLE_DEVICES";
    return cuda;
}

int ddp_devices_count(const char *list) {
    return list == NULL ? -1 : walk(list);
}

int ddp_devices_entry(const char *list, int idx, char *out, size_t cap) {
    if (cap > 0)
        out[0] = '\0';
    /* Whether the list holds device idx depends on every entry before it. */
    if (list == NULL || idx < 0 || idx >= walk(list))
        return -ENOENT;
    const char *p = list;
    for (int i = 0; i < idx; i++)
        p = strchr(p, ',') + 1;
    entry_t x = entry_at(p);
    if (cap > 0)
        snprintf(out, cap, "%.*s", (int)(x.e - x.b), x.b);
    return 0;
}
