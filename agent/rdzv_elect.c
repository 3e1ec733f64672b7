/* SPDX-License-Identifier: Apache-2.0
 * The etcd backend's side of the agent (docs/ARCHITECTURE.md "The rendezvous on etcd"): every
 * agent of the run serves an embedded store on a port of its own and stands for election
 * (rdzv_etcd_leader) on <prefix>/<run_id>/leader with that store's address as the value. The
 * leader's agent serves the rendezvous and joins its own store like the others; the others read
 * the address and connect their link to it. A non-leader's store is never published, so nobody
 * joins it.
 *
 * When the leadership moves (the leader's lease lapsed: its host died or was cut off) the link
 * follows the address: its reconnection tries whatever the election names now, and the rounds
 * go on as after a restarted daemon (JOIN carries the round and the restarts). A leader that
 * loses its lease closes its store at once and its node leaves the job (exit 1): two stores never
 * serve one run at the same time.
 *
 * With --rdzv_conf etcd_stores the candidates serve at addresses known in advance (node rank i
 * the i-th) and every other agent is a follower: it never talks to etcd. It JOINs a candidate;
 * one that does not lead answers with the leader's address (DDP_ERDZV_MOVED), or "not yet" while
 * the election names none, and the link goes there. A lost store sends it round the candidates
 * again. So etcd carries K candidates whatever the job's size. */
#include "rdzv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ddp_addr.h"
#include "ddp_log.h"
#include "rdzv_etcd_leader.h"
#include "rdzv_etcd_outage.h"
#include "rdzv_etcd_store.h"
#include "rdzv_server.h"

/* How long the start waits for etcd to name a leader (etcd unreachable, a lease refused: the
 * election retries meanwhile), and the bound on each call to etcd. */
#define AGENT_ETCD_START_MS 10000
#define AGENT_ETCD_CALL_MS 2000
/* While etcd is away: how often it is asked whether it answers again. */
#define AGENT_ETCD_PROBE_MS 1000
/* The bound on resigning at the exit (deleting the leader key, revoking the lease). */
#define AGENT_ETCD_RESIGN_MS 1000
/* A reader's first read (and its read after a lost store) is drawn uniformly over
 * max_nodes x this many microseconds: 2,000 reads a second at most, which one etcd member
 * answers through its JSON gateway on a 2-core machine (docs/BENCHMARKS.md; 4,000 a second
 * collapsed into timeouts and resends there): 8 s at 16,000 nodes, 0.5 s at 1,000. */
#define AGENT_ETCD_READ_SPREAD_US 500
/* A reader's retries (no leader yet, etcd away, the key still naming the lost store): the first
 * waits 125..250 ms, each next up to twice as long, at most this bound or the spread window,
 * whichever is longer (so that retries after timeouts stay as spread as the first reads). */
#define AGENT_ETCD_READ_BACKOFF_FIRST_MS 250
#define AGENT_ETCD_READ_BACKOFF_MS 2000
/* etcd_stores: candidate i > 0 campaigns i x this late at the start, so that the first candidate
 * usually leads and the followers, which try it first, JOIN without a redirect. */
#define AGENT_ETCD_STORES_STAGGER_MS 250
/* A follower's connect bound for one candidate (a dead host's connect would take them all). */
#define AGENT_FOLLOW_CONNECT_MS 1000
/* A follower asks a candidate that answered "not yet" (or named the store it lost) again after a
 * wait drawn in the upper half of a bound that starts at the first and doubles up to the job's:
 * --nnodes max / AGENT_FOLLOW_ASKS_PER_S seconds, within the two bounds. So all the followers of a
 * job ask the candidates at most about that many times a second while an election takes its
 * lease_ttl (16,000 nodes: once a second each), and a small job's followers learn the new leader
 * within 100 ms of its election. */
#define AGENT_FOLLOW_BACKOFF_FIRST_MS 50
#define AGENT_FOLLOW_BACKOFF_MIN_MS 100
#define AGENT_FOLLOW_BACKOFF_MAX_MS 2000
#define AGENT_FOLLOW_ASKS_PER_S 16000
/* The connect bound of a try at the lost store itself (a candidate named it again): a dead
 * process refuses at once, a dead host does not answer; neither is worth a candidate's bound. */
#define AGENT_FOLLOW_LOST_CONNECT_MS 250
/* Candidates that name the store a follower lost are not believed within lease_ttl of the loss
 * (its lease has not lapsed yet: a new leader is coming); past that, AGENT_FOLLOW_STALE_TRIES
 * times, and the next time the follower tries that store anyway, in case it came back and was
 * elected again. */
#define AGENT_FOLLOW_STALE_TRIES 3

/* etcd answered: the outage watcher hears it (and says it is back, after an outage), and a start
 * or a reader that had said etcd does not answer says it answers again, once. */
static void etcd_back(struct agent_rdzv *r) {
    rdzv_etcd_outage_answered(&r->outage);
    if (!r->etcd_down)
        return;
    r->etcd_down = 0;
    DDP_WARN("etcd at %s answers again", rdzv_etcd_endpoint(r->etcd));
}

/* The outage watcher's two lines (rdzv_etcd_outage.h: a failed call is an outage only when the
 * probe after it fails too, so one member lost while another answers costs no line). */
static void on_outage(void *arg, int down, const char *why) {
    struct agent_rdzv *r = arg;
    if (r->resigned != NULL)
        return;
    if (down)
        DDP_WARN("etcd unreachable: %s; running workers go on, nothing new is decided until it "
                 "answers",
                 why != NULL ? why : "no answer");
    else
        DDP_WARN("etcd at %s answers again", rdzv_etcd_endpoint(r->etcd));
}

static void on_leader(void *arg, rdzv_leader_event_t ev, const uint8_t *value, size_t value_len,
                      int64_t revision, const char *why) {
    struct agent_rdzv *r = arg;
    char addr[RDZV_HOST_MAX + 1];
    int port;
    switch (ev) {
    case RDZV_LEADER_LEADING:
        etcd_back(r);
        r->leader_gone = 0;
        r->leading = 1;
        /* The store serves, and the link meets it, once the run's records are in it. */
        agent__records_lead(r, revision);
        break;
    case RDZV_LEADER_OBSERVED:
        etcd_back(r);
        if (rdzv_etcd_store_addr_parse(value, value_len, addr, sizeof addr, &port) < 0) {
            char esc[AGENT_STORE_TEXT_MAX];
            DDP_WARN("etcd at %s: the leader key holds '%s', not a store's address; waiting for "
                     "another leader",
                     rdzv_etcd_endpoint(r->etcd), agent__store_text(value, value_len, "", esc));
            break;
        }
        r->leader_gone = 0;
        r->elect_hooks->moved(r, addr, port, NULL);
        break;
    case RDZV_LEADER_NONE: r->leader_gone = 1; break; /* followers asking are told "not yet" */
    case RDZV_LEADER_LOST:
        if (r->leading) {
            r->leading = 0;
            agent__records_stop(r);
            r->elect_hooks->lost(r, why);
            break;
        }
        /* A candidate that did not lead lost only its lease: etcd is away. */
        __attribute__((fallthrough));
    case RDZV_LEADER_ERROR:
        if (!r->elected) {
            if (!r->etcd_down)
                DDP_WARN("%s; retrying for up to %d s", why != NULL ? why : "etcd does not answer",
                         AGENT_ETCD_START_MS / 1000);
            r->etcd_down = 1;
            break;
        }
        DDP_DEBUG("etcd: %s", why != NULL ? why : "no answer");
        rdzv_etcd_outage_failed(&r->outage);
        break;
    }
}

/* A uniform draw in [0, n) milliseconds, from the kernel's generator: agents started at the same
 * moment on many hosts must not draw the same. */
static uint64_t jitter_ms(uint64_t n) {
    uint64_t v = 0;
    if (n == 0)
        return 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint64_t)uv_hrtime() ^ ((uint64_t)getpid() << 20);
    return v % n;
}

static uint64_t read_spread_ms(const struct agent_rdzv *r) {
    return (uint64_t)r->a->cfg.job->max_nodes * AGENT_ETCD_READ_SPREAD_US / 1000;
}

static void on_read_timer(uv_timer_t *t);

/* The next retry: half the back-off bound plus a draw over the other half, then the bound
 * doubles, up to the larger of AGENT_ETCD_READ_BACKOFF_MS and the spread window. */
static void read_retry(struct agent_rdzv *r) {
    uint64_t b = r->read_backoff_ms, cap = read_spread_ms(r);
    if (cap < AGENT_ETCD_READ_BACKOFF_MS)
        cap = AGENT_ETCD_READ_BACKOFF_MS;
    r->read_backoff_ms = b * 2 > cap ? cap : b * 2;
    uv_timer_start(&r->read_timer, on_read_timer, b / 2 + jitter_ms(b / 2), 0);
}

static void on_read(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    struct agent_rdzv *r = arg;
    r->read_pending = 0;
    if (r->etcd == NULL || r->resigned != NULL || status == DDP_ECANCELED)
        return;
    if (status < 0) {
        /* The back-off is the reader's probe: no probe timer, whose read a second per agent
         * would be the load the readers exist to avoid. */
        if (!r->etcd_down)
            DDP_WARN("etcd unreachable: %s; reading the leader key again after a back-off",
                     errtext != NULL ? errtext : "no answer");
        r->etcd_down = 1;
        read_retry(r);
        return;
    }
    etcd_back(r);
    char addr[RDZV_HOST_MAX + 1];
    int port;
    if (res->n_kvs == 0 || rdzv_etcd_store_addr_parse(res->kvs[0].value, res->kvs[0].value_len,
                                                      addr, sizeof addr, &port) < 0) {
        read_retry(r); /* nobody leads yet (or not with an address): read again */
        return;
    }
    if (r->read_stale && r->elected && strcmp(addr, r->leader_addr) == 0 && r->port == port) {
        /* The lost store's lease has not lapsed yet; a link back up needs no other store. */
        if (r->link != LINK_UP)
            read_retry(r);
        else
            r->read_stale = 0;
        return;
    }
    r->read_stale = 0;
    r->read_backoff_ms = AGENT_ETCD_READ_BACKOFF_FIRST_MS;
    r->elect_hooks->moved(r, addr, port, NULL);
}

static void on_read_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (r->etcd == NULL || r->read_pending)
        return;
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_etcd_get(r->etcd, r->leader_key, strlen(r->leader_key), 0, 0, on_read, r, &err) < 0) {
        DDP_DEBUG("etcd: %s", err.text);
        read_retry(r);
        return;
    }
    r->read_pending = 1;
}

static void follow_set(struct agent_rdzv *r, int i);
static int follow_next(const struct agent_rdzv *r);

void agent__elect_store_lost(struct agent_rdzv *r) {
    if (r->follower) {
        if (r->follow_redirected) { /* the address is the named store's already */
            r->follow_redirected = 0;
            return;
        }
        /* Round the candidates from the next one; one that names the lost store is not
         * believed at once (agent__elect_moved). */
        r->lost = (struct agent_store_addr){.port = r->port};
        r->lost_since_ms = uv_now(r->a->cfg.loop);
        snprintf(r->lost.addr, sizeof r->lost.addr, "%s", r->leader_addr);
        r->stale_moves = 0;
        follow_set(r, follow_next(r));
        return;
    }
    if (!r->reader || r->etcd == NULL || r->read_timer.data == NULL || r->read_pending ||
        uv_is_active((uv_handle_t *)&r->read_timer))
        return;
    r->read_stale = 1;
    r->read_backoff_ms = AGENT_ETCD_READ_BACKOFF_FIRST_MS;
    uv_timer_start(&r->read_timer, on_read_timer, jitter_ms(read_spread_ms(r)), 0);
}

/* Whether this agent stands for election: always with etcd_candidates=0; otherwise only with a
 * node rank below it. Without a node rank (the rendezvous assigns one) it stands: a job whose
 * agents know no rank elects as if every agent were a candidate. */
static int is_candidate(const agent_job_t *job) {
    if (job->etcd.stores != NULL)
        return 1; /* agent__elect_roles made the others followers */
    if (job->etcd.follow_only)
        return 0;
    return job->etcd.candidates <= 0 || job->node_rank < 0 || job->node_rank < job->etcd.candidates;
}

/* The store's rdzv_server_set_may_serve check: it serves the rendezvous only while this agent
 * leads by the clock now (a leader resumed past its lease refuses a JOIN on the turn before its
 * lease-loss timer tells it), and not yet while it loads the run's records. */
static int may_serve(void *arg, const char *run_id) {
    (void)run_id; /* the agent's store serves its own run alone */
    struct agent_rdzv *r = arg;
    if (r->leader == NULL || !rdzv_etcd_leader_leading(r->leader))
        return 0;
    return r->records == AGENT_RECORDS_READY ? 1 : RDZV_NOT_YET;
}

/* The store's rdzv_server_set_redirect: a candidate that does not lead names the store that
 * does, or says "not yet" while the election names none (at the start, or after the leader key
 * went with its lease) or names this very address (a candidate of etcd_stores started again
 * where its previous agent served: that one's key stays until its lease lapses; refusing would
 * send this agent's own link, which follows the key here, round a refused reconnection at once,
 * again and again). A leader deposed by the clock knows no other: refused, with no address. */
static int redirect(void *arg, const char *run_id, char *out, size_t cap) {
    (void)run_id;
    struct agent_rdzv *r = arg;
    if (r->leader == NULL) /* a later candidate before its campaign: "not yet" */
        return r->etcd != NULL && !r->elected ? RDZV_NOT_YET : 0;
    if (r->leading)
        return 0;
    if (!r->elected || r->leader_gone)
        return RDZV_NOT_YET;
    rdzv_etcd_store_addr_format(out, cap, r->leader_addr, r->port);
    return strcmp(out, r->self_value) == 0 ? RDZV_NOT_YET : 1;
}

/* ---- followers (--rdzv_conf etcd_stores) ---- */

int agent__elect_roles(struct agent_rdzv *r) {
    const agent_job_t *job = r->a->cfg.job;
    r->store_index = -1;
    if (job->etcd.stores == NULL)
        return 0;
    const char *cur = job->etcd.stores, *e;
    size_t len;
    char host[RDZV_HOST_MAX + 1];
    int port, rc;
    while (r->n_stores < AGENT_ETCD_STORES_MAX &&
           (rc = rdzv_etcd_store_list_next(&cur, &e, &len, host, sizeof host, &port)) != 0) {
        if (rc < 0) { /* the launcher checked the list: a caller of agent_run's own */
            DDP_ERROR("--rdzv_conf etcd_stores: '%.*s' is not HOST:PORT", (int)len, e);
            return DDP_EUSAGE;
        }
        /* A name is resolved here, once, so that the addresses compare with what the candidates
         * publish. Another's name that does not resolve yet (a pod not up: Kubernetes publishes
         * its name with it) is kept: the client resolves it at each connect. */
        struct agent_store_addr *st = &r->stores[r->n_stores];
        st->port = port;
        ddp_err_t err;
        ddp_err_clear(&err);
        if (ddp_addr_resolve(host, st->addr, sizeof st->addr, &err) < 0) {
            if (!job->etcd.follow_only && job->node_rank == r->n_stores) {
                DDP_ERROR("--rdzv_conf etcd_stores: '%.*s' (this node's, node rank %d): %s",
                          (int)len, e, job->node_rank, err.text);
                return DDP_EUSAGE;
            }
            DDP_DEBUG("--rdzv_conf etcd_stores: '%.*s': %s; resolved at each connect", (int)len, e,
                      err.text);
            snprintf(st->addr, sizeof st->addr, "%s", host);
        }
        r->n_stores++;
    }
    if (!job->etcd.follow_only && job->node_rank >= 0 && job->node_rank < r->n_stores)
        r->store_index = job->node_rank;
    else
        r->follower = 1;
    return 0;
}

/* The follower's next try goes to candidate i (no line: a candidate is not the store; the
 * workers are told the store that takes the JOIN, rdzv.c). */
static void follow_set(struct agent_rdzv *r, int i) {
    r->follow_at = i;
    snprintf(r->leader_addr, sizeof r->leader_addr, "%s", r->stores[i].addr);
    r->port = r->stores[i].port;
    r->elected = 1;
}

static int is_lost(const struct agent_rdzv *r, const char *addr, int port) {
    return r->lost.port == port && strcmp(r->lost.addr, addr) == 0;
}

/* The candidate after the one tried last, passing over the lost store (when another is left):
 * candidates that still name it send the follower there now and then (agent__elect_moved). */
static int follow_next(const struct agent_rdzv *r) {
    int i = r->follow_at;
    for (int k = 0; k < r->n_stores; k++) {
        i = (i + 1) % r->n_stores;
        if (!is_lost(r, r->stores[i].addr, r->stores[i].port))
            return i;
    }
    return (r->follow_at + 1) % r->n_stores;
}

void agent__elect_try_failed(struct agent_rdzv *r) {
    if (r->follower)
        follow_set(r, follow_next(r));
}

int agent__elect_connect_ms(const struct agent_rdzv *r, int left_ms) {
    if (!r->follower)
        return left_ms;
    int bound = is_lost(r, r->leader_addr, r->port) ? AGENT_FOLLOW_LOST_CONNECT_MS
                                                    : AGENT_FOLLOW_CONNECT_MS;
    return left_ms > bound ? bound : left_ms;
}

static uint64_t jitter_ms(uint64_t n);

uint64_t agent__elect_backoff_ms(struct agent_rdzv *r) {
    if (!r->follower)
        return AGENT_JOIN_RETRY_MS;
    uint64_t cap = (uint64_t)r->a->cfg.job->max_nodes * 1000 / AGENT_FOLLOW_ASKS_PER_S;
    cap = cap < AGENT_FOLLOW_BACKOFF_MIN_MS   ? AGENT_FOLLOW_BACKOFF_MIN_MS
          : cap > AGENT_FOLLOW_BACKOFF_MAX_MS ? AGENT_FOLLOW_BACKOFF_MAX_MS
                                              : cap;
    uint64_t b = r->follow_backoff_ms ? r->follow_backoff_ms : AGENT_FOLLOW_BACKOFF_FIRST_MS;
    r->follow_backoff_ms = b * 2 > cap ? cap : b * 2;
    return b / 2 + jitter_ms(b / 2);
}

void agent__elect_joined(struct agent_rdzv *r) {
    /* Said once a store takes the JOIN: a follower reaches candidates on its way, which are not
     * the store (their connections are said at debug). */
    if (r->follower && r->lost.port != 0)
        DDP_WARN("rendezvous store found at %s:%d, %.1f s after the loss of %s:%d", r->addr,
                 r->port, (double)(uv_now(r->a->cfg.loop) - r->lost_since_ms) / 1000.0,
                 r->lost.addr, r->lost.port);
    r->lost.port = 0;
    r->stale_moves = 0;
    r->follow_backoff_ms = 0;
}

int agent__elect_moved(struct agent_rdzv *r, const void *text, size_t len) {
    char addr[RDZV_HOST_MAX + 1], via[RDZV_HOST_MAX + 16];
    int port;
    if (rdzv_etcd_store_addr_parse(text, len, addr, sizeof addr, &port) < 0)
        return -1; /* the caller says so */
    if (strcmp(addr, r->leader_addr) == 0 && port == r->port)
        return 1; /* this very store: it will serve once its records are in */
    /* An agent with an election watches the leader key (a candidate, or an observer of the
     * daemons' election) and goes where the key says: its watch tells it of every new leader. A
     * store that names another is asked again shortly, never followed: its view may lag the
     * key, and a link sent to a store the key no longer names would knock there for its whole
     * reconnect window, with no event from the watch to call it back. Followers and readers have
     * no watch: they follow. */
    if (r->leader != NULL) {
        DDP_DEBUG("the rendezvous store at %s:%d names %s:%d; following the leader key "
                  "instead, asking it again",
                  r->addr, r->port, addr, port);
        return 1;
    }
    /* Within lease_ttl of the loss the lost store cannot have been elected again (its lease
     * lapses first): a candidate naming it is behind. Past that, every fourth such answer is
     * tried. */
    uint64_t since = uv_now(r->a->cfg.loop) - r->lost_since_ms;
    if (r->follower && is_lost(r, addr, port) &&
        (since < (uint64_t)r->a->cfg.job->etcd.lease_ttl_s * 1000 ||
         ++r->stale_moves % (AGENT_FOLLOW_STALE_TRIES + 1) != 0)) {
        DDP_DEBUG("the store candidate at %s:%d still names the lost store %s:%d; asking again",
                  r->addr, r->port, addr, port);
        return 1;
    }
    rdzv_etcd_store_addr_format(via, sizeof via, r->leader_addr, r->port);
    /* Both flags hold for the move alone: an UP link lets its store go from inside the hook
     * (reconnect_begin reads follow_redirected then); one already reconnecting just retries at
     * the new address, and a flag left set would make the next real loss a silent redirect
     * (no warning, no rendezvous_store_lost, and the lost store tried again first). */
    r->follow_redirected = r->follower;
    /* A try at the lost store in case it came back is no news: said at debug. */
    r->follow_quiet = r->follower && is_lost(r, addr, port);
    r->elect_hooks->moved(r, addr, port, via);
    r->follow_quiet = 0;
    r->follow_redirected = 0;
    return 0;
}

static void on_start_timer(uv_timer_t *t) {
    (void)t;
}

void agent__elect_host(struct agent_rdzv *r) {
    const agent_job_t *job = r->a->cfg.job;
    if (job->local_addr != NULL) {
        snprintf(r->host, sizeof r->host, "%s", job->local_addr);
        return;
    }
    rdzv_etcd_store_local_host(job->etcd.endpoints, r->host, sizeof r->host);
}

/* Stands for election (or, follow_only, observes it): a lease, the campaign txn, the watch. */
static int campaign(struct agent_rdzv *r) {
    const agent_job_t *job = r->a->cfg.job;
    rdzv_etcd_leader_opts_t lo = {.key = r->leader_key,
                                  .key_len = strlen(r->leader_key),
                                  .value = job->etcd.follow_only ? NULL : r->self_value,
                                  .value_len = job->etcd.follow_only ? 0 : strlen(r->self_value),
                                  .ttl_s = job->etcd.lease_ttl_s,
                                  .cb = on_leader,
                                  .arg = r};
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_etcd_leader_start(r->etcd, &lo, &r->leader, &err);
    if (rc < 0)
        DDP_ERROR("etcd at %s: %s", job->etcd.endpoints, err.text[0] ? err.text : ddp_strerror(rc));
    return rc;
}

static void on_campaign_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    if (r->etcd != NULL && r->leader == NULL && r->resigned == NULL)
        (void)campaign(r); /* logged; the start's wait then ends unelected */
}

int agent__elect_start(struct agent_rdzv *r, const char *store_host, int store_port,
                       const agent_elect_hooks_t *hooks) {
    agent_t *a = r->a;
    const agent_job_t *job = a->cfg.job;
    int rc;
    r->self_port = store_port;
    snprintf(r->self_host, sizeof r->self_host, "%s", store_host != NULL ? store_host : "");
    r->elect_hooks = hooks;
    if ((rc = uv_timer_init(a->cfg.loop, &r->resign_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &r->read_timer)) < 0 ||
        (rc = uv_timer_init(a->cfg.loop, &r->campaign_timer)) < 0)
        return rc;
    r->resign_timer.data = r;
    r->read_timer.data = r;
    r->campaign_timer.data = r;
    if (r->follower) {
        /* No etcd client: the candidates name the store. */
        DDP_INFO("etcd: a follower (node rank %d): joining through the store candidates %s "
                 "(--rdzv_conf etcd_stores), without talking to etcd",
                 job->node_rank, job->etcd.stores);
        follow_set(r, 0);
        return 0;
    }
    rdzv_etcd_opts_t eo = {.endpoints = job->etcd.endpoints,
                           .timeout_ms = AGENT_ETCD_CALL_MS,
                           .user = job->etcd.user,
                           .password = job->etcd.password,
                           .ca_file = job->etcd.cacert,
                           .cert_file = job->etcd.cert,
                           .key_file = job->etcd.key};
    ddp_err_t err;
    ddp_err_clear(&err);
    if ((rc = rdzv_etcd_new(a->cfg.loop, &eo, &r->etcd, &err)) < 0) {
        DDP_ERROR("etcd at %s: %s", job->etcd.endpoints, err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    snprintf(r->leader_key, sizeof r->leader_key, "%s/%s/leader", job->etcd.prefix, job->run_id);
    if ((rc = rdzv_etcd_outage_init(&r->outage, a->cfg.loop, r->etcd, r->leader_key,
                                    AGENT_ETCD_PROBE_MS, on_outage, r)) < 0)
        return rc;
    if (store_host != NULL)
        rdzv_etcd_store_addr_format(r->self_value, sizeof r->self_value, store_host, store_port);
    r->reader = job->etcd.follow_only == 0 && !is_candidate(job);
    uint64_t start_ms = AGENT_ETCD_START_MS;
    if (r->reader) {
        DDP_INFO("etcd: not a store candidate (node rank %d, etcd_candidates=%d): reading the "
                 "leader key without a lease or a watch",
                 job->node_rank, job->etcd.candidates);
        r->read_backoff_ms = AGENT_ETCD_READ_BACKOFF_FIRST_MS;
        start_ms += read_spread_ms(r);
        uv_timer_start(&r->read_timer, on_read_timer, jitter_ms(read_spread_ms(r)), 0);
    } else if (r->store_index > 0) {
        /* A later candidate of etcd_stores campaigns a little late (the first usually leads). */
        uint64_t late = (uint64_t)r->store_index * AGENT_ETCD_STORES_STAGGER_MS;
        start_ms += late;
        uv_timer_start(&r->campaign_timer, on_campaign_timer, late, 0);
    } else if ((rc = campaign(r)) < 0) {
        return rc;
    }
    rdzv_server_set_may_serve(a->stores.store, may_serve, r);
    rdzv_server_set_redirect(a->stores.store, redirect, r);
    /* What the store refuses (a fenced command, an excluded host, a finished run) is said on
     * the serving node too. */
    rdzv_server_set_log(a->stores.store, DDP_LOG_WARN, rdzv_server_log_to_ddp, NULL);
    if ((rc = agent__records_start(r)) < 0)
        return rc;
    /* The link needs the store's address: the loop turns here (before any other part of the
     * agent has a handle on it) until the election names one, for a bounded time. */
    uv_timer_t t;
    if ((rc = uv_timer_init(a->cfg.loop, &t)) < 0)
        return rc;
    uv_timer_start(&t, on_start_timer, start_ms, 0);
    while (!r->elected && uv_is_active((uv_handle_t *)&t))
        uv_run(a->cfg.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    /* The closed timer's callback runs on the next turn, while t is still in scope. */
    uv_run(a->cfg.loop, UV_RUN_NOWAIT);
    if (!r->elected) {
        DDP_ERROR("etcd at %s: no rendezvous store elected within %d s (etcd unreachable or "
                  "refusing the lease); this node is out of the job",
                  job->etcd.endpoints, (int)(start_ms / 1000));
        return 1;
    }
    return 0;
}

/* Closes what is left of the election: the timer, the candidate (if not closing already) and the
 * client (which cancels whatever call is still on its way). */
static void elect_close(struct agent_rdzv *r) {
    if (r->resign_timer.data != NULL && !uv_is_closing((uv_handle_t *)&r->resign_timer))
        uv_close((uv_handle_t *)&r->resign_timer, NULL);
    rdzv_etcd_outage_close(&r->outage);
    if (r->read_timer.data != NULL && !uv_is_closing((uv_handle_t *)&r->read_timer))
        uv_close((uv_handle_t *)&r->read_timer, NULL);
    if (r->campaign_timer.data != NULL && !uv_is_closing((uv_handle_t *)&r->campaign_timer))
        uv_close((uv_handle_t *)&r->campaign_timer, NULL);
    agent__records_close(r);
    rdzv_etcd_leader_close(r->leader, NULL, NULL);
    r->leader = NULL;
    rdzv_etcd_close(r->etcd, NULL, NULL);
    r->etcd = NULL;
}

static void resign_end(struct agent_rdzv *r) {
    void (*done)(void *) = r->resigned;
    if (done == NULL)
        return;
    r->resigned = NULL;
    elect_close(r);
    done(r->resigned_arg);
}

static void on_resigned(void *arg) {
    struct agent_rdzv *r = arg;
    r->leader = NULL; /* freed after this call */
    resign_end(r);
}

static void on_resign_timer(uv_timer_t *t) {
    resign_end(t->data);
}

/* The candidate resigns: deletes its key (if ours) and revokes its lease, then on_resigned. */
static void resign_now(struct agent_rdzv *r) {
    if (r->resigned != NULL && r->leader != NULL)
        rdzv_etcd_leader_close(r->leader, on_resigned, r);
}

int agent__elect_stop(struct agent_rdzv *r, void (*done)(void *arg), void *arg) {
    if (r->resigned != NULL)
        return 1;
    r->leading = 0;
    if (r->a->stores.store != NULL)
        rdzv_server_set_durable(r->a->stores.store, NULL, NULL);
    if (r->reader)
        uv_timer_stop(&r->read_timer);
    if (r->leader == NULL || r->etcd == NULL || r->resign_timer.data == NULL ||
        uv_is_closing((uv_handle_t *)&r->resign_timer)) {
        elect_close(r);
        return 0;
    }
    /* The candidate deletes its key (if ours) and revokes its lease, then on_resigned runs;
     * the timer bounds it (etcd away: the key lapses with the lease, lease_ttl). No line about
     * etcd's outage meanwhile. */
    r->resigned = done;
    r->resigned_arg = arg;
    rdzv_etcd_outage_close(&r->outage);
    uv_timer_start(&r->resign_timer, on_resign_timer, AGENT_ETCD_RESIGN_MS, 0);
    /* A record still on its way is written under the leadership first (the resign ends it);
     * the timer bounds both. */
    agent__records_flush(r, resign_now);
    return 1;
}
