/* SPDX-License-Identifier: Apache-2.0
 * rdzv_layout: the names of the keys a multi-node job keeps in the store, built and parsed here
 * alone (docs/protocol-rdzv.md, "Keys"). The store's own keys of run R live under "__rdzv/R/":
 *
 *   __rdzv/R/end/N         SET by the store when round N ends (its value says why); agents WAIT
 *   __rdzv/R/N/exit        the exit barrier's counter of round N (agents ADD)
 *   __rdzv/R/N/exit/done   SET by the last node to arrive at that barrier; the others WAIT
 *   __rdzv/R/progress/G    group rank G's progress report (rdzv_progress_format), for STATUS
 *
 * Round keys are those a layer above keeps per round: "<prefix>R/N/<name>", prefix given by that
 * layer (the worker library's is DDP_WORKER_KEY_PREFIX, ddp_contract.h). The store drops the
 * round keys and end keys of old rounds (rdzv_server_forget_rounds) knowing only the prefix a
 * JOIN or its caller told it. Every builder writes a NUL-terminated key into key[0..cap) and
 * returns 0, or -EINVAL when a run id is over RDZV_RUN_ID_MAX, a number is negative or the key
 * does not fit cap (key is then unspecified). */
#ifndef RDZV_LAYOUT_H
#define RDZV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_proto.h"

/* Room for any "__rdzv/" key of a run (the run id, two 19-digit numbers and the words). */
#define RDZV_LAYOUT_KEY_MAX (RDZV_RUN_ID_MAX + 64)

/* Each writes one key of run_id, NUL-terminated, into key (cap bytes) and returns 0 (not its
 * length), or -EINVAL for a run id over its bound, a negative number, or no room. */
int rdzv_layout_end_key(char *key, size_t cap, const char *run_id, int64_t round);
int rdzv_layout_exit_key(char *key, size_t cap, const char *run_id, int64_t round);
int rdzv_layout_exit_done_key(char *key, size_t cap, const char *run_id, int64_t round);
int rdzv_layout_progress_key(char *key, size_t cap, const char *run_id, int64_t group_rank);

/* "<prefix><run_id>/<round>/<name>". prefix is at most RDZV_ROUND_KEYS_MAX bytes. */
int rdzv_layout_round_key(char *key, size_t cap, const char *prefix, const char *run_id,
                          int64_t round, const char *name);

/* The round N of key k[0..n) when it is run_id's end key "__rdzv/<run_id>/end/N"; else -1. */
int64_t rdzv_layout_end_round_of(const void *k, size_t n, const char *run_id);

/* The round N of key k[0..n) when it is one of run_id's round keys "<prefix><run_id>/N/...";
 * else -1 (also for an empty prefix: no layer named one). */
int64_t rdzv_layout_round_of(const void *k, size_t n, const char *prefix, const char *run_id);

#endif
