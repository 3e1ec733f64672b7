/* SPDX-License-Identifier: Apache-2.0
 * The fixture of libddpw's unit tests that need a store or several ranks (test_ddpw_coll.c,
 * test_ddpw_backend.c, test_ddpw_keys.c): the store in a thread of the test process (rdzv_server
 * on its own libuv loop, 127.0.0.1:0, no token) started and stopped as the group's setup and
 * teardown, the environment of one rank of a world on it, a CPU-backend handle, and forked ranks
 * under a bounded wait.
 *
 * Functions are static inline so that a test file that uses only some of them builds without
 * warnings. */
#ifndef DDPW_FIXTURE_H
#define DDPW_FIXTURE_H

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_time.h"
#include "ddpw_int.h"
#include "rdzv_server.h"

/* ---- the store in a thread ---- */
static rdzv_server_thread_t *g_store;
static _Atomic int g_port;

static inline int group_setup(void **state) {
    (void)state;
    rdzv_server_opts_t o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.no_auth = 1;
    ddp_err_t e;
    ddp_err_clear(&e);
    if (rdzv_server_thread_start(&o, &g_store, &e) != 0) {
        fprintf(stderr, "server: %s\n", e.text);
        return -1;
    }
    g_port = rdzv_server_thread_port(g_store);
    return 0;
}

static inline int group_teardown(void **state) {
    (void)state;
    rdzv_server_thread_stop(g_store);
    return 0;
}

/* env gets rank rank of a one-node world of world ranks in round round of run run, on the
 * fixture's store. */
static inline void env_for(ddpw_env_t *env, int rank, int world, int64_t round, const char *run) {
    memset(env, 0, sizeof *env);
    env->rank = env->local_rank = env->node_local_rank = rank;
    env->world_size = env->local_world_size = world;
    env->round = round;
    env->have_store = 1;
    snprintf(env->store_host, sizeof env->store_host, "127.0.0.1");
    env->store_port = (uint16_t)g_port;
    snprintf(env->run_id, sizeof env->run_id, "%s", run);
}

/* ddpw_init_env on the CPU backend with timeout_ms and chunk bytes (0: the default); on failure
 * says why on stderr, naming the rank, and returns NULL. */
static inline ddpw_t *cpu_init(ddpw_env_t *env, int timeout_ms, size_t chunk) {
    ddpw_opts_t o = DDPW_OPTS_INIT;
    o.backend = DDPW_BACKEND_CPU;
    o.timeout_ms = timeout_ms;
    o.cpu_chunk_bytes = chunk;
    ddp_err_t e;
    ddp_err_clear(&e);
    ddpw_t *w = NULL;
    if (ddpw_init_env(&w, env, &o, &e) != 0) {
        fprintf(stderr, "rank %d init: %s\n", env->rank, e.text);
        return NULL;
    }
    return w;
}

/* Forks world children running fn, waits (bounded) and returns how many failed. */
static inline int run_ranks(int world, int (*fn)(int, const void *), const void *arg) {
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(30);
            _exit(fn(r, arg));
        }
    }
    int failed = 0;
    uint64_t deadline = ddp_now_ms() + 40000;
    for (int r = 0; r < world; r++) {
        int st = 0;
        pid_t got;
        while ((got = waitpid(pids[r], &st, WNOHANG)) == 0 && ddp_now_ms() < deadline)
            usleep(2000);
        if (got == 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &st, 0);
            failed++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    return failed;
}

#endif
