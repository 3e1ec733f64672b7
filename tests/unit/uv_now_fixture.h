/* SPDX-License-Identifier: Apache-2.0
 * The loop's clock of the agent's unit tests that link their part with -Wl,--wrap=uv_now
 * (test_agent_rdzv_*.c): uv_now returns now_ms, which each test moves as it likes. Included by
 * one file of each test program. */
#ifndef UV_NOW_FIXTURE_H
#define UV_NOW_FIXTURE_H

#include <stdint.h>

#include <uv.h>

static uint64_t now_ms; /* the loop's clock */

uint64_t __wrap_uv_now(const uv_loop_t *loop);
uint64_t __wrap_uv_now(const uv_loop_t *loop) {
    (void)loop;
    return now_ms;
}

#endif
