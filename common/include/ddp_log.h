/* SPDX-License-Identifier: Apache-2.0
 * One logging call for the programs (never for library code, which returns errors instead).
 * Lines look like `ddprun[agent 1234] 12:00:01.234 W message` and go to stderr. */
#ifndef DDP_LOG_H
#define DDP_LOG_H

#include <stddef.h>

enum ddp_log_level { DDP_LOG_ERROR = 0, DDP_LOG_WARN = 1, DDP_LOG_INFO = 2, DDP_LOG_DEBUG = 3 };

/* Sets the program role shown in each line ("agent", "rendezvous", ...) and the level.
 * The level is raised by DDPRUN_LOG_LEVEL (error|warn|info|debug or 0-3) when set. */
void ddp_log_init(const char *role, int level);

/* Changes the level; returns the previous one. */
int ddp_log_set_level(int level);

/* Current level. */
int ddp_log_level(void);

/* Where the lines go instead of write(2) on stderr: fn gets each whole line (newline included)
 * in the process that set it; a child forked from it (which the caller's writer may not serve)
 * writes to stderr itself. NULL restores stderr. */
typedef void (*ddp_log_writer_fn)(void *ctx, const char *line, size_t len);
void ddp_log_set_writer(ddp_log_writer_fn fn, void *ctx);

/* Writes one line (a newline is added) if level <= the current level. Async-signal-unsafe. */
void ddp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DDP_ERROR(...) ddp_log(DDP_LOG_ERROR, __VA_ARGS__)
#define DDP_WARN(...) ddp_log(DDP_LOG_WARN, __VA_ARGS__)
#define DDP_INFO(...) ddp_log(DDP_LOG_INFO, __VA_ARGS__)
#define DDP_DEBUG(...) ddp_log(DDP_LOG_DEBUG, __VA_ARGS__)

#endif
