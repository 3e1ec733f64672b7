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
#  3. Samples/s of a job with a straggler, for each --straggler_action of PHASE_ACTIONS (default
#     "warn exclude"; empty: skipped): the agents and train of 2 (--straggler_window PHASE_WINDOW,
#     default 1 s), one worker stopped STOP_MS of every PERIOD_MS (default 100 of 200: half speed)
#     by SIGSTOP/SIGCONT from BEFORE_S on; samples/s before, during (until the line, or until the
#     exclusion with a spare) and for AFTER_S after (BEFORE_S and AFTER_S: 10 s by default); the
#     windows logged every LOG_EVERY steps (10). RUNS runs each, medians.
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
PHASE_ACTIONS=${PHASE_ACTIONS-warn exclude}
PHASE_WINDOW=${PHASE_WINDOW:-1}
STOP_MS=${STOP_MS:-100}
PERIOD_MS=${PERIOD_MS:-200}
BEFORE_S=${BEFORE_S:-10}
AFTER_S=${AFTER_S:-10}
LOG_EVERY=${LOG_EVERY:-10}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-straggler.XXXXXX")
STORE_PID=
# The agents of 3 and their worker's duty cycle: ended by the trap when a figure fails.
PH_PIDS=()
trap '[ -n "$STORE_PID" ] && kill $STORE_PID 2>/dev/null
for p in "${PH_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
wait 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_line FILE REGEX SECS: waits for a line of FILE matching REGEX; says so on stderr when none.
wait_line() {
    local end=$(($(now_ms) + $3 * 1000))
    while [ "$(now_ms)" -lt $end ]; do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.02
    done
    echo "# no /$2/ in $1 within $3 s" >&2
    tail -5 "$1" >&2
    return 1
}
# free_port: a TCP port free on 127.0.0.1, below the ephemeral range (tests/integration/lib.sh).
free_port() {
    python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(20000, max(20001, low))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}

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

# ---- 3. samples/s before, during and after a straggler
[ -n "$PHASE_ACTIONS" ] || exit 0
# phases ACTION: one job of agents on 127.0.0.1-3 (--straggler_action ACTION; with exclude,
# --nnodes=2:3 and a spare on 127.0.0.4 that starts once round 0 runs), train as in 2 (HEALTHY_MS
# per step) logging every LOG_EVERY steps with the wall time. After BEFORE_S, 127.0.0.3's worker
# is stopped STOP_MS of every PERIOD_MS (SIGSTOP and SIGCONT by its PID); AFTER_S after the
# straggler line (warn) or the exclusion (exclude) the agents are stopped. Prints the median
# samples/s of the windows logged before the slowdown, during it up to the line (or the exclusion)
# and after it (the first window of each phase left out: it straddles the change), the seconds
# from the slowdown to the line and, with exclude, from the last window of the first group to the
# first of the second (the restart).
phases() {
    local action=$1 port id h ddp w duty t_slow t_line nn=3 spare=""
    port=$(free_port) || return 1
    id=phase-$action-$RANDOM
    rm -f "$TMP"/p.*
    [ "$action" = exclude ] && nn=2:3 && spare=4
    start_agent() {
        timeout -k 2 300 "$BIN/ddprun" -v --nnodes="$nn" --nproc_per_node=1 --rdzv_backend=c10d \
            --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="$id" --rdzv_conf=last_call_timeout=0.3 \
            --local_addr="127.0.0.$1" --straggler_window "$PHASE_WINDOW" \
            --straggler_action "$action" \
            "$BIN/train" --backend cpu --layers 16,16,2 --batch-size 8 --epochs 100000 \
            --eval-samples 0 --step-delay-ms "$HEALTHY_MS" --log-every "$LOG_EVERY" \
            --metrics "$TMP/p.m.$1" >"$TMP/p.$1" 2>&1 &
        PH_PIDS+=($!)
    }
    PH_PIDS=()
    for h in 1 2 3; do start_agent $h; done
    # The worker of 127.0.0.3: the child of its ddprun (the child of timeout) named train.
    for _ in $(seq 1500); do
        ddp=$(cat /proc/"${PH_PIDS[2]}"/task/*/children 2>/dev/null | awk '{print $1}')
        for w in $(cat /proc/"$ddp"/task/*/children 2>/dev/null); do
            [ "$(cat /proc/"$w"/comm 2>/dev/null)" = train ] && break 2
        done
        w=""
        sleep 0.02
    done
    [ -n "$w" ] || { echo "# $action: no worker on 127.0.0.3" >&2; return 1; }
    [ -n "$spare" ] && { wait_line "$TMP/p.1" "round 0: node" 30 || return 1; start_agent 4; }
    sleep "$BEFORE_S"
    python3 - "$w" "$STOP_MS" "$PERIOD_MS" <<'PY' &
import os, signal, sys, time
pid, stop, period = int(sys.argv[1]), int(sys.argv[2]) / 1e3, int(sys.argv[3]) / 1e3
def done(*_):
    try:
        os.kill(pid, signal.SIGCONT)
    finally:
        os._exit(0)
signal.signal(signal.SIGTERM, done)
try:
    while True:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(stop)
        os.kill(pid, signal.SIGCONT)
        time.sleep(period - stop)
except ProcessLookupError:
    pass
PY
    duty=$!
    PH_PIDS+=($duty)
    t_slow=$(now_ms)
    if [ "$action" = exclude ]; then
        wait_line "$TMP/p.1" "excluded as a straggler" 120 || return 1
    else
        wait_line "$TMP/p.1" "straggler: rank [0-9]+ on node [0-9]+ \(127\.0\.0\.3\)" 120 || return 1
    fi
    t_line=$(now_ms)
    sleep "$AFTER_S"
    # The duty cycle first: it leaves the worker running (SIGCONT) as it ends.
    kill -TERM "$duty" 2>/dev/null
    wait "$duty" 2>/dev/null
    for h in "${PH_PIDS[@]}"; do kill -TERM "$h" 2>/dev/null; done
    for h in "${PH_PIDS[@]}"; do wait "$h" 2>/dev/null; done
    PH_PIDS=()
    grep -h "straggler: rank" "$TMP/p.1" | head -1 >&2
    python3 - "$t_slow" "$t_line" "$action" "$TMP"/p.m.* <<'PY'
import json, sys
t_slow, t_line = int(sys.argv[1]) / 1e3, int(sys.argv[2]) / 1e3
rows = sorted((r["time"], r["samples_per_s"]) for f in sys.argv[4:] for r in map(json.loads, open(f))
              if "time" in r and "samples_per_s" in r)
phase = {"before": [], "during": [], "after": []}
for t, v in rows:
    phase["before" if t < t_slow else "during" if t < t_line else "after"].append((t, v))
def med(w):
    v = sorted(x for _, x in w[1:])
    if not v:
        sys.exit("# %s: a phase logged fewer than 2 windows (%s)" % (sys.argv[3], " ".join(
            "%s %d" % (k, len(x)) for k, x in phase.items())))
    return "%.0f" % v[len(v) // 2]
gap = "-"
if sys.argv[3] == "exclude" and phase["during"] and phase["after"]:
    gap = "%.1f" % (phase["after"][0][0] - phase["during"][-1][0])
print(med(phase["before"]), med(phase["during"]), med(phase["after"]),
      "%.1f" % (t_line - t_slow), gap)
PY
}
echo "| --straggler_action | before (samples/s) | during | after | slowdown to line (s) | restart gap (s) | runs |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for action in $PHASE_ACTIONS; do
    : >"$TMP/ph"
    for _ in $(seq "$RUNS"); do
        phases "$action" >>"$TMP/ph" || { echo "# $action: not measured"; exit 1; }
    done
    python3 - "$action" "$TMP/ph" <<'PY'
import sys
runs = [l.split() for l in open(sys.argv[2]) if l.strip()]
def med(i):
    v = sorted(float(r[i]) for r in runs if r[i] != "-")
    return ("%.0f" if i < 3 else "%.1f") % v[(len(v) - 1) // 2] if v else "-"
print("| %s | %s | %s | %s | %s | %s | %s |" % (sys.argv[1], med(0), med(1), med(2), med(3),
      med(4), "; ".join("/".join(r[:3]) for r in runs)))
PY
done
