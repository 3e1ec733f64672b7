/* SPDX-License-Identifier: Apache-2.0
 * rdzv_token: the job token and run tokens of the ddprun store, for every client and the server:
 * where a token is read from (flag, variables, files), how it is made and written, and how a run
 * token derives from the store's (docs/protocol.md, "Authentication" and "Run tokens"). The
 * handshake that proves a token is rdzv_auth_int.h's, private to rendezvous/. */
#ifndef RDZV_TOKEN_H
#define RDZV_TOKEN_H

#include <stddef.h>

#include "ddp_buf.h"
#include "ddp_err.h"

/* Decodes a hex job token (as the agent gives workers in DDPRUN_STORE_TOKEN) into tok (replaced;
 * owned by the caller). Returns 0 (also for NULL or "": tok stays empty) or DDP_EENV naming
 * DDPRUN_STORE_TOKEN. */
int rdzv_token_from_hex(const char *hex, ddp_buf_t *tok, ddp_err_t *err);

/* Loads the job token: the one reader of its sources, for agents, `ddprun status`, the daemon,
 * workers and tools (their variables' names: DDP_ENV_TOKEN* in ddp_contract.h). The first source
 * that is set wins: file (a --token-file flag; NULL for none), then DDPRUN_TOKEN (hex), then
 * DDPRUN_TOKEN_FILE (a file), then DDPRUN_STORE_TOKEN (hex). Files are read as rdzv_token_from_file
 * reads them. tok's contents are replaced (it stays owned by the caller, empty when no source is
 * set; wiped and freed on an error). *source (source may be NULL) gets the flag or variable used, a
 * static string, or NULL. Returns 0, or the reader's error, its text starting with the one source
 * it came from, named once: "DDPRUN_TOKEN: ...", "DDPRUN_STORE_TOKEN: ...",
 * "DDPRUN_TOKEN_FILE=PATH: ..." or "--token-file PATH: ..." (paths escaped), then what is wrong and
 * what is expected. A hex value is a secret: messages give its length, never its text. Callers
 * print the text as it is, without a prefix of their own. */
int rdzv_token_load(const char *file, ddp_buf_t *tok, const char **source, ddp_err_t *err);

/* Reads a token file: raw bytes, one trailing newline (LF or CRLF) trimmed; 1..1024 bytes. The
 * file must be a regular file (symlinks are followed) with no access for group or others (mode
 * 600 or 400). tok's contents are replaced (tok stays owned by the caller). Errors: -errno naming
 * the file, DDP_EUSAGE (empty, not a regular file, or readable by others: the text names the mode
 * and the chmod to run), DDP_ETOOBIG. Messages start with "token file PATH: ". */
int rdzv_token_from_file(const char *path, ddp_buf_t *tok, ddp_err_t *err);

/* rdzv_token_load(NULL, tok, NULL, err): the token from the environment alone. */
int rdzv_token_from_job_env(ddp_buf_t *tok, ddp_err_t *err);

/* Fills tok with n random bytes from libcrypto (n = 32 is a good job token). Returns 0,
 * DDP_EUSAGE (n out of 1..1024) or DDP_EAUTH (no randomness). */
int rdzv_token_generate(ddp_buf_t *tok, size_t n, ddp_err_t *err);

/* Writes token as lower-case hex into hex (replaced; NUL-terminated), e.g. for
 * setenv(DDP_ENV_STORE_TOKEN, (char *)hex.data, 1). Returns 0 or -ENOMEM. */
int rdzv_token_to_hex(const void *token, size_t len, ddp_buf_t *hex);

/* The run token of run_id under the store token `token`, as hex into out (replaced;
 * NUL-terminated): HMAC-SHA256(token, "ddprun-run-token-v1 " || run_id). A client that holds it
 * (DDPRUN_TOKEN, DDPRUN_TOKEN_FILE or DDPRUN_STORE_TOKEN) and names the run (rdzv_client_opts_t
 * .run_id) is served that run alone by a store holding `token`: its rendezvous commands and the
 * keys of the form <prefix>/<run_id>/... (docs/protocol.md, "Run tokens"). Returns 0, -EINVAL
 * (run id not valid: rdzv_run_id_check), DDP_EUSAGE (no token) or DDP_EAUTH. */
int rdzv_run_token(const void *token, size_t token_len, const char *run_id, ddp_buf_t *out,
                   ddp_err_t *err);

#endif
