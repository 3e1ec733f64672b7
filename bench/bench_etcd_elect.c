/* SPDX-License-Identifier: Apache-2.0
 * bench_etcd_elect: the election of --rdzv_backend=etcd with N simulated agents, for
 * bench/scale.sh. Every agent of a run is a candidate (agent/rdzv_elect.c): its own lease, renewed
 * every TTL/3, a campaign txn, and a range then a watch of the leader key. Here N candidates of
 * rdzv_etcd_leader share one process, one libuv loop and one rdzv_etcd client (one HTTP
 * connection a call, as the agent's client makes), each publishing VALUE (the address of the
 * store the simulated nodes then join: whichever candidate wins, the store is that one).
 *   elect     all N start at once -> every candidate knows the leader (LEADING or OBSERVED):
 *             prints `etcd-elect nodes=N elect_ms=X`
 *   hold      then every lease is kept alive until a signal: the load etcd carries while a job
 *             runs (bench/scale.sh reads etcd's counters meanwhile)
 *   SIGUSR1   the leader resigns (its key deleted, as an agent that ends does; a dead leader's
 *             key goes when its lease lapses, which bench/etcd_failover.sh times): every
 *             candidate campaigns again -> every candidate knows the new leader:
 *             prints `etcd-reelect nodes=N reelect_ms=X`
 *   SIGTERM   prints `etcd-hold lost=L errors=E` (leases lost and calls failed since the
 *             election) and exits: 0 when no lease was lost, 1 otherwise.
 * With K given, only the first K are candidates and the others observers (a range and a watch,
 * no lease). With SPREAD_US too, the others are readers, as agents that are not among
 * --rdzv_conf etcd_candidates (agent/rdzv_elect.c): one range of the leader key at a moment drawn
 * over N x SPREAD_US microseconds, retried after a jittered back-off (125-250 ms, doubling up to
 * the larger of 2 s and the spread window) while it names no leader; on SIGUSR1 every reader reads
 * again the same way (as an agent does once its store connection is lost) until the key names the
 * new leader. Calls are bounded by 2 s each, as the agent's. Exits 2 on bad arguments, 1 when the
 * election does not end within 120 s. Usage: bench_etcd_elect ENDPOINTS N KEY VALUE TTL_S [K
 * [SPREAD_US]] */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "ddp_err.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "rdzv_etcd.h"
#include "rdzv_etcd_leader.h"

#define CALL_MS 2000
#define ELECT_BOUND_MS 120000

typedef struct cand {
    rdzv_etcd_leader_t *l; /* NULL: a reader */
    int64_t known_rev;     /* the leader key's create revision this candidate last learned */
    uv_timer_t read_timer; /* a reader's next read */
    uint64_t backoff_ms;   /* a reader's next retry bound */
} cand_t;

#define READ_BACKOFF_FIRST_MS 250
#define READ_BACKOFF_MS 2000

static uv_loop_t *loop;
static rdzv_etcd_t *client;
static cand_t *cands;
static size_t n_cands;
static size_t known; /* candidates that know a leader newer than since_rev */
static int64_t since_rev;
static uint64_t t0_ns;
static int phase; /* 0 electing, 1 holding, 2 re-electing */
static uint64_t lost, errors, lost_lines;
static uv_signal_t sig_usr1, sig_term;
static uv_timer_t bound;
static int64_t spread_us = -1; /* -1: the non-candidates observe; else they read */

static void on_report(void *arg, rdzv_leader_event_t ev, const uint8_t *value, size_t value_len,
                      int64_t rev, const char *why) {
    cand_t *c = arg;
    (void)value;
    (void)value_len;
    if (ev == RDZV_LEADER_LOST) {
        if (phase > 0)
            lost++;
        if (lost_lines++ < 5)
            fprintf(stderr, "bench_etcd_elect: candidate %zu lost its lease: %s\n",
                    (size_t)(c - cands), why);
        return;
    }
    if (ev == RDZV_LEADER_ERROR) {
        if (errors++ < 5)
            fprintf(stderr, "bench_etcd_elect: %s\n", why);
        return;
    }
    if (ev != RDZV_LEADER_LEADING && ev != RDZV_LEADER_OBSERVED)
        return;
    if (rev <= since_rev || c->known_rev > since_rev) {
        c->known_rev = rev > c->known_rev ? rev : c->known_rev;
        return;
    }
    c->known_rev = rev;
    if (++known < n_cands || phase == 1)
        return;
    double ms = (double)(ddp_now_ns() - t0_ns) / 1e6;
    if (phase == 0)
        printf("etcd-elect nodes=%zu elect_ms=%.1f\n", n_cands, ms);
    else
        printf("etcd-reelect nodes=%zu reelect_ms=%.1f\n", n_cands, ms);
    phase = 1;
    uv_timer_stop(&bound);
}

static void on_read_timer(uv_timer_t *t);

static void read_retry(cand_t *c) {
    uint64_t b = c->backoff_ms, cap = (uint64_t)n_cands * (uint64_t)spread_us / 1000;
    if (cap < READ_BACKOFF_MS)
        cap = READ_BACKOFF_MS;
    c->backoff_ms = b * 2 > cap ? cap : b * 2;
    uv_timer_start(&c->read_timer, on_read_timer, b / 2 + (uint64_t)random() % (b / 2), 0);
}

static void on_read(void *arg, int status, const rdzv_etcd_result_t *res, const char *errtext) {
    cand_t *c = arg;
    if (status < 0) {
        if (errors++ < 5)
            fprintf(stderr, "bench_etcd_elect: %s\n", errtext);
        read_retry(c);
        return;
    }
    if (res->n_kvs == 0 || res->kvs[0].create_revision <= since_rev) {
        read_retry(c); /* no leader yet, or still the one that resigned */
        return;
    }
    on_report(c, RDZV_LEADER_OBSERVED, res->kvs[0].value, res->kvs[0].value_len,
              res->kvs[0].create_revision, NULL);
}

static const char *the_key;

static void on_read_timer(uv_timer_t *t) {
    cand_t *c = t->data;
    ddp_err_t err;
    if (rdzv_etcd_get(client, the_key, strlen(the_key), 0, 0, on_read, c, &err) < 0)
        read_retry(c);
}

/* Every reader reads at a moment drawn over n_cands x spread_us. */
static void readers_start(void) {
    uint64_t window_ms = (uint64_t)n_cands * (uint64_t)spread_us / 1000;
    for (size_t i = 0; i < n_cands; i++) {
        if (cands[i].l != NULL)
            continue;
        cands[i].backoff_ms = READ_BACKOFF_FIRST_MS;
        uv_timer_start(&cands[i].read_timer, on_read_timer,
                       window_ms ? (uint64_t)random() % window_ms : 0, 0);
    }
}

static void on_bound(uv_timer_t *t) {
    (void)t;
    fprintf(stderr, "bench_etcd_elect: %zu of %zu candidates knew the leader after %d s\n", known,
            n_cands, ELECT_BOUND_MS / 1000);
    exit(1);
}

static void on_usr1(uv_signal_t *s, int signum) {
    (void)s;
    (void)signum;
    size_t lead = n_cands;
    for (size_t i = 0; i < n_cands && lead == n_cands; i++)
        if (cands[i].l != NULL && rdzv_etcd_leader_leading(cands[i].l))
            lead = i;
    if (phase != 1 || lead == n_cands) {
        fprintf(stderr, "bench_etcd_elect: no leader to resign\n");
        exit(1);
    }
    since_rev = cands[lead].known_rev;
    known = 0;
    phase = 2;
    t0_ns = ddp_now_ns();
    uv_timer_start(&bound, on_bound, ELECT_BOUND_MS, 0);
    rdzv_etcd_leader_resign(cands[lead].l);
    if (spread_us >= 0)
        readers_start();
}

static void on_term(uv_signal_t *s, int signum) {
    (void)s;
    (void)signum;
    printf("etcd-hold nodes=%zu lost=%" PRIu64 " errors=%" PRIu64 "\n", n_cands, lost, errors);
    fflush(stdout);
    /* The candidates' keys and leases go with the bench's etcd. */
    _exit(lost == 0 ? 0 : 1);
}

int main(int argc, char **argv) {
    int64_t n, ttl, k = 0;
    if (argc < 6 || argc > 8 || ddp_parse_i64(argv[2], 1, 65536, &n) < 0 ||
        ddp_parse_i64(argv[5], 1, 3600, &ttl) < 0 ||
        (argc >= 7 && ddp_parse_i64(argv[6], 1, n, &k) < 0) ||
        (argc == 8 && ddp_parse_i64(argv[7], 0, 1000000, &spread_us) < 0)) {
        fprintf(stderr, "usage: bench_etcd_elect ENDPOINTS N KEY VALUE TTL_S [K [SPREAD_US]]\n");
        return 2;
    }
    the_key = argv[3];
    if (k == 0)
        k = n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    loop = uv_default_loop();
    ddp_err_t err;
    rdzv_etcd_opts_t eo = {.endpoints = argv[1], .timeout_ms = CALL_MS};
    if (rdzv_etcd_new(loop, &eo, &client, &err) < 0) {
        fprintf(stderr, "bench_etcd_elect: %s\n", err.text);
        return 1;
    }
    n_cands = (size_t)n;
    cands = calloc(n_cands, sizeof *cands);
    if (cands == NULL) {
        fprintf(stderr, "bench_etcd_elect: out of memory\n");
        return 1;
    }
    uv_signal_init(loop, &sig_usr1);
    uv_signal_start(&sig_usr1, on_usr1, SIGUSR1);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_term, on_term, SIGTERM);
    uv_timer_init(loop, &bound);
    uv_timer_start(&bound, on_bound, ELECT_BOUND_MS, 0);
    t0_ns = ddp_now_ns();
    for (size_t i = 0; i < n_cands; i++) {
        uv_timer_init(loop, &cands[i].read_timer);
        cands[i].read_timer.data = &cands[i];
        if ((int64_t)i >= k && spread_us >= 0)
            continue; /* a reader: readers_start */
        rdzv_etcd_leader_opts_t lo = {.key = argv[3],
                                      .key_len = strlen(argv[3]),
                                      .value = (int64_t)i < k ? argv[4] : NULL,
                                      .value_len = (int64_t)i < k ? strlen(argv[4]) : 0,
                                      .ttl_s = (int)ttl,
                                      .cb = on_report,
                                      .arg = &cands[i]};
        if (rdzv_etcd_leader_start(client, &lo, &cands[i].l, &err) < 0) {
            fprintf(stderr, "bench_etcd_elect: candidate %zu: %s\n", i, err.text);
            return 1;
        }
    }
    if (spread_us >= 0)
        readers_start();
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
}
