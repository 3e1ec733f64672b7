/* SPDX-License-Identifier: Apache-2.0
 * The agent's console: ddprun's stdout and stderr, written without ever blocking the loop.
 *
 * A reader that stalls (a terminal held by Ctrl-S, a pipe into a stopped program, the launching
 * ddprun suspended while its ssh sessions carry this agent's output) must not stop supervision:
 * signals, reaping, heartbeats to the store. So each console is written through a descriptor
 * of its own opened O_NONBLOCK (reopened through /proc/self/fd, so the flag does not change the
 * file description other processes share, as libuv does for ttys), or with send(MSG_DONTWAIT)
 * for a socket. What does not fit waits in a queue, written as soon as the descriptor can take
 * more: a uv_poll on the private descriptor tells when (so a reader as fast as `cat` gets the
 * output at the speed it reads, not a queue's worth per timer tick). A socket has no private
 * descriptor to be had, and uv_poll_init would set O_NONBLOCK on its shared description: a
 * worker writing to that socket directly (a service whose stdout is the journal's socket) would
 * then get EAGAIN. A socket's queue is retried every AGENT_CONSOLE_RETRY_MS instead.
 *
 * Worker output is held back, not lost: past AGENT_CONSOLE_HIGH queued bytes the streams shown
 * on that console stop being read (by their reader, output.c, which agent__console_busy tells
 * and the drained callback releases), so the workers block on their own pipes, as they
 * would writing to the stalled reader without ddprun; reading resumes below AGENT_CONSOLE_LOW.
 * The agent's own lines (logs, events, the summary) cannot wait: past AGENT_CONSOLE_MAX they are
 * dropped, counted, and the count is said at exit. At exit the queue gets a bounded last flush.
 *
 * stdout and stderr naming the same file (a terminal, 2>&1) share one console, so their lines
 * keep their order. A regular file or a device other than a terminal never blocks for long:
 * it is written as it is. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_log.h"
#include "ddp_time.h"

struct agent_console {
    agent_t *a;
    agent_console_drained_cb drained; /* the streams held back may be read again */
    int std;          /* 1 or 2: the descriptor it stands for (the first, when shared) */
    int fd;           /* what is written to: a private O_NONBLOCK descriptor, or std itself */
    int own_fd;       /* fd was opened here */
    int is_socket;    /* written with send(MSG_DONTWAIT) */
    int gone;         /* the reader has gone (EPIPE): nothing more is written */
    int held;         /* worker streams were held back: resume them when it drains */
    int retry_init;   /* retry is a live handle */
    int poll_init;    /* writable is a live handle (own_fd), used instead of retry */
    uint64_t dropped; /* bytes of the agent's own lines dropped */
    ddp_buf_t queue;
    uv_timer_t retry;   /* a socket's: flushes the queue while it is not empty */
    uv_poll_t writable; /* own_fd's: flushes the queue when fd can take more */
};

/* Writes without blocking. Returns the bytes written (maybe short), or -errno (-EAGAIN: full). */
static ssize_t try_write(const agent_console_t *c, const void *p, size_t n) {
    for (;;) {
        ssize_t w =
            c->is_socket ? send(c->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : write(c->fd, p, n);
        if (w >= 0)
            return w;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

static void on_retry(uv_timer_t *t);
static void on_writable(uv_poll_t *p, int status, int events);

/* Waits for room to write the queue: poll where there is a private descriptor, else the timer.
 * Neither when its handle is closing (the loop's end) or failed to start: the queue then waits
 * for the last flush at exit. */
static void retry_arm(agent_console_t *c) {
    if (c->poll_init) {
        uv_handle_t *h = (uv_handle_t *)&c->writable;
        if (!uv_is_active(h) && !uv_is_closing(h) &&
            uv_poll_start(&c->writable, UV_WRITABLE, on_writable) < 0)
            DDP_DEBUG("console %d: unable to wait for room: written at exit", c->std);
        return;
    }
    if (!c->retry_init || uv_is_active((uv_handle_t *)&c->retry) ||
        uv_is_closing((uv_handle_t *)&c->retry))
        return;
    uv_timer_start(&c->retry, on_retry, AGENT_CONSOLE_RETRY_MS, AGENT_CONSOLE_RETRY_MS);
}

/* Writes what the queue holds until it is empty or the descriptor is full. */
static void queue_flush(agent_console_t *c) {
    while (c->queue.len > 0 && !c->gone) {
        ssize_t w = try_write(c, c->queue.data, c->queue.len);
        if (w == -EAGAIN)
            return;
        if (w <= 0) {
            /* The reader has gone (EPIPE) or the descriptor fails: what waits cannot go. */
            c->gone = 1;
            ddp_buf_reset(&c->queue);
            break;
        }
        ddp_buf_consume(&c->queue, (size_t)w);
    }
}

/* Writes what the queue holds; reading the streams held back resumes once it is low. Returns
 * nonzero when nothing is left to wait for. */
static int queue_retry(agent_console_t *c) {
    queue_flush(c);
    int done = c->queue.len == 0 || c->gone;
    if (c->held && (c->queue.len <= AGENT_CONSOLE_LOW || c->gone)) {
        c->held = 0;
        if (c->drained != NULL)
            c->drained(c->a, c->std);
    }
    return done;
}

static void on_retry(uv_timer_t *t) {
    agent_console_t *c = t->data;
    if (queue_retry(c))
        uv_timer_stop(t);
}

static void on_writable(uv_poll_t *p, int status, int events) {
    /* An error (the reader gone: EPOLLERR) shows in the write itself, which says EPIPE. */
    (void)status;
    (void)events;
    if (queue_retry(p->data))
        uv_poll_stop(p);
}

/* The console for standard descriptor std: a private non-blocking descriptor where one can be
 * had, else std as it is. */
static agent_console_t *console_new(agent_t *a, int std, const struct stat *st,
                                    agent_console_drained_cb drained) {
    agent_console_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->a = a;
    c->drained = drained;
    c->std = std;
    c->fd = std;
    if (S_ISSOCK(st->st_mode)) {
        c->is_socket = 1;
    } else if (S_ISFIFO(st->st_mode) || (S_ISCHR(st->st_mode) && isatty(std))) {
        char path[32];
        snprintf(path, sizeof path, "/proc/self/fd/%d", std);
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) {
            c->fd = fd;
            c->own_fd = 1;
        } else {
            DDP_DEBUG("console %d: unable to reopen it without blocking (%s): written as it is",
                      std, strerror(errno));
        }
    }
    /* A descriptor of its own is already O_NONBLOCK, and its description is not shared: polling
     * it changes nothing for anyone else. */
    if (c->own_fd && uv_poll_init(a->cfg.loop, &c->writable, c->fd) == 0) {
        c->writable.data = c;
        c->poll_init = 1;
    } else if ((c->own_fd || c->is_socket) && uv_timer_init(a->cfg.loop, &c->retry) == 0) {
        c->retry.data = c;
        c->retry_init = 1;
    }
    return c;
}

void agent__console_start(agent_t *a, agent_console_drained_cb drained) {
    struct stat st[3];
    for (int std = 1; std <= 2; std++) {
        if (fstat(std, &st[std]) < 0)
            continue; /* closed: writes to it fail as they would without this */
        if (std == 2 && a->out.console[1] != NULL && st[2].st_dev == st[1].st_dev &&
            st[2].st_ino == st[1].st_ino) {
            a->out.console[2] = a->out.console[1];
            continue;
        }
        /* Out of memory: this one is written as it is (a NULL console). */
        a->out.console[std] = console_new(a, std, &st[std], drained);
    }
}

int agent__console_write(agent_t *a, int std, const void *p, size_t n, int can_wait) {
    agent_console_t *c = std >= 1 && std <= 2 ? a->out.console[std] : NULL;
    if (c == NULL) {
        ssize_t w = write(std, p, n);
        return w < 0 && errno == EPIPE ? -EPIPE : 0;
    }
    if (c->gone)
        return -EPIPE;
    if (c->queue.len == 0) {
        ssize_t w = try_write(c, p, n);
        if (w == (ssize_t)n)
            return 0;
        if (w < 0 && w != -EAGAIN) {
            c->gone = w == -EPIPE;
            return w == -EPIPE ? -EPIPE : 0; /* another error: this line is lost, as before */
        }
        if (w > 0) {
            p = (const uint8_t *)p + w;
            n -= (size_t)w;
        }
    }
    /* Worker output is held back before the queue reaches its bound (agent__console_busy), so
     * only the agent's own lines can overflow it: they are dropped and counted. */
    if (c->queue.len + n > AGENT_CONSOLE_MAX && !can_wait) {
        c->dropped += n;
        return 0;
    }
    if (ddp_buf_append(&c->queue, p, n) < 0) {
        c->dropped += n;
        return 0;
    }
    retry_arm(c);
    return 0;
}

int agent__console_shared(const agent_t *a, int std1, int std2) {
    return std1 >= 1 && std1 <= 2 && std2 >= 1 && std2 <= 2 &&
           a->out.console[std1] == a->out.console[std2];
}

int agent__console_busy(agent_t *a, int std) {
    agent_console_t *c = std >= 1 && std <= 2 ? a->out.console[std] : NULL;
    if (c == NULL || c->queue.len < AGENT_CONSOLE_HIGH)
        return 0;
    c->held = 1;
    return 1;
}

/* The last flush, at exit: blocking at most until deadline (monotonic ms). */
static void final_flush(agent_console_t *c, uint64_t deadline) {
    for (;;) {
        queue_flush(c);
        uint64_t now = ddp_now_ms();
        if (c->queue.len == 0 || c->gone || now >= deadline)
            return;
        struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
        poll(&pfd, 1, (int)(deadline - now));
    }
}

void agent__console_stop(agent_t *a) {
    uint64_t deadline = ddp_now_ms() + AGENT_CONSOLE_EXIT_FLUSH_MS;
    for (int std = 1; std <= 2; std++) {
        agent_console_t *c = a->out.console[std];
        if (c == NULL || (std == 2 && c == a->out.console[1]))
            continue;
        final_flush(c, deadline);
        c->dropped += c->queue.len;
        if (c->dropped > 0) {
            /* Said on the console itself, which may take it now; best effort, never waiting. */
            char line[160];
            int len = snprintf(line, sizeof line,
                               "ddprun: %llu bytes of output could not be written to %s (its "
                               "reader stalled)\n",
                               (unsigned long long)c->dropped, std == 1 ? "stdout" : "stderr");
            if (try_write(c, line, (size_t)len) < 0)
                DDP_DEBUG("%.*s", len - 1, line);
        }
        ddp_buf_free(&c->queue);
        if (c->own_fd)
            close(c->fd);
        free(c);
    }
    a->out.console[1] = a->out.console[2] = NULL;
}
