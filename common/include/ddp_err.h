/* SPDX-License-Identifier: Apache-2.0
 * Error codes and parser error reports shared by every ddprun module.
 * Functions return 0 on success and a negative code on failure: -errno, or a DDP_E* code. */
#ifndef DDP_ERR_H
#define DDP_ERR_H

#include <stddef.h>

/* Project error codes live below -4000 so they never collide with -errno. */
enum {
    DDP_EFRAME = -4001,         /* malformed or hostile wire frame */
    DDP_ETOOBIG = -4002,        /* a size limit was exceeded */
    DDP_EAUTH = -4003,          /* authentication refused */
    DDP_ECLOSED = -4004,        /* peer closed the connection */
    DDP_ETIMEOUT = -4005,       /* a bounded wait ran out */
    DDP_EUSAGE = -4006,         /* bad command line or configuration */
    DDP_ERDZV_CLOSED = -4007,   /* the rendezvous was closed */
    DDP_EPROTO = -4008,         /* unexpected reply from a peer */
    DDP_ENOKEY = -4009,         /* key does not exist */
    DDP_ENOGPU = -4010,         /* no usable CUDA device */
    DDP_ECUDA = -4011,          /* CUDA runtime or cuBLAS error */
    DDP_ENCCL = -4012,          /* NCCL error */
    DDP_EENV = -4013,           /* missing or malformed environment variable */
    DDP_ECORRUPT = -4014,       /* checksum or format mismatch in a file */
    DDP_ECANCELED = -4015,      /* operation was canceled */
    DDP_ERDZV_EXCLUDED = -4016, /* this node's host is excluded from the run (max_node_failures) */
    DDP_ERDZV_SPARE = -4017, /* the run is at max_nodes: this node waits as a spare, joins again */
    DDP_ERDZV_DONE = -4018,  /* the run finished (its group passed the exit barrier) */
    DDP_ERDZV_REUSED =
        -4019,              /* a new node joins a run id that finished (the store still holds it) */
    DDP_EAUTH_PEER = -4020, /* the peer could not prove it holds the token (this side refused it) */
    DDP_EFENCED = -4021,    /* a fenced write refused: the writer no longer leads (etcd election) */
    DDP_ERDZV_MOVED = -4022, /* this store does not serve the rendezvous; the text names the one
                                that does ("HOST:PORT") */
};

#define DDP_ERR_TEXT_LEN 160

/* Filled by parsers and by library calls that want to say more than a code.
 * May be NULL. The first error wins: later ddp_err_set calls leave it alone. */
typedef struct ddp_err {
    int code;
    long offset; /* position in the input, or -1 */
    char text[DDP_ERR_TEXT_LEN];
} ddp_err_t;

/* Returns a static description of code (-errno or DDP_E*). Never NULL. */
const char *ddp_strerror(int code);

/* Records code and a printf-style message in err unless err is NULL or already set.
 * Returns code, so callers can write `return ddp_err_set(err, DDP_EUSAGE, ...)`. */
int ddp_err_set(ddp_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Resets err to "no error". */
void ddp_err_clear(ddp_err_t *err);

#endif
