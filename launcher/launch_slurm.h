/* SPDX-License-Identifier: Apache-2.0
 * Slurm support for the launcher: the hostlist and task-count parsers (hostlist.c) and the
 * derivation of a job spec from a step's SLURM_* environment (slurm.c). Pure logic: every
 * environment read goes through a launch_getenv_fn, so tests replay recorded environments. */
#ifndef LAUNCH_SLURM_H
#define LAUNCH_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "launch_spec.h"

/* Limits that keep a hostile or mistyped list from eating the machine. */
#define LAUNCH_HOSTLIST_MAX_HOSTS 65536
#define LAUNCH_HOSTNAME_MAX 255

/* An expanded hostlist, in Slurm's order. */
typedef struct launch_hostlist {
    char **hosts; /* n strings, each owned */
    size_t n;
} launch_hostlist_t;

/* Expands a Slurm hostlist: "node[01-04,07]", "gpu-a[1-2],gpu-b3", "r[1-2]n[01-02]" (several
 * bracket groups, the first varies slowest), zero padding kept (the width of the lower bound),
 * items separated by commas or whitespace. Returns 0; DDP_EUSAGE for a malformed or empty list
 * (err->text names the input, err->offset is the position); DDP_ETOOBIG past
 * LAUNCH_HOSTLIST_MAX_HOSTS; -ENOMEM. out: free with launch_hostlist_free (zeroed on error). */
int launch_hostlist_parse(const char *s, launch_hostlist_t *out, ddp_err_t *err);

/* Frees what launch_hostlist_parse filled; out is left zeroed. */
void launch_hostlist_free(launch_hostlist_t *hl);

/* Per-node counts from Slurm's compressed form: "2", "2(x2)", "2,1", "3,1(x3)". */
typedef struct launch_counts {
    int *v; /* n counts, owned */
    size_t n;
} launch_counts_t;

/* Expands a task (or CPU) count list. Returns 0; DDP_EUSAGE for a malformed list (err names the
 * input and offset); DDP_ETOOBIG past LAUNCH_HOSTLIST_MAX_HOSTS entries; -ENOMEM.
 * out: free with launch_counts_free (zeroed on error). */
int launch_counts_parse(const char *s, launch_counts_t *out, ddp_err_t *err);

/* Frees what launch_counts_parse filled; out is left zeroed. */
void launch_counts_free(launch_counts_t *c);

/* The port ddprun derives for a Slurm step's rendezvous endpoint:
 *   LAUNCH_SLURM_PORT_BASE + LAUNCH_SLURM_STEP_SLOTS * (job_id % LAUNCH_SLURM_JOB_SLOTS)
 *                          + step_slot
 * where step_slot is step_id % LAUNCH_SLURM_STEP_SLOTS for a numeric step id, and the last slot for
 * the batch step (no step id). Range 29400..32599, below Linux's ephemeral ports (32768+). Two jobs
 * whose ids differ by less than 400 never share a port; nor do steps 0..6 of one job. */
#define LAUNCH_SLURM_PORT_BASE 29400
#define LAUNCH_SLURM_STEP_SLOTS 8
#define LAUNCH_SLURM_JOB_SLOTS 400
int launch_slurm_port(uint64_t job_id, int have_step, uint64_t step_id);

/* Nonzero when env describes a Slurm job step: SLURM_JOB_ID (or SLURM_JOBID) together with
 * SLURM_STEP_ID (SLURM_STEPID) or SLURM_NODEID. getenv_fn NULL = the process environment. */
int launch_slurm_detect(launch_getenv_fn getenv_fn, void *ctx);

#define LAUNCH_SLURM_MAX_LINES 16
#define LAUNCH_SLURM_LINE_LEN 192

/* What launch_slurm_derive found, for --verbose and for the agent. */
typedef struct launch_slurm {
    int detected;                       /* a Slurm step (or batch step) was found */
    int in_step;                        /* SLURM_STEP_ID was set (0 = the batch script itself) */
    char job_id[32];                    /* SLURM_JOB_ID */
    char step_id[32];                   /* SLURM_STEP_ID, or "batch" */
    char head[LAUNCH_HOSTNAME_MAX + 1]; /* first host of the step's nodelist; "" when unknown */
    int port;                           /* launch_slurm_port for this job and step */
    int restart_count;                  /* SLURM_RESTART_COUNT (requeues), 0 when unset */
    int n_lines; /* description lines: "nnodes=2 from SLURM_STEP_NUM_NODES=2", ... */
    char lines[LAUNCH_SLURM_MAX_LINES][LAUNCH_SLURM_LINE_LEN];
} launch_slurm_t;

/* Fills the fields of spec that were not given explicitly (see LAUNCH_GIVEN) from a Slurm step's
 * environment, and records what it did in out (may be NULL). Rules:
 *   nnodes       SLURM_STEP_NUM_NODES, else SLURM_NNODES (1 in a batch step: it runs on one node)
 *   node_rank    SLURM_NODEID (counted within the step)
 *   rdzv_id      SLURM_JOB_ID "." step id
 *   rdzv_backend c10d; rdzv_endpoint = first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
 *                SLURM_NODELIST) ":" launch_slurm_port(job, step)
 *   nproc        SLURM_GPUS_ON_NODE, else the entries of CUDA_VISIBLE_DEVICES, else unchanged
 * Not a Slurm step: returns 0 and changes nothing (out->detected = 0).
 * Returns 0; DDP_EUSAGE when more than one task runs on a node (the message shows the srun line);
 * DDP_EENV naming the variable when one is malformed; -ENOMEM. spec's strings stay owned by spec.
 */
int launch_slurm_derive(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                        launch_slurm_t *out, ddp_err_t *err);

/* Appends out's description lines to buf, each prefixed "slurm: " and ended by '\n'.
 * Returns 0 or -ENOMEM. */
int launch_slurm_describe(const launch_slurm_t *s, ddp_buf_t *buf);

#endif
