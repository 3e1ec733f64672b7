#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 22
# Hangs on one node, with real processes: a worker that stops beating (its heartbeat file, or its
# output with --heartbeat_on_output), a SIGSTOPped one, no false positive for a worker that beats,
# --max_no_progress_restarts, the GPU memory wait before a restart (fake NVML), stacks named by gdb
# (native) and py-spy (Python), the stacks kept in the private run directory without --log_dir,
# train with a stopped rank, bad flag values.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FAKENVML=$BIN/tests/unit/libfakenvml.so

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 60 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 60 "$DDPRUN" "$@" >"$out" 2>&1
}

# A worker that beats through its file (the step as content) a few times, then hangs in sleep;
# the second attempt beats and exits 0.
W=$TMP/beat_then_hang.sh
cat >"$W" <<'EOF'
#!/bin/sh
echo $$ >"$HANG_DIR/pid.$TORCHELASTIC_RESTART_COUNT"
i=0
while [ $i -lt 3 ]; do i=$((i + 1)); echo $i >"$DDPRUN_HEARTBEAT_FILE"; sleep 0.1; done
[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0
sleep 600
EOF
chmod +x "$W"

# 1. A worker that stops beating is hung: stacks first, then a restart that completes.
d=$TMP/touch; mkdir -p "$d"
HANG_DIR=$d run_ddprun "$d/out" --heartbeat_timeout 1 --max_restarts 1 --stacks_timeout 5 \
    --log_dir "$d/logs" "$W"; rc=$?
check "a worker that stops beating is restarted; the second attempt exits 0" [ $rc -eq 0 ]
check "the log names the hung rank and its silence" \
    grep -qE 'rank 0 \(local 0, pid [0-9]+\) hung: no heartbeat for [0-9.]+ s \(last step 3\); stacks in' "$d/out"
# Its beats started the per-beat timeout: it is hung one timeout after its last beat (1.x s of
# silence), not at the initial timeout (10 s by default) that holds until a first beat.
check "after its first beats the timeout counts from the last beat, not the initial timeout" \
    grep -qE 'hung: no heartbeat for 1\.[0-9] s; taking the stacks' "$d/out"
check "stacks.txt of the hung worker exists" [ -s "$d/logs/attempt_0/0/stacks.txt" ]
check "the stacks show what the worker was doing (waiting on its sleep)" \
    grep -qE 'nanosleep|hrtimer|wait|sleep' "$d/logs/attempt_0/0/stacks.txt"
check "the heartbeat file is in the worker's log directory" [ -f "$d/logs/attempt_1/0/heartbeat" ]
[ "$(stat -c %a "$d/logs/attempt_1/0/heartbeat")" = 600 ]
verdict "the heartbeat file is private (0600)"

# 1b. Without --log_dir the stacks are kept in the private run directory (on TMPDIR here): it
# stays after the exit, unmarked (mode 700), so that no later agent sweeps it away as a dead
# agent's (agent/scratch.c).
d=$TMP/keep; mkdir -p "$d/tmp"
HANG_DIR=$d TMPDIR=$d/tmp run_ddprun "$d/out" --heartbeat_timeout 1 --max_restarts 1 \
    --stacks_timeout 5 "$W"; rc=$?
kd=$(ls -d "$d"/tmp/ddprun-* 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$kd" ] && grep -q "keeping $kd: it holds the stacks of hung workers" "$d/out" &&
    [ -s "$kd/stacks.0.0.txt" ] && [ "$(stat -c %a "$kd")" = 700 ]
verdict "stacks without --log_dir: the run directory is kept, unmarked (mode 700)" || show_tail "$d/out"

# 2. --heartbeat_on_output: lines are beats; a worker that goes silent is hung. Its stdout goes
# to a file only (--redirects 1), so the agent must route it through itself to see the lines.
W2=$TMP/print_then_hang.sh
cat >"$W2" <<'EOF'
#!/bin/sh
for i in 1 2 3 4 5; do echo "step $i"; sleep 0.2; done
[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0
sleep 600
EOF
chmod +x "$W2"
d=$TMP/output; mkdir -p "$d"
run_ddprun "$d/out" --heartbeat_timeout 0.5 --heartbeat_on_output --redirects 1 --max_restarts 1 \
    --stacks_timeout 5 --log_dir "$d/logs" "$W2"; rc=$?
check "--heartbeat_on_output: a silent worker is restarted; the second attempt exits 0" [ $rc -eq 0 ]
check "--heartbeat_on_output: the log says no heartbeat" grep -q 'hung: no heartbeat' "$d/out"
check "--heartbeat_on_output: lines printed every 0.2 s are no hang" \
    [ "$(grep -c 'hung: no heartbeat for .*taking the stacks' "$d/out")" -eq 1 ]
check "--heartbeat_on_output with --redirects: the lines still reach the log file" \
    grep -qx 'step 5' "$d/logs/attempt_0/0/stdout.log"

# 3. A SIGSTOPped worker stops beating: it is hung; the summary names it (no restarts left).
W3=$TMP/beat_forever.sh
cat >"$W3" <<'EOF'
#!/bin/sh
echo $$ >"$HANG_DIR/pid"
while :; do touch "$DDPRUN_HEARTBEAT_FILE"; echo beat; sleep 0.1; done
EOF
chmod +x "$W3"
d=$TMP/stop; mkdir -p "$d"
HANG_DIR=$d timeout -k 5 60 "$DDPRUN" --heartbeat_timeout 1 --heartbeat_on_output \
    --stacks_timeout 5 "$W3" >"$d/out" 2>&1 &
ddp=$!
for i in $(seq 100); do [ -s "$d/pid" ] && break; sleep 0.05; done
sleep 0.5
wpid=$(cat "$d/pid" 2>/dev/null)
[ -n "$wpid" ] && kill -STOP "$wpid"
wait $ddp; rc=$?
check "a SIGSTOPped worker is hung: the job fails (exit 1)" [ $rc -eq 1 ]
check "the summary's root cause is the hang" grep -qE 'traceback : hung: no heartbeat for' "$d/out"
check "the summary names the rank and the stacks file" \
    sh -c "grep -q 'rank      : 0 (local_rank: 0)' '$d/out' && grep -qE 'stacks    : /.*stacks\.0\.0\.txt' '$d/out'"
sf=$(sed -n 's/^  stacks    : //p' "$d/out" | head -1)
check "without --log_dir the stacks are kept where the summary says" [ -s "$sf" ]
check "the stopped worker's stacks say it is stopped (state T)" grep -q 'state T' "$sf"
[ -n "$sf" ] && rm -rf "$(dirname "$sf")"

# 4. No false positive: beats every 100 ms for 2 s with a 1 s timeout.
W4=$TMP/beat_2s.sh
cat >"$W4" <<'EOF'
#!/bin/sh
i=0
while [ $i -lt 20 ]; do i=$((i + 1)); echo $i >"$DDPRUN_HEARTBEAT_FILE"; sleep 0.1; done
EOF
chmod +x "$W4"
d=$TMP/nofp; mkdir -p "$d"
run_ddprun "$d/out" --nproc_per_node 2 --heartbeat_timeout 1 --initial_heartbeat_timeout 1 "$W4"; rc=$?
check "a worker beating every 100 ms (timeout 1 s) exits 0" [ $rc -eq 0 ]
check "... and no hang is reported" sh -c "! grep -q 'hung' '$d/out'"

# 5. --max_no_progress_restarts: attempts that hang at the same step stop after N.
W5=$TMP/stuck_at_5.sh
cat >"$W5" <<'EOF'
#!/bin/sh
touch "$HANG_DIR/attempt.$TORCHELASTIC_RESTART_COUNT"
echo 5 >"$DDPRUN_HEARTBEAT_FILE"
sleep 600
EOF
chmod +x "$W5"
d=$TMP/noprog; mkdir -p "$d"
HANG_DIR=$d run_ddprun "$d/out" --heartbeat_timeout 0.5 --max_restarts 5 \
    --max_no_progress_restarts 2 --stacks_timeout 3 --log_dir "$d/logs" "$W5"; rc=$?
check "--max_no_progress_restarts 2: the job fails" [ $rc -eq 1 ]
check "--max_no_progress_restarts 2: 3 attempts (progress once, then 2 without)" \
    [ "$(ls "$d" | grep -c '^attempt\.')" -eq 3 ]
check "the summary says why restarts stopped" grep -q 'made no progress past step 5' "$d/out"

# 6. The GPU memory wait before a restart, against the fake NVML.
W6=$TMP/fail_once.sh
cat >"$W6" <<'EOF'
#!/bin/sh
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
    echo $$ >"$HANG_DIR/pids"; date +%s.%N >"$HANG_DIR/end0"; exit 3
fi
date +%s.%N >"$HANG_DIR/start1"
EOF
chmod +x "$W6"
if [ -f "$FAKENVML" ]; then
    d=$TMP/gpu; mkdir -p "$d"
    HANG_DIR=$d DDPRUN_NVML_LIB=$FAKENVML FAKENVML_BUSY_UNTIL_MS=1000 FAKENVML_PIDS_FILE=$d/pids \
        run_ddprun "$d/out" --max_restarts 1 "$W6"; rc=$?
    check "GPU memory released after 1 s: the restart succeeds" [ $rc -eq 0 ]
    gap=$(awk -v a="$(cat "$d/end0" 2>/dev/null)" -v b="$(cat "$d/start1" 2>/dev/null)" \
        'BEGIN { print (b - a >= 0.9) ? "yes" : "no" }')
    check "GPU memory released after 1 s: the restart waited for it (>= 0.9 s)" [ "$gap" = yes ]
    d=$TMP/gpu2; mkdir -p "$d"
    HANG_DIR=$d DDPRUN_NVML_LIB=$FAKENVML FAKENVML_BUSY_UNTIL_MS=-1 FAKENVML_PIDS_FILE=$d/pids \
        run_ddprun "$d/out" --max_restarts 1 --gpu_memory_reclaim_timeout 1 "$W6"; rc=$?
    check "GPU memory never released: the restart goes on after the timeout" [ $rc -eq 0 ]
    check "GPU memory never released: one warning names the device" \
        [ "$(grep -c 'GPU 0 still holds' "$d/out")" -eq 1 ]
    # The wait is said when it starts, at the default level, with its bound and what holds the
    # memory; a large bound reads as the flag takes it.
    grep -qE "restart 1 of 1 waits up to 50 s \(--gpu_memory_reclaim_timeout\) for the stopped workers' GPU memory: GPU 0 holds 1.0 GiB of pid [0-9]+ \(a previous worker\)" "$TMP/gpu/out" &&
        [ "$(grep -n 'waits up to' "$TMP/gpu/out" | cut -d: -f1)" -lt \
          "$(grep -n 'restarting, attempt 1' "$TMP/gpu/out" | cut -d: -f1)" ]
    verdict "the GPU memory wait is said when it starts, before the restart"
    d=$TMP/gpu3; mkdir -p "$d"
    HANG_DIR=$d DDPRUN_NVML_LIB=$FAKENVML FAKENVML_BUSY_UNTIL_MS=300 FAKENVML_PIDS_FILE=$d/pids \
        run_ddprun "$d/out" -v --max_restarts 1 --gpu_memory_reclaim_timeout 2000000 "$W6"; rc=$?
    [ $rc -eq 0 ] && grep -q "waits up to 2000000 s" "$d/out" && ! grep -q "e+06" "$d/out"
    verdict "--gpu_memory_reclaim_timeout 2000000: the wait says 2000000 s (rc $rc)"
    # SIGTERM during the wait: one line says the restart will not happen, exit 143.
    d=$TMP/gpu4; mkdir -p "$d"
    HANG_DIR=$d DDPRUN_NVML_LIB=$FAKENVML FAKENVML_BUSY_UNTIL_MS=-1 FAKENVML_PIDS_FILE=$d/pids \
        timeout -k 5 60 "$DDPRUN" --max_restarts 1 --gpu_memory_reclaim_timeout 30 "$W6" \
        >"$d/out" 2>&1 &
    pid=$!
    for _ in $(seq 200); do grep -q 'waits up to' "$d/out" && break; sleep 0.05; done
    kill -TERM "$(child_pid $pid)"
    wait $pid; rc=$?
    [ $rc -eq 143 ] &&
        grep -q "received SIGTERM while waiting for the stopped workers' GPU memory (.* s of up to 30 s): the job stops, no new attempt" "$d/out" &&
        [ ! -e "$d/start1" ]
    verdict "SIGTERM during the GPU memory wait: one line, no restart, exit 143 (rc $rc)"
else
    skip "GPU memory released after 1 s: the restart waits for it" "no fake NVML built"
    skip "the GPU memory wait is said when it starts, before the restart" "no fake NVML built"
    skip "--gpu_memory_reclaim_timeout 2000000: the wait says 2000000 s" "no fake NVML built"
    skip "SIGTERM during the GPU memory wait: one line, no restart, exit 143" "no fake NVML built"
fi

# 7. The stacks name the function a hung worker is in, with the best tool for it: gdb for a native
#    worker, py-spy for a Python one (from PyPI, next to TORCH_PYTHON or on PATH).
d=$TMP/native; mkdir -p "$d"
if command -v gdb >/dev/null 2>&1; then
    run_ddprun "$d/out" --heartbeat_timeout 1 --initial_heartbeat_timeout 1 --stacks_timeout 15 \
        --log_dir "$d/logs" "$BIN/tests/spin_worker"; rc=$?
    [ $rc -eq 1 ] && grep -q 'spin_here_forever' "$d/logs/attempt_0/0/stacks.txt"
    verdict "a native worker that never beats: gdb names the function it spins in (rc $rc)" ||
        show_tail "$d/out" "$d/logs/attempt_0/0/stacks.txt"
else
    skip "a native worker that never beats: gdb names the function it spins in" "gdb is not installed"
fi
PYSPY_DIR=
if [ -n "${TORCH_PYTHON:-}" ] && [ -x "$(dirname "$TORCH_PYTHON")/py-spy" ]; then
    PYSPY_DIR=$(dirname "$TORCH_PYTHON")
elif command -v py-spy >/dev/null 2>&1; then
    PYSPY_DIR=$(dirname "$(command -v py-spy)")
fi
if [ -n "$PYSPY_DIR" ]; then
    d=$TMP/python; mkdir -p "$d"
    printf '%s\n' 'import time' '' '' 'def wait_for_the_next_batch():' '    while True:' \
        '        time.sleep(0.05)' '' '' 'wait_for_the_next_batch()' >"$d/wait.py"
    PATH=$PYSPY_DIR:$PATH run_ddprun "$d/out" --heartbeat_timeout 1 --initial_heartbeat_timeout 1 \
        --stacks_timeout 15 --log_dir "$d/logs" "$d/wait.py"; rc=$?
    sf=$d/logs/attempt_0/0/stacks.txt
    [ $rc -eq 1 ] && grep -q -- '--- py-spy dump' "$sf" && grep -q 'wait_for_the_next_batch' "$sf"
    verdict "a Python worker that never beats: py-spy names its Python function (rc $rc)" ||
        show_tail "$d/out" "$sf"
else
    skip "a Python worker that never beats: py-spy names its Python function" \
        "py-spy is not installed (scripts/ensure-torch2.sh puts it next to TORCH_PYTHON)"
fi

# 8. train, 2 ranks: rank 1 is stopped mid-training, rank 0 then waits for it in the allreduce.
#    Both go silent; the job fails naming rank 1 (stopped: the likelier culprit), the time it was
#    found and its last step; the stacks show rank 0 in the collective (gdb) and rank 1 stopped.
d=$TMP/train; mkdir -p "$d"
timeout -k 5 60 "$DDPRUN" --nproc_per_node 2 --heartbeat_timeout 1 --stacks_timeout 15 \
    --log_dir "$d/logs" "$BIN/train" --layers 32,64,4 --samples 4096 --batch-size 32 --backend cpu \
    --epochs 100 --step-delay-ms 20 --quiet >"$d/out" 2>&1 &
ddp=$!
for i in $(seq 200); do
    s=$(cat "$d/logs/attempt_0/1/heartbeat" 2>/dev/null)
    [ -n "$s" ] && [ "$((10#$s))" -ge 5 ] && break
    sleep 0.05
done
agent=$(child_pid $ddp)
w1=
for c in $(cat /proc/"$agent"/task/*/children 2>/dev/null); do
    grep -qzx 'LOCAL_RANK=1' "/proc/$c/environ" 2>/dev/null && w1=$c
done
[ -n "$w1" ] && kill -STOP "$w1"
wait $ddp; rc=$?
check "train: a stopped rank makes the job fail as hung (exit 1, rank 1 was pid ${w1:-none})" \
    [ $rc -eq 1 -a -n "$w1" ]
step=$(sed -n 's/.*traceback : hung: no heartbeat for [0-9.]* s (last step \([0-9]*\)).*/\1/p' "$d/out")
grep -A4 'Root Cause' "$d/out" | grep -q 'rank      : 1 (local_rank: 1)'
verdict "train: the root cause is the stopped rank 1, not rank 0 that waits for it" ||
    show_tail "$d/out"
check "train: the summary gives the last step rank 1 reached (${step:-none} >= 5)" \
    [ "${step:-0}" -ge 5 ]
check "train: the failure's time is when the hang was found" \
    grep -q "time      : $(date +%Y-%m-%d)_" "$d/out"
check "train: rank 1's stacks say it is stopped (state T)" \
    grep -q 'state T' "$d/logs/attempt_0/1/stacks.txt"
if command -v gdb >/dev/null 2>&1; then
    check "train: gdb shows rank 0 waiting in ddpw_allreduce" \
        grep -q 'ddpw_allreduce' "$d/logs/attempt_0/0/stacks.txt"
else
    skip "train: gdb shows rank 0 waiting in ddpw_allreduce" "gdb is not installed"
fi

# 9. Bad values: exit 2, one line naming the flag.

for fv in "--heartbeat_timeout -1" "--initial_heartbeat_timeout abc" "--stacks_timeout 1e17" \
          "--max_no_progress_restarts -1" "--gpu_memory_reclaim_timeout x"; do
    set -- $fv
    timeout 10 "$DDPRUN" "$1" "$2" /bin/true >"$TMP/bad.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/bad.out")" -eq 1 ] && grep -q -- "$1" "$TMP/bad.out"
    verdict "$1 $2: exit 2 with one line naming the flag"
done

# 10. A timeout that rounds to 0 ms, and the flags that act only with --heartbeat_timeout, are
# refused (they were accepted and hang detection stayed off without a word).
for args in "--heartbeat_timeout 0.0001" "--heartbeat_on_output" "--initial_heartbeat_timeout 5" \
            "--heartbeat_timeout 0 --max_no_progress_restarts 3"; do
    set -- $args
    timeout 10 "$DDPRUN" "$@" /bin/true >"$TMP/bad.out" 2>&1; rc=$?
    flag=$1; [ $# -gt 2 ] && flag=$3
    [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/bad.out")" -eq 1 ] && grep -q -- "^ddprun: $flag" "$TMP/bad.out"
    verdict "$args: exit 2 with one line naming $flag"
done

check "no process left behind" no_leftovers
finish
