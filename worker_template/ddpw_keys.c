/* SPDX-License-Identifier: Apache-2.0
 * ddpw_keys.c: the names of libddpw's and train's store keys, and the round prefix over them
 * (ddpw_keys.h). */
#include "ddpw_keys.h"

#include <inttypes.h>
#include <stdio.h>

#include "ddp_contract.h"
#include "ddpw.h"
#include "rdzv_layout.h"

/* A whole key of the longest run id, round and name fits DDPW_KEY_MAX. */
_Static_assert(sizeof DDP_WORKER_KEY_PREFIX + sizeof(((ddpw_env_t *)0)->run_id) + 2 + 19 +
                       DDPW_NAME_MAX <=
                   DDPW_KEY_MAX,
               "DDPW_KEY_MAX holds every key of the library");

int ddpw__key_round(char *key, size_t cap, const char *run_id, int64_t round, const char *name) {
    return rdzv_layout_round_key(key, cap, DDP_WORKER_KEY_PREFIX, run_id, round, name);
}

/* Every name is a few words and one number of at most 20 characters (a sign included): it fits
 * DDPW_NAME_MAX, which the unit tests check at the numbers' extremes. */
static ddpw_name_t name_int(const char *stem, int v) {
    ddpw_name_t n;
    snprintf(n.s, sizeof n.s, "%s/%d", stem, v);
    return n;
}

static ddpw_name_t name_u64(const char *stem, uint64_t v) {
    ddpw_name_t n;
    snprintf(n.s, sizeof n.s, "%s/%" PRIu64, stem, v);
    return n;
}

ddpw_name_t ddpw__key_vote(int rank) {
    return name_int("backend/vote", rank);
}

ddpw_name_t ddpw__key_shm(int node) {
    return name_int("cpu/shm", node);
}

ddpw_name_t ddpw__key_shm_ready(int node) {
    return name_int("cpu/ready", node);
}

ddpw_name_t ddpw__key_ring(int node) {
    return name_int("cpu/tcp", node);
}

ddpw_name_t ddpw__key_barrier(uint64_t seq) {
    return name_u64("barrier", seq);
}

ddpw_name_t ddpw__key_train_sync(uint64_t epoch) {
    return name_u64("train/sync", epoch);
}
