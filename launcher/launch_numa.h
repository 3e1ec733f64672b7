/* SPDX-License-Identifier: Apache-2.0
 * launch_numa: --numa_binding, torchrun 2.x's modes. The node's topology is read from sysfs (NUMA
 * nodes, sockets, physical cores and their SMT siblings, L3 groups, each GPU's NUMA node through
 * its PCI bus id), and each local rank gets a set of CPUs and NUMA nodes, always inside the CPUs
 * ddprun itself may use. The agent applies the plan in each worker between fork and exec
 * (sched_setaffinity, set_mempolicy). */
#ifndef LAUNCH_NUMA_H
#define LAUNCH_NUMA_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp_err.h"

typedef enum {
    LAUNCH_NUMA_OFF = 0,
    LAUNCH_NUMA_NODE,         /* every CPU of the NUMA node of the rank's GPU */
    LAUNCH_NUMA_SOCKET,       /* every CPU of every NUMA node of that socket */
    LAUNCH_NUMA_EXCLUSIVE,    /* that node's physical cores split evenly among its ranks */
    LAUNCH_NUMA_CORE_COMPLEX, /* one L3 group of that node per rank */
} launch_numa_mode_t;

#define LAUNCH_NUMA_MAX_CPUS CPU_SETSIZE
#define LAUNCH_NUMA_MAX_NODES 64

/* One node's topology, as sysfs tells it. */
typedef struct launch_topo {
    int ncpus;                          /* highest CPU id + 1 seen */
    int nnodes;                         /* NUMA nodes with CPUs, by index below */
    int node_id[LAUNCH_NUMA_MAX_NODES]; /* their ids (node<ID> in sysfs) */
    cpu_set_t node_cpus[LAUNCH_NUMA_MAX_NODES];
    short cpu_node[LAUNCH_NUMA_MAX_CPUS];   /* index into node_id; -1 = offline/unknown */
    short cpu_socket[LAUNCH_NUMA_MAX_CPUS]; /* physical_package_id */
    short cpu_core[LAUNCH_NUMA_MAX_CPUS];   /* first CPU of its thread siblings (its core) */
    short cpu_l3[LAUNCH_NUMA_MAX_CPUS];     /* first CPU sharing its L3; -1 = no L3 known */
} launch_topo_t;

/* The sysfs root: $DDPRUN_SYSFS_ROOT (a testing aid: a directory holding a sys/ tree of another
 * machine's shape), else "" (the real /sys). */
const char *launch_numa_sysfs_root(void);

/* Reads the topology under root. Returns 0, or DDP_EUSAGE with err saying what could not be read.
 */
int launch_topo_read(const char *root, launch_topo_t *t, ddp_err_t *err);

/* The NUMA node index (into t->node_id) of PCI device pci ("0000:18:00.0", any case, a CUDA-style
 * 8-digit domain accepted) under root; -1 when sysfs does not say (err names the file). */
int launch_topo_pci_node(const char *root, const launch_topo_t *t, const char *pci, ddp_err_t *err);

/* The socket (physical_package_id) of node index a: its first CPU's. */
int launch_topo_node_socket(const launch_topo_t *t, int a);

/* Each local rank's binding. */
typedef struct launch_bind {
    cpu_set_t cpus;
    uint64_t nodes; /* bit i: node index i (t->node_id[i]) */
} launch_bind_t;

/* Plans mode for n local ranks: anchor[i] is rank i's NUMA node index (its GPU's; for CPU
 * workers i mod nnodes), allowed the CPUs ddprun may use. Returns 0 with out[0..n) filled, or
 * DDP_EUSAGE with err naming the rank and why (a set outside the allowed CPUs, fewer cores than
 * exclusive ranks, fewer L3 groups than ranks). */
int launch_numa_plan(const launch_topo_t *t, launch_numa_mode_t mode, const int *anchor, int n,
                     const cpu_set_t *allowed, launch_bind_t *out, ddp_err_t *err);

/* A CPU set as a list ("0-3,8"), into out (cap bytes). Returns out. */
char *launch_cpulist_format(const cpu_set_t *s, char *out, size_t cap);

/* Parses a sysfs CPU list ("0-3,8-11", may end with a newline) into s. 0 or -1. */
int launch_cpulist_parse(const char *text, cpu_set_t *s);

/* The mode's name as the flag takes it ("node", "socket", "exclusive", "core-complex"). */
const char *launch_numa_mode_name(launch_numa_mode_t m);

#endif
