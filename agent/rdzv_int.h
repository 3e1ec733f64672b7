/* SPDX-License-Identifier: Apache-2.0
 * The agent's side of a multi-node rendezvous, private to its files:
 *   rdzv.c          start and stop, hosting the store, rounds (JOIN, the watch on the round's
 *                   end, FAIL, ABORT, the waiting line), lingering while others hang up
 *   rdzv_link.c     the link to the store as a machine (agent_link_phase_t): its connections,
 *                   heartbeats and the spare heartbeat connection, reconnecting to a lost store
 *   rdzv_barrier.c  the exit barrier as a machine (agent_barrier_phase_t)
 *   rdzv_elect.c    the etcd backend: the election of the agent that serves the store
 *   rdzv_durable.c  the etcd backend: the run's DONE mark and quarantine records in etcd
 * The barrier's phases are nested in the link's: a store lost at the barrier is sealed again on
 * the new connections while they are being made, so the two run side by side; a reconnection
 * resets the barrier (BARRIER_EV_RESET), and a loss at an agent's store after this node was
 * counted ends the barrier (agent__barrier_counted). */
#ifndef AGENT_RDZV_INT_H
#define AGENT_RDZV_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agent_int.h"
#include "ddp_escape.h"
#include "rdzv_async_client.h"
#include "rdzv_etcd_outage.h"
#include "rdzv_proto.h"

/* Room for one text from the store escaped for the log (a reply's error text is at most 1024
 * bytes; a longer escape is cut). */
#define AGENT_STORE_TEXT_MAX 1536

/* The link's phases (the table in rdzv_link.c). */
typedef enum agent_link_phase {
    LINK_UP,           /* the connections are made, or being made for the first time */
    LINK_RECONNECTING, /* the daemon's store was lost: new connections, store_reconnect_timeout */
    LINK_CHECKING,     /* an agent's store closed the connection: does it still serve? */
    LINK_LOST,         /* this node is out of the job (said once); the group is being stopped */
    LINK_STOPPED,      /* connections and timers closed: every late callback is ignored */
    LINK_NPHASES
} agent_link_phase_t;

typedef enum agent_link_event {
    LINK_EV_CONNECTED,      /* a connection was made */
    LINK_EV_CONNECT_FAILED, /* a connection failed before it was made (status, errtext) */
    LINK_EV_CLOSED,         /* a connection closed, or a request failed with it (errtext) */
    LINK_EV_SILENT,         /* heartbeats unanswered for the keep-alive bound (errtext) */
    LINK_EV_RETRY,          /* the retry timer after a failed reconnection */
    LINK_EV_TICK,           /* the heartbeat timer */
    LINK_EV_STOP,           /* agent__rdzv_stop */
    LINK_NEVENTS
} agent_link_event_t;

/* The exit barrier's phases (the table in rdzv_barrier.c). "Settling": the round ended (or the
 * store was lost) while this node was at the barrier, so a seal decides the verdict. */
typedef enum agent_barrier_phase {
    BARRIER_NONE,              /* not at the barrier (or a JOIN or a reconnection reset it) */
    BARRIER_ARRIVING,          /* this node's arrival (ADD 1) is on its way */
    BARRIER_ARRIVING_SETTLING, /* ... and the round ended meanwhile: seal once counted */
    BARRIER_COUNTED,           /* counted: waiting for the done key in slices, or releasing */
    BARRIER_COUNTED_SETTLING,  /* counted, and the round ended: the seal (or release) decides */
    BARRIER_SETTLING,          /* sealed on new connections (not counted by this store) */
    BARRIER_NPHASES
} agent_barrier_phase_t;

typedef enum agent_barrier_event {
    BARRIER_EV_ENTER,   /* the workers succeeded: arrive (agent__rdzv_exit_barrier) */
    BARRIER_EV_RESET,   /* a JOIN, or a reconnection: the barrier is behind */
    BARRIER_EV_SETTLE,  /* the round ended or the store was lost (agent__rdzv_barrier_settle) */
    BARRIER_EV_COUNTED, /* the arrival's reply: not the last, no seal */
    BARRIER_EV_LAST,    /* ... the last arrival, no seal before it */
    BARRIER_EV_LATE,    /* ... a seal came first */
    BARRIER_EV_ARRIVE_FAILED, /* the arrival failed (errtext) */
    BARRIER_EV_SLICE_END,     /* a WAIT slice ran out, close_timeout has not */
    BARRIER_EV_TIMED_OUT,     /* the WAIT ran out at close_timeout */
    BARRIER_EV_DONE,          /* the done key was SET, or the WAIT or SET failed (status) */
    BARRIER_EV_PASSED,        /* the seal's reply: every node had arrived */
    BARRIER_EV_BROKEN,        /* the seal's reply: not every node had */
    BARRIER_EV_SEAL_FAILED,   /* the seal failed (errtext) */
    BARRIER_NEVENTS
} agent_barrier_event_t;

/* This node's FAIL of the round it joined last: only the first FAIL of a round counts, and it is
 * the round's root cause. */
typedef enum agent_fail_state {
    FAIL_NONE,    /* none sent */
    FAIL_SENT,    /* sent, not answered (yet, or the store was lost) */
    FAIL_COUNTED, /* counted: the root cause is here */
    FAIL_IGNORED, /* the round had ended already: the root cause is elsewhere */
} agent_fail_state_t;

/* Whether the store this agent serves has loaded the run's records from etcd (rdzv_durable.c). */
typedef enum agent_records {
    AGENT_RECORDS_NONE,    /* not leading */
    AGENT_RECORDS_LOADING, /* leading: reading them, or the records lease */
    AGENT_RECORDS_READY    /* loaded: the store serves */
} agent_records_t;

struct agent_rdzv {
    agent_t *a;
    rdzv_aclient_t *ctl, *watch;
    const char *addr; /* the endpoint, numeric (the job's rdzv_addr) */
    int port;
    char host[RDZV_HOST_MAX + 1]; /* this node as the others reach it */
    const ddp_buf_t *token;       /* the job's; may be empty */
    agent_link_phase_t link;
    agent_barrier_phase_t barrier;
    uv_timer_t hb_timer;
    uv_timer_t linger_timer;
    uint64_t linger_until;
    agent_event_t linger_done; /* emitted when the lingering ends */
    int hb_pending;            /* a HEARTBEAT on ctl awaits its reply */
    uint64_t hb_sent_ms;
    /* The spare heartbeat path. A control connection that lost a heartbeat to a network outage
     * retransmits it on TCP's exponential backoff: seconds after the link is back, past the
     * keep-alive bound. When a heartbeat goes unanswered for 1.5 intervals, BEAT_FOR goes on a
     * fresh connection (no backoff), naming this node's member and key, until the control
     * connection answers again. */
    int64_t member, member_key; /* from the last JOIN reply; member 0: none yet */
    rdzv_aclient_t *spare;      /* the fresh connection, or NULL */
    int spare_pending;          /* a BEAT_FOR on it awaits its reply */
    uint64_t spare_sent_ms;     /* uv_now() of that BEAT_FOR */
    uint64_t spare_answered_ms; /* uv_now() of the last BEAT_FOR the store counted */
    uint64_t spare_since_ms;    /* uv_now() when the spare path opened (for the log line) */
    uint64_t barrier_deadline;  /* uv_now() ms when the exit barrier's close_timeout runs out */
    int64_t watch_round;        /* the round the newest watch WAIT is for, -1 none */
    int watch_waits;            /* watch WAITs sent and not answered yet (FIFO: newest last) */
    uint64_t join_sent_ms;      /* uv_now() when the parked JOIN was sent */
    uint64_t join_report_at;    /* uv_now() of the next waiting line */
    uint64_t join_report_gap;
    int join_status_pending; /* an RDZV_STATUS for the waiting line is on the watch connection */
    /* A follower or reader (no etcd watch names a new store) checks the store it JOINs: */
    int join_probe_pending;      /* a counts-only RDZV_STATUS on the watch connection */
    uint64_t join_probe_sent_ms; /* uv_now() when it was sent */
    int spare_said;              /* waiting as a spare was logged (until the next round joined) */
    /* The root cause, as the store decides it (the first FAIL of a round counts): */
    agent_fail_state_t fail; /* this node's FAIL of its round, and what the store made of it */
    char root_cause[AGENT_STORE_TEXT_MAX]; /* the run failed: the store's root cause (escaped) */
    /* Carried across a lost store (rdzv_join_req_t): */
    int64_t round_told;    /* the newest round a JOIN reply assigned, -1 none */
    int embedded;          /* that reply said the store is an agent's (RDZV_STORE_EMBEDDED) */
    int64_t restarts_seen; /* the most restarts_used any reply said */
    /* Reconnecting to a lost store (LINK_RECONNECTING, LINK_CHECKING): */
    int reconnect_pending;        /* of the two new connections, how many have not connected */
    uint64_t reconnect_since_ms;  /* uv_now() when the store was lost */
    uint64_t reconnect_window_ms; /* how long to try: store_reconnect_timeout, or the check */
    uv_timer_t reconnect_timer;   /* the next try after one that failed */
    /* The etcd backend (rdzv_elect.c); addr points at leader_addr: */
    struct rdzv_etcd *etcd;
    struct rdzv_etcd_leader *leader;
    const struct agent_elect_hooks *elect_hooks;
    int self_port;                     /* this agent's store's port */
    char self_host[RDZV_HOST_MAX + 1]; /* ... and address as published (r->host, or etcd_stores') */
    int elected;                       /* the election named a store (leader_addr:port) */
    int leading;                       /* ... this agent's own */
    int said_serving;                  /* the last "store now at" line said this node serves it */
    int etcd_down; /* a start or a reader said etcd does not answer: said once until it does */
    rdzv_etcd_outage_t outage;   /* once elected, a candidate's: probes after a failed call */
    uv_timer_t resign_timer;     /* the bound on resigning (agent__elect_stop) */
    void (*resigned)(void *arg); /* while resigning: what runs once done (agent__elect_stop) */
    void *resigned_arg;
    int elect_failed; /* no store was elected at the start: the first JOIN fails the job */
    /* A reader (not a candidate, --rdzv_conf etcd_candidates): reads the leader key alone. */
    int reader;
    uv_timer_t read_timer;    /* the next read: jittered */
    int read_pending;         /* a read on its way */
    int read_stale;           /* the store was lost: read until the key names another */
    uint64_t read_backoff_ms; /* the next retry's bound, doubled up to AGENT_ETCD_READ_BACKOFF_MS */
    /* Store candidates at addresses known in advance (--rdzv_conf etcd_stores), resolved: */
    int n_stores;
    struct agent_store_addr {
        char addr[RDZV_HOST_MAX + 1];
        int port;
    } stores[AGENT_ETCD_STORES_MAX];
    int store_index;           /* this agent's candidate among them, -1 none */
    int leader_gone;           /* the election reopened (RDZV_LEADER_NONE): nobody known to lead */
    uv_timer_t campaign_timer; /* candidate i > 0: its campaign starts i x the stagger late */
    /* A follower (not a candidate of etcd_stores): JOINs through the candidates, never etcd. */
    int follower;
    int follow_at;                /* the candidate it tries now */
    struct agent_store_addr lost; /* the store it lost (port 0: none since a JOIN) */
    uint64_t lost_since_ms;       /* uv_now() when it lost it */
    int stale_moves;              /* candidates naming the lost store, in a row */
    int follow_quiet;             /* the move being made is a try at the lost store: no line */
    int follow_redirected;        /* while agent__elect_moved moves the link: it leaves a
                                     candidate for the store it named, no store was lost */
    uint64_t follow_backoff_ms;   /* the next "not yet" or stale answer's wait bound */
    /* The records that outlive the store (rdzv_durable.c): */
    struct rdzv_etcd_records *records_keeper; /* loads and writes them while this agent leads */
    agent_records_t records;                  /* loaded into the store yet? */
    void (*records_flushed)(struct agent_rdzv *r); /* agent__records_flush's, while it waits */
    uv_timer_t join_retry_timer;            /* a JOIN the store answered "not yet": asked again */
    char leader_addr[RDZV_HOST_MAX + 1];    /* the elected store's address, numeric */
    char moved_from[RDZV_HOST_MAX + 16];    /* while store_moved lets an UP link go: the store
                                               left ("ADDR:PORT"), for the link's line */
    char self_value[RDZV_HOST_MAX + 16];    /* this agent's store as published: "ADDR:PORT" */
    char leader_key[RDZV_RUN_ID_MAX + 600]; /* <prefix>/<run_id>/leader */
};

/* A store not serving yet (RDZV_NOT_YET: an elected one loading its records) is asked again. */
#define AGENT_JOIN_RETRY_MS 50

/* Whether this agent serves the run's rendezvous store: it hosts the store at the endpoint, or
 * (etcd) the election chose its store. */
static inline int agent__rdzv_serving(const struct agent_rdzv *r) {
    return r->a->stores.store != NULL && (r->a->cfg.job->backend != AGENT_RDZV_ETCD || r->leading);
}

/* Text that came from the store (a reply's error text, a key's value, a client error quoting the
 * server), escaped for the log: whoever runs or reaches the store cannot put control bytes on the
 * operator's terminal or forge log lines. len (size_t)-1: s is NUL-terminated (NULL reads as
 * dflt). Borrowed: valid until buf (AGENT_STORE_TEXT_MAX bytes) is reused. */
static inline const char *agent__store_text(const void *s, size_t len, const char *dflt,
                                            char *buf) {
    if (s == NULL)
        s = dflt, len = (size_t)-1;
    if (len == (size_t)-1)
        len = strlen(s);
    ddp_str_escape(buf, AGENT_STORE_TEXT_MAX, s, len);
    return buf;
}

/* rdzv_link.c: feeds one event to the link's table; status and errtext come with connection
 * outcomes and losses (0 and NULL otherwise). */
void agent__link_event(struct agent_rdzv *r, agent_link_event_t ev, int status,
                       const char *errtext);
/* rdzv_link.c: opens ctl and watch, trying for connect_timeout_ms, then starts the heartbeat
 * timer (the linger and retry timers are set up too). Returns 0 or a negative code (logged). */
int agent__link_start(struct agent_rdzv *r, int connect_timeout_ms);
/* rdzv_link.c: queues one HEARTBEAT on ctl. */
void agent__link_heartbeat(struct agent_rdzv *r);

static inline void agent__link_lost(struct agent_rdzv *r, const char *errtext) {
    agent__link_event(r, LINK_EV_CLOSED, 0, errtext);
}

int agent__elect_moved(struct agent_rdzv *r, const void *text, size_t len); /* below */

/* Whether rep is a store's refusal as one that no longer serves the rendezvous (rdzv_server.h
 * may_serve: its node lost the etcd leadership, DDP_ECLOSED; a fenced write, DDP_EFENCED): a
 * JOIN's, or any other command's (RDZV_REPLY_REFUSED). The connection closes after it. */
static inline int agent__reply_fenced(const rdzv_round_reply_t *rep) {
    int refused =
        rep->status == RDZV_REPLY_REFUSED || (rep->cmd == RDZV_CMD_RDZV_JOIN && rep->status != 0);
    return refused &&
           (rep->code == DDP_ECLOSED || rep->code == DDP_EFENCED || rep->code == DDP_ERDZV_MOVED);
}

/* A request answered by agent__reply_fenced: the store is lost at once, as if it had closed
 * the connection, and the link follows the election (its reconnection goes to the store etcd
 * names). Its text (escaped) says why. */
static inline void agent__link_fenced(struct agent_rdzv *r, const rdzv_round_reply_t *rep) {
    /* A candidate naming the store that serves: the link goes there (agent__elect_moved). */
    if (rep->code == DDP_ERDZV_MOVED && agent__elect_moved(r, rep->text.data, rep->text.len) >= 0)
        return;
    char why[AGENT_STORE_TEXT_MAX];
    /* Not an address: lost all the same; the JOIN that follows fails on it (rdzv.c on_join). */
    agent__link_lost(r, agent__store_text(rep->text.data, rep->text.len, "refused", why));
}

/* What the election tells the rest of the agent (rdzv.c), from the loop: the store the link meets
 * at is now addr:port (this agent's own when r->leading), and this agent, which led, lost its
 * lease (why). The election calls nothing else of the agent. */
typedef struct agent_elect_hooks {
    /* via: NULL when etcd named it, else the store candidate that named it (a follower's). */
    void (*moved)(struct agent_rdzv *r, const char *addr, int port, const char *via);
    void (*lost)(struct agent_rdzv *r, const char *why);
} agent_elect_hooks_t;

/* rdzv_elect.c: r->host, this node's address as the others reach it: --local_addr, or the source
 * of the route to the first etcd member (the cluster's network). */
void agent__elect_host(struct agent_rdzv *r);
/* rdzv_elect.c: reads --rdzv_conf etcd_stores (resolved into r->stores) and decides this agent's
 * part: r->store_index (a candidate at a known address) or r->follower. Returns 0 or DDP_EUSAGE
 * (logged, naming the key). */
int agent__elect_roles(struct agent_rdzv *r);
/* rdzv_elect.c: stands for election with this node's store (store_host:store_port) and waits, a
 * bounded time, until the election names a store (hooks->moved); a follower (no store) starts
 * at the first candidate at once, without etcd. Returns 0, 1 when none was named in time (etcd
 * unreachable; logged, naming the endpoint) or a negative code (logged). */
int agent__elect_start(struct agent_rdzv *r, const char *store_host, int store_port,
                       const agent_elect_hooks_t *hooks);
/* rdzv_elect.c: leaves the election (deletes the leader key if ours, revokes the lease, so that
 * the others elect a new leader at once rather than after lease_ttl) and closes the etcd client.
 * Returns 1 when that goes on in the background, for AGENT_ETCD_RESIGN_MS at most: done(arg) runs
 * from the loop once it is over (the loop must turn until then); 0 when it was over at once
 * (nothing to resign, or called again while resigning: done runs once, for the first call). */
int agent__elect_stop(struct agent_rdzv *r, void (*done)(void *arg), void *arg);
/* rdzv_elect.c: the link lost its store (rdzv_link.c): a reader reads the leader key again, at
 * a jittered moment, until it names another store or the link is back up. */
void agent__elect_store_lost(struct agent_rdzv *r);
/* rdzv_elect.c: a try to reach the store failed (refused, timed out, lost at once): a follower
 * tries the next candidate. */
void agent__elect_try_failed(struct agent_rdzv *r);
/* rdzv_elect.c: the connect bound of one try, at most left_ms: a follower gives each candidate
 * a short one (a dead host's connect would take them all). */
int agent__elect_connect_ms(const struct agent_rdzv *r, int left_ms);
/* rdzv_elect.c: a store answered DDP_ERDZV_MOVED with text (its leader's "HOST:PORT"): follows it
 * (hooks->moved: the link reconnects there) and returns 0; returns 1 when the request should be
 * sent again on the same connection after agent__elect_backoff_ms (the store names the one this
 * follower lost, whose lease has not lapsed yet, or this very store; or any other for an agent
 * that watches the leader key), -1 when the text is not an address (not logged: a JOIN so
 * answered fails, another command takes the store for lost). */
int agent__elect_moved(struct agent_rdzv *r, const void *text, size_t len);
/* rdzv_elect.c: how long to wait before asking a store again that answered "not yet" or named a
 * lost store: AGENT_JOIN_RETRY_MS for a candidate; for a follower, jittered and doubling to 1 s
 * (thousands of followers ask the same few candidates). */
uint64_t agent__elect_backoff_ms(struct agent_rdzv *r);
/* rdzv_elect.c: a store took this node's JOIN: a follower forgets the store it lost. */
void agent__elect_joined(struct agent_rdzv *r);

/* rdzv_durable.c: the run's DONE mark and quarantine records in etcd (rdzv_etcd_records.h).
 * agent__records_start: their keeper on r->etcd, and the store's rdzv_server_durable_t hooks,
 * which write them (0 or a negative code, logged); agent__records_lead: this agent leads under
 * token: loads the records into its store, then reports the store (elect_hooks->moved) and keeps
 * the records lease alive; agent__records_stop: the leadership ended; agent__records_close: the
 * keeper goes (before the client). */
int agent__records_start(struct agent_rdzv *r);
void agent__records_lead(struct agent_rdzv *r, int64_t token);
void agent__records_stop(struct agent_rdzv *r);
void agent__records_close(struct agent_rdzv *r);
/* rdzv_durable.c: then(r) once no record's write is on its way (at once when none is), from the
 * loop: a leader that resigns writes what its store decided first. */
void agent__records_flush(struct agent_rdzv *r, void (*then)(struct agent_rdzv *r));

/* rdzv_barrier.c: feeds one event to the barrier's table. */
void agent__barrier_event(struct agent_rdzv *r, agent_barrier_event_t ev, int status,
                          const char *errtext);
/* rdzv_barrier.c: nonzero once this node's arrival was counted at the barrier of its round. */
int agent__barrier_counted(const struct agent_rdzv *r);

/* The hosting agent keeps the store up after the exit barrier, after stopping the run, or after
 * a JOIN refused (the run failed), until the other nodes have hung up (they have their answer
 * then), for at most this long. */
#define AGENT_HOST_LINGER_MS 2000

/* rdzv.c: the round passed its exit barrier: tells the store the run is done (FINISH: its spares
 * leave, no round forms after it), then agent__rdzv_leave(EV_BARRIER_DONE). */
void agent__rdzv_finish(struct agent_rdzv *r);
/* rdzv.c: emits done now, or, when this agent hosts the store, once the other nodes have hung up
 * or linger_ms has passed (AGENT_HOST_LINGER_MS; UINT64_MAX: only once they have hung up). */
void agent__rdzv_leave(struct agent_rdzv *r, agent_event_t done, uint64_t linger_ms);
/* rdzv.c: while a JOIN is parked, asks for the run's status when a waiting line is due. */
void agent__rdzv_join_progress(struct agent_rdzv *r);
/* rdzv.c: this node's progress to the store, before a keep-alive (heartbeat supervision). */
void agent__rdzv_progress_send(struct agent_rdzv *r);

#endif
