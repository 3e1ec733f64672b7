/* SPDX-License-Identifier: Apache-2.0
 * bench_floor: the kernel's floor for bench_store's workloads, not a store.
 *
 * One thread, one epoll loop, level-triggered, one read() per readable connection and one
 * write() per batch of replies. It parses just enough of the TCPStore frames bench_store sends
 * (VALIDATE, PING, SET, GET, ADD, WAIT) and keeps keys in a fixed open-addressing table with no
 * limits, no authentication, no memory accounting and no event library; a WAIT on an absent key
 * parks until a SET of that key. Any store server pays at least these system calls and this
 * TCP work per request: the gap between this row and a real server in bench/store.sh is what
 * that server's own code costs, and this row's ratio to TCPStore bounds what any server could
 * show against TCPStore on the machine.
 *
 *   bench_floor           prints "listening on 127.0.0.1:PORT", serves until SIGTERM */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv_frame_int.h"

#define MAX_CONNS 65536
#define IN_CAP 4096
#define OUT_CAP 4096
#define TABLE_SIZE 4096 /* keys: a few per run of the benchmark */

typedef struct {
    uint8_t in[IN_CAP];
    size_t len;
    uint8_t *wait_key; /* a parked WAIT's key (malloc'd), or NULL */
    size_t wait_klen;
} floor_conn_t;

typedef struct {
    uint8_t *key, *val;
    size_t klen, vlen;
} slot_t;

static floor_conn_t *conns[MAX_CONNS];
static slot_t table[TABLE_SIZE];
static int nparked, nslots_used;

static void die(const char *what) {
    fprintf(stderr, "bench_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The slot of key: its own, or the empty one where it would go (set_value keeps a quarter free). */
static slot_t *slot_of(const uint8_t *key, size_t klen) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    for (size_t i = h % TABLE_SIZE;; i = (i + 1) % TABLE_SIZE)
        if (table[i].key == NULL || (table[i].klen == klen && memcmp(table[i].key, key, klen) == 0))
            return &table[i];
}

static slot_t *set_value(const uint8_t *key, size_t klen, const void *val, size_t vlen) {
    slot_t *sl = slot_of(key, klen);
    if (sl->key == NULL) {
        if (++nslots_used > TABLE_SIZE * 3 / 4) {
            fprintf(stderr, "bench_floor: more than %d keys\n", TABLE_SIZE * 3 / 4);
            exit(1);
        }
        sl->key = malloc(klen ? klen : 1);
        memcpy(sl->key, key, klen);
        sl->klen = klen;
    }
    free(sl->val);
    sl->val = malloc(vlen ? vlen : 1);
    memcpy(sl->val, val, vlen);
    sl->vlen = vlen;
    return sl;
}

/* Length of a blob (u64 length + bytes) at p, or 0 when it is not all there. */
static size_t blob_len(const uint8_t *p, size_t avail) {
    uint64_t n;
    if (avail < 8)
        return 0;
    memcpy(&n, p, 8);
    return n <= avail - 8 ? 8 + (size_t)n : 0;
}

static void drop(int ep, int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    if (conns[fd]->wait_key != NULL)
        nparked--;
    free(conns[fd]->wait_key);
    free(conns[fd]);
    conns[fd] = NULL;
}

/* A SET of key releases the WAITs parked on it. */
static void release_waits(int ep, const uint8_t *key, size_t klen) {
    uint8_t stop = RDZV_WAIT_STOP_WAITING;
    for (int fd = 0; fd < MAX_CONNS && nparked > 0; fd++) {
        floor_conn_t *c = conns[fd];
        if (c == NULL || c->wait_key == NULL || c->wait_klen != klen ||
            memcmp(c->wait_key, key, klen) != 0)
            continue;
        free(c->wait_key);
        c->wait_key = NULL;
        nparked--;
        if (write(fd, &stop, 1) != 1)
            drop(ep, fd);
    }
}

/* Serves one whole frame at p: returns its length with its reply appended to out (*olen), 0 when
 * the frame is not all there yet, or -1 for a command this floor does not know. */
static long one_frame(int ep, floor_conn_t *c, const uint8_t *p, size_t avail, uint8_t *out,
                      size_t *olen) {
    size_t k, v;
    switch (avail > 0 ? p[0] : 0xff) {
    case 0xff: return 0;
    case RDZV_CMD_VALIDATE: return avail >= 5 ? 5 : 0;
    case RDZV_CMD_PING:
        if (avail < 5)
            return 0;
        memcpy(out + *olen, p + 1, 4);
        *olen += 4;
        return 5;
    case RDZV_CMD_SET:
        if ((k = blob_len(p + 1, avail - 1)) == 0 || (v = blob_len(p + 1 + k, avail - 1 - k)) == 0)
            return 0;
        set_value(p + 9, k - 8, p + 1 + k + 8, v - 8);
        if (nparked > 0)
            release_waits(ep, p + 9, k - 8);
        return (long)(1 + k + v);
    case RDZV_CMD_GET: {
        if ((k = blob_len(p + 1, avail - 1)) == 0)
            return 0;
        slot_t *sl = slot_of(p + 9, k - 8);
        uint64_t n = sl->key != NULL ? sl->vlen : 0;
        if (*olen + 8 + n > OUT_CAP)
            return -1;
        memcpy(out + *olen, &n, 8);
        memcpy(out + *olen + 8, sl->val, n);
        *olen += 8 + n;
        return (long)(1 + k);
    }
    case RDZV_CMD_ADD: {
        if ((k = blob_len(p + 1, avail - 1)) == 0 || avail < 1 + k + 8)
            return 0;
        int64_t add, cur = 0;
        memcpy(&add, p + 1 + k, 8);
        slot_t *sl = slot_of(p + 9, k - 8);
        if (sl->key != NULL && sl->vlen == 8)
            memcpy(&cur, sl->val, 8);
        cur += add;
        set_value(p + 9, k - 8, &cur, 8);
        memcpy(out + *olen, &cur, 8);
        *olen += 8;
        return (long)(1 + k + 8);
    }
    case RDZV_CMD_WAIT: { /* one key, as bench_store sends */
        uint64_t nkeys;
        if (avail < 9 || (k = blob_len(p + 9, avail - 9)) == 0)
            return 0;
        memcpy(&nkeys, p + 1, 8);
        if (nkeys != 1)
            return -1;
        slot_t *sl = slot_of(p + 17, k - 8);
        if (sl->key != NULL) {
            out[(*olen)++] = RDZV_WAIT_STOP_WAITING;
        } else {
            uint8_t *key = malloc(k - 8 ? k - 8 : 1);
            memcpy(key, p + 17, k - 8);
            c->wait_key = key;
            c->wait_klen = k - 8;
            nparked++;
        }
        return (long)(9 + k);
    }
    default: return -1;
    }
}

static void on_readable(int ep, int fd) {
    floor_conn_t *c = conns[fd];
    ssize_t r = read(fd, c->in + c->len, IN_CAP - c->len);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        drop(ep, fd);
        return;
    }
    c->len += (size_t)r;
    uint8_t out[OUT_CAP];
    size_t olen = 0, off = 0;
    long n = 0;
    while (olen + 256 <= sizeof out && c->wait_key == NULL &&
           (n = one_frame(ep, c, c->in + off, c->len - off, out, &olen)) > 0)
        off += (size_t)n;
    if (n < 0 || (off == 0 && c->len == IN_CAP)) {
        drop(ep, fd);
        return;
    }
    memmove(c->in, c->in + off, c->len - off);
    c->len -= off;
    if (olen > 0 && write(fd, out, olen) != (ssize_t)olen)
        drop(ep, fd); /* replies are small: a short write means the client is gone */
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0)
        die("socket");
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* accepted sockets inherit it */
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 65535) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0)
        die("listen");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {EPOLLIN, {.fd = l}};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0)
        die("epoll");
    printf("listening on 127.0.0.1:%u\n", ntohs(a.sin_port));
    fflush(stdout);
    struct epoll_event evs[512];
    for (;;) {
        int k = epoll_wait(ep, evs, 512, -1);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd != l) {
                on_readable(ep, fd);
                continue;
            }
            int c;
            while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                struct epoll_event ce = {EPOLLIN, {.fd = c}};
                if (c >= MAX_CONNS) {
                    close(c);
                    continue;
                }
                conns[c] = calloc(1, sizeof *conns[c]);
                if (conns[c] == NULL || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0) {
                    free(conns[c]);
                    conns[c] = NULL;
                    close(c);
                }
            }
        }
    }
}
