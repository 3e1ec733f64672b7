/* SPDX-License-Identifier: Apache-2.0
 * rdzv_auth: HMAC-SHA256 proofs, random nonces and the job-token helpers (hex from the
 * environment, raw bytes from a file, generation for --standalone). libcrypto does the crypto. */
#include "rdzv_auth_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ddp_contract.h"
#include "ddp_err.h"
#include "ddp_escape.h"
#include "rdzv_frame_int.h"
#include "rdzv_proto.h"
#include "rdzv_token.h"

static const char *const role_labels[] = {"ddprun-store-auth-v1 client",
                                          "ddprun-store-auth-v1 server"};

int rdzv__auth_mac(const void *token, size_t token_len, int role,
                   const uint8_t snonce[RDZV_AUTH_NONCE_LEN],
                   const uint8_t cnonce[RDZV_AUTH_NONCE_LEN], uint8_t out[RDZV_AUTH_MAC_LEN]) {
    const char *label = role_labels[role == RDZV_ROLE_SERVER];
    size_t ll = strlen(label);
    uint8_t msg[64 + 2 * RDZV_AUTH_NONCE_LEN];
    memcpy(msg, label, ll);
    memcpy(msg + ll, snonce, RDZV_AUTH_NONCE_LEN);
    memcpy(msg + ll + RDZV_AUTH_NONCE_LEN, cnonce, RDZV_AUTH_NONCE_LEN);
    unsigned int md_len = 0;
    if (token_len > RDZV_TOKEN_MAX_LEN ||
        HMAC(EVP_sha256(), token, (int)token_len, msg, ll + 2 * RDZV_AUTH_NONCE_LEN, out,
             &md_len) == NULL ||
        md_len != RDZV_AUTH_MAC_LEN)
        return DDP_EAUTH;
    return 0;
}

int rdzv__run_key(const void *token, size_t token_len, const char *run_id, size_t run_id_len,
                  uint8_t out[RDZV_AUTH_MAC_LEN]) {
    static const char label[] = "ddprun-run-token-v1 ";
    uint8_t msg[sizeof label - 1 + RDZV_RUN_ID_MAX];
    unsigned int md_len = 0;
    if (token_len > RDZV_TOKEN_MAX_LEN || run_id_len == 0 || run_id_len > RDZV_RUN_ID_MAX)
        return DDP_EAUTH;
    memcpy(msg, label, sizeof label - 1);
    memcpy(msg + sizeof label - 1, run_id, run_id_len);
    if (HMAC(EVP_sha256(), token, (int)token_len, msg, sizeof label - 1 + run_id_len, out,
             &md_len) == NULL ||
        md_len != RDZV_AUTH_MAC_LEN)
        return DDP_EAUTH;
    return 0;
}

int rdzv_run_token(const void *token, size_t token_len, const char *run_id, ddp_buf_t *out,
                   ddp_err_t *err) {
    uint8_t key[RDZV_AUTH_MAC_LEN];
    int rc = rdzv_run_id_check(run_id, err);
    if (rc < 0)
        return rc;
    if (token_len == 0)
        return ddp_err_set(err, DDP_EUSAGE, "no store token to derive a run token from");
    if (rdzv__run_key(token, token_len, run_id, strlen(run_id), key) < 0)
        return ddp_err_set(err, DDP_EAUTH, "libcrypto failed to compute a MAC");
    rc = rdzv_token_to_hex(key, sizeof key, out);
    OPENSSL_cleanse(key, sizeof key);
    return rc < 0 ? ddp_err_set(err, rc, "out of memory") : 0;
}

int rdzv__auth_equal(const uint8_t a[RDZV_AUTH_MAC_LEN], const uint8_t b[RDZV_AUTH_MAC_LEN]) {
    return CRYPTO_memcmp(a, b, RDZV_AUTH_MAC_LEN) == 0;
}

int rdzv__random(void *buf, size_t n) {
    /* The kernel's CSPRNG directly: OpenSSL's RAND_bytes would load openssl.cnf and seed its
     * DRBG on first use, a few milliseconds that every ddprun start would pay for the store's
     * hash seed. */
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return DDP_EAUTH;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int rdzv__handshake_hello_encode(rdzv_handshake_t *hs, ddp_buf_t *b) {
    int with_token = hs->token != NULL && hs->token_len > 0;
    if (with_token && hs->token_len > RDZV_TOKEN_MAX_LEN)
        return DDP_EUSAGE;
    if (with_token && hs->run_id != NULL &&
        (hs->run_id[0] == '\0' || strlen(hs->run_id) > RDZV_RUN_ID_MAX))
        return DDP_EUSAGE;
    if (with_token && rdzv__random(hs->cnonce, sizeof hs->cnonce) < 0)
        return DDP_EAUTH;
    size_t start = b->len;
    int rc = rdzv__put_u8(b, RDZV_CMD_VALIDATE);
    rc = rc ? rc : rdzv__put_u32(b, RDZV_VALIDATE_MAGIC);
    if (with_token && hs->run_id != NULL) {
        rc = rc ? rc : rdzv__put_u8(b, RDZV_CMD_AUTH_HELLO_RUN);
        rc = rc ? rc : ddp_buf_append(b, hs->cnonce, sizeof hs->cnonce);
        rc = rc ? rc : rdzv__put_blob(b, hs->run_id, strlen(hs->run_id));
    } else if (with_token) {
        rc = rc ? rc : rdzv__put_u8(b, RDZV_CMD_AUTH_HELLO);
        rc = rc ? rc : ddp_buf_append(b, hs->cnonce, sizeof hs->cnonce);
    } else {
        rc = rc ? rc : rdzv__put_u8(b, RDZV_CMD_PING);
        rc = rc ? rc : rdzv__put_u32(b, hs->ping_nonce);
    }
    if (rc < 0)
        b->len = start;
    return rc;
}

int rdzv__handshake_proof_encode(rdzv_handshake_t *hs, const uint8_t snonce[RDZV_AUTH_NONCE_LEN],
                                 ddp_buf_t *b) {
    uint8_t mac[RDZV_AUTH_MAC_LEN];
    if (rdzv__auth_mac(hs->token, hs->token_len, RDZV_ROLE_CLIENT, snonce, hs->cnonce, mac) < 0 ||
        rdzv__auth_mac(hs->token, hs->token_len, RDZV_ROLE_SERVER, snonce, hs->cnonce, hs->smac) <
            0)
        return DDP_EAUTH;
    size_t start = b->len;
    int rc = rdzv__put_u8(b, RDZV_CMD_AUTH_PROOF);
    rc = rc ? rc : ddp_buf_append(b, mac, sizeof mac);
    if (rc < 0)
        b->len = start;
    return rc;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* What a hex token must look like, for every message about one. */
#define HEX_EXPECTED "expected an even number of hex digits (0-9a-f), at most %zu"

/* Decodes hex into tok (replaced); errors name `name`, the variable the hex came from, once. The
 * value is a secret: a message gives its length and where it goes wrong, never its text. */
static int hex_decode(const char *hex, const char *name, ddp_buf_t *tok, ddp_err_t *err) {
    ddp_buf_reset(tok);
    if (hex == NULL || *hex == '\0')
        return 0;
    size_t n = strlen(hex);
    for (size_t i = 0; i < n; i++)
        if (hexval((unsigned char)hex[i]) < 0)
            return ddp_err_set(err, DDP_EENV,
                               "%s: character %zu of %zu is not a hex digit: " HEX_EXPECTED, name,
                               i + 1, n, 2 * RDZV_TOKEN_MAX_LEN);
    if (n % 2 != 0)
        return ddp_err_set(err, DDP_EENV, "%s: %zu hex digits, an odd number: " HEX_EXPECTED, name,
                           n, 2 * RDZV_TOKEN_MAX_LEN);
    if (n / 2 > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EENV, "%s: %zu hex digits, too many: " HEX_EXPECTED, name, n,
                           2 * RDZV_TOKEN_MAX_LEN);
    int rc = ddp_buf_reserve(tok, n / 2);
    if (rc < 0)
        return ddp_err_set(err, rc, "%s: out of memory", name);
    for (size_t i = 0; i < n; i += 2)
        tok->data[tok->len++] =
            (uint8_t)(hexval((unsigned char)hex[i]) << 4 | hexval((unsigned char)hex[i + 1]));
    return 0;
}

int rdzv_token_from_hex(const char *hex, ddp_buf_t *tok, ddp_err_t *err) {
    return hex_decode(hex, DDP_ENV_STORE_TOKEN, tok, err);
}

/* What a token file must hold, for the messages about its size. */
#define FILE_EXPECTED "expected 1..%zu bytes (one trailing newline is not counted)"

/* The one name a token file's messages start with: `via` is the flag or variable that gave the
 * path (NULL: none), so "--token-file PATH", "DDPRUN_TOKEN_FILE=PATH" or "token file PATH". The
 * path is escaped: it is printed on a terminal. */
static const char *file_label(const char *via, const char *path, char *buf, size_t cap) {
    char esc[128];
    ddp_str_escaped(path, esc, sizeof esc);
    if (via == NULL)
        snprintf(buf, cap, "token file %s", esc);
    else if (via[0] == '-')
        snprintf(buf, cap, "%s %s", via, esc);
    else
        snprintf(buf, cap, "%s=%s", via, esc);
    return buf;
}

/* Opens a token file for reading: a regular file (a symlink to one is followed) that only its
 * owner may access, as ssh wants of a private key. O_NONBLOCK keeps a FIFO or device given by
 * mistake from blocking the open; fstat then refuses it. Returns the fd, or an error in err that
 * starts with `label`. */
static int token_file_open(const char *path, const char *label, ddp_err_t *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ddp_err_set(err, -errno, "%s: unable to open: %s", label, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0)
        rc = ddp_err_set(err, -errno, "%s: unable to stat: %s", label, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "%s: not a regular file: expected a regular file of mode 600", label);
    else if ((st.st_mode & 077) != 0)
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "%s: mode %04o lets group or others read it; run: chmod 600 %s", label,
                         (unsigned)(st.st_mode & 07777), path);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* rdzv_token_from_file, its messages starting with the name file_label makes of via and path. */
static int file_read(const char *path, const char *via, ddp_buf_t *tok, ddp_err_t *err) {
    char label[160];
    file_label(via, path, label, sizeof label);
    ddp_buf_reset(tok);
    int fd = token_file_open(path, label, err);
    if (fd < 0)
        return fd;
    int rc = 0;
    for (;;) {
        if (tok->len > RDZV_TOKEN_MAX_LEN + 2) {
            rc = ddp_err_set(err, DDP_ETOOBIG, "%s: more than %zu bytes: " FILE_EXPECTED, label,
                             RDZV_TOKEN_MAX_LEN, RDZV_TOKEN_MAX_LEN);
            break;
        }
        rc = ddp_buf_reserve(tok, 512);
        if (rc < 0) {
            ddp_err_set(err, rc, "%s: out of memory", label);
            break;
        }
        ssize_t n = read(fd, tok->data + tok->len, 512);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ddp_err_set(err, -errno, "%s: unable to read: %s", label, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        tok->len += (size_t)n;
    }
    close(fd);
    if (rc < 0) {
        ddp_buf_reset(tok);
        return rc;
    }
    if (tok->len > 0 && tok->data[tok->len - 1] == '\n')
        tok->len--;
    if (tok->len > 0 && tok->data[tok->len - 1] == '\r')
        tok->len--;
    if (tok->len == 0 || tok->len > RDZV_TOKEN_MAX_LEN) {
        size_t len = tok->len;
        ddp_buf_reset(tok);
        return ddp_err_set(err, DDP_EUSAGE, "%s: the token is %zu bytes: " FILE_EXPECTED, label,
                           len, RDZV_TOKEN_MAX_LEN);
    }
    return 0;
}

int rdzv_token_from_file(const char *path, ddp_buf_t *tok, ddp_err_t *err) {
    return file_read(path, NULL, tok, err);
}

int rdzv_token_generate(ddp_buf_t *tok, size_t n, ddp_err_t *err) {
    ddp_buf_reset(tok);
    if (n == 0 || n > RDZV_TOKEN_MAX_LEN)
        return ddp_err_set(err, DDP_EUSAGE, "token length %zu out of range 1..%zu", n,
                           RDZV_TOKEN_MAX_LEN);
    int rc = ddp_buf_reserve(tok, n);
    if (rc < 0)
        return ddp_err_set(err, rc, "out of memory for a token");
    if (rdzv__random(tok->data, n) < 0)
        return ddp_err_set(err, DDP_EAUTH, "libcrypto could not generate random bytes");
    tok->len = n;
    return 0;
}

int rdzv_token_to_hex(const void *token, size_t len, ddp_buf_t *hex) {
    static const char digits[] = "0123456789abcdef";
    const uint8_t *t = token;
    ddp_buf_reset(hex);
    int rc = ddp_buf_reserve(hex, 2 * len);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < len; i++) {
        hex->data[hex->len++] = (uint8_t)digits[t[i] >> 4];
        hex->data[hex->len++] = (uint8_t)digits[t[i] & 15];
    }
    hex->data[hex->len] = 0;
    return 0;
}

/* A non-empty environment variable, or NULL. */
static const char *env_set(const char *name) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

int rdzv_token_load(const char *file, ddp_buf_t *tok, const char **source, ddp_err_t *err) {
    ddp_buf_reset(tok);
    const char *v, *from = NULL;
    int rc = 0;
    ddp_err_t e;
    ddp_err_clear(&e);
    /* Each reader names its source once (the flag or variable, with the path for a file); the
     * text is passed on as it is, never prefixed again. */
    if (file != NULL)
        from = "--token-file", rc = file_read(file, from, tok, &e);
    else if ((v = env_set(DDP_ENV_TOKEN)) != NULL)
        from = DDP_ENV_TOKEN, rc = hex_decode(v, from, tok, &e);
    else if ((v = env_set(DDP_ENV_TOKEN_FILE)) != NULL)
        from = DDP_ENV_TOKEN_FILE, rc = file_read(v, from, tok, &e);
    else if ((v = env_set(DDP_ENV_STORE_TOKEN)) != NULL)
        from = DDP_ENV_STORE_TOKEN, rc = hex_decode(v, from, tok, &e);
    if (source != NULL)
        *source = from;
    if (rc < 0) {
        /* Nothing of a refused token stays behind: wiped and freed for the caller. */
        if (tok->data != NULL)
            memset(tok->data, 0, tok->cap);
        ddp_buf_free(tok);
        return ddp_err_set(err, rc, "%s", e.text[0] ? e.text : ddp_strerror(rc));
    }
    return 0;
}

int rdzv_token_from_job_env(ddp_buf_t *tok, ddp_err_t *err) {
    return rdzv_token_load(NULL, tok, NULL, err);
}
