/* SPDX-License-Identifier: Apache-2.0
 * ddp_addr: numeric addresses of this machine and of the hosts it talks to (the agent's
 * rendezvous: resolving the endpoint, deciding whether it is ours, finding the address the other
 * nodes reach us at). Library code: errors are returned, never logged. */
#ifndef DDP_ADDR_H
#define DDP_ADDR_H

#include <stddef.h>

#include "ddp_err.h"

/* Room for any numeric address ddp_addr writes (INET6_ADDRSTRLEN). */
#define DDP_ADDR_MAX 46

/* Resolves host (a name or a numeric address) to the first numeric address getaddrinfo gives,
 * into out (cap bytes, at least DDP_ADDR_MAX). Returns 0, or -EADDRNOTAVAIL with err naming the
 * host and the resolver's reason. */
int ddp_addr_resolve(const char *host, char *out, size_t cap, ddp_err_t *err);

/* Nonzero when addr (numeric) is a loopback address or one of this machine's interface
 * addresses: c10d's rule for "the endpoint is this machine" (host names alone mislead inside
 * network namespaces and clusters). 0 when the interfaces cannot be listed. */
int ddp_addr_is_local(const char *addr);

/* The source address of this machine's route to addr:port (numeric), the address other nodes can
 * reach it at, into out (cap bytes). A connected UDP socket sends nothing; getsockname tells the
 * route's source. When there is no route, out is addr itself. */
void ddp_addr_route_source(const char *addr, int port, char *out, size_t cap);

#endif
