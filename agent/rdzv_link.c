/* SPDX-License-Identifier: Apache-2.0
 * The agent's link to the rendezvous store as a phase x event -> action table: two connections
 * ("ctl" carries JOIN, HEARTBEAT, FAIL, ABORT and the exit barrier; "watch" holds a parked WAIT
 * on the running round's end key), the heartbeats with their spare connection, and reconnecting
 * to a lost store.
 *
 * A lost store that is not an agent's (the ddp-rendezvous daemon, restarted by systemd or by
 * hand; or a link that was down) is reconnected to for up to store_reconnect_timeout: the group
 * stops (EV_STORE_LOST) and the node JOINs again, carrying the newest round it was told and the
 * restarts it saw counted, so that a daemon that forgot the run numbers its rounds on and keeps
 * the count. An agent's store ends with that agent: when it closes the connection it is only
 * checked (AGENT_EMBEDDED_CHECK_MS), and losing it ends the job. A store this agent hosts cannot
 * be lost, and store_reconnect_timeout=0 reconnects to none. With the etcd backend every lost
 * store is reconnected to for store_reconnect_timeout, this agent's own included, each try at the
 * address the election names then (r->addr, rdzv_elect.c): a new leader's store.
 */
/* clang-format off */
/*
 * phase \ event | CONNECTED        | CONNECT_FAILED       | CLOSED, SILENT          | RETRY          | TICK
 * --------------+------------------+----------------------+-------------------------+----------------+-----------
 * UP            | -                | "unable to join";    | counted at an agent's   | -              | heartbeat
 *               |                  | close -> STOPPED,    | store's barrier:        |                | (see below)
 *               |                  | EV_RDZV_ERROR        | EV_BARRIER_DONE; may    |                |
 *               |                  |                      | reconnect: close, open  |                |
 *               |                  |                      | -> RECONNECTING (the    |                |
 *               |                  |                      | daemon's, or SILENT) or |                |
 *               |                  |                      | CHECKING (an agent's,   |                |
 *               |                  |                      | CLOSED), EV_STORE_LOST; |                |
 *               |                  |                      | else -> LOST,           |                |
 *               |                  |                      | EV_RDZV_ERROR           |                |
 * RECONNECTING  | count it; both   | retry in 100 ms; out | retry in 100 ms; out of | close, open,   | -
 *               | made -> UP       | of time: close ->    | time: close -> STOPPED, | EV_STORE_LOST  |
 *               |                  | STOPPED,EV_RDZV_ERROR| EV_RDZV_ERROR           |                |
 * CHECKING      | as RECONNECTING  | as RECONNECTING (its | as RECONNECTING         | as RECONNECTING| -
 *               |                  | agent is gone)       |                         |                |
 * LOST          | -                | as UP                | -                       | -              | heartbeat
 * STOPPED       | -                | -                    | -                       | -              | -
 */
/* clang-format on */

/* STOP: every phase but STOPPED closes the connections and timers -> STOPPED. A failed open
 * (RETRY, or the first loss) ends the job as running out of time does. "heartbeat": a parked
 * JOIN gets the waiting line instead; an unanswered heartbeat is checked against the keep-alive
 * bound (SILENT past it, a BEAT_FOR on the spare connection after 1.5 intervals); else this
 * node's progress and a HEARTBEAT go out. Callbacks of a closed connection (DDP_ECANCELED) are
 * dropped before the table. A follower (--rdzv_conf etcd_stores) meets a candidate, not the
 * store: its UP + CONNECT_FAILED goes to RECONNECTING for the join timeout, and every failed try
 * moves it to the next candidate (agent__elect_try_failed), each with a short connect bound. */
#include "rdzv_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>

#include <jansson.h>

#include "ddp_contract.h"
#include "ddp_log.h"
#include "rdzv_client.h"
#include "rdzv_round_calls.h"

/* Between two tries to reach a lost store when one failed past its connect (a dying daemon's
 * listener can still accept, then close). */
#define AGENT_RECONNECT_RETRY_MS 100
/* An agent's store that closed the connection is given this long to answer again: it is still
 * there when its server closed a node it had declared dead (this agent was stopped, or cut off),
 * and gone for good when its agent died (nobody serves the address again: refused at once). */
#define AGENT_EMBEDDED_CHECK_MS 2000

typedef void (*link_action_t)(struct agent_rdzv *r, int status, const char *errtext);

static void emit(agent_t *a, agent_event_t ev) {
    agent__event(a, ev, NULL);
}

/* How this agent connects to the store: its endpoint and token, trying for connect_timeout_ms,
 * and through the handshake within as long again: a stopped or hung store whose kernel still
 * accepts must not hold a try (a follower's candidate, a reconnection's window) for
 * read_timeout. */
static rdzv_client_opts_t store_opts(const struct agent_rdzv *r, int connect_timeout_ms) {
    rdzv_client_opts_t co = {
        .host = r->addr,
        .port = (uint16_t)r->port,
        .token = r->token->len ? r->token->data : NULL,
        .token_len = r->token->len,
        .run_id = r->a->cfg.job->run_id, /* the token may be the run's (rdzv_run_token) */
        .connect_timeout_ms = connect_timeout_ms,
        .io_timeout_ms = (int)r->a->cfg.job->rdzv.read_timeout_ms,
        .handshake_timeout_ms = connect_timeout_ms,
    };
    return co;
}

static void on_connected(void *arg, int status, const char *errtext) {
    if (status != DDP_ECANCELED)
        agent__link_event(arg, status == 0 ? LINK_EV_CONNECTED : LINK_EV_CONNECT_FAILED, status,
                          errtext);
}

static void on_conn_lost(void *arg, int status, const char *errtext) {
    (void)status;
    agent__link_lost(arg, errtext);
}

/* Opens the two connections to the store (ctl and watch), trying for connect_timeout_ms.
 * Returns 0 or a negative code (logged). */
static int link_open(struct agent_rdzv *r, int connect_timeout_ms) {
    agent_t *a = r->a;
    rdzv_client_opts_t co = store_opts(r, connect_timeout_ms);
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_aclient_connect(a->cfg.loop, &co, on_connected, r, &r->ctl, &err);
    if (rc == 0)
        rc = rdzv_aclient_connect(a->cfg.loop, &co, on_connected, r, &r->watch, &err);
    if (rc < 0) {
        DDP_ERROR("unable to connect to the rendezvous at %s:%d: %s", r->addr, r->port,
                  err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    rdzv_aclient_on_close(r->ctl, on_conn_lost, r);
    rdzv_aclient_on_close(r->watch, on_conn_lost, r);
    return 0;
}

/* Closes the spare heartbeat connection, if any (its pending BEAT_FOR completes cancelled). */
static void spare_close(struct agent_rdzv *r) {
    rdzv_aclient_close(r->spare, NULL, NULL);
    r->spare = NULL;
    r->spare_pending = 0;
}

/* Every phase + STOP: the connections and timers close; late callbacks find LINK_STOPPED. */
static void link_close(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    r->link = LINK_STOPPED;
    uv_timer_stop(&r->hb_timer);
    uv_timer_stop(&r->linger_timer);
    uv_timer_stop(&r->reconnect_timer);
    rdzv_aclient_close(r->ctl, NULL, NULL);
    rdzv_aclient_close(r->watch, NULL, NULL);
    r->ctl = r->watch = NULL;
    spare_close(r);
}

/* Out of the job once this node had stopped trying: closed, and the supervisor told. */
static void give_up(struct agent_rdzv *r) {
    link_close(r, 0, NULL);
    emit(r->a, EV_RDZV_ERROR);
}

/* Drops both connections and opens new ones, trying until the reconnect window closes (requests
 * queue on them meanwhile), then tells the supervisor, which stops the group (or settles the
 * exit barrier) and JOINs again on the new ones. Returns 0 or a negative code. */
static int reconnect_try(struct agent_rdzv *r) {
    agent_t *a = r->a;
    uint64_t end = r->reconnect_since_ms + r->reconnect_window_ms;
    uint64_t now = uv_now(a->cfg.loop);
    uint64_t left = end > now ? end - now : 1;
    /* Whatever was pending on the old connections completes with DDP_ECANCELED, later: the
     * callbacks drop that status before touching any of the state reset here. */
    rdzv_aclient_close(r->ctl, NULL, NULL);
    rdzv_aclient_close(r->watch, NULL, NULL);
    r->ctl = r->watch = NULL;
    r->hb_pending = 0;
    r->join_probe_pending = 0;
    spare_close(r);
    r->member = 0; /* the store that forgot the run forgot the member too */
    r->watch_round = -1;
    r->watch_waits = 0;
    r->join_status_pending = 0;
    agent__barrier_event(r, BARRIER_EV_RESET, 0, NULL);
    r->reconnect_pending = 2;
    int rc = link_open(r, agent__elect_connect_ms(r, left > INT_MAX ? INT_MAX : (int)left));
    if (rc < 0)
        return rc;
    emit(a, EV_STORE_LOST);
    return 0;
}

static void on_reconnect_timer(uv_timer_t *t) {
    agent__link_event(t->data, LINK_EV_RETRY, 0, NULL);
}

/* RECONNECTING, CHECKING + RETRY: the next try. */
static void link_retry(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    if (reconnect_try(r) < 0)
        give_up(r);
}

/* Schedules the next try AGENT_RECONNECT_RETRY_MS from now, while the window lasts. Returns 0,
 * or -ETIMEDOUT when the window is over (the caller ends the job). */
static int reconnect_again(struct agent_rdzv *r) {
    if (uv_is_active((uv_handle_t *)&r->reconnect_timer))
        return 0;
    if (uv_now(r->a->cfg.loop) + AGENT_RECONNECT_RETRY_MS >=
        r->reconnect_since_ms + r->reconnect_window_ms)
        return -ETIMEDOUT;
    return uv_timer_start(&r->reconnect_timer, on_reconnect_timer, AGENT_RECONNECT_RETRY_MS, 0);
}

/* UP + CLOSED or SILENT, when the store may come back: reconnect for up to
 * store_reconnect_timeout, or (check: an agent's store that closed the connection) for
 * AGENT_EMBEDDED_CHECK_MS. Returns 0, or a negative code when not even that could start. */
static int reconnect_begin(struct agent_rdzv *r, const char *why, int check) {
    agent_t *a = r->a;
    r->link = check ? LINK_CHECKING : LINK_RECONNECTING;
    r->reconnect_window_ms =
        check ? AGENT_EMBEDDED_CHECK_MS : (uint64_t)a->cfg.job->rdzv.store_reconnect_timeout_ms;
    int redirect = r->follower && r->follow_redirected;
    /* A redirect from the store this node's round runs at (a daemon candidate that lost its
     * lease names the new leader) ends that round as a loss does: said by store_moved's line,
     * and by the event. Before a JOIN was taken, a redirect is only the way to the store. */
    int round_lost = !redirect || r->member != 0;
    if (redirect)
        DDP_DEBUG("joining the rendezvous store at %s:%d, which a store candidate named", r->addr,
                  r->port);
    else if (check)
        DDP_WARN("the rendezvous store at %s:%d (served by the agent of another node) closed the "
                 "connection: %s; reconnecting if it still serves",
                 r->addr, r->port, why);
    else if (r->follower)
        DDP_WARN("lost the rendezvous store at %s:%d: %s; asking the store candidates "
                 "(--rdzv_conf etcd_stores) where it is now, for up to %gs "
                 "(--rdzv_conf store_reconnect_timeout)",
                 r->addr, r->port, why, r->reconnect_window_ms / 1000.0);
    else if (a->cfg.job->backend == AGENT_RDZV_ETCD && r->moved_from[0] != '\0')
        DDP_WARN("left the rendezvous store at %s: %s; reconnecting to the elected one at %s:%d, "
                 "for up to %gs (--rdzv_conf store_reconnect_timeout)",
                 r->moved_from, why, r->addr, r->port, r->reconnect_window_ms / 1000.0);
    else if (a->cfg.job->backend == AGENT_RDZV_ETCD)
        DDP_WARN("lost the rendezvous store at %s:%d: %s; reconnecting to the one etcd elects, "
                 "for up to %gs (--rdzv_conf store_reconnect_timeout)",
                 r->addr, r->port, why, r->reconnect_window_ms / 1000.0);
    else
        DDP_WARN("lost the rendezvous store at %s:%d: %s; reconnecting for up to %gs "
                 "(--rdzv_conf store_reconnect_timeout)",
                 r->addr, r->port, why, r->reconnect_window_ms / 1000.0);
    if (round_lost)
        agent__evlog(a, "rendezvous_store_lost", "{s:I}", "round", (json_int_t)a->as.round);
    r->reconnect_since_ms = uv_now(a->cfg.loop);
    if (a->cfg.job->backend == AGENT_RDZV_ETCD)
        agent__elect_store_lost(r);
    return reconnect_try(r);
}

/* UP + CLOSED or SILENT: a connection to the store failed or was lost while it mattered.
 * silent: the store did not answer heartbeats for the keep-alive bound, rather than close: this
 * node's network is as likely as the store to be at fault, so even an agent's store is tried
 * for as long as the daemon's. Every request pending on the connection fails with it: the first
 * loss moves the phase, and the others find it moved. */
static void store_lost_how(struct agent_rdzv *r, const char *errtext, int silent) {
    agent_t *a = r->a;
    char esc[AGENT_STORE_TEXT_MAX];
    const char *why = agent__store_text(errtext, (size_t)-1, "connection closed", esc);
    if (a->sup.state == SUP_BARRIER && agent__barrier_counted(r) && r->embedded) {
        /* Our arrival was counted; the hosting agent left once everyone had arrived. */
        DDP_DEBUG("store gone after the exit barrier: %s", why);
        emit(a, EV_BARRIER_DONE);
        return;
    }
    /* One this agent serves cannot be lost at all. Before the first JOIN reply nobody knows
     * whose it is: the daemon's, as far as this node can tell. With etcd the store is wherever
     * the election names it, this agent's included: the link follows it. */
    int etcd = a->cfg.job->backend == AGENT_RDZV_ETCD;
    if ((etcd || a->stores.store == NULL) && a->cfg.job->rdzv.store_reconnect_timeout_ms > 0 &&
        reconnect_begin(r, why, !etcd && r->embedded && !silent) == 0)
        return;
    r->link = LINK_LOST;
    DDP_ERROR("lost the rendezvous store at %s:%d%s: %s; this node is out of the job", r->addr,
              r->port, r->embedded ? " (served by the agent of another node)" : "", why);
    emit(a, EV_RDZV_ERROR);
}

static void link_lost(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status;
    store_lost_how(r, errtext, 0);
}

static void link_silent(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status;
    store_lost_how(r, errtext, 1);
}

/* RECONNECTING, CHECKING + CLOSED or SILENT: only the new connections report (the old ones were
 * closed): one that connected and was lost again (a daemon killed twice) is made again with the
 * other, or a JOIN sent on it would be lost with it. */
static void reconnect_lost(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status;
    char esc[AGENT_STORE_TEXT_MAX];
    int first = !uv_is_active((uv_handle_t *)&r->reconnect_timer); /* of this try's two */
    if (reconnect_again(r) == 0) {
        if (first)
            agent__elect_try_failed(r); /* a follower tries the next candidate */
        return;
    }
    DDP_ERROR("unable to reach the rendezvous store at %s:%d again within %gs: %s; this "
              "node is out of the job",
              r->addr, r->port, r->reconnect_window_ms / 1000.0,
              agent__store_text(errtext, (size_t)-1, "connection closed", esc));
    give_up(r);
}

/* RECONNECTING, CHECKING + CONNECTED: with a retry pending (the other connection failed), this
 * one is closed soon and not counted. */
static void reconnect_made(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    if (uv_is_active((uv_handle_t *)&r->reconnect_timer) || --r->reconnect_pending > 0)
        return;
    r->link = LINK_UP;
    uint64_t down = uv_now(r->a->cfg.loop) - r->reconnect_since_ms;
    if (r->follower) {
        /* A follower reaches candidates on its way to the store: the store is said when it
         * takes the JOIN (agent__elect_joined). */
        DDP_DEBUG("connected to the rendezvous store at %s:%d", r->addr, r->port);
        return;
    }
    DDP_WARN("reconnected to the rendezvous store at %s:%d after %.1f s", r->addr, r->port,
             down / 1000.0);
    agent__evlog(r->a, "rendezvous_store_reconnected", "{s:I}", "down_ms", (json_int_t)down);
}

/* RECONNECTING, CHECKING + CONNECT_FAILED: reached but refused (a daemon dying or still
 * starting): try again while time is left; the other connection's outcome no longer matters. */
static void reconnect_failed(struct agent_rdzv *r, int status, const char *errtext) {
    char esc[AGENT_STORE_TEXT_MAX];
    const char *why = agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc);
    int first = !uv_is_active((uv_handle_t *)&r->reconnect_timer); /* of this try's two */
    if (reconnect_again(r) == 0) {
        DDP_DEBUG("the rendezvous store at %s:%d is not back yet: %s", r->addr, r->port, why);
        if (first)
            agent__elect_try_failed(r); /* a follower tries the next candidate */
        return;
    }
    if (r->link == LINK_CHECKING)
        DDP_ERROR("lost the rendezvous store at %s:%d (served by the agent of another node, "
                  "which is gone): %s; this node is out of the job",
                  r->addr, r->port, why);
    else
        DDP_ERROR("unable to reach the rendezvous store at %s:%d again within "
                  "store_reconnect_timeout=%gs: %s; this node is out of the job",
                  r->addr, r->port, r->reconnect_window_ms / 1000.0, why);
    /* Closed first, so the other connection's failure does not say the same thing again. */
    give_up(r);
}

/* UP, LOST + CONNECT_FAILED: the store cannot be joined at all; a follower's first candidate
 * may be down or not started yet: it goes round them all for the join timeout. */
static void join_unreachable(struct agent_rdzv *r, int status, const char *errtext) {
    char esc[AGENT_STORE_TEXT_MAX];
    if (r->follower && r->link == LINK_UP) {
        DDP_DEBUG("the store candidate at %s:%d does not answer: %s; trying the next", r->addr,
                  r->port, agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
        r->link = LINK_RECONNECTING;
        r->reconnect_since_ms = uv_now(r->a->cfg.loop);
        r->reconnect_window_ms = (uint64_t)r->a->cfg.job->rdzv.join_timeout_ms;
        agent__elect_try_failed(r);
        if (reconnect_again(r) == 0)
            return;
    }
    DDP_ERROR("unable to join the rendezvous store at %s:%d: %s%s", r->addr, r->port,
              agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc),
              r->token->len == 0 ? " (agents read the job token from " DDP_ENV_TOKEN_NAMES ")"
                                 : "");
    give_up(r);
}

/* ---- heartbeats and the spare connection ---- */

static void on_heartbeat(void *arg, int status, const rdzv_round_reply_t *rep,
                         const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED)
        return;        /* a closed connection's: hb_pending was reset */
    r->hb_pending = 0; /* a lost store shows up on the watch connection */
    if (status == 0 && agent__reply_fenced(rep)) {
        /* The store no longer serves (its node lost the etcd leadership): lost now, not when
         * the connection's close is read. */
        agent__link_fenced(r, rep);
        return;
    }
    if (r->spare != NULL) {
        DDP_INFO("the rendezvous store answers on the control connection again after %.1f s; "
                 "heartbeats went on a spare connection meanwhile",
                 (uv_now(r->a->cfg.loop) - r->spare_since_ms) / 1000.0);
        spare_close(r);
    }
}

void agent__link_heartbeat(struct agent_rdzv *r) {
    if (rdzv_acall_heartbeat(r->ctl, r->a->cfg.job->run_id, on_heartbeat, r, NULL) == 0) {
        r->hb_pending = 1;
        r->hb_sent_ms = uv_now(r->a->cfg.loop);
    }
}

static void on_spare_beat(void *arg, int status, const rdzv_round_reply_t *rep,
                          const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED)
        return; /* closed: spare_pending was reset */
    r->spare_pending = 0;
    /* Status 1: not a member (its round is over, or another store): nothing was counted. */
    if (status == 0 && rep->status == 0)
        r->spare_answered_ms = uv_now(r->a->cfg.loop);
}

static void on_spare_connected(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    char esc[AGENT_STORE_TEXT_MAX];
    if (status == 0 || status == DDP_ECANCELED)
        return;
    /* Not reached yet (the link is still down): the next tick makes another. */
    DDP_DEBUG("spare heartbeat connection to %s:%d: %s", r->addr, r->port,
              agent__store_text(errtext, (size_t)-1, ddp_strerror(status), esc));
    spare_close(r);
}

static void on_spare_lost(void *arg, int status, const char *errtext) {
    (void)status, (void)errtext;
    spare_close(arg); /* the control connection decides whether the store is lost */
}

/* The spare path (see struct agent_rdzv): a BEAT_FOR on a fresh connection, made again when the
 * last one is itself stuck. A failure here is never the store's loss: the control connection
 * and the keep-alive bound decide that. */
static void spare_beat(struct agent_rdzv *r) {
    agent_t *a = r->a;
    uint64_t now = uv_now(a->cfg.loop);
    uint64_t stuck = (uint64_t)a->cfg.job->rdzv.keep_alive_interval_ms * 3 / 2;
    if (r->spare != NULL && r->spare_pending && now - r->spare_sent_ms >= stuck)
        spare_close(r);
    if (r->spare == NULL) {
        rdzv_client_opts_t co = store_opts(r, (int)stuck);
        if (rdzv_aclient_connect(a->cfg.loop, &co, on_spare_connected, r, &r->spare, NULL) < 0) {
            r->spare = NULL;
            return;
        }
        rdzv_aclient_on_close(r->spare, on_spare_lost, r);
        if (r->spare_since_ms < r->hb_sent_ms)
            r->spare_since_ms = now;
    }
    if (r->spare_pending)
        return;
    if (rdzv_acall_beat_for(r->spare, a->cfg.job->run_id, r->member, r->member_key, on_spare_beat,
                            r, NULL) == 0) {
        r->spare_pending = 1;
        r->spare_sent_ms = now;
    }
}

static void on_join_probe(void *arg, int status, const uint8_t *reply, size_t len,
                          const char *errtext) {
    (void)reply, (void)len, (void)errtext;
    if (status != DDP_ECANCELED) /* a closed connection's: join_probe_pending was reset */
        ((struct agent_rdzv *)arg)->join_probe_pending = 0;
}

/* While this node's JOIN is parked, an agent whose store is another's and whose election (if
 * any) does not watch it (c10d and static against a daemon or another node's agent; etcd's
 * followers and readers, etcd_stores and etcd_candidates) learns nothing when that store goes
 * silent (its host cut off: no close ever comes), and the JOIN would wait out its reply timeout
 * (join_timeout), past the others' join timeout. So it pings the store on the watch connection
 * (idle during a JOIN) at each tick (a PING costs the store nothing per member, where the run's
 * counts would cost it a walk of them, thousands of times a second at 16,000 waiting nodes); one
 * unanswered for the keep-alive bound is the store's silence. */
static void join_probe(struct agent_rdzv *r, uint64_t bound) {
    uint64_t now = uv_now(r->a->cfg.loop);
    int watched = r->a->cfg.job->backend == AGENT_RDZV_ETCD && !r->follower && !r->reader;
    if (watched || agent__rdzv_serving(r) || r->watch == NULL)
        return;
    if (r->join_probe_pending) {
        if (now - r->join_probe_sent_ms > bound) {
            char why[96];
            snprintf(why, sizeof why, "no answer while joining for %llu ms",
                     (unsigned long long)(now - r->join_probe_sent_ms));
            agent__link_event(r, LINK_EV_SILENT, 0, why);
        }
        return;
    }
    if (rdzv_aclient_ping(r->watch, on_join_probe, r, NULL) == 0) {
        r->join_probe_pending = 1;
        r->join_probe_sent_ms = now;
    }
}

static void on_hb_timer(uv_timer_t *t) {
    agent__link_event(t->data, LINK_EV_TICK, 0, NULL);
}

/* UP, LOST + TICK. (While reconnecting, heartbeats would only queue: the new connections carry
 * the JOIN.) */
static void link_tick(struct agent_rdzv *r, int status, const char *errtext) {
    (void)status, (void)errtext;
    agent_t *a = r->a;
    const agent_job_t *job = a->cfg.job;
    /* The server declares a node dead after this much silence: a node that hears nothing back
     * for as long is cut off (network, a stopped store) and must not go on alone. */
    uint64_t bound =
        (uint64_t)job->rdzv.keep_alive_interval_ms * (uint64_t)job->rdzv.keep_alive_max_attempt;
    /* Behind a parked JOIN a heartbeat would only queue; the store does not check joiners. */
    if (a->sup.state == SUP_JOINING) {
        agent__rdzv_join_progress(r);
        join_probe(r, bound);
        return;
    }
    if (!r->hb_pending) {
        agent__rdzv_progress_send(r);
        agent__link_heartbeat(r);
        return;
    }
    uint64_t now = uv_now(a->cfg.loop);
    /* A BEAT_FOR the store counted since then: it hears this node. */
    uint64_t heard = r->spare_answered_ms > r->hb_sent_ms ? r->spare_answered_ms : r->hb_sent_ms;
    uint64_t waited = now - heard;
    if (waited > bound) {
        char why[96];
        snprintf(why, sizeof why, "no answer to heartbeats for %llu ms",
                 (unsigned long long)waited);
        agent__link_event(r, LINK_EV_SILENT, 0, why);
    } else if (r->member != 0 &&
               now - r->hb_sent_ms >= (uint64_t)job->rdzv.keep_alive_interval_ms * 3 / 2) {
        spare_beat(r);
    }
}

/* clang-format off */
#define RECONNECT_ROW {                           \
        [LINK_EV_CONNECTED] = reconnect_made,        \
        [LINK_EV_CONNECT_FAILED] = reconnect_failed, \
        [LINK_EV_CLOSED] = reconnect_lost,           \
        [LINK_EV_SILENT] = reconnect_lost,           \
        [LINK_EV_RETRY] = link_retry,                \
        [LINK_EV_STOP] = link_close,                 \
    }
static const link_action_t link_table[LINK_NPHASES][LINK_NEVENTS] = {
    [LINK_UP] = {
        [LINK_EV_CONNECT_FAILED] = join_unreachable,
        [LINK_EV_CLOSED] = link_lost,
        [LINK_EV_SILENT] = link_silent,
        [LINK_EV_TICK] = link_tick,
        [LINK_EV_STOP] = link_close,
    },
    /* CHECKING differs from RECONNECTING in its window and its last message alone. */
    [LINK_RECONNECTING] = RECONNECT_ROW,
    [LINK_CHECKING] = RECONNECT_ROW,
    /* Said once: later losses are the same one. The group is being stopped meanwhile. */
    [LINK_LOST] = {
        [LINK_EV_CONNECT_FAILED] = join_unreachable,
        [LINK_EV_TICK] = link_tick,
        [LINK_EV_STOP] = link_close,
    },
    [LINK_STOPPED] = {0},
};
#undef RECONNECT_ROW
/* clang-format on */

void agent__link_event(struct agent_rdzv *r, agent_link_event_t ev, int status,
                       const char *errtext) {
    link_action_t act = link_table[r->link][ev];
    if (act != NULL)
        act(r, status, errtext);
}

int agent__link_start(struct agent_rdzv *r, int connect_timeout_ms) {
    agent_t *a = r->a;
    int rc = link_open(r, agent__elect_connect_ms(r, connect_timeout_ms));
    if (rc < 0)
        return rc;
    r->hb_timer.data = r->linger_timer.data = r->reconnect_timer.data = r;
    uint64_t hb = (uint64_t)a->cfg.job->rdzv.keep_alive_interval_ms;
    if ((rc = uv_timer_init(a->cfg.loop, &r->hb_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &r->linger_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &r->reconnect_timer)) < 0 ||
        (rc = uv_timer_start(&r->hb_timer, on_hb_timer, hb, hb)) < 0)
        DDP_ERROR("unable to start the heartbeat timer: %s", uv_strerror(rc));
    return rc;
}
