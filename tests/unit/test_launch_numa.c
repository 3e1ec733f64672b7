/* SPDX-License-Identifier: Apache-2.0
 * --numa_binding's topology and plans (launcher/numa.c) on sysfs trees of real machines' shapes,
 * built here in a temporary directory: a DGX H100 (2 sockets x 2 NUMA nodes, 8 GPUs, SMT, one L3
 * per socket), an AMD EPYC (1 socket, 1 NUMA node, 4 L3 complexes, 4 GPUs) with SMT on and off.
 * Every mode's set is checked for every local rank, as are the CPUs ddprun may use narrowing
 * every set and the cases that must refuse to start. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch_numa.h"

/* Writes text to root/rel (printf-style rel), making the directories. */
static void put(const char *root, const char *text, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(const char *root, const char *text, const char *fmt, ...) {
    char rel[512], path[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

typedef struct shape {
    int sockets, nodes_per_socket, cores_per_node, smt, l3_per_node, l3_per_socket;
} shape_t;

/* A sysfs tree: CPU ids are thread t of core k at t * cores + k (Linux's order on x86). */
static void make_tree(const char *root, const shape_t *s) {
    int nodes = s->sockets * s->nodes_per_socket, cores = nodes * s->cores_per_node;
    for (int nd = 0; nd < nodes; nd++) {
        char list[4096] = "";
        size_t len = 0;
        for (int t = 0; t < s->smt; t++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d-%d", t ? "," : "",
                                    t * cores + nd * s->cores_per_node,
                                    t * cores + (nd + 1) * s->cores_per_node - 1);
        put(root, list, "sys/devices/system/node/node%d/cpulist", nd);
    }
    for (int t = 0; t < s->smt; t++)
        for (int k = 0; k < cores; k++) {
            int cpu = t * cores + k, nd = k / s->cores_per_node, sock = nd / s->nodes_per_socket;
            char v[64], sib[64] = "", l3[128] = "";
            snprintf(v, sizeof v, "%d", sock);
            put(root, v, "sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
            for (int u = 0; u < s->smt; u++)
                snprintf(sib + strlen(sib), sizeof sib - strlen(sib), "%s%d", u ? "," : "",
                         u * cores + k);
            put(root, sib, "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
            /* The L3 group: a slice of the node, or the whole socket. */
            int first, n;
            if (s->l3_per_socket) {
                n = s->nodes_per_socket * s->cores_per_node;
                first = sock * n;
            } else {
                n = s->cores_per_node / s->l3_per_node;
                first = k / n * n;
            }
            for (int u = 0; u < s->smt; u++)
                snprintf(l3 + strlen(l3), sizeof l3 - strlen(l3), "%s%d-%d", u ? "," : "",
                         u * cores + first, u * cores + first + n - 1);
            put(root, "1", "sys/devices/system/cpu/cpu%d/cache/index0/level", cpu);
            put(root, "3", "sys/devices/system/cpu/cpu%d/cache/index3/level", cpu);
            put(root, l3, "sys/devices/system/cpu/cpu%d/cache/index3/shared_cpu_list", cpu);
        }
}

static char *tmp_root(void) {
    char *d = strdup("/tmp/ddptest-numa.XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_root(char *d) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
    free(d);
}

static void all_cpus(cpu_set_t *s) {
    CPU_ZERO(s);
    for (int c = 0; c < 256; c++)
        CPU_SET(c, s);
}

static void expect_cpus(const launch_bind_t *b, const char *want) {
    char got[512];
    launch_cpulist_format(&b->cpus, got, sizeof got);
    assert_string_equal(got, want);
}

/* DGX H100 shape: sockets of 2 NUMA nodes x 8 cores x 2 threads (64 CPUs), one L3 per socket,
 * 8 GPUs, two on each node, found by PCI bus id. */
static void test_dgx(void **state) {
    (void)state;
    char *root = tmp_root();
    shape_t s = {
        .sockets = 2, .nodes_per_socket = 2, .cores_per_node = 8, .smt = 2, .l3_per_socket = 1};
    make_tree(root, &s);
    static const char *pci[8] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                 "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
    for (int g = 0; g < 8; g++) {
        char v[8];
        snprintf(v, sizeof v, "%d", g / 2);
        put(root, v, "sys/bus/pci/devices/%s/numa_node", pci[g]);
    }
    launch_topo_t *t = malloc(sizeof *t);
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_topo_read(root, t, &e), 0);
    assert_int_equal(t->nnodes, 4);
    int anchor[8];
    for (int g = 0; g < 8; g++)
        assert_int_equal(anchor[g] = launch_topo_pci_node(root, t, pci[g], &e), g / 2);
    /* CUDA's spelling: an 8-digit domain, upper case. */
    assert_int_equal(launch_topo_pci_node(root, t, "00000000:DB:00.0", &e), 3);
    cpu_set_t all;
    all_cpus(&all);
    launch_bind_t b[8];
    static const char *node[4] = {"0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"};
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_NODE, anchor, 8, &all, b, &e), 0);
    for (int r = 0; r < 8; r++) {
        expect_cpus(&b[r], node[r / 2]);
        assert_int_equal(b[r].nodes, 1u << (r / 2));
    }
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_SOCKET, anchor, 8, &all, b, &e), 0);
    for (int r = 0; r < 8; r++) {
        expect_cpus(&b[r], r < 4 ? "0-15,32-47" : "16-31,48-63");
        assert_int_equal(b[r].nodes, r < 4 ? 0x3u : 0xcu);
    }
    /* Exclusive: each node's 8 cores split between its 2 ranks, siblings with their core. */
    static const char *excl[8] = {"0-3,32-35",   "4-7,36-39",   "8-11,40-43",  "12-15,44-47",
                                  "16-19,48-51", "20-23,52-55", "24-27,56-59", "28-31,60-63"};
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_EXCLUSIVE, anchor, 8, &all, b, &e), 0);
    for (int r = 0; r < 8; r++)
        expect_cpus(&b[r], excl[r]);
    /* One L3 per socket: a node has one group for its two ranks. */
    ddp_err_clear(&e);
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_CORE_COMPLEX, anchor, 8, &all, b, &e),
                     DDP_EUSAGE);
    assert_string_equal(e.text, "--numa_binding core-complex: NUMA node 0 has 1 L3 group(s) "
                                "ddprun may use for 2 local rank(s)");
    /* A restricted parent (taskset -c 0-5,32-37) narrows every set; a rank left with none
     * refuses to start, naming it. */
    cpu_set_t some;
    launch_cpulist_parse("0-5,32-37", &some);
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_NODE, anchor, 2, &some, b, &e), 0);
    expect_cpus(&b[0], "0-5,32-37");
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_EXCLUSIVE, anchor, 2, &some, b, &e), 0);
    expect_cpus(&b[0], "0-2,32-34");
    expect_cpus(&b[1], "3-5,35-37");
    ddp_err_clear(&e);
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_NODE, anchor, 3, &some, b, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--numa_binding node: local rank 2's CPUs (NUMA node 1: "
                                "8-15,40-47) are outside the CPUs ddprun may use (0-5,32-37)");
    /* Without GPUs workers go by local rank: node i mod 4. */
    int cpu_anchor[8];
    for (int r = 0; r < 8; r++)
        cpu_anchor[r] = r % t->nnodes;
    assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_NODE, cpu_anchor, 8, &all, b, &e), 0);
    expect_cpus(&b[5], node[1]);
    /* A GPU whose NUMA node the firmware does not report. */
    put(root, "-1", "sys/bus/pci/devices/0000:01:00.0/numa_node");
    ddp_err_clear(&e);
    assert_int_equal(launch_topo_pci_node(root, t, "0000:01:00.0", &e), -1);
    assert_non_null(strstr(e.text, "GPU 0000:01:00.0 is on NUMA node -1, which the firmware"));
    free(t);
    rm_root(root);
}

/* AMD EPYC shape: one node of 32 cores in 4 L3 complexes, 4 GPUs on it; SMT on and off. */
static void test_epyc(void **state) {
    (void)state;
    for (int smt = 1; smt <= 2; smt++) {
        char *root = tmp_root();
        shape_t s = {.sockets = 1,
                     .nodes_per_socket = 1,
                     .cores_per_node = 32,
                     .smt = smt,
                     .l3_per_node = 4};
        make_tree(root, &s);
        launch_topo_t *t = malloc(sizeof *t);
        ddp_err_t e;
        ddp_err_clear(&e);
        assert_int_equal(launch_topo_read(root, t, &e), 0);
        cpu_set_t all;
        all_cpus(&all);
        int anchor[33] = {0};
        launch_bind_t b[33];
        static const char *ccx[2][4] = {{"0-7", "8-15", "16-23", "24-31"},
                                        {"0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"}};
        assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_CORE_COMPLEX, anchor, 4, &all, b, &e), 0);
        for (int r = 0; r < 4; r++)
            expect_cpus(&b[r], ccx[smt - 1][r]);
        /* Exclusive: 8 cores each, the same slices here. */
        assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_EXCLUSIVE, anchor, 4, &all, b, &e), 0);
        for (int r = 0; r < 4; r++)
            expect_cpus(&b[r], ccx[smt - 1][r]);
        /* 3 ranks: 32 cores split 10/11/11, never a sibling apart from its core. */
        assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_EXCLUSIVE, anchor, 3, &all, b, &e), 0);
        expect_cpus(&b[0], smt == 2 ? "0-9,32-41" : "0-9");
        expect_cpus(&b[2], smt == 2 ? "21-31,53-63" : "21-31");
        /* 5 ranks for 4 complexes; 33 ranks for 32 cores. */
        ddp_err_clear(&e);
        assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_CORE_COMPLEX, anchor, 5, &all, b, &e),
                         DDP_EUSAGE);
        assert_non_null(strstr(e.text, "has 4 L3 group(s) ddprun may use for 5 local rank(s)"));
        ddp_err_clear(&e);
        assert_int_equal(launch_numa_plan(t, LAUNCH_NUMA_EXCLUSIVE, anchor, 33, &all, b, &e),
                         DDP_EUSAGE);
        assert_string_equal(e.text, "--numa_binding exclusive: NUMA node 0 has 32 core(s) ddprun "
                                    "may use for 33 local rank(s)");
        free(t);
        rm_root(root);
    }
}

/* CPU lists both ways; what cannot be read is one line naming the file. */
static void test_lists_and_errors(void **state) {
    (void)state;
    cpu_set_t s;
    char out[64];
    assert_int_equal(launch_cpulist_parse("0-3,8,10-11\n", &s), 0);
    assert_string_equal(launch_cpulist_format(&s, out, sizeof out), "0-3,8,10-11");
    assert_int_equal(launch_cpulist_parse("3-1", &s), -1);
    assert_int_equal(launch_cpulist_parse("x", &s), -1);
    char *root = tmp_root();
    launch_topo_t *t = malloc(sizeof *t);
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_topo_read(root, t, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "/sys/devices/system/node: No such file or directory"));
    put(root, "0-3", "sys/devices/system/node/node0/cpulist");
    ddp_err_clear(&e);
    assert_int_equal(launch_topo_read(root, t, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "/sys/devices/system/cpu/cpu0/topology is missing"));
    free(t);
    rm_root(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx),
        cmocka_unit_test(test_epyc),
        cmocka_unit_test(test_lists_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
