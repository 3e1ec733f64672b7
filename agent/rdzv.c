/* The agent's side of a multi-node rendezvous (issue 4; docs/ARCHITECTURE.md): host the store
 * when the endpoint is this machine's, JOIN rounds, watch for the end of the running round, send
 * heartbeats, report failures, and leave through a bounded exit barrier. Everything is
 * asynchronous on the agent's loop (rdzv_aclient), so signals are handled during a rendezvous.
 *
 * Two connections: "ctl" carries JOIN (parked until the round closes), HEARTBEAT, FAIL and the
 * exit barrier; "watch" holds a parked WAIT on __rdzv/<run>/end/<round>, which the server SETs
 * when the round ends (a failure, a death, a node joining). */
#include "agent_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "ddp_log.h"
#include "rdzv_aclient.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"

/* Slack on top of join_timeout for the parked JOIN: the server answers at join_timeout itself. */
#define AGENT_JOIN_SLACK_MS 10000
/* The hosting agent keeps the store up after the exit barrier until the other nodes have hung
 * up (they have their answer then), for at most this long. */
#define AGENT_HOST_LINGER_MS 2000
/* While a JOIN is parked, a line now and then says who has joined, so that a rendezvous waiting
 * for a missing node is not silent for all of join_timeout (600 s by default): first after
 * min(10 s, join_timeout / 4), then at doubling gaps up to a minute. */
#define AGENT_JOIN_REPORT_FIRST_MS 10000
#define AGENT_JOIN_REPORT_MAX_MS 60000

struct agent_rdzv {
    agent_t *a;
    rdzv_aclient_t *ctl, *watch;
    char addr[INET6_ADDRSTRLEN]; /* the endpoint, numeric */
    int port;
    char host[RDZV_HOST_MAX + 1]; /* this node as the others reach it */
    ddp_buf_t token;
    uv_timer_t hb_timer;
    uv_timer_t linger_timer;
    uint64_t linger_until;
    int hb_pending;
    uint64_t hb_sent_ms;
    int barrier_phase;         /* 0 none, 1 ADD sent, 2 ADD answered: waiting for the others */
    uint64_t barrier_deadline; /* uv_now() ms when the exit barrier's close_timeout runs out */
    int64_t watch_round;       /* the round the watch WAIT is for, -1 none */
    uint64_t join_sent_ms;     /* uv_now() when the parked JOIN was sent */
    uint64_t join_report_at;   /* uv_now() of the next waiting line */
    uint64_t join_report_gap;
    int join_status_pending; /* an RDZV_STATUS for the waiting line is on the watch connection */
    int stopping;
};

int agent__rdzv_wanted(const launch_spec_t *sp) {
    return sp->max_nodes > 1;
}

/* Resolves host to a numeric address (first of getaddrinfo). Returns 0 or -1 with errtext. */
static int resolve(const char *host, char *out, size_t cap, const char **why) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        *why = gai_strerror(rc);
        return -1;
    }
    void *sa = res->ai_family == AF_INET6
                   ? (void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                   : (void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
    inet_ntop(res->ai_family, sa, out, (socklen_t)cap);
    freeaddrinfo(res);
    return 0;
}

/* Nonzero when addr (numeric) is loopback or one of this machine's interface addresses: the
 * c10d rule for "the endpoint is me" (hostnames alone mislead inside namespaces and clusters). */
static int is_local_addr(const char *addr) {
    if (strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0)
        return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL)
            continue;
        char buf[INET6_ADDRSTRLEN] = "";
        if (i->ifa_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof buf);
        else if (i->ifa_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, buf, sizeof buf);
        found = strcmp(buf, addr) == 0;
    }
    freeifaddrs(ifs);
    return found;
}

/* The address this machine uses to reach addr:port: what the other nodes can reach us at.
 * A connected UDP socket sends nothing; getsockname tells the route's source address. */
static void route_source(const char *addr, int port, char *out, size_t cap) {
    snprintf(out, cap, "%s", addr);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;
    if (fam == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &s4->sin_addr);
        len = sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &s6->sin6_addr);
        len = sizeof *s6;
    }
    int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (connect(fd, (struct sockaddr *)&ss, len) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (fam == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)cap);
        else
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)cap);
    }
    close(fd);
}

/* The job token: DDPRUN_TOKEN (hex) or DDPRUN_TOKEN_FILE. Returns 0 (token may stay empty), or
 * an exit code after logging the variable that is wrong. */
static int token_load(struct agent_rdzv *r) {
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_token_from_job_env(&r->token, &err);
    if (rc < 0) {
        DDP_ERROR("%s", err.text);
        return AGENT_EXIT_USAGE;
    }
    return 0;
}

static void emit(agent_t *a, agent_event_t ev) {
    agent__event(a, ev, NULL);
}

/* A connection to the store failed or was lost while it mattered. */
static void store_lost(struct agent_rdzv *r, const char *errtext) {
    if (r->stopping)
        return;
    if (r->a->state == SUP_BARRIER && r->barrier_phase == 2) {
        /* Our arrival was counted; the hosting agent left once everyone had arrived. */
        DDP_DEBUG("store gone after the exit barrier: %s", errtext ? errtext : "closed");
        emit(r->a, EV_BARRIER_DONE);
        return;
    }
    DDP_ERROR("lost the rendezvous store at %s:%d: %s; this node is out of the job", r->addr,
              r->port, errtext ? errtext : "connection closed");
    emit(r->a, EV_RDZV_ERROR);
}

static void on_connected(void *arg, int status, const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == 0 || status == DDP_ECANCELED || r->stopping)
        return;
    DDP_ERROR("unable to join the rendezvous store at %s:%d: %s%s", r->addr, r->port,
              errtext ? errtext : ddp_strerror(status),
              r->token.len == 0 ? " (agents read the job token from DDPRUN_TOKEN or "
                                  "DDPRUN_TOKEN_FILE)"
                                : "");
    /* Stop first, so the other connection's failure does not log the same thing again. */
    agent__rdzv_stop(r->a);
    emit(r->a, EV_RDZV_ERROR);
}

static void on_conn_lost(void *arg, int status, const char *errtext) {
    (void)status;
    store_lost(arg, errtext);
}

/* Parses a complete reply; rep->text must be freed by the caller. */
static int round_reply(const uint8_t *reply, size_t len, rdzv_round_reply_t *rep) {
    memset(rep, 0, sizeof *rep);
    size_t need = 0;
    return rdzv_round_reply_parse(reply, len, rep, &need, NULL) > 0 ? 0 : DDP_EPROTO;
}

/* The key the server SETs when round `round` ends (its value says why). */
static void end_key(const struct agent_rdzv *r, int64_t round, char *key, size_t cap) {
    snprintf(key, cap, "__rdzv/%s/end/%lld", r->a->spec->rdzv_id, (long long)round);
}

static void on_round_reason(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)arg;
    (void)errtext;
    if (status == 0 && len > 0)
        DDP_WARN("%.*s; re-joining", (int)len, (const char *)reply);
}

static void on_round_end(void *arg, int status, const uint8_t *reply, size_t len,
                         const char *errtext) {
    (void)reply;
    (void)len;
    struct agent_rdzv *r = arg;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status != 0) {
        store_lost(r, errtext);
        return;
    }
    if (r->watch_round != r->a->round)
        return;
    /* The server stored why the round ended (a failure, a lost node, a scale-up) as the key's
     * value: say it, for the user watching this node. */
    char key[RDZV_RUN_ID_MAX + 64];
    end_key(r, r->watch_round, key, sizeof key);
    if (r->a->state == SUP_RUNNING)
        rdzv_aclient_get(r->watch, key, 0, on_round_reason, r, NULL);
    r->watch_round = -1;
    emit(r->a, EV_ROUND_END);
}

/* Arms the watch for the end of round. */
static void watch_round(struct agent_rdzv *r, int64_t round) {
    char key[RDZV_RUN_ID_MAX + 64];
    end_key(r, round, key, sizeof key);
    const char *keys[1] = {key};
    ddp_err_t err;
    ddp_err_clear(&err);
    r->watch_round = round;
    if (rdzv_aclient_wait(r->watch, keys, 1, -1, on_round_end, r, &err) < 0)
        store_lost(r, err.text);
}

static void on_join(void *arg, int status, const uint8_t *reply, size_t len, const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status != 0) {
        DDP_ERROR("rendezvous '%s' at %s:%d failed: %s", a->spec->rdzv_id, r->addr, r->port,
                  errtext ? errtext : ddp_strerror(status));
        emit(a, EV_RDZV_ERROR);
        return;
    }
    rdzv_round_reply_t rep;
    if (round_reply(reply, len, &rep) < 0 || rep.cmd != RDZV_CMD_RDZV_JOIN) {
        ddp_buf_free(&rep.text);
        store_lost(r, "malformed JOIN reply");
        return;
    }
    if (rep.status != 0) {
        const char *why = rep.text.len > 0 ? (const char *)rep.text.data : "refused";
        if (strncmp(why, "rendezvous '", 12) == 0) /* the server's text names the run */
            DDP_ERROR("%s", why);
        else
            DDP_ERROR("rendezvous '%s': %s", a->spec->rdzv_id, why);
        ddp_buf_free(&rep.text);
        emit(a, EV_RDZV_ERROR);
        return;
    }
    ddp_buf_free(&rep.text);
    const rdzv_join_result_t *j = &rep.join;
    a->round = j->round;
    a->node_rank = (int)j->group_rank;
    a->group_world_size = (int)j->group_world_size;
    a->rank_base = (int)j->rank_base;
    a->world_size = (int)j->world_size;
    a->attempt = (int)j->restarts_used;
    snprintf(a->master_addr, sizeof a->master_addr, "%s", j->master_addr);
    a->master_port = (int)j->master_port;
    DDP_INFO("rendezvous '%s' round %lld: node %d of %d, ranks %d..%d of %d, master %s:%d",
             a->spec->rdzv_id, (long long)a->round, a->node_rank, a->group_world_size, a->rank_base,
             a->rank_base + a->nproc - 1, a->world_size, a->master_addr, a->master_port);
    int rc = agent__base_env_build(a);
    if (rc < 0) {
        if (rc != -EINVAL) /* -EINVAL (--virtual_local_rank short of devices) is logged already */
            DDP_ERROR("unable to build the workers' environment: out of memory");
        emit(a, EV_RDZV_ERROR);
        return;
    }
    watch_round(r, a->round);
    emit(a, EV_JOINED);
}

void agent__rdzv_join(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    const launch_spec_t *sp = a->spec;
    rdzv_join_req_t req;
    memset(&req, 0, sizeof req);
    snprintf(req.run_id, sizeof req.run_id, "%s", sp->rdzv_id);
    snprintf(req.host, sizeof req.host, "%s", r->host);
    req.want_node_rank =
        LAUNCH_GIVEN(sp, LAUNCH_OPT_NODE_RANK) || sp->node_rank > 0 ? sp->node_rank : -1;
    req.nproc = a->nproc;
    int port = agent__pick_free_port(r->host);
    req.master_port = port > 0 ? port : LAUNCH_DEFAULT_MASTER_PORT;
    req.cfg.min_nodes = sp->min_nodes;
    req.cfg.max_nodes = sp->max_nodes;
    req.cfg.last_call_timeout_ms = (int64_t)(sp->rdzv_opts.last_call_timeout * 1000);
    req.cfg.join_timeout_ms = (int64_t)(sp->rdzv_opts.join_timeout * 1000);
    req.cfg.keep_alive_interval_ms = (int64_t)(sp->rdzv_opts.keep_alive_interval * 1000);
    req.cfg.keep_alive_max_attempt = sp->rdzv_opts.keep_alive_max_attempt;
    req.cfg.max_restarts = sp->max_restarts;
    ddp_buf_t frame = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    char what[RDZV_RUN_ID_MAX + 32];
    snprintf(what, sizeof what, "RDZV_JOIN run '%s'", sp->rdzv_id);
    int rc = rdzv_join_req_encode(&frame, &req);
    if (rc == 0)
        rc = rdzv_aclient_raw(r->ctl, &frame, rdzv_round_reply_len, RDZV_ACLIENT_PARKS,
                              (int)req.cfg.join_timeout_ms + AGENT_JOIN_SLACK_MS, what, on_join, r,
                              &err);
    ddp_buf_free(&frame);
    uint64_t first = (uint64_t)req.cfg.join_timeout_ms / 4;
    r->join_sent_ms = uv_now(a->loop);
    r->join_report_gap = first < AGENT_JOIN_REPORT_FIRST_MS ? first : AGENT_JOIN_REPORT_FIRST_MS;
    r->join_report_at = r->join_sent_ms + r->join_report_gap;
    if (rc < 0) {
        DDP_ERROR("unable to join rendezvous '%s': %s", sp->rdzv_id,
                  err.text[0] ? err.text : ddp_strerror(rc));
        emit(a, EV_RDZV_ERROR);
    }
}

static void on_fail_reply(void *arg, int status, const uint8_t *reply, size_t len,
                          const char *errtext) {
    struct agent_rdzv *r = arg;
    (void)errtext;
    rdzv_round_reply_t rep;
    if (status != 0 || round_reply(reply, len, &rep) < 0)
        return; /* a lost store shows up on the watch connection */
    if (rep.fail.status == RDZV_FAIL_RUN_FAILED)
        DDP_WARN("rendezvous '%s': restarts spent (%lld of %lld): the job fails",
                 r->a->spec->rdzv_id, (long long)rep.fail.restarts_used,
                 (long long)rep.fail.max_restarts);
    ddp_buf_free(&rep.text);
}

void agent__rdzv_report_failure(agent_t *a, const char *what) {
    struct agent_rdzv *r = a->rdzv;
    ddp_buf_t frame = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_fail_req_encode(&frame, a->spec->rdzv_id, a->round, what);
    if (rc == 0)
        rc = rdzv_aclient_raw(r->ctl, &frame, rdzv_round_reply_len, 0, -1, "RDZV_FAIL",
                              on_fail_reply, r, &err);
    ddp_buf_free(&frame);
    if (rc < 0)
        DDP_WARN("unable to report the failure to the rendezvous: %s",
                 err.text[0] ? err.text : ddp_strerror(rc));
}

static void on_heartbeat(void *arg, int status, const uint8_t *reply, size_t len,
                         const char *errtext) {
    (void)reply;
    (void)len;
    (void)errtext;
    struct agent_rdzv *r = arg;
    r->hb_pending = 0;
    (void)status; /* a lost store shows up on the watch connection */
}

/* Queues one RDZV_HEARTBEAT on the control connection. */
static void heartbeat_send(struct agent_rdzv *r) {
    ddp_buf_t frame = DDP_BUF_INIT;
    if (rdzv_heartbeat_req_encode(&frame, r->a->spec->rdzv_id) == 0 &&
        rdzv_aclient_raw(r->ctl, &frame, rdzv_round_reply_len, 0, -1, "RDZV_HEARTBEAT",
                         on_heartbeat, r, NULL) == 0) {
        r->hb_pending = 1;
        r->hb_sent_ms = uv_now(r->a->loop);
    }
    ddp_buf_free(&frame);
}

/* The run's status, asked for while this node's JOIN is parked: one line saying who is there. */
static void on_join_status(void *arg, int status, const uint8_t *reply, size_t len,
                           const char *errtext) {
    (void)errtext;
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    r->join_status_pending = 0;
    if (status != 0 || r->stopping || a->state != SUP_JOINING)
        return; /* a lost store shows up through the connections' own callbacks */
    rdzv_round_reply_t rep;
    if (round_reply(reply, len, &rep) < 0) {
        ddp_buf_free(&rep.text);
        return;
    }
    json_t *root = rep.status == 0 && rep.text.len > 0
                       ? json_loadb((const char *)rep.text.data, rep.text.len, 0, NULL)
                       : NULL;
    ddp_buf_free(&rep.text);
    if (root == NULL)
        return;
    json_t *members = json_object_get(root, "members");
    size_t joining = 0, i;
    json_t *m;
    json_array_foreach(members, i, m) {
        const char *st = json_string_value(json_object_get(m, "state"));
        joining += st != NULL && strcmp(st, "joining") == 0;
    }
    const launch_spec_t *sp = a->spec;
    size_t running = json_array_size(members) - joining;
    char others[48] = "";
    if (running > 0)
        snprintf(others, sizeof others, ", %zu running the last round", running);
    DDP_WARN("rendezvous '%s' at %s:%d: waiting %llu s for nodes: %zu of min %d joined round %lld "
             "(max %d)%s; join_timeout %g s",
             sp->rdzv_id, r->addr, r->port,
             (unsigned long long)((uv_now(a->loop) - r->join_sent_ms) / 1000), joining,
             sp->min_nodes, (long long)json_integer_value(json_object_get(root, "round")),
             sp->max_nodes, others, sp->rdzv_opts.join_timeout);
    json_decref(root);
}

/* Called on every heartbeat tick while joining: asks for the run's status when a line is due.
 * The watch connection carries it: during a JOIN it holds no WAIT. */
static void join_progress(struct agent_rdzv *r) {
    uint64_t now = uv_now(r->a->loop);
    if (r->join_status_pending || r->watch == NULL || now < r->join_report_at)
        return;
    r->join_report_gap = r->join_report_gap * 2 < AGENT_JOIN_REPORT_MAX_MS
                             ? r->join_report_gap * 2
                             : AGENT_JOIN_REPORT_MAX_MS;
    r->join_report_at = now + r->join_report_gap;
    ddp_buf_t frame = DDP_BUF_INIT;
    if (rdzv_status_req_encode(&frame, r->a->spec->rdzv_id) == 0 &&
        rdzv_aclient_raw(r->watch, &frame, rdzv_round_reply_len, 0, -1, "RDZV_STATUS",
                         on_join_status, r, NULL) == 0)
        r->join_status_pending = 1;
    ddp_buf_free(&frame);
}

static void on_hb_timer(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    agent_t *a = r->a;
    const launch_spec_t *sp = a->spec;
    if (r->stopping)
        return;
    /* Behind a parked JOIN a heartbeat would only queue; joiners are not checked anyway. */
    if (a->state == SUP_JOINING) {
        join_progress(r);
        return;
    }
    if (r->hb_pending) {
        /* The server declares a node dead after this much silence: a node that hears nothing
         * back for as long is cut off (network, a stopped store) and must not go on alone. */
        uint64_t bound = (uint64_t)(sp->rdzv_opts.keep_alive_interval * 1000) *
                         (uint64_t)sp->rdzv_opts.keep_alive_max_attempt;
        uint64_t waited = uv_now(a->loop) - r->hb_sent_ms;
        if (waited > bound) {
            char why[96];
            snprintf(why, sizeof why, "no answer to heartbeats for %llu ms",
                     (unsigned long long)waited);
            store_lost(r, why);
        }
        return;
    }
    heartbeat_send(r);
}

static void on_linger(uv_timer_t *t) {
    struct agent_rdzv *r = t->data;
    rdzv_server_stats_t st;
    rdzv_server_stats(r->a->store, &st);
    /* Our own two connections stay until we close them. */
    if (st.conns > 2 && uv_now(r->a->loop) < r->linger_until)
        return;
    uv_timer_stop(t);
    emit(r->a, EV_BARRIER_DONE);
}

static void on_barrier_done(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    (void)reply;
    (void)len;
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status == DDP_ETIMEOUT)
        DDP_WARN("exit barrier: not every node arrived within close_timeout=%gs; leaving anyway",
                 a->spec->rdzv_opts.close_timeout);
    else if (status != 0)
        DDP_DEBUG("exit barrier: %s", errtext ? errtext : ddp_strerror(status));
    if (a->store != NULL) {
        /* Hosting: the others may still be reading their answer from our store. */
        r->linger_until = uv_now(a->loop) + AGENT_HOST_LINGER_MS;
        uv_timer_start(&r->linger_timer, on_linger, 0, 10);
        return;
    }
    emit(a, EV_BARRIER_DONE);
}

static void barrier_key(agent_t *a, const char *what, char *key, size_t cap) {
    snprintf(key, cap, "__rdzv/%s/%lld/exit%s", a->spec->rdzv_id, (long long)a->round, what);
}

static void on_barrier_wait(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext);

/* Waits on ctl for the exit barrier's done key, half a keep-alive interval at a time. A parked
 * WAIT holds back every later request on its connection, heartbeats included, and the server
 * declares a member silent for keep_alive_interval x keep_alive_max_attempt dead: waiting out
 * close_timeout in one piece ended the round under the nodes whose workers were still running,
 * so one node finishing 15 s before another failed the job. Each slice's end lets the
 * heartbeat out. Returns 0 or a negative code (on_barrier_wait will not run). */
static int barrier_wait(struct agent_rdzv *r) {
    agent_t *a = r->a;
    char key[RDZV_RUN_ID_MAX + 64];
    barrier_key(a, "/done", key, sizeof key);
    const char *keys[1] = {key};
    uint64_t now = uv_now(a->loop);
    uint64_t left = r->barrier_deadline > now ? r->barrier_deadline - now : 1;
    /* Half an interval: a heartbeat queued behind the WAIT goes out at most that late. */
    uint64_t slice = (uint64_t)(a->spec->rdzv_opts.keep_alive_interval * 1000) / 2;
    if (slice == 0 || slice > left)
        slice = left;
    if (slice > INT_MAX)
        slice = INT_MAX;
    return rdzv_aclient_wait(r->ctl, keys, 1, (int)slice, on_barrier_wait, r, NULL);
}

static void on_barrier_wait(void *arg, int status, const uint8_t *reply, size_t len,
                            const char *errtext) {
    struct agent_rdzv *r = arg;
    if (status == DDP_ETIMEOUT && !r->stopping && uv_now(r->a->loop) < r->barrier_deadline) {
        /* A slice ran out, not close_timeout: heartbeat (unless one is queued), wait again. */
        if (!r->hb_pending)
            heartbeat_send(r);
        int rc = barrier_wait(r);
        if (rc == 0)
            return;
        status = rc;
        errtext = "unable to send the exit barrier request";
    }
    on_barrier_done(arg, status, reply, len, errtext);
}

static void on_barrier_add(void *arg, int status, const uint8_t *reply, size_t len,
                           const char *errtext) {
    struct agent_rdzv *r = arg;
    agent_t *a = r->a;
    int64_t n = 0;
    if (status == DDP_ECANCELED || r->stopping)
        return;
    if (status != 0 || rdzv_aclient_reply_i64(reply, len, &n) < 0) {
        /* Not even counted: this node lost the job before it could leave it properly. */
        store_lost(r, errtext ? errtext : "malformed reply at the exit barrier");
        return;
    }
    r->barrier_phase = 2;
    char key[RDZV_RUN_ID_MAX + 64];
    barrier_key(a, "/done", key, sizeof key);
    int rc;
    if (n >= a->group_world_size) {
        /* The last node to arrive releases the others. */
        rc = rdzv_aclient_set(r->ctl, key, "1", 1, on_barrier_done, r, NULL);
    } else {
        r->barrier_deadline = uv_now(a->loop) + (uint64_t)(a->spec->rdzv_opts.close_timeout * 1000);
        rc = barrier_wait(r);
    }
    if (rc < 0)
        on_barrier_done(r, rc, NULL, 0, "unable to send the exit barrier request");
}

void agent__rdzv_exit_barrier(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    char key[RDZV_RUN_ID_MAX + 64];
    barrier_key(a, "", key, sizeof key);
    r->barrier_phase = 1;
    if (rdzv_aclient_add(r->ctl, key, 1, on_barrier_add, r, NULL) < 0)
        store_lost(r, "unable to reach the store at the exit barrier");
}

/* Hosts the store on the endpoint when it is this machine's (or --rdzv_conf is_host=1) and the
 * port is free; another agent on the same machine may already host it. Returns 0 or an exit
 * code. */
static int maybe_host(struct agent_rdzv *r) {
    agent_t *a = r->a;
    int is_host = a->spec->rdzv_opts.is_host;
    if (is_host == 0 || (is_host < 0 && !is_local_addr(r->addr)))
        return 0;
    rdzv_server_opts_t so = {.host = r->addr, .port = (uint16_t)r->port};
    if (r->token.len > 0) {
        so.token = r->token.data;
        so.token_len = r->token.len;
    } else {
        so.no_auth = 1;
    }
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_server_start(a->loop, &so, &a->store, &err);
    if (rc == 0) {
        DDP_INFO("hosting the rendezvous store on %s:%d", r->addr, r->port);
        if (so.no_auth)
            DDP_WARN("no job token (DDPRUN_TOKEN or DDPRUN_TOKEN_FILE): the rendezvous store on "
                     "%s:%d accepts any client",
                     r->addr, r->port);
        return 0;
    }
    if (is_host == 1) {
        DDP_ERROR("--rdzv_conf is_host=1: unable to serve %s:%d: %s", r->addr, r->port,
                  err.text[0] ? err.text : ddp_strerror(rc));
        return AGENT_EXIT_USAGE;
    }
    /* Busy: another agent here hosts it (c10d's rule); join as a client. */
    DDP_DEBUG("not hosting %s:%d (%s)", r->addr, r->port, err.text);
    return 0;
}

int agent__rdzv_start(agent_t *a) {
    const launch_spec_t *sp = a->spec;
    struct agent_rdzv *r = calloc(1, sizeof *r);
    if (r == NULL)
        return AGENT_EXIT_INTERNAL;
    a->rdzv = r;
    r->a = a;
    r->watch_round = -1;
    int is_static = sp->rdzv_backend != NULL && strcmp(sp->rdzv_backend, "static") == 0;
    const char *host = is_static ? sp->master_addr : sp->rdzv_host;
    if (strlen(sp->rdzv_id) > RDZV_RUN_ID_MAX) {
        /* The server knows the run by at most this many characters: a longer id would be cut
         * in the JOIN but not in the keys the agents watch, and heartbeats could not be sent. */
        DDP_ERROR("--rdzv_id: '%.32s...' is longer than %d characters", sp->rdzv_id,
                  RDZV_RUN_ID_MAX);
        return AGENT_EXIT_USAGE;
    }
    r->port = is_static ? (sp->master_port > 0 ? sp->master_port : LAUNCH_DEFAULT_MASTER_PORT)
                        : (sp->rdzv_port > 0 ? sp->rdzv_port : LAUNCH_DEFAULT_C10D_PORT);
    if (host == NULL || *host == '\0') {
        DDP_ERROR("--nnodes=%d:%d needs --rdzv_endpoint=HOST[:PORT] (or --master_addr with "
                  "--rdzv_backend=static)",
                  sp->min_nodes, sp->max_nodes);
        return AGENT_EXIT_USAGE;
    }
    const char *why = NULL;
    if (resolve(host, r->addr, sizeof r->addr, &why) < 0) {
        DDP_ERROR("--rdzv_endpoint: unable to resolve '%s': %s", host, why);
        return AGENT_EXIT_USAGE;
    }
    int rc = token_load(r);
    if (rc != 0)
        return rc;
    if (r->token.len > 0) {
        ddp_buf_t hex = DDP_BUF_INIT;
        if (rdzv_token_to_hex(r->token.data, r->token.len, &hex) == 0)
            snprintf(a->token_hex, sizeof a->token_hex, "%s", (char *)hex.data);
        ddp_buf_free(&hex);
    }
    if (sp->local_addr != NULL)
        snprintf(r->host, sizeof r->host, "%s", sp->local_addr);
    else
        route_source(r->addr, r->port, r->host, sizeof r->host);
    if ((rc = maybe_host(r)) != 0)
        return rc;
    snprintf(a->store_addr, sizeof a->store_addr, "%s", r->addr);
    a->store_port = (uint16_t)r->port;

    rdzv_client_opts_t co = {
        .host = r->addr,
        .port = (uint16_t)r->port,
        .token = r->token.len ? r->token.data : NULL,
        .token_len = r->token.len,
        .connect_timeout_ms = (int)(sp->rdzv_opts.join_timeout * 1000),
        .io_timeout_ms = (int)(sp->rdzv_opts.read_timeout * 1000),
    };
    ddp_err_t err;
    ddp_err_clear(&err);
    if (rdzv_aclient_connect(a->loop, &co, on_connected, r, &r->ctl, &err) < 0 ||
        rdzv_aclient_connect(a->loop, &co, on_connected, r, &r->watch, &err) < 0) {
        DDP_ERROR("unable to connect to the rendezvous at %s:%d: %s", r->addr, r->port, err.text);
        return AGENT_EXIT_INTERNAL;
    }
    rdzv_aclient_on_close(r->ctl, on_conn_lost, r);
    rdzv_aclient_on_close(r->watch, on_conn_lost, r);
    uv_timer_init(a->loop, &r->hb_timer);
    r->hb_timer.data = r;
    uv_timer_init(a->loop, &r->linger_timer);
    r->linger_timer.data = r;
    uint64_t hb = (uint64_t)(sp->rdzv_opts.keep_alive_interval * 1000);
    uv_timer_start(&r->hb_timer, on_hb_timer, hb, hb);
    /* The first JOIN is agent_run's to send, once the loop is fully set up: a JOIN refused here
     * would feed the state table before the agent is in SUP_JOINING. */
    return 0;
}

void agent__rdzv_stop(agent_t *a) {
    struct agent_rdzv *r = a->rdzv;
    if (r == NULL || r->stopping)
        return;
    r->stopping = 1;
    uv_timer_stop(&r->hb_timer);
    uv_timer_stop(&r->linger_timer);
    rdzv_aclient_close(r->ctl, NULL, NULL);
    rdzv_aclient_close(r->watch, NULL, NULL);
    r->ctl = r->watch = NULL;
}

/* Frees the state once the loop has closed every handle (agent_run calls it after uv_run). */
void agent__rdzv_free(agent_t *a) {
    if (a->rdzv == NULL)
        return;
    ddp_buf_free(&a->rdzv->token);
    free(a->rdzv);
    a->rdzv = NULL;
}
