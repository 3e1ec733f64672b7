#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Straggler detection figures. Prints markdown tables.
#  0. What the collective timing adds to each collective (bench/bench_timing.c: CALLS calls, median
#     of 5).
#  1. Overhead of the collective timing, only with BASE set: train samples/s with 2 ranks on the CPU backend (the
#     bench/train.sh job: 512-1024-512-10 MLP, batch 64 per rank), BASE's train (built without the
#     timing, e.g. from the commit before it) against this build's, runs alternated, RUNS each;
#     median of the logged windows of each run, then the median of the runs.
#  2. Detection latency: three agents on 127.0.0.1-3 (--local_addr), one worker each, whose
#     "compute" is a sleep of HEALTHY_MS per step (--step-delay-ms, over a tiny model), one rank
#     sleeping 1.5x and 1.2x that; time from the job's first step to the first `straggler:` line,
#     and the steps the slow rank took meanwhile, for each --straggler_window of WINDOWS
#     (default "5 1": the default window, and 1 s).
#   BUILD=build BASE=/tmp/base/build RUNS=5 bench/straggler.sh
# Exits 1 when a figure cannot be measured.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd)
RUNS=${RUNS:-5}
HEALTHY_MS=${HEALTHY_MS:-20}
WINDOWS=${WINDOWS:-5 1}
CALLS=${CALLS:-10000000}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-straggler.XXXXXX")
STORE_PID=
trap '[ -n "$STORE_PID" ] && kill $STORE_PID 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }

median_of() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else exit 1}'; }
# window_median FILE: the median samples/s of FILE's logged windows but the first.
window_median() {
    python3 - "$1" <<'PY'
import json, sys
v = sorted(json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if "samples_per_s" in l)
if not v:
    sys.exit(1)
v = v[1:] or v
print("%.0f" % v[len(v) // 2])
PY
}

# ---- 0. the cost per collective
echo "| measure | cost |"
echo "| --- | --- |"
"$BIN/bench/bench_timing" "$TMP" "$CALLS" || { echo "# bench_timing failed"; exit 1; }
echo

# ---- 1. overhead
if [ -n "${BASE:-}" ]; then
    "$BIN/ddp-rendezvous" --host 127.0.0.1 --port 0 --no-auth >"$TMP/store.out" 2>/dev/null &
    STORE_PID=$!
    for _ in $(seq 200); do grep -q 'listening on' "$TMP/store.out" 2>/dev/null && break; sleep 0.05; done
    PORT=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$TMP/store.out" | head -1)
    [ -n "$PORT" ] || { echo "# ddp-rendezvous did not start"; exit 1; }
    ARGS=(--backend cpu --samples 16384 --epochs 1 --batch-size 64 --log-every 16 --quiet
        --eval-samples 0)
    # one TRAIN N: a 2-rank run of TRAIN (run id N), its median samples/s on stdout.
    one() {
        local pids=() r
        : >"$TMP/tm.0" && : >"$TMP/tm.1"
        for r in 0 1; do
            RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 \
                DDPRUN_STORE_ADDR=127.0.0.1 DDPRUN_STORE_PORT=$PORT DDPRUN_ROUND=0 \
                DDPRUN_RUN_ID=bench-strag-$2 DDPRUN_TIMING_FILE=$TMP/tm.$r \
                timeout 300 "$1" "${ARGS[@]}" --metrics "$TMP/m.$2.$r.jsonl" &
            pids+=($!)
        done
        for r in "${pids[@]}"; do wait "$r" || return 1; done
        window_median "$TMP/m.$2.0.jsonl"
    }
    : >"$TMP/a" && : >"$TMP/b"
    for i in $(seq "$RUNS"); do
        one "$BASE/train" "a$i" >>"$TMP/a" || { echo "# base run $i failed"; exit 1; }
        one "$BIN/train" "b$i" >>"$TMP/b" || { echo "# timed run $i failed"; exit 1; }
    done
    a=$(median_of <"$TMP/a") b=$(median_of <"$TMP/b")
    echo "| train, 2 ranks, CPU | samples/s | runs |"
    echo "| --- | --- | --- |"
    echo "| without collective timing | $a | $(tr '\n' ' ' <"$TMP/a") |"
    echo "| with collective timing | $b | $(tr '\n' ' ' <"$TMP/b") |"
    python3 -c "print('| change | %+.2f%% | |' % (100.0 * ($b - $a) / $a))"
    kill "$STORE_PID" 2>/dev/null
    STORE_PID=
    echo
fi

# ---- 2. detection latency
# latency SLOW_MS WINDOW_S THRESHOLD: "seconds steps" from the first step to the first line.
latency() {
    local slow=$1 win=$2 thr=$3 port h d pids=() t0 t1 steps id
    port=$((29800 + RANDOM % 100))
    id=lat$slow-$win-$RANDOM
    rm -f "$TMP"/l.*
    for h in 1 2 3; do
        d=$HEALTHY_MS
        [ $h = 3 ] && d=$slow
        timeout -k 2 120 "$BIN/ddprun" --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d \
            --rdzv_endpoint=127.0.0.1:$port --rdzv_id="$id" \
            --local_addr=127.0.0.$h --straggler_window "$win" --straggler_threshold "$thr" \
            "$BIN/train" --backend cpu --layers 16,16,2 --batch-size 8 --epochs 100000 \
            --eval-samples 0 --step-delay-ms "$d" --log-every 1 --metrics "$TMP/l.m.$h" \
            >"$TMP/l.$h" 2>&1 &
        pids+=($!)
    done
    # The first step: rank 0's first metrics line.
    for _ in $(seq 2000); do [ -s "$TMP/l.m.1" ] || [ -s "$TMP/l.m.2" ] || [ -s "$TMP/l.m.3" ] && break; sleep 0.01; done
    t0=$(now_ms)
    for _ in $(seq 9000); do grep -q "straggler: rank" "$TMP/l.1" && break; sleep 0.01; done
    t1=$(now_ms)
    steps=$(cat "$TMP"/l.m.* 2>/dev/null | wc -l)
    for h in "${pids[@]}"; do kill -TERM "$h" 2>/dev/null; done
    for h in "${pids[@]}"; do wait "$h" 2>/dev/null; done
    grep -q "straggler: rank" "$TMP/l.1" || return 1
    grep -h "straggler: rank" "$TMP/l.1" | head -1 >&2
    echo "$(awk "BEGIN {printf \"%.1f\", ($t1 - $t0) / 1000}") $steps"
}
echo "| slow rank | --straggler_threshold | --straggler_window | detected after (s) | steps |"
echo "| --- | --- | --- | --- | --- |"
for win in $WINDOWS; do
    for case in "$((HEALTHY_MS * 3 / 2)) 1.2 1.5x" "$((HEALTHY_MS * 6 / 5)) 1.1 1.2x"; do
        set -- $case
        r=$(latency "$1" "$win" "$2") || { echo "# $3 at window $win: not named"; exit 1; }
        set -- $case $r
        echo "| $3 ($1 ms against $HEALTHY_MS ms) | $2 | $win s | $4 | $5 |"
    done
done
