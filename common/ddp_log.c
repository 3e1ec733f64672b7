/* SPDX-License-Identifier: Apache-2.0
 * ddp_log: timestamped, role-tagged lines on stderr, written with one write(2) so that lines
 * from several processes sharing the terminal never interleave mid-line. */
#include "ddp_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char log_role[32] = "ddprun";
static int log_level = DDP_LOG_WARN;
static ddp_log_writer_fn log_writer;
static void *log_writer_ctx;
static pid_t log_writer_pid; /* the process that set the writer */

void ddp_log_set_writer(ddp_log_writer_fn fn, void *ctx) {
    log_writer = fn;
    log_writer_ctx = ctx;
    log_writer_pid = getpid();
}

void ddp_log_init(const char *role, int level) {
    snprintf(log_role, sizeof log_role, "%s", role);
    log_level = level;
    const char *env = getenv("DDPRUN_LOG_LEVEL");
    if (env == NULL || *env == '\0')
        return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(env, names[i]) == 0 || (env[0] == '0' + i && env[1] == '\0'))
            log_level = i;
}

int ddp_log_set_level(int level) {
    int old = log_level;
    log_level = level;
    return old;
}

int ddp_log_level(void) {
    return log_level;
}

void ddp_log(int level, const char *fmt, ...) {
    if (level > log_level)
        return;
    static const char letters[] = "EWID";
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "ddprun[%s %d] %02d:%02d:%02d.%03d %c ", log_role,
                     (int)getpid(), tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     letters[level < 0   ? 0
                             : level > 3 ? 3
                                         : level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    if (log_writer != NULL && getpid() == log_writer_pid) {
        log_writer(log_writer_ctx, line, len);
        return;
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
