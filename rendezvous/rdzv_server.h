/* rdzv_server: the ddprun store served on a libuv loop, embedded in an agent or run by the
 * ddp-rendezvous daemon (rendezvous/main.c). */
#ifndef RDZV_SERVER_H
#define RDZV_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ddp_err.h"

typedef struct rdzv_server rdzv_server_t;

typedef struct rdzv_server_opts {
    const char *host;       /* address to bind (e.g. "127.0.0.1"); never all interfaces unless
                               the caller passes "0.0.0.0" or "::" explicitly */
    uint16_t port;          /* 0 = kernel picks; read it back with rdzv_server_port */
    const void *token;      /* job token; NULL with no_auth = 1 serves unauthenticated */
    size_t token_len;
    int no_auth;            /* explicit opt-out: the caller logs the one warning */
    /* Limits; 0 = the default from rdzv_limits.h. */
    size_t max_key_len, max_value_len, max_keys_per_req, max_conns;
    size_t max_out_buf, max_total_mem;
    int auth_idle_ms;       /* close connections that have not authenticated by then */
} rdzv_server_opts_t;

/* Binds, listens and starts serving on loop. On success *out is the server: caller owns;
 * stop with rdzv_server_close. Errors (-errno, DDP_E*) are described in err, naming the address. */
int rdzv_server_start(uv_loop_t *loop, const rdzv_server_opts_t *opts, rdzv_server_t **out,
                      ddp_err_t *err);

/* The port actually bound. */
uint16_t rdzv_server_port(const rdzv_server_t *s);

/* Closes the listener and every connection (parked waits are dropped) and frees the server once
 * libuv has released its handles; close_cb (may be NULL) runs then, with arg. */
void rdzv_server_close(rdzv_server_t *s, void (*close_cb)(void *arg), void *arg);

#endif
