/* rdzv_auth: the HMAC-SHA256 challenge-response shared by the store server and client
 * (internal). The token itself never crosses the wire: each side proves it holds the token by
 * a MAC over both nonces, bound to its role so that one proof cannot be replayed as the other. */
#ifndef RDZV_AUTH_INT_H
#define RDZV_AUTH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_limits.h"

enum { RDZV_ROLE_CLIENT = 0, RDZV_ROLE_SERVER = 1 };

/* out = HMAC-SHA256(token, label(role) || snonce || cnonce), 32 bytes; label is
 * "ddprun-store-auth-v1 client" or "... server". Returns 0 or DDP_EAUTH (libcrypto failed). */
int rdzv__auth_mac(const void *token, size_t token_len, int role,
                   const uint8_t snonce[RDZV_AUTH_NONCE_LEN],
                   const uint8_t cnonce[RDZV_AUTH_NONCE_LEN], uint8_t out[RDZV_AUTH_MAC_LEN]);

/* Constant-time comparison of two MACs: 1 when equal. */
int rdzv__auth_equal(const uint8_t a[RDZV_AUTH_MAC_LEN], const uint8_t b[RDZV_AUTH_MAC_LEN]);

/* Fills buf with n cryptographically random bytes. Returns 0 or DDP_EAUTH. */
int rdzv__random(void *buf, size_t n);

#endif
