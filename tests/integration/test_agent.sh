#!/usr/bin/env bash
# ddprun on one node, against real processes and signals: environment, restarts, failure summary,
# signal forwarding, SIGKILL of the agent, output routing, bad input.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
unset FW_EXIT FW_SIGNAL FW_RANK FW_SLEEP_MS FW_DIR

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 30 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 30 "$DDPRUN" "$@" >"$out" 2>&1
}

# 1. The full torchrun environment reaches every worker.
d=$TMP/env; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/env.out" --standalone --nproc_per_node=4 "$FW"; rc=$?
check "4 workers exit 0 -> ddprun exits 0" [ $rc -eq 0 ]
envok=1
for r in 0 1 2 3; do
    f=$d/env.$r.0
    for kv in "RANK=$r" "LOCAL_RANK=$r" "WORLD_SIZE=4" "LOCAL_WORLD_SIZE=4" "GROUP_RANK=0" \
              "ROLE_RANK=$r" "ROLE_NAME=default" "GROUP_WORLD_SIZE=1" "ROLE_WORLD_SIZE=4" \
              "MASTER_ADDR=127.0.0.1" "TORCHELASTIC_RESTART_COUNT=0" \
              "TORCHELASTIC_MAX_RESTARTS=0" "TORCHELASTIC_USE_AGENT_STORE=False" \
              "OMP_NUM_THREADS=1" "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" "DDPRUN_ROUND=0"; do
        grep -qx "$kv" "$f" 2>/dev/null || { echo "# rank $r lacks $kv"; envok=0; }
    done
    for k in MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_ERROR_FILE DDPRUN_STORE_ADDR \
             DDPRUN_STORE_PORT DDPRUN_STORE_TOKEN; do
        grep -q "^$k=." "$f" 2>/dev/null || { echo "# rank $r lacks $k"; envok=0; }
    done
done
check "every worker gets the torchrun environment" [ $envok -eq 1 ]
ef0=$(grep '^TORCHELASTIC_ERROR_FILE=' "$d/env.0.0" | cut -d= -f2)
ef1=$(grep '^TORCHELASTIC_ERROR_FILE=' "$d/env.1.0" | cut -d= -f2)
[ -n "$ef0" ] && [ "$ef0" != "$ef1" ]
verdict "each worker has its own error file"
check "no process left after a clean run" no_leftovers

# 2. Flag spellings and PET_* environment.
d=$TMP/pet; mkdir -p "$d"
FW_DIR=$d PET_NPROC_PER_NODE=3 run_ddprun "$TMP/pet.out" --standalone "$FW"
[ -f "$d/pid.2.0" ] && [ ! -f "$d/pid.3.0" ]
verdict "PET_NPROC_PER_NODE=3 starts 3 workers"
d=$TMP/dash; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/dash.out" --standalone --nproc-per-node 2 --max-restarts=0 "$FW"
[ -f "$d/pid.1.0" ] && [ ! -f "$d/pid.2.0" ]
verdict "dashed spellings work (--nproc-per-node 2)"
# The program found through PATH, as torchrun --no_python runs it: argv[0] is the name as given.
d=$TMP/argv0; mkdir -p "$d"
FW_DIR=$d PATH="$(dirname "$FW"):$PATH" run_ddprun "$TMP/argv0.out" --standalone \
    --nproc_per_node=1 fake_worker "a b" c
check "workers get argv as given, argv[0] unresolved (fake_worker, 'a b', c)" \
    [ "$(cat "$d/argv.0.0" 2>/dev/null | tr '\n' '|')" = "fake_worker|a b|c|" ]

# 3. A failing worker: the group stops, the summary names rank, exit code and error file.
FW_RANK=1 FW_EXIT=3 FW_ERROR="loss is NaN" FW_SLEEP_MS=20000 \
    run_ddprun "$TMP/fail.out" --standalone --nproc_per_node=3 "$FW"; rc=$?
check "a failed worker makes ddprun exit 1" [ $rc -eq 1 ]
check "summary names the root cause rank" grep -q "rank      : 1 (local_rank: 1)" "$TMP/fail.out"
check "summary shows the exit code" grep -qE "exitcode  : 3 \(pid: [0-9]+\)" "$TMP/fail.out"
check "summary shows the error file's message" grep -q "RuntimeError: loss is NaN" "$TMP/fail.out"
check "summary says FAILED" grep -q "FAILED" "$TMP/fail.out"
check "the other workers were stopped (no leftovers)" no_leftovers

# 4. A worker killed by a signal is named in the summary.
FW_RANK=0 FW_SIGNAL=9 FW_SLEEP_MS=20000 \
    run_ddprun "$TMP/sig.out" --standalone --nproc_per_node=2 "$FW"; rc=$?
check "worker killed by SIGKILL -> exit 1" [ $rc -eq 1 ]
check "summary names the signal" grep -q "Signal 9 (SIGKILL) received by PID" "$TMP/sig.out"

# 5. Restarts happen exactly max_restarts times.
d=$TMP/restart; mkdir -p "$d"
FW_DIR=$d FW_RANK=1 FW_EXIT=1 FW_SLEEP_MS=20000 \
    run_ddprun "$TMP/restart.out" --standalone --nproc_per_node=2 --max_restarts=2 "$FW"; rc=$?
check "restarts spent -> exit 1" [ $rc -eq 1 ]
[ -f "$d/pid.0.0" ] && [ -f "$d/pid.0.1" ] && [ -f "$d/pid.0.2" ] && [ ! -f "$d/pid.0.3" ]
verdict "exactly 3 attempts ran (max_restarts=2)"
check "the restart count reaches the workers" grep -qx "TORCHELASTIC_RESTART_COUNT=2" "$d/env.1.2"

# 6. A transient failure recovers.
d=$TMP/recover; mkdir -p "$d"
FW_DIR=$d FW_RANK=0 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 \
    run_ddprun "$TMP/recover.out" --standalone --nproc_per_node=2 --max_restarts=1 "$FW"; rc=$?
[ $rc -eq 0 ] && [ -f "$d/pid.1.1" ]
verdict "failure on attempt 0, success on attempt 1 -> exit 0"

# 7. SIGTERM reaches every worker; ddprun exits 128+15 with nothing left.
d=$TMP/term; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 "$FW" \
    >"$TMP/term.out" 2>&1 &
pid=$!
wait_for_files() { local i; for i in $(seq 200); do [ -f "$1" ] && [ -f "$2" ] && return 0; sleep 0.02; done; return 1; }
wait_for_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
check "SIGTERM -> ddprun exits 143" [ $rc -eq 143 ]
grep -qx TERM "$d/sig.0.0" && grep -qx TERM "$d/sig.1.0"
verdict "every worker received SIGTERM"
check "nothing left after SIGTERM" no_leftovers

# 7a. SIGINT, SIGHUP and SIGQUIT are forwarded too, and ddprun exits 128+N.
for sig in INT HUP QUIT; do
    d=$TMP/sig$sig; mkdir -p "$d"
    FW_DIR=$d FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 \
        --shutdown_timeout=0.3 "$FW" >"$TMP/sig$sig.out" 2>&1 &
    pid=$!
    wait_for_files "$d/pid.0.0" "$d/pid.1.0"
    sleep 0.1
    kill -$sig "$(child_pid $pid)"
    wait $pid; rc=$?
    want=$((128 + $(kill -l $sig)))
    # fake_worker records INT and HUP (and keeps running, so the shutdown timeout ends it);
    # QUIT's default action ends it at once without a record.
    if [ $sig = QUIT ]; then got=ok; else
        grep -qx $sig "$d/sig.0.0" && grep -qx $sig "$d/sig.1.0" && got=ok || got=missing; fi
    [ $rc -eq $want ] && [ $got = ok ]
    verdict "SIG$sig reaches every worker; ddprun exits $want (got $rc, records $got)"
done
check "nothing left after INT/HUP/QUIT" no_leftovers

# 7b. Slurm's linuxproc (or a shell's process group) signals the workers a moment before ddprun:
# that is the job being stopped, not a failure to restart from.
d=$TMP/extterm; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 \
    --max_restarts=3 "$FW" >"$TMP/extterm.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
kill -TERM "$(cat "$d/pid.0.0")" "$(cat "$d/pid.1.0")"
sleep 0.05
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
[ $rc -eq 143 ] && [ ! -f "$d/pid.0.1" ] && ! grep -q "restarting" "$TMP/extterm.out"
verdict "workers TERMed just before ddprun: exit 143 and no restart"

# 8. SIGUSR1 in --signals_to_handle is forwarded and the job goes on.
d=$TMP/usr1; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=1500 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 \
    --signals_to_handle=SIGTERM,SIGINT,SIGUSR1 "$FW" >"$TMP/usr1.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
kill -USR1 "$(child_pid $pid)"
wait $pid; rc=$?
grep -qx USR1 "$d/sig.0.0" && grep -qx USR1 "$d/sig.1.0"
verdict "SIGUSR1 forwarded to workers"
check "the job finishes normally after SIGUSR1" [ $rc -eq 0 ]

# 9. A worker that ignores SIGTERM is killed after --shutdown_timeout.
d=$TMP/stubborn; mkdir -p "$d"
FW_DIR=$d FW_IGNORE_TERM=1 FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone \
    --nproc_per_node=2 --shutdown_timeout=0.5 "$FW" >"$TMP/stubborn.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
t0=$(date +%s%N)
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
t1=$(date +%s%N)
[ $rc -eq 143 ] && [ $(( (t1 - t0) / 1000000 )) -lt 5000 ]
verdict "stubborn workers are SIGKILLed after the shutdown timeout"
check "the shutdown timeout is logged" grep -q "shutdown_timeout" "$TMP/stubborn.out"
check "nothing left after a stubborn shutdown" no_leftovers

# 10. SIGKILL of ddprun leaves no worker and no grandchild behind.
d=$TMP/kill9; mkdir -p "$d"
FW_DIR=$d FW_CHILD=1 FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone \
    --nproc_per_node=3 "$FW" >"$TMP/kill9.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.2.0"
sleep 0.2
kill -KILL "$(child_pid $pid)"
{ wait $pid; } 2>/dev/null
check "SIGKILL of ddprun: no worker or grandchild survives" no_leftovers 3

# 11. A worker's child that outlives it is not left behind.
FW_CHILD=1 FW_SLEEP_MS=200 run_ddprun "$TMP/orphan.out" --standalone --nproc_per_node=2 "$FW"
check "orphaned grandchildren are cleaned up" no_leftovers

# 12. --tee: every line tagged with its rank, never torn.
FW_LINES=300 FW_LINE_LEN=100 run_ddprun "$TMP/tee.out" --standalone --nproc_per_node=4 \
    --tee 3 --log_dir "$TMP/teelogs" "$FW"
n=$(grep -cE '^\[rank[0-3]\]: line [0-9]+ from rank [0-3]x+$' "$TMP/tee.out")
bad=$(grep -vE '^\[rank[0-3]\]: line [0-9]+ from rank [0-3]x+$|^ddprun\[' "$TMP/tee.out" | wc -l)
[ "$n" -eq 1200 ] && [ "$bad" -eq 0 ]
verdict "--tee: 1200 whole tagged lines, none torn ($n good, $bad bad)"
tagok=1
for r in 0 1 2 3; do
    m=$(grep -cE "^\[rank$r\]: line [0-9]+ from rank $r" "$TMP/tee.out")
    [ "$m" -eq 300 ] || tagok=0
done
check "--tee: each line carries the right rank" [ $tagok -eq 1 ]
check "--tee: per-rank log files written" \
    [ "$(grep -c 'from rank 2' "$TMP/teelogs/attempt_0/2/stdout.log" 2>/dev/null)" = 300 ]

# 12b. --tee with CRLF line ends (also split across writes): one tagged line each, no empty ones.
printf '#!/bin/sh\nprintf "a\\r\\nb\\r\\n"; printf "c\\r"; sleep 0.1; printf "\\nd\\n"\n' > "$TMP/crlf.sh"
chmod +x "$TMP/crlf.sh"
run_ddprun "$TMP/crlf.out" --standalone --nproc_per_node=1 --tee 3 --log_dir "$TMP/crlflogs" \
    "$TMP/crlf.sh"
[ "$(grep -c '^\[rank0\]: ' "$TMP/crlf.out")" = 4 ] && ! grep -qE '^\[rank0\]: \r?$' "$TMP/crlf.out"
verdict "--tee: CRLF ends one line (4 tagged lines, none empty)"

# 13. --redirects: output only in files.
FW_LINES=5 run_ddprun "$TMP/redir.out" --standalone --nproc_per_node=2 --redirects 3 \
    --log_dir "$TMP/redirlogs" "$FW"
check "--redirects 3: nothing on the console" [ "$(grep -c 'from rank' "$TMP/redir.out")" = 0 ]
check "--redirects 3: lines in attempt_0/<rank>/stdout.log" \
    [ "$(cat "$TMP"/redirlogs/attempt_0/{0,1}/stdout.log | grep -c 'from rank')" = 10 ]

# 14. --local_ranks_filter shows only the chosen ranks on the console.
FW_LINES=5 run_ddprun "$TMP/filter.out" --standalone --nproc_per_node=3 --tee 3 \
    --local_ranks_filter 1 --log_dir "$TMP/filterlogs" "$FW"
[ "$(grep -c 'from rank 1' "$TMP/filter.out")" = 5 ] && \
    [ "$(grep -cE 'from rank [02]' "$TMP/filter.out")" = 0 ]
verdict "--local_ranks_filter 1: only rank 1 on the console"

# 15. Bad input: one line naming the flag or path, exit 2, nothing started.
run_ddprun "$TMP/bad1.out" --no_such_flag=2 "$FW"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--no_such_flag" "$TMP/bad1.out"
verdict "unknown flag -> exit 2 naming it"
run_ddprun "$TMP/bad2.out" --nproc_per_node=zero "$FW"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--nproc_per_node" "$TMP/bad2.out"
verdict "bad --nproc_per_node -> exit 2 naming it"
run_ddprun "$TMP/bad3.out" --standalone /nonexistent/train; rc=$?
[ $rc -eq 2 ] && grep -q "/nonexistent/train" "$TMP/bad3.out"
verdict "missing program -> exit 2 naming the path"
run_ddprun "$TMP/bad4.out" --standalone --log_dir /proc/ddprun-no "$FW"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--log_dir" "$TMP/bad4.out"
verdict "unusable --log_dir -> exit 2 naming it"
run_ddprun "$TMP/bad5.out" --standalone --nproc_per_node=gpu "$FW"; rc=$?
if nvidia-smi -L >/dev/null 2>&1; then
    ok "--nproc_per_node=gpu on a GPU machine (skipped check)"
else
    [ $rc -eq 2 ] && grep -qi "no CUDA device" "$TMP/bad5.out"
    verdict "--nproc_per_node=gpu without a GPU -> clear error, exit 2"
fi
check "bad input started nothing" no_leftovers 1

# 16a. A program that passes the up-front checks but cannot be exec'd: no restart, exit 126.
printf 'not a program\n' > "$TMP/noexec"; chmod +x "$TMP/noexec"
run_ddprun "$TMP/noexec.out" --standalone --nproc_per_node=2 --max_restarts=3 "$TMP/noexec"; rc=$?
[ $rc -eq 126 ] && [ "$(grep -c 'restarting' "$TMP/noexec.out")" = 0 ]
verdict "exec failure -> exit 126, no restart"
check "exec failure is named in the summary" grep -q "unable to exec .*noexec" "$TMP/noexec.out"

# 16b. A worker's child that keeps writing to the worker's stdout after the worker exited must not
# hold the agent draining that pipe forever: ddprun still finishes, and the writer is swept.
printf '#!/bin/sh\nyes spew &\nsleep 0.3\nexit 0\n' > "$TMP/spew.sh"; chmod +x "$TMP/spew.sh"
t0=$(date +%s%N)
timeout -k 1 4 "$DDPRUN" --standalone --nproc_per_node=1 "$TMP/spew.sh" >"$TMP/spew.out" 2>&1
rc=$?
t1=$(date +%s%N)
rm -f "$TMP/spew.out"
[ $rc -eq 0 ] && [ $(( (t1 - t0) / 1000000 )) -lt 3000 ]
verdict "a child spewing after its worker exited: ddprun exits 0 promptly (rc $rc)"
check "the spewing child is gone" no_leftovers

# 16c. Started with stdout or stderr closed (a daemon, `2>&-`): the worker output pipes used to get
# fd 1 or 2 and libuv aborted closing them.
FW_LINES=2 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 "$FW" >&- 2>"$TMP/closed1.out"
rc1=$?
FW_LINES=2 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 "$FW" >"$TMP/closed2.out" 2>&-
rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(grep -c 'from rank' "$TMP/closed2.out")" = 4 ]
verdict "stdout or stderr closed at start: ddprun runs the job, exit 0 ($rc1, $rc2)"

# 16. Python targets: .py runs under python3 -u; -m runs a module.
if command -v python3 >/dev/null; then
    mkdir -p "$TMP/py/pkg"
    printf 'import os, sys\nprint("py rank", os.environ["RANK"], sys.argv[1:], flush=True)\n' \
        > "$TMP/py/script.py"
    cp "$TMP/py/script.py" "$TMP/py/pkg/mod.py"
    run_ddprun "$TMP/py.out" --standalone --nproc_per_node=2 "$TMP/py/script.py" --lr 0.1; rc=$?
    [ $rc -eq 0 ] && grep -q "py rank 1 \['--lr', '0.1'\]" "$TMP/py.out"
    verdict "a .py target runs under python3 with its args"
    (cd "$TMP/py" && run_ddprun "$TMP/pym.out" --standalone --nproc_per_node=2 -m pkg.mod x); rc=$?
    [ $rc -eq 0 ] && grep -q "py rank 0 \['x'\]" "$TMP/pym.out"
    verdict "-m runs a module"
fi

# 17. No zombie while running: exited workers are reaped at once.
d=$TMP/zombie; mkdir -p "$d"
FW_DIR=$d FW_QUICK_RANK=0 FW_SLEEP_MS=1500 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=3 \
    "$FW" >"$TMP/zombie.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.2.0"
sleep 0.5
z=$(ps -o stat= --ppid "$(child_pid $pid)" 2>/dev/null | grep -c Z)
check "no zombie children while the group runs" [ "$z" -eq 0 ]
{ wait $pid; } 2>/dev/null

finish
