/* SPDX-License-Identifier: Apache-2.0
 * The ssh session of an agent a launching ddprun started (job->ssh_session; launcher/ssh.c is the
 * other end): the lines the launcher writes down it (heartbeats, the signals it got: AGENT_SSH_*
 * in agent.h), their silence, and the session's end. The end and the silence both mean that the
 * launcher, its machine or the network to it is gone: the job stops as on SIGHUP, unless it is
 * already stopping, when it goes on stopping as it was told. */
#include "agent_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddp_log.h"
#include "ddp_parse.h"
#include "ddp_signal.h"

/* The launcher is gone (why says how we know): nothing more is read, and the job stops. */
static void session_lost(agent_t *a, const char *why) {
    uv_poll_stop(&a->session.poll);
    uv_timer_stop(&a->session.timer);
    if (a->sup.stop_signal != 0) {
        /* The job already stops (the launcher's signal, or a failure): a second signal would
         * turn the workers' grace into SIGKILL. */
        DDP_INFO("%s while the job stops", why);
        return;
    }
    DDP_WARN("%s (the launching ddprun is gone, or the network to it): stopping the job", why);
    agent__signal_take(a, SIGHUP);
}

static void on_silence(uv_timer_t *t) {
    char why[96];
    snprintf(why, sizeof why, "no heartbeat on the ssh session for %d s",
             AGENT_SSH_SILENCE_MS / 1000);
    session_lost(t->data, why);
}

/* One line from the launcher, without its '\n'. */
static void line_handle(agent_t *a, const char *line) {
    size_t n = sizeof AGENT_SSH_SIGNAL - 1;
    int64_t sig;
    if (line[0] == '\0') {
        a->session.heard = 1;
    } else if (strcmp(line, AGENT_SSH_PAUSE) == 0) {
        DDP_INFO("the launching ddprun is suspended: the job goes on without its heartbeats");
        a->session.heard = 0;
        uv_timer_stop(&a->session.timer);
    } else if (strncmp(line, AGENT_SSH_SIGNAL " ", n + 1) == 0 &&
               ddp_parse_i64(line + n + 1, 1, SIGRTMAX, &sig) == 0 && sig != SIGKILL &&
               sig != SIGSTOP && sig != SIGCHLD) {
        DDP_INFO("the launching ddprun got %s", ddp_signal_name((int)sig));
        agent__signal_take(a, (int)sig);
    } else {
        DDP_DEBUG("ignoring a line from the launching ddprun: %.32s", line);
    }
}

static void on_session(uv_poll_t *h, int status, int events) {
    agent_t *a = h->data;
    char buf[256];
    ssize_t n =
        status == 0 && (events & UV_READABLE) ? read(a->cfg.job->session_fd, buf, sizeof buf) : 0;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        session_lost(a, "the ssh session ended");
        return;
    }
    for (ssize_t i = 0; i < n && a->sup.state != SUP_DONE; i++) {
        if (buf[i] != '\n') {
            if (a->session.len < sizeof a->session.line - 1)
                a->session.line[a->session.len] = buf[i];
            if (a->session.len < sizeof a->session.line)
                a->session.len++;
            continue;
        }
        if (a->session.len < sizeof a->session.line) {
            a->session.line[a->session.len] = '\0';
            line_handle(a, a->session.line);
        }
        a->session.len = 0;
    }
    /* Any byte shows that the launcher is there; the clock starts with the first heartbeat (a
     * launcher that sends none is not taken for gone). */
    if (a->session.heard && a->sup.state != SUP_DONE &&
        uv_timer_start(&a->session.timer, on_silence, AGENT_SSH_SILENCE_MS, 0) < 0)
        DDP_DEBUG("unable to watch the launcher's heartbeats"); /* only when closing */
}

int agent__session_start(agent_t *a) {
    a->session.poll.data = a->session.timer.data = a;
    int rc = uv_timer_init(a->cfg.loop, &a->session.timer);
    if (rc == 0)
        rc = uv_poll_init(a->cfg.loop, &a->session.poll, a->cfg.job->session_fd);
    if (rc == 0)
        rc = uv_poll_start(&a->session.poll, UV_READABLE | UV_DISCONNECT, on_session);
    if (rc < 0)
        DDP_ERROR("unable to watch the ssh session: %s", uv_strerror(rc));
    return rc;
}
