/* launch_numa_setup: the --numa_binding plan of this node's workers, made before anything starts
 * (an impossible binding is a usage error, exit 2, unless --numa_binding_fallback). Each local
 * rank's anchor is the NUMA node of its GPU (the device LOCAL_RANK names in the visible list, the
 * one device it sees under --virtual_local_rank: the same entry), found through the driver API's
 * PCI bus id and sysfs; without GPUs (or with fewer GPUs than workers) it is NUMA node i mod the
 * node count, so CPU training is placed too. */
#include "launch_spec.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_log.h"
#include "launch_int.h"

/* Each local rank's anchor node index; *gpus says whether they came from GPUs. */
static int anchors(const char *root, const launch_topo_t *t, int n, int *anchor, int *gpus,
                   ddp_err_t *err) {
    char(*pci)[32] = calloc((size_t)n, sizeof *pci);
    if (pci == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for %d PCI ids", n);
    char why[160];
    int ng = launch_gpu_pci_ids(pci, n, why, sizeof why);
    int rc = 0;
    *gpus = ng >= n;
    if (ng < 0) {
        rc = ddp_err_set(err, DDP_EUSAGE, "--numa_binding: %s", why);
    } else if (*gpus) {
        for (int i = 0; i < n && rc == 0; i++)
            if ((anchor[i] = launch_topo_pci_node(root, t, pci[i], err)) < 0)
                rc = DDP_EUSAGE;
    } else {
        if (ng > 0)
            DDP_INFO("--numa_binding: %d GPU(s) for %d workers: placing them by local rank", ng, n);
        for (int i = 0; i < n; i++)
            anchor[i] = i % t->nnodes;
    }
    free(pci);
    return rc;
}

/* Keeps the plan in spec for the agent: sets and their texts. */
static int keep_plan(launch_spec_t *spec, const launch_topo_t *t, const launch_bind_t *b, int n) {
    spec->bind_cpus = calloc((size_t)n, sizeof *spec->bind_cpus);
    spec->bind_mems = calloc((size_t)n, sizeof *spec->bind_mems);
    spec->bind_cpus_text = calloc((size_t)n, sizeof *spec->bind_cpus_text);
    spec->bind_nodes_text = calloc((size_t)n, sizeof *spec->bind_nodes_text);
    if (!spec->bind_cpus || !spec->bind_mems || !spec->bind_cpus_text || !spec->bind_nodes_text)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        char cpus[4096], nodes[256] = "";
        size_t len = 0;
        spec->bind_cpus[i] = b[i].cpus;
        for (int x = 0; x < t->nnodes; x++)
            if (b[i].nodes >> x & 1) {
                spec->bind_mems[i] |= 1ull << t->node_id[x];
                len += (size_t)snprintf(nodes + len, sizeof nodes - len, "%s%d", len ? "," : "",
                                        t->node_id[x]);
            }
        spec->bind_cpus_text[i] = strdup(launch_cpulist_format(&b[i].cpus, cpus, sizeof cpus));
        spec->bind_nodes_text[i] = strdup(nodes);
        if (spec->bind_cpus_text[i] == NULL || spec->bind_nodes_text[i] == NULL)
            return -ENOMEM;
        DDP_INFO("--numa_binding %s: local rank %d on CPUs %s, memory on NUMA node(s) %s",
                 launch_numa_mode_name(spec->numa_binding), i, cpus, nodes);
    }
    return 0;
}

int launch_numa_setup(launch_spec_t *spec, ddp_err_t *err) {
    if (spec->numa_binding == LAUNCH_NUMA_OFF)
        return 0;
    int n = spec->nproc_per_node, rc, gpus = 0;
    const char *root = launch_numa_sysfs_root();
    launch_topo_t *t = malloc(sizeof *t);
    int *anchor = calloc((size_t)n, sizeof *anchor);
    launch_bind_t *b = calloc((size_t)n, sizeof *b);
    cpu_set_t allowed;
    if (t == NULL || anchor == NULL || b == NULL)
        rc = ddp_err_set(err, -ENOMEM, "out of memory planning --numa_binding");
    else if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        rc = ddp_err_set(err, DDP_EUSAGE, "--numa_binding: sched_getaffinity: %s", strerror(errno));
    else if ((rc = launch_topo_read(root, t, err)) == 0 &&
             (rc = anchors(root, t, n, anchor, &gpus, err)) == 0 &&
             (rc = launch_numa_plan(t, spec->numa_binding, anchor, n, &allowed, b, err)) == 0 &&
             (rc = keep_plan(spec, t, b, n)) < 0)
        ddp_err_set(err, rc, "out of memory keeping the --numa_binding plan");
    if (rc == 0)
        DDP_INFO("--numa_binding %s: %d worker(s) placed by %s",
                 launch_numa_mode_name(spec->numa_binding), n, gpus ? "their GPU" : "local rank");
    free(t);
    free(anchor);
    free(b);
    if (rc != 0 && rc != -ENOMEM && spec->numa_binding_fallback) {
        /* torchrun's roll-out escape: one warning, and the workers run unbound. */
        DDP_WARN("%s; --numa_binding_fallback: running the workers unbound", err->text);
        ddp_err_clear(err);
        spec->numa_binding = LAUNCH_NUMA_OFF;
        rc = 0;
    }
    return rc;
}
