/* SPDX-License-Identifier: Apache-2.0
 * store_hostile: a misbehaving client on a raw socket, for tests/integration/test_store.sh.
 *   store_hostile PORT MODE
 * MODE: malformed (unknown command), oversized (key length 2^40), truncated (half a SET, then
 * EOF), no-validate (SET first), unauth (VALIDATE then GETNUMKEYS on a token server), unauth-rdzv
 * (VALIDATE then a rendezvous command, RDZV_STATUS, on a token server), idle (connect and
 * stay silent), slow-reader (pipeline GETs of a large value without reading), torch-compat (the
 * byte exchange of a PyTorch TCPStore client; checks every reply byte), rdzv-ctl (a JOIN whose
 * host holds ESC and BEL; prints the store's error reply), other-run (`store_hostile PORT
 * other-run CMD RUN`: CMD, one of status, abort, unfit, join or get, aimed at run RUN, or at its
 * key __rdzv/RUN/end/0; prints the store's error reply, if any, and "closed after N ms" when the
 * store then closed the connection, exit 0; "served" and exit 1 when it answered as to a member;
 * spare-abort and spare-unfit JOIN RUN with the forged host 10.66.66.66 first, then, on the same
 * connection, ABORT it or report 127.0.0.1 unfit: exit 0 when the store answers "ignored").
 * With STORE_HOSTILE_RUN set, the handshake names that run (AUTH_HELLO_RUN), so that the token may
 * be its run token.
 * The token (rdzv_token_load: DDPRUN_TOKEN, DDPRUN_TOKEN_FILE or DDPRUN_STORE_TOKEN) is used by
 * slow-reader. Prints "closed after N ms" when the server closed the connection, "ok" for
 * torch-compat; exit 0 when the server behaved as expected, 1 otherwise. Every wait is bounded (10
 * s). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "ddp_parse.h"
#include "ddp_time.h"
#include "rdzv_auth_int.h"
#include "rdzv_client.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"

#define BOUND_MS 10000

static int sock;

static int dial(uint16_t port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_buf(const ddp_buf_t *b) {
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(sock, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

static int recv_exact(void *dst, size_t n) {
    uint8_t *d = dst;
    while (n > 0) {
        struct pollfd p = {sock, POLLIN, 0};
        if (poll(&p, 1, BOUND_MS) <= 0)
            return -1;
        ssize_t r = recv(sock, d, n, 0);
        if (r <= 0)
            return -1;
        d += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Waits (bounded) until the server closes; reads and drops anything it sends first. */
static int expect_closed(uint64_t t0) {
    uint8_t junk[65536];
    while (ddp_now_ms() - t0 < BOUND_MS) {
        struct pollfd p = {sock, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = recv(sock, junk, sizeof junk, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) {
            printf("closed after %llu ms\n", (unsigned long long)(ddp_now_ms() - t0));
            return 0;
        }
    }
    printf("still open after %d ms\n", BOUND_MS);
    return 1;
}

static void put_validate(ddp_buf_t *b) {
    rdzv__put_u8(b, RDZV_CMD_VALIDATE);
    rdzv__put_u32(b, RDZV_VALIDATE_MAGIC);
}

/* The client handshake (rdzv__handshake_*_encode): VALIDATE, then the HMAC exchange when a
 * token is set, else a PING whose echo is read. Returns 0 or -1. */
static int handshake(void) {
    ddp_buf_t tok = DDP_BUF_INIT, b = DDP_BUF_INIT;
    if (rdzv_token_load(NULL, &tok, NULL, NULL) < 0)
        return -1;
    const char *run = getenv("STORE_HOSTILE_RUN");
    rdzv_handshake_t hs = {.token = tok.data,
                           .token_len = tok.len,
                           .run_id = run != NULL && *run != '\0' ? run : NULL,
                           .ping_nonce = 77};
    int rc = rdzv__handshake_hello_encode(&hs, &b) < 0 || send_buf(&b) < 0 ? -1 : 0;
    ddp_buf_reset(&b);
    uint8_t st, reply[RDZV_PROOF_REPLY_LEN];
    uint32_t echo = 0;
    if (rc == 0 && tok.len == 0)
        rc = recv_exact(&echo, 4) < 0 || echo != hs.ping_nonce ? -1 : 0;
    else if (rc == 0)
        rc = recv_exact(&st, 1) < 0 || st != RDZV_AUTH_CHALLENGE ||
                     recv_exact(reply, RDZV_AUTH_NONCE_LEN) < 0 ||
                     rdzv__handshake_proof_encode(&hs, reply, &b) < 0 || send_buf(&b) < 0 ||
                     recv_exact(reply, RDZV_PROOF_REPLY_LEN) < 0 || reply[0] != RDZV_AUTH_OK ||
                     !rdzv__auth_equal(reply + 1, hs.smac)
                 ? -1
                 : 0;
    ddp_buf_free(&tok);
    ddp_buf_free(&b);
    return rc;
}

/* Replays a PyTorch TCPStore client's exchange against a --no-auth server. */
static int torch_compat(void) {
    ddp_buf_t b = DDP_BUF_INIT;
    uint8_t r1;
    uint32_t r32;
    int64_t r64;
    uint64_t len;
    char val[64];
    put_validate(&b);
    rdzv__put_u8(&b, RDZV_CMD_PING);
    rdzv__put_u32(&b, 77);
    if (send_buf(&b) < 0 || recv_exact(&r32, 4) < 0 || r32 != 77)
        return fprintf(stderr, "PING\n"), 1;
    /* TCPStore::set, then get = WAIT + GET. */
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_SET);
    rdzv__put_blob(&b, "tc/k", 4);
    rdzv__put_blob(&b, "v1", 2);
    rdzv__put_u8(&b, RDZV_CMD_WAIT);
    rdzv__put_u64(&b, 1);
    rdzv__put_blob(&b, "tc/k", 4);
    if (send_buf(&b) < 0 || recv_exact(&r1, 1) < 0 || r1 != RDZV_WAIT_STOP_WAITING)
        return fprintf(stderr, "WAIT\n"), 1;
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_GET);
    rdzv__put_blob(&b, "tc/k", 4);
    if (send_buf(&b) < 0 || recv_exact(&len, 8) < 0 || len != 2 || recv_exact(val, 2) < 0 ||
        memcmp(val, "v1", 2) != 0)
        return fprintf(stderr, "GET\n"), 1;
    /* add: the value is kept as decimal text. */
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_ADD);
    rdzv__put_blob(&b, "tc/n", 4);
    rdzv__put_i64(&b, 41);
    rdzv__put_u8(&b, RDZV_CMD_ADD);
    rdzv__put_blob(&b, "tc/n", 4);
    rdzv__put_i64(&b, 1);
    if (send_buf(&b) < 0 || recv_exact(&r64, 8) < 0 || r64 != 41 || recv_exact(&r64, 8) < 0 ||
        r64 != 42)
        return fprintf(stderr, "ADD\n"), 1;
    /* wait with a timeout: the client sends CANCEL_WAIT and expects WAIT_CANCELED. */
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_WAIT);
    rdzv__put_u64(&b, 1);
    rdzv__put_blob(&b, "tc/never", 8);
    rdzv__put_u8(&b, RDZV_CMD_CANCEL_WAIT);
    if (send_buf(&b) < 0 || recv_exact(&r1, 1) < 0 || r1 != RDZV_WAIT_CANCELED)
        return fprintf(stderr, "CANCEL_WAIT\n"), 1;
    /* check, getNumKeys, deleteKey, compareSet. */
    ddp_buf_reset(&b);
    rdzv__put_u8(&b, RDZV_CMD_CHECK);
    rdzv__put_u64(&b, 2);
    rdzv__put_blob(&b, "tc/k", 4);
    rdzv__put_blob(&b, "tc/never", 8);
    rdzv__put_u8(&b, RDZV_CMD_GETNUMKEYS);
    rdzv__put_u8(&b, RDZV_CMD_DELETE_KEY);
    rdzv__put_blob(&b, "tc/n", 4);
    rdzv__put_u8(&b, RDZV_CMD_COMPARE_SET);
    rdzv__put_blob(&b, "tc/k", 4);
    rdzv__put_blob(&b, "v1", 2);
    rdzv__put_blob(&b, "v2", 2);
    int64_t nkeys;
    if (send_buf(&b) < 0 || recv_exact(&r1, 1) < 0 || r1 != RDZV_CHECK_NOT_READY ||
        recv_exact(&nkeys, 8) < 0 || nkeys < 2 || recv_exact(&r64, 8) < 0 || r64 != 1 ||
        recv_exact(&len, 8) < 0 || len != 2 || recv_exact(val, 2) < 0 || memcmp(val, "v2", 2) != 0)
        return fprintf(stderr, "CHECK/GETNUMKEYS/DELETE_KEY/COMPARE_SET\n"), 1;
    ddp_buf_free(&b);
    printf("ok\n");
    return 0;
}

/* Sends a JOIN whose host holds terminal control bytes (ESC, BEL) after the handshake, and
 * prints the store's JOIN error reply text. Returns 0 when an error reply arrived. */
static int rdzv_ctl(void) {
    if (handshake() < 0)
        return fprintf(stderr, "store_hostile: handshake failed\n"), 1;
    rdzv_join_req_t q;
    memset(&q, 0, sizeof q);
    snprintf(q.run_id, sizeof q.run_id, "hostile");
    snprintf(q.host, sizeof q.host, "10.0.0.1\x1b]0;owned\x07");
    q.nproc = 1;
    q.cfg.min_nodes = q.cfg.max_nodes = 1;
    ddp_buf_t b = DDP_BUF_INIT;
    uint8_t buf[2048];
    size_t got = 0, need = 0;
    long n = 0;
    rdzv_round_reply_t rep;
    memset(&rep, 0, sizeof rep);
    if (rdzv_join_req_encode(&b, &q) < 0 || send_buf(&b) < 0)
        return 1;
    while (n == 0 && got < sizeof buf) {
        struct pollfd pf = {sock, POLLIN, 0};
        if (poll(&pf, 1, BOUND_MS) <= 0)
            break;
        ssize_t r = recv(sock, buf + got, sizeof buf - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        n = rdzv_round_reply_parse(buf, got, &rep, &need, NULL);
    }
    int ok = n > 0 && rep.cmd == RDZV_CMD_RDZV_JOIN && rep.status == 1;
    printf("%s\n", ok ? (const char *)rep.text.data : "no error reply");
    ddp_buf_free(&rep.text);
    ddp_buf_free(&b);
    return ok ? 0 : 1;
}

/* Appends a JOIN of run from the forged host 10.66.66.66 (nnodes min:max, 2 workers). */
static int forged_join(ddp_buf_t *b, const char *run, int64_t min, int64_t max) {
    rdzv_join_req_t q;
    memset(&q, 0, sizeof q);
    snprintf(q.run_id, sizeof q.run_id, "%s", run);
    snprintf(q.host, sizeof q.host, "10.66.66.66");
    q.nproc = 2;
    q.want_node_rank = -1;
    q.cfg.min_nodes = min;
    q.cfg.max_nodes = max;
    return rdzv_join_req_encode(b, &q);
}

/* other-run: after the handshake, cmd aimed at run (see the top of the file). */
static int other_run(const char *cmd, const char *run) {
    if (handshake() < 0)
        return fprintf(stderr, "store_hostile: handshake failed\n"), 1;
    uint64_t t0 = ddp_now_ms();
    ddp_buf_t b = DDP_BUF_INIT;
    int rc = -1, round_cmd = 1;
    if (strcmp(cmd, "status") == 0) {
        rc = rdzv_status_req_encode(&b, run);
    } else if (strcmp(cmd, "abort") == 0) {
        rc = rdzv_abort_req_encode(&b, run, "attacker says stop");
    } else if (strcmp(cmd, "unfit") == 0) {
        rc = rdzv_unfit_req_encode(&b, run, "10.66.66.66", "attacker says unfit");
    } else if (strcmp(cmd, "join") == 0) {
        rc = forged_join(&b, run, 1, 64);
    } else if (strcmp(cmd, "spare-abort") == 0 || strcmp(cmd, "spare-unfit") == 0) {
        rc = forged_join(&b, run, 2, 2); /* the run's nnodes, so that the JOIN parks as a spare */
        if (rc == 0 && cmd[6] == 'a')
            rc = rdzv_abort_req_encode(&b, run, "attacker says stop");
        else if (rc == 0)
            rc = rdzv_unfit_req_encode(&b, run, "127.0.0.1", "attacker says unfit");
    } else if (strcmp(cmd, "get") == 0) {
        char key[RDZV_RUN_ID_MAX + 32];
        snprintf(key, sizeof key, "__rdzv/%s/end/0", run);
        round_cmd = 0;
        rc = rdzv__put_u8(&b, RDZV_CMD_GET);
        rc = rc ? rc : rdzv__put_blob(&b, key, strlen(key));
    }
    if (rc < 0 || send_buf(&b) < 0) {
        ddp_buf_free(&b);
        return fprintf(stderr, "store_hostile: other-run %s: cannot send\n", cmd), 1;
    }
    ddp_buf_free(&b);
    /* A reply first (JOIN and STATUS carry an error text), then the close. */
    uint8_t buf[4096];
    size_t got = 0, need = 0;
    int served = 0;
    while (ddp_now_ms() - t0 < BOUND_MS && got < sizeof buf) {
        struct pollfd pf = {sock, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = recv(sock, buf + got, sizeof buf - got, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) {
            printf("closed after %llu ms\n", (unsigned long long)(ddp_now_ms() - t0));
            return served;
        }
        if (r < 0)
            continue;
        got += (size_t)r;
        if (!round_cmd) {
            served = 1; /* any answer to the GET is the key's value (or its absence) */
            continue;
        }
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        long n = rdzv_round_reply_parse(buf, got, &rep, &need, NULL);
        if (n > 0 && strncmp(cmd, "spare-", 6) == 0) {
            /* The parked JOIN may be answered (a spare's keep-alive bound) before or after. */
            if (rep.cmd == RDZV_CMD_RDZV_ABORT || rep.cmd == RDZV_CMD_RDZV_UNFIT) {
                printf("%s answered status %u\n", cmd + 6, rep.status);
                ddp_buf_free(&rep.text);
                return rep.status == 1 ? 0 : 1;
            }
            memmove(buf, buf + n, got - (size_t)n);
            got -= (size_t)n;
        } else if (n > 0) {
            int err_reply = rep.status != 0 && rep.text.data != NULL;
            printf("%s %s\n", err_reply ? "refused:" : "answered status",
                   err_reply ? (const char *)rep.text.data : (rep.status ? "1" : "0"));
            served = !err_reply && rep.status == 0;
            memmove(buf, buf + n, got - (size_t)n);
            got -= (size_t)n;
        }
        ddp_buf_free(&rep.text);
    }
    printf("%s\n", served ? "served" : "still open");
    return 1;
}

int main(int argc, char **argv) {
    int64_t port;
    int other = argc == 5 && strcmp(argv[2], "other-run") == 0;
    if ((argc != 3 && !other) || ddp_parse_i64(argv[1], 1, 65535, &port) < 0) {
        fprintf(stderr, "usage: store_hostile PORT MODE\n       store_hostile PORT other-run "
                        "CMD RUN\n");
        return 2;
    }
    const char *mode = argv[2];
    int slow = strcmp(mode, "slow-reader") == 0;
    sock = dial((uint16_t)port, slow ? 4096 : 0);
    if (sock < 0) {
        perror("store_hostile: connect");
        return 1;
    }
    ddp_buf_t b = DDP_BUF_INIT;
    uint64_t t0 = ddp_now_ms();
    int rc = 1;
    if (other) {
        rc = other_run(argv[3], argv[4]);
    } else if (strcmp(mode, "torch-compat") == 0) {
        rc = torch_compat();
    } else if (strcmp(mode, "rdzv-ctl") == 0) {
        rc = rdzv_ctl();
    } else if (strcmp(mode, "idle") == 0) {
        rc = expect_closed(t0);
    } else if (strcmp(mode, "no-validate") == 0) {
        rdzv__put_u8(&b, RDZV_CMD_SET);
        rdzv__put_blob(&b, "k", 1);
        rdzv__put_blob(&b, "v", 1);
        rc = send_buf(&b) < 0 ? 0 : expect_closed(t0);
    } else if (strcmp(mode, "unauth") == 0) {
        put_validate(&b);
        rdzv__put_u8(&b, RDZV_CMD_GETNUMKEYS);
        rc = send_buf(&b) < 0 ? 0 : expect_closed(t0);
    } else if (strcmp(mode, "unauth-rdzv") == 0) {
        put_validate(&b);
        rdzv__put_u8(&b, RDZV_CMD_RDZV_STATUS);
        rdzv__put_blob(&b, "r1", 2);
        rc = send_buf(&b) < 0 ? 0 : expect_closed(t0);
    } else if (strcmp(mode, "malformed") == 0 || strcmp(mode, "oversized") == 0 ||
               strcmp(mode, "truncated") == 0) {
        if (handshake() < 0) {
            fprintf(stderr, "store_hostile: handshake failed\n");
            return 1;
        }
        if (mode[0] == 'm') {
            rdzv__put_u8(&b, 0x3f);
            rdzv__put_blob(&b, "x", 1);
        } else if (mode[0] == 'o') {
            rdzv__put_u8(&b, RDZV_CMD_GET);
            rdzv__put_u64(&b, (uint64_t)1 << 40);
        } else {
            rdzv__put_u8(&b, RDZV_CMD_SET);
            rdzv__put_blob(&b, "key", 3);
            rdzv__put_u64(&b, 1000);
            ddp_buf_append(&b, "only-part", 9);
        }
        if (send_buf(&b) < 0)
            return 1;
        if (mode[0] == 't') {
            shutdown(sock, SHUT_WR); /* EOF in the middle of the value */
            printf("sent a truncated frame\n");
        }
        rc = expect_closed(t0);
    } else if (slow) {
        if (handshake() < 0) {
            fprintf(stderr, "store_hostile: handshake failed\n");
            return 1;
        }
        /* One 256 KiB value, then GETs of it without ever reading the replies. */
        size_t vlen = 256 * 1024;
        char *v = calloc(1, vlen);
        rdzv__put_u8(&b, RDZV_CMD_SET);
        rdzv__put_blob(&b, "slow/big", 8);
        rdzv__put_blob(&b, v, vlen);
        free(v);
        if (send_buf(&b) < 0)
            return 1;
        ddp_buf_reset(&b);
        for (int i = 0; i < 64; i++) {
            rdzv__put_u8(&b, RDZV_CMD_GET);
            rdzv__put_blob(&b, "slow/big", 8);
        }
        int sent = 0;
        struct pollfd p = {sock, POLLOUT, 0};
        while (ddp_now_ms() - t0 < BOUND_MS && poll(&p, 1, 1000) > 0 && sent < 4096) {
            if (p.revents & (POLLERR | POLLHUP))
                break;
            if (send(sock, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    continue;
                break; /* EPIPE / ECONNRESET: the server cut us off */
            }
            sent++;
        }
        printf("sent %d batches of GETs without reading\n", sent);
        rc = expect_closed(t0);
    } else {
        fprintf(stderr, "store_hostile: unknown mode %s\n", mode);
        rc = 2;
    }
    ddp_buf_free(&b);
    close(sock);
    return rc;
}
