/* SPDX-License-Identifier: Apache-2.0
 * --hostfile and --hosts: one ddprun starts the job on every host over the system's ssh client,
 * relays their output and stops them all (the other end, the agent it starts on each host, is
 * ssh_session.c).
 *
 * The launcher runs one ordinary agent per host: `cd CWD && exec DDPRUN --ssh_session=NAME
 * --nnodes=N --node_rank=I --rdzv_backend=c10d ... -- PROGRAM ARGS` in the host's login shell.
 * Every host is started at once, up to --ssh_fanout ssh connections being set up at a time. The
 * first host's agent hosts the store on the address the ssh connection reached (SSH_CONNECTION),
 * on a port the kernel picks, and prints AGENT_SSH_READY with it; a hostfile name may be an ssh
 * alias only this machine knows, so the address comes from the host itself. The other agents,
 * meanwhile connected and started, wait on their stdin for that address, which the launcher
 * writes there as soon as the first host has said it: one round of ssh connections, not two in
 * series. --rdzv_endpoint overrides: every agent is given it on its command line, none waits,
 * and the agent whose address it is hosts the store, as without ssh.
 *
 * The job token is made here and written to each ssh's stdin as its first line, never on a command
 * line; the store's address follows it on the same stdin. The stdin stays open and carries the
 * launcher's lines (agent.h, AGENT_SSH_*; agent/session.c reads them): a heartbeat every
 * AGENT_SSH_HEARTBEAT_MS, and "signal N" for each signal of --signals_to_handle the launcher gets,
 * which the agents act on as on their own (SIGTERM stops the job with SIGTERM, a second Ctrl-C
 * kills the workers, SIGUSR1 is forwarded to them). A failed host stops the others with
 * "signal 15". The stdin's end, or AGENT_SSH_SILENCE_MS without a heartbeat, is how an agent learns
 * that the launcher or the connection is gone: a launcher killed by SIGKILL stops the job too (the
 * kernel closes the pipes), and so does one whose network went away (the heartbeats stop; its ssh
 * clients give up by ServerAliveInterval). Each ssh client runs in a session of its own (as pdsh
 * starts them), so the terminal's Ctrl-C reaches only the launcher, which then stops the hosts and
 * still shows their output and exit codes; and where the kernel groups CPU time by session
 * (autogroup), a few hundred key exchanges are not squeezed into the launcher's one share of the
 * CPU.
 *
 * With --nnodes=MIN:MAX a host that cannot be started is named and the job goes on without it
 * while at least MIN hosts can still come up (the agents meet in an elastic round of MIN:N);
 * below MIN, or without the first host when it is to host the store, everything stops.
 *
 * Output comes back through ssh's stdout and stderr, read here line by line and written with one
 * write(2) a line, so that lines of different hosts never mix; each agent tags its workers'
 * lines "[NAME:RANK]:" (or --log_line_prefix_template). */
#include "launch_hosts.h"
#include "launch_int.h"
#include "launch_ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_signal.h"
#include "ddp_time.h"
#include "rdzv_client.h"

/* After the hosts are told to stop: --shutdown_timeout plus this, then the ssh clients are
 * killed (the agents then see their sessions end and stop by themselves). After a second signal
 * (the agents kill their workers at once): this long. */
#define SSH_STOP_EXTRA_S 15
#define SSH_KILL_WAIT_MS 5000
/* Bytes of one output line kept before it is written out in pieces, and of a host's stderr held
 * until its agent is ready (shown if it never is). */
#define SSH_LINE_MAX 65536
#define SSH_HELD_MAX 16384
/* The most words --ssh may have. */
#define SSH_MAX_WORDS 64
/* A host's agent that ended with a failure: the others know the job failed (the rendezvous
 * refuses them) and end by themselves, each with its own summary; they are given this long
 * before their sessions are closed. Longer than an agent's wait for a store that went away
 * (agent/rdzv.c, AGENT_EMBEDDED_CHECK_MS) and the store's host's lingering. */
#define SSH_FAIL_GRACE_MS 5000

typedef enum {
    HOST_PENDING = 0, /* not started */
    HOST_STARTING,    /* ssh started, the agent has not said it is ready */
    HOST_READY,       /* the agent runs */
    HOST_DONE,        /* ssh has exited and its output is read */
} host_state_t;

typedef struct stream {
    int fd;
    char *buf;
    size_t len;
} stream_t;

typedef struct host {
    const launch_host_t *h;
    int rank;
    host_state_t state;
    pid_t pid; /* 0 when reaped (or not started) */
    int status;
    int in_fd; /* ssh's stdin (non-blocking): the token, then the launcher's lines until ssh ends */
    stream_t out, err;
    ddp_buf_t held;     /* stderr before the agent was ready */
    char last_err[256]; /* its last line */
    uint64_t deadline;  /* HOST_STARTING: ms by which the agent must be ready */
    int down;           /* could not be started (the job went on without it, or stopped) */
    int endpoint_sent;  /* the store's address went down its stdin (or it needs none): the agent
                         * reads the launcher's lines from there on */
    int root_cause; /* its agent's summary holds the job's root cause (AGENT_ROOT_CAUSE_TITLE) */
} host_t;

typedef struct run {
    const launch_spec_t *spec;
    launch_hosts_t hosts;
    host_t *v;
    char *words[SSH_MAX_WORDS + 1]; /* --ssh split on spaces (pointers into ssh_copy) */
    int n_words;
    char *ssh_copy;
    char ddprun[PATH_MAX];
    char cwd[PATH_MAX];
    char token_hex[2 * 32 + 2];
    char run_id[40];
    char endpoint[96]; /* where the agents meet; "" until the first host says */
    ddp_buf_t env;     /* the remote command's `env 'VAR=VAL' ...` words, quoted; may be empty */
    int endpoint_given;
    int sigfd;
    int stopping;
    int stop_signal;            /* the first termination signal the launcher got */
    uint64_t stop_deadline;     /* stopping: when the ssh clients still running are killed */
    uint64_t beat_at;           /* when the next heartbeat goes to the hosts */
    int nnodes_min, nnodes_max; /* what the agents are given: n:n, or MIN:n (--nnodes=MIN:MAX) */
    size_t n_down;              /* hosts that could not be started */
    int told_down;              /* the hosts the job goes on without have been named */
    int start_failed;           /* a host could not be started */
    int failed_rank;            /* the first host whose agent ended with a failure, or -1 */
    int failed_code;
    uint64_t fail_deadline; /* then: when the hosts still running are stopped (0: none) */
} run_t;

/* ---- the command run on each host -------------------------------------------------------- */

/* Appends s to b quoted for a POSIX shell ('...', each ' as '\''). Returns 0 or -ENOMEM. */
static int shell_quote(ddp_buf_t *b, const char *s) {
    int rc = ddp_buf_append(b, "'", 1);
    for (const char *p = s; rc == 0 && *p; p++)
        rc = *p == '\'' ? ddp_buf_append(b, "'\\''", 4) : ddp_buf_append(b, p, 1);
    return rc == 0 ? ddp_buf_append(b, "'", 1) : rc;
}

/* Appends " 'fmt...'" to b. Returns 0 or -ENOMEM. */
__attribute__((format(printf, 2, 3))) static int arg_add(ddp_buf_t *b, const char *fmt, ...) {
    char tmp[PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    int rc = ddp_buf_append(b, " ", 1);
    return rc == 0 ? shell_quote(b, tmp) : rc;
}

/* The flags the launcher sets itself on every host (or that mean nothing there). */
static int replaced(launch_opt_t id, int has_slots) {
    switch (id) {
    case LAUNCH_OPT_NNODES:
    case LAUNCH_OPT_NODE_RANK:
    case LAUNCH_OPT_RDZV_BACKEND:
    case LAUNCH_OPT_STANDALONE:
    case LAUNCH_OPT_HOSTFILE:
    case LAUNCH_OPT_HOSTS:
    case LAUNCH_OPT_INCLUDE:
    case LAUNCH_OPT_EXCLUDE:
    case LAUNCH_OPT_SSH:
    case LAUNCH_OPT_REMOTE_DDPRUN:
    case LAUNCH_OPT_SSH_FANOUT:
    case LAUNCH_OPT_SSH_SESSION:
    case LAUNCH_OPT_ENV:
    case LAUNCH_OPT_ENV_POLICY: return 1;
    case LAUNCH_OPT_NPROC_PER_NODE: return has_slots;
    default: return 0;
    }
}

/* The remote command for host h, NUL-terminated in b. Returns 0 or -ENOMEM. */
static int remote_command(const run_t *r, const host_t *h, char *const *argv, ddp_buf_t *b) {
    const launch_spec_t *spec = r->spec;
    int rc = ddp_buf_append(b, "cd ", 3);
    rc = rc ? rc : shell_quote(b, r->cwd);
    rc = rc ? rc : ddp_buf_append(b, " && exec ", 9);
    if (rc == 0 && r->env.len > 0)
        rc = ddp_buf_append(b, r->env.data, r->env.len);
    rc = rc ? rc : shell_quote(b, r->ddprun);
    rc = rc ? rc : arg_add(b, "--ssh_session=%s", h->h->name);
    if (rc == 0 && r->nnodes_min < r->nnodes_max)
        rc = arg_add(b, "--nnodes=%d:%d", r->nnodes_min, r->nnodes_max);
    else if (rc == 0)
        rc = arg_add(b, "--nnodes=%d", r->nnodes_max);
    /* With MIN:MAX the rendezvous gives each agent its wanted rank when the group is large
     * enough for it and fills the gaps of hosts that are missing in file order otherwise. */
    rc = rc ? rc : arg_add(b, "--node_rank=%d", h->rank);
    rc = rc ? rc : arg_add(b, "--rdzv_backend=c10d");
    if (rc == 0 && h->h->slots > 0)
        rc = arg_add(b, "--nproc_per_node=%d", h->h->slots);
    if (rc == 0 && !LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ID))
        rc = arg_add(b, "--rdzv_id=%s", r->run_id);
    /* Without --rdzv_endpoint the first host learns where it is from its ssh session, and the
     * others read its address on stdin after the token (endpoint_send). */
    for (int i = 0; rc == 0 && i < spec->n_args; i++) {
        if (replaced(spec->arg_id[i], h->h->slots > 0))
            continue;
        for (int k = 0; rc == 0 && k < spec->arg_count[i]; k++)
            rc = arg_add(b, "%s", argv[spec->arg_first[i] + k]);
    }
    rc = rc ? rc : ddp_buf_append(b, " --", 3);
    for (int i = 0; rc == 0 && i < spec->prog_argc; i++)
        rc = arg_add(b, "%s", spec->prog_argv[i]);
    return rc ? rc : ddp_buf_append(b, "", 1);
}

/* ---- preparation: every usage error before any host is contacted ------------------------- */

extern char **environ;

/* 1 when variable name[0..n) is in the default set the hosts get: what training needs to behave
 * as it does here. */
static int env_default(const char *name, size_t n) {
    static const char *const prefixes[] = {"NCCL_", "CUDA_", "PYTHON", "PET_", "TORCH"};
    static const char *const exact[] = {"OMP_NUM_THREADS", "PATH", "LD_LIBRARY_PATH",
                                        "VIRTUAL_ENV"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (n >= strlen(prefixes[i]) && strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (n == strlen(exact[i]) && strncmp(name, exact[i], n) == 0)
            return 1;
    return 0;
}

/* The remote command's environment words: "env 'VAR=VAL' ... " with the default set (unless
 * --env_policy none), then each -x (later ones win, as env applies them in order). Returns 0,
 * DDP_EUSAGE for a -x VAR not set here, or -ENOMEM. */
static int env_build(run_t *r, ddp_err_t *err) {
    const launch_spec_t *spec = r->spec;
    ddp_buf_t *b = &r->env;
    int rc = 0, any = 0;
    for (char **e = environ; rc == 0 && !spec->env_policy_none && e != NULL && *e != NULL; e++) {
        size_t n = strcspn(*e, "=");
        if ((*e)[n] != '=' || !env_default(*e, n))
            continue;
        rc = any++ ? ddp_buf_append(b, " ", 1) : ddp_buf_append(b, "env ", 4);
        rc = rc ? rc : shell_quote(b, *e);
    }
    for (int i = 0; rc == 0 && i < spec->n_env; i++) {
        const char *x = spec->env[i];
        char *kv = NULL;
        if (strchr(x, '=') == NULL) {
            const char *v = getenv(x);
            if (v == NULL)
                return ddp_err_set(err, DDP_EUSAGE,
                                   "-x %.64s: not set here (give -x %.64s=VALUE to set it)", x, x);
            if (asprintf(&kv, "%s=%s", x, v) < 0)
                return -ENOMEM;
        }
        rc = any++ ? ddp_buf_append(b, " ", 1) : ddp_buf_append(b, "env ", 4);
        rc = rc ? rc : shell_quote(b, kv != NULL ? kv : x);
        free(kv);
    }
    return rc == 0 && any ? ddp_buf_append(b, " ", 1) : rc;
}

/* Splits the ssh command on spaces into r->words and checks that its program can be run.
 * Returns 0, DDP_EUSAGE naming --ssh or DDPRUN_SSH, or -ENOMEM. */
static int ssh_words(run_t *r, ddp_err_t *err) {
    const char *cmd = r->spec->ssh != NULL ? r->spec->ssh : "ssh";
    const char *flag = LAUNCH_GIVEN(r->spec, LAUNCH_OPT_SSH) ? "--ssh" : "the ssh command";
    if ((r->ssh_copy = strdup(cmd)) == NULL)
        return -ENOMEM;
    char *save = NULL;
    for (char *w = strtok_r(r->ssh_copy, " \t", &save); w != NULL;
         w = strtok_r(NULL, " \t", &save)) {
        if (r->n_words >= SSH_MAX_WORDS)
            return ddp_err_set(err, DDP_EUSAGE, "%s: more than %d words", flag, SSH_MAX_WORDS);
        r->words[r->n_words++] = w;
    }
    if (r->n_words == 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    /* Found now, so that a typo is a usage error and not one failure per host. */
    const char *prog = r->words[0];
    if (strchr(prog, '/') != NULL)
        return access(prog, X_OK) == 0
                   ? 0
                   : ddp_err_set(err, DDP_EUSAGE, "%s: '%.64s' is not executable: %s", flag, prog,
                                 strerror(errno));
    const char *path = getenv("PATH");
    char dir[PATH_MAX];
    for (const char *p = path != NULL ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, n ? p : ".", prog);
        if (access(dir, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return ddp_err_set(err, DDP_EUSAGE, "%s: '%.64s' not found in PATH", flag, prog);
}

/* Hosts, their count against --nnodes and the backend, ssh, ddprun's path, the directory, the
 * token and the run id. Returns 0, DDP_EUSAGE naming the flag or file, or -ENOMEM. */
static int run_prepare(run_t *r, ddp_err_t *err) {
    const launch_spec_t *spec = r->spec;
    int rc = spec->hostfile != NULL ? launch_hostfile_load(spec->hostfile, &r->hosts, err)
                                    : launch_hosts_parse("--hosts", spec->hosts, &r->hosts, err);
    if (rc == 0)
        rc = launch_hosts_filter(&r->hosts, spec->include, spec->exclude, err);
    if (rc < 0)
        return rc;
    const char *src = spec->hostfile != NULL ? "--hostfile" : "--hosts";
    rc = launch_hosts_nnodes(r->hosts.n, src, LAUNCH_GIVEN(spec, LAUNCH_OPT_NNODES),
                             spec->min_nodes, spec->max_nodes, &r->nnodes_min, &r->nnodes_max, err);
    if (rc < 0)
        return rc;
    if (spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "c10d") != 0 &&
        LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_BACKEND))
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_backend: hosts started over ssh meet with c10d (the first "
                           "host, or --rdzv_endpoint, hosts the store)");
    if ((rc = ssh_words(r, err)) < 0 || (rc = env_build(r, err)) < 0)
        return rc;
    if (spec->remote_ddprun != NULL) {
        snprintf(r->ddprun, sizeof r->ddprun, "%s", spec->remote_ddprun);
    } else {
        ssize_t n = readlink("/proc/self/exe", r->ddprun, sizeof r->ddprun - 1);
        if (n <= 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "unable to find ddprun's own path (/proc/self/exe: %s); give "
                               "--remote_ddprun",
                               strerror(errno));
        r->ddprun[n] = '\0';
    }
    if (getcwd(r->cwd, sizeof r->cwd) == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "unable to read the working directory: %s",
                           strerror(errno));
    ddp_buf_t tok = DDP_BUF_INIT, hex = DDP_BUF_INIT;
    rc = rdzv_token_generate(&tok, 32, err);
    if (rc == 0)
        rc = rdzv_token_to_hex(tok.data, tok.len, &hex);
    if (rc == 0)
        snprintf(r->token_hex, sizeof r->token_hex, "%s\n", (char *)hex.data);
    ddp_buf_free(&tok);
    ddp_buf_free(&hex);
    if (rc < 0)
        return rc;
    unsigned char id[8] = {0};
    if (getrandom(id, sizeof id, GRND_NONBLOCK) < 0)
        memcpy(id, &(uint64_t){ddp_now_ns() ^ (uint64_t)getpid()}, sizeof id);
    snprintf(r->run_id, sizeof r->run_id, "ssh-%02x%02x%02x%02x%02x%02x%02x%02x", id[0], id[1],
             id[2], id[3], id[4], id[5], id[6], id[7]);
    r->endpoint_given = spec->rdzv_host != NULL && LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ENDPOINT);
    r->v = calloc(r->hosts.n, sizeof *r->v);
    if (r->v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < r->hosts.n; i++) {
        host_t *h = &r->v[i];
        h->h = &r->hosts.v[i];
        h->rank = (int)i;
        h->in_fd = h->out.fd = h->err.fd = -1;
        h->held = (ddp_buf_t)DDP_BUF_INIT;
    }
    r->failed_rank = -1;
    return 0;
}

/* ---- output ------------------------------------------------------------------------------ */

/* Writes all of buf to fd; a console that is gone (EPIPE) loses the rest silently. */
static void write_all(int fd, const char *buf, size_t len) {
    (void)ddp_write_all(fd, buf, len);
}

static void host_ready(run_t *r, host_t *h, const char *where);

/* One whole line (with its '\n') of host h's stdout (fd 1) or stderr (fd 2). */
static void line_handle(run_t *r, host_t *h, int std, const char *p, size_t n) {
    size_t ready_len = sizeof AGENT_SSH_READY - 1;
    if (h->state == HOST_STARTING && std == 1 && n > ready_len + 1 &&
        memcmp(p, AGENT_SSH_READY " ", ready_len + 1) == 0) {
        char where[96];
        size_t wl = n - ready_len - 2; /* without the word, the blank and the '\n' */
        snprintf(where, sizeof where, "%.*s", (int)(wl < sizeof where ? wl : sizeof where - 1),
                 p + ready_len + 1);
        host_ready(r, h, where);
        return;
    }
    if (h->state == HOST_STARTING && std == 2) {
        /* Held: ssh's own complaint or the remote ddprun's usage error becomes the one-line
         * error if the agent never comes up; shown as it came once it does. */
        if (h->held.len + n <= SSH_HELD_MAX)
            ddp_buf_append(&h->held, p, n);
        size_t k = n;
        while (k > 0 && (p[k - 1] == '\n' || p[k - 1] == '\r'))
            k--;
        if (k > 0)
            snprintf(h->last_err, sizeof h->last_err, "%.*s", (int)k, p);
        return;
    }
    /* The store decided which node's failure was the first (its agent alone prints the title
     * as a whole line): the last line names that host, whichever agent ended first. */
    size_t title_len = sizeof AGENT_ROOT_CAUSE_TITLE - 1;
    if (std == 2 && n == title_len + 1 && memcmp(p, AGENT_ROOT_CAUSE_TITLE "\n", n) == 0)
        h->root_cause = 1;
    write_all(std, p, n);
}

/* Reads what host h's stream s has and handles every whole line. Returns 0, or 1 at EOF (the
 * rest, if any, handled as a line). */
static int stream_read(run_t *r, host_t *h, int std) {
    stream_t *s = std == 1 ? &h->out : &h->err;
    ssize_t n = read(s->fd, s->buf + s->len, SSH_LINE_MAX - s->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n > 0)
        s->len += (size_t)n;
    size_t start = 0;
    for (size_t i = s->len - (size_t)(n > 0 ? n : 0); i < s->len; i++)
        if (s->buf[i] == '\n') {
            line_handle(r, h, std, s->buf + start, i + 1 - start);
            start = i + 1;
        }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    /* A line longer than the buffer, or the end without a final newline: out as a line. */
    if (s->len == SSH_LINE_MAX || (n <= 0 && s->len > 0)) {
        s->buf[s->len] = '\n';
        line_handle(r, h, std, s->buf, s->len + 1);
        s->len = 0;
    }
    if (n > 0)
        return 0;
    close(s->fd);
    s->fd = -1;
    return 1;
}

/* ---- hosts ------------------------------------------------------------------------------- */

/* Writes line (with its '\n'; under PIPE_BUF bytes, so written whole or not at all) down host
 * h's stdin once its agent reads the launcher's lines (agent.h, AGENT_SSH_*). A pipe that is
 * full (an agent or a connection that stalled for minutes) loses it: the deadlines still stop
 * that host. */
static void session_send(host_t *h, const char *line) {
    if (h->in_fd < 0 || !h->endpoint_sent)
        return;
    if (write(h->in_fd, line, strlen(line)) < 0 && errno != EPIPE)
        DDP_DEBUG("host %s: unable to write to its session: %s", h->h->name, strerror(errno));
}

/* The launcher's heartbeat down every host's session. */
static void heartbeat_all(run_t *r) {
    for (size_t i = 0; i < r->hosts.n; i++)
        session_send(&r->v[i], "\n");
    r->beat_at = ddp_now_ms() + AGENT_SSH_HEARTBEAT_MS;
}

/* "signal N" down every host's session: each agent acts as on signal sig of its own. */
static void signal_all(run_t *r, int sig) {
    char line[32];
    snprintf(line, sizeof line, "%s %d\n", AGENT_SSH_SIGNAL, sig);
    for (size_t i = 0; i < r->hosts.n; i++)
        session_send(&r->v[i], line);
}

/* SIGTSTP (Ctrl-Z): the agents are told not to take the silence that follows for the launcher's
 * end, then the launcher stops itself, as the signal's default action would have; once
 * continued, it beats at once. */
static void suspend(run_t *r) {
    for (size_t i = 0; i < r->hosts.n; i++)
        session_send(&r->v[i], AGENT_SSH_PAUSE "\n");
    raise(SIGSTOP);
    heartbeat_all(r);
}

/* Writes the store's address down host h's stdin, after the token, once it is known: the agent
 * of a host other than the first waits for it there (launch_ssh_session_begin). Nothing for the
 * first host, or with --rdzv_endpoint (on every command line). The host is then given its full
 * time to answer from now: it could not before. */
static void endpoint_send(run_t *r, host_t *h) {
    if (h->endpoint_sent || h->in_fd < 0 || r->endpoint[0] == '\0')
        return;
    h->endpoint_sent = 1;
    char line[sizeof r->endpoint + 1];
    int n = snprintf(line, sizeof line, "%s\n", r->endpoint);
    /* The token and this line, about 160 bytes, into a pipe the agent reads: never blocks. */
    write_all(h->in_fd, line, (size_t)n);
    session_send(h, "\n"); /* the first heartbeat: the agent watches for them from now */
    uint64_t answer_by = ddp_now_ms() + LAUNCH_SSH_READY_EXTRA_S * 1000ull;
    if (h->deadline < answer_by)
        h->deadline = answer_by;
}

/* Starts ssh for host h: stdin, stdout and stderr are pipes to us, the token goes first. Returns
 * 0 or -errno (h is then done, with the reason in last_err). */
static int host_start(run_t *r, host_t *h, char *const *argv) {
    ddp_buf_t cmd = DDP_BUF_INIT;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = remote_command(r, h, argv, &cmd);
    h->out.buf = malloc(SSH_LINE_MAX + 1);
    h->err.buf = malloc(SSH_LINE_MAX + 1);
    if (rc == 0 && (h->out.buf == NULL || h->err.buf == NULL))
        rc = -ENOMEM;
    if (rc == 0 &&
        (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0))
        rc = -errno;
    char *av[SSH_MAX_WORDS + 24];
    int n = 0;
    for (int i = 0; i < r->n_words; i++)
        av[n++] = r->words[i];
    char ct[48];
    snprintf(ct, sizeof ct, "ConnectTimeout=%d", LAUNCH_SSH_CONNECT_TIMEOUT_S);
    av[n++] = "-o";
    av[n++] = "BatchMode=yes";
    av[n++] = "-o";
    av[n++] = ct;
    /* Never a terminal, whatever the user's config (RequestTTY force) or --ssh (-t) says: a
     * remote pty would echo the token and the store's address back onto our stdout, and a pty
     * master sees no end of stdin, so the launcher's death would not end the session. -T comes
     * after --ssh's words: ssh takes its flags in order and -T overrides an earlier -t or
     * -o RequestTTY=..., and the config files, read after the command line, set nothing it has
     * set. */
    av[n++] = "-T";
    av[n++] = "-o";
    av[n++] = "RequestTTY=no";
    /* A host that stopped answering (the network between is gone) ends its ssh client within
     * about interval x count seconds, as a connection reset would. */
    char sai[48], sac[48];
    snprintf(sai, sizeof sai, "ServerAliveInterval=%d", LAUNCH_SSH_ALIVE_INTERVAL_S);
    snprintf(sac, sizeof sac, "ServerAliveCountMax=%d", LAUNCH_SSH_ALIVE_COUNT);
    av[n++] = "-o";
    av[n++] = sai;
    av[n++] = "-o";
    av[n++] = sac;
    av[n++] = h->h->name;
    av[n++] = (char *)cmd.data;
    av[n] = NULL;
    pid_t pid = rc == 0 ? fork() : -1;
    if (rc == 0 && pid < 0)
        rc = -errno;
    if (pid == 0) {
        /* The child: its own session (the terminal's Ctrl-C is the launcher's to handle, and
         * BatchMode leaves ssh nothing to ask on a terminal), default signal dispositions and
         * mask, the pipes on 0-2. */
        setsid();
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(errp[1], 2) < 0)
            _exit(127);
        execvp(av[0], av);
        dprintf(2, "unable to run %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    ddp_buf_free(&cmd);
    if (in[0] >= 0)
        close(in[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (errp[1] >= 0)
        close(errp[1]);
    if (rc < 0) {
        for (int *fd = (int[]){in[1], out[0], errp[0]}, i = 0; i < 3; i++)
            if (fd[i] >= 0)
                close(fd[i]);
        snprintf(h->last_err, sizeof h->last_err, "unable to start ssh: %s", strerror(-rc));
        h->state = HOST_DONE;
        return rc;
    }
    h->pid = pid;
    h->in_fd = in[1];
    h->out.fd = out[0];
    h->err.fd = errp[0];
    h->state = HOST_STARTING;
    h->deadline =
        ddp_now_ms() + (LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S) * 1000ull;
    /* 66 bytes into an empty pipe: never blocks. Later lines must not block the launcher on a
     * host that stalls. */
    write_all(h->in_fd, r->token_hex, strlen(r->token_hex));
    if (fcntl(h->in_fd, F_SETFL, O_NONBLOCK) < 0)
        DDP_DEBUG("host %s: unable to make its stdin non-blocking: %s", h->h->name,
                  strerror(errno));
    h->endpoint_sent = r->endpoint_given || h->rank == 0;
    session_send(h, "\n"); /* the first heartbeat, when it needs no address */
    endpoint_send(r, h);
    DDP_INFO("host %s (node_rank %d): started ssh (pid %d)", h->h->name, h->rank, (int)pid);
    return 0;
}

/* Tells every host to stop, once: "signal sig" down each session (the agents stop their workers
 * with sig); an agent still waiting for the store's address sees its stdin end instead, and
 * hosts not started never will be. */
static void stop_all(run_t *r, int sig) {
    if (r->stopping)
        return;
    r->stopping = 1;
    r->stop_deadline =
        ddp_now_ms() + (uint64_t)(r->spec->shutdown_timeout * 1000.0) + SSH_STOP_EXTRA_S * 1000ull;
    for (size_t i = 0; i < r->hosts.n; i++) {
        host_t *h = &r->v[i];
        if (h->state == HOST_PENDING)
            h->state = HOST_DONE;
        if (h->in_fd >= 0 && !h->endpoint_sent) {
            close(h->in_fd);
            h->in_fd = -1;
        }
    }
    signal_all(r, sig);
}

/* SIGKILLs every ssh client still running. */
static void kill_all(run_t *r) {
    for (size_t i = 0; i < r->hosts.n; i++)
        if (r->v[i].pid > 0)
            kill(r->v[i].pid, SIGKILL);
}

/* Host h could not be started (its line is out). Without --nnodes=MIN:MAX that stops the job;
 * with it the job goes on while the hosts that may still come up are at least MIN, and the
 * first host is not the one lost when it is to host the store. */
static void host_lost(run_t *r, host_t *h) {
    h->down = 1;
    r->n_down++;
    size_t can = r->hosts.n - r->n_down;
    if (r->nnodes_min == r->nnodes_max) {
        r->start_failed = 1;
    } else if (h->rank == 0 && !r->endpoint_given) {
        fprintf(stderr,
                "ddprun: the first host, %s, hosts the store: the job cannot start without it "
                "(--rdzv_endpoint names another)\n",
                h->h->name);
        r->start_failed = 1;
    } else if (can < (size_t)r->nnodes_min) {
        fprintf(stderr,
                "ddprun: only %zu of %zu hosts can come up and --nnodes=%d:%d needs %d: "
                "stopping the job\n",
                can, r->hosts.n, r->nnodes_min, r->spec->max_nodes, r->nnodes_min);
        r->start_failed = 1;
    }
    if (r->start_failed)
        stop_all(r, SIGTERM);
}

/* Once no host is left to start, names those the job goes on without (--nnodes=MIN:MAX). */
static void tell_down(run_t *r) {
    if (r->told_down || r->n_down == 0 || r->stopping)
        return;
    for (size_t i = 0; i < r->hosts.n; i++)
        if (r->v[i].state == HOST_PENDING || r->v[i].state == HOST_STARTING)
            return;
    r->told_down = 1;
    ddp_buf_t b = DDP_BUF_INIT;
    for (size_t i = 0; i < r->hosts.n; i++)
        if (r->v[i].down) {
            if (b.len > 0)
                ddp_buf_append(&b, ", ", 2);
            ddp_buf_append(&b, r->v[i].h->name, strlen(r->v[i].h->name));
        }
    ddp_buf_append(&b, "", 1);
    fprintf(stderr, "ddprun: going on with %zu of %zu hosts (--nnodes=%d:%d); not started: %s\n",
            r->hosts.n - r->n_down, r->hosts.n, r->nnodes_min, r->spec->max_nodes,
            b.data != NULL ? (const char *)b.data : "?");
    ddp_buf_free(&b);
}

/* Starts pending hosts, in the list's order, up to --ssh_fanout ssh connections being set up at
 * once; none once a host's agent has failed (the job is over). */
static void schedule(run_t *r, char *const *argv) {
    if (r->stopping || r->failed_rank >= 0)
        return;
    int starting = 0;
    for (size_t i = 0; i < r->hosts.n; i++)
        starting += r->v[i].state == HOST_STARTING;
    for (size_t i = 0; i < r->hosts.n && starting < r->spec->ssh_fanout; i++) {
        host_t *h = &r->v[i];
        if (h->state != HOST_PENDING)
            continue;
        if (host_start(r, h, argv) < 0) {
            fprintf(stderr, "ddprun: host %s: %s\n", h->h->name, h->last_err);
            host_lost(r, h);
            if (r->stopping)
                return;
            continue;
        }
        starting++;
    }
}

static void host_ready(run_t *r, host_t *h, const char *where) {
    h->state = HOST_READY;
    DDP_INFO("host %s (node_rank %d): agent ready, store at %s", h->h->name, h->rank, where);
    if (h->held.len > 0)
        write_all(2, (const char *)h->held.data, h->held.len);
    ddp_buf_free(&h->held);
    if (h->rank == 0 && !r->endpoint_given) {
        snprintf(r->endpoint, sizeof r->endpoint, "%s", where);
        for (size_t i = 0; i < r->hosts.n; i++)
            endpoint_send(r, &r->v[i]);
    }
}

/* ssh of host h has exited and its output is read: a host that never came up stops the job with
 * one line naming it and what ssh (or the remote shell) said; after a failed agent the others
 * are stopped once they have had SSH_FAIL_GRACE_MS to end by themselves (run_loop). */
static void host_done(run_t *r, host_t *h) {
    int was = h->state;
    h->state = HOST_DONE;
    if (h->in_fd >= 0) {
        close(h->in_fd);
        h->in_fd = -1;
    }
    int code = WIFEXITED(h->status) ? WEXITSTATUS(h->status) : 128 + WTERMSIG(h->status);
    DDP_INFO("host %s (node_rank %d): ssh exited %d", h->h->name, h->rank, code);
    /* Once a host's agent has failed, one that had not come up yet is no news: the job is
     * over, and its exit code is the failed agent's. */
    if (was == HOST_STARTING && !r->stopping && r->failed_rank < 0) {
        const char *hint =
            code == 127 ? " (is ddprun at the same path there? see --remote_ddprun)" : "";
        fprintf(stderr, "ddprun: host %s: unable to start the agent over ssh (exit %d): %s%s\n",
                h->h->name, code, h->last_err[0] ? h->last_err : "no message", hint);
        host_lost(r, h);
        return;
    }
    /* An unfit node (its health check failed until join_timeout) never joined: with
     * --nnodes=MIN:MAX the others go on without it, as without a host that never came up. */
    if (was == HOST_READY && code == LAUNCH_EXIT_NODE_UNFIT && r->nnodes_min < r->nnodes_max &&
        !r->stopping && r->failed_rank < 0) {
        fprintf(stderr,
                "ddprun: host %s is unfit (its health check failed until join_timeout, or the "
                "store excluded it after max_node_failures; its output says why): the job goes "
                "on without it\n",
                h->h->name);
        host_lost(r, h);
        return;
    }
    if (was == HOST_READY && code != 0 && r->failed_rank < 0 && !r->stopping) {
        /* The host that hosts the store often ends first, right after the rendezvous refused
         * it; the failed rank's own agent may still be printing its summary. */
        r->failed_rank = h->rank;
        r->failed_code = code;
        r->fail_deadline = ddp_now_ms() + SSH_FAIL_GRACE_MS;
    }
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void reap(run_t *r) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < r->hosts.n; i++)
            if (r->v[i].pid == pid) {
                r->v[i].pid = 0;
                r->v[i].status = status;
            }
    }
}

static void on_signal(run_t *r) {
    struct signalfd_siginfo si;
    while (read(r->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            reap(r);
            continue;
        }
        if (sig == SIGTSTP) {
            suspend(r);
            continue;
        }
        if (!agent_signal_stops_job(sig)) {
            /* SIGUSR1 and the like (Slurm's --signal warning): for the workers, as on one node;
             * the job goes on. */
            DDP_INFO("forwarding %s to every host", ddp_signal_name(sig));
            signal_all(r, sig);
            continue;
        }
        if (r->stop_signal == 0)
            r->stop_signal = sig;
        if (!r->stopping) {
            fprintf(stderr, "ddprun: %s: stopping the job on every host\n", strsignal(sig));
            stop_all(r, sig);
            continue;
        }
        /* Another one while the hosts stop (a second Ctrl-C, or one after a failed host): the
         * agents kill their workers now, as on one node, and the ssh clients still running
         * SSH_KILL_WAIT_MS later are killed. */
        fprintf(stderr, "ddprun: %s while the hosts stop: killing the job on every host\n",
                strsignal(sig));
        signal_all(r, sig);
        uint64_t by = ddp_now_ms() + SSH_KILL_WAIT_MS;
        if (by < r->stop_deadline)
            r->stop_deadline = by;
    }
}

/* Runs until every host is done. */
static void run_loop(run_t *r, char *const *argv) {
    size_t cap = 1 + 2 * r->hosts.n;
    struct pollfd *pfd = calloc(cap, sizeof *pfd);
    host_t **who = calloc(cap, sizeof *who);
    if (pfd == NULL || who == NULL) {
        fprintf(stderr, "ddprun: out of memory\n");
        stop_all(r, SIGTERM);
        kill_all(r);
    }
    schedule(r, argv);
    for (;;) {
        int open_hosts = 0;
        uint64_t now = ddp_now_ms(), next = UINT64_MAX;
        for (size_t i = 0; i < r->hosts.n; i++) {
            host_t *h = &r->v[i];
            if (h->state == HOST_STARTING || h->state == HOST_READY) {
                if (h->pid == 0 && h->out.fd < 0 && h->err.fd < 0) {
                    host_done(r, h);
                    schedule(r, argv);
                    continue;
                }
                open_hosts++;
                if (h->state == HOST_STARTING && h->pid > 0 && !r->stopping) {
                    if (now >= h->deadline) {
                        snprintf(h->last_err, sizeof h->last_err,
                                 "no answer within %d s (ssh connected but the agent did not "
                                 "start)",
                                 LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S);
                        kill(h->pid, SIGKILL);
                    } else if (h->deadline < next)
                        next = h->deadline;
                }
            }
        }
        if (open_hosts == 0 || pfd == NULL)
            break;
        tell_down(r);
        if (r->fail_deadline != 0 && !r->stopping) {
            if (now >= r->fail_deadline) {
                DDP_INFO("hosts still running %d s after a failed one: stopping them",
                         SSH_FAIL_GRACE_MS / 1000);
                stop_all(r, SIGTERM);
            } else if (r->fail_deadline < next) {
                next = r->fail_deadline;
            }
        }
        /* The heartbeats go on while the hosts stop: an agent that hears none takes the
         * launcher for gone. */
        if (now >= r->beat_at)
            heartbeat_all(r);
        if (r->beat_at < next)
            next = r->beat_at;
        if (r->stopping) {
            if (now >= r->stop_deadline) {
                kill_all(r);
                r->stop_deadline = now + 1000;
            }
            if (r->stop_deadline < next)
                next = r->stop_deadline;
        }
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
        for (size_t i = 0; i < r->hosts.n; i++) {
            host_t *h = &r->v[i];
            if (h->out.fd >= 0) {
                who[n] = h;
                pfd[n++] = (struct pollfd){.fd = h->out.fd, .events = POLLIN};
            }
            if (h->err.fd >= 0) {
                who[n] = h;
                pfd[n++] = (struct pollfd){.fd = h->err.fd, .events = POLLIN};
            }
        }
        int timeout = next == UINT64_MAX ? -1 : (int)(next > now ? next - now : 0);
        if (poll(pfd, n, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            on_signal(r);
        for (size_t k = 1; k < n; k++) {
            if (pfd[k].revents == 0)
                continue;
            host_t *h = who[k];
            int std = pfd[k].fd == h->out.fd ? 1 : 2;
            stream_read(r, h, std);
        }
        schedule(r, argv); /* the first host may have said where the store is */
    }
    free(pfd);
    free(who);
}

/* The exit code: the signal that stopped the job, a host that could not be started, the first
 * host whose agent failed, else 0. The last line names the host of the job's root cause (the
 * failure the store counted first: its agent's summary says so), else that first host. */
static int run_result(const run_t *r) {
    if (r->stop_signal != 0)
        return 128 + r->stop_signal;
    if (r->start_failed)
        return 1;
    if (r->failed_rank >= 0) {
        const host_t *h = &r->v[r->failed_rank];
        int code = r->failed_code;
        const char *note = "";
        for (size_t i = 0; i < r->hosts.n; i++)
            if (r->v[i].root_cause) {
                h = &r->v[i];
                code = WIFEXITED(h->status) ? WEXITSTATUS(h->status) : 128 + WTERMSIG(h->status);
                note = "; the root cause was there";
                break;
            }
        fprintf(stderr, "ddprun: the job failed on host %s (node_rank %d): exit %d%s\n", h->h->name,
                h->rank, code, note);
        return r->failed_code == 255 ? 1 : r->failed_code;
    }
    return 0;
}

static void run_free(run_t *r) {
    for (size_t i = 0; r->v != NULL && i < r->hosts.n; i++) {
        host_t *h = &r->v[i];
        free(h->out.buf);
        free(h->err.buf);
        ddp_buf_free(&h->held);
        for (int *fd = (int[]){h->in_fd, h->out.fd, h->err.fd}, k = 0; k < 3; k++)
            if (fd[k] >= 0)
                close(fd[k]);
    }
    free(r->v);
    free(r->ssh_copy);
    ddp_buf_free(&r->env);
    launch_hosts_free(&r->hosts);
}

int launch_ssh_run(const launch_spec_t *spec, char *const *argv, ddp_err_t *err) {
    run_t r;
    memset(&r, 0, sizeof r);
    r.spec = spec;
    r.sigfd = -1;
    r.env = (ddp_buf_t)DDP_BUF_INIT;
    int rc = run_prepare(&r, err);
    if (rc < 0) {
        run_free(&r);
        return rc;
    }
    /* Signals become loop events (signalfd); the ssh children get the mask cleared. Every
     * signal of --signals_to_handle goes to the hosts but SIGPIPE, which the launcher's own
     * writes to an ssh that ended raise (ignored), and SIGCHLD, its own children's. */
    sigset_t set, old;
    sigemptyset(&set);
    for (int i = 0; i < spec->n_signals; i++)
        if (spec->signals[i] != SIGPIPE && spec->signals[i] != SIGCHLD) {
            /* An ignored signal is discarded, never queued for signalfd: a shell starts
             * background jobs with SIGINT ignored, and the agent (libuv handlers) stops on it
             * there too. */
            signal(spec->signals[i], SIG_DFL);
            sigaddset(&set, spec->signals[i]);
        }
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTSTP);
    sigprocmask(SIG_BLOCK, &set, &old);
    signal(SIGPIPE, SIG_IGN);
    r.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (r.sigfd < 0) {
        rc = ddp_err_set(err, -errno, "unable to watch signals: %s", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        run_free(&r);
        return rc;
    }
    DDP_INFO("starting %zu host(s) over %s, run id %s", r.hosts.n, r.words[0],
             LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ID) ? spec->rdzv_id : r.run_id);
    run_loop(&r, argv);
    int code = run_result(&r);
    close(r.sigfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    run_free(&r);
    return code;
}
