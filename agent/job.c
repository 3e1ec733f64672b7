/* SPDX-License-Identifier: Apache-2.0
 * agent_job_t's checks before anything starts (agent_job_prepare), and what the job's fields
 * mean to the workers: the per-rank stream masks and the device of a virtual local rank. */
#include "agent_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ddp_devices.h"
#include "rdzv_proto.h"

/* A list is quoted in messages up to this many characters, so a message fits DDP_ERR_TEXT_LEN. */
#define LIST_QUOTE_MAX 48

int agent_std_for(const agent_std_map_t *m, int local_rank) {
    for (int i = 0; i < m->n; i++)
        if (m->rank[i] == local_rank)
            return m->mask[i];
    return m->dflt;
}

/* --virtual_local_rank gives local rank i device i of the visible list: a list with fewer
 * devices than workers is refused before anything starts (torchrun raises the same ValueError
 * when it starts the workers). Without a list, local rank i gets device i. */
static int devices_check(const agent_job_t *job, ddp_err_t *err) {
    int n = ddp_devices_count(job->devices);
    if (!job->virtual_local_rank || n < 0 || n >= job->nproc)
        return 0;
    size_t len = strlen(job->devices);
    return ddp_err_set(err, DDP_EUSAGE,
                       "--virtual_local_rank: %d workers but %s='%.*s%s' lists %d device(s)",
                       job->nproc, job->devices_var, LIST_QUOTE_MAX, job->devices,
                       len > LIST_QUOTE_MAX ? "..." : "", n);
}

int agent__worker_device(const agent_job_t *job, int local_rank, char *out, size_t cap) {
    if (job->devices == NULL) {
        snprintf(out, cap, "%d", local_rank);
        return 0;
    }
    return ddp_devices_entry(job->devices, local_rank, out, cap);
}

int agent_job_prepare(agent_job_t *job, ddp_err_t *err) {
    job->rdzv_addr[0] = '\0';
    job->token = (ddp_buf_t)DDP_BUF_INIT;
    int rc = devices_check(job, err);
    /* The store's rule for run ids, on every path: one node never sends its id to a store, yet
     * the id labels the metrics, fills the JSON events (where a byte that is not UTF-8 made
     * every event unwritable) and names the run's directories. */
    ddp_err_t why;
    ddp_err_clear(&why);
    if (rc == 0 && rdzv_run_id_check(job->run_id, &why) < 0)
        rc = ddp_err_set(err, DDP_EUSAGE, "--rdzv_id: %s", why.text);
    if (rc == 0 && agent__rdzv_wanted(job))
        rc = agent__rdzv_prepare(job, err);
    if (rc < 0)
        agent_job_release(job);
    return rc;
}

void agent_job_release(agent_job_t *job) {
    if (job != NULL)
        ddp_buf_free(&job->token);
}
