/* SPDX-License-Identifier: Apache-2.0
 * bench_rdzv_scale: every rendezvous path a job of N nodes takes, with N simulated agents
 * (rdzv_sim.h) on one ddp-rendezvous started with --no-auth (bench/scale.sh starts it and
 * passes its PID, whose CPU time and RSS are read from /proc):
 *   join         R runs of min = max = N: last JOIN sent -> every reply read (median)
 *   keep-alive   the main run (min N-100, max N) heartbeating at the default interval, each
 *                beat after its progress SET, for S seconds: the store's CPU share and RSS
 *   status       `ddprun status` (text and --json) and the raw STATUS reply, while it runs
 *   re-form      one node reports FAIL: FAIL sent -> every node assigned to the next round;
 *                one node stops heartbeating (a spare waits to take its place): its last
 *                beat -> every survivor and the spare assigned, less the detection interval
 *   scale        100 nodes leave at once (less last_call_timeout, which the smaller round must
 *                wait out), then 100 new nodes join at once (the round closes at max)
 * Prints one markdown row, then the summary line `rdzv-scale nodes=N ...`.
 * --keep-alive-ms K sets the run's keep-alive interval (default 5000, the store's default): the
 * silent node's detection takes 3 x K, so a small K makes a quick run (the smoke test's).
 * Store candidates of the etcd backend (ddp-rendezvous --etcd, bench/scale.sh):
 *   --run-id ID     the main run's id (ID-jR and ID-dR the join runs'), for daemons that stand for
 *                   those run ids (default: ids of this process's own)
 *   --join-at P     every node connects first to the store on 127.0.0.1:P, a candidate that does
 *                   not lead, and follows its redirect to PORT's: the join runs and the main run
 *                   (join_ms) include the redirect; R more join runs JOIN at PORT directly
 *                   (join_direct_ms); each redirected join's line says how much CPU the
 *                   simulator (every node's side of its connections) and the leader spent
 *   --failover LIST after the other paths, while every node heartbeats, SIGKILL DAEMON_PID (the
 *                   leader): kill -> every node assigned to a round at the new leader (each
 *                   connects to the candidates of LIST, "HOST:PORT+HOST:PORT...", in order, and
 *                   follows their "not yet" and redirect answers): failover_ms
 * Exits 0 with every figure measured, 1 when one cannot be, 2 on bad arguments.
 * Usage: bench_rdzv_scale PORT DAEMON_PID N [--keepalive-s S] [--join-runs R] [--ddprun PATH]
 *        [--last-call-ms L] [--keep-alive-ms K] [--run-id ID] [--join-at P] [--failover LIST] */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_stats.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "rdzv_frame_int.h"
#include "rdzv_sim.h"

extern char **environ;

#define SCALE_STEP 100 /* nodes that leave, then join, at once */
#define WAIT_S 120     /* bound on every wait for a round to form */
#define STATUS_RUNS 3

static uint16_t port;
static uint16_t join_port;         /* --join-at, else port */
static const char *run_id_arg;     /* --run-id, or NULL */
static const char *failover_cands; /* --failover, or NULL */
static int dpid;
static int64_t keep_alive_ms = RDZV_DEFAULT_KEEP_ALIVE_INTERVAL_MS;

static double ms_since(uint64_t t0_ns, uint64_t t1_ns) {
    return ((double)t1_ns - (double)t0_ns) / 1e6;
}

/* The daemon's CPU time in ms, to the nanosecond (/proc/PID/schedstat; it has one thread), or
 * -1. Short phases (a join of 1,000 nodes takes a few ms) need more than /proc/PID/stat's ticks. */
static double proc_cpu_ms(int pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    FILE *f = fopen(path, "r");
    unsigned long long ns = 0;
    int ok = f != NULL && fscanf(f, "%llu", &ns) == 1;
    if (f != NULL)
        fclose(f);
    return ok ? (double)ns / 1e6 : -1;
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The SYNs this host's TCP has retransmitted (/proc/net/netstat TCPSynRetrans), or -1. */
static long syn_retransmits(void) {
    FILE *f = fopen("/proc/net/netstat", "r");
    char names[4096], values[4096];
    long v = -1;
    while (f != NULL && fgets(names, sizeof names, f) != NULL &&
           fgets(values, sizeof values, f) != NULL) {
        if (strncmp(names, "TcpExt:", 7) != 0)
            continue;
        char *sn, *sv;
        char *n = strtok_r(names, " \n", &sn), *val = strtok_r(values, " \n", &sv);
        for (; n != NULL && val != NULL;
             n = strtok_r(NULL, " \n", &sn), val = strtok_r(NULL, " \n", &sv))
            if (strcmp(n, "TCPSynRetrans") == 0)
                v = atol(val);
    }
    if (f != NULL)
        fclose(f);
    return v;
}

static void cfg_fill(rdzv_join_req_t *req, const char *run_id, int64_t min, int64_t max,
                     int64_t last_call_ms) {
    memset(req, 0, sizeof *req);
    snprintf(req->run_id, sizeof req->run_id, "%s", run_id);
    req->want_node_rank = -1;
    req->nproc = 8;
    req->master_port = 29500;
    req->cfg.min_nodes = min;
    req->cfg.max_nodes = max;
    req->cfg.last_call_timeout_ms = last_call_ms;
    req->cfg.join_timeout_ms = 600000;
    req->cfg.keep_alive_interval_ms = keep_alive_ms;
    req->cfg.keep_alive_max_attempt = RDZV_DEFAULT_KEEP_ALIVE_MAX_ATTEMPT;
    req->cfg.max_restarts = 1000;
}

static uint64_t deadline(void) {
    return ddp_now_ns() + (uint64_t)WAIT_S * 1000000000u;
}

/* One join of n agents into a run of their own, JOINing at the store on port `at`: ms from the
 * last JOIN sent to the last reply, in *cpu_ms the store's CPU time over that span, in
 * *redirects the redirects the agents followed. */
static double join_once(int n, int run, uint16_t at, double *cpu_ms, uint64_t *redirects) {
    rdzv_join_req_t req;
    char id[RDZV_RUN_ID_MAX + 1];
    const char *kind = at == port ? "d" : "j";
    if (run_id_arg != NULL)
        snprintf(id, sizeof id, "%s-%s%d", run_id_arg, kind, run);
    else
        snprintf(id, sizeof id, "scale-join-%d-%d-%s%d", (int)getpid(), n, kind, run);
    cfg_fill(&req, id, n, n, 0);
    rdzv_sim_t s;
    memset(&s, 0, sizeof s);
    s.epfd = -1;
    double t = -1;
    long syn0 = syn_retransmits();
    if (rdzv_sim_init(&s, at, &req, 0, 0) == 0 && rdzv_sim_add(&s, (size_t)n) >= 0) {
        rdzv_sim_expect(&s, 0);
        double c0 = proc_cpu_ms(dpid), b0 = self_cpu_s();
        if (rdzv_sim_join(&s, 0, (size_t)n) == 0) {
            uint64_t t0 = ddp_now_ns();
            if (rdzv_sim_wait_assigned(&s, (size_t)n, deadline()) == 0)
                t = ms_since(t0, s.last_assigned_ns);
            /* Where the time goes, on a machine of few cores: the simulator (every node's
             * side of its connections and its redirect) and the leader's store. */
            if (t >= 0 && at != port)
                printf("# %d nodes: join %d through a redirect: %.0f ms, of which CPU: the "
                       "simulator's %.0f ms, the leader's %.0f ms; SYNs retransmitted (this "
                       "host): %ld\n",
                       n, run, t, (self_cpu_s() - b0) * 1e3, proc_cpu_ms(dpid) - c0,
                       syn_retransmits() - syn0);
        }
        *cpu_ms = proc_cpu_ms(dpid) - c0;
        *redirects = s.redirects;
    }
    if (t < 0)
        fprintf(stderr, "bench_rdzv_scale: join of %d: %s\n", n, s.err);
    rdzv_sim_free(&s);
    return t;
}

/* Runs `ddprun status [flag]` against the run, stepping the agents meanwhile. Returns its wall
 * time in ms and its output size in *bytes, or -1. */
static double status_cmd(rdzv_sim_t *s, const char *ddprun, const char *flag, long *bytes) {
    char ep[64], out[] = "/tmp/bench_rdzv_scale.XXXXXX";
    snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)port);
    int fd = mkstemp(out);
    if (fd < 0)
        return -1;
    char *argv[] = {(char *)ddprun, "status",       "--rdzv_endpoint", ep,
                    "--rdzv_id",    s->tmpl.run_id, (char *)flag,      NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    pid_t pid;
    uint64_t t0 = ddp_now_ns();
    int rc = posix_spawn(&pid, ddprun, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    double t = -1;
    if (rc == 0) {
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0)
            if (rdzv_sim_step(s, 2) < 0) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                break;
            }
        if (w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            t = ms_since(t0, ddp_now_ns());
            struct stat sb;
            *bytes = stat(out, &sb) == 0 ? (long)sb.st_size : -1;
        } else {
            fprintf(stderr, "bench_rdzv_scale: ddprun status failed (status %d)\n", st);
        }
    }
    unlink(out);
    return t;
}

/* Asks for the run's STATUS on a connection of its own: the reply's size in *bytes and the time
 * from request to the whole reply, in ms, or -1. The agents wait meanwhile (tens of ms). */
static double status_raw(const char *run_id, long *bytes) {
    struct sockaddr_in sin = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ddp_buf_t b = DDP_BUF_INIT, in = DDP_BUF_INIT;
    double t = -1;
    rdzv__put_u8(&b, RDZV_CMD_VALIDATE);
    rdzv__put_u32(&b, RDZV_VALIDATE_MAGIC);
    rdzv_status_req_encode(&b, run_id);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0) {
        uint64_t t0 = ddp_now_ns();
        if (write(fd, b.data, b.len) == (ssize_t)b.len) {
            uint8_t buf[65536];
            for (;;) {
                ssize_t r = read(fd, buf, sizeof buf);
                if (r <= 0 || ddp_buf_append(&in, buf, (size_t)r) < 0)
                    break;
                size_t need = 0;
                long len = rdzv_round_reply_len(NULL, in.data, in.len, &need);
                if (len < 0)
                    break;
                if (len > 0) {
                    t = ms_since(t0, ddp_now_ns());
                    *bytes = len;
                    break;
                }
            }
        }
    }
    if (fd >= 0)
        close(fd);
    ddp_buf_free(&b);
    ddp_buf_free(&in);
    return t;
}

typedef struct figures {
    double join_cpu_ms, fail_cpu_ms, up_cpu_ms;
    double join_ms, fail_ms, silent_ms, detect_ms, down_ms, up_ms, last_call_ms;
    double core_pct, bench_core_pct, rss_mib, kib_per_node;
    double st_text_ms, st_json_ms, st_all_ms, st_raw_ms;
    long st_text_b, st_json_b, st_all_b, st_raw_b;
    double join_direct_ms, join_redirects; /* --join-at: the direct join; redirects per node */
    double failover_ms;                    /* --failover */
} figures_t;

/* Median of `runs` status measurements. */
static int status_all(rdzv_sim_t *s, const char *ddprun, figures_t *f) {
    double t[STATUS_RUNS], j[STATUS_RUNS], a[STATUS_RUNS], r[STATUS_RUNS];
    for (int i = 0; i < STATUS_RUNS; i++) {
        if ((t[i] = status_cmd(s, ddprun, NULL, &f->st_text_b)) < 0 ||
            (j[i] = status_cmd(s, ddprun, "--json", &f->st_json_b)) < 0 ||
            (a[i] = status_cmd(s, ddprun, "--all", &f->st_all_b)) < 0 ||
            (r[i] = status_raw(s->tmpl.run_id, &f->st_raw_b)) < 0)
            return -1;
    }
    f->st_text_ms = bench_median(t, STATUS_RUNS);
    f->st_json_ms = bench_median(j, STATUS_RUNS);
    f->st_all_ms = bench_median(a, STATUS_RUNS);
    f->st_raw_ms = bench_median(r, STATUS_RUNS);
    return 0;
}

/* The current round (every running agent holds it). */
static int64_t current_round(const rdzv_sim_t *s) {
    long i = rdzv_sim_find_rank(s, 0);
    return i >= 0 ? s->a[i].round : -1;
}

static int report_fail(rdzv_sim_t *s, const char *what) {
    fprintf(stderr, "bench_rdzv_scale: %s: %s\n", what, s->err);
    return -1;
}

/* --failover: one keep-alive interval of heartbeats, then the leader (DAEMON_PID) is killed;
 * every node finds the new leader through the candidates. */
static int failover(rdzv_sim_t *s, figures_t *f) {
    if (rdzv_sim_set_candidates(s, failover_cands) < 0)
        return report_fail(s, "--failover");
    uint64_t interval_ns = (uint64_t)s->tmpl.cfg.keep_alive_interval_ms * 1000000u;
    if (rdzv_sim_idle_until(s, ddp_now_ns() + interval_ns) < 0)
        return report_fail(s, "keep-alive before the failover");
    size_t live = 0;
    for (size_t i = 0; i < s->n; i++)
        live += s->a[i].state == RDZV_SIM_RUNNING;
    uint64_t r0 = s->redirects, st0 = s->stale_redirects, ny0 = s->not_yet;
    rdzv_sim_expect(s, RDZV_SIM_ANY_ROUND);
    uint64_t t0 = ddp_now_ns();
    if (kill(dpid, SIGKILL) < 0) {
        fprintf(stderr, "bench_rdzv_scale: kill %d: %s\n", dpid, strerror(errno));
        return -1;
    }
    int rc = rdzv_sim_wait_assigned(s, live, deadline());
    f->failover_ms = ms_since(t0, s->last_assigned_ns);
    printf("# %d nodes: failover: %zu nodes; %llu reconnects (%llu refused), %llu redirects (%llu "
           "to the dead store, asked again), %llu 'not yet' answers\n",
           (int)s->tmpl.cfg.max_nodes, live, (unsigned long long)s->reconnects,
           (unsigned long long)s->refused_conns, (unsigned long long)(s->redirects - r0),
           (unsigned long long)(s->stale_redirects - st0), (unsigned long long)(s->not_yet - ny0));
    return rc < 0 ? report_fail(s, "failover") : 0;
}

/* The main run: every path but the separate join runs. */
static int main_run(int n, double keepalive_s, const char *ddprun, int64_t last_call_ms,
                    long rss_base_kib, figures_t *f) {
    rdzv_join_req_t req;
    char id[RDZV_RUN_ID_MAX + 1];
    if (run_id_arg != NULL)
        snprintf(id, sizeof id, "%s", run_id_arg);
    else
        snprintf(id, sizeof id, "scale-%d-%d", (int)getpid(), n);
    int64_t min = n > SCALE_STEP ? n - SCALE_STEP : 1;
    cfg_fill(&req, id, min, n, last_call_ms);
    rdzv_sim_t s;
    if (rdzv_sim_init(&s, join_port, &req, 1, 1) < 0 || rdzv_sim_add(&s, (size_t)n) < 0)
        return report_fail(&s, "connect");
    rdzv_sim_expect(&s, 0);
    if (rdzv_sim_join(&s, 0, (size_t)n) < 0 ||
        rdzv_sim_wait_assigned(&s, (size_t)n, deadline()) < 0)
        return report_fail(&s, "first round");

    /* Keep-alive: one interval to spread the beats, then the measured window. */
    uint64_t interval_ns = (uint64_t)req.cfg.keep_alive_interval_ms * 1000000u;
    if (rdzv_sim_idle_until(&s, ddp_now_ns() + interval_ns) < 0)
        return report_fail(&s, "keep-alive");
    double c0 = proc_cpu_ms(dpid), b0 = self_cpu_s();
    uint64_t t0 = ddp_now_ns(), beats0 = s.beats_sent;
    if (rdzv_sim_idle_until(&s, t0 + (uint64_t)(keepalive_s * 1e9)) < 0)
        return report_fail(&s, "keep-alive");
    double wall = ms_since(t0, ddp_now_ns()) / 1e3;
    f->core_pct = (proc_cpu_ms(dpid) - c0) / 1e3 / wall * 100.0;
    f->bench_core_pct = (self_cpu_s() - b0) / wall * 100.0;
    long rss = bench_proc_kib(dpid, "VmRSS");
    if (rss < 0 || f->core_pct < 0) {
        fprintf(stderr, "bench_rdzv_scale: the daemon (pid %d) is gone\n", dpid);
        return -1;
    }
    f->rss_mib = (double)rss / 1024.0;
    f->kib_per_node = (double)(rss - rss_base_kib) / n;
    if (s.beats_refused > 0) {
        fprintf(stderr, "bench_rdzv_scale: %llu keep-alives refused\n",
                (unsigned long long)s.beats_refused);
        return -1;
    }
    printf("# %d nodes: %.0f keep-alives/s over %.0f s\n", n,
           (double)(s.beats_sent - beats0) / wall, wall);

    if (status_all(&s, ddprun, f) < 0)
        return report_fail(&s, "status");

    /* Re-form after a FAIL from the node of group rank 1. */
    int64_t round = current_round(&s);
    long v = rdzv_sim_find_rank(&s, n > 1 ? 1 : 0);
    ddp_buf_t b = DDP_BUF_INIT;
    rdzv_fail_req_encode(&b, id, round, "rank 9 exited with code 1");
    rdzv_sim_expect(&s, round + 1);
    double cpu0 = proc_cpu_ms(dpid);
    t0 = ddp_now_ns();
    ssize_t w = write(s.a[v].fd, b.data, b.len);
    ddp_buf_free(&b);
    if (w < 0 || rdzv_sim_wait_assigned(&s, (size_t)n, deadline()) < 0)
        return report_fail(&s, "re-form after FAIL");
    f->fail_ms = ms_since(t0, s.last_assigned_ns);
    f->fail_cpu_ms = proc_cpu_ms(dpid) - cpu0;

    /* A spare waits (the run is at max), then the node of group rank 2 goes silent right
     * after a keep-alive: the store declares it dead keep_alive_interval x max_attempt later. */
    long spare = rdzv_sim_add(&s, 1);
    if (spare < 0 || rdzv_sim_join(&s, (size_t)spare, (size_t)spare + 1) < 0 ||
        rdzv_sim_idle_until(&s, ddp_now_ns() + 200000000u) < 0)
        return report_fail(&s, "spare");
    round = current_round(&s);
    v = rdzv_sim_find_rank(&s, n > 2 ? 2 : 0);
    uint64_t before = s.a[v].last_beat_ns;
    while (s.a[v].last_beat_ns == before)
        if (rdzv_sim_step(&s, 10) < 0)
            return report_fail(&s, "silence");
    s.a[v].silent = 1;
    uint64_t fault = s.a[v].last_beat_ns;
    f->detect_ms = (double)(req.cfg.keep_alive_interval_ms * req.cfg.keep_alive_max_attempt);
    rdzv_sim_expect(&s, round + 1);
    if (rdzv_sim_wait_assigned(&s, (size_t)n, deadline()) < 0)
        return report_fail(&s, "re-form after silence");
    f->silent_ms = ms_since(fault, s.last_assigned_ns) - f->detect_ms;
    /* The spare waited through the detection: its keep-alive answers, each JOINed again. */
    printf("# %d nodes: the spare was answered %llu time%s while it waited\n", n,
           (unsigned long long)s.spare_answers, s.spare_answers == 1 ? "" : "s");
    if (s.closed_by_store != 1) {
        fprintf(stderr, "bench_rdzv_scale: the store closed %zu silent nodes, not 1\n",
                s.closed_by_store);
        return -1;
    }

    /* Scale-down: SCALE_STEP nodes leave at once; the smaller round waits out last call. */
    size_t step = n > SCALE_STEP ? SCALE_STEP : 0;
    round = current_round(&s);
    rdzv_sim_expect(&s, round + 1);
    size_t dropped = 0;
    t0 = ddp_now_ns();
    for (size_t i = s.n; i-- > 0 && dropped < step;)
        if (s.a[i].state == RDZV_SIM_RUNNING && s.a[i].group_rank != 0) {
            rdzv_sim_drop(&s, i);
            dropped++;
        }
    if (step > 0 && rdzv_sim_wait_assigned(&s, (size_t)n - step, deadline()) < 0)
        return report_fail(&s, "scale-down");
    f->last_call_ms = (double)last_call_ms;
    f->down_ms = step > 0 ? ms_since(t0, s.last_assigned_ns) - f->last_call_ms : 0;

    /* Scale-up: SCALE_STEP new nodes join at once; the round closes at max. */
    long first = step > 0 ? rdzv_sim_add(&s, step) : 0;
    round = current_round(&s);
    rdzv_sim_expect(&s, round + 1);
    cpu0 = proc_cpu_ms(dpid);
    t0 = ddp_now_ns();
    if (first < 0 || (step > 0 && rdzv_sim_join(&s, (size_t)first, (size_t)first + step) < 0) ||
        (step > 0 && rdzv_sim_wait_assigned(&s, (size_t)n, deadline()) < 0))
        return report_fail(&s, "scale-up");
    f->up_ms = step > 0 ? ms_since(t0, s.last_assigned_ns) : 0;
    f->up_cpu_ms = proc_cpu_ms(dpid) - cpu0;
    if (failover_cands != NULL && failover(&s, f) < 0)
        return -1;
    rdzv_sim_free(&s);
    return 0;
}

int main(int argc, char **argv) {
    int64_t v, n, join_runs = 3, last_call_ms = 1000;
    double keepalive_s = 60;
    const char *ddprun = "build/ddprun";
    if (argc < 4 || ddp_parse_i64(argv[1], 1, 65535, &v) < 0 ||
        (port = (uint16_t)v, ddp_parse_i64(argv[2], 1, INT32_MAX, &v) < 0) ||
        (dpid = (int)v, ddp_parse_i64(argv[3], 1, RDZV_ROUND_MAX_NODES, &n) < 0))
        goto usage;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--keepalive-s") == 0 && ddp_parse_i64(argv[i + 1], 1, 3600, &v) == 0)
            keepalive_s = (double)v;
        else if (strcmp(argv[i], "--join-runs") == 0 &&
                 ddp_parse_i64(argv[i + 1], 1, 100, &join_runs) == 0)
            ;
        else if (strcmp(argv[i], "--last-call-ms") == 0 &&
                 ddp_parse_i64(argv[i + 1], 1, 600000, &last_call_ms) == 0)
            ;
        else if (strcmp(argv[i], "--keep-alive-ms") == 0 &&
                 ddp_parse_i64(argv[i + 1], 100, 600000, &keep_alive_ms) == 0)
            ;
        else if (strcmp(argv[i], "--ddprun") == 0)
            ddprun = argv[i + 1];
        else if (strcmp(argv[i], "--run-id") == 0 && strlen(argv[i + 1]) + 8 <= RDZV_RUN_ID_MAX)
            run_id_arg = argv[i + 1];
        else if (strcmp(argv[i], "--join-at") == 0 && ddp_parse_i64(argv[i + 1], 1, 65535, &v) == 0)
            join_port = (uint16_t)v;
        else if (strcmp(argv[i], "--failover") == 0)
            failover_cands = argv[i + 1];
        else
            goto usage;
    }
    if ((argc - 4) % 2 != 0)
        goto usage;
    if (join_port == 0)
        join_port = port;
    if (failover_cands != NULL) {
        /* Checked now, not after minutes of the other paths. */
        rdzv_sim_t check;
        rdzv_join_req_t req;
        cfg_fill(&req, "check", 1, 1, 0);
        int bad = rdzv_sim_init(&check, port, &req, 0, 0) < 0 ||
                  rdzv_sim_set_candidates(&check, failover_cands) < 0;
        if (bad)
            fprintf(stderr, "bench_rdzv_scale: --failover: %s\n", check.err);
        rdzv_sim_free(&check);
        if (bad)
            return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rdzv_sim_raise_nofile();
    figures_t f;
    memset(&f, 0, sizeof f);
    /* Every CPU and RSS figure is read from the daemon's /proc entries. */
    long rss_base = bench_proc_kib(dpid, "VmRSS");
    if (rss_base < 0 || proc_cpu_ms(dpid) < 0) {
        fprintf(stderr, "bench_rdzv_scale: cannot read /proc/%d (the daemon's CPU time and RSS)\n",
                dpid);
        return 1;
    }
    double *jv = calloc((size_t)join_runs, sizeof *jv), *jc = calloc((size_t)join_runs, sizeof *jc);
    if (jv == NULL || jc == NULL) {
        fprintf(stderr, "bench_rdzv_scale: out of memory\n");
        return 1;
    }
    uint64_t redirects = 0, rd;
    for (int r = 0; r < join_runs; r++, redirects += rd)
        if ((jv[r] = join_once((int)n, r, join_port, &jc[r], &rd)) < 0)
            return 1;
    f.join_ms = bench_median(jv, (int)join_runs);
    f.join_cpu_ms = bench_median(jc, (int)join_runs);
    f.join_redirects = (double)redirects / (double)join_runs / (double)n;
    if (join_port != port) {
        /* The same joins at the leader's store directly: what the redirect adds. */
        for (int r = 0; r < join_runs; r++)
            if ((jv[r] = join_once((int)n, r, port, &jc[r], &rd)) < 0)
                return 1;
        f.join_direct_ms = bench_median(jv, (int)join_runs);
    }
    free(jv);
    free(jc);
    if (main_run((int)n, keepalive_s, ddprun, last_call_ms, rss_base, &f) < 0)
        return 1;
    double reform = f.silent_ms > f.fail_ms ? f.silent_ms : f.fail_ms;
    printf("| %d | %.1f | %.1f | %.1f | %.0f | %.1f (last call %.0f) | %.1f | %.2f (bench %.1f) | "
           "%.1f (%.1f KiB/node) | %.0f ms, %ld B | %.0f ms, %ld B | %.0f ms, %ld B | "
           "%.0f ms, %ld B |\n",
           (int)n, f.join_ms, f.silent_ms, f.fail_ms, f.detect_ms, f.down_ms, f.last_call_ms,
           f.up_ms, f.core_pct, f.bench_core_pct, f.rss_mib, f.kib_per_node, f.st_text_ms,
           f.st_text_b, f.st_json_ms, f.st_json_b, f.st_all_ms, f.st_all_b, f.st_raw_ms,
           f.st_raw_b);
    /* The store's own CPU per node: flat when a path costs it O(1) per node. */
    printf(
        "# %d nodes: store CPU per node: join %.1f us, re-form after FAIL %.1f us, scale-up %.1f "
        "us\n",
        (int)n, f.join_cpu_ms * 1e3 / (double)n, f.fail_cpu_ms * 1e3 / (double)n,
        f.up_cpu_ms * 1e3 / (double)n);
    printf("rdzv-scale nodes=%d join_ms=%.1f reform_ms=%.1f detect_ms=%.0f keepalive_core_pct=%.2f "
           "store_rss_mib=%.1f status_ms=%.0f",
           (int)n, f.join_ms, reform, f.detect_ms, f.core_pct, f.rss_mib, f.st_text_ms);
    if (join_port != port)
        printf(" join_direct_ms=%.1f redirects_per_node=%.2f", f.join_direct_ms, f.join_redirects);
    if (failover_cands != NULL)
        printf(" failover_ms=%.1f", f.failover_ms);
    printf("\n");
    return 0;
usage:
    fprintf(stderr, "usage: bench_rdzv_scale PORT DAEMON_PID N [--keepalive-s S] [--join-runs R] "
                    "[--ddprun PATH] [--last-call-ms L] [--keep-alive-ms K] [--run-id ID] "
                    "[--join-at P] [--failover HOST:PORT+...]\n");
    return 2;
}
