/* SPDX-License-Identifier: Apache-2.0
 * ddp_strerror and the first-error-wins ddp_err_t helpers. */
#include "ddp_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ddp_strerror(int code) {
    switch (code) {
    case 0: return "success";
    case DDP_EFRAME: return "malformed frame";
    case DDP_ETOOBIG: return "size limit exceeded";
    case DDP_EAUTH: return "authentication refused";
    case DDP_EAUTH_PEER: return "the peer could not prove it holds the token";
    case DDP_ECLOSED: return "connection closed by peer";
    case DDP_ETIMEOUT: return "timed out";
    case DDP_EUSAGE: return "usage error";
    case DDP_ERDZV_CLOSED: return "rendezvous closed";
    case DDP_EPROTO: return "protocol error";
    case DDP_ENOKEY: return "no such key";
    case DDP_ENOGPU: return "no CUDA device";
    case DDP_ECUDA: return "CUDA error";
    case DDP_ENCCL: return "NCCL error";
    case DDP_EENV: return "bad environment";
    case DDP_ECORRUPT: return "corrupt data";
    case DDP_ECANCELED: return "canceled";
    case DDP_ERDZV_EXCLUDED: return "host excluded from the rendezvous";
    case DDP_ERDZV_SPARE: return "waiting as a spare";
    case DDP_ERDZV_DONE: return "rendezvous finished";
    case DDP_ERDZV_REUSED: return "rendezvous id of a finished run";
    case DDP_EFENCED: return "fenced out: no longer the leader";
    case DDP_ERDZV_MOVED: return "the rendezvous is served by another store";
    default: break;
    }
    if (code < 0 && code > -4000)
        return strerror(-code);
    return "unknown error";
}

int ddp_err_set(ddp_err_t *err, int code, const char *fmt, ...) {
    if (err == NULL || err->code != 0)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return code;
}

void ddp_err_clear(ddp_err_t *err) {
    if (err == NULL)
        return;
    err->code = 0;
    err->offset = -1;
    err->text[0] = '\0';
}
