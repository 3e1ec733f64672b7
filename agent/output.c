/* SPDX-License-Identifier: Apache-2.0
 * Worker output routing: pipes read on the agent's loop, split into lines, written to the console
 * a whole line at a time (so lines from different ranks never interleave mid-line; console.c
 * holds a stream back while its console is backed up), tagged
 * under --tee with the --log_line_prefix_template prefix (torchrun's "[default0]:" by default),
 * copied raw to the per-rank log file, and, for --duplicate_std{out,err}_filters, tagged lines
 * that match a filter copied to attempt_N/filtered_std{out,err}.log. Under --timestamp_output
 * each line also carries, after the tag (at its start in the file), the time its first bytes
 * were read: one clock read per read that starts a line, none without the flag. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_time.h"

/* Writes all of buf to a log file (a regular file: ddp_file_open refuses the rest, so a write
 * never waits on a reader). Returns the bytes written: len, or fewer with *err set to the -errno
 * of the write that failed. */
static size_t write_all(int fd, const uint8_t *buf, size_t len, int *err) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        *err = n < 0 ? -errno : -EIO;
        break;
    }
    return done;
}

/* Writes to one of s's log files (dup: the filtered file, else stdout.log or stderr.log). A
 * write that fails (a full disk, an I/O error) must not stop the job, and must not pass in
 * silence either: the first failure of the agent is said, each file's first is an event, every
 * byte lost is counted (the metric, and one line at exit), and the next write tries again. */
static void log_write(agent_stream_t *s, int dup, const uint8_t *p, size_t n) {
    int fd = dup ? s->dup_fd : s->file_fd, e = 0;
    size_t done = write_all(fd, p, n, &e);
    if (done == n)
        return;
    agent_t *a = s->a;
    int *lost = dup ? &s->dup_lost : &s->file_lost;
    const char *std = s->std == 1 ? "stdout" : "stderr";
    char path[PATH_MAX];
    if (dup)
        snprintf(path, sizeof path, "%s/attempt_%d/filtered_%s.log", a->cfg.run_dir, s->attempt,
                 std);
    else
        snprintf(path, sizeof path, "%s/attempt_%d/%d/%s.log", a->cfg.run_dir, s->attempt,
                 s->rank - a->as.rank_base, std);
    if (a->obs.counts[AGENT_COUNT_LOG_BYTES_LOST] == 0)
        DDP_WARN("unable to write %s (rank %d): %s; the job goes on, and the output the logs "
                 "lose is counted at exit",
                 path, s->rank, strerror(-e));
    agent__count(a, AGENT_COUNT_LOG_BYTES_LOST, n - done);
    if (!*lost) {
        *lost = 1;
        agent__evlog(a, "log_write_failed", "{s:i, s:i, s:s, s:s}", "rank", s->rank, "local_rank",
                     s->rank - a->as.rank_base, "file", path, "error", strerror(-e));
    }
}

void agent__log_lost_say(const agent_t *a) {
    uint64_t lost = a->obs.counts[AGENT_COUNT_LOG_BYTES_LOST];
    if (lost > 0)
        DDP_WARN("%llu bytes of worker output could not be written to the log files",
                 (unsigned long long)lost);
}

static void on_stream_closed(uv_handle_t *h);

/* The console (ddprun's stdout or stderr) is a pipe whose reader is gone (`ddprun ... | head`).
 * Without ddprun the worker would get EPIPE or SIGPIPE writing to it: close our end of its pipe
 * so that it does, rather than read and drop its output for as long as it runs. */
static void console_gone(agent_stream_t *s) {
    static int said[3];
    int fd = s->console_fd;
    if (fd >= 1 && fd <= 2 && !said[fd]++)
        DDP_WARN("%s is a closed pipe: closing the workers' %s too (they get EPIPE or SIGPIPE, "
                 "as without ddprun)",
                 fd == 1 ? "stdout" : "stderr", fd == 1 ? "stdout" : "stderr");
    s->console_fd = -1;
    s->detached = 1;
    if (s->closing)
        return; /* the worker has exited; the stream is closing anyway */
    s->closing = 1;
    uv_read_stop((uv_stream_t *)&s->pipe);
    uv_close((uv_handle_t *)&s->pipe, on_stream_closed);
}

/* Writes a console copy; a closed pipe there detaches the stream. */
static void console_write(agent_stream_t *s, const uint8_t *p, size_t n) {
    if (agent__console_write(s->a, s->console_fd, p, n, 1) == -EPIPE)
        console_gone(s);
}

/* Nonzero when the line contains one of the filter strings (torchrun: `needle in line`). */
static int line_matches(char *const *filters, const uint8_t *p, size_t n) {
    for (char *const *f = filters; *f != NULL; f++)
        if (memmem(p, n, *f, strlen(*f)) != NULL)
            return 1;
    return 0;
}

static int is_line_end(uint8_t c) {
    return c == '\n' || c == '\r';
}

/* Emits one line with its terminator, or the start of a line too long to hold (no terminator), to
 * the file as it is and to the console in pieces of at most AGENT_MAX_LINE bytes, each ending in
 * a line end there (tagged under --tee), so that no other rank's line can land inside one. Under
 * --timestamp_output the file gets the line's stamp once, at its start, and every console piece
 * gets it after the tag: each piece is a line of its own there, and the same time on all of them
 * says they are one line of the worker's. */
static void emit(agent_stream_t *s, const uint8_t *p, size_t n) {
    /* The rest of a line cut for its length: its start (and stamp) is already out. */
    int cont = s->cut;
    s->cut = 0;
    if (s->file_fd >= 0) {
        if (s->stamped && !cont)
            log_write(s, 0, (const uint8_t *)s->stamp, AGENT_STAMP_LEN);
        log_write(s, 0, p, n);
    }
    if (s->console_fd < 0 || n == 0)
        return;
    /* The line end of a line whose last piece is already out (ended there): an empty line of
     * its own on the console would be a line the worker never wrote. */
    if (cont && n <= 2 && is_line_end(p[0]) && is_line_end(p[n - 1]))
        return;
    if (!s->tag && !s->stamped && n <= AGENT_MAX_LINE && is_line_end(p[n - 1])) {
        console_write(s, p, n); /* the common case: one whole line, as it is */
        return;
    }
    int dup = s->dup_fd >= 0 && line_matches(s->filters, p, n);
    /* One buffer, one write: tag, stamp and piece must reach the terminal together. */
    static uint8_t out[AGENT_PREFIX_MAX + AGENT_STAMP_LEN + AGENT_MAX_LINE + 3];
    size_t head = s->prefix_len;
    memcpy(out, s->prefix, head);
    if (s->stamped) {
        memcpy(out + head, s->stamp, AGENT_STAMP_LEN);
        head += AGENT_STAMP_LEN;
    }
    do {
        size_t piece = n < AGENT_MAX_LINE ? n : AGENT_MAX_LINE;
        /* A line end left on its own would come out as an empty line: it ends this piece. */
        size_t rest = n - piece;
        if (rest > 0 && rest <= 2 && is_line_end(p[piece]) && is_line_end(p[n - 1]))
            piece = n;
        memcpy(out + head, p, piece);
        size_t len = head + piece;
        if (!is_line_end(out[len - 1]))
            out[len++] = '\n';
        console_write(s, out, len);
        if (s->detached)
            return;
        if (dup)
            log_write(s, 1, out, len);
        p += piece;
        n -= piece;
    } while (n > 0);
}

/* --timestamp_output: a line that starts in this read gets the read's time, the clock read once
 * per read (*read_stamped); a line already started (waiting in s->line, or cut) keeps its own. */
static void stamp_line(agent_stream_t *s, int *read_stamped) {
    if (!s->stamped || *read_stamped || s->line.len > 0 || s->cut)
        return;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    agent_stamp_render(&t, s->stamp);
    *read_stamped = 1;
}

/* Splits incoming bytes into lines; a partial line waits in s->line. */
static void feed(agent_stream_t *s, const uint8_t *p, size_t n) {
    size_t start = 0;
    int read_stamped = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n' && p[i] != '\r')
            continue;
        /* CRLF is one line end; a lone CR (a progress bar) ends a line too. */
        if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n')
            i++;
        if (p[i] == '\n' && i == start && s->line.len == 0 && s->after_cr) {
            /* The LF of a CRLF split across two reads: it belongs to the line already out. */
            if (s->file_fd >= 0)
                log_write(s, 0, p + i, 1);
            if (s->console_fd >= 0)
                console_write(s, p + i, 1);
            s->after_cr = 0;
            start = i + 1;
            continue;
        }
        s->after_cr = p[i] == '\r';
        stamp_line(s, &read_stamped);
        if (s->beat_ms != NULL)
            *s->beat_ms = ddp_now_ms(); /* a whole line: a beat (--heartbeat_on_output) */
        if (s->line.len > 0) {
            if (ddp_buf_append(&s->line, p + start, i + 1 - start) == 0)
                emit(s, s->line.data, s->line.len);
            ddp_buf_reset(&s->line);
        } else {
            emit(s, p + start, i + 1 - start);
        }
        if (s->detached)
            return; /* the rest has nowhere to go */
        start = i + 1;
    }
    if (start == n)
        return;
    stamp_line(s, &read_stamped);
    if (ddp_buf_append(&s->line, p + start, n - start) < 0)
        ddp_buf_reset(&s->line);
    /* Cap what one stream can make the agent hold: an endless line goes out in full pieces (the
     * console sees each piece end; the file gets the bytes as they are), the rest waits. */
    if (s->line.len >= AGENT_MAX_LINE) {
        size_t whole = s->line.len - s->line.len % AGENT_MAX_LINE;
        emit(s, s->line.data, whole);
        ddp_buf_consume(&s->line, whole);
        s->cut = 1;
    }
}

/* The partial last line of a stream that ended without a newline gets one. */
static void flush_partial(agent_stream_t *s) {
    if (s->line.len == 0)
        return;
    if (ddp_buf_append(&s->line, "\n", 1) == 0)
        emit(s, s->line.data, s->line.len);
    ddp_buf_reset(&s->line);
}

static uint8_t read_buf[65536];

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    (void)h;
    (void)hint;
    /* The loop is single-threaded and calls read right after alloc: one static buffer serves. */
    buf->base = (char *)read_buf;
    buf->len = sizeof read_buf;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    agent_stream_t *s = st->data;
    if (s->detached)
        return;
    if (nread > 0) {
        feed(s, (const uint8_t *)buf->base, (size_t)nread);
        /* A console backed up: the worker waits on its own pipe (console.c). */
        if (!s->detached && s->console_fd > 0 && agent__console_busy(s->a, s->console_fd)) {
            uv_read_stop(st);
            s->held = 1;
        }
        return;
    }
    if (nread < 0) {
        /* EOF or error: stop reading; the stream is closed when its worker is reaped. */
        uv_read_stop(st);
        flush_partial(s);
    }
}

/* A tee'd stream shown on the console: its prefix, and its filtered file when filters are set
 * (torchrun duplicates only the lines it tails to the console). */
static void stream_tag_init(agent_t *a, agent_stream_t *s) {
    const agent_job_t *job = a->cfg.job;
    s->dup_fd = -1;
    if (!s->tag)
        return;
    s->prefix_len = agent_prefix_render(job->prefix_template, job->role, s->rank - a->as.rank_base,
                                        s->rank, a->cfg.hostname, s->prefix, sizeof s->prefix);
    char *const *filters = s->console_fd == 1   ? job->dup_stdout_filters
                           : s->console_fd == 2 ? job->dup_stderr_filters
                                                : NULL;
    if (filters == NULL || !a->cfg.log_layout)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/attempt_%d/filtered_%s.log", a->cfg.run_dir, a->as.attempt,
             s->console_fd == 1 ? "stdout" : "stderr");
    /* O_APPEND: every rank's stream appends whole lines to the one file of the attempt. */
    ddp_err_t err = {0};
    s->dup_fd = ddp_file_open(path, strlen(a->cfg.run_dir), DDP_FILE_APPEND, 0644, &err);
    if (s->dup_fd < 0)
        DDP_WARN("unable to open %s for rank %d", err.text, s->rank);
    else
        s->filters = filters;
}

agent_stream_t *agent__stream_open(agent_t *a, int fd, int rank, int std, int console_fd, int tag,
                                   int file_fd) {
    agent_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        goto fail;
    s->a = a;
    s->rank = rank;
    s->std = std;
    s->attempt = a->as.attempt;
    s->console_fd = console_fd;
    s->tag = tag;
    s->file_fd = file_fd;
    s->stamped = a->cfg.job->timestamp_output;
    stream_tag_init(a, s);
    if (uv_pipe_init(a->cfg.loop, &s->pipe, 0) < 0) {
        if (s->dup_fd >= 0)
            close(s->dup_fd);
        free(s);
        goto fail;
    }
    s->pipe.data = s;
    int rc = uv_pipe_open(&s->pipe, fd);
    if (rc < 0)
        close(fd); /* the handle did not adopt it */
    if (rc < 0 || (rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read)) < 0) {
        DDP_WARN("unable to read the output of rank %d: %s", rank, uv_strerror(rc));
        /* s is freed in its close callback: returning it would leave the worker a pointer that
         * agent__stream_finish dereferences after the free. */
        agent__stream_finish(s);
        return NULL;
    }
    return s;
fail:
    DDP_WARN("unable to read the output of rank %d: out of memory", rank);
    close(fd);
    if (file_fd >= 0)
        close(file_fd);
    return NULL;
}

void agent__streams_resume(agent_t *a, int std) {
    for (int i = 0; a->grp.workers != NULL && i < a->cfg.nproc; i++) {
        agent_stream_t *streams[2] = {a->grp.workers[i].out, a->grp.workers[i].err};
        for (int j = 0; j < 2; j++) {
            agent_stream_t *s = streams[j];
            /* stdout and stderr may share the console that drained: both resume. */
            if (s == NULL || !s->held || s->closing ||
                (s->console_fd != std && !agent__console_shared(a, s->console_fd, std)))
                continue;
            s->held = 0;
            if (uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read) < 0)
                DDP_WARN("unable to read the output of rank %d again", s->rank);
        }
    }
}

static void on_stream_closed(uv_handle_t *h) {
    agent_stream_t *s = h->data;
    if (s->file_fd >= 0)
        close(s->file_fd);
    if (s->dup_fd >= 0)
        close(s->dup_fd);
    s->file_fd = s->dup_fd = -1;
    ddp_buf_free(&s->line);
    /* A stream closed early (console_gone) stays allocated until its worker is reaped. */
    if (s->finished)
        free(s);
    else
        s->closed = 1;
}

void agent__stream_finish(agent_stream_t *s) {
    if (s == NULL || s->finished)
        return;
    s->finished = 1;
    if (s->closing) {
        /* Closed early: free it now, or let the pending close callback do it. */
        if (s->closed)
            free(s);
        return;
    }
    s->closing = 1;
    uv_read_stop((uv_stream_t *)&s->pipe);
    /* The worker has exited: what it wrote is already in the pipe. Drain it without blocking
     * (a grandchild may still hold the write end, so EOF is not awaited), and no more than the
     * pipe holds now: a grandchild that keeps writing would otherwise hold the agent in this
     * loop, away from signals and supervision, for as long as it runs. */
    uv_os_fd_t fd;
    int avail = 0;
    if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0 && ioctl(fd, FIONREAD, &avail) == 0) {
        size_t left = avail > 0 ? (size_t)avail : 0;
        while (left > 0) {
            ssize_t n = read(fd, read_buf, left < sizeof read_buf ? left : sizeof read_buf);
            if (n > 0) {
                feed(s, read_buf, (size_t)n);
                left -= (size_t)n;
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                break;
            }
        }
    }
    flush_partial(s);
    uv_close((uv_handle_t *)&s->pipe, on_stream_closed);
}
