#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --numa_binding against the real kernel: each worker reports the CPUs it may run on and its
# memory policy (/proc/self/status Cpus_allowed_list, /proc/self/numa_maps), for this machine's
# topology and for a sysfs tree of another shape (DDPRUN_SYSFS_ROOT) whose NUMA nodes are this
# machine's CPUs, with fake GPUs (tests/fake_gpus/libcuda.so.1: PCI bus ids) placed crosswise so
# that rank 0 must land on the second node. A restricted parent (taskset) narrows every set; the
# impossible bindings exit 2 with one line before anything starts, or run unbound with
# --numa_binding_fallback.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FAKE_GPUS=$BIN/tests/fake_gpus
ncpu=$(nproc)

# job OUT ARGS...: ddprun, each worker printing "rank R cpus=<its affinity> bind=<DDPRUN_CPU_BINDING>
# node=<DDPRUN_NUMA_NODE> policy=<its memory policy>"; returns ddprun's exit code.
job() {
    local out=$1
    shift
    timeout -k 5 30 "$DDPRUN" --standalone "$@" --no_python sh -c '
        p=$(head -1 /proc/self/numa_maps | cut -d" " -f2)
        echo "rank $RANK cpus=$(sed -n "s/^Cpus_allowed_list:\t//p" /proc/self/status)" \
            "bind=$DDPRUN_CPU_BINDING node=$DDPRUN_NUMA_NODE policy=$p"' >"$out" 2>&1
}
line_of() { grep "^rank $2 " "$1"; }

if [ "$ncpu" -lt 2 ] || ! command -v taskset >/dev/null; then
    for t in "exclusive: each worker its own core" "node mode" "taskset narrows" \
        "fake topology: GPU placement crosswise" "errors exit 2" "fallback runs unbound"; do
        skip "--numa_binding: $t" "needs 2 CPUs and taskset"
    done
    finish
    exit 0
fi

# 1. This machine: exclusive gives each of 2 workers its own core (and its node's memory).
job "$TMP/excl.out" --nproc_per_node=2 --numa_binding=exclusive; rc=$?
c0=$(line_of "$TMP/excl.out" 0 | sed 's/.*cpus=\([^ ]*\).*/\1/')
c1=$(line_of "$TMP/excl.out" 1 | sed 's/.*cpus=\([^ ]*\).*/\1/')
[ $rc -eq 0 ] && [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$c1" ] &&
    line_of "$TMP/excl.out" 0 | grep -q "bind=$c0 node=0 policy=prefer:0" &&
    line_of "$TMP/excl.out" 1 | grep -q "bind=$c1 node=0 policy=prefer:0"
verdict "--numa_binding exclusive: 2 workers on disjoint CPUs ($c0 | $c1), memory preferred on node 0"
[ $rc -eq 0 ] || tail -3 "$TMP/excl.out" | sed 's/^/# /'

# 2. node: every worker on the whole node; PET_NUMA_BINDING is the same flag.
all=$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/self/status)
PET_NUMA_BINDING=node job "$TMP/node.out" --nproc_per_node=2; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "cpus=$all bind=$all node=0" "$TMP/node.out")" = 2 ]
verdict "PET_NUMA_BINDING=node: both workers on all of node 0 ($all)"

# 3. A restricted parent narrows the set: taskset -c 1, one worker, exclusive -> CPU 1 only.
taskset -c 1 "$DDPRUN" --standalone --nproc_per_node=1 --numa_binding=exclusive --no_python \
    sh -c 'sed -n "s/^Cpus_allowed_list:\t//p" /proc/self/status' >"$TMP/task.out" 2>&1
check "taskset -c 1: the worker's set is narrowed to CPU 1" grep -qx 1 "$TMP/task.out"

# 4. A tree of another shape on this machine's CPUs: NUMA node 0 = CPU 0, node 1 = CPU 1; fake GPU
#    0 on node 1 and GPU 1 on node 0, found by PCI bus id: rank 0 lands on CPU 1, rank 1 on 0.
R=$TMP/sysfs
for n in 0 1; do
    mkdir -p "$R/sys/devices/system/node/node$n" "$R/sys/devices/system/cpu/cpu$n/topology" \
        "$R/sys/devices/system/cpu/cpu$n/cache/index3"
    echo "$n" >"$R/sys/devices/system/node/node$n/cpulist"
    echo 0 >"$R/sys/devices/system/cpu/cpu$n/topology/physical_package_id"
    echo "$n" >"$R/sys/devices/system/cpu/cpu$n/topology/thread_siblings_list"
    echo 3 >"$R/sys/devices/system/cpu/cpu$n/cache/index3/level"
    echo "$n" >"$R/sys/devices/system/cpu/cpu$n/cache/index3/shared_cpu_list"
done
mkdir -p "$R/sys/bus/pci/devices/0000:18:00.0" "$R/sys/bus/pci/devices/0000:9a:00.0"
echo 1 >"$R/sys/bus/pci/devices/0000:18:00.0/numa_node"
echo 0 >"$R/sys/bus/pci/devices/0000:9a:00.0/numa_node"
export FAKE_CUDA_COUNT=2 FAKE_CUDA_PCI=00000000:18:00.0,00000000:9A:00.0
for mode in node core-complex; do
    DDPRUN_SYSFS_ROOT=$R LD_LIBRARY_PATH=$FAKE_GPUS job "$TMP/fake.$mode.out" --nproc_per_node=2 \
        --numa_binding=$mode; rc=$?
    [ $rc -eq 0 ] && line_of "$TMP/fake.$mode.out" 0 | grep -q "cpus=1 bind=1 node=1" &&
        line_of "$TMP/fake.$mode.out" 1 | grep -q "cpus=0 bind=0 node=0"
    verdict "fake topology, $mode: GPU 0 (PCI 18:00.0) on node 1 puts rank 0 on CPU 1, rank 1 on CPU 0"
    [ $rc -eq 0 ] || tail -3 "$TMP/fake.$mode.out" | sed 's/^/# /'
done
# --nproc_per_node=gpu counts the same fake driver, and -v says where each worker went.
DDPRUN_SYSFS_ROOT=$R LD_LIBRARY_PATH=$FAKE_GPUS job "$TMP/fakev.out" --nproc_per_node=gpu \
    --numa_binding=socket -v; rc=$?
check "fake topology, socket, -v: 2 workers on both nodes, placed by their GPU" \
    bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'cpus=0-1 bind=0-1 node=0,1' '$TMP/fakev.out') = 2 ] &&
        grep -q 'numa_binding socket: 2 worker(s) placed by their GPU' '$TMP/fakev.out'"
# --print_topology: no program; the table and the JSON say the same placement.
DDPRUN_SYSFS_ROOT=$R LD_LIBRARY_PATH=$FAKE_GPUS timeout 20 "$DDPRUN" --print_topology \
    --nproc_per_node=gpu >"$TMP/topo.out" 2>&1; rc=$?
check "--print_topology: rank 0's row names GPU 0 (its PCI id), NUMA node 1 and its CPUs" \
    bash -c "[ $rc -eq 0 ] && grep -Eq '^0 +0 00000000:18:00.0 +1 +0 +\| 1 +0-1 +1 +1$' '$TMP/topo.out'"
DDPRUN_SYSFS_ROOT=$R LD_LIBRARY_PATH=$FAKE_GPUS timeout 20 "$DDPRUN" --print_topology --json \
    --nproc_per_node=gpu >"$TMP/topo.json" 2>&1
check "--print_topology --json: one object, rank 1 on node 0 with CPU 0 in every mode" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = d["ranks"][1]
assert d["placed_by"] == "gpu" and r["gpu"]["pci"] == "00000000:9A:00.0" and r["numa_node"] == 0
assert r["cpus"] == {"node": "0", "socket": "0-1", "exclusive": "0", "core-complex": "0"}, r
assert d["refused"] == {}' "$TMP/topo.json"
unset FAKE_CUDA_COUNT FAKE_CUDA_PCI

# 5. Impossible: exit 2, one line naming the mode and why, no worker started.
job "$TMP/ccx.out" --nproc_per_node=2 --numa_binding=core-complex; rc=$?
check "core-complex with 2 workers and one L3 group: exit 2, one line" \
    bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$TMP/ccx.out') = 1 ] &&
        grep -q 'numa_binding core-complex: NUMA node 0 has 1 L3 group(s) ddprun may use for 2' '$TMP/ccx.out'"
taskset -c 1 "$DDPRUN" --standalone --nproc_per_node=2 --numa_binding=exclusive --no_python \
    sh -c 'echo started' >"$TMP/few.out" 2>&1; rc=$?
check "taskset -c 1, exclusive, 2 workers: exit 2, nothing started" \
    bash -c "[ $rc -eq 2 ] && ! grep -q started '$TMP/few.out' &&
        grep -q 'has 1 core(s) ddprun may use for 2 local rank(s)' '$TMP/few.out'"
DDPRUN_SYSFS_ROOT=$TMP/nothing job "$TMP/nosys.out" --numa_binding=node; rc=$?
check "no NUMA topology to read: exit 2 naming the directory" \
    bash -c "[ $rc -eq 2 ] && grep -q 'nothing/sys/devices/system/node' '$TMP/nosys.out'"

# 6. --numa_binding_fallback: one warning, the workers run unbound.
taskset -c 1 "$DDPRUN" --standalone --nproc_per_node=2 --numa_binding=exclusive \
    --numa_binding_fallback --no_python sh -c 'echo "bind=[${DDPRUN_CPU_BINDING-unset}]"' \
    >"$TMP/fb.out" 2>&1; rc=$?
check "--numa_binding_fallback: one warning, 2 workers run unbound, exit 0" \
    bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'bind=\[unset\]' '$TMP/fb.out') = 2 ] &&
        [ \$(grep -c 'numa_binding_fallback: running the workers unbound' '$TMP/fb.out') = 1 ]"
check "nothing left running" no_leftovers
finish
