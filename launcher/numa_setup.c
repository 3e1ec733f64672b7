/* SPDX-License-Identifier: Apache-2.0
 * launch_numa_setup: the --numa_binding plan of this node's workers, made before anything starts
 * (an impossible binding is a usage error, exit 2, unless --numa_binding_fallback). Each local
 * rank's anchor is the NUMA node of its GPU (the device LOCAL_RANK names in the visible list, the
 * one device it sees under --virtual_local_rank: the same entry), found through the driver API's
 * PCI bus id and sysfs; without GPUs (or with fewer GPUs than workers) it is NUMA node i mod the
 * node count, so CPU training is placed too. */
#include "launch_spec.h"

#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_log.h"
#include "launch_int.h"

/* Each local rank's anchor node index; *gpus says whether they came from GPUs, whose PCI bus ids
 * are then in pci[0..n). */
static int anchors(const char *root, const launch_topo_t *t, int n, char (*pci)[32], int *anchor,
                   int *gpus, ddp_err_t *err) {
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
    char(*pci)[32] = calloc((size_t)n, sizeof *pci);
    launch_bind_t *b = calloc((size_t)n, sizeof *b);
    cpu_set_t allowed;
    if (t == NULL || anchor == NULL || pci == NULL || b == NULL)
        rc = ddp_err_set(err, -ENOMEM, "out of memory planning --numa_binding");
    else if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        rc = ddp_err_set(err, DDP_EUSAGE, "--numa_binding: sched_getaffinity: %s", strerror(errno));
    else if ((rc = launch_topo_read(root, t, err)) == 0 &&
             (rc = anchors(root, t, n, pci, anchor, &gpus, err)) == 0 &&
             (rc = launch_numa_plan(t, spec->numa_binding, anchor, n, &allowed, b, err)) == 0 &&
             (rc = keep_plan(spec, t, b, n)) < 0)
        ddp_err_set(err, rc, "out of memory keeping the --numa_binding plan");
    if (rc == 0)
        DDP_INFO("--numa_binding %s: %d worker(s) placed by %s",
                 launch_numa_mode_name(spec->numa_binding), n, gpus ? "their GPU" : "local rank");
    free(t);
    free(anchor);
    free(pci);
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

/* --print_topology: every mode's plan for n local ranks, one row each. */
typedef struct topo_view {
    launch_topo_t *t;
    int n, gpus;
    int *anchor;
    char (*pci)[32];
    launch_bind_t *plan[4]; /* per mode (node, socket, exclusive, core-complex); NULL: refused */
    char why[4][DDP_ERR_TEXT_LEN];
    cpu_set_t allowed;
} topo_view_t;

static const launch_numa_mode_t view_modes[4] = {LAUNCH_NUMA_NODE, LAUNCH_NUMA_SOCKET,
                                                 LAUNCH_NUMA_EXCLUSIVE, LAUNCH_NUMA_CORE_COMPLEX};

static void view_free(topo_view_t *v) {
    for (int m = 0; m < 4; m++)
        free(v->plan[m]);
    free(v->t);
    free(v->anchor);
    free(v->pci);
}

static int view_build(const launch_spec_t *spec, topo_view_t *v, ddp_err_t *err) {
    memset(v, 0, sizeof *v);
    v->n = spec->nproc_per_node;
    const char *root = launch_numa_sysfs_root();
    v->t = malloc(sizeof *v->t);
    v->anchor = calloc((size_t)v->n, sizeof *v->anchor);
    v->pci = calloc((size_t)v->n, sizeof *v->pci);
    if (v->t == NULL || v->anchor == NULL || v->pci == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory for the topology");
    if (sched_getaffinity(0, sizeof v->allowed, &v->allowed) != 0)
        CPU_ZERO(&v->allowed);
    int rc = launch_topo_read(root, v->t, err);
    if (rc == 0)
        rc = anchors(root, v->t, v->n, v->pci, v->anchor, &v->gpus, err);
    for (int m = 0; m < 4 && rc == 0; m++) {
        ddp_err_t e;
        ddp_err_clear(&e);
        v->plan[m] = calloc((size_t)v->n, sizeof *v->plan[m]);
        if (v->plan[m] == NULL)
            return ddp_err_set(err, -ENOMEM, "out of memory for the topology");
        if (launch_numa_plan(v->t, view_modes[m], v->anchor, v->n, &v->allowed, v->plan[m], &e) !=
            0) {
            snprintf(v->why[m], sizeof v->why[m], "%s", e.text);
            free(v->plan[m]);
            v->plan[m] = NULL;
        }
    }
    return rc;
}

static void print_table(const topo_view_t *v, FILE *out) {
    char buf[4096];
    fprintf(out, "CPUs ddprun may use: %s\n", launch_cpulist_format(&v->allowed, buf, sizeof buf));
    fprintf(out, "%-5s %-20s %-4s %-6s | CPUs by --numa_binding mode:\n", "", "", "NUMA", "");
    fprintf(out, "%-5s %-20s %-4s %-6s | %-18s %-18s %-18s %s\n", "rank", "GPU", "node", "socket",
            "node", "socket", "exclusive", "core-complex");
    for (int i = 0; i < v->n; i++) {
        char gpu[48] = "-";
        if (v->gpus)
            snprintf(gpu, sizeof gpu, "%d %s", i, v->pci[i]);
        fprintf(out, "%-5d %-20s %-4d %-6d |", i, gpu, v->t->node_id[v->anchor[i]],
                launch_topo_node_socket(v->t, v->anchor[i]));
        for (int m = 0; m < 4; m++)
            fprintf(out, m < 3 ? " %-18s" : " %s",
                    v->plan[m] ? launch_cpulist_format(&v->plan[m][i].cpus, buf, sizeof buf) : "-");
        fprintf(out, "\n");
    }
    for (int m = 0; m < 4; m++)
        if (v->plan[m] == NULL)
            fprintf(out, "%s\n", v->why[m]);
    if (!v->gpus)
        fprintf(out, "no GPU for every worker: placed by local rank (NUMA node i mod %d)\n",
                v->t->nnodes);
}

/* A CPU set as a JSON string. */
static json_t *cpus_json(const cpu_set_t *set) {
    char buf[4096];
    return json_string(launch_cpulist_format(set, buf, sizeof buf));
}

static int print_json(const topo_view_t *v, FILE *out) {
    json_t *ranks = json_array(), *refused = json_object();
    json_t *root =
        json_pack("{s:o, s:s, s:o, s:o}", "cpus_allowed", cpus_json(&v->allowed), "placed_by",
                  v->gpus ? "gpu" : "local_rank", "ranks", ranks, "refused", refused);
    for (int i = 0; root != NULL && i < v->n; i++) {
        json_t *cpus = json_object();
        for (int m = 0; m < 4; m++)
            json_object_set_new(cpus, launch_numa_mode_name(view_modes[m]),
                                v->plan[m] ? cpus_json(&v->plan[m][i].cpus) : json_null());
        json_array_append_new(
            ranks,
            json_pack("{s:i, s:o, s:i, s:i, s:o}", "local_rank", i, "gpu",
                      v->gpus ? json_pack("{s:i, s:s}", "index", i, "pci", v->pci[i]) : json_null(),
                      "numa_node", v->t->node_id[v->anchor[i]], "socket",
                      launch_topo_node_socket(v->t, v->anchor[i]), "cpus", cpus));
    }
    for (int m = 0; m < 4; m++)
        if (v->plan[m] == NULL)
            json_object_set_new(refused, launch_numa_mode_name(view_modes[m]),
                                json_string(v->why[m]));
    int rc = root != NULL ? json_dumpf(root, out, JSON_PRESERVE_ORDER) : -1;
    json_decref(root);
    if (rc < 0)
        return -ENOMEM;
    fputc('\n', out);
    return 0;
}

int launch_numa_print(const launch_spec_t *spec, FILE *out, ddp_err_t *err) {
    topo_view_t v;
    int rc = view_build(spec, &v, err);
    if (rc == 0 && spec->json && print_json(&v, out) < 0)
        rc = ddp_err_set(err, -ENOMEM, "out of memory for the topology");
    else if (rc == 0 && !spec->json)
        print_table(&v, out);
    view_free(&v);
    return rc;
}
