/* SPDX-License-Identifier: Apache-2.0
 * ddpw_shm.c: the CPU backend. The ranks of one node share one POSIX shared-memory segment,
 * created once by local rank 0 (name exchanged through the store under the round prefix) and
 * unlinked as soon as every rank has mapped it, so nothing is left behind after a crash. Under
 * ddprun it is a file in DDPRUN_SHM_DIR, the agent's private directory on /dev/shm, which the
 * agent empties when the group stops: a rank 0 killed before its unlink leaks nothing either.
 * Elsewhere (torchrun, by hand) it is a shm_open name.
 *
 * Layout: a header (barrier words on their own cache lines, the ranks' pids), then one slot per
 * rank, each cut into n sub-slots. Allreduce of a chunk, on rank `me`:
 *   1. copy every segment j != me of its input into sub-slot j of its own slot;
 *   2. barrier; reduce segment me over all ranks in rank order (bitwise reproducible) into its
 *      own buffer and into sub-slot me of its own slot;
 *   3. barrier; copy the other ranks' reduced segments (sub-slot j of slot j) into its buffer.
 * A segment always lives in the same sub-slot, so writes of step 1 of the next chunk never touch
 * what a slower rank is still reading in step 3: two barriers per chunk, no third.
 * Messages up to SHM_SMALL_BYTES take a latency path instead: each rank copies its input into a
 * small slot, one barrier, and every rank reduces the whole message (same rank order, so the same
 * bits as the large path). The small slots come in two sets used alternately, so the next small
 * call never overwrites what a slower rank is still reading. */
#include "ddpw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_proc.h"
#include "ddp_time.h"

#define SHM_MAGIC 0x3130534d57504444ull /* "DDPWMS01" */
#define SHM_MAX_RANKS 1024
#define SHM_HDR_BYTES 8192
/* Busy polls (~5 us) before yielding: a peer that shares this core must get it soon. */
#define SHM_SPIN 128
#define SHM_YIELD_NS 5000000ull /* yield-polling before sleeping on the futex: 5 ms */
#define SHM_SLEEP_MS 50         /* futex sleep slice; peers' liveness is checked between slices */
#define RED_BLOCK 2048          /* floats reduced per block: the accumulator stays in L1 */
#define SHM_SMALL_BYTES (64u << 10) /* up to this size: one barrier, every rank reduces it all */

typedef struct shm_hdr {
    uint64_t magic;
    uint32_t n;
    uint32_t pad;
    uint64_t slot_bytes;
    alignas(64) _Atomic uint32_t count;
    alignas(64) _Atomic uint32_t gen;
    alignas(64) _Atomic uint32_t sleepers;
    alignas(64) _Atomic int32_t pids[SHM_MAX_RANKS];
} shm_hdr_t;

_Static_assert(sizeof(shm_hdr_t) <= SHM_HDR_BYTES, "shm header too large");

typedef struct ddpw_shm {
    const ddpw_ctx_t *ctx;
    shm_hdr_t *hdr;
    unsigned char *data;
    unsigned char *small; /* 2 sets x n slots x SHM_SMALL_BYTES, after the large slots */
    uint64_t small_calls; /* the same on every rank: every rank makes the same calls */
    size_t map_len;
    size_t slot_bytes; /* multiple of n * 64 */
    size_t sub_floats; /* floats per sub-slot, multiple of 16 */
    int n, me;
    int base; /* global rank of local rank 0 */
} ddpw_shm_t;

static void shm_fini(void *state);

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* 1 when pid is gone or a zombie (its parent has not reaped it yet). */
static int pid_dead(int32_t pid) {
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    ddp_proc_stat_t st;
    return ddp_proc_stat(pid, 0, &st) == 0 && (st.state == 'Z' || st.state == 'X');
}

/* Returns the local rank of a peer that has exited, or -1. */
static int dead_peer(ddpw_shm_t *s) {
    for (int i = 0; i < s->n; i++) {
        int32_t pid = atomic_load_explicit(&s->hdr->pids[i], memory_order_relaxed);
        if (pid > 0 && i != s->me && pid_dead(pid))
            return i;
    }
    return -1;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The barrier of the node's ranks: spin, then yield, then sleep on the futex in slices between
 * which the peers' liveness and the deadline are checked. The three stages are one wait. */
static int shm_barrier(ddpw_shm_t *s, ddp_err_t *err) {
    shm_hdr_t *h = s->hdr;
    uint32_t g = atomic_load(&h->gen);
    if (atomic_fetch_add(&h->count, 1) + 1 == (uint32_t)s->n) {
        atomic_store(&h->count, 0);
        atomic_fetch_add(&h->gen, 1);
        if (atomic_load(&h->sleepers) != 0)
            futex(&h->gen, FUTEX_WAKE, INT32_MAX, NULL);
        return 0;
    }
    for (int i = 0; i < SHM_SPIN; i++) {
        if (atomic_load_explicit(&h->gen, memory_order_acquire) != g)
            return 0;
        cpu_relax();
    }
    /* Then poll while yielding the core for up to SHM_YIELD_NS: on a busy machine the peer is
     * often just descheduled, and a futex sleep would add a wake-up latency (~100 us here) to
     * every barrier. Sleeping is for peers that are really late. */
    uint64_t t0 = ddp_now_ns();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&h->gen, memory_order_acquire) != g)
            return 0;
        sched_yield();
        if ((i & 63) == 63 && ddp_now_ns() - t0 > SHM_YIELD_NS)
            break;
    }
    uint64_t deadline = ddp_now_ms() + (uint64_t)s->ctx->timeout_ms;
    for (;;) {
        atomic_fetch_add(&h->sleepers, 1);
        if (atomic_load(&h->gen) == g) {
            struct timespec ts = {0, SHM_SLEEP_MS * 1000000L};
            futex(&h->gen, FUTEX_WAIT, g, &ts);
        }
        atomic_fetch_sub(&h->sleepers, 1);
        if (atomic_load(&h->gen) != g)
            return 0;
        int d = dead_peer(s);
        if (d >= 0)
            return ddp_err_set(err, DDP_ECLOSED,
                               "cpu collective: local rank %d (rank %d, pid %d) has exited", d,
                               s->base + d, (int)atomic_load(&h->pids[d]));
        if (ddp_now_ms() >= deadline)
            return ddp_err_set(err, DDP_ETIMEOUT,
                               "cpu collective: timed out after %d ms waiting for the other %d "
                               "local rank(s)",
                               s->ctx->timeout_ms, s->n - 1);
    }
}

static int shm_barrier_op(void *state, ddp_err_t *err) {
    return shm_barrier(state, err);
}

static int map_segment(ddpw_shm_t *s, int fd, int create, ddp_err_t *err, const char *name) {
    if (create && ftruncate(fd, (off_t)s->map_len) != 0)
        return ddp_err_set(err, -errno, "unable to size shared memory %s: %s", name,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ddp_err_set(err, -errno, "unable to stat shared memory %s: %s", name,
                           strerror(errno));
    if ((size_t)st.st_size != s->map_len)
        return ddp_err_set(err, DDP_EPROTO, "shared memory %s has %lld bytes, expected %zu", name,
                           (long long)st.st_size, s->map_len);
    /* MAP_POPULATE: first touch of fresh memory costs ~15 us per page here, so take every
     * fault now, once, instead of inside the first collectives. */
    void *p = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return ddp_err_set(err, -errno, "unable to map shared memory %s: %s", name,
                           strerror(errno));
    s->hdr = p;
    s->data = (unsigned char *)p + SHM_HDR_BYTES;
    s->small = s->data + s->slot_bytes * (size_t)s->n;
    return 0;
}

/* The agent's scratch directory (DDPRUN_SHM_DIR), or NULL: segments are then shm_open names. */
static const char *scratch_dir(void) {
    const char *d = getenv(DDP_ENV_SHM_DIR);
    return d != NULL && d[0] == '/' ? d : NULL;
}

/* Nonzero when the segment name is a path (in the scratch directory), not a shm_open name. */
static int segment_is_file(const char *name) {
    return strchr(name + 1, '/') != NULL;
}

/* Opens (or creates, O_EXCL) the segment name. Returns the descriptor or -1 (errno). Nothing
 * planted is written through: a new segment has a fresh random name and O_EXCL, and every open
 * refuses a link (O_NOFOLLOW), a file in the agent's private scratch directory (mkdtemp, 0700)
 * as much as a shm_open name in /dev/shm, which others may write. */
static int segment_open(const char *name, int create) {
    int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0);
    if (segment_is_file(name))
        return open(name, flags, 0600);
    return shm_open(name, flags, 0600);
}

static void segment_unlink(const char *name) {
    if (segment_is_file(name))
        unlink(name);
    else
        shm_unlink(name);
}

/* A name read from the store is one create_segment makes: a shm_open name, or a file directly in
 * this node's scratch directory; never another path. */
static int segment_name_ok(const char *name) {
    const char *dir = scratch_dir();
    size_t n = dir != NULL ? strlen(dir) : 0;
    const char *base = name;
    if (dir != NULL && strncmp(name, dir, n) == 0 && name[n] == '/')
        base = name + n;
    return strncmp(base, "/ddpw-", 6) == 0 && strchr(base + 1, '/') == NULL;
}

/* Local rank 0: creates the segment under a fresh random name (O_EXCL), maps it, fills the
 * header and publishes the name under key. *fd and name (cap bytes) are the caller's to clean. */
static int create_segment(ddpw_shm_t *s, const char *key, int *fd, char *name, size_t cap,
                          ddp_err_t *err) {
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = ddp_now_ns();
    const char *dir = scratch_dir();
    int len = snprintf(name, cap, "%s/ddpw-%d-%016llx", dir != NULL ? dir : "", (int)getpid(),
                       (unsigned long long)nonce);
    if (len < 0 || (size_t)len >= cap)
        return ddp_err_set(err, DDP_EUSAGE, DDP_ENV_SHM_DIR " is too long (%zu bytes at most)",
                           cap - sizeof "/ddpw-2147483647-0123456789abcdef");
    *fd = segment_open(name, 1);
    if (*fd < 0)
        return ddp_err_set(err, -errno, "unable to create shared memory %s: %s", name,
                           strerror(errno));
    int rc = map_segment(s, *fd, 1, err, name);
    if (rc != 0)
        return rc;
    s->hdr->n = (uint32_t)s->n;
    s->hdr->slot_bytes = s->slot_bytes;
    atomic_store(&s->hdr->pids[s->me], (int32_t)getpid());
    atomic_thread_fence(memory_order_release);
    s->hdr->magic = SHM_MAGIC;
    return ddpw__store_set(s->ctx, key, name, strlen(name) + 1, err);
}

/* The other local ranks: read the name under key, open and map the segment, check that its
 * header matches this rank's settings. *fd is the caller's to close. */
static int open_segment(ddpw_shm_t *s, const char *key, int *fd, char *name, size_t cap,
                        ddp_err_t *err) {
    size_t len = 0;
    int rc = ddpw__store_get(s->ctx, key, name, cap, &len, -1, err);
    if (rc != 0)
        return rc;
    if (len == 0 || name[len - 1] != '\0' || !segment_name_ok(name))
        return ddp_err_set(err, DDP_EPROTO, "store key %s: malformed shared memory name", key);
    *fd = segment_open(name, 0);
    if (*fd < 0)
        return ddp_err_set(err, -errno, "unable to open shared memory %s: %s", name,
                           strerror(errno));
    if ((rc = map_segment(s, *fd, 0, err, name)) != 0)
        return rc;
    atomic_thread_fence(memory_order_acquire);
    if (s->hdr->magic != SHM_MAGIC || s->hdr->n != (uint32_t)s->n ||
        s->hdr->slot_bytes != s->slot_bytes)
        return ddp_err_set(err, DDP_EPROTO,
                           "shared memory %s does not match this rank's settings (local world "
                           "%d, chunk %zu bytes)",
                           name, s->n, s->slot_bytes);
    atomic_store(&s->hdr->pids[s->me], (int32_t)getpid());
    return 0;
}

static int shm_init(const ddpw_ctx_t *ctx, void **state, ddp_err_t *err) {
    int n = ctx->env.local_world_size, me = ctx->env.node_local_rank;
    *state = NULL;
    if (n > SHM_MAX_RANKS)
        return ddp_err_set(err, DDP_EUSAGE, "cpu backend: at most %d ranks per node",
                           SHM_MAX_RANKS);
    ddpw_shm_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory");
    s->ctx = ctx;
    s->n = n;
    s->me = me;
    s->base = ctx->env.rank - me;
    size_t unit = (size_t)n * 64;
    size_t slot = ctx->chunk_bytes;
    if (slot < unit)
        slot = unit;
    s->slot_bytes = slot / unit * unit;
    s->sub_floats = s->slot_bytes / (size_t)n / sizeof(float);
    s->map_len = SHM_HDR_BYTES + (s->slot_bytes + 2 * (size_t)SHM_SMALL_BYTES) * (size_t)n;

    char name[PATH_MAX] = "";
    ddpw_name_t seg_key = ddpw__key_shm(ctx->env.group_rank);
    const char *key = seg_key.s;
    int fd = -1;
    int rc = me == 0 ? create_segment(s, key, &fd, name, sizeof name, err)
                     : open_segment(s, key, &fd, name, sizeof name, err);
    int created = me == 0 && fd >= 0; /* the name is ours to unlink */
    if (fd >= 0)
        close(fd);
    /* Every rank has mapped the segment after this barrier: its name can go. */
    if (rc == 0) {
        ddpw_name_t ready = ddpw__key_shm_ready(ctx->env.group_rank);
        rc = ddpw__store_barrier(ctx, ready.s, n, err);
    }
    if (created)
        segment_unlink(name);
    if (rc != 0) {
        shm_fini(s);
        return rc;
    }
    *state = s;
    return 0;
}

static void shm_fini(void *state) {
    ddpw_shm_t *s = state;
    if (s == NULL)
        return;
    if (s->hdr != NULL)
        munmap(s->hdr, s->map_len);
    free(s);
}

static inline float *sub_slot(ddpw_shm_t *s, int slot, int sub) {
    return (float *)(void *)(s->data + (size_t)slot * s->slot_bytes) + (size_t)sub * s->sub_floats;
}

/* Reduces len floats of segment `me` in rank order: src[r] is rank r's copy. Writes the result
 * to both outputs. */
static void reduce_seg(const float *const *src, int n, size_t len, float scale, int avg,
                       float *out1, float *out2) {
    float acc[RED_BLOCK];
    for (size_t off = 0; off < len; off += RED_BLOCK) {
        size_t m = len - off < RED_BLOCK ? len - off : RED_BLOCK;
        const float *a = src[0] + off, *b = src[1] + off;
        for (size_t i = 0; i < m; i++)
            acc[i] = a[i] + b[i];
        for (int r = 2; r < n; r++) {
            const float *c = src[r] + off;
            for (size_t i = 0; i < m; i++)
                acc[i] += c[i];
        }
        if (avg)
            for (size_t i = 0; i < m; i++)
                acc[i] /= scale;
        memcpy(out1 + off, acc, m * sizeof(float));
        memcpy(out2 + off, acc, m * sizeof(float));
    }
}

/* Segment j of a chunk of e floats: [*lo, *hi). Segments are 16-float aligned. */
static void seg_bounds(size_t e, int n, int j, size_t *lo, size_t *hi) {
    size_t q = (e + (size_t)n - 1) / (size_t)n;
    q = (q + 15) / 16 * 16;
    size_t a = (size_t)j * q, b = a + q;
    *lo = a < e ? a : e;
    *hi = b < e ? b : e;
}

static int small_allreduce(ddpw_shm_t *s, float *buf, size_t count, ddpw_op_t op, ddp_err_t *err) {
    int n = s->n;
    size_t set = (size_t)(s->small_calls++ & 1);
    unsigned char *base = s->small + set * (size_t)n * SHM_SMALL_BYTES;
    memcpy(base + (size_t)s->me * SHM_SMALL_BYTES, buf, count * sizeof(float));
    int rc = shm_barrier(s, err);
    if (rc != 0)
        return rc;
    const float *src[SHM_MAX_RANKS];
    for (int r = 0; r < n; r++)
        src[r] = (const float *)(const void *)(base + (size_t)r * SHM_SMALL_BYTES);
    /* buf is written only after every source was read block by block: its own copy is in the
     * slot, so overwriting buf early is harmless. */
    reduce_seg(src, n, count, (float)n, op == DDPW_AVG, buf, buf);
    return 0;
}

static int shm_allreduce(void *state, float *buf, size_t count, ddpw_op_t op, void *stream,
                         int wait, ddp_err_t *err) {
    ddpw_shm_t *s = state;
    (void)stream, (void)wait;
    int n = s->n, me = s->me, rc;
    if (count * sizeof(float) <= SHM_SMALL_BYTES)
        return small_allreduce(s, buf, count, op, err);
    size_t chunk = s->sub_floats * (size_t)n;
    const float *src[SHM_MAX_RANKS];
    for (size_t off = 0; off < count; off += chunk) {
        size_t e = count - off < chunk ? count - off : chunk, lo, hi;
        float *x = buf + off;
        for (int j = 0; j < n; j++) {
            if (j == me)
                continue;
            seg_bounds(e, n, j, &lo, &hi);
            if (hi > lo)
                memcpy(sub_slot(s, me, j), x + lo, (hi - lo) * sizeof(float));
        }
        if ((rc = shm_barrier(s, err)) != 0)
            return rc;
        seg_bounds(e, n, me, &lo, &hi);
        if (hi > lo) {
            for (int r = 0; r < n; r++)
                src[r] = r == me ? x + lo : sub_slot(s, r, me);
            reduce_seg(src, n, hi - lo, (float)n, op == DDPW_AVG, x + lo, sub_slot(s, me, me));
        }
        if ((rc = shm_barrier(s, err)) != 0)
            return rc;
        for (int j = 0; j < n; j++) {
            if (j == me)
                continue;
            seg_bounds(e, n, j, &lo, &hi);
            if (hi > lo)
                memcpy(x + lo, sub_slot(s, j, j), (hi - lo) * sizeof(float));
        }
    }
    return 0;
}

static int shm_broadcast(void *state, void *buf, size_t len, int root, ddp_err_t *err) {
    ddpw_shm_t *s = state;
    int lroot = root - s->base, rc;
    if (lroot < 0 || lroot >= s->n)
        return ddp_err_set(err, DDP_EUSAGE, "broadcast: root %d is not on this node", root);
    unsigned char *p = buf, *slot = s->data + (size_t)lroot * s->slot_bytes;
    for (size_t off = 0; off < len; off += s->slot_bytes) {
        size_t m = len - off < s->slot_bytes ? len - off : s->slot_bytes;
        /* The first barrier keeps the root from overwriting its slot while a slower rank is
         * still reading it in an earlier collective. */
        if ((rc = shm_barrier(s, err)) != 0)
            return rc;
        if (s->me == lroot)
            memcpy(slot, p + off, m);
        if ((rc = shm_barrier(s, err)) != 0)
            return rc;
        if (s->me != lroot)
            memcpy(p + off, slot, m);
    }
    return shm_barrier(s, err);
}

const ddpw_backend_ops_t ddpw__shm_ops = {
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier_op,
    .stream_wait = NULL,
};
