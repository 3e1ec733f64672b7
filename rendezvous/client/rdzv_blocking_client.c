/* SPDX-License-Identifier: Apache-2.0
 * rdzv_blocking_client: the blocking client (rdzv_client.h) of the store. One TCP connection,
 * non-blocking socket driven by poll(2) so that every exchange has a deadline; replies are read
 * through a small buffer. After an I/O error in the middle of an exchange the stream is out of
 * step, so the client is marked broken and later calls fail fast with DDP_ECLOSED. */
#include "rdzv_client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_net.h"
#include "ddp_time.h"
#include "rdzv_auth_int.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"
#include "rdzv_proto.h"

#define CLIENT_RBUF 8192
#define DEFAULT_CONNECT_MS 30000
#define DEFAULT_IO_MS 60000
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000

struct rdzv_client {
    int fd;
    int io_timeout_ms;
    int broken;
    int authed;
    uint32_t ping_seq;
    ddp_buf_t w;
    size_t roff, rlen;
    uint8_t rbuf[CLIENT_RBUF];
    char peer[300];
};

/* ---- deadlines and raw I/O ---- */

/* Milliseconds left until deadline (UINT64_MAX = none), for poll: -1 forever, >= 0 otherwise. */

static uint64_t deadline_in(int ms) {
    return ms < 0 ? UINT64_MAX : ddp_now_ms() + (uint64_t)ms;
}

/* Waits for events on fd until deadline. Returns 1 ready, 0 timed out, or -errno. */

static int fail(rdzv_client_t *c, int code, ddp_err_t *err, const char *what) {
    c->broken = 1;
    if (code == DDP_ECLOSED)
        return ddp_err_set(err, code, "%s: connection closed by the server during %s", c->peer,
                           what);
    if (code == DDP_ETIMEOUT)
        return ddp_err_set(err, code, "%s: no reply within %d ms to %s", c->peer, c->io_timeout_ms,
                           what);
    return ddp_err_set(err, code, "%s: %s during %s", c->peer, ddp_strerror(code), what);
}

/* Sends c->w completely before deadline. Returns 0 or an error code (not yet recorded). */
static int send_all(rdzv_client_t *c, uint64_t deadline) {
    size_t off = 0;
    while (off < c->w.len) {
        ssize_t n = send(c->fd, c->w.data + off, c->w.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return errno == EPIPE || errno == ECONNRESET ? DDP_ECLOSED : -errno;
        int rc = ddp_wait_fd(c->fd, POLLOUT, deadline);
        if (rc <= 0)
            return rc == 0 ? DDP_ETIMEOUT : rc;
    }
    ddp_buf_reset(&c->w);
    return 0;
}

/* Reads exactly n bytes into dst (NULL: discard) before deadline. Returns 0 or an error code. */
static int recv_exact(rdzv_client_t *c, void *dst, size_t n, uint64_t deadline) {
    uint8_t *d = dst;
    while (n > 0) {
        if (c->roff < c->rlen) {
            size_t k = c->rlen - c->roff < n ? c->rlen - c->roff : n;
            if (d != NULL) {
                memcpy(d, c->rbuf + c->roff, k);
                d += k;
            }
            c->roff += k;
            n -= k;
            continue;
        }
        c->roff = c->rlen = 0;
        /* Large bodies go straight to their destination; small reads refill the buffer. */
        int direct = d != NULL && n >= sizeof c->rbuf;
        ssize_t r =
            recv(c->fd, direct ? (void *)d : (void *)c->rbuf, direct ? n : sizeof c->rbuf, 0);
        if (r > 0) {
            if (direct) {
                d += r;
                n -= (size_t)r;
            } else {
                c->rlen = (size_t)r;
            }
            continue;
        }
        if (r == 0)
            return DDP_ECLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return errno == ECONNRESET ? DDP_ECLOSED : -errno;
        int rc = ddp_wait_fd(c->fd, POLLIN, deadline);
        if (rc <= 0)
            return rc == 0 ? DDP_ETIMEOUT : rc;
    }
    return 0;
}

/* Waits until at least one reply byte is readable before deadline: 1, 0 (timed out) or error. */
static int reply_ready(rdzv_client_t *c, uint64_t deadline) {
    if (c->roff < c->rlen)
        return 1;
    return ddp_wait_fd(c->fd, POLLIN, deadline);
}

static int recv_u8(rdzv_client_t *c, uint8_t *v, uint64_t deadline) {
    return recv_exact(c, v, 1, deadline);
}

static int recv_i64(rdzv_client_t *c, int64_t *v, uint64_t deadline) {
    return recv_exact(c, v, 8, deadline);
}

/* Reads a u64-prefixed blob into out (replacing its contents). */
static int recv_blob(rdzv_client_t *c, ddp_buf_t *out, uint64_t deadline) {
    uint64_t n;
    int rc = recv_exact(c, &n, 8, deadline);
    if (rc < 0)
        return rc;
    if (n > RDZV_MAX_FRAME_LEN)
        return DDP_EPROTO;
    if (out == NULL)
        return recv_exact(c, NULL, (size_t)n, deadline);
    ddp_buf_reset(out);
    rc = ddp_buf_reserve(out, (size_t)n);
    if (rc < 0)
        return rc;
    rc = recv_exact(c, out->data, (size_t)n, deadline);
    if (rc < 0)
        return rc;
    out->len = (size_t)n;
    out->data[n] = 0;
    return 0;
}

/* ---- request building ---- */

static int check_key(rdzv_client_t *c, const char *key, ddp_err_t *err) {
    if (key == NULL)
        return ddp_err_set(err, -EINVAL, "%s: NULL key", c->peer);
    size_t n = strlen(key);
    if (n > RDZV_MAX_KEY_LEN) {
        char kr[100];
        return ddp_err_set(err, DDP_ETOOBIG, "%s: key '%s' is %zu bytes (limit %zu)", c->peer,
                           rdzv__key_repr(key, n, kr, sizeof kr), n, RDZV_MAX_KEY_LEN);
    }
    return 0;
}

static int check_usable(rdzv_client_t *c, ddp_err_t *err) {
    if (c == NULL)
        return ddp_err_set(err, -EINVAL, "NULL store client");
    if (c->broken)
        return ddp_err_set(err, DDP_ECLOSED, "%s: connection unusable after an earlier error",
                           c->peer);
    ddp_buf_reset(&c->w);
    return 0;
}

static int put_key(rdzv_client_t *c, const char *key) {
    return rdzv__put_blob(&c->w, key, strlen(key));
}

/* Records a failed encode (the only cause is memory); the stream is untouched, so the client
 * stays usable. */
static int oom(rdzv_client_t *c, int rc, ddp_err_t *err) {
    return ddp_err_set(err, rc, "%s: out of memory", c->peer);
}

static int check_count(rdzv_client_t *c, size_t n, ddp_err_t *err) {
    if (n > RDZV_MAX_KEYS_PER_REQ)
        return ddp_err_set(err, DDP_ETOOBIG, "%s: %zu keys in one request (limit %zu)", c->peer, n,
                           RDZV_MAX_KEYS_PER_REQ);
    return 0;
}

static int check_value(rdzv_client_t *c, size_t len, ddp_err_t *err) {
    if (len > RDZV_MAX_VALUE_LEN)
        return ddp_err_set(err, DDP_ETOOBIG, "%s: value of %zu bytes over the %zu limit", c->peer,
                           len, RDZV_MAX_VALUE_LEN);
    return 0;
}

/* Starts a request in c->w with its command byte once the client is known to be usable. */
static int begin_req(rdzv_client_t *c, uint8_t cmd, ddp_err_t *err) {
    int rc = check_usable(c, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_u8(&c->w, cmd);
    return rc < 0 ? oom(c, rc, err) : 0;
}

/* Starts a one-key request in c->w: the client usable and the key within limits, checked
 * before anything is encoded, then cmd and key. */
static int begin_key_req(rdzv_client_t *c, uint8_t cmd, const char *key, ddp_err_t *err) {
    int rc = check_usable(c, err);
    rc = rc ? rc : check_key(c, key, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_u8(&c->w, cmd);
    rc = rc ? rc : put_key(c, key);
    return rc < 0 ? oom(c, rc, err) : 0;
}

/* Sends the request in c->w within the I/O timeout. */
static int send_req(rdzv_client_t *c, const char *what, ddp_err_t *err) {
    int rc = send_all(c, deadline_in(c->io_timeout_ms));
    return rc < 0 ? fail(c, rc, err, what) : 0;
}

/* ---- connect and handshake ---- */

static int retryable(int e) {
    return e == ECONNREFUSED || e == ETIMEDOUT || e == ENETUNREACH || e == EHOSTUNREACH ||
           e == EAGAIN || e == ECONNRESET || e == EADDRNOTAVAIL;
}

/* One connection attempt to every address of host:port. Returns an fd or -errno. */
static int try_connect(const char *host, uint16_t port, uint64_t deadline, int *gai_failed) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        *gai_failed = g;
        return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
    }
    int last = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = ddp_tcp_connect(ai->ai_addr, ai->ai_addrlen, deadline, 0);
        if (fd >= 0) {
            freeaddrinfo(res);
            return fd;
        }
        last = fd;
    }
    freeaddrinfo(res);
    return last;
}

/* The handshake without a token: the PING sent after VALIDATE must come back with its nonce. */
static int handshake_ping(rdzv_client_t *c, uint64_t dl, ddp_err_t *err) {
    uint32_t echo = 0;
    int rc = recv_exact(c, &echo, 4, dl);
    if (rc == DDP_ECLOSED)
        return ddp_err_set(err, DDP_EAUTH,
                           "%s: server closed the connection at PING: it requires a token "
                           "(%s) or is at its connection limit",
                           c->peer, DDP_ENV_TOKEN_NAMES);
    if (rc < 0)
        return fail(c, rc, err, "the handshake");
    if (echo != c->ping_seq)
        return ddp_err_set(err, DDP_EPROTO, "%s: PING answered with a wrong nonce", c->peer);
    return 0;
}

/* The HMAC handshake after AUTH_HELLO was sent: the challenge, our proof, the server's proof. */
static int handshake_auth(rdzv_client_t *c, rdzv_handshake_t *hs, uint64_t dl, ddp_err_t *err) {
    uint8_t st, snonce[RDZV_AUTH_NONCE_LEN], smac[RDZV_AUTH_MAC_LEN];
    int rc = recv_u8(c, &st, dl);
    if (rc < 0)
        return fail(c, rc, err, "AUTH_HELLO");
    if (st == RDZV_AUTH_NOT_NEEDED)
        return ddp_err_set(err, DDP_EAUTH_PEER, "%s: " RDZV_NO_AUTH_REFUSED, c->peer);
    if (st != RDZV_AUTH_CHALLENGE)
        return ddp_err_set(err, DDP_EPROTO, "%s: unexpected AUTH_HELLO status %u", c->peer, st);
    rc = recv_exact(c, snonce, sizeof snonce, dl);
    if (rc < 0)
        return fail(c, rc, err, "AUTH_HELLO");
    rc = rdzv__handshake_proof_encode(hs, snonce, &c->w);
    if (rc == DDP_EAUTH)
        return ddp_err_set(err, DDP_EAUTH, "%s: libcrypto failed to compute a MAC", c->peer);
    rc = rc ? rc : send_all(c, dl);
    if (rc < 0)
        return fail(c, rc, err, "AUTH_PROOF");
    rc = recv_u8(c, &st, dl);
    if (rc == DDP_ECLOSED || (rc == 0 && st == RDZV_AUTH_REFUSED))
        return ddp_err_set(err, DDP_EAUTH, "%s: the server refused the token", c->peer);
    if (rc < 0)
        return fail(c, rc, err, "AUTH_PROOF");
    if (st != RDZV_AUTH_OK)
        return ddp_err_set(err, DDP_EPROTO, "%s: unexpected AUTH_PROOF status %u", c->peer, st);
    rc = recv_exact(c, smac, sizeof smac, dl);
    if (rc < 0)
        return fail(c, rc, err, "AUTH_PROOF");
    if (!rdzv__auth_equal(smac, hs->smac))
        return ddp_err_set(err, DDP_EAUTH_PEER, "%s: the server could not prove it holds the token",
                           c->peer);
    c->authed = 1;
    return 0;
}

/* VALIDATE, then either the HMAC handshake (token) or a PING (no token). */
static int handshake(rdzv_client_t *c, const rdzv_client_opts_t *o, ddp_err_t *err) {
    uint64_t dl =
        deadline_in(o->handshake_timeout_ms > 0 ? o->handshake_timeout_ms : c->io_timeout_ms);
    c->ping_seq = (uint32_t)getpid();
    rdzv_handshake_t hs = {.token = o->token,
                           .token_len = o->token_len,
                           .run_id = o->run_id,
                           .ping_nonce = c->ping_seq};
    int rc = rdzv__handshake_hello_encode(&hs, &c->w);
    if (rc == DDP_EUSAGE && o->token_len > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EUSAGE, "%s: token longer than %zu bytes", c->peer,
                           RDZV_TOKEN_MAX_LEN);
    if (rc == DDP_EUSAGE)
        return ddp_err_set(err, DDP_EUSAGE, "%s: run id of %zu bytes: expected 1..%d", c->peer,
                           strlen(o->run_id), RDZV_RUN_ID_MAX);
    if (rc == DDP_EAUTH)
        return ddp_err_set(err, DDP_EAUTH, "%s: libcrypto has no randomness", c->peer);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_all(c, dl);
    if (rc < 0)
        return fail(c, rc, err, "the handshake");
    if (o->token == NULL || o->token_len == 0)
        return handshake_ping(c, dl, err);
    return handshake_auth(c, &hs, dl, err);
}

int rdzv_client_connect(const rdzv_client_opts_t *opts, rdzv_client_t **out, ddp_err_t *err) {
    *out = NULL;
    if (opts == NULL || opts->host == NULL || opts->port == 0)
        return ddp_err_set(err, DDP_EUSAGE, "store client: host and port are required");
    rdzv_client_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for a store client");
    c->fd = -1;
    snprintf(c->peer, sizeof c->peer, strchr(opts->host, ':') ? "[%s]:%u" : "%s:%u", opts->host,
             opts->port);
    c->io_timeout_ms = opts->io_timeout_ms > 0 ? opts->io_timeout_ms : DEFAULT_IO_MS;
    int budget = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DEFAULT_CONNECT_MS;
    uint64_t deadline = deadline_in(budget);
    uint64_t backoff = BACKOFF_FIRST_MS, try_ms = DDP_CONNECT_TRY_FIRST_MS;
    int fd, tries = 0;
    for (;;) {
        int gai = 0;
        tries++;
        /* An unanswered try is abandoned and made again (ddp_net.h), never past the deadline. */
        uint64_t try_end = ddp_now_ms() + try_ms;
        fd = try_connect(opts->host, opts->port, try_end < deadline ? try_end : deadline, &gai);
        if (fd == -ETIMEDOUT)
            try_ms = try_ms * 2 > DDP_CONNECT_TRY_MAX_MS ? DDP_CONNECT_TRY_MAX_MS : try_ms * 2;
        if (fd >= 0)
            break;
        if ((!retryable(-fd) && gai == 0) || ddp_now_ms() >= deadline) {
            int code = retryable(-fd) || gai != 0 ? DDP_ETIMEOUT : fd;
            if (gai != 0)
                ddp_err_set(err, code, "%s: unable to resolve host after %d tries: %s", c->peer,
                            tries, gai_strerror(gai));
            else
                ddp_err_set(err, code, "%s: unable to connect after %d tries in %d ms: %s", c->peer,
                            tries, budget, strerror(-fd));
            free(c);
            return code;
        }
        /* Exponential backoff with jitter, never past the deadline. */
        uint64_t left = (uint64_t)ddp_ms_left(deadline);
        uint64_t nap = backoff / 2 + (uint64_t)(rand() % (int)(backoff / 2 + 1));
        if (nap > left)
            nap = left;
        struct timespec ts = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    c->fd = fd;
    int rc = handshake(c, opts, err);
    if (rc < 0) {
        rdzv_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rdzv_client_free(rdzv_client_t *c) {
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    ddp_buf_free(&c->w);
    free(c);
}

const char *rdzv_client_peer(const rdzv_client_t *c) {
    return c->peer;
}

int rdzv_client_authenticated(const rdzv_client_t *c) {
    return c->authed;
}

/* ---- commands ---- */

/* SET and APPEND: key and value, no reply. */
static int send_key_value(rdzv_client_t *c, uint8_t cmd, const char *key, const void *val,
                          size_t len, ddp_err_t *err) {
    int rc = begin_key_req(c, cmd, key, err);
    rc = rc ? rc : check_value(c, len, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_blob(&c->w, val, len);
    return rc < 0 ? oom(c, rc, err) : send_req(c, rdzv__cmd_name(cmd), err);
}

int rdzv_client_set(rdzv_client_t *c, const char *key, const void *val, size_t len,
                    ddp_err_t *err) {
    return send_key_value(c, RDZV_CMD_SET, key, val, len, err);
}

int rdzv_client_append(rdzv_client_t *c, const char *key, const void *val, size_t len,
                       ddp_err_t *err) {
    return send_key_value(c, RDZV_CMD_APPEND, key, val, len, err);
}

/* After a wait ran out: CANCEL_WAIT and read what comes back. *released is set to 1 when the
 * wait had been answered just before the cancel arrived (the reply is consumed: for GET_WAIT
 * into got). */
static int cancel_wait(rdzv_client_t *c, int getw, ddp_buf_t *got, int *released, ddp_err_t *err) {
    *released = 0;
    uint64_t dl = deadline_in(c->io_timeout_ms);
    int rc = rdzv__put_u8(&c->w, RDZV_CMD_CANCEL_WAIT);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_req(c, "CANCEL_WAIT", err);
    if (rc < 0)
        return rc;
    uint8_t st;
    rc = recv_u8(c, &st, dl);
    if (rc == 0 && st == RDZV_WAIT_STOP_WAITING) {
        *released = 1;
        if (getw)
            rc = recv_blob(c, got, dl);
        if (rc == 0)
            rc = recv_u8(c, &st, dl);
    }
    if (rc < 0)
        return fail(c, rc, err, "CANCEL_WAIT");
    if (st != RDZV_WAIT_CANCELED) {
        c->broken = 1;
        return ddp_err_set(err, DDP_EPROTO, "%s: CANCEL_WAIT answered with %u", c->peer, st);
    }
    return 0;
}

int rdzv_client_get(rdzv_client_t *c, const char *key, int timeout_ms, ddp_buf_t *out,
                    ddp_err_t *err) {
    int rc = begin_key_req(c, RDZV_CMD_GET_WAIT, key, err);
    if (rc < 0)
        return rc;
    char kr[100];
    rc = rdzv__put_u8(&c->w, timeout_ms == 0 ? RDZV_GETW_NOWAIT : RDZV_GETW_BLOCK);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_req(c, "GET", err);
    if (rc < 0)
        return rc;
    uint64_t wait_dl = timeout_ms == 0 ? deadline_in(c->io_timeout_ms) : deadline_in(timeout_ms);
    rc = reply_ready(c, wait_dl);
    if (rc < 0)
        return fail(c, rc, err, "GET");
    if (rc == 0) {
        int released;
        rc = cancel_wait(c, 1, out, &released, err);
        if (rc < 0 || released)
            return rc;
        return ddp_err_set(err, DDP_ETIMEOUT, "%s: timed out after %d ms waiting for key '%s'",
                           c->peer, timeout_ms, rdzv__key_repr(key, strlen(key), kr, sizeof kr));
    }
    uint64_t dl = deadline_in(c->io_timeout_ms);
    uint8_t st;
    rc = recv_u8(c, &st, dl);
    if (rc == 0 && st == RDZV_GETW_FOUND)
        rc = recv_blob(c, out, dl);
    if (rc < 0)
        return fail(c, rc, err, "GET");
    if (st == RDZV_GETW_ABSENT)
        return ddp_err_set(err, DDP_ENOKEY, "%s: no key '%s'", c->peer,
                           rdzv__key_repr(key, strlen(key), kr, sizeof kr));
    if (st != RDZV_GETW_FOUND) {
        c->broken = 1;
        return ddp_err_set(err, DDP_EPROTO, "%s: GET answered with status %u", c->peer, st);
    }
    return 0;
}

int rdzv_client_compare_set(rdzv_client_t *c, const char *key, const void *expected,
                            size_t expected_len, const void *desired, size_t desired_len,
                            ddp_buf_t *out, ddp_err_t *err) {
    int rc = begin_key_req(c, RDZV_CMD_COMPARE_SET, key, err);
    if (rc < 0)
        return rc;
    if (expected_len > RDZV_MAX_VALUE_LEN || desired_len > RDZV_MAX_VALUE_LEN)
        return ddp_err_set(err, DDP_ETOOBIG, "%s: value over the %zu-byte limit", c->peer,
                           RDZV_MAX_VALUE_LEN);
    rc = rdzv__put_blob(&c->w, expected, expected_len);
    rc = rc ? rc : rdzv__put_blob(&c->w, desired, desired_len);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_req(c, "COMPARE_SET", err);
    if (rc < 0)
        return rc;
    rc = recv_blob(c, out, deadline_in(c->io_timeout_ms));
    return rc < 0 ? fail(c, rc, err, "COMPARE_SET") : 0;
}

int rdzv_client_add(rdzv_client_t *c, const char *key, int64_t delta, int64_t *result,
                    ddp_err_t *err) {
    int rc = begin_key_req(c, RDZV_CMD_ADD, key, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_i64(&c->w, delta);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_req(c, "ADD", err);
    if (rc < 0)
        return rc;
    int64_t v;
    rc = recv_i64(c, &v, deadline_in(c->io_timeout_ms));
    if (rc == DDP_ECLOSED) {
        char kr[100];
        c->broken = 1;
        return ddp_err_set(err, rc,
                           "%s: server closed the connection at ADD on key '%s' "
                           "(value not an integer?)",
                           c->peer, rdzv__key_repr(key, strlen(key), kr, sizeof kr));
    }
    if (rc < 0)
        return fail(c, rc, err, "ADD");
    if (result != NULL)
        *result = v;
    return 0;
}

/* Appends a u64 count and the keys. */
static int put_keys(rdzv_client_t *c, const char *const *keys, size_t n, ddp_err_t *err) {
    int rc = check_count(c, n, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_u64(&c->w, n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = check_key(c, keys[i], err);
        if (rc < 0)
            return rc;
        rc = put_key(c, keys[i]);
    }
    return rc < 0 ? oom(c, rc, err) : 0;
}

int rdzv_client_check(rdzv_client_t *c, const char *const *keys, size_t n, int *ready,
                      ddp_err_t *err) {
    int rc = begin_req(c, RDZV_CMD_CHECK, err);
    rc = rc ? rc : put_keys(c, keys, n, err);
    rc = rc ? rc : send_req(c, "CHECK", err);
    if (rc < 0)
        return rc;
    uint8_t st;
    rc = recv_u8(c, &st, deadline_in(c->io_timeout_ms));
    if (rc < 0)
        return fail(c, rc, err, "CHECK");
    *ready = st == RDZV_CHECK_READY;
    return 0;
}

int rdzv_client_wait(rdzv_client_t *c, const char *const *keys, size_t n, int timeout_ms,
                     ddp_err_t *err) {
    int rc = begin_req(c, RDZV_CMD_WAIT, err);
    rc = rc ? rc : put_keys(c, keys, n, err);
    rc = rc ? rc : send_req(c, "WAIT", err);
    if (rc < 0)
        return rc;
    rc = reply_ready(c, deadline_in(timeout_ms));
    if (rc < 0)
        return fail(c, rc, err, "WAIT");
    if (rc == 0) {
        int released;
        rc = cancel_wait(c, 0, NULL, &released, err);
        if (rc < 0 || released)
            return rc;
        char kr[100];
        if (n == 1)
            return ddp_err_set(err, DDP_ETIMEOUT, "%s: timed out after %d ms waiting for key '%s'",
                               c->peer, timeout_ms,
                               rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr));
        return ddp_err_set(err, DDP_ETIMEOUT,
                           "%s: timed out after %d ms waiting for %zu keys (first '%s')", c->peer,
                           timeout_ms, n,
                           n ? rdzv__key_repr(keys[0], strlen(keys[0]), kr, sizeof kr) : "");
    }
    uint8_t st;
    rc = recv_u8(c, &st, deadline_in(c->io_timeout_ms));
    if (rc < 0)
        return fail(c, rc, err, "WAIT");
    if (st != RDZV_WAIT_STOP_WAITING) {
        c->broken = 1;
        return ddp_err_set(err, DDP_EPROTO, "%s: WAIT answered with %u", c->peer, st);
    }
    return 0;
}

int rdzv_client_num_keys(rdzv_client_t *c, int64_t *n, ddp_err_t *err) {
    int rc = begin_req(c, RDZV_CMD_GETNUMKEYS, err);
    rc = rc ? rc : send_req(c, "GETNUMKEYS", err);
    if (rc < 0)
        return rc;
    rc = recv_i64(c, n, deadline_in(c->io_timeout_ms));
    return rc < 0 ? fail(c, rc, err, "GETNUMKEYS") : 0;
}

int rdzv_client_delete(rdzv_client_t *c, const char *key, int *deleted, ddp_err_t *err) {
    int rc = begin_key_req(c, RDZV_CMD_DELETE_KEY, key, err);
    rc = rc ? rc : send_req(c, "DELETE_KEY", err);
    if (rc < 0)
        return rc;
    int64_t v;
    rc = recv_i64(c, &v, deadline_in(c->io_timeout_ms));
    if (rc < 0)
        return fail(c, rc, err, "DELETE_KEY");
    if (deleted != NULL)
        *deleted = v == 1;
    return 0;
}

int rdzv_client_multi_get(rdzv_client_t *c, const char *const *keys, size_t n, int timeout_ms,
                          ddp_buf_t *vals, ddp_err_t *err) {
    if (timeout_ms != 0) {
        int rc = rdzv_client_wait(c, keys, n, timeout_ms, err);
        if (rc < 0)
            return rc;
    }
    int rc = begin_req(c, RDZV_CMD_MULTI_GET, err);
    rc = rc ? rc : put_keys(c, keys, n, err);
    rc = rc ? rc : send_req(c, "MULTI_GET", err);
    if (rc < 0)
        return rc;
    uint64_t dl = deadline_in(c->io_timeout_ms);
    for (size_t i = 0; i < n; i++) {
        rc = recv_blob(c, &vals[i], dl);
        if (rc < 0)
            return fail(c, rc, err, "MULTI_GET");
    }
    return 0;
}

int rdzv_client_multi_set(rdzv_client_t *c, const char *const *keys, const void *const *vals,
                          const size_t *lens, size_t n, ddp_err_t *err) {
    int rc = check_usable(c, err);
    rc = rc ? rc : check_count(c, n, err);
    if (rc < 0)
        return rc;
    rc = rdzv__put_u8(&c->w, RDZV_CMD_MULTI_SET);
    rc = rc ? rc : rdzv__put_u64(&c->w, n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = check_key(c, keys[i], err);
        rc = rc ? rc : check_value(c, lens[i], err);
        if (rc < 0)
            return rc;
        rc = put_key(c, keys[i]);
        rc = rc ? rc : rdzv__put_blob(&c->w, vals[i], lens[i]);
    }
    if (rc < 0)
        return oom(c, rc, err);
    if (c->w.len > RDZV_MAX_FRAME_LEN)
        return ddp_err_set(err, DDP_ETOOBIG, "%s: MULTI_SET of %zu bytes over the %zu frame limit",
                           c->peer, c->w.len, RDZV_MAX_FRAME_LEN);
    return send_req(c, "MULTI_SET", err);
}

int rdzv_client_ping(rdzv_client_t *c, ddp_err_t *err) {
    int rc = begin_req(c, RDZV_CMD_PING, err);
    if (rc < 0)
        return rc;
    uint32_t nonce = ++c->ping_seq;
    rc = rdzv__put_u32(&c->w, nonce);
    if (rc < 0)
        return oom(c, rc, err);
    rc = send_req(c, "PING", err);
    if (rc < 0)
        return rc;
    uint32_t echo;
    rc = recv_exact(c, &echo, 4, deadline_in(c->io_timeout_ms));
    if (rc < 0)
        return fail(c, rc, err, "PING");
    if (echo != nonce) {
        c->broken = 1;
        return ddp_err_set(err, DDP_EPROTO, "%s: PING answered with a wrong nonce", c->peer);
    }
    return 0;
}

int rdzv_client_stats(rdzv_client_t *c, ddp_buf_t *out, ddp_err_t *err) {
    int rc = begin_req(c, RDZV_CMD_STATS, err);
    rc = rc ? rc : send_req(c, "STATS", err);
    if (rc < 0)
        return rc;
    rc = recv_blob(c, out, deadline_in(c->io_timeout_ms));
    return rc < 0 ? fail(c, rc, err, "STATS") : 0;
}

int rdzv_client_barrier(rdzv_client_t *c, const char *name, int64_t world_size, int timeout_ms,
                        ddp_err_t *err) {
    if (name == NULL || strlen(name) > RDZV_MAX_KEY_LEN - 8)
        return ddp_err_set(err, -EINVAL, "barrier: name missing or too long");
    size_t nl = strlen(name);
    char *count = malloc(nl + 8), *done = malloc(nl + 8);
    int rc = 0;
    if (count == NULL || done == NULL) {
        rc = ddp_err_set(err, -ENOMEM, "barrier '%s': out of memory", name);
        goto out;
    }
    snprintf(count, nl + 8, "%s/count", name);
    snprintf(done, nl + 8, "%s/done", name);
    int64_t arrived = 0;
    rc = rdzv_client_add(c, count, 1, &arrived, err);
    if (rc < 0)
        goto out;
    if (arrived > world_size) {
        rc = ddp_err_set(err, DDP_EPROTO,
                         "%s: barrier '%s' reached by %lld of %lld ranks "
                         "(name reused?)",
                         c->peer, name, (long long)arrived, (long long)world_size);
        goto out;
    }
    if (arrived == world_size) {
        rc = rdzv_client_set(c, done, "1", 1, err);
        if (rc < 0)
            goto out;
    }
    const char *keys[1] = {done};
    rc = rdzv_client_wait(c, keys, 1, timeout_ms, err);
out:
    free(count);
    free(done);
    return rc;
}
