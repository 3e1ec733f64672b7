/* SPDX-License-Identifier: Apache-2.0
 * --ssh_session: the agent a launching ddprun (ssh.c) starts on each host. It reads the job token
 * from its ssh session's stdin and, on a host other than the first without --rdzv_endpoint, the
 * store's address on the next line; then the session moves off fd 0 and the agent watches it
 * (agent/agent.c, on_session): its end stops the job. */
#include "launch_int.h"
#include "launch_ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "ddp_contract.h"
#include "rdzv_client.h"

/* How long the agent waits for the token on stdin; then, on a host other than the first, for the
 * store's address, which comes once the first host's agent is up (the launcher gives that one
 * LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S, then stops the job). */
#define SSH_TOKEN_WAIT_MS 30000
#define SSH_ENDPOINT_WAIT_MS ((LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S + 10) * 1000)

/* One line being read from fd 0. */
typedef struct line {
    char *buf;
    size_t cap, n;
    int (*ok)(char);
    enum { LINE_READING = 0, LINE_DONE, LINE_TIMEOUT, LINE_ENDED, LINE_BAD } end;
    uv_poll_t poll;
    uv_timer_t timer;
} line_t;

/* Takes the bytes stdin has, one at a time (nothing after the line may be consumed: the rest is
 * the session), until the line ends, stdin has nothing more for now, or it is over. */
static void line_take(line_t *l) {
    while (l->end == LINE_READING) {
        char c;
        ssize_t r = read(0, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0)
            l->end = LINE_ENDED;
        else if (c == '\n')
            l->end = LINE_DONE;
        else if (l->n + 1 >= l->cap || !l->ok(c))
            l->end = LINE_BAD;
        else
            l->buf[l->n++] = c;
    }
}

static void on_stdin(uv_poll_t *p, int status, int events) {
    (void)events;
    line_t *l = p->data;
    if (status < 0)
        l->end = LINE_ENDED;
    line_take(l);
    if (l->end != LINE_READING)
        uv_stop(p->loop);
}

static void on_line_timeout(uv_timer_t *t) {
    line_t *l = t->data;
    l->end = LINE_TIMEOUT;
    uv_stop(t->loop);
}

static void line_close_one(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Waits on a loop of its own, within wait_ms, for l's line. stdin is made non-blocking for the
 * while (its flags come back after). A stdin that cannot be watched (a regular file) never
 * blocks: read at once. */
static void line_wait(line_t *l, int wait_ms) {
    uv_loop_t loop;
    int flags = fcntl(0, F_GETFL);
    if (uv_loop_init(&loop) < 0) {
        l->end = LINE_ENDED;
        return;
    }
    l->poll.data = l->timer.data = l;
    int rc = uv_poll_init(&loop, &l->poll, 0);
    if (rc == UV_EPERM) {
        line_take(l);
    } else if (rc < 0 || uv_timer_init(&loop, &l->timer) < 0 ||
               uv_timer_start(&l->timer, on_line_timeout, (uint64_t)wait_ms, 0) < 0 ||
               uv_poll_start(&l->poll, UV_READABLE | UV_DISCONNECT, on_stdin) < 0) {
        l->end = LINE_ENDED;
    } else {
        while (l->end == LINE_READING && uv_run(&loop, UV_RUN_ONCE))
            ;
    }
    uv_walk(&loop, line_close_one, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&loop);
    if (flags >= 0)
        (void)fcntl(0, F_SETFL, flags);
}

/* Reads one line from fd 0 into buf (without its '\n') within wait_ms. what names the line in
 * errors. Returns its length, or DDP_EUSAGE: no line in time, stdin ended, a byte ok() refuses,
 * or a line that does not fit. */
static int line_read(char *buf, size_t cap, int wait_ms, const char *what, int (*ok)(char),
                     ddp_err_t *err) {
    line_t l = {.buf = buf, .cap = cap, .ok = ok};
    line_wait(&l, wait_ms);
    switch (l.end) {
    case LINE_DONE: break;
    case LINE_READING:
    case LINE_TIMEOUT:
        return ddp_err_set(err, DDP_EUSAGE,
                           "--ssh_session: no %s on stdin within %d s (this flag is for "
                           "agents a launching ddprun starts over ssh)",
                           what, wait_ms / 1000);
    case LINE_ENDED:
        return ddp_err_set(err, DDP_EUSAGE, "--ssh_session: stdin ended before the %s", what);
    case LINE_BAD:
        return ddp_err_set(err, DDP_EUSAGE, "--ssh_session: stdin does not bring the %s", what);
    }
    buf[l.n] = '\0';
    return (int)l.n;
}

static int hex_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* What an endpoint ADDR:PORT or [V6]:PORT is made of. */
static int endpoint_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' ||
           c == ':' || c == '[' || c == ']';
}

/* The job token: stdin's first line, hex, within SSH_TOKEN_WAIT_MS. Returns 0 with hex filled,
 * or DDP_EUSAGE. */
static int token_read(char *hex, size_t cap, ddp_err_t *err) {
    int n = line_read(hex, cap, SSH_TOKEN_WAIT_MS, "job token", hex_char, err);
    if (n < 0)
        return n;
    if (n < 2 || n % 2 != 0)
        return ddp_err_set(err, DDP_EUSAGE, "--ssh_session: the job token on stdin is malformed");
    return 0;
}

/* A host other than the first, without --rdzv_endpoint: the store's ADDR:PORT, the line after
 * the token, written by the launcher once the first host's agent has said where it listens.
 * Sets spec's endpoint as --rdzv_endpoint would. Returns 0, DDP_EUSAGE or -ENOMEM. */
static int endpoint_read(launch_spec_t *spec, ddp_err_t *err) {
    char line[96];
    int rc =
        line_read(line, sizeof line, SSH_ENDPOINT_WAIT_MS, "store's address", endpoint_char, err);
    char *host = NULL;
    int port = -1;
    if (rc >= 0)
        rc = launch_endpoint_split("--ssh_session: the store's address on stdin", line, &host,
                                   &port, err);
    if (rc < 0)
        return rc;
    if (port < 0) {
        free(host);
        return ddp_err_set(err, DDP_EUSAGE, "--ssh_session: the store's address has no port");
    }
    free(spec->rdzv_host);
    spec->rdzv_host = host;
    spec->rdzv_port = port;
    LAUNCH_GIVEN_SET(spec, LAUNCH_OPT_RDZV_ENDPOINT);
    return 0;
}

/* The server address of $SSH_CONNECTION ("client port server port"): the address by which the
 * launching machine reached this host. */
static int ssh_server_addr(char *out, size_t cap) {
    const char *c = getenv("SSH_CONNECTION");
    char a[4][80];
    if (c == NULL || sscanf(c, "%79s %79s %79s %79s", a[0], a[1], a[2], a[3]) != 4)
        return -1;
    snprintf(out, cap, "%s", a[2]);
    return 0;
}

int launch_ssh_session_begin(launch_spec_t *spec, launch_ssh_session_t *s, ddp_err_t *err) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    char hex[2 * 1024 + 2];
    int rc = token_read(hex, sizeof hex, err);
    if (rc < 0)
        return rc;
    /* agent_job_prepare reads the token through rdzv_token_load, where DDPRUN_TOKEN comes
     * first; launch_ssh_session_end takes it out of the environment before any worker starts
     * (the agent gives them the token as DDPRUN_STORE_TOKEN). */
    if (setenv(DDP_ENV_TOKEN, hex, 1) < 0)
        return -ENOMEM;
    memset(hex, 0, sizeof hex);
    if (spec->node_rank > 0 && spec->rdzv_host == NULL && spec->max_nodes > 1 &&
        (rc = endpoint_read(spec, err)) < 0)
        return rc;
    /* The session moves off fd 0: workers get /dev/null as stdin, as they would under ssh -n. */
    s->fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->fd < 0 || nul < 0 || dup2(nul, 0) < 0) {
        rc = ddp_err_set(err, -errno, "--ssh_session: unable to move the session off stdin: %s",
                         strerror(errno));
        if (nul >= 0)
            close(nul);
        return rc;
    }
    close(nul);
    if (spec->node_rank == 0 && spec->rdzv_host == NULL && spec->max_nodes > 1) {
        char addr[80];
        if (ssh_server_addr(addr, sizeof addr) < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "--ssh_session: SSH_CONNECTION is not set, so the first host does "
                               "not know its address; give --rdzv_endpoint");
        if (launch__str_set(&spec->rdzv_host, addr) < 0)
            return -ENOMEM;
        spec->rdzv_opts.is_host = 1;
        s->port_any = 1;
    }
    if (spec->log_line_prefix_template == NULL) {
        char tmpl[LAUNCH_HOST_MAX + 16];
        snprintf(tmpl, sizeof tmpl, "[%s:${rank}]:", spec->ssh_session);
        if (launch__str_set(&spec->log_line_prefix_template, tmpl) < 0)
            return -ENOMEM;
    }
    /* The launching ddprun names the backend: etcd, or c10d for anything else. */
    if (spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "etcd") == 0)
        return 0;
    return launch__str_set(&spec->rdzv_backend, "c10d");
}

void launch_ssh_session_apply(const launch_ssh_session_t *s, agent_job_t *job) {
    job->ssh_session = 1;
    job->session_fd = s->fd;
    job->console_tag_all = 1;
    if (s->port_any)
        job->rdzv_port = 0;
    unsetenv(DDP_ENV_TOKEN);
}
