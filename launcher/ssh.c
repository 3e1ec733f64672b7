/* SPDX-License-Identifier: Apache-2.0
 * --hostfile and --hosts: one ddprun starts the job on every host over the system's ssh client,
 * relays their output and stops them all (the other end, the agent it starts on each host, is
 * ssh_session.c). This file prepares the run (every usage error before any host is contacted,
 * the remote command) and drives it on a libuv loop: uv_spawn for the ssh clients, uv_pipe for
 * their output, uv_signal for the launcher's signals, uv_timer for the heartbeats and deadlines.
 * What each event means for its host is ssh_host.c's phase x event table.
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
 * and the agent whose address it is hosts the store, as without ssh. With --rdzv_backend=etcd
 * (--rdzv_endpoint then names the etcd members) every agent gets --rdzv_backend=etcd and the
 * members, none waits, and the agents elect the store among themselves as without ssh: no host
 * is special, so the job survives the loss of any one of them.
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
#include "ssh_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "ddp_file.h"
#include "ddp_log.h"
#include "ddp_signal.h"
#include "ddp_time.h"
#include "rdzv_client.h"

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
static int remote_command(const ssh_run_t *r, const ssh_host_t *h, char *const *argv,
                          ddp_buf_t *b) {
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
    rc = rc ? rc : arg_add(b, "--rdzv_backend=%s", r->etcd ? "etcd" : "c10d");
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
static int env_build(ssh_run_t *r, ddp_err_t *err) {
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
static int ssh_words(ssh_run_t *r, ddp_err_t *err) {
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
static int run_prepare(ssh_run_t *r, ddp_err_t *err) {
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
    r->etcd = spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "etcd") == 0;
    if (spec->rdzv_backend != NULL && strcmp(spec->rdzv_backend, "c10d") != 0 && !r->etcd &&
        LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_BACKEND))
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_backend: hosts started over ssh meet with c10d (the first "
                           "host, or --rdzv_endpoint, hosts the store) or etcd");
    if (r->etcd && spec->etcd_endpoints == NULL)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--rdzv_backend=etcd needs --rdzv_endpoint=HOST:PORT[,HOST:PORT...] "
                           "(the etcd members)");
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
    /* With etcd no host waits for an address: the election names the store. */
    r->endpoint_given =
        r->etcd || (spec->rdzv_host != NULL && LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ENDPOINT));
    r->v = calloc(r->hosts.n, sizeof *r->v);
    if (r->v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < r->hosts.n; i++) {
        ssh_host_t *h = &r->v[i];
        h->h = &r->hosts.v[i];
        h->run = r;
        h->rank = (int)i;
        h->in_fd = -1;
        h->held = (ddp_buf_t)DDP_BUF_INIT;
    }
    r->failed_rank = -1;
    return 0;
}

/* ---- the loop's primitives (ssh_int.h) --------------------------------------------------- */

static void settle(ssh_run_t *r);

static uint64_t loop_now(ssh_run_t *r) {
    return uv_now(&r->loop);
}

/* A console that is gone (EPIPE) loses the rest silently. */
static void loop_output(int std, const char *p, size_t n) {
    (void)ddp_write_all(std, p, n);
}

static void loop_host_write(ssh_host_t *h, const char *line) {
    if (h->in_fd < 0)
        return;
    if (write(h->in_fd, line, strlen(line)) < 0 && errno != EPIPE)
        DDP_DEBUG("host %s: unable to write to its session: %s", h->h->name, strerror(errno));
}

static void loop_host_stdin_close(ssh_host_t *h) {
    if (h->in_fd >= 0)
        close(h->in_fd);
    h->in_fd = -1;
}

static void loop_host_kill(ssh_host_t *h) {
    int rc = h->running ? uv_process_kill(&h->proc, SIGKILL) : 0;
    if (rc < 0)
        DDP_DEBUG("host %s: unable to kill its ssh: %s", h->h->name, uv_strerror(rc));
}

static void on_answer_timer(uv_timer_t *t) {
    ssh_host_t *h = t->data;
    if (h->running)
        ssh__host_event(h->run, h, SSH_EV_NO_ANSWER, NULL, 0);
    settle(h->run);
}

static void loop_host_answer_by(ssh_host_t *h, uint64_t at_ms) {
    uint64_t now = uv_now(&h->run->loop);
    int rc = uv_timer_start(&h->answer_timer, on_answer_timer, at_ms > now ? at_ms - now : 0, 0);
    if (rc < 0)
        DDP_WARN("host %s: unable to time its start: %s", h->h->name, uv_strerror(rc));
}

/* The stop's deadline: every ssh client still running is killed, and again every second until
 * each has ended. */
static void on_stop_timer(uv_timer_t *t) {
    ssh_run_t *r = t->data;
    for (size_t i = 0; i < r->hosts.n; i++)
        loop_host_kill(&r->v[i]);
}

static void loop_stop_at(ssh_run_t *r, uint64_t at_ms) {
    uint64_t now = uv_now(&r->loop);
    int rc = uv_timer_start(&r->stop_timer, on_stop_timer, at_ms > now ? at_ms - now : 0, 1000);
    if (rc < 0)
        DDP_WARN("unable to time the hosts' stop: %s", uv_strerror(rc));
}

static void on_grace_timer(uv_timer_t *t) {
    ssh__grace_over(t->data);
    settle(t->data);
}

static void loop_grace_start(ssh_run_t *r) {
    int rc = uv_timer_start(&r->grace_timer, on_grace_timer, SSH_FAIL_GRACE_MS, 0);
    if (rc < 0)
        DDP_WARN("unable to time the failed job's end: %s", uv_strerror(rc));
}

/* ---- ssh's end and output ---------------------------------------------------------------- */

/* SSH_EV_ENDED once ssh has exited and both its pipes are at their end, whichever comes last. */
static void ended_check(ssh_host_t *h) {
    if (!h->running && !h->out.open && !h->err.open)
        ssh__host_event(h->run, h, SSH_EV_ENDED, NULL, 0);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
    ssh_host_t *h = p->data;
    h->code = sig != 0 ? 128 + sig : (int)status;
    h->running = 0;
    uv_timer_stop(&h->answer_timer);
    ended_check(h);
    settle(h->run);
}

/* One whole line (with its '\n') of host h's stdout (std 1) or stderr (std 2). */
static void line_handle(ssh_host_t *h, int std, const char *p, size_t n) {
    size_t ready_len = sizeof AGENT_SSH_READY - 1;
    ssh_event_t ev = std == 1 ? SSH_EV_OUT_LINE : SSH_EV_ERR_LINE;
    if (std == 1 && n > ready_len + 1 && memcmp(p, AGENT_SSH_READY " ", ready_len + 1) == 0)
        ev = SSH_EV_READY_LINE;
    ssh__host_event(h->run, h, ev, p, n);
}

static ssh_stream_t *stream_of(ssh_host_t *h, const void *handle, int *std) {
    *std = handle == (const void *)&h->out.pipe ? 1 : 2;
    return *std == 1 ? &h->out : &h->err;
}

/* Reads into the rest of the line buffer: a full buffer is written out as a line at once, so
 * there is always room. */
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    int std;
    ssh_stream_t *s = stream_of(handle->data, handle, &std);
    *buf = uv_buf_init(s->buf + s->len, (unsigned)(SSH_LINE_MAX - s->len));
}

/* What host h's stream has: every whole line handled; at the end (or a read error) the rest, if
 * any, as a line, and the pipe closed. */
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    (void)buf;
    ssh_host_t *h = st->data;
    int std;
    ssh_stream_t *s = stream_of(h, st, &std);
    if (nread == 0)
        return;
    size_t got = nread > 0 ? (size_t)nread : 0, start = 0;
    s->len += got;
    for (size_t i = s->len - got; i < s->len; i++)
        if (s->buf[i] == '\n') {
            line_handle(h, std, s->buf + start, i + 1 - start);
            start = i + 1;
        }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    /* A line longer than the buffer, or the end without a final newline: out as a line. */
    if (s->len == SSH_LINE_MAX || (nread < 0 && s->len > 0)) {
        s->buf[s->len] = '\n';
        line_handle(h, std, s->buf, s->len + 1);
        s->len = 0;
    }
    if (nread < 0) {
        uv_read_stop(st);
        uv_close((uv_handle_t *)st, NULL);
        s->open = 0;
        ended_check(h);
    }
    settle(h->run);
}

/* ---- starting ssh ------------------------------------------------------------------------ */

/* ssh's argv for host h running cmd, in av (SSH_MAX_WORDS + 24 entries); the option values are
 * written into opts (3 strings of 48 bytes). */
static void ssh_argv(const ssh_run_t *r, const ssh_host_t *h, char *cmd, char **av,
                     char (*opts)[48]) {
    int n = 0;
    for (int i = 0; i < r->n_words; i++)
        av[n++] = r->words[i];
    snprintf(opts[0], 48, "ConnectTimeout=%d", LAUNCH_SSH_CONNECT_TIMEOUT_S);
    av[n++] = "-o";
    av[n++] = "BatchMode=yes";
    av[n++] = "-o";
    av[n++] = opts[0];
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
    snprintf(opts[1], 48, "ServerAliveInterval=%d", LAUNCH_SSH_ALIVE_INTERVAL_S);
    snprintf(opts[2], 48, "ServerAliveCountMax=%d", LAUNCH_SSH_ALIVE_COUNT);
    av[n++] = "-o";
    av[n++] = opts[1];
    av[n++] = "-o";
    av[n++] = opts[2];
    av[n++] = h->h->name;
    av[n++] = cmd;
    av[n] = NULL;
}

/* Starts ssh for host h: its stdin, stdout and stderr are pipes to us, the token goes first. The
 * child is the leader of a session of its own (the terminal's Ctrl-C is the launcher's to
 * handle, and BatchMode leaves ssh nothing to ask on a terminal), with default signal
 * dispositions and an empty mask (uv_spawn), the pipes on 0-2. */
static int loop_host_spawn(ssh_run_t *r, ssh_host_t *h) {
    ddp_buf_t cmd = DDP_BUF_INIT;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = remote_command(r, h, r->argv, &cmd);
    h->out.buf = malloc(SSH_LINE_MAX + 1);
    h->err.buf = malloc(SSH_LINE_MAX + 1);
    if (rc == 0 && (h->out.buf == NULL || h->err.buf == NULL))
        rc = -ENOMEM;
    if (rc == 0 &&
        (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0))
        rc = -errno;
    /* The read ends belong to their uv pipes from here (closed with them). */
    if (rc == 0 && (rc = uv_pipe_open(&h->out.pipe, out[0])) == 0)
        out[0] = -1;
    if (rc == 0 && (rc = uv_pipe_open(&h->err.pipe, errp[0])) == 0)
        errp[0] = -1;
    char *av[SSH_MAX_WORDS + 24], opts[3][48];
    ssh_argv(r, h, (char *)cmd.data, av, opts);
    if (rc == 0) {
        uv_stdio_container_t stdio[3] = {
            {.flags = UV_INHERIT_FD, .data.fd = in[0]},
            {.flags = UV_INHERIT_FD, .data.fd = out[1]},
            {.flags = UV_INHERIT_FD, .data.fd = errp[1]},
        };
        uv_process_options_t o = {
            .exit_cb = on_exit_cb,
            .file = av[0],
            .args = av,
            .stdio = stdio,
            .stdio_count = 3,
            .flags = UV_PROCESS_DETACHED,
        };
        h->proc.data = h;
        rc = uv_spawn(&r->loop, &h->proc, &o);
    }
    ddp_buf_free(&cmd);
    for (int *fd = (int[]){in[0], out[1], errp[1], out[0], errp[0]}, i = 0; i < 5; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    if (rc < 0) {
        if (in[1] >= 0)
            close(in[1]);
        uv_close((uv_handle_t *)&h->out.pipe, NULL);
        uv_close((uv_handle_t *)&h->err.pipe, NULL);
        snprintf(h->last_err, sizeof h->last_err, "unable to start ssh: %s", strerror(-rc));
        return rc;
    }
    h->running = 1;
    h->in_fd = in[1];
    for (int std = 1; std <= 2; std++) {
        ssh_stream_t *s = std == 1 ? &h->out : &h->err;
        int e = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
        s->open = e == 0;
        if (e < 0)
            DDP_WARN("host %s: unable to read its ssh's output: %s", h->h->name, uv_strerror(e));
    }
    /* 66 bytes into an empty pipe: never blocks. Later lines must not block the launcher on a
     * host that stalls. */
    (void)ddp_write_all(h->in_fd, r->token_hex, strlen(r->token_hex));
    if (fcntl(h->in_fd, F_SETFL, O_NONBLOCK) < 0)
        DDP_DEBUG("host %s: unable to make its stdin non-blocking: %s", h->h->name,
                  strerror(errno));
    DDP_INFO("host %s (node_rank %d): started ssh (pid %d)", h->h->name, h->rank, (int)h->proc.pid);
    return 0;
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* After each event: the next hosts start; once no host is open the run is over. */
static void settle(ssh_run_t *r) {
    ssh__schedule(r);
    for (size_t i = 0; i < r->hosts.n; i++)
        if (ssh__host_open(&r->v[i])) {
            ssh__tell_down(r);
            return;
        }
    r->over = 1;
    uv_stop(&r->loop);
}

/* The heartbeats go on while the hosts stop: an agent that hears none takes the launcher for
 * gone. */
static void on_beat(uv_timer_t *t) {
    ssh__send_all(t->data, "\n");
}

/* SIGTSTP (Ctrl-Z): the agents are told not to take the silence that follows for the launcher's
 * end, then the launcher stops itself, as the signal's default action would have; once
 * continued, it beats at once. */
static void suspend(ssh_run_t *r) {
    ssh__send_all(r, AGENT_SSH_PAUSE "\n");
    raise(SIGSTOP);
    ssh__send_all(r, "\n");
    uv_update_time(&r->loop);
    uv_timer_again(&r->beat_timer);
}

static void on_signal(uv_signal_t *s, int sig) {
    ssh_run_t *r = s->data;
    char line[32];
    snprintf(line, sizeof line, "%s %d\n", AGENT_SSH_SIGNAL, sig);
    if (sig == SIGTSTP) {
        suspend(r);
    } else if (!agent_signal_stops_job(sig)) {
        /* SIGUSR1 and the like (Slurm's --signal warning): for the workers, as on one node; the
         * job goes on. */
        DDP_INFO("forwarding %s to every host", ddp_signal_name(sig));
        ssh__send_all(r, line);
    } else if (r->phase != SSH_RUN_STOPPING) {
        if (r->stop_signal == 0)
            r->stop_signal = sig;
        fprintf(stderr, "ddprun: %s: stopping the job on every host\n", strsignal(sig));
        ssh__stop(r, sig);
    } else {
        /* Another one while the hosts stop (a second Ctrl-C, or one after a failed host): the
         * agents kill their workers now, as on one node, and the ssh clients still running
         * SSH_KILL_WAIT_MS later are killed. */
        if (r->stop_signal == 0)
            r->stop_signal = sig;
        fprintf(stderr, "ddprun: %s while the hosts stop: killing the job on every host\n",
                strsignal(sig));
        ssh__send_all(r, line);
        uint64_t by = uv_now(&r->loop) + SSH_KILL_WAIT_MS;
        if (by < r->stop_deadline) {
            r->stop_deadline = by;
            loop_stop_at(r, by);
        }
    }
    settle(r);
}

/* Watches sig (once). Returns 0 or a libuv error. */
static int signal_watch(ssh_run_t *r, int sig) {
    for (int i = 0; i < r->n_sigs; i++)
        if (r->sigs[i].signum == sig)
            return 0;
    uv_signal_t *s = &r->sigs[r->n_sigs];
    int rc = uv_signal_init(&r->loop, s);
    if (rc < 0)
        return rc;
    r->n_sigs++;
    s->data = r;
    return uv_signal_start(s, on_signal, sig);
}

static void close_one(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Closes every handle of the loop, lets their callbacks run, and the loop. */
static void loop_close(ssh_run_t *r) {
    uv_walk(&r->loop, close_one, NULL);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&r->loop);
    if (rc < 0)
        DDP_DEBUG("unable to close the loop: %s", uv_strerror(rc));
}

/* The loop, its timers, every host's handles, and the signals: signals become loop events
 * (uv_signal); the ssh children get default dispositions. Every signal of --signals_to_handle
 * goes to the hosts but SIGPIPE, which the launcher's own writes to an ssh that ended raise
 * (ignored), and SIGCHLD, its own children's. A handler replaces an ignored disposition too: a
 * shell starts background jobs with SIGINT ignored, and the agent (libuv handlers) stops on it
 * there too. Returns 0 or a negative code with err set (nothing left open). */
static int loop_open(ssh_run_t *r, ddp_err_t *err) {
    int rc = uv_loop_init(&r->loop);
    if (rc < 0)
        return ddp_err_set(err, rc, "unable to start the event loop: %s", uv_strerror(rc));
    r->beat_timer.data = r->grace_timer.data = r->stop_timer.data = r;
    if ((rc = uv_timer_init(&r->loop, &r->beat_timer)) < 0 ||
        (rc = uv_timer_init(&r->loop, &r->grace_timer)) < 0 ||
        (rc = uv_timer_init(&r->loop, &r->stop_timer)) < 0)
        goto fail;
    for (size_t i = 0; i < r->hosts.n; i++) {
        ssh_host_t *h = &r->v[i];
        h->answer_timer.data = h->out.pipe.data = h->err.pipe.data = h;
        if ((rc = uv_timer_init(&r->loop, &h->answer_timer)) < 0 ||
            (rc = uv_pipe_init(&r->loop, &h->out.pipe, 0)) < 0 ||
            (rc = uv_pipe_init(&r->loop, &h->err.pipe, 0)) < 0)
            goto fail;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = signal_watch(r, SIGTSTP);
    for (int i = 0; rc == 0 && i < r->spec->n_signals; i++)
        if (r->spec->signals[i] != SIGPIPE && r->spec->signals[i] != SIGCHLD)
            rc = signal_watch(r, r->spec->signals[i]);
    if (rc < 0) {
        ddp_err_set(err, rc, "unable to watch signals: %s", uv_strerror(rc));
        loop_close(r);
        return rc;
    }
    if ((rc = uv_timer_start(&r->beat_timer, on_beat, AGENT_SSH_HEARTBEAT_MS,
                             AGENT_SSH_HEARTBEAT_MS)) < 0)
        goto fail;
    return 0;
fail:
    ddp_err_set(err, rc, "unable to start the event loop: %s", uv_strerror(rc));
    loop_close(r);
    return rc;
}

/* The exit code: the signal that stopped the job, a host that could not be started, the first
 * host whose agent failed, else 0. The last line names the host of the job's root cause (the
 * failure the store counted first: its agent's summary says so), else that first host. */
static int run_result(const ssh_run_t *r) {
    if (r->stop_signal != 0)
        return 128 + r->stop_signal;
    if (r->start_failed)
        return 1;
    if (r->failed_rank >= 0) {
        const ssh_host_t *h = &r->v[r->failed_rank];
        int code = r->failed_code;
        const char *note = "";
        for (size_t i = 0; i < r->hosts.n; i++)
            if (r->v[i].root_cause) {
                h = &r->v[i];
                code = h->code;
                note = "; the root cause was there";
                break;
            }
        fprintf(stderr, "ddprun: the job failed on host %s (node_rank %d): exit %d%s\n", h->h->name,
                h->rank, code, note);
        return r->failed_code == 255 ? 1 : r->failed_code;
    }
    return 0;
}

static void run_free(ssh_run_t *r) {
    for (size_t i = 0; r->v != NULL && i < r->hosts.n; i++) {
        ssh_host_t *h = &r->v[i];
        free(h->out.buf);
        free(h->err.buf);
        ddp_buf_free(&h->held);
        loop_host_stdin_close(h);
    }
    free(r->v);
    free(r->ssh_copy);
    ddp_buf_free(&r->env);
    launch_hosts_free(&r->hosts);
}

/* What the hosts' table (ssh_host.c) may do to the loop. */
static const ssh_loop_ops_t loop_ops = {
    .host_spawn = loop_host_spawn,
    .host_write = loop_host_write,
    .host_stdin_close = loop_host_stdin_close,
    .host_kill = loop_host_kill,
    .host_answer_by = loop_host_answer_by,
    .output = loop_output,
    .now = loop_now,
    .stop_at = loop_stop_at,
    .grace_start = loop_grace_start,
};

int launch_ssh_run(const launch_spec_t *spec, char *const *argv, ddp_err_t *err) {
    ssh_run_t r;
    memset(&r, 0, sizeof r);
    r.spec = spec;
    r.io = &loop_ops;
    r.argv = argv;
    r.env = (ddp_buf_t)DDP_BUF_INIT;
    int rc = run_prepare(&r, err);
    if (rc == 0)
        rc = loop_open(&r, err);
    if (rc < 0) {
        run_free(&r);
        return rc;
    }
    DDP_INFO("starting %zu host(s) over %s, run id %s", r.hosts.n, r.words[0],
             LAUNCH_GIVEN(spec, LAUNCH_OPT_RDZV_ID) ? spec->rdzv_id : r.run_id);
    settle(&r);
    while (!r.over && uv_run(&r.loop, UV_RUN_ONCE))
        ;
    int code = run_result(&r);
    loop_close(&r);
    run_free(&r);
    return code;
}
