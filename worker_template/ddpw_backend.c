/* SPDX-License-Identifier: Apache-2.0
 * ddpw_backend.c: the job's backend, decided once for every rank. Each rank says what it asked
 * for and whether NCCL can run on it (its vote: a device of its own, or why not, with CUDA's own
 * error when the device query failed); rank 0 reads every vote through the store, decides, and
 * publishes the decision, which every rank applies. Decided per rank, a job whose nodes differ
 * (one with fewer GPUs than ranks) would split between NCCL and the CPU backend, both halves
 * waiting for each other until the collective timeout; decided once, it trains on one backend,
 * or every rank fails at once with the same line naming the rank and node that differ. */
#include "ddpw_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp_contract.h"

const char *ddpw_backend_name(ddpw_backend_t b) {
    switch (b) {
    case DDPW_BACKEND_CPU: return "cpu";
    case DDPW_BACKEND_NCCL: return "nccl";
    default: return "auto";
    }
}

static const char *version_text(int v, char *out, size_t cap) {
    if (v <= 0)
        snprintf(out, cap, "none");
    else
        snprintf(out, cap, "%d.%d", v / 1000, v % 1000 / 10);
    return out;
}

void ddpw__vote_make(const ddpw_env_t *env, ddpw_backend_t asked, ddpw_vote_t *v) {
    memset(v, 0, sizeof *v);
    v->asked = asked;
    v->group_rank = env->group_rank;
    if (gethostname(v->host, sizeof v->host - 1) != 0 || v->host[0] == '\0')
        snprintf(v->host, sizeof v->host, "unknown");
    for (char *c = v->host; *c; c++) /* the vote is tab-separated text */
        if (*c == '\t' || *c == '\n')
            *c = ' ';
    if (asked == DDPW_BACKEND_CPU)
        return; /* CUDA is not asked: it costs ~1 s on a machine without a driver */
    ddpw_cuda_probe_t p;
    int dev = env->local_rank; /* LOCAL_RANK names the device, also when it is virtual */
    ddpw__cuda_probe(dev, &p);
    char dv[16], rv[16];
    if (p.count < 0 && p.runtime == 0) {
        snprintf(v->why, sizeof v->why, "%s", p.error); /* built without CUDA */
    } else if (p.count < 0 && p.driver == 0) {
        snprintf(v->why, sizeof v->why, "no CUDA driver is installed");
    } else if (p.count < 0) {
        /* A driver is there and the query failed (too old for this runtime, a broken install):
         * CUDA's own error and both versions, never "no GPU". */
        v->cuda_failed = 1;
        snprintf(v->why, sizeof v->why, "cudaGetDeviceCount: %s (driver %s, runtime %s)", p.error,
                 version_text(p.driver, dv, sizeof dv), version_text(p.runtime, rv, sizeof rv));
    } else if (p.count == 0) {
        snprintf(v->why, sizeof v->why, "no CUDA device is visible");
    } else if (dev >= p.count) {
        snprintf(v->why, sizeof v->why,
                 DDP_ENV_LOCAL_RANK "=%d but only %d CUDA device(s) are visible", dev, p.count);
    } else {
        v->can_nccl = 1;
        snprintf(v->device, sizeof v->device, "%s", p.bus_id);
    }
}

int ddpw__vote_encode(const ddpw_vote_t *v, char *out, size_t cap) {
    int n = snprintf(out, cap, "v1\t%d\t%d\t%d\t%d\t%s\t%s\t%s", (int)v->asked, v->group_rank,
                     v->can_nccl, v->cuda_failed, v->host, v->device[0] ? v->device : "-",
                     v->why[0] ? v->why : "-");
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Copies the next tab-separated field of *s into out (cap bytes); "-" reads as empty. */
static int next_field(const char **s, char *out, size_t cap) {
    if (*s == NULL)
        return -1;
    const char *tab = strchr(*s, '\t');
    size_t n = tab ? (size_t)(tab - *s) : strlen(*s);
    if (n >= cap)
        return -1;
    memcpy(out, *s, n);
    out[n] = '\0';
    if (strcmp(out, "-") == 0)
        out[0] = '\0';
    *s = tab ? tab + 1 : NULL;
    return 0;
}

int ddpw__vote_decode(const char *s, int rank, ddpw_vote_t *v, ddp_err_t *err) {
    memset(v, 0, sizeof *v);
    char tag[8], num[4][16];
    int ok = next_field(&s, tag, sizeof tag) == 0 && strcmp(tag, "v1") == 0;
    for (int i = 0; ok && i < 4; i++)
        ok = next_field(&s, num[i], sizeof num[i]) == 0 && num[i][0] != '\0';
    ok = ok && next_field(&s, v->host, sizeof v->host) == 0 &&
         next_field(&s, v->device, sizeof v->device) == 0 &&
         next_field(&s, v->why, sizeof v->why) == 0 && s == NULL;
    if (ok) {
        v->asked = (ddpw_backend_t)atoi(num[0]);
        v->group_rank = atoi(num[1]);
        v->can_nccl = atoi(num[2]) != 0;
        v->cuda_failed = atoi(num[3]) != 0;
        ok = v->asked == DDPW_BACKEND_AUTO || v->asked == DDPW_BACKEND_CPU ||
             v->asked == DDPW_BACKEND_NCCL;
    }
    if (!ok)
        return ddp_err_set(err, DDP_EPROTO, "backend vote of rank %d is malformed", rank);
    return 0;
}

/* The first reason NCCL cannot serve the job, as "rank R on node G (host): why" into out;
 * 0 when every rank has a device of its own, none shared within a node. */
static int nccl_blocker(const ddpw_vote_t *votes, int n, char *out, size_t cap) {
    for (int r = 0; r < n; r++)
        if (!votes[r].can_nccl) {
            snprintf(out, cap, "rank %d on node %d (%s): %s", r, votes[r].group_rank, votes[r].host,
                     votes[r].why);
            return 1;
        }
    /* Two ranks of one node on one device: NCCL refuses that ("Duplicate GPU detected"). */
    for (int r = 0; r < n; r++)
        for (int q = r + 1; q < n; q++)
            if (votes[q].group_rank == votes[r].group_rank &&
                strcmp(votes[q].device, votes[r].device) == 0) {
                snprintf(out, cap, "ranks %d and %d on node %d (%s) would share GPU %s", r, q,
                         votes[r].group_rank, votes[r].host, votes[r].device);
                return 1;
            }
    return 0;
}

int ddpw__backend_decide(const ddpw_vote_t *votes, int n, ddpw_backend_t *out, char *note,
                         size_t cap, ddp_err_t *err) {
    note[0] = '\0';
    for (int r = 1; r < n; r++)
        if (votes[r].asked != votes[0].asked)
            return ddp_err_set(
                err, DDP_EUSAGE, "backend: rank %d on node %d (%s) asked for %s, rank 0 for %s", r,
                votes[r].group_rank, votes[r].host, ddpw_backend_name(votes[r].asked),
                ddpw_backend_name(votes[0].asked));
    ddpw_backend_t asked = votes[0].asked;
    if (asked == DDPW_BACKEND_CPU) {
        *out = DDPW_BACKEND_CPU;
        return 0;
    }
    char why[400];
    if (!nccl_blocker(votes, n, why, sizeof why)) {
        *out = DDPW_BACKEND_NCCL;
        return 0;
    }
    if (asked == DDPW_BACKEND_NCCL)
        return ddp_err_set(err, DDP_ENOGPU, "backend nccl: %s", why);
    /* AUTO: the CPU backend for everyone. Silent on a machine without GPUs; said when some rank
     * could have used one, or a device query failed. */
    int any_gpu = 0, any_failed = 0;
    for (int r = 0; r < n; r++) {
        any_gpu |= votes[r].can_nccl;
        any_failed |= votes[r].cuda_failed;
    }
    if (any_failed && !any_gpu) {
        for (int r = 0; r < n; r++)
            if (votes[r].cuda_failed) {
                snprintf(why, sizeof why, "rank %d on node %d (%s): %s", r, votes[r].group_rank,
                         votes[r].host, votes[r].why);
                break;
            }
    }
    if (any_gpu || any_failed)
        snprintf(note, cap,
                 "backend auto: the CPU backend for every rank, as NCCL cannot serve "
                 "the job: %s",
                 why);
    *out = DDPW_BACKEND_CPU;
    return 0;
}
