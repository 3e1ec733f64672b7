/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_store.h: the leader key's value, shared by the candidates to serve a store. */
#include "rdzv_etcd_store.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_addr.h"
#include "ddp_err.h"

void rdzv_etcd_store_addr_format(char *out, size_t cap, const char *addr, int port) {
    int v6 = strchr(addr, ':') != NULL;
    snprintf(out, cap, "%s%s%s:%d", v6 ? "[" : "", addr, v6 ? "]" : "", port);
}

int rdzv_etcd_store_addr_parse(const uint8_t *v, size_t n, char *addr, size_t cap, int *port) {
    char buf[RDZV_ETCD_STORE_HOST_MAX + 16];
    if (n == 0 || n >= sizeof buf || memchr(v, '\0', n) != NULL)
        return -EINVAL;
    memcpy(buf, v, n);
    buf[n] = '\0';
    char *colon = strrchr(buf, ':');
    if (colon == NULL || colon == buf)
        return -EINVAL;
    *colon = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p < 1 || p > 65535)
        return -EINVAL;
    char *h = buf;
    size_t hl = strlen(h);
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    for (const char *c = h; *c; c++)
        if (!isalnum((unsigned char)*c) && strchr(".:-_%", *c) == NULL)
            return -EINVAL; /* an address, or a --local_addr name */
    if (strlen(h) >= cap)
        return -EINVAL;
    snprintf(addr, cap, "%s", h);
    *port = (int)p;
    return 0;
}

int rdzv_etcd_store_list_next(const char **cursor, const char **entry, size_t *len, char *addr,
                              size_t cap, int *port) {
    const char *p = *cursor;
    while (*p == '+')
        p++;
    if (*p == '\0') {
        *cursor = p;
        return 0;
    }
    size_t n = strcspn(p, "+");
    *entry = p;
    *len = n;
    *cursor = p + n;
    return rdzv_etcd_store_addr_parse((const uint8_t *)p, n, addr, cap, port) < 0 ? -EINVAL : 1;
}

void rdzv_etcd_store_local_host(const char *endpoints, char *out, size_t cap) {
    char first[RDZV_ETCD_STORE_HOST_MAX + 16], ip[DDP_ADDR_MAX];
    snprintf(first, sizeof first, "%s", endpoints);
    char *comma = strchr(first, ',');
    if (comma != NULL)
        *comma = '\0';
    char *colon = strrchr(first, ':');
    if (colon != NULL)
        *colon = '\0';
    char *h = first;
    if (*h == '[') {
        h++;
        h[strlen(h) - 1] = '\0';
    }
    ddp_err_t err;
    ddp_err_clear(&err);
    if (ddp_addr_resolve(h, ip, sizeof ip, &err) < 0)
        snprintf(ip, sizeof ip, "127.0.0.1");
    ddp_addr_route_source(ip, RDZV_ETCD_STORE_PORT, out, cap);
}
