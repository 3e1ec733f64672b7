#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddprun on one node, against real processes and signals: environment, restarts, failure summary,
# signal forwarding, SIGKILL of the agent, output routing, bad input.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
fake_worker_env_clear

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 30 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 30 "$DDPRUN" "$@" >"$out" 2>&1
}
# wait_for_files F1 F2: waits (up to 4 s) until both files exist.
wait_for_files() { local i; for i in $(seq 200); do [ -f "$1" ] && [ -f "$2" ] && return 0; sleep 0.02; done; return 1; }

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
              "TORCHELASTIC_MAX_RESTARTS=0" "TORCHELASTIC_USE_AGENT_STORE=True" \
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
check "without --log_dir the error file's path says it is removed at exit" \
    grep -q "error_file: .* (removed at exit: --log_dir keeps it)" "$TMP/fail.out"

# 3'. A Python worker is named by its script or module, also when the program given is the
# interpreter itself (a venv's python), as torchrun names the script.
if command -v python3 >/dev/null; then
    mkdir -p "$TMP/pymod"
    printf 'import sys\nsys.exit(3)\n' >"$TMP/boom.py"
    printf 'import sys\nsys.exit(4)\n' >"$TMP/pymod/boommod.py"
    py=$(command -v python3)
    run_ddprun "$TMP/py1.out" --nproc_per_node=1 "$py" -u "$TMP/boom.py"; rc=$?
    [ $rc -eq 1 ] && grep -qx "$TMP/boom.py FAILED" "$TMP/py1.out" && ! grep -q "python3 FAILED" "$TMP/py1.out"
    verdict "the interpreter as the program: the summary is titled with the script (rc $rc)"
    (cd "$TMP/pymod" && run_ddprun "$TMP/py2.out" --nproc_per_node=1 --no_python python3 -W ignore -m boommod); rc=$?
    [ $rc -eq 1 ] && grep -qx "boommod FAILED" "$TMP/py2.out"
    verdict "--no_python python3 -m MODULE: the summary is titled with the module (rc $rc)"
else
    skip "the interpreter as the program: the summary is titled with the script" "no python3"
    skip "--no_python python3 -m MODULE: the summary is titled with the module" "no python3"
fi

# 3a. An error file that is not JSON is named with the reason, not taken for no error file.
cat >"$TMP/badjson.sh" <<'EOF2'
#!/bin/sh
printf '{"message": oops' >"$TORCHELASTIC_ERROR_FILE"
exit 4
EOF2
chmod +x "$TMP/badjson.sh"
run_ddprun "$TMP/badjson.out" --log_dir "$TMP/badjson.logs" "$TMP/badjson.sh"; rc=$?
[ $rc -eq 1 ] && grep -qE "error_file: $TMP/badjson.logs/.*error.json$" "$TMP/badjson.out" &&
    grep -qE "traceback : its error file is not valid JSON \(line 1, column [0-9]+: " "$TMP/badjson.out"
verdict "an error file that is not JSON: the summary names it and says so (rc $rc)" ||
    show_tail "$TMP/badjson.out"

# 3a'. An error file that is a FIFO (or a symlink) is named as such: the summary never blocks on
#      it, nor shows another file through it.
cat >"$TMP/fifo.sh" <<'EOF2'
#!/bin/sh
rm -f "$TORCHELASTIC_ERROR_FILE" && mkfifo "$TORCHELASTIC_ERROR_FILE"
exit 4
EOF2
chmod +x "$TMP/fifo.sh"
run_ddprun "$TMP/fifo.out" --log_dir "$TMP/fifo.logs" "$TMP/fifo.sh"; rc=$?
check "an error file that is a FIFO: exit 1 at once, 'not a regular file' (rc $rc)" \
    bash -c "[ $rc -eq 1 ] && grep -q 'unable to read it: not a regular file' '$TMP/fifo.out'"
cat >"$TMP/link.sh" <<'EOF2'
#!/bin/sh
rm -f "$TORCHELASTIC_ERROR_FILE" && ln -s /etc/hostname "$TORCHELASTIC_ERROR_FILE"
exit 4
EOF2
chmod +x "$TMP/link.sh"
run_ddprun "$TMP/link.out" --log_dir "$TMP/link.logs" "$TMP/link.sh"; rc=$?
check "an error file that is a symlink: not followed, 'a symbolic link' (rc $rc)" \
    bash -c "[ $rc -eq 1 ] && grep -q 'unable to read it: a symbolic link' '$TMP/link.out'"

# 3b. Nothing of a run stays in its private run directory's place (/dev/shm without TMPDIR),
# however ddprun ends; a huge error file is cut to the 64 KiB the agent reads. The run directory
# is found from the error file path the worker got; only that directory is ever removed here.
# run_dir_of DIR: the run directory of the worker that wrote DIR/env.0.0.
run_dir_of() { dirname "$(sed -n 's/^TORCHELASTIC_ERROR_FILE=//p' "$1/env.0.0" 2>/dev/null)"; }
# gone_within DIR: true when DIR disappears within 5 s; else removes it (ours) and fails.
gone_within() {
    local i
    for i in $(seq 250); do [ -e "$1" ] || return 0; sleep 0.02; done
    case $1 in */ddprun-*) rm -rf "$1" ;; esac
    return 1
}
d=$TMP/shmfail; mkdir -p "$d"
(unset TMPDIR; FW_DIR=$d FW_RANK=1 FW_EXIT=3 FW_ERROR="loss is NaN" FW_ERROR_PAD=2000000 \
    FW_SLEEP_MS=20000 run_ddprun "$TMP/shmfail.out" --standalone --nproc_per_node=2 "$FW"); rc=$?
rd=$(run_dir_of "$d")
case $rd in /dev/shm/ddprun-*|/tmp/ddprun-*) ;; *) rd=; esac
[ $rc -eq 1 ] && [ -n "$rd" ] && gone_within "$rd"
verdict "failed run: its run directory ($rd) is removed"
grep -q "RuntimeError: loss is NaN" "$TMP/shmfail.out" && \
    grep -qE "error file of [0-9]+ bytes: only its first 16384 are kept" "$TMP/shmfail.out"
verdict "a 2 MB error file: the summary shows its start and says it was cut"
d=$TMP/shmbig; mkdir -p "$d"
FW_DIR=$d FW_EXIT=3 FW_ERROR="too long" FW_ERROR_PAD=2000000 run_ddprun "$TMP/shmbig.out" \
    --standalone --nproc_per_node=1 --log_dir "$TMP/shmbiglogs" "$FW"
sz=$(stat -c %s "$TMP/shmbiglogs/attempt_0/0/error.json" 2>/dev/null || echo missing)
[ "$sz" != missing ] && [ "$sz" -le 65536 ]
verdict "an error file over 64 KiB is cut when its worker exits ($sz bytes left)"
for how in TERM KILL; do
    d=$TMP/shm$how; mkdir -p "$d"
    (unset TMPDIR; FW_DIR=$d FW_SLEEP_MS=20000 exec timeout -k 5 30 "$DDPRUN" --standalone \
        --nproc_per_node=2 "$FW" >"$TMP/shm$how.out" 2>&1) &
    pid=$!
    wait_for_files "$d/argv.0.0" "$d/pid.1.0"
    rd=$(run_dir_of "$d")
    case $rd in /dev/shm/ddprun-*|/tmp/ddprun-*) ;; *) rd=; esac
    [ -n "$rd" ] && [ -d "$rd" ]; present=$?
    kill -$how "$(child_pid $pid)"
    { wait $pid; } 2>/dev/null
    [ $present -eq 0 ] && gone_within "$rd"
    verdict "SIG$how of ddprun: its run directory ($rd) is removed"
done
check "nothing left after the run directory checks" no_leftovers 3

# 3c. Workers share memory on the node through files in DDPRUN_SHM_DIR, the agent's directory on
# /dev/shm (the CPU backend's segment: tests/unit/test_ddpw_coll.c). A worker killed before it unlinks
# its file leaks nothing: the next attempt starts with the directory empty, it is gone when
# ddprun exits, and the orphan guard removes it when ddprun is SIGKILLed.
cat >"$TMP/seg.sh" <<'EOS'
#!/bin/sh
d=$1
echo $$ >"$d/pid.$LOCAL_RANK.$TORCHELASTIC_RESTART_COUNT"
echo "${DDPRUN_SHM_DIR:-unset}" >"$d/shmdir.$TORCHELASTIC_RESTART_COUNT"
ls -A "${DDPRUN_SHM_DIR:-/nonexistent}" >"$d/ls.$LOCAL_RANK.$TORCHELASTIC_RESTART_COUNT" 2>&1
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
[ "$LOCAL_RANK" = 0 ] && echo segment >"$DDPRUN_SHM_DIR/ddpw-$$-test"
exec sleep 30
EOS
chmod +x "$TMP/seg.sh"
# wait_segment DIR: waits (up to 10 s) for rank 0's file in the scratch directory named in
# DIR/shmdir.0; prints the directory.
wait_segment() {
    local i sd
    for i in $(seq 500); do
        sd=$(cat "$1/shmdir.0" 2>/dev/null)
        [ -n "$sd" ] && [ -f "$1/pid.0.0" ] && [ -f "$sd/ddpw-$(cat "$1/pid.0.0")-test" ] &&
            { echo "$sd"; return 0; }
        sleep 0.02
    done
    return 1
}
d=$TMP/seg; mkdir -p "$d"
(timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=2 --max_restarts=1 "$TMP/seg.sh" "$d" \
    >"$TMP/seg.out" 2>&1) &
pid=$!
sd=$(wait_segment "$d")
[ -n "$sd" ] && kill -KILL "$(cat "$d/pid.0.0")"
wait $pid; rc=$?
case $sd in /dev/shm/ddprun-shm-*) true ;; *) false ;; esac && [ $rc -eq 0 ]
verdict "rank 0 killed with a file in its DDPRUN_SHM_DIR ($sd): restarted, exit 0 (rc $rc)" ||
    show_tail "$TMP/seg.out"
[ -f "$d/ls.0.1" ] && [ ! -s "$d/ls.0.1" ] && [ "$(cat "$d/shmdir.1" 2>/dev/null)" = "$sd" ]
verdict "the next attempt finds the same scratch directory, empty"
[ -n "$sd" ] && [ ! -e "$sd" ]
verdict "the scratch directory is gone when ddprun exits"
d=$TMP/segk; mkdir -p "$d"
(timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=2 "$TMP/seg.sh" "$d" \
    >"$TMP/segk.out" 2>&1) &
pid=$!
sd=$(wait_segment "$d")
[ -n "$sd" ] && kill -KILL "$(child_pid $pid)"
{ wait $pid; } 2>/dev/null
case $sd in /dev/shm/ddprun-shm-*) gone_within "$sd" ;; *) false ;; esac
verdict "SIGKILL of ddprun with a file in the scratch directory: the guard removes $sd"
check "nothing left after the segment checks" no_leftovers 3

# 3d. An agent killed with its guard (a whole Slurm step or container at once) leaves its scratch
# directory: the next agent on the host removes it once nobody holds its lock and it has not
# changed for a minute (aged here with touch). A live agent's directory (locked) and an unmarked
# one (an older ddprun's, which holds no lock) are kept.
guard_of() { # the orphan guard: the child of ddprun PID that is ddprun itself
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        [ "$(cat /proc/"$c"/comm 2>/dev/null)" = ddprun ] && { echo "$c"; return 0; }
    done
    return 1
}
# killed_with_guard DIR OUT [VAR=VALUE...]: ddprun running seg.sh (one worker, with that
# environment), SIGKILLed together with its orphan guard once rank 0's segment is made; prints
# the scratch directory.
killed_with_guard() {
    local dir=$1 out=$2 pid sd ag gd
    shift 2
    (env "$@" timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=1 "$TMP/seg.sh" "$dir" \
        >"$out" 2>&1) &
    pid=$!
    sd=$(wait_segment "$dir")
    ag=$(child_pid $pid)
    gd=$(guard_of "$ag")
    [ -n "$gd" ] && kill -KILL "$gd" && kill -KILL "$ag"
    { wait $pid; } 2>/dev/null
    sleep 0.3
    echo "$sd"
}
d=$TMP/segg; mkdir -p "$d"
sd=$(killed_with_guard "$d" "$TMP/segg.out")
case $sd in /dev/shm/ddprun-shm-*) [ -d "$sd" ] && [ "$(stat -c %a "$sd")" = 1700 ] ;; *) false ;; esac
verdict "SIGKILL of ddprun and its guard together: $sd is left, marked (mode 1700)"
dl=$TMP/segl; mkdir -p "$dl"
(timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=1 "$TMP/seg.sh" "$dl" >"$TMP/segl.out" 2>&1) &
lpid=$!
sdl=$(wait_segment "$dl")
old=$(mktemp -d /dev/shm/ddprun-shm-unmarked-XXXXXX)
touch -d '-2 minutes' "$sd" "$old" ${sdl:+"$sdl"}
timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=1 --no_python true >"$TMP/segz.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -n "$sd" ] && [ ! -e "$sd" ]
verdict "the next agent on the host removes the dead agent's directory (rc $rc)" || show_tail "$TMP/segz.out"
[ -n "$sd" ] && rm -rf "$sd" # when it was not: nothing of the test stays
[ -n "$sdl" ] && [ -d "$sdl" ] && [ -d "$old" ]
verdict "a live agent's directory and an unmarked one, as old, are kept"
kill -TERM "$(child_pid $lpid)" 2>/dev/null
{ wait $lpid; } 2>/dev/null
rm -rf "$old"
check "nothing left after the dead agent's directory checks" no_leftovers 3

# 3e. The private run directory (error files; on TMPDIR here, /dev/shm without it) is held and
# marked as the scratch directory is: left marked when ddprun and its guard are SIGKILLed
# together, removed with the scratch directory by the next agent that makes its run directory
# there once they are a minute old; a live agent's run directory is kept.
rp=$TMP/rdp; mkdir -p "$rp"
d=$TMP/segr; mkdir -p "$d"
sd=$(killed_with_guard "$d" "$TMP/segr.out" TMPDIR="$rp")
rd=$(ls -d "$rp"/ddprun-* 2>/dev/null)
[ -n "$rd" ] && [ -d "$rd" ] && [ "$(stat -c %a "$rd")" = 1700 ]
verdict "SIGKILL of ddprun and its guard together: its run directory in TMPDIR is left, marked (mode 1700)"
dl=$TMP/segrl; mkdir -p "$dl"
(TMPDIR=$rp timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=1 "$TMP/seg.sh" "$dl" \
    >"$TMP/segrl.out" 2>&1) &
lpid=$!
wait_segment "$dl" >/dev/null
rdl=$(ls -d "$rp"/ddprun-* 2>/dev/null | grep -vx "$rd")
touch -d '-2 minutes' ${rd:+"$rd"} ${rdl:+"$rdl"} ${sd:+"$sd"}
TMPDIR=$rp timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=1 --no_python true \
    >"$TMP/segrz.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -n "$rd" ] && [ ! -e "$rd" ] && [ -n "$sd" ] && [ ! -e "$sd" ] &&
    [ -n "$rdl" ] && [ -d "$rdl" ]
verdict "the next agent removes the dead agent's run and scratch directories, a live agent's kept (rc $rc)" ||
    show_tail "$TMP/segrz.out"
[ -n "$rd" ] && rm -rf "$rd"
[ -n "$sd" ] && rm -rf "$sd"
kill -TERM "$(child_pid $lpid)" 2>/dev/null
{ wait $lpid; } 2>/dev/null
check "nothing left after the dead agent's run directory checks" no_leftovers 3

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
# Counted by the failing rank's files: it writes its pid before it fails, while rank 0 may be
# stopped by then before it has written anything.
[ -f "$d/pid.1.0" ] && [ -f "$d/pid.1.1" ] && [ -f "$d/pid.1.2" ] && [ ! -f "$d/pid.1.3" ]
verdict "exactly 3 attempts ran (max_restarts=2)" || echo "# attempts' files: $(ls "$d" | tr '\n' ' ')"
check "the restart count reaches the workers" grep -qx "TORCHELASTIC_RESTART_COUNT=2" "$d/env.1.2"

# 5b. Restarts do not grow the job's store: each attempt's worker keys ("ddpw/<run>/<round>/")
#     go before the next attempt starts. Each attempt sets a 100 kB key and reads the store's
#     STATS (through the job's token), then fails, 4 times.
d=$TMP/keys; mkdir -p "$d"
cat >"$d/w.sh" <<EOF
#!/bin/sh
"$BIN/tests/store_client" "\$DDPRUN_STORE_PORT" set-size "ddpw/\$DDPRUN_RUN_ID/\$DDPRUN_ROUND/blob" 100000
"$BIN/tests/store_client" "\$DDPRUN_STORE_PORT" stats >"$d/stats.\$TORCHELASTIC_RESTART_COUNT"
[ "\$TORCHELASTIC_RESTART_COUNT" -ge 4 ]
EOF
chmod +x "$d/w.sh"
run_ddprun "$TMP/keys.out" --standalone --max_restarts=4 --no_python "$d/w.sh"; rc=$?
stat_of() { sed -n "s/^$2 //p" "$d/stats.$1" 2>/dev/null; }
k0=$(stat_of 0 keys) k4=$(stat_of 4 keys) m0=$(stat_of 0 mem_used) m4=$(stat_of 4 mem_used)
check "5 attempts of 100 kB keys: the store holds one attempt's (keys $k0 -> $k4, mem_used $m0 -> $m4)" \
    bash -c "[ $rc -eq 0 ] && [ -n '$k4' ] && [ '$k4' = '$k0' ] && [ \$(( ${m4:-0} - ${m0:-0} )) -lt 50000 ]"

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

# 7c. A stopped worker (SIGSTOP) does not hold the shutdown for --shutdown_timeout: the SIGTERM is
# followed by SIGCONT, so it acts on it at once. Without that the 30 s timeout outlasts the 15 s
# bound and timeout(1) makes it 124.
d=$TMP/stopped; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=60000 timeout -k 5 15 "$DDPRUN" --standalone --nproc_per_node=2 \
    --shutdown_timeout=30 "$FW" >"$TMP/stopped.out" 2>&1 &
pid=$!
wait_for_files "$d/argv.0.0" "$d/argv.1.0"
kill -STOP "$(cat "$d/pid.0.0")"
sleep 0.1
kill -TERM "$(child_pid $pid)"
wait $pid; rc=$?
[ $rc -eq 143 ] && grep -qx TERM "$d/sig.0.0" && grep -qx TERM "$d/sig.1.0"
verdict "a SIGSTOPped worker gets SIGCONT after SIGTERM: ddprun exits 143 (got $rc)"
check "nothing left after stopping a stopped worker" no_leftovers 3

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
# stubborn_stop NAME ARGS...: ddprun with 2 workers that ignore SIGTERM (the caller's environment
# passes through), SIGTERM once both run; sets rc and stop_ms (from the SIGTERM to the exit).
stubborn_stop() {
    local name=$1; shift
    local d=$TMP/$name t0
    mkdir -p "$d"
    FW_DIR=$d FW_IGNORE_TERM=1 FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone \
        --nproc_per_node=2 "$@" "$FW" >"$TMP/$name.out" 2>&1 &
    local pid=$!
    wait_for_files "$d/pid.0.0" "$d/pid.1.0"
    sleep 0.1
    t0=$(date +%s%N)
    kill -TERM "$(child_pid $pid)"
    wait $pid; rc=$?
    stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}
stubborn_stop stubborn --shutdown_timeout=0.5
[ $rc -eq 143 ] && [ $stop_ms -lt 5000 ]
verdict "stubborn workers are SIGKILLed after the shutdown timeout"
check "the shutdown timeout is logged" grep -q "shutdown_timeout" "$TMP/stubborn.out"
check "nothing left after a stubborn shutdown" no_leftovers

# 9b. TORCH_ELASTIC_SHUTDOWN_TIMEOUT is the default of --shutdown_timeout (torchrun's variable).
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=0.5 stubborn_stop stubenv
[ $rc -eq 143 ] && [ $stop_ms -lt 5000 ]
verdict "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=0.5: stubborn workers SIGKILLed within 5 s (rc $rc)"
check "nothing left after TORCH_ELASTIC_SHUTDOWN_TIMEOUT" no_leftovers
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=never run_ddprun "$TMP/stubenv2.out" --standalone "$FW"; rc=$?
[ $rc -eq 2 ] && grep -q "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: 'never'" "$TMP/stubenv2.out"
verdict "a bad TORCH_ELASTIC_SHUTDOWN_TIMEOUT -> exit 2 naming it"

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

# 10b. The job's cgroup v2: a grandchild that left the process group (fork, setsid, fork: a
# daemon) dies with a SIGKILLed ddprun, and the cgroup goes too. Needs a cgroup v2 hierarchy where
# this shell may create a cgroup below its own (root, or a delegated subtree) with cgroup.kill.
cg_mnt=$(awk '$4 == "/" { for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") print $5; break } }' \
    /proc/self/mountinfo | head -1)
cg_own=$(sed -n 's/^0:://p' /proc/self/cgroup)
[ "$cg_own" = / ] && cg_own=
cg_why=
if [ -z "$cg_mnt" ]; then cg_why="no cgroup v2 hierarchy mounted"
elif ! mkdir "$cg_mnt$cg_own/ddptest-probe-$$" 2>/dev/null; then
    cg_why="cannot create a cgroup under $cg_mnt$cg_own (not root, not delegated)"
else
    [ -e "$cg_mnt$cg_own/ddptest-probe-$$/cgroup.kill" ] || cg_why="no cgroup.kill (Linux < 5.14)"
    rmdir "$cg_mnt$cg_own/ddptest-probe-$$"
fi
# daemons_gone PIDFILE...: true when every recorded daemon pid is gone (or a zombie) within 5 s.
daemons_gone() {
    local i f p alive
    for i in $(seq 250); do
        alive=0
        for f in "$@"; do
            p=$(cat "$f" 2>/dev/null) || continue
            tagged_alive "$p" && alive=1
        done
        [ $alive -eq 0 ] && return 0
        sleep 0.02
    done
    return 1
}
if [ -z "$cg_why" ]; then
    d=$TMP/cgkill; mkdir -p "$d"
    FW_DIR=$d FW_DAEMON=1 FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" --standalone \
        --nproc_per_node=2 "$FW" >"$TMP/cgkill.out" 2>&1 &
    pid=$!
    wait_for_files "$d/daemon.0.0" "$d/daemon.1.0"
    dp=$(child_pid $pid)
    grep -qx "0::$cg_own/ddprun-$dp/g0" "/proc/$(cat "$d/pid.0.0")/cgroup" && \
        grep -qx "0::$cg_own/ddprun-$dp/g0" "/proc/$(cat "$d/daemon.1.0")/cgroup"
    verdict "cgroup v2: workers and their daemons run in the job's cgroup ddprun-<pid>/g0"
    kill -KILL "$dp"
    { wait $pid; } 2>/dev/null
    check "cgroup v2: SIGKILL of ddprun: a setsid'ed, double-forked grandchild is gone" \
        daemons_gone "$d/daemon.0.0" "$d/daemon.1.0"
    for i in $(seq 250); do [ -d "$cg_mnt$cg_own/ddprun-$dp" ] || break; sleep 0.02; done
    check "cgroup v2: the guard removes the job's cgroup" [ ! -d "$cg_mnt$cg_own/ddprun-$dp" ]
    check "nothing left after SIGKILL (cgroup)" no_leftovers 3
else
    skip "cgroup v2: workers and their daemons run in the job's cgroup ddprun-<pid>/g0" "$cg_why"
    skip "cgroup v2: SIGKILL of ddprun: a setsid'ed, double-forked grandchild is gone" "$cg_why"
    skip "cgroup v2: the guard removes the job's cgroup" "$cg_why"
fi

# 10c. DDPRUN_CGROUP=0: no cgroup (said once at -v); process groups, PDEATHSIG, the subreaper and
# the guard still clean up: a grandchild in the worker's group dies with a SIGKILLed ddprun, and
# a daemon is killed when the group ends.
d=$TMP/nocg; mkdir -p "$d"
DDPRUN_CGROUP=0 FW_DIR=$d FW_CHILD=1 FW_SLEEP_MS=20000 timeout -k 5 30 "$DDPRUN" -v --standalone \
    --nproc_per_node=2 "$FW" >"$TMP/nocg.out" 2>&1 &
pid=$!
wait_for_files "$d/pid.0.0" "$d/pid.1.0"
dp=$(child_pid $pid)
sleep 0.2
! grep -q "/ddprun-$dp\$" "/proc/$(cat "$d/pid.0.0")/cgroup"
verdict "DDPRUN_CGROUP=0: the worker stays in ddprun's cgroup"
kill -KILL "$dp"
{ wait $pid; } 2>/dev/null
check "DDPRUN_CGROUP=0: SIGKILL of ddprun: workers and their group's children are gone" \
    no_leftovers 3
[ "$(grep -c "no job cgroup (DDPRUN_CGROUP=0)" "$TMP/nocg.out")" = 1 ]
verdict "DDPRUN_CGROUP=0: -v says once that there is no job cgroup and why"
d=$TMP/nocgd; mkdir -p "$d"
DDPRUN_CGROUP=0 FW_DIR=$d FW_DAEMON=1 FW_SLEEP_MS=300 run_ddprun "$TMP/nocgd.out" --standalone \
    --nproc_per_node=2 "$FW"; rc=$?
[ $rc -eq 0 ] && daemons_gone "$d/daemon.0.0" "$d/daemon.1.0"
verdict "DDPRUN_CGROUP=0: a daemon of a worker is killed when the group ends (exit 0)"
check "nothing left after DDPRUN_CGROUP=0 runs" no_leftovers 1

# 11. A worker's child that outlives it is not left behind.
FW_CHILD=1 FW_SLEEP_MS=200 run_ddprun "$TMP/orphan.out" --standalone --nproc_per_node=2 "$FW"
check "orphaned grandchildren are cleaned up" no_leftovers

# 12. --tee: every line tagged with torchrun's default prefix [<role><local_rank>]:, never torn.
FW_LINES=300 FW_LINE_LEN=100 run_ddprun "$TMP/tee.out" --standalone --nproc_per_node=4 \
    --tee 3 --log_dir "$TMP/teelogs" "$FW"
n=$(grep -cE '^\[default[0-3]\]:line [0-9]+ from rank [0-3]x+$' "$TMP/tee.out")
bad=$(grep -vE '^\[default[0-3]\]:line [0-9]+ from rank [0-3]x+$|^ddprun\[' "$TMP/tee.out" | wc -l)
[ "$n" -eq 1200 ] && [ "$bad" -eq 0 ]
verdict "--tee: 1200 whole tagged lines, none torn ($n good, $bad bad)"
tagok=1
for r in 0 1 2 3; do
    m=$(grep -cE "^\[default$r\]:line [0-9]+ from rank $r" "$TMP/tee.out")
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
[ "$(grep -c '^\[default0\]:' "$TMP/crlf.out")" = 4 ] && ! grep -qE '^\[default0\]:\r?$' "$TMP/crlf.out"
verdict "--tee: CRLF ends one line (4 tagged lines, none empty)"

# 12b'. --tee with lines longer than the 64 KiB the agent holds: they reach the console as tagged
# pieces, never with an empty tagged line, and the log file gets each line as written. The line
# end comes in a write of its own (echo), as a program's print often does.
printf '#!/bin/sh\nfor n in 70000 65536 65535 131073; do head -c $n /dev/zero | tr "\\0" x; echo; done\necho next\n' \
    > "$TMP/long.sh"
chmod +x "$TMP/long.sh"
run_ddprun "$TMP/long.out" --standalone --nproc_per_node=1 --tee 3 --log_dir "$TMP/longlogs" \
    "$TMP/long.sh"; rc=$?
xs=$(grep '^\[default0\]:x' "$TMP/long.out" | sed 's/^\[default0\]://' | tr -d '\n' | wc -c)
[ $rc -eq 0 ] && ! grep -qx '\[default0\]:' "$TMP/long.out" && [ "$xs" = 332144 ] && \
    grep -qx '\[default0\]:next' "$TMP/long.out"
verdict "--tee: 70000/65536/65535/131073-byte lines in tagged pieces, no empty line ($xs x)"
[ "$(awk '{ printf "%d ", length($0) }' "$TMP/longlogs/attempt_0/0/stdout.log")" = \
    "70000 65536 65535 131073 4 " ]
verdict "--tee: the log file holds the long lines as written"

# 12c. --log_line_prefix_template: torchrun's macros, rendered per worker; PET_* and torchrun's
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE work too.
host=$(hostname)
FW_LINES=3 run_ddprun "$TMP/pfx.out" --standalone --nproc_per_node=2 --tee 1 --role trainer \
    --log-line-prefix-template '${hostname}:${rank}/${role_name}${local_rank}| ' "$FW"
[ "$(grep -cE "^$host:([01])/trainer\\1\\| line [0-9] from rank \\1\$" "$TMP/pfx.out")" = 6 ]
verdict "--log-line-prefix-template: 6 lines tagged '$host:<rank>/trainer<local_rank>| '"
FW_LINES=2 PET_LOG_LINE_PREFIX_TEMPLATE='<$rank>' run_ddprun "$TMP/pfxpet.out" --standalone \
    --nproc_per_node=2 --tee 3 "$FW"
[ "$(grep -cE '^<[01]>line [0-9] from rank [01]$' "$TMP/pfxpet.out")" = 4 ]
verdict "PET_LOG_LINE_PREFIX_TEMPLATE tags the lines"
FW_LINES=2 TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='{$local_rank}' run_ddprun "$TMP/pfxte.out" \
    --standalone --nproc_per_node=2 --tee 3 "$FW"
[ "$(grep -cE '^\{[01]\}line [0-9] from rank [01]$' "$TMP/pfxte.out")" = 4 ]
verdict "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE tags the lines"
d=$TMP/pfxbad; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/pfxbad.out" --standalone --log_line_prefix_template '${node}' "$FW"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$TMP/pfxbad.out")" = 1 ] && \
    grep -q -- "--log_line_prefix_template: unknown macro 'node'" "$TMP/pfxbad.out" && \
    [ ! -f "$d/pid.0.0" ]
verdict "unknown \${macro} -> exit 2, one line naming the flag, nothing started"

# 12d. --duplicate_stdout_filters / --duplicate_stderr_filters: tee'd console lines that contain
# a filter are also written, tagged, to attempt_N/filtered_std{out,err}.log (shown ranks only).
FW_LINES=12 run_ddprun "$TMP/dup.out" --standalone --nproc_per_node=3 --tee 3 \
    --local_ranks_filter 0,1 --log_dir "$TMP/duplogs" --duplicate-stdout-filters 'line 1 ,line 3 ' \
    --duplicate_stderr_filters 'line 11' "$FW"; rc=$?
fo=$TMP/duplogs/attempt_0/filtered_stdout.log; fe=$TMP/duplogs/attempt_0/filtered_stderr.log
[ $rc -eq 0 ] && [ "$(sort "$fo" | tr '\n' '|')" = \
    "[default0]:line 1 from rank 0|[default0]:line 3 from rank 0|[default1]:line 1 from rank 1|[default1]:line 3 from rank 1|" ]
verdict "--duplicate-stdout-filters: matching tee'd lines of shown ranks, tagged, in filtered_stdout.log"
[ -f "$fe" ] && [ ! -s "$fe" ] && [ "$(grep -c 'from rank' "$TMP/dup.out")" = 24 ] && \
    [ "$(wc -l < "$TMP/duplogs/attempt_0/2/stdout.log")" = 12 ]
verdict "console and per-rank logs unchanged; filtered_stderr.log created, empty"
FW_LINES=12 FW_STDERR=1 run_ddprun "$TMP/dup2.out" --standalone --nproc_per_node=2 --tee 2 \
    --log_dir "$TMP/dup2logs" --duplicate_stderr_filters 'line 11,' "$FW"; rc=$?
[ $rc -eq 0 ] && [ ! -e "$TMP/dup2logs/attempt_0/filtered_stdout.log" ] && \
    [ "$(sort "$TMP/dup2logs/attempt_0/filtered_stderr.log" | tr '\n' '|')" = \
    "[default0]:line 11 from rank 0|[default1]:line 11 from rank 1|" ]
verdict "--duplicate_stderr_filters: matching stderr lines in filtered_stderr.log"
d=$TMP/duprs; mkdir -p "$d"
FW_DIR=$d FW_LINES=2 FW_RANK=1 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 PET_DUPLICATE_STDOUT_FILTERS='line 0' \
    run_ddprun "$TMP/duprs.out" --standalone --nproc_per_node=2 --tee 3 --max_restarts 1 \
    --log_dir "$TMP/duprslogs" "$FW"; rc=$?
[ $rc -eq 0 ] && grep -qx "\[default1\]:line 0 from rank 1" "$TMP/duprslogs/attempt_0/filtered_stdout.log" \
    && [ "$(wc -l < "$TMP/duprslogs/attempt_1/filtered_stdout.log")" = 2 ]
verdict "PET_DUPLICATE_STDOUT_FILTERS: one filtered file per attempt"

# 12e. --virtual-local-rank: LOCAL_RANK=0 and each worker sees only its own device.
d=$TMP/vlr; mkdir -p "$d"
FW_DIR=$d CUDA_VISIBLE_DEVICES="5, 7" run_ddprun "$TMP/vlr.out" --standalone --nproc_per_node=2 \
    --virtual-local-rank "$FW"; rc=$?
[ $rc -eq 0 ] && grep -qx "LOCAL_RANK=0" "$d/env.0.0" && grep -qx "LOCAL_RANK=0" "$d/env.1.0" && \
    grep -qx "RANK=1" "$d/env.1.0" && grep -qx "CUDA_VISIBLE_DEVICES=5" "$d/env.0.0" && \
    grep -qx "CUDA_VISIBLE_DEVICES=7" "$d/env.1.0" && \
    [ "$(grep -c '^CUDA_VISIBLE_DEVICES=' "$d/env.1.0")" = 1 ] && \
    grep -qx "DDPRUN_LOCAL_RANK=0" "$d/env.0.0" && grep -qx "DDPRUN_LOCAL_RANK=1" "$d/env.1.0"
verdict "--virtual-local-rank: LOCAL_RANK=0, CUDA_VISIBLE_DEVICES=5 and =7 (the parent's entries), DDPRUN_LOCAL_RANK=0 and 1"
d=$TMP/vlr2; mkdir -p "$d"
(unset CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES
 FW_DIR=$d PET_VIRTUAL_LOCAL_RANK=1 run_ddprun "$TMP/vlr2.out" --standalone --nproc_per_node=2 "$FW")
grep -qx "LOCAL_RANK=0" "$d/env.1.0" && grep -qx "CUDA_VISIBLE_DEVICES=0" "$d/env.0.0" && \
    grep -qx "CUDA_VISIBLE_DEVICES=1" "$d/env.1.0"
verdict "PET_VIRTUAL_LOCAL_RANK=1 without a visible list: CUDA_VISIBLE_DEVICES=<local_rank>"
d=$TMP/vlr3; mkdir -p "$d"
FW_DIR=$d CUDA_VISIBLE_DEVICES=5,7 run_ddprun "$TMP/vlr3.out" --standalone --nproc_per_node=2 "$FW"
grep -qx "LOCAL_RANK=1" "$d/env.1.0" && grep -qx "CUDA_VISIBLE_DEVICES=5,7" "$d/env.1.0"
verdict "without the flag: LOCAL_RANK=<local_rank>, CUDA_VISIBLE_DEVICES inherited"
d=$TMP/vlr4; mkdir -p "$d"
FW_DIR=$d CUDA_VISIBLE_DEVICES=3 run_ddprun "$TMP/vlr4.out" --standalone --nproc_per_node=2 \
    --virtual_local_rank "$FW"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$TMP/vlr4.out")" = 1 ] && \
    grep -q -- "--virtual_local_rank: 2 workers but CUDA_VISIBLE_DEVICES='3'" "$TMP/vlr4.out" && \
    [ ! -f "$d/pid.0.0" ]
verdict "--virtual_local_rank with too few devices -> exit 2, one line, nothing started"
if [ "$(nproc)" -ge 2 ]; then
    FW_DIR=$d CUDA_VISIBLE_DEVICES=3 run_ddprun "$TMP/vlr5.out" --standalone --nproc_per_node=cpu \
        --virtual_local_rank "$FW"; rc=$?
    [ $rc -eq 2 ] && grep -q -- "--virtual_local_rank: 2 workers but CUDA_VISIBLE_DEVICES='3'" \
        "$TMP/vlr5.out" && [ ! -f "$d/pid.0.0" ]
    verdict "--nproc_per_node=cpu: the short list is found once the count is known, exit 2"
else
    skip "--nproc_per_node=cpu: the agent finds the short list, exit 2, nothing started" "one CPU"
fi

# 12f. Accepted for compatibility: --event_log_handler null|console, --logs_specs default.
run_ddprun "$TMP/evh.out" --standalone --event-log-handler console --logs_specs=default "$FW"; rc=$?
check "--event-log-handler console and --logs_specs default are accepted" [ $rc -eq 0 ]
PET_EVENT_LOG_HANDLER=null run_ddprun "$TMP/evh2.out" --standalone --logs-specs default "$FW"; rc=$?
check "PET_EVENT_LOG_HANDLER=null and --logs-specs default are accepted" [ $rc -eq 0 ]
run_ddprun "$TMP/evh3.out" --standalone --event_log_handler=file "$FW"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$TMP/evh3.out")" = 1 ] && \
    grep -q -- "--event_log_handler: 'file' is not an event log handler (null, console, json or json:PATH)" \
    "$TMP/evh3.out"
verdict "--event_log_handler file -> exit 2 naming the flag and the allowed values"
run_ddprun "$TMP/lsp.out" --standalone --logs-specs custom "$FW"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$TMP/lsp.out")" = 1 ] && grep -q -- "--logs-specs: 'custom'" "$TMP/lsp.out"
verdict "--logs-specs custom -> exit 2, one line naming the flag"

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
    skip "--nproc_per_node=gpu without a GPU -> clear error, exit 2" "a GPU is present"
else
    [ $rc -eq 2 ] && grep -qi "no CUDA device" "$TMP/bad5.out"
    verdict "--nproc_per_node=gpu without a GPU -> clear error, exit 2"
fi
# 15b. Out of file descriptors part way through starting the group: one line names the resource
# and its limit, exit non-zero, and the workers already started are stopped.
(ulimit -n 64; FW_SLEEP_MS=20000 OMP_NUM_THREADS=1 run_ddprun "$TMP/emfile.out" --standalone \
    --nproc_per_node=200 "$FW"); rc=$?
[ $rc -ne 0 ] && [ "$(wc -l < "$TMP/emfile.out")" = 1 ] && grep -qE \
    'too many open files starting worker [0-9]+ of 200 \(RLIMIT_NOFILE 64\): raise `ulimit -n`$' \
    "$TMP/emfile.out"
verdict "ulimit -n 64 and 200 workers: one line naming RLIMIT_NOFILE 64, exit $rc"
check "nothing left after running out of file descriptors" no_leftovers 3

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

# 16d. ddprun's stdout is a pipe whose reader leaves (`ddprun ... yes | head -1`): the workers'
# writes end as they would without ddprun (EPIPE/SIGPIPE), and stderr says why.
for tee in "" "--tee 3"; do
    first=$( { timeout -k 5 20 "$DDPRUN" --standalone --nproc_per_node=2 $tee /usr/bin/yes \
        2>"$TMP/yes.err"; echo $? >"$TMP/yes.rc"; } | head -1)
    rcs=$(cat "$TMP/yes.rc")
    [ "$rcs" != 124 ] && [ "$rcs" != 137 ] && case $first in y|"[default"[01]"]:y") true ;; *) false ;; esac \
        && grep -q "stdout is a closed pipe" "$TMP/yes.err"
    verdict "ddprun ${tee:+$tee }yes | head -1 ends (ddprun exit $rcs), stderr says why"
done
check "nothing left after the closed pipe" no_leftovers

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

# 18. Workers get the open-file limit ddprun was started with, whatever the job store raised its
# own to for its connections (a program using select() must keep its 1024).
out=$(bash -c "ulimit -Sn 1000; exec timeout -k 5 30 '$DDPRUN' --standalone --nproc_per_node=2 \
    --no_python sh -c 'ulimit -Sn'" 2>/dev/null)
check "workers keep ddprun's soft open-file limit (got: $(echo $out))" [ "$(echo $out)" = "1000 1000" ]

finish
