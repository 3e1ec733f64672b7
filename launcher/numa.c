/* SPDX-License-Identifier: Apache-2.0
 * launch_numa: the node's topology from sysfs and the per-rank CPU and NUMA node sets of each
 * --numa_binding mode (launch_numa.h). Pure computation over the files read: the tests build
 * sysfs trees of real machines' shapes under $DDPRUN_SYSFS_ROOT. */
#include "launch_numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *launch_numa_sysfs_root(void) {
    const char *r = getenv("DDPRUN_SYSFS_ROOT");
    return r != NULL ? r : "";
}

const char *launch_numa_mode_name(launch_numa_mode_t m) {
    switch (m) {
    case LAUNCH_NUMA_NODE: return "node";
    case LAUNCH_NUMA_SOCKET: return "socket";
    case LAUNCH_NUMA_EXCLUSIVE: return "exclusive";
    case LAUNCH_NUMA_CORE_COMPLEX: return "core-complex";
    default: return "off";
    }
}

int launch_cpulist_parse(const char *text, cpu_set_t *s) {
    CPU_ZERO(s);
    const char *p = text;
    while (*p != '\0' && *p != '\n') {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 0 || a >= LAUNCH_NUMA_MAX_CPUS)
            return -1;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b >= LAUNCH_NUMA_MAX_CPUS)
                return -1;
        }
        for (long c = a; c <= b; c++)
            CPU_SET((int)c, s);
        p = end;
        if (*p == ',')
            p++;
        else if (*p != '\0' && *p != '\n')
            return -1;
    }
    return 0;
}

char *launch_cpulist_format(const cpu_set_t *s, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int c = 0; c < LAUNCH_NUMA_MAX_CPUS; c++) {
        if (!CPU_ISSET(c, s))
            continue;
        int e = c;
        while (e + 1 < LAUNCH_NUMA_MAX_CPUS && CPU_ISSET(e + 1, s))
            e++;
        int n = e > c ? snprintf(out + len, cap - len, "%s%d-%d", len ? "," : "", c, e)
                      : snprintf(out + len, cap - len, "%s%d", len ? "," : "", c);
        if (n < 0 || (size_t)n >= cap - len)
            break; /* cut: still a valid prefix */
        len += (size_t)n;
        c = e;
    }
    return out;
}

/* Reads the first line of root/rel (printf-style) into buf. 0 or -1. */
static int read_line(char *buf, size_t cap, const char *root, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int read_line(char *buf, size_t cap, const char *root, const char *fmt, ...) {
    char rel[256], path[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s%s", root, rel);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

static int first_cpu(const cpu_set_t *s) {
    for (int c = 0; c < LAUNCH_NUMA_MAX_CPUS; c++)
        if (CPU_ISSET(c, s))
            return c;
    return -1;
}

/* The NUMA nodes: node<N>/cpulist under sys/devices/system/node, in id order. */
static int read_nodes(const char *root, launch_topo_t *t, ddp_err_t *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/sys/devices/system/node", root);
    DIR *d = opendir(path);
    if (d == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "--numa_binding: %s: %s (no NUMA topology)", path,
                           strerror(errno));
    int ids[LAUNCH_NUMA_MAX_NODES], n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < LAUNCH_NUMA_MAX_NODES)
        if (strncmp(de->d_name, "node", 4) == 0 && isdigit((unsigned char)de->d_name[4]))
            ids[n++] = atoi(de->d_name + 4);
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: a few nodes */
        for (int j = i; j > 0 && ids[j] < ids[j - 1]; j--) {
            int x = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = x;
        }
    for (int i = 0; i < n; i++) {
        char line[4096];
        cpu_set_t s;
        if (read_line(line, sizeof line, root, "/sys/devices/system/node/node%d/cpulist", ids[i]) <
                0 ||
            launch_cpulist_parse(line, &s) < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "--numa_binding: %s/sys/devices/system/node/node%d/cpulist is "
                               "missing or not a CPU list",
                               root, ids[i]);
        if (CPU_COUNT(&s) == 0)
            continue; /* memory-only node (CXL, HBM): nothing to bind a worker to */
        t->node_id[t->nnodes] = ids[i];
        t->node_cpus[t->nnodes] = s;
        for (int c = 0; c < LAUNCH_NUMA_MAX_CPUS; c++)
            if (CPU_ISSET(c, &s)) {
                t->cpu_node[c] = (short)t->nnodes;
                if (c + 1 > t->ncpus)
                    t->ncpus = c + 1;
            }
        t->nnodes++;
    }
    if (t->nnodes == 0)
        return ddp_err_set(err, DDP_EUSAGE, "--numa_binding: no NUMA node with CPUs under %s",
                           path);
    return 0;
}

/* The L3 group of cpu: the first CPU of shared_cpu_list of its level-3 cache; -1 when none. */
static int read_l3(const char *root, int cpu) {
    for (int idx = 0; idx < 8; idx++) {
        char line[4096];
        if (read_line(line, sizeof line, root, "/sys/devices/system/cpu/cpu%d/cache/index%d/level",
                      cpu, idx) < 0 ||
            atoi(line) != 3)
            continue;
        cpu_set_t s;
        if (read_line(line, sizeof line, root,
                      "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", cpu,
                      idx) < 0 ||
            launch_cpulist_parse(line, &s) < 0)
            return -1;
        return first_cpu(&s);
    }
    return -1;
}

int launch_topo_read(const char *root, launch_topo_t *t, ddp_err_t *err) {
    memset(t, 0, sizeof *t);
    for (int c = 0; c < LAUNCH_NUMA_MAX_CPUS; c++)
        t->cpu_node[c] = t->cpu_socket[c] = t->cpu_core[c] = t->cpu_l3[c] = -1;
    int rc = read_nodes(root, t, err);
    if (rc < 0)
        return rc;
    for (int c = 0; c < t->ncpus; c++) {
        if (t->cpu_node[c] < 0)
            continue;
        char line[4096];
        cpu_set_t sib;
        if (read_line(line, sizeof line, root,
                      "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c) < 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "--numa_binding: %s/sys/devices/system/cpu/cpu%d/topology is "
                               "missing",
                               root, c);
        t->cpu_socket[c] = (short)atoi(line);
        /* A core is its thread siblings; the first of them names it. */
        if (read_line(line, sizeof line, root,
                      "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c) == 0 &&
            launch_cpulist_parse(line, &sib) == 0 && first_cpu(&sib) >= 0)
            t->cpu_core[c] = (short)first_cpu(&sib);
        else
            t->cpu_core[c] = (short)c;
        t->cpu_l3[c] = (short)read_l3(root, c);
    }
    return 0;
}

int launch_topo_pci_node(const char *root, const launch_topo_t *t, const char *pci,
                         ddp_err_t *err) {
    /* CUDA names the domain with 8 digits (00000000:18:00.0), sysfs with 4. */
    char id[32];
    snprintf(id, sizeof id, "%s", pci);
    for (char *c = id; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    const char *colon = strchr(id, ':');
    const char *tail = id;
    if (colon != NULL && colon - id > 4)
        tail = colon - 4;
    char line[64];
    if (read_line(line, sizeof line, root, "/sys/bus/pci/devices/%s/numa_node", tail) < 0) {
        ddp_err_set(err, DDP_EUSAGE,
                    "--numa_binding: %s/sys/bus/pci/devices/%s/numa_node is "
                    "missing: the GPU's NUMA node is unknown",
                    root, tail);
        return -1;
    }
    int node = atoi(line);
    for (int i = 0; i < t->nnodes; i++)
        if (t->node_id[i] == node)
            return i;
    ddp_err_set(err, DDP_EUSAGE, "--numa_binding: GPU %s is on NUMA node %d, which %s", tail, node,
                node < 0 ? "the firmware does not report" : "has no CPUs");
    return -1;
}

int launch_topo_node_socket(const launch_topo_t *t, int a) {
    return t->cpu_socket[first_cpu(&t->node_cpus[a])];
}

/* The node indexes of the socket of node a, as a bit mask. */
static uint64_t socket_nodes(const launch_topo_t *t, int a) {
    int sock = launch_topo_node_socket(t, a);
    uint64_t m = 0;
    for (int i = 0; i < t->nnodes; i++)
        if (launch_topo_node_socket(t, i) == sock)
            m |= 1ull << i;
    return m;
}

/* The allowed CPUs of node a, grouped by key (a core, an L3 group): groups[k] is the k-th
 * distinct key in CPU order. Returns the number of groups. */
static int groups_of(const launch_topo_t *t, int a, const cpu_set_t *allowed, const short *key,
                     cpu_set_t *groups, int max) {
    int keys[LAUNCH_NUMA_MAX_CPUS], n = 0;
    for (int c = 0; c < t->ncpus; c++) {
        if (!CPU_ISSET(c, &t->node_cpus[a]) || !CPU_ISSET(c, allowed) || key[c] < 0)
            continue;
        int g = 0;
        while (g < n && keys[g] != key[c])
            g++;
        if (g == n) {
            if (n == max)
                continue;
            keys[n] = key[c];
            CPU_ZERO(&groups[n]);
            n++;
        }
        CPU_SET(c, &groups[g]);
    }
    return n;
}

/* The ranks anchored on node a before rank i, and in all. */
static void place_in_node(const int *anchor, int n, int i, int *j, int *k) {
    *j = *k = 0;
    for (int r = 0; r < n; r++)
        if (anchor[r] == anchor[i]) {
            *j += r < i;
            (*k)++;
        }
}

/* Rank i's share of node a's groups (physical cores or L3 groups, by key) that ddprun may use,
 * into out: of the k ranks anchored on a, the j-th takes groups [j*ng/k, (j+1)*ng/k) (its even
 * share of cores), or group j alone when one_each (one L3 complex per rank). Fewer groups than
 * ranks is DDP_EUSAGE naming the mode, the node and what it lacks. */
static int share(const launch_topo_t *t, int a, const cpu_set_t *allowed, const short *key,
                 int one_each, const char *mode, const char *what, const int *anchor, int n, int i,
                 cpu_set_t *groups, cpu_set_t *out, ddp_err_t *err) {
    int j, k, ng = groups_of(t, a, allowed, key, groups, LAUNCH_NUMA_MAX_CPUS);
    place_in_node(anchor, n, i, &j, &k);
    if (ng < k)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--numa_binding %s: NUMA node %d has %d %s ddprun may use for %d local "
                           "rank(s)",
                           mode, t->node_id[a], ng, what, k);
    int first = one_each ? j : j * ng / k, end = one_each ? j + 1 : (j + 1) * ng / k;
    for (int g = first; g < end; g++)
        CPU_OR(out, out, &groups[g]);
    return 0;
}

/* Over 60 lines: one switch keeps the four modes and their failures together. */
int launch_numa_plan(const launch_topo_t *t, launch_numa_mode_t mode, const int *anchor, int n,
                     const cpu_set_t *allowed, launch_bind_t *out, ddp_err_t *err) {
    const char *name = launch_numa_mode_name(mode);
    cpu_set_t *groups = malloc(sizeof(cpu_set_t) * LAUNCH_NUMA_MAX_CPUS);
    if (groups == NULL)
        return ddp_err_set(err, -ENOMEM, "out of memory planning --numa_binding");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int a = anchor[i];
        launch_bind_t *b = &out[i];
        CPU_ZERO(&b->cpus);
        b->nodes = 1ull << a;
        switch (mode) {
        case LAUNCH_NUMA_SOCKET:
            b->nodes = socket_nodes(t, a);
            for (int x = 0; x < t->nnodes; x++)
                if (b->nodes >> x & 1)
                    CPU_OR(&b->cpus, &b->cpus, &t->node_cpus[x]);
            break;
        case LAUNCH_NUMA_EXCLUSIVE: /* physical cores, each with its SMT siblings */
            rc = share(t, a, allowed, t->cpu_core, 0, name, "core(s)", anchor, n, i, groups,
                       &b->cpus, err);
            break;
        case LAUNCH_NUMA_CORE_COMPLEX:
            rc = share(t, a, allowed, t->cpu_l3, 1, name, "L3 group(s)", anchor, n, i, groups,
                       &b->cpus, err);
            break;
        default: b->cpus = t->node_cpus[a]; break;
        }
        if (rc != 0)
            break;
        /* Never wider than what the scheduler gave ddprun (Slurm's --cpu-bind, cpusets, taskset).
         */
        CPU_AND(&b->cpus, &b->cpus, allowed);
        if (CPU_COUNT(&b->cpus) == 0) {
            char want[256], may[256];
            rc = ddp_err_set(err, DDP_EUSAGE,
                             "--numa_binding %s: local rank %d's CPUs (NUMA node %d: %s) are "
                             "outside the CPUs ddprun may use (%s)",
                             name, i, t->node_id[a],
                             launch_cpulist_format(&t->node_cpus[a], want, sizeof want),
                             launch_cpulist_format(allowed, may, sizeof may));
        }
    }
    free(groups);
    return rc;
}
