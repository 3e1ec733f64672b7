/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server_log: the store's log lines (rdzv_server_set_log's sink) and the rate-limited
 * admission log, for every file of the store. */
#include "rdzv_server_int.h"

#include <stdarg.h>
#include <stdio.h>

#include "ddp_log.h"

/* ---- logging ---- */

void rdzv__slog(rdzv_server_t *s, int level, const char *fmt, ...) {
    if (s->log_fn == NULL || level > s->log_level)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->log_fn(s->log_arg, level, msg);
}

/* ---- the admission log ---- */

void rdzv__admit_log(rdzv_server_t *s, const char *fmt, ...) {
    uint64_t now = uv_now(s->loop);
    if (s->alog_any && now - s->alog_last_ms < RDZV_ADMIT_LOG_MS) {
        s->alog_skipped++;
        return;
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->alog_skipped > 0)
        rdzv__slog(s, DDP_LOG_WARN,
                   "%s (%llu more connections refused, evicted or idle not logged)", msg,
                   (unsigned long long)s->alog_skipped);
    else
        rdzv__slog(s, DDP_LOG_WARN, "%s", msg);
    s->alog_any = 1;
    s->alog_last_ms = now;
    s->alog_skipped = 0;
}

void rdzv__admit_log_flush(rdzv_server_t *s, uint64_t now) {
    if (s->alog_skipped == 0 || now - s->alog_last_ms < RDZV_ADMIT_LOG_MS)
        return;
    rdzv__slog(
        s, DDP_LOG_WARN,
        "%llu more connections refused, evicted or idle on %s not logged in the last %llu ms",
        (unsigned long long)s->alog_skipped, s->addr, (unsigned long long)(now - s->alog_last_ms));
    s->alog_last_ms = now;
    s->alog_skipped = 0;
}
