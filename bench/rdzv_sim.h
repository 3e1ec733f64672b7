/* SPDX-License-Identifier: Apache-2.0
 * rdzv_sim: many simulated agents in one process against a ddp-rendezvous started with --no-auth,
 * for the rendezvous benchmarks (bench_rdzv_join, bench_rdzv_scale). Each agent is one TCP
 * connection speaking the agent's side of docs/protocol-rdzv.md: JOIN; once assigned, a WAIT on
 * its round's end key and a HEARTBEAT (with its progress SET first, as an agent with
 * --heartbeat_timeout sends) every keep-alive interval; a new JOIN when the end key fires.
 * One epoll loop serves every connection, so the simulator's cost per event does not grow with
 * the number of agents.
 *
 * The real agent parks its WAIT on a second (watch) connection. Here it shares the control
 * connection, which the store allows (a parked WAIT does not hold back later replies, and the
 * replies are told apart by their first byte): two connections per agent would pass the
 * open-file limit of one process long before 16,000 agents. The store does the same work per
 * waiter either way; what the second connection costs it is the per-connection figure. */
#ifndef RDZV_SIM_H
#define RDZV_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "rdzv_proto.h"

typedef enum rdzv_sim_state {
    RDZV_SIM_IDLE,    /* connected, no JOIN sent */
    RDZV_SIM_JOINING, /* JOIN sent, no reply yet */
    RDZV_SIM_RUNNING, /* assigned: beats and waits for its round's end */
    RDZV_SIM_GONE,    /* connection closed (by us, or by the store for silence) */
} rdzv_sim_state_t;

typedef struct rdzv_sim_agent {
    int fd;
    rdzv_sim_state_t state;
    int silent;                /* sends no more keep-alives (a node that hangs) */
    int64_t round, group_rank; /* of its latest assignment; -1 before */
    uint64_t last_beat_ns;     /* its latest keep-alive went out then (0: none yet) */
    uint64_t beats;            /* keep-alives sent: its progress report's step */
    ddp_buf_t in;              /* reply bytes not parsed yet */
} rdzv_sim_agent_t;

typedef struct rdzv_sim {
    int epfd;
    uint16_t port;
    rdzv_join_req_t tmpl; /* run id and configuration every JOIN carries */
    rdzv_sim_agent_t *a;  /* owned */
    size_t n, cap;
    int rejoin;   /* park the end-of-round WAIT and re-JOIN when it fires */
    int progress; /* SET the progress key before each keep-alive */
    /* Keep-alives go round the agents in index order, spaced interval / n apart. */
    size_t beat_cursor;
    uint64_t beat_next_ns;
    /* Assignments to round `target` (rdzv_sim_expect): how many, and when the latest came. */
    int64_t target;
    size_t assigned;
    uint64_t last_assigned_ns;
    size_t closed_by_store; /* silent agents whose connection the store closed */
    uint64_t beats_sent, beats_refused;
    uint64_t spare_answers; /* DDP_ERDZV_SPARE replies (a spare's keep-alive; it JOINed again) */
    char err[512];          /* why a call returned -1 */
} rdzv_sim_t;

/* Sets s up for run tmpl->run_id on 127.0.0.1:port. rejoin and progress as in rdzv_sim_t.
 * Returns 0 or -1 (s->err says why). Free with rdzv_sim_free. */
int rdzv_sim_init(rdzv_sim_t *s, uint16_t port, const rdzv_join_req_t *tmpl, int rejoin,
                  int progress);

/* Closes every connection and frees s's memory. */
void rdzv_sim_free(rdzv_sim_t *s);

/* Raises the soft open-file limit to the hard one (a simulated agent is a descriptor). */
void rdzv_sim_raise_nofile(void);

/* Connects k more agents (VALIDATE sent). Returns the index of the first, or -1. */
long rdzv_sim_add(rdzv_sim_t *s, size_t k);

/* Sends the JOINs of agents [from, to) (encoded first, then written back to back). Returns 0 or
 * -1. */
int rdzv_sim_join(rdzv_sim_t *s, size_t from, size_t to);

/* Closes agent i's connection (the node leaves). */
void rdzv_sim_drop(rdzv_sim_t *s, size_t i);

/* Counts from now on the assignments to round `round` (s->assigned, s->last_assigned_ns). */
void rdzv_sim_expect(rdzv_sim_t *s, int64_t round);

/* Sends the keep-alives that are due, then waits up to timeout_ms for replies and handles them.
 * Returns 0, or -1 when an agent was refused or lost its connection unexpectedly. */
int rdzv_sim_step(rdzv_sim_t *s, int timeout_ms);

/* Steps until `want` agents hold an assignment to the expected round, or deadline_ns passes.
 * Returns 0, or -1 (s->err says why, with the count reached). */
int rdzv_sim_wait_assigned(rdzv_sim_t *s, size_t want, uint64_t deadline_ns);

/* Steps until deadline_ns, serving keep-alives. Returns 0 or -1. */
int rdzv_sim_idle_until(rdzv_sim_t *s, uint64_t deadline_ns);

/* Index of the agent holding group rank `rank` in the current round, or -1. */
long rdzv_sim_find_rank(const rdzv_sim_t *s, int64_t rank);

#endif
