#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 145
# suite-timeout: 300
# The benchmarks must not rot (make bench-smoke; make test runs it too): every bench/*.sh at its
# smallest size (SMOKE below: a few seconds each) must measure every figure, exit 0 and leave
# nothing running; one that cannot run here (no root, a tool missing) exits 77 and is a skip. Then
# each runs again with one program it needs replaced by one that fails: it must exit non-zero
# (not 77), or a broken benchmark would pass as measured. A bench/*.sh without a SMOKE entry is a
# failure: a new benchmark gets its smallest size here.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# SMOKE[name]: the environment that makes bench/name.sh run at its smallest size (see each
# script's header for what the variables mean).
declare -A SMOKE=(
    [allreduce]="BENCH_SECONDS=0.2"
    [console]="RUNS=1"
    [etcd_failover]="RUNS=1 TTLS=2 TORCH_BACKENDS= WORKER=fake FW_AFTER_MS=500 BOUND_S=15"
    [fanout]="RUNS=1 COUNTS=2"
    [hang]="RUNS=1 TIMEOUT_S=1 CPU_S=3"
    [heartbeat]="CALLS=100000 WRITES=10000 RUNS=1"
    [hostfile]="RUNS=1 COUNTS=1000"
    [launch]="RUNS=1 TORCH_RUNS=1"
    [rdzv]="RUNS=1 JOIN_COUNTS=100"
    [report]="AGENTS=50 EVENTS_PER_AGENT=10"
    [scale]="COUNTS=200 KEEPALIVE_S=1 KEEPALIVE_SMALL_S=1 KEEP_ALIVE_MS=300 IDLE_CONNS=1000 TORCH_COUNTS=8 LIMIT=20 ETCD_COUNTS=200 ETCD_KEEPALIVE_S=1"
    [store]="STORE_BENCH_QUICK=1 CLIENTS=1 SIZES=1024 IDLE_CONNS=1000"
    [store_ab]="REPS=1 SECS=1"
    [straggler]="CALLS=100000 WINDOWS=1 HEALTHY_MS=10 PHASE_ACTIONS=exclude RUNS=1 BEFORE_S=2 AFTER_S=2"
    [torch_worker_store]="RUNS=1 RUN_TIMEOUT_S=40"
    [train]="SAMPLES=2048"
)
# BREAK[name]: the program (under BUILD) that the failure run of bench/name.sh replaces.
declare -A BREAK=(
    [allreduce]=bench/bench_allreduce
    [console]=ddprun
    [etcd_failover]=ddprun
    [fanout]=ddprun
    [hang]=bench/bench_beat_worker
    [heartbeat]=bench/bench_heartbeat
    [hostfile]=ddprun
    [launch]=tests/fake_worker
    [rdzv]=bench/bench_rdzv_join
    [report]=ddprun
    [scale]=bench/bench_rdzv_scale
    [store]=bench/bench_store
    [store_ab]=bench/bench_store
    [straggler]=bench/bench_timing
    [torch_worker_store]=ddprun
    [train]=train
)

# BREAK_SMOKE[name]: more of the failure run's environment, leaving out the parts of bench/name.sh
# that come after one that already runs the broken program: the first failure decides its exit
# status, so they would add time and prove nothing more.
declare -A BREAK_SMOKE=(
    [scale]="TORCH_COUNTS= ETCD_COUNTS="
)

# bench NAME BUILD_DIR OUT [VAR=VALUE...]: bench/NAME.sh at its smallest size (and the
# assignments given) against BUILD_DIR, its output in OUT; returns its exit status.
bench() {
    local n=$1 b=$2 out=$3
    shift 3
    # shellcheck disable=SC2086 # SMOKE's words are separate assignments
    (cd "$SRC" && env ${SMOKE[$n]} "$@" BUILD="$b" timeout -k 5 120 bash "bench/$n.sh") >"$out" 2>&1
}

# broken_build NAME PROG: prints a new directory (for bench/NAME.sh) that mirrors $BIN through
# symbolic links but for PROG (a path under it), which is a program that fails at once.
broken_build() {
    local d=$TMP/broken/$1 sub f
    shift
    mkdir -p "$d"
    for f in "$BIN"/*; do ln -s "$f" "$d/"; done
    sub=$(dirname "$1")
    if [ "$sub" != . ]; then
        rm "$d/$sub"
        mkdir "$d/$sub"
        for f in "$BIN/$sub"/*; do ln -s "$f" "$d/$sub/"; done
    fi
    rm -f "$d/$1"
    printf '#!/bin/sh\necho "%s: broken on purpose" >&2\nexit 1\n' "$1" >"$d/$1"
    chmod +x "$d/$1"
    echo "$d"
}

names=()
for s in "$SRC"/bench/*.sh; do
    n=$(basename "$s" .sh)
    [ "$n" = run ] && continue
    names+=("$n")
    [ -n "${SMOKE[$n]:-}" ] && [ -n "${BREAK[$n]:-}" ]
    verdict "bench/$n.sh has a smoke size and a program to break in this suite"
done
stale=
for n in "${!SMOKE[@]}" "${!BREAK[@]}" "${!BREAK_SMOKE[@]}"; do
    [ -f "$SRC/bench/$n.sh" ] || stale="$stale $n"
done
[ -z "$stale" ]
verdict "every benchmark this suite names is a bench/*.sh${stale:+ (not:$stale)}"

declare -A SKIPPED=()
for n in "${names[@]}"; do
    [ -n "${SMOKE[$n]:-}" ] || continue
    name="bench/$n.sh at its smallest size measures every figure, exits 0, leaves nothing running"
    out=$TMP/$n.out
    t0=$(date +%s%N)
    bench "$n" "$BIN" "$out"
    rc=$?
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ $rc -eq 77 ]; then
        SKIPPED[$n]=1
        skip "$name" "$(grep -m1 -oE 'skipped: .*' "$out" | sed -e 's/^skipped: //' -e 's/ | .*//')"
        continue
    fi
    # A figure is a table row with a number in it; "not measured" lines name a missing one.
    [ $rc -eq 0 ] && grep -qE '^\|.*[0-9]' "$out" && ! grep -q 'not measured' "$out" &&
        no_leftovers 5
    verdict "$name (rc $rc, $took ms)" || show_tail "$out"
done

for n in "${names[@]}"; do
    [ -n "${BREAK[$n]:-}" ] || continue
    name="bench/$n.sh with ${BREAK[$n]} failing exits non-zero, leaves nothing running"
    if [ -n "${SKIPPED[$n]:-}" ]; then
        skip "$name" "bench/$n.sh cannot run here"
        continue
    fi
    out=$TMP/$n.broken.out
    t0=$(date +%s%N)
    # shellcheck disable=SC2086 # BREAK_SMOKE's words are separate assignments
    bench "$n" "$(broken_build "$n" "${BREAK[$n]}")" "$out" ${BREAK_SMOKE[$n]:-}
    rc=$?
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ $rc -ne 124 ] && no_leftovers 5
    verdict "$name (rc $rc, $took ms)" || show_tail "$out"
done
finish
