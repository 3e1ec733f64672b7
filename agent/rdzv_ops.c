/* SPDX-License-Identifier: Apache-2.0
 * Several nodes: the operations of agent_node_ops_t (agent_int.h) over the rendezvous. The store
 * ends the round for every node, counts the restarts and refuses the JOIN of a run that has spent
 * them, so this side only moves the supervision state and asks (agent/rdzv.c). */
#include "agent_int.h"

/* The first JOIN, once the node's health check passes (rdzv_start). */
static int rdzv_begin(agent_t *a) {
    agent__check_enter(a);
    return 0;
}

static void rdzv_start(agent_t *a) {
    a->sup.state = SUP_JOINING;
    agent__rdzv_join(a);
}

static void rdzv_group_prepare(agent_t *a) {
    (void)a; /* this node's workers' store was emptied before its JOIN (agent__rdzv_join) */
}

/* The whole job restarts: the server ends the round for every node and counts it. */
static void rdzv_report_failure(agent_t *a, const char *what) {
    agent__rdzv_report_failure(a, what);
}

/* The server decides whether restarts remain: a spent run refuses the next JOIN, which follows
 * the node's health check as the first does. */
static void rdzv_restart(agent_t *a) {
    agent__check_enter(a);
}

/* The other nodes form their round without this one (or wait for it until join_timeout): the
 * log says why, worded as on one node, and the store records it for `ddprun status`. */
static void rdzv_report_unfit(agent_t *a, const char *reason) {
    agent__node_check_say(a, reason);
    agent__rdzv_report_unfit(a, reason);
}

/* The other nodes would wait for this one until join_timeout: stop them too. */
static void rdzv_give_up(agent_t *a, const char *why) {
    a->sup.state = SUP_ABORTING;
    agent__rdzv_abort(a, why);
}

/* Other nodes may still be running: leave together, within a bound. */
static void rdzv_succeeded(agent_t *a) {
    a->sup.state = SUP_BARRIER;
    agent__rdzv_exit_barrier(a);
}

/* The parked JOIN went with the lost connection: rdzv.c sends it on the current one. */
static void rdzv_rejoin(agent_t *a) {
    agent__rdzv_join(a);
}

const agent_node_ops_t agent__rdzv_ops = {
    .begin = rdzv_begin,
    .group_prepare = rdzv_group_prepare,
    .report_failure = rdzv_report_failure,
    .restart = rdzv_restart,
    .give_up = rdzv_give_up,
    .succeeded = rdzv_succeeded,
    .start = rdzv_start,
    .report_unfit = rdzv_report_unfit,
    .report_timing = agent__rdzv_timing_send,
    .rejoin = rdzv_rejoin,
    .barrier_settle = agent__rdzv_barrier_settle,
    .root_cause = agent__rdzv_root_cause,
};
