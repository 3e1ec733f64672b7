/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the NCCL profiler plugin (worker_template/ncclprof): the accounting alone (gaps
 * are compute, collectives are wait, overlaps counted once, publication in batches), then the
 * plugin's entry points driven as NCCL 2.28 (and 2.27, API v4) drives them: init per communicator,
 * a collective or p2p event per operation (started and stopped at enqueue), kernel channel events
 * with the GPU's timestamps from the proxy thread (started, their stop recorded, stopped),
 * finalize. The GPU clock is a fake one: the timestamps are the test's. Last, the built library
 * itself, loaded as NCCL loads it, publishes into a DDPRUN_TIMING_FILE read back as the agent reads
 * it. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_contract.h"
#include "ddp_timing.h"
#include "ncclprof_int.h"

#define MS 1000000ULL

/* What the plugin published, summed, and how many times. */
static struct {
    pthread_mutex_t mu;
    uint64_t compute_ns, wait_ns, steps;
    int calls;
} g_pub = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void record(uint64_t compute_ns, uint64_t wait_ns, uint32_t steps) {
    pthread_mutex_lock(&g_pub.mu);
    g_pub.compute_ns += compute_ns;
    g_pub.wait_ns += wait_ns;
    g_pub.steps += steps;
    g_pub.calls++;
    pthread_mutex_unlock(&g_pub.mu);
}

static void pub_reset(void) {
    g_pub.compute_ns = g_pub.wait_ns = g_pub.steps = 0;
    g_pub.calls = 0;
}

/* ---- the accounting ---- */

static void test_acct_gaps_and_collectives(void **state) {
    (void)state;
    pub_reset();
    ncclprof_acct_t a;
    ncclprof__acct_init(&a, 1000 * MS, record);
    /* The first collective: its time is wait, the time before it is nobody's compute. */
    ncclprof__acct_op(&a, 100 * MS, 103 * MS);
    /* 10 ms of compute, 2 ms in the next; then 20 ms and 5 ms. */
    ncclprof__acct_op(&a, 113 * MS, 115 * MS);
    ncclprof__acct_op(&a, 135 * MS, 140 * MS);
    assert_int_equal(g_pub.calls, 0); /* less than the interval so far */
    assert_int_equal(a.total_compute_ns, 30 * MS);
    assert_int_equal(a.total_wait_ns, 10 * MS);
    assert_int_equal(a.total_steps, 3);
    ncclprof__acct_flush(&a);
    assert_int_equal(g_pub.calls, 1);
    assert_int_equal(g_pub.compute_ns, 30 * MS);
    assert_int_equal(g_pub.wait_ns, 10 * MS);
    assert_int_equal(g_pub.steps, 3);
    /* Nothing new: a second flush publishes nothing. */
    ncclprof__acct_flush(&a);
    assert_int_equal(g_pub.calls, 1);
}

static void test_acct_overlap_counted_once(void **state) {
    (void)state;
    pub_reset();
    ncclprof_acct_t a;
    ncclprof__acct_init(&a, 1000 * MS, record);
    ncclprof__acct_op(&a, 10 * MS, 20 * MS);
    /* Two collectives of one group, on different channels of one kernel: 15-25 overlaps 10-20,
     * so only 20-25 is new waiting and there is no compute between them. */
    ncclprof__acct_op(&a, 15 * MS, 25 * MS);
    /* Wholly inside what is counted (a late completion): one more step, no more time. */
    ncclprof__acct_op(&a, 12 * MS, 18 * MS);
    ncclprof__acct_op(&a, 30 * MS, 31 * MS);
    assert_int_equal(a.total_wait_ns, 16 * MS);
    assert_int_equal(a.total_compute_ns, 5 * MS);
    assert_int_equal(a.total_steps, 4);
    /* No timestamps (a channel never reported): ignored. A stop before the start: zero long. */
    ncclprof__acct_op(&a, 0, 40 * MS);
    ncclprof__acct_op(&a, 50 * MS, 0);
    assert_int_equal(a.total_steps, 4);
    ncclprof__acct_op(&a, 45 * MS, 44 * MS);
    assert_int_equal(a.total_steps, 5);
    assert_int_equal(a.total_compute_ns, 19 * MS);
    assert_int_equal(a.total_wait_ns, 16 * MS);
}

static void test_acct_publishes_each_interval(void **state) {
    (void)state;
    pub_reset();
    ncclprof_acct_t a;
    ncclprof__acct_init(&a, 100 * MS, record);
    /* A 10 ms step: 8 ms of compute, 2 ms of allreduce, for one second of GPU time. */
    uint64_t t = 1000 * MS;
    for (int i = 0; i < 100; i++, t += 10 * MS)
        ncclprof__acct_op(&a, t + 8 * MS, t + 10 * MS);
    /* One publication per 100 ms of GPU time, each with every step since the last. */
    assert_in_range(g_pub.calls, 9, 10);
    ncclprof__acct_flush(&a);
    assert_int_equal(g_pub.steps, 100);
    assert_int_equal(g_pub.wait_ns, 200 * MS);
    assert_int_equal(g_pub.compute_ns, 99 * 8 * MS); /* the first step's compute is unknown */
    assert_int_equal(a.steps, 0);
}

/* ---- the plugin, as NCCL calls it ---- */

static const ncclProfiler_v5_t *P = &ncclProfiler_v5;
static char g_logged[512];
static int g_log_lines;

static void logfn(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                  const char *fmt, ...) {
    (void)level;
    (void)flags;
    (void)file;
    (void)line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_logged, sizeof g_logged, fmt, ap);
    va_end(ap);
    g_log_lines++;
}

/* The agent's variables. The timing file's name only switches the plugin on here: these tests
 * publish through record(), the last one through the file. */
static void agent_env(const char *world) {
    setenv("DDPRUN_TIMING_FILE", "/nonexistent/ncclprof-test", 1);
    setenv("WORLD_SIZE", world, 1);
}

/* init as NCCL calls it for a communicator of nranks named name; returns the context. */
static void *comm_init_named(const char *name, int nranks, int rank, int *mask) {
    void *ctx = (void *)1;
    *mask = -1;
    assert_int_equal(P->init(&ctx, 0x1234, mask, name, 1, nranks, rank, logfn), ncclSuccess);
    return ctx;
}

static void *comm_init(int nranks, int rank, int *mask) {
    return comm_init_named("test-comm", nranks, rank, mask);
}

/* NCCL's enqueue of one collective on nch channels: the event starts and, once the proxy has
 * its work, stops. Returns the handle NCCL keeps as the channel events' parent. */
static void *coll_start(void *ctx, int nch) {
    ncclProfilerEventDescr_v5_t d = {.type = ncclProfileColl, .rank = 0};
    d.coll.func = "AllReduce";
    d.coll.count = 1024;
    d.coll.nChannels = (uint8_t)nch;
    void *h = (void *)1;
    assert_int_equal(P->startEvent(ctx, &h, &d), ncclSuccess);
    return h;
}

static void *p2p_start(void *ctx, int nch) {
    ncclProfilerEventDescr_v5_t d = {.type = ncclProfileP2p};
    d.p2p.func = "Send";
    d.p2p.nChannels = (uint8_t)nch;
    void *h = (void *)1;
    assert_int_equal(P->startEvent(ctx, &h, &d), ncclSuccess);
    return h;
}

static void event_stop(void *h) {
    assert_int_equal(P->stopEvent(h), ncclSuccess);
}

/* The proxy thread's report of one channel: started at t0, finished at t1 (GPU time). */
static void *channel_start(void *ctx, void *parent, int ch, uint64_t t0) {
    ncclProfilerEventDescr_v5_t d = {.type = ncclProfileKernelCh, .parentObj = parent};
    d.kernelCh.channelId = (uint8_t)ch;
    d.kernelCh.pTimer = t0;
    void *h = (void *)1;
    assert_int_equal(P->startEvent(ctx, &h, &d), ncclSuccess);
    return h;
}

static void channel_stop(void *h, uint64_t t1) {
    ncclProfilerEventStateArgs_v5_t a = {.kernelCh = {.pTimer = t1}};
    assert_int_equal(P->recordEventState(h, ncclProfilerKernelChStop, &a), ncclSuccess);
    assert_int_equal(P->stopEvent(h), ncclSuccess);
}

/* One whole collective on nch channels from t0 to t1, channels in a slightly staggered order. */
static void one_coll(void *ctx, int nch, uint64_t t0, uint64_t t1) {
    void *c = coll_start(ctx, nch);
    assert_non_null(c);
    event_stop(c);
    void *ch[8];
    for (int i = 0; i < nch; i++)
        ch[i] = channel_start(ctx, c, i, t0 + (uint64_t)i * 1000);
    for (int i = nch - 1; i >= 0; i--)
        channel_stop(ch[i], t1 - (uint64_t)i * 1000);
}

static int setup(void **state) {
    (void)state;
    ncclprof__set_publish(record, 50 * MS);
    pub_reset();
    g_log_lines = 0;
    g_logged[0] = '\0';
    unsetenv("DDPRUN_TIMING_FILE");
    unsetenv("WORLD_SIZE");
    return 0;
}

/* Outside ddprun: no context, no events asked for, and an event NCCL sends anyway is refused
 * cheaply. */
static void test_plugin_off_without_agent(void **state) {
    (void)state;
    int mask;
    assert_null(comm_init(4, 0, &mask));
    assert_int_equal(mask, 0);
    /* WORLD_SIZE without the agent's timing file: still off; and a bad WORLD_SIZE with it. */
    setenv("WORLD_SIZE", "4", 1);
    assert_null(comm_init(4, 0, &mask));
    assert_int_equal(mask, 0);
    agent_env("4x");
    assert_null(comm_init(4, 0, &mask));
    assert_int_equal(mask, 0);
    void *h = (void *)1;
    ncclProfilerEventDescr_v5_t d = {.type = ncclProfileColl};
    assert_int_equal(P->startEvent(NULL, &h, &d), ncclSuccess);
    assert_null(h);
    assert_int_equal(P->stopEvent(NULL), ncclSuccess);
    assert_int_equal(P->recordEventState(NULL, ncclProfilerKernelChStop, NULL), ncclSuccess);
    assert_int_equal(P->finalize(NULL), ncclSuccess);
    assert_int_equal(g_pub.calls, 0);
    assert_int_equal(g_log_lines, 0);
}

/* The world's communicator is timed; a subgroup's and a second world communicator are not, but
 * the mask (one per process in NCCL) stays on for the timed one. */
static void test_plugin_times_the_world_communicator(void **state) {
    (void)state;
    agent_env("4");
    int mask;
    assert_null(comm_init(2, 0, &mask)); /* a subgroup first */
    assert_int_equal(mask, 0);
    /* libddpw's own communicator: the library times it itself. */
    assert_null(comm_init_named(DDP_NCCL_COMM_NAME, 4, 1, &mask));
    assert_int_equal(mask, 0);
    void *world = comm_init(4, 1, &mask);
    assert_non_null(world);
    assert_int_equal(mask, ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
    assert_non_null(strstr(g_logged, "rank 1 of 4: timing communicator test-comm"));
    void *second = comm_init(4, 1, &mask);
    assert_null(second);
    assert_int_equal(mask, ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
    /* The untimed communicator's events (NULL context) give no handle. */
    assert_null(coll_start(NULL, 2));
    assert_int_equal(P->finalize(world), ncclSuccess);
    /* Its end frees the place: the next world communicator is timed. */
    void *next = comm_init(4, 1, &mask);
    assert_non_null(next);
    assert_int_equal(P->finalize(next), ncclSuccess);
}

/* A training loop's allreduces, one after the other: 8 ms of compute between 2 ms collectives,
 * on 2 channels; the published totals are the GPU's timeline. */
static void test_plugin_collectives_to_counters(void **state) {
    (void)state;
    agent_env("2");
    int mask;
    void *ctx = comm_init(2, 0, &mask);
    assert_non_null(ctx);
    uint64_t t = 5000 * MS;
    for (int i = 0; i < 40; i++, t += 10 * MS)
        one_coll(ctx, 2, t, t + 2 * MS);
    /* 400 ms of GPU time, published every 50 ms as it goes. */
    assert_true(g_pub.calls >= 6);
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    assert_int_equal(g_pub.steps, 40);
    assert_int_equal(g_pub.wait_ns, 40 * 2 * MS);
    assert_int_equal(g_pub.compute_ns, 39 * 8 * MS);
    assert_non_null(strstr(g_logged, "rank 0 of 2: 40 operations, compute 0.312 s, wait 0.080 s"));
}

/* NCCL's orders: the host enqueues ahead of the GPU (three collectives started before the first
 * channel reports); a channel can report before its collective's host event stops (which says
 * only that NCCL has enqueued it: the operation is complete with its channels); a p2p
 * operation counts as a collective; a channel event after its operation is complete, or naming
 * no parent or a pointer that is not one of the plugin's, is ignored. */
static void test_plugin_event_orders(void **state) {
    (void)state;
    agent_env("2");
    int mask;
    void *ctx = comm_init(2, 1, &mask);
    void *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = coll_start(ctx, 1);
    event_stop(c[0]);
    event_stop(c[1]);
    /* c[2]'s channel starts and ends before its host event stops. */
    channel_stop(channel_start(ctx, c[0], 0, 100 * MS), 101 * MS);
    channel_stop(channel_start(ctx, c[1], 0, 103 * MS), 104 * MS);
    void *h = channel_start(ctx, c[2], 0, 110 * MS);
    channel_stop(h, 115 * MS);
    void *p = p2p_start(ctx, 2);
    event_stop(p);
    void *p0 = channel_start(ctx, p, 0, 120 * MS), *p1 = channel_start(ctx, p, 1, 121 * MS);
    channel_stop(p0, 124 * MS);
    /* One channel of two done: the p2p operation is not complete yet. */
    event_stop(c[2]);
    channel_stop(p1, 125 * MS);
    /* Stale and foreign channel events. */
    assert_null(channel_start(ctx, c[0], 0, 200 * MS));
    assert_null(channel_start(ctx, NULL, 0, 200 * MS));
    int not_ours;
    assert_null(channel_start(ctx, &not_ours, 0, 200 * MS));
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    /* wait: 1 + 1 + 5 + 5 = 12 ms; compute: 2 + 6 + 5 = 13 ms. */
    assert_int_equal(g_pub.steps, 4);
    assert_int_equal(g_pub.wait_ns, 12 * MS);
    assert_int_equal(g_pub.compute_ns, 13 * MS);
}

/* A collective whose channels never all report (NCCL put it on fewer channels than it said)
 * goes in at finalize with what it has; one never run on the GPU is not counted. */
static void test_plugin_incomplete_operations(void **state) {
    (void)state;
    agent_env("2");
    int mask;
    void *ctx = comm_init(2, 0, &mask);
    one_coll(ctx, 1, 10 * MS, 12 * MS);
    void *c = coll_start(ctx, 4);
    event_stop(c);
    channel_stop(channel_start(ctx, c, 0, 20 * MS), 23 * MS);
    void *never = coll_start(ctx, 1);
    event_stop(never);
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    assert_int_equal(g_pub.steps, 2);
    assert_int_equal(g_pub.wait_ns, 5 * MS);
    assert_int_equal(g_pub.compute_ns, 8 * MS);
}

/* More operations enqueued than the ring holds while the GPU reports none: the oldest are
 * retired (never run: not counted) and the plugin keeps going. */
static void test_plugin_ring_wraps(void **state) {
    (void)state;
    agent_env("2");
    int mask;
    void *ctx = comm_init(2, 0, &mask);
    for (int i = 0; i < 10000; i++)
        event_stop(coll_start(ctx, 1));
    uint64_t t = 1000 * MS;
    for (int i = 0; i < 10; i++, t += 3 * MS)
        one_coll(ctx, 1, t, t + MS);
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    assert_int_equal(g_pub.steps, 10);
    assert_int_equal(g_pub.wait_ns, 10 * MS);
    assert_int_equal(g_pub.compute_ns, 9 * 2 * MS);
}

/* The host thread enqueues while NCCL's proxy thread reports channels, as in a real run: every
 * operation is counted once, with exact totals. */
#define THREAD_OPS 20000
static void *g_handles[THREAD_OPS];
static _Atomic int g_enqueued, g_reported;

static void *proxy_thread(void *ctx) {
    uint64_t t = 1000 * MS;
    for (int i = 0; i < THREAD_OPS; i++, t += 4000) {
        while (g_enqueued <= i)
            sched_yield();
        void *a = channel_start(ctx, g_handles[i], 0, t + 1000);
        void *b = channel_start(ctx, g_handles[i], 1, t + 1100);
        channel_stop(b, t + 2000);
        channel_stop(a, t + 1900);
        g_reported = i + 1;
    }
    return NULL;
}

static void test_plugin_two_threads(void **state) {
    (void)state;
    agent_env("8");
    int mask;
    void *ctx = comm_init(8, 3, &mask);
    g_enqueued = g_reported = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, proxy_thread, ctx), 0);
    for (int i = 0; i < THREAD_OPS; i++) {
        /* The proxy never gets more than the ring's worth behind: NCCL's queue is bounded. */
        while (i - g_reported >= 1000)
            sched_yield();
        g_handles[i] = coll_start(ctx, 2);
        g_enqueued = i + 1;
        event_stop(g_handles[i]);
    }
    pthread_join(th, NULL);
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    assert_int_equal(g_pub.steps, THREAD_OPS);
    assert_int_equal(g_pub.wait_ns, (uint64_t)THREAD_OPS * 1000);
    assert_int_equal(g_pub.compute_ns, (uint64_t)(THREAD_OPS - 1) * 3000);
}

/* NCCL 2.27 (API v4): init's arguments in their old order, a one-byte type, and collective
 * events started only under a group event that has a handle. */
static void test_plugin_v4(void **state) {
    (void)state;
    agent_env("2");
    const ncclProfiler_v4_t *p4 = &ncclProfiler_v4;
    assert_string_equal(p4->name, "ddprun");
    int mask = -1;
    void *ctx = NULL;
    assert_int_equal(p4->init(&ctx, &mask, "v4-comm", 0x99, 1, 2, 0, logfn), ncclSuccess);
    assert_non_null(ctx);
    assert_int_equal(mask, ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
    assert_non_null(strstr(g_logged, "rank 0 of 2: timing communicator v4-comm"));
    uint64_t t = 300 * MS;
    for (int i = 0; i < 5; i++, t += 10 * MS) {
        ncclProfilerEventDescr_v4_t g = {.type = ncclProfileGroup}, c = {.type = ncclProfileColl};
        void *gh = NULL, *ch = NULL, *k[2];
        assert_int_equal(p4->startEvent(ctx, &gh, &g), ncclSuccess);
        assert_non_null(gh);
        c.parentObj = gh;
        c.coll.nChannels = 2;
        assert_int_equal(p4->startEvent(ctx, &ch, &c), ncclSuccess);
        assert_non_null(ch);
        assert_int_equal(p4->stopEvent(ch), ncclSuccess);
        assert_int_equal(p4->stopEvent(gh), ncclSuccess);
        for (int j = 0; j < 2; j++) {
            ncclProfilerEventDescr_v4_t kd = {.type = ncclProfileKernelCh, .parentObj = ch};
            kd.kernelCh.channelId = (uint8_t)j;
            kd.kernelCh.pTimer = t + (uint64_t)j * MS;
            assert_int_equal(p4->startEvent(ctx, &k[j], &kd), ncclSuccess);
            assert_non_null(k[j]);
        }
        for (int j = 0; j < 2; j++) {
            ncclProfilerEventStateArgs_v4_t a = {.kernelCh = {.pTimer = t + 4 * MS}};
            assert_int_equal(p4->recordEventState(k[j], ncclProfilerKernelChStop, &a), ncclSuccess);
            assert_int_equal(p4->stopEvent(k[j]), ncclSuccess);
        }
    }
    assert_int_equal(p4->finalize(ctx), ncclSuccess);
    assert_int_equal(g_pub.steps, 5);
    assert_int_equal(g_pub.wait_ns, 5 * 4 * MS);
    assert_int_equal(g_pub.compute_ns, 4 * 6 * MS);
}

/* The built libnccl-profiler-ddprun.so, found beside this binary (build/tests/unit/ ->
 * build/lib/), opened and searched as NCCL opens and searches it. */
static void *open_plugin(void) {
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(path, sizeof path, "%s/../../lib/libnccl-profiler-ddprun.so", exe);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        fail_msg("unable to open %s: %s", path, dlerror());
    return lib;
}

/* The library as NCCL uses it, publishing for real: the totals of a 2-rank job's allreduces land
 * in DDPRUN_TIMING_FILE, in the record the agent reads (ddp_timing_parse). The library exports
 * NCCL's entry point and nothing of the worker library inside it. */
static void test_library_publishes_to_timing_file(void **state) {
    (void)state;
    char dir[] = "/tmp/test_ncclprof.XXXXXX", file[64];
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/timing", dir);
    int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    setenv("DDPRUN_TIMING_FILE", file, 1);
    setenv("WORLD_SIZE", "2", 1);
    void *lib = open_plugin();
    assert_null(dlsym(lib, "ddpw_timing_add"));
    assert_null(dlsym(lib, "ncclprof__acct_op"));
    assert_non_null(dlsym(lib, "ncclProfiler_v4"));
    const ncclProfiler_v5_t *prof = dlsym(lib, "ncclProfiler_v5");
    assert_non_null(prof);
    assert_string_equal(prof->name, "ddprun");
    const ncclProfiler_v5_t *saved = P;
    P = prof; /* the helpers above now drive the loaded library */
    int mask;
    void *ctx = comm_init(2, 1, &mask);
    assert_non_null(ctx);
    assert_int_equal(mask, ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
    uint64_t t = 7000 * MS;
    for (int i = 0; i < 30; i++, t += 7 * MS)
        one_coll(ctx, 4, t, t + 3 * MS);
    assert_int_equal(P->finalize(ctx), ncclSuccess);
    P = saved;
    char buf[128];
    fd = open(file, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    assert_int_equal(n, DDP_TIMING_LEN);
    ddp_timing_t tm;
    assert_int_equal(ddp_timing_parse(buf, (size_t)n, &tm), 0);
    assert_int_equal(tm.steps, 30);
    assert_int_equal(tm.wait_ns, 30 * 3 * MS);
    assert_int_equal(tm.compute_ns, 29 * 4 * MS);
    /* The test's own recorder saw none of it. */
    assert_int_equal(g_pub.calls, 0);
    dlclose(lib);
    unlink(file);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acct_gaps_and_collectives),
        cmocka_unit_test(test_acct_overlap_counted_once),
        cmocka_unit_test(test_acct_publishes_each_interval),
        cmocka_unit_test_setup(test_plugin_off_without_agent, setup),
        cmocka_unit_test_setup(test_plugin_times_the_world_communicator, setup),
        cmocka_unit_test_setup(test_plugin_collectives_to_counters, setup),
        cmocka_unit_test_setup(test_plugin_event_orders, setup),
        cmocka_unit_test_setup(test_plugin_incomplete_operations, setup),
        cmocka_unit_test_setup(test_plugin_ring_wraps, setup),
        cmocka_unit_test_setup(test_plugin_two_threads, setup),
        cmocka_unit_test_setup(test_plugin_v4, setup),
        cmocka_unit_test_setup(test_library_publishes_to_timing_file, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
