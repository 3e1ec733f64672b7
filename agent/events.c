/* agent/events.c: --event_log_handler json, structured events for log pipelines: one JSON object
 * a line, each written with one write(2) to the handler's descriptor (stderr, or a file opened
 * O_APPEND by the launcher), so that lines from several agents sharing a file stay whole. The
 * events and their fields are documented in docs/cli.md ("Structured events"). */
#include "agent_int.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp_log.h"

const char *const agent__cause_names[AGENT_NCAUSES] = {"exit", "signal", "hung", "exec"};

void agent__evlog(agent_t *a, const char *event, const char *fmt, ...) {
    int fd = a->job->event_log_fd;
    if (!a->job->event_log_on || fd < 0)
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
    json_t *head =
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "ts", stamp, "event", event, "run_id",
                  a->job->run_id ? a->job->run_id : "", "host", a->hostname, "agent_pid",
                  (int)getpid(), "node_rank", a->node_rank, "attempt", a->attempt);
    if (head != NULL && json_object_update(head, o) == 0) {
        char *line = json_dumps(head, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (line != NULL) {
            size_t n = strlen(line);
            line[n] = '\n'; /* the NUL goes: one write of the whole line */
            if (write(fd, line, n + 1) < 0) {
                /* A full disk or a closed pipe must not stop the job: said once. */
                static int warned;
                if (!warned++)
                    DDP_WARN("--event_log_handler json: unable to write an event");
            }
            free(line);
        }
    }
    json_decref(head);
    json_decref(o);
}
