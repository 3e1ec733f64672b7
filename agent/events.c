/* SPDX-License-Identifier: Apache-2.0
 * agent/events.c: --event_log_handler json, structured events for log pipelines: one JSON object
 * a line, each written with one write(2) to the handler's descriptor (stderr, or a file opened
 * O_APPEND by the launcher), so that lines from several agents sharing a file stay whole. The
 * events and their fields are documented in docs/cli.md ("Structured events"). */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"

const char *const agent__cause_names[AGENT_NCAUSES] = {"exit", "signal", "hung", "exec"};

/* A write that stopped short (a full disk) left the first `written` bytes of a line at the end
 * of fd: they are cut off again when nothing was appended after them (by another agent sharing
 * the file), else the line is ended, so that the next event never continues it. */
static void line_untear(int fd, size_t written) {
    struct stat st;
    off_t end = lseek(fd, 0, SEEK_CUR); /* O_APPEND: just past what this write added */
    if (end >= (off_t)written && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == end &&
        ftruncate(fd, end - (off_t)written) == 0)
        return;
    if (write(fd, "\n", 1) < 0)
        DDP_DEBUG("--event_log_handler json: a torn line stays: %s", strerror(errno));
}

int agent_event_log_open(const char *path, ddp_err_t *err) {
    ddp_err_t ferr = {0};
    int fd = ddp_file_open(path, ddp_file_dir_len(path), DDP_FILE_APPEND, 0644, &ferr);
    if (fd < 0)
        return ddp_err_set(err, DDP_EUSAGE, "--event_log_handler: unable to open %s", ferr.text);
    /* Does the file end inside a line (torn by a writer whose disk filled, or that crashed)?
     * Read through a second descriptor, which must name the same file. */
    struct stat st, rst;
    int rd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    char last = '\n';
    if (rd >= 0 && fstat(fd, &st) == 0 && fstat(rd, &rst) == 0 && st.st_ino == rst.st_ino &&
        st.st_dev == rst.st_dev && st.st_size > 0 && pread(rd, &last, 1, st.st_size - 1) == 1 &&
        last != '\n' && write(fd, "\n", 1) < 0)
        DDP_DEBUG("--event_log_handler json: unable to end the torn last line of %s: %s", path,
                  strerror(errno));
    if (rd >= 0)
        close(rd);
    return fd;
}

void agent__evlog_lost_say(const agent_t *a) {
    if (a->obs.events_lost > 0)
        DDP_WARN("--event_log_handler json: %ld event%s could not be written", a->obs.events_lost,
                 a->obs.events_lost == 1 ? "" : "s");
}

void agent__evlog(agent_t *a, const char *event, const char *fmt, ...) {
    int fd = a->cfg.job->event_log_fd;
    if (!a->cfg.job->event_log_on || fd < 0)
        return;
    json_t *o = NULL;
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        o = json_vpack_ex(NULL, 0, fmt, ap);
        va_end(ap);
    }
    if (o == NULL)
        o = json_object();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32], stamp[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp, sizeof stamp, "%s.%03dZ", when, (int)(ts.tv_nsec / 1000000));
    json_t *head = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "ts", stamp, "event", event,
                             "run_id", a->cfg.job->run_id ? a->cfg.job->run_id : "", "host",
                             a->cfg.hostname, "agent_pid", (int)getpid(), "node_rank",
                             a->as.node_rank, "attempt", a->as.attempt);
    if (head != NULL && json_object_update(head, o) == 0) {
        char *line = json_dumps(head, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        if (line != NULL) {
            size_t n = strlen(line);
            line[n] = '\n'; /* the NUL goes: one write of the whole line */
            /* On stderr, through the console, which never blocks the loop (console.c). */
            ssize_t w =
                fd == 2 ? (agent__console_write(a, 2, line, n + 1, 0) == 0 ? (ssize_t)n + 1 : -1)
                        : write(fd, line, n + 1);
            if (w < 0 && fd == 2)
                errno = EPIPE;
            if (w != (ssize_t)(n + 1)) {
                int e = w < 0 ? errno : ENOSPC;
                if (w > 0)
                    line_untear(fd, (size_t)w);
                /* A full disk or a closed pipe must not stop the job: said once, counted at
                 * the end (agent_teardown). */
                if (a->obs.events_lost++ == 0)
                    DDP_WARN("--event_log_handler json: unable to write an event (%s); the "
                             "events lost are counted at exit",
                             strerror(e));
            }
            free(line);
        }
    }
    json_decref(head);
    json_decref(o);
}
