#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 12
# The node's health check before each start and JOIN, with real processes: a failing check holds
# the start, says its exit status and last output lines, and exits 4 at join_timeout; a check
# that passes on its third try lets the job run; a hanging check is killed with its process group
# at --health_check_timeout; what the check finds in its environment; a check before every
# restart; SIGTERM during a check or its back-off; the built-in GPU check (fake NVML); and two
# nodes, one of them unfit, where the other forms the job alone.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
FAKENVML=$BIN/tests/unit/libfakenvml.so
fake_worker_env_clear

# run_ddprun OUTFILE ARGS...: one node, bounded by 60 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 60 "$DDPRUN" "$@" >"$out" 2>&1
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# gone PIDFILE...: none of the processes whose pids the files hold is alive.
gone() {
    local f p
    for f in "$@"; do
        p=$(cat "$f" 2>/dev/null) || return 1
        [ -n "$p" ] || return 1
        if tagged_alive "$p"; then
            echo "# pid $p ($f) is still alive"
            return 1
        fi
    done
}

# 1. A check that fails: no worker starts; each failure is one line with the exit status and the
# last output lines (escaped); at join_timeout the node gives up with exit 4, and the events say
# so.
d=$TMP/fail; mkdir -p "$d"
t0=$(now_ms)
run_ddprun "$d/out" --rdzv_conf join_timeout=2 --event_log_handler "json:$d/events" \
    --health_check $'echo "scratch is full"; printf \'bad\\033[2Jbyte\\n\'; exit 3' \
    /bin/sh -c "touch $d/ran"; rc=$?
t1=$(now_ms)
[ $rc -eq 4 ] && [ ! -e "$d/ran" ]
verdict "a failing check: exit 4 (rc $rc), no worker started" || show_tail "$d/out"
[ $((t1 - t0)) -ge 1900 ] && [ $((t1 - t0)) -lt 8000 ]
verdict "it gives up at join_timeout=2 s (after $((t1 - t0)) ms)"
grep -qF 'this node is unfit: --health_check: exit status 3; output: scratch is full | bad\e[2Jbyte' "$d/out" &&
    ! LC_ALL=C grep -q $'\x1b' "$d/out"
verdict "each failure says the exit status and the last lines, escaped (no raw control byte)" ||
    show_tail "$d/out"
n=$(grep -c 'this node is unfit: --health_check: exit status 3' "$d/out")
check "tries at 0, 1 and 2 s (1 s doubling, cut at join_timeout): $n lines" [ "$n" -eq 3 ]
# The seconds are the agent's own count from its first try, "2" when it is whole (the bound on
# them is checked above).
grep -qE 'this node is unfit: its health check failed 3 times in [0-9]+(\.[0-9]+)? s \(join_timeout\); the last: --health_check: exit status 3' "$d/out"
verdict "the last line says why it gives up" || show_tail "$d/out"
[ "$(grep -c '"event":"health_check_failed"' "$d/events")" -eq 3 ] &&
    grep '"health_check_failed"' "$d/events" | head -1 |
    grep -qF '"reason":"--health_check: exit status 3; output: scratch is full | bad\\e[2Jbyte","failures":1,"retry_ms":1000' &&
    grep '"health_check_failed"' "$d/events" | tail -1 | grep -q '"failures":3,"retry_ms":null' &&
    grep -q '"event":"shutdown".*"result":"unfit"' "$d/events"
verdict "events: health_check_failed with the reason, the count and the next try; shutdown unfit" ||
    sed 's/^/# /' "$d/events"

# 2. A check that fails twice, then passes: the job starts and ends 0 (after 1 s + 2 s of
# back-off).
d=$TMP/third; mkdir -p "$d"
run_ddprun "$d/out" --rdzv_conf join_timeout=20 --nproc_per_node 2 \
    --health_check "echo x >>$d/count; [ \$(wc -l <$d/count) -ge 3 ]" \
    /bin/sh -c "touch $d/ran.\$RANK"; rc=$?
[ $rc -eq 0 ] && [ -e "$d/ran.0" ] && [ -e "$d/ran.1" ] && [ "$(wc -l <"$d/count")" -eq 3 ]
verdict "a check that passes on its third try: the job runs and exits 0 (rc $rc)" || show_tail "$d/out"
check "it says the node passed after 2 failed checks" \
    grep -q 'this node passed its health check after 2 failed ones' "$d/out"

# 3. A check that hangs is killed at --health_check_timeout, with what it started (its process
# group): by pid, nothing is left.
d=$TMP/hang; mkdir -p "$d"
t0=$(now_ms)
run_ddprun "$d/out" --rdzv_conf join_timeout=1 --health_check_timeout 0.5 \
    --health_check "echo \$\$ >$d/sh.pid; sleep 100 & echo \$! >$d/child.pid; wait" \
    /bin/sh -c "touch $d/ran"; rc=$?
t1=$(now_ms)
[ $rc -eq 4 ] && [ ! -e "$d/ran" ] && [ $((t1 - t0)) -lt 6000 ]
verdict "a hanging check: exit 4 within join_timeout and a timeout (rc $rc, $((t1 - t0)) ms)"
check "the log says it timed out after 0.5 s" \
    grep -q 'this node is unfit: --health_check: timed out after 0.5 s (killed)' "$d/out"
check "the check's shell and its child are gone" gone "$d/sh.pid" "$d/child.pid"

# 4. What the check finds in its environment: the node's workers, the run id, the start it
# checks for, the visible devices.
d=$TMP/env; mkdir -p "$d"
CUDA_VISIBLE_DEVICES=2,3,5 run_ddprun "$d/out" --nproc_per_node 3 --rdzv_id hcenv \
    --no_gpu_health_check --health_check "env >$d/env" /bin/true; rc=$?
[ $rc -eq 0 ] && grep -qx 'DDPRUN_LOCAL_WORLD_SIZE=3' "$d/env" &&
    grep -qx 'DDPRUN_RUN_ID=hcenv' "$d/env" && grep -qx 'TORCHELASTIC_RESTART_COUNT=0' "$d/env" &&
    grep -qx 'CUDA_VISIBLE_DEVICES=2,3,5' "$d/env"
verdict "the check sees DDPRUN_LOCAL_WORLD_SIZE, DDPRUN_RUN_ID, the restart count, the devices" ||
    sed -n '/DDPRUN\|TORCH\|CUDA/s/^/# /p' "$d/env"

# 5. A check before every restart: three starts, three checks, each for its restart count.
d=$TMP/restarts; mkdir -p "$d"
run_ddprun "$d/out" --max_restarts 2 \
    --health_check "echo \$TORCHELASTIC_RESTART_COUNT >>$d/checks" \
    /bin/sh -c "echo \$TORCHELASTIC_RESTART_COUNT >>$d/starts; exit 5"; rc=$?
[ $rc -eq 1 ] && [ "$(tr '\n' ' ' <"$d/checks")" = "0 1 2 " ] &&
    [ "$(tr '\n' ' ' <"$d/starts")" = "0 1 2 " ]
verdict "--max_restarts 2 with a failing worker: a check before each of the 3 starts (rc $rc)" ||
    show_tail "$d/out"

# 6. SIGTERM during a check: its process group goes, ddprun exits 143 with one line; and during
# the back-off after a failure.
d=$TMP/term; mkdir -p "$d"
timeout -k 5 60 "$DDPRUN" --health_check \
    "echo \$\$ >$d/sh.pid; sleep 100 & echo \$! >$d/child.pid; wait" \
    /bin/sh -c "touch $d/ran" >"$d/out" 2>&1 &
pid=$!
wait_for "$d/child.pid" '^[0-9]+$' 10
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
[ $rc -eq 143 ] && [ ! -e "$d/ran" ] &&
    grep -q "received SIGTERM during the node's health check: the job stops" "$d/out"
verdict "SIGTERM during the check: exit 143, one line, no worker (rc $rc)" || show_tail "$d/out"
check "SIGTERM during the check: the check's shell and its child are gone" \
    gone "$d/sh.pid" "$d/child.pid"
d=$TMP/termwait; mkdir -p "$d"
timeout -k 5 60 "$DDPRUN" --health_check "touch $d/checked; exit 1" /bin/true >"$d/out" 2>&1 &
pid=$!
wait_for "$d/out" 'this node is unfit' 10
t0=$(now_ms)
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
t1=$(now_ms)
[ $rc -eq 143 ] && [ $((t1 - t0)) -lt 900 ] && [ -e "$d/checked" ] && no_leftovers
verdict "SIGTERM during the back-off: exit 143 at once, nothing left (rc $rc, $((t1 - t0)) ms)"

# 7. The built-in GPU check (the fake NVML): a GPU with a row remap pending or uncorrectable ECC
# errors fails it, naming the GPU and the counter; a GPU that is not visible, or
# --no_gpu_health_check, does not.
if [ -f "$FAKENVML" ]; then
    d=$TMP/gpu; mkdir -p "$d"
    DDPRUN_NVML_LIB=$FAKENVML FAKENVML_DEVICES=2 FAKENVML_REMAP_PENDING=1 \
        run_ddprun "$d/remap" --rdzv_conf join_timeout=1 /bin/sh -c "touch $d/ran"; rc=$?
    [ $rc -eq 4 ] && [ ! -e "$d/ran" ] &&
        grep -q 'this node is unfit: GPU health check: GPU 1 has a row remap pending (remapped rows: pending' "$d/remap"
    verdict "GPU 1 with a row remap pending: exit 4, the log names GPU 1 and the counter (rc $rc)" ||
        show_tail "$d/remap"
    DDPRUN_NVML_LIB=$FAKENVML FAKENVML_DEVICES=2 FAKENVML_ECC_DEVICE=0 FAKENVML_ECC_UNCORRECTED=2 \
        run_ddprun "$d/ecc" --rdzv_conf join_timeout=1 /bin/true; rc=$?
    [ $rc -eq 4 ] && grep -q 'GPU 0: 2 uncorrectable ECC errors since the driver loaded (volatile ECC count)' "$d/ecc"
    verdict "GPU 0 with 2 uncorrectable ECC errors: exit 4, named (rc $rc)" || show_tail "$d/ecc"
    # What the node's workers see is checked: GPU 1 counts only when visible (exit 4 above).
    CUDA_VISIBLE_DEVICES=0 DDPRUN_NVML_LIB=$FAKENVML FAKENVML_DEVICES=2 FAKENVML_REMAP_PENDING=1 \
        run_ddprun "$d/visible" --rdzv_conf join_timeout=1 /bin/true; rv=$?
    grep -q 'GPU 1 has a row remap pending' "$d/remap" && [ $rv -eq 0 ]
    verdict "only GPU 0 visible: GPU 1's pending remap is not this job's, exit 0 (rc $rv)"
    DDPRUN_NVML_LIB=$FAKENVML FAKENVML_DEVICES=2 FAKENVML_REMAP_PENDING=1 \
        run_ddprun "$d/off" --rdzv_conf join_timeout=1 --no_gpu_health_check /bin/true; rc=$?
    check "--no_gpu_health_check: the same GPU does not stop the job (rc $rc)" [ $rc -eq 0 ]
else
    for n in "GPU 1 with a row remap pending: exit 4" "GPU 0 with 2 uncorrectable ECC errors" \
        "only GPU 0 visible" "--no_gpu_health_check"; do
        skip "$n" "no $FAKENVML (make tests)"
    done
fi

# 8. Two nodes on 127.0.0.1, --nnodes=1:2: the one whose check fails never joins; the other
# forms the job alone after last_call_timeout and ends 0; the unfit one exits 4 at join_timeout.
PORT=$(free_port); d=$TMP/two; mkdir -p "$d"
CONF=last_call_timeout=0.3,join_timeout=3,keep_alive_interval=0.2,keep_alive_max_attempt=5,close_timeout=5
FW_DIR=$d FW_SLEEP_MS=200 timeout -k 5 40 "$DDPRUN" --nnodes=1:2 --nproc_per_node=2 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=hc2 \
    --rdzv_conf="$CONF,is_host=1" "$FW" >"$d/good.out" 2>&1 &
good=$!
FW_DIR=$d FW_SLEEP_MS=200 timeout -k 5 40 "$DDPRUN" --nnodes=1:2 --nproc_per_node=2 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=hc2 \
    --rdzv_conf="$CONF,is_host=0" --health_check "echo 'no IB link'; exit 7" "$FW" \
    >"$d/sick.out" 2>&1 &
sick=$!
wait $good; rg=$?
wait $sick; rs=$?
[ $rg -eq 0 ] && [ $rs -eq 4 ] &&
    [ "$(cat "$d"/env.*.0 2>/dev/null | grep -c '^WORLD_SIZE=2$')" -eq 2 ] &&
    [ "$(cat "$d"/env.*.0 2>/dev/null | grep -c '^GROUP_WORLD_SIZE=1$')" -eq 2 ]
verdict "the healthy node forms the job alone (2 workers, WORLD_SIZE=2), exit 0 (rc $rg, $rs)" ||
    show_tail "$d/good.out"
[ $rs -eq 4 ] && ! grep -q "rendezvous 'hc2' round" "$d/sick.out" &&
    grep -q "this node is unfit: --health_check: exit status 7; output: no IB link" "$d/sick.out" &&
    no_leftovers
verdict "the unfit node never joins, exits 4 at join_timeout, nothing left (rc $rs)" ||
    show_tail "$d/sick.out"
finish
