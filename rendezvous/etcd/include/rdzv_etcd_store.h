/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_store: what every candidate to serve a run's rendezvous store agrees on in etcd (the
 * agents of the etcd backend, agent/rdzv_elect.c, and `ddp-rendezvous --etcd`): the defaults of
 * the key prefix and the lease, the leader key <prefix>/<run_id>/leader and its value, the
 * store's "ADDR:PORT" (docs/protocol-rdzv.md "The etcd key layout"). Pure functions but
 * rdzv_etcd_store_local_host, which asks the kernel for a route. */
#ifndef RDZV_ETCD_STORE_H
#define RDZV_ETCD_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The key prefix, the leader's lease TTL (seconds) and its bounds, etcd's client port (a member
 * named without one), and the variables that carry the etcd user's credentials. */
#define RDZV_ETCD_STORE_PREFIX "/ddprun"
#define RDZV_ETCD_STORE_TTL_S 4
#define RDZV_ETCD_STORE_TTL_MIN_S 2
#define RDZV_ETCD_STORE_TTL_MAX_S 600
#define RDZV_ETCD_STORE_PORT 2379
#define RDZV_ETCD_ENV_USER "DDPRUN_ETCD_USER"
#define RDZV_ETCD_ENV_PASSWORD "DDPRUN_ETCD_PASSWORD"
/* The longest store address a leader key's value holds (a host name or IP, without the port). */
#define RDZV_ETCD_STORE_HOST_MAX 255

/* "ADDR:PORT" into out (cap bytes), an IPv6 address in brackets: the leader key's value. */
void rdzv_etcd_store_addr_format(char *out, size_t cap, const char *addr, int port);

/* Parses a leader key's value (n bytes, not NUL-ended) into addr (cap bytes, numeric or a host
 * name, brackets dropped) and *port. Returns 0, or -EINVAL for a value that is not a store's
 * address (a port outside 1..65535, a byte no address has, too long for cap). */
int rdzv_etcd_store_addr_parse(const uint8_t *v, size_t n, char *addr, size_t cap, int *port);

/* The next store of a list "HOST:PORT+HOST:PORT..." (--rdzv_conf etcd_stores) at *cursor: its
 * text (*len bytes at *entry) parsed as rdzv_etcd_store_addr_parse does into addr (cap bytes)
 * and *port; *cursor moves past it and its '+'. Empty entries are skipped. Returns 1, 0 at the
 * list's end, or -EINVAL for an entry that is not a store's address (*entry, *len name it). */
int rdzv_etcd_store_list_next(const char **cursor, const char **entry, size_t *len, char *addr,
                              size_t cap, int *port);

/* This host's address as the others reach it: the source of the kernel's route to the first
 * member of endpoints ("HOST:PORT[,...]"), 127.0.0.1 when it cannot be resolved. */
void rdzv_etcd_store_local_host(const char *endpoints, char *out, size_t cap);

#endif
