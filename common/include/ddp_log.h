/* One logging call for the programs (never for library code, which returns errors instead).
 * Lines look like `ddprun[agent 1234] 12:00:01.234 W message` and go to stderr. */
#ifndef DDP_LOG_H
#define DDP_LOG_H

enum ddp_log_level { DDP_LOG_ERROR = 0, DDP_LOG_WARN = 1, DDP_LOG_INFO = 2, DDP_LOG_DEBUG = 3 };

/* Sets the program role shown in each line ("agent", "rendezvous", ...) and the level.
 * The level is raised by DDPRUN_LOG_LEVEL (error|warn|info|debug or 0-3) when set. */
void ddp_log_init(const char *role, int level);

/* Changes the level; returns the previous one. */
int ddp_log_set_level(int level);

/* Current level. */
int ddp_log_level(void);

/* Writes one line (a newline is added) if level <= the current level. Async-signal-unsafe. */
void ddp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DDP_ERROR(...) ddp_log(DDP_LOG_ERROR, __VA_ARGS__)
#define DDP_WARN(...) ddp_log(DDP_LOG_WARN, __VA_ARGS__)
#define DDP_INFO(...) ddp_log(DDP_LOG_INFO, __VA_ARGS__)
#define DDP_DEBUG(...) ddp_log(DDP_LOG_DEBUG, __VA_ARGS__)

#endif
