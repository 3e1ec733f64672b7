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
 * waiter either way; what the second connection costs it is the per-connection figure.
 *
 * Store candidates (--rdzv_backend=etcd with --rdzv_conf etcd_stores): a store that does not
 * lead refuses the JOIN with DDP_ERDZV_MOVED and the leader's "HOST:PORT" as the text; the agent
 * connects there (without blocking: the other agents go on meanwhile), then closes its connection
 * to the candidate and JOINs again (s->redirects). While no
 * leader is named it answers RDZV_NOT_YET: the same JOIN again RDZV_SIM_RETRY_MS later, on the
 * same connection; so too when the store named refuses the connection (a leader that died and
 * whose lease has not lapsed yet). With candidates set (rdzv_sim_set_candidates), an agent whose
 * store closes its connection or refuses it connects to the next candidate and JOINs again, as an
 * agent does once its store's host dies. Without a redirect or candidates, nothing of this runs. */
#ifndef RDZV_SIM_H
#define RDZV_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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
    int store;                 /* its connection's store: an index in s->stores */
    uint64_t retry_ns;         /* 0, or when its JOIN goes again (reconnected first if fd < 0) */
    uint32_t counted;          /* the expectation its latest assignment was counted for */
    int pend_fd;               /* a connection under way (a redirect, a candidate), or -1 */
    int pend_queued;           /* ... or waiting in s->conn_wait to start */
    int pend_store, pend_why;  /* ... to s->stores[pend_store], for PEND_REDIRECT/_CANDIDATE */
    size_t cand_next;          /* the candidate it tries next (an index in s->cands, mod n) */
    size_t cand_tries;         /* candidates that refused it in a row */
} rdzv_sim_agent_t;

enum { PEND_REDIRECT = 1, PEND_CANDIDATE = 2 };
/* epoll data of a connection under way: the agent's index with this bit. */
#define RDZV_SIM_PENDING (1ull << 63)

/* A "not yet" answer, or every candidate refusing the connection: the JOIN again this much later
 * (the agent's pace). */
#define RDZV_SIM_RETRY_MS 50
/* Stores an agent may be sent to: the first, the redirects' targets, the candidates. */
#define RDZV_SIM_STORES_MAX 16
/* rdzv_sim_expect's round that counts each agent's first assignment, to any round. */
#define RDZV_SIM_ANY_ROUND (-2)

/* Connections under way at once, at most. One host sends 16,000 SYNs through loopback in a burst
 * that its backlog of received packets (net.core.netdev_max_backlog, 1,000) drops, and a dropped
 * SYN costs its connect a second: hosts of their own would each send one. */
#define RDZV_SIM_CONNECTING_MAX 256

/* A first-in first-out queue of agent indexes. */
typedef struct rdzv_sim_queue {
    size_t *q, head, len, cap;
} rdzv_sim_queue_t;

typedef struct rdzv_sim_store {
    struct sockaddr_storage sa;
    socklen_t sa_len;
    char name[280]; /* "HOST:PORT", as the redirect named it */
} rdzv_sim_store_t;

typedef struct rdzv_sim {
    int epfd;
    uint16_t port;        /* the first store's, on 127.0.0.1 (s->stores[0]) */
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
    uint64_t spare_answers; /* DDP_ERDZV_SPARE replies (each spare JOINs again) */
    rdzv_sim_store_t stores[RDZV_SIM_STORES_MAX];
    size_t n_stores;
    size_t cands[RDZV_SIM_STORES_MAX]; /* rdzv_sim_set_candidates: indexes in stores, in order */
    size_t n_cands;
    /* Agents whose JOIN goes again, in the order it falls due (every delay is the same). */
    rdzv_sim_queue_t retry;
    /* Connections under way, and the agents whose connection waits for one of them to end. */
    size_t connecting;
    rdzv_sim_queue_t conn_wait;
    uint32_t expect_gen;
    uint64_t redirects;       /* DDP_ERDZV_MOVED answers */
    uint64_t stale_redirects; /* ... to a store that refused the connection (asked again later) */
    uint64_t not_yet;         /* RDZV_NOT_YET answers (each JOINs again later) */
    uint64_t reconnects;      /* connections to a candidate after the store was lost */
    uint64_t refused_conns;   /* candidates that refused a connection meanwhile */
    char err[512];            /* why a call returned -1 */
} rdzv_sim_t;

/* Sets s up for run tmpl->run_id on 127.0.0.1:port. rejoin and progress as in rdzv_sim_t.
 * Returns 0 or -1 (s->err says why). Free with rdzv_sim_free. */
int rdzv_sim_init(rdzv_sim_t *s, uint16_t port, const rdzv_join_req_t *tmpl, int rejoin,
                  int progress);

/* The store candidates, "HOST:PORT+HOST:PORT..." (numeric addresses): an agent whose store is lost
 * tries them in order from the one after its store. Returns 0 or -1 (s->err says why). */
int rdzv_sim_set_candidates(rdzv_sim_t *s, const char *list);

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

/* Counts from now on the assignments to round `round` (s->assigned, s->last_assigned_ns);
 * RDZV_SIM_ANY_ROUND: each agent's first assignment from now on, whatever its round. */
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
