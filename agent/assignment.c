/* SPDX-License-Identifier: Apache-2.0
 * A round's outcome, applied in one place (agent_assignment_t in agent_int.h): one node takes
 * its place from the command line and counts its own restarts; several nodes take theirs from
 * each JOIN reply (agent/rdzv.c). Either way the agent's fields and the workers' shared
 * environment change here and nowhere else. */
#include "agent_int.h"

#include <stdio.h>

#include "ddp_err.h"
#include "ddp_log.h"

void agent__assignment_init(agent_t *a) {
    const agent_job_t *job = a->cfg.job;
    a->as.node_rank = job->node_rank > 0 ? job->node_rank : 0;
    a->as.world_size = job->max_nodes * a->cfg.nproc;
    a->as.group_world_size = job->max_nodes;
    a->as.rank_base = a->as.node_rank * a->cfg.nproc;
}

void agent__assignment_get(const agent_t *a, agent_assignment_t *as) {
    as->round = a->as.round;
    as->attempt = a->as.attempt;
    as->node_rank = a->as.node_rank;
    as->group_world_size = a->as.group_world_size;
    as->rank_base = a->as.rank_base;
    as->world_size = a->as.world_size;
    snprintf(as->master_addr, sizeof as->master_addr, "%s", a->as.master_addr);
    as->master_port = a->as.master_port;
}

int agent__assignment_apply(agent_t *a, const agent_assignment_t *as) {
    a->as.round = as->round;
    a->as.attempt = as->attempt;
    a->as.node_rank = as->node_rank;
    a->as.group_world_size = as->group_world_size;
    a->as.rank_base = as->rank_base;
    a->as.world_size = as->world_size;
    snprintf(a->as.master_addr, sizeof a->as.master_addr, "%s", as->master_addr);
    a->as.master_port = as->master_port;
    /* Sizes, ranks and the master are in every worker's environment. */
    int rc = agent__base_env_build(a);
    if (rc < 0)
        DDP_ERROR("unable to build the workers' environment: %s", ddp_strerror(rc));
    return rc;
}
