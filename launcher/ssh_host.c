/* SPDX-License-Identifier: Apache-2.0
 * Each host of a job started over ssh (--hostfile, --hosts) as a phase x event -> action table,
 * and the run's decisions its actions make: which host starts next (--ssh_fanout), when the job
 * goes on without a host that could not be started (--nnodes=MIN:MAX) or stops, and the grace the
 * others get after a failed agent. No I/O of its own: the loop's primitives are ssh.c's
 * (ssh_int.h), and test_launch_ssh_host feeds every cell.
 *
 * A host other than the first, without --rdzv_endpoint, is WAITING from its start until the first
 * host's agent has said where the store is: its agent reads that address on stdin, so no
 * launcher line may go there before it. A STOP closes a waiting agent's stdin; the others get
 * "signal N". Told to stop before its agent was ready, a host is CLOSING (its stderr still held),
 * after that STOPPING; neither says more about how its ssh ends.
 */
/* clang-format off */
/*
 * phase \ event | START          | ADDRESS    | SEND      | READY_LINE | OUT_LINE | ERR_LINE | NO_ANSWER | STOP           | ENDED
 * --------------+----------------+------------+-----------+------------+----------+----------+-----------+----------------+------------------
 * PENDING       | spawn ->       | -          | -         | -          | -        | -        | -         | forget -> DONE | -
 *               | STARTING (or   |            |           |            |          |          |           |                |
 *               | WAITING; LOST) |            |           |            |          |          |           |                |
 * WAITING       | -              | address -> | -         | out        | out      | hold     | kill_late | close_stdin -> | ended_starting ->
 *               |                | STARTING   |           |            |          |          |           | CLOSING        | DONE (or LOST)
 * STARTING      | -              | -          | send_line | ready ->   | out      | hold     | kill_late | send_line ->   | ended_starting ->
 *               |                |            |           | READY      |          |          |           | CLOSING        | DONE (or LOST)
 * READY         | -              | -          | send_line | out        | out      | err_out  | -         | send_line ->   | ended_ready ->
 *               |                |            |           |            |          |          |           | STOPPING       | DONE (or LOST)
 * CLOSING       | -              | -          | send_line | ready ->   | out      | hold     | -         | -              | ended -> DONE
 *               |                |            |           | STOPPING   |          |          |           |                |
 * STOPPING      | -              | -          | send_line | out        | out      | err_out  | -         | -              | ended -> DONE
 * DONE, LOST    | -              | -          | -         | -          | -        | -        | -         | -              | -
 */
/* clang-format on */

/* "-": nothing, the phase stays. "spawn": io->host_spawn, the first heartbeat (or the address, if
 * known, for a waiting host) and the answer deadline; LOST when ssh could not start (lost).
 * "address": the store's address, then the first heartbeat, down stdin; the deadline is then at
 * least LAUNCH_SSH_READY_EXTRA_S away. "ready": the held stderr shown; the first host's address
 * goes to every host (ADDRESS). "hold": kept for the one-line error if the agent never comes up.
 * "kill_late": SIGKILL to ssh, ENDED follows. "ended_starting": the line naming the host and what
 * ssh said, then lost, unless another host's agent failed first (the job is over). "ended_ready":
 * an unfit node under --nnodes=MIN:MAX is lost, a failure starts the run's grace. "lost": the job
 * goes on without the host while at least MIN can come up and it is not the first host that is
 * to host the store, else everything stops. A cell's next phase is set before its action runs,
 * so a stop the action causes finds the host where it is going; actions that divert say so. */
#include "ssh_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ddp_log.h"
#include "launch_ssh.h"

typedef void (*ssh_action_t)(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n);

typedef struct ssh_cell {
    ssh_action_t act; /* NULL: the event means nothing in this phase */
    ssh_phase_t next;
} ssh_cell_t;

int ssh__host_open(const ssh_host_t *h) {
    return h->phase != SSH_PENDING && h->phase != SSH_DONE && h->phase != SSH_LOST;
}

/* Host h could not be started (its line is out): LOST. Without --nnodes=MIN:MAX that stops the
 * job; with it the job goes on while the hosts that may still come up are at least MIN, and the
 * first host is not the one lost when it is to host the store. */
static void lost(ssh_run_t *r, ssh_host_t *h) {
    h->phase = SSH_LOST;
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
        ssh__stop(r, SIGTERM);
}

/* WAITING + ADDRESS: the store's address down stdin, after the token; the agent of a host other
 * than the first waits for it there (launch_ssh_session_begin). The host is then given its full
 * time to answer from now: it could not before. */
static void address(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)p, (void)n;
    char line[sizeof r->endpoint + 1];
    snprintf(line, sizeof line, "%s\n", r->endpoint);
    h->run->io->host_write(h, line);
    h->run->io->host_write(h, "\n"); /* the first heartbeat: the agent watches for them from now */
    uint64_t answer_by = r->io->now(r) + LAUNCH_SSH_READY_EXTRA_S * 1000ull;
    if (h->deadline < answer_by) {
        h->deadline = answer_by;
        h->run->io->host_answer_by(h, h->deadline);
    }
}

/* PENDING + START: ssh started, -> STARTING; WAITING while the address it needs is not known
 * (it goes at once when it is); LOST when ssh could not start. */
static void spawn(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)p, (void)n;
    if (r->io->host_spawn(r, h) < 0) {
        fprintf(stderr, "ddprun: host %s: %s\n", h->h->name, h->last_err);
        lost(r, h);
        return;
    }
    h->deadline =
        r->io->now(r) + (LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S) * 1000ull;
    h->run->io->host_answer_by(h, h->deadline);
    if (r->endpoint_given || h->rank == 0) {
        h->run->io->host_write(h, "\n"); /* the first heartbeat, when it needs no address */
        return;
    }
    h->phase = SSH_WAITING;
    if (r->endpoint[0] != '\0')
        ssh__host_event(r, h, SSH_EV_ADDRESS, NULL, 0);
}

/* SEND in a phase whose agent reads the launcher's lines. */
static void send_line(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)n;
    h->run->io->host_write(h, p);
}

/* STARTING + READY_LINE, CLOSING + READY_LINE: "AGENT_SSH_READY ADDR:PORT\n". */
static void ready(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    size_t skip = sizeof AGENT_SSH_READY;    /* the word and the blank */
    size_t wl = n > skip ? n - skip - 1 : 0; /* without the '\n' */
    char where[96];
    snprintf(where, sizeof where, "%.*s", (int)(wl < sizeof where ? wl : sizeof where - 1),
             n > skip ? p + skip : "");
    DDP_INFO("host %s (node_rank %d): agent ready, store at %s", h->h->name, h->rank, where);
    if (h->held.len > 0)
        h->run->io->output(2, (const char *)h->held.data, h->held.len);
    ddp_buf_free(&h->held);
    if (h->rank == 0 && !r->endpoint_given && r->endpoint[0] == '\0') {
        snprintf(r->endpoint, sizeof r->endpoint, "%s", where);
        for (size_t i = 0; i < r->hosts.n; i++)
            ssh__host_event(r, &r->v[i], SSH_EV_ADDRESS, NULL, 0);
    }
}

/* A line of ssh's stdout, or a ready line where it means nothing (an agent still waiting for the
 * address cannot be ready; a worker may print the word too): written out. */
static void out(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)h;
    h->run->io->output(1, p, n);
}

/* READY, STOPPING + ERR_LINE: written out. The store decided which node's failure was the first
 * (its agent alone prints the title as a whole line): the last line names that host, whichever
 * agent ended first. */
static void err_out(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r;
    size_t title_len = sizeof AGENT_ROOT_CAUSE_TITLE - 1;
    if (n == title_len + 1 && memcmp(p, AGENT_ROOT_CAUSE_TITLE "\n", n) == 0)
        h->root_cause = 1;
    h->run->io->output(2, p, n);
}

/* ERR_LINE before the agent is ready: ssh's own complaint or the remote ddprun's usage error
 * becomes the one-line error if the agent never comes up; shown as it came once it does. */
static void hold(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r;
    if (h->held.len + n <= SSH_HELD_MAX)
        ddp_buf_append(&h->held, p, n);
    size_t k = n;
    while (k > 0 && (p[k - 1] == '\n' || p[k - 1] == '\r'))
        k--;
    if (k > 0)
        snprintf(h->last_err, sizeof h->last_err, "%.*s", (int)k, p);
}

/* WAITING, STARTING + NO_ANSWER. */
static void kill_late(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)p, (void)n;
    snprintf(h->last_err, sizeof h->last_err,
             "no answer within %d s (ssh connected but the agent did not start)",
             LAUNCH_SSH_CONNECT_TIMEOUT_S + LAUNCH_SSH_READY_EXTRA_S);
    h->run->io->host_kill(h);
}

/* PENDING + STOP: never started. */
static void forget(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)h, (void)p, (void)n;
}

/* WAITING + STOP: the agent waiting for the store's address sees its stdin end instead. */
static void close_stdin(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)p, (void)n;
    h->run->io->host_stdin_close(h);
}

/* CLOSING, STOPPING + ENDED (and the start of the two below): ssh's end noted. */
static void ended(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    (void)r, (void)p, (void)n;
    h->run->io->host_stdin_close(h);
    DDP_INFO("host %s (node_rank %d): ssh exited %d", h->h->name, h->rank, h->code);
}

/* WAITING, STARTING + ENDED: a host that never came up stops the job with one line naming it and
 * what ssh (or the remote shell) said, or is LOST under --nnodes=MIN:MAX. Once a host's agent has
 * failed, one that had not come up yet is no news: the job is over, and its exit code is the
 * failed agent's. */
static void ended_starting(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    ended(r, h, p, n);
    if (r->failed_rank >= 0)
        return;
    const char *hint =
        h->code == 127 ? " (is ddprun at the same path there? see --remote_ddprun)" : "";
    fprintf(stderr, "ddprun: host %s: unable to start the agent over ssh (exit %d): %s%s\n",
            h->h->name, h->code, h->last_err[0] ? h->last_err : "no message", hint);
    lost(r, h);
}

/* READY + ENDED: an unfit node (its health check failed until join_timeout) never joined: with
 * --nnodes=MIN:MAX the others go on without it, as without a host that never came up. Another
 * failure is the job's: the others get SSH_FAIL_GRACE_MS to end by themselves. */
static void ended_ready(ssh_run_t *r, ssh_host_t *h, const char *p, size_t n) {
    ended(r, h, p, n);
    if (r->failed_rank >= 0)
        return;
    if (h->code == LAUNCH_EXIT_NODE_UNFIT && r->nnodes_min < r->nnodes_max) {
        fprintf(stderr,
                "ddprun: host %s is unfit (its health check failed until join_timeout, or the "
                "store excluded it after max_node_failures; its output says why): the job goes "
                "on without it\n",
                h->h->name);
        lost(r, h);
        return;
    }
    if (h->code != 0) {
        /* The host that hosts the store often ends first, right after the rendezvous refused
         * it; the failed rank's own agent may still be printing its summary. */
        r->failed_rank = h->rank;
        r->failed_code = h->code;
        r->phase = SSH_RUN_FAILED;
        r->io->grace_start(r);
    }
}

/* clang-format off */
#define CELL(act, next) {act, SSH_##next}
static const ssh_cell_t ssh_table[SSH_NPHASES][SSH_NEVENTS] = {
    [SSH_PENDING] = {
        [SSH_EV_START] = CELL(spawn, STARTING),
        [SSH_EV_STOP] = CELL(forget, DONE),
    },
    [SSH_WAITING] = {
        [SSH_EV_ADDRESS] = CELL(address, STARTING),
        [SSH_EV_READY_LINE] = CELL(out, WAITING),
        [SSH_EV_OUT_LINE] = CELL(out, WAITING),
        [SSH_EV_ERR_LINE] = CELL(hold, WAITING),
        [SSH_EV_NO_ANSWER] = CELL(kill_late, WAITING),
        [SSH_EV_STOP] = CELL(close_stdin, CLOSING),
        [SSH_EV_ENDED] = CELL(ended_starting, DONE),
    },
    [SSH_STARTING] = {
        [SSH_EV_SEND] = CELL(send_line, STARTING),
        [SSH_EV_READY_LINE] = CELL(ready, READY),
        [SSH_EV_OUT_LINE] = CELL(out, STARTING),
        [SSH_EV_ERR_LINE] = CELL(hold, STARTING),
        [SSH_EV_NO_ANSWER] = CELL(kill_late, STARTING),
        [SSH_EV_STOP] = CELL(send_line, CLOSING),
        [SSH_EV_ENDED] = CELL(ended_starting, DONE),
    },
    [SSH_READY] = {
        [SSH_EV_SEND] = CELL(send_line, READY),
        [SSH_EV_READY_LINE] = CELL(out, READY),
        [SSH_EV_OUT_LINE] = CELL(out, READY),
        [SSH_EV_ERR_LINE] = CELL(err_out, READY),
        [SSH_EV_STOP] = CELL(send_line, STOPPING),
        [SSH_EV_ENDED] = CELL(ended_ready, DONE),
    },
    [SSH_CLOSING] = {
        [SSH_EV_SEND] = CELL(send_line, CLOSING),
        [SSH_EV_READY_LINE] = CELL(ready, STOPPING),
        [SSH_EV_OUT_LINE] = CELL(out, CLOSING),
        [SSH_EV_ERR_LINE] = CELL(hold, CLOSING),
        [SSH_EV_ENDED] = CELL(ended, DONE),
    },
    [SSH_STOPPING] = {
        [SSH_EV_SEND] = CELL(send_line, STOPPING),
        [SSH_EV_READY_LINE] = CELL(out, STOPPING),
        [SSH_EV_OUT_LINE] = CELL(out, STOPPING),
        [SSH_EV_ERR_LINE] = CELL(err_out, STOPPING),
        [SSH_EV_ENDED] = CELL(ended, DONE),
    },
    [SSH_DONE] = {{0}},
    [SSH_LOST] = {{0}},
};
#undef CELL
/* clang-format on */

void ssh__host_event(ssh_run_t *r, ssh_host_t *h, ssh_event_t ev, const char *p, size_t n) {
    const ssh_cell_t *c = &ssh_table[h->phase][ev];
    if (c->act == NULL)
        return;
    h->phase = c->next;
    c->act(r, h, p, n);
}

void ssh__schedule(ssh_run_t *r) {
    if (r->phase != SSH_RUN_GOING)
        return;
    int starting = 0;
    for (size_t i = 0; i < r->hosts.n; i++)
        starting += r->v[i].phase == SSH_WAITING || r->v[i].phase == SSH_STARTING;
    for (size_t i = 0; i < r->hosts.n && starting < r->spec->ssh_fanout; i++) {
        ssh_host_t *h = &r->v[i];
        if (h->phase != SSH_PENDING)
            continue;
        ssh__host_event(r, h, SSH_EV_START, NULL, 0);
        if (r->phase == SSH_RUN_STOPPING)
            return;
        starting += h->phase == SSH_WAITING || h->phase == SSH_STARTING;
    }
}

void ssh__send_all(ssh_run_t *r, const char *line) {
    for (size_t i = 0; i < r->hosts.n; i++)
        ssh__host_event(r, &r->v[i], SSH_EV_SEND, line, strlen(line));
}

void ssh__stop(ssh_run_t *r, int sig) {
    if (r->phase == SSH_RUN_STOPPING)
        return;
    r->phase = SSH_RUN_STOPPING;
    r->stop_deadline =
        r->io->now(r) + (uint64_t)(r->spec->shutdown_timeout * 1000.0) + SSH_STOP_EXTRA_S * 1000ull;
    r->io->stop_at(r, r->stop_deadline);
    char line[32];
    int n = snprintf(line, sizeof line, "%s %d\n", AGENT_SSH_SIGNAL, sig);
    for (size_t i = 0; i < r->hosts.n; i++)
        ssh__host_event(r, &r->v[i], SSH_EV_STOP, line, (size_t)n);
}

void ssh__grace_over(ssh_run_t *r) {
    if (r->phase == SSH_RUN_STOPPING)
        return;
    DDP_INFO("hosts still running %d s after a failed one: stopping them",
             SSH_FAIL_GRACE_MS / 1000);
    ssh__stop(r, SIGTERM);
}

void ssh__tell_down(ssh_run_t *r) {
    if (r->told_down || r->n_down == 0 || r->phase == SSH_RUN_STOPPING)
        return;
    for (size_t i = 0; i < r->hosts.n; i++) {
        ssh_phase_t p = r->v[i].phase;
        if (p == SSH_PENDING || p == SSH_WAITING || p == SSH_STARTING)
            return;
    }
    r->told_down = 1;
    ddp_buf_t b = DDP_BUF_INIT;
    for (size_t i = 0; i < r->hosts.n; i++)
        if (r->v[i].phase == SSH_LOST) {
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
