/* SPDX-License-Identifier: Apache-2.0
 * rdzv_auth: the HMAC-SHA256 challenge-response shared by the store server and client
 * (internal), and the client's handshake encoder. The token itself never crosses the wire: each
 * side proves it holds the token by a MAC over both nonces, bound to its role so that one proof
 * cannot be replayed as the other. */
#ifndef RDZV_AUTH_INT_H
#define RDZV_AUTH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_contract.h"
#include "rdzv_limits.h"

enum { RDZV_ROLE_CLIENT = 0, RDZV_ROLE_SERVER = 1 };

/* out = HMAC-SHA256(token, label(role) || snonce || cnonce), 32 bytes; label is
 * "ddprun-store-auth-v1 client" or "... server". Returns 0 or DDP_EAUTH (libcrypto failed). */
int rdzv__auth_mac(const void *token, size_t token_len, int role,
                   const uint8_t snonce[RDZV_AUTH_NONCE_LEN],
                   const uint8_t cnonce[RDZV_AUTH_NONCE_LEN], uint8_t out[RDZV_AUTH_MAC_LEN]);

/* The token of one run: HMAC-SHA256(token, "ddprun-run-token-v1 " || run_id), 32 bytes. A store
 * that holds `token` derives it for any run id, so a client holding it proves it may act in that
 * run (and nowhere else) without the store keeping per-run secrets. Returns 0 or DDP_EAUTH. */
int rdzv__run_key(const void *token, size_t token_len, const char *run_id, size_t run_id_len,
                  uint8_t out[RDZV_AUTH_MAC_LEN]);

/* Constant-time comparison of two MACs: 1 when equal. */
int rdzv__auth_equal(const uint8_t a[RDZV_AUTH_MAC_LEN], const uint8_t b[RDZV_AUTH_MAC_LEN]);

/* Fills buf with n cryptographically random bytes. Returns 0 or DDP_EAUTH. */
int rdzv__random(void *buf, size_t n);

/* The client's side of the store handshake (docs/protocol.md): VALIDATE, then AUTH_HELLO and
 * AUTH_PROOF when the client holds a token, else a PING whose echo says the server accepted it
 * (PyTorch's client does the same). Every client of the store (blocking, asynchronous, benchmark,
 * hostile test helper) encodes it with the two functions below. */
typedef struct rdzv_handshake {
    const void *token; /* borrowed; NULL or token_len 0: no authentication (PING) */
    size_t token_len;
    const char *run_id; /* borrowed; with a token: AUTH_HELLO_RUN for this run (NULL: AUTH_HELLO) */
    uint32_t ping_nonce;                 /* PING: the nonce the server must echo (caller's) */
    uint8_t cnonce[RDZV_AUTH_NONCE_LEN]; /* AUTH_HELLO: the client nonce (filled by hello) */
    uint8_t smac[RDZV_AUTH_MAC_LEN];     /* AUTH_PROOF: the MAC the server must answer with */
} rdzv_handshake_t;

/* What a client holding a token says of a server that answers AUTH_HELLO with
 * RDZV_AUTH_NOT_NEEDED (it runs without a token): such a server cannot prove it is the job's
 * store, and whoever answers first on the endpoint would otherwise run the rendezvous and choose
 * MASTER_ADDR, so the client refuses it (after "HOST:PORT: "). */
#define RDZV_NO_AUTH_REFUSED                                                                       \
    "the store has no token (--no-auth), so it cannot prove it is the job's: refused, as this "    \
    "client holds one (" DDP_ENV_TOKEN_NAMES ")"

/* Length of the AUTH_HELLO reply with a challenge (status + server nonce), and of the AUTH_PROOF
 * reply when accepted (status + server MAC). The other statuses come alone (1 byte). */
#define RDZV_HELLO_REPLY_LEN (1 + RDZV_AUTH_NONCE_LEN)
#define RDZV_PROOF_REPLY_LEN (1 + RDZV_AUTH_MAC_LEN)

/* Appends the handshake's first frames to b: VALIDATE, then AUTH_HELLO (AUTH_HELLO_RUN with the
 * run id when hs->run_id is set) with a fresh random client nonce (kept in hs->cnonce) when hs has
 * a token, else PING with hs->ping_nonce. The server
 * answers AUTH_HELLO with a status byte (RDZV_AUTH_CHALLENGE + its 32-byte nonce, or
 * RDZV_AUTH_NOT_NEEDED) and PING with the 4-byte nonce. Returns 0, -ENOMEM, DDP_EUSAGE (token
 * longer than RDZV_TOKEN_MAX_LEN) or DDP_EAUTH (no randomness); b is unchanged on error. */
int rdzv__handshake_hello_encode(rdzv_handshake_t *hs, ddp_buf_t *b);

/* Appends AUTH_PROOF, the client's MAC over snonce (the server nonce of the AUTH_HELLO reply) and
 * hs->cnonce, to b, and keeps in hs->smac the MAC the server must answer with (compare with
 * rdzv__auth_equal). Returns 0, -ENOMEM or DDP_EAUTH (libcrypto failed); b is unchanged on
 * error. */
int rdzv__handshake_proof_encode(rdzv_handshake_t *hs, const uint8_t snonce[RDZV_AUTH_NONCE_LEN],
                                 ddp_buf_t *b);

#endif
