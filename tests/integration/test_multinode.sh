#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 47
# Several agents on 127.0.0.1 forming one job through the c10d-style rendezvous: the
# job forms and ranks are right, a worker failure restarts every node, restarts are counted
# server-side, a killed agent is detected and the others carry on (min nodes), a late node
# scales the job up, and nothing is left running.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
fake_worker_env_clear

# Fast timeouts so that every round closes within a second. A node is dead after 1 s without a
# keep-alive: short enough for the tests that kill one, long enough for a loaded CI machine.
CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=5,close_timeout=5

# agent NAME NNODES ARGS...: starts one ddprun in the background (pid in $LAST), output in
# $TMP/NAME.out.
agent() {
    local name=$1 nn=$2; shift 2
    timeout -k 5 40 "$DDPRUN" --nnodes="$nn" --nproc_per_node=2 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id="$RUN" --rdzv_conf="$CONF" "$@" \
        >"$TMP/$name.out" 2>&1 &
    LAST=$!
}
count_files() { ls "$1" 2>/dev/null | grep -c "^$2" ; }

# 1. Two nodes form one job of 4 ranks.
PORT=$(free_port); RUN=form; d=$TMP/form; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=200
agent form0 2 "$FW"; a=$LAST; agent form1 2 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ]
verdict "two agents form one job and both exit 0" || show_tail "$TMP/form0.out" "$TMP/form1.out"
ranks=$(cat "$d"/env.*.0 2>/dev/null | grep -c '^WORLD_SIZE=4$')
check "4 workers with WORLD_SIZE=4" [ "$ranks" = 4 ]
[ -f "$d/env.0.0" ] && [ -f "$d/env.1.0" ] && [ -f "$d/env.2.0" ] && [ -f "$d/env.3.0" ]
verdict "ranks 0..3 each once"
m=$(cat "$d"/env.*.0 | grep '^MASTER_PORT=' | sort -u | wc -l)
g=$(cat "$d"/env.*.0 | grep -E '^GROUP_RANK=[01]$' | sort | uniq -c | awk '{print $1}' | tr '\n' ' ')
[ "$m" = 1 ] && [ "$g" = "2 2 " ]
verdict "one MASTER_PORT for all, two workers per GROUP_RANK ($g)"

# 1b. A node alone where two are needed: lines say who is there while it waits, then it gives up
# at join_timeout with exit 1 (first line after join_timeout / 4).
PORT=$(free_port); RUN=lone
timeout -k 5 20 "$DDPRUN" --nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=lone \
    --rdzv_conf=join_timeout=2,keep_alive_interval=0.1 "$FW" >"$TMP/lone.out" 2>&1; rc=$?
check "a lone node gives up at join_timeout: exit 1, '1 of min 2 nodes joined within join_timeout=2s'" \
    [ "$rc" = 1 -a -n "$(grep -F "rendezvous 'lone' round 0: 1 of min 2 nodes joined within join_timeout=2s" "$TMP/lone.out")" ]
check "while it waits it says so: 'waiting N s for nodes: 1 of min 2 joined round 0 (max 3)'" \
    grep -qE "rendezvous 'lone' at 127.0.0.1:$PORT: waiting [0-9]+ s for nodes: 1 of min 2 joined round 0 \(max 3\)" "$TMP/lone.out"
check "nothing left after a two-node job" no_leftovers
unset FW_DIR FW_SLEEP_MS

# 1b. ddprun status shows the run's round, node counts, members and states (table and --json;
# every member with --all, the first 20 without).
# The workers run until the status commands are done (the agents are stopped then): however
# slow the machine, the store is there for every one of them.
PORT=$(free_port); RUN=stat; d=$TMP/stat; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=30000
agent st0 2 "$FW"; a=$LAST; agent st1 2 "$FW"; b=$LAST
for i in $(seq 200); do [ -f "$d/env.3.0" ] && [ -f "$d/env.0.0" ] && break; sleep 0.05; done
"$DDPRUN" status --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=stat >"$TMP/stat.txt" 2>&1
"$DDPRUN" status --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id stat --json >"$TMP/stat.json" 2>&1
"$DDPRUN" status --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id stat --all >"$TMP/stat_all.txt" 2>&1
"$DDPRUN" status --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=nosuch >"$TMP/stat2.txt" 2>&1; src=$?
kill -TERM $a $b 2>/dev/null
wait $a; wait $b
# The tables without their ages (silent, last_beat: "0.1s"), which move between two calls.
without_ages() { sed -E 's/[0-9]+(\.[0-9]+)?s( |$)/Ns\2/g' "$1" | tr -s ' '; }
grep -q "run stat: round 0, RUNNING" "$TMP/stat.txt" && \
    grep -qx "nodes 2: 2 running, 0 joining, 0 spare, 0 idle" "$TMP/stat.txt" && \
    [ "$(grep -cE '^[01] +127.0.0.1 +2 +running' "$TMP/stat.txt")" = 2 ] &&
    [ "$(without_ages "$TMP/stat.txt")" = "$(without_ages "$TMP/stat_all.txt")" ]
verdict "ddprun status: round 0 RUNNING, the node counts and 2 member rows (the same with --all)" ||
    show_tail "$TMP/stat.txt" "$TMP/stat_all.txt" "$TMP/st0.out"
json_ok() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["state"]=="RUNNING" and len(d["members"])==2 and d["nodes"]["total"]==2' "$TMP/stat.json"; }
check "ddprun status --json is valid JSON with 2 members and their count" json_ok
[ $src = 1 ] && grep -q "nosuch" "$TMP/stat2.txt"
verdict "ddprun status of an unknown run: exit 1, says so"
"$DDPRUN" status --rdzv_id=stat --rdzv-endpoint >"$TMP/stat3.txt" 2>&1; src=$?
[ $src = 2 ] && grep -q -- "--rdzv_endpoint needs a value" "$TMP/stat3.txt"
verdict "ddprun status: a flag without its value is named, exit 2"
"$DDPRUN" status --bogus --rdzv_id=stat >"$TMP/stat4.txt" 2>&1; src=$?
[ $src = 2 ] && grep -q -- "unknown flag '--bogus'" "$TMP/stat4.txt" && \
    "$DDPRUN" status "" - >/dev/null 2>&1; [ $? = 2 ]
verdict "ddprun status: an unknown or empty flag is refused, exit 2"
unset FW_DIR FW_SLEEP_MS
# 1c. With heartbeat supervision each agent reports its progress: ddprun status shows each node's
# highest step and the age of its most silent worker's last beat (table and --json).
PORT=$(free_port); RUN=steps
cat >"$TMP/stepper.sh" <<'EOF'
#!/bin/sh
echo $((RANK * 10 + 7)) >"$DDPRUN_HEARTBEAT_FILE"
sleep 3
EOF
chmod +x "$TMP/stepper.sh"
agent sp0 2 --heartbeat_timeout=10 "$TMP/stepper.sh"; a=$LAST
agent sp1 2 --heartbeat_timeout=10 "$TMP/stepper.sh"; b=$LAST
# goodput: each worker beat once, so the node's productive time is a few ms at most.
row() { grep -qE "^$1 +127.0.0.1 +2 +running +[0-9.]+s +$2 +[0-9]+\.[0-9]s +[0-9]\.[0-9]%$" "$TMP/steps.txt"; }
for i in $(seq 50); do
    "$DDPRUN" status --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=steps >"$TMP/steps.txt" 2>&1
    row 0 17 && row 1 37 && break
    sleep 0.1
done
"$DDPRUN" status --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=steps --json >"$TMP/steps.json" 2>&1
wait $a; ra=$?; wait $b; rb=$?
row 0 17 && row 1 37
verdict "ddprun status: each node's highest step (17, 37) and last beat age" ||
    show_tail "$TMP/steps.txt"
steps_json() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); m=sorted(d["members"], key=lambda m: m["group_rank"]); assert [x["step"] for x in m]==[17,37] and all(0<=x["beat_age_ms"]<10000 for x in m)' "$TMP/steps.json"
}
check "ddprun status --json: step and beat_age_ms per member" steps_json
check "both agents of the progress run exit 0 ($ra $rb)" [ "$ra" = 0 -a "$rb" = 0 ]

# 1d. The no-progress guard across nodes: one node's worker hangs at step 5 in every attempt, the
# other's makes progress. After 2 attempts without passing step 5 the first node stops, and stops
# the run for the other too: it is refused at once with the reason, instead of waiting for the
# first until join_timeout (20 s).
PORT=$(free_port); RUN=noprog
cat >"$TMP/noprog.sh" <<'EOF'
#!/bin/sh
if [ "$NOPROG_STUCK" = 1 ]; then echo 5 >"$DDPRUN_HEARTBEAT_FILE"; exec sleep 600; fi
i=0
while [ $i -lt 300 ]; do
    i=$((i + 1)); echo $((TORCHELASTIC_RESTART_COUNT * 1000 + i)) >"$DDPRUN_HEARTBEAT_FILE"
    sleep 0.1
done
EOF
chmod +x "$TMP/noprog.sh"
hb="--heartbeat_timeout=1 --stacks_timeout=2 --max_restarts=5 --max_no_progress_restarts=2"
NOPROG_STUCK=1 agent np0 2 --nproc_per_node=1 $hb "$TMP/noprog.sh"; a=$LAST
agent np1 2 --nproc_per_node=1 $hb "$TMP/noprog.sh"; b=$LAST
wait $a; ra=$?
t1=$(date +%s%N)
wait $b; rb=$?
t2=$(date +%s%N)
late=$(( (t2 - t1) / 1000000 ))
[ "$ra" = 1 ] && [ "$rb" = 1 ] && [ $late -lt 10000 ] &&
    grep -qF "2 attempt(s) in a row ended without passing step 5 (--max_no_progress_restarts=2): not restarting" "$TMP/np0.out" &&
    grep -qE "rendezvous 'noprog' failed: stopped by node [01] \(127.0.0.1\): 2 attempt\(s\) in a row ended without passing step 5" "$TMP/np1.out"
verdict "no progress on one node stops both: exit 1 and 1, the other refused $late ms later with the reason (rc $ra $rb)" ||
    show_tail "$TMP/np0.out" "$TMP/np1.out"
check "the stopping node's summary says why it did not restart" \
    grep -q "Not restarted: 2 attempt(s) in a row made no progress past step 5" "$TMP/np0.out"

# A server whose STATUS JSON lacks fields or has them ill-typed (an older or newer store): the
# table prints "-" there, never "(null)" or a made-up 0. The fake store answers VALIDATE + PING,
# then one RDZV_STATUS (u8 0x53, u8 0, u64 length, JSON).
python3 - "$TMP/fake.port" <<'PY' &
import socket, struct, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); s.settimeout(10)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept(); c.settimeout(10)
hs = b""
while len(hs) < 10: hs += c.recv(10 - len(hs))   # VALIDATE (5 bytes) + PING (5 bytes)
c.sendall(hs[6:10])                               # the PING's nonce back
c.recv(4096)                                      # RDZV_STATUS run
j = b'{"run": "odd", "round": "one", "goodput": {"ratio": 0.5, "wall_ms": "9", "restarts": -1}, "members": [{"group_rank": 0, "nproc": "2", "step": "9", "beat_age_ms": -5, "goodput": {"ratio": "1"}}, 7]}'
c.sendall(bytes([0x53, 0]) + struct.pack("<Q", len(j)) + j)
c.recv(1)
PY
fake=$!
for i in $(seq 100); do [ -f "$TMP/fake.port" ] && break; sleep 0.05; done
env -u DDPRUN_TOKEN -u DDPRUN_TOKEN_FILE timeout -k 2 10 "$DDPRUN" status \
    --rdzv_endpoint="127.0.0.1:$(cat "$TMP/fake.port" 2>/dev/null)" --rdzv_id=odd \
    >"$TMP/stat5.txt" 2>&1; src=$?
wait $fake
[ $src = 0 ] && ! grep -q "(null)" "$TMP/stat5.txt" && \
    grep -q "^run odd: round -, -, restarts - of -, nodes min - max -$" "$TMP/stat5.txt" && \
    grep -qx 'goodput 50.0% of - s; lost - s in - restarts (- node)' "$TMP/stat5.txt" &&
    grep -qE '^0 +- +- +- +- +- +- +-$' "$TMP/stat5.txt" && grep -qE '^- +- +- +- +- +- +- +-$' "$TMP/stat5.txt"
verdict "ddprun status: missing or ill-typed fields print as -, never (null)"

# 2. A worker failure on one node restarts the group on every node; restarts counted.
PORT=$(free_port); RUN=fail1; d=$TMP/fail1; mkdir -p "$d"
# The other ranks run 1 s: the failure must reach node 0 while its workers still run, also when
# a loaded machine starts node 1's workers late.
export FW_DIR=$d FW_RANK=3 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 FW_SLEEP_MS=1000
agent f0 2 --max_restarts=1 "$FW"; a=$LAST; agent f1 2 --max_restarts=1 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ]
verdict "a failure on node 1 restarts both nodes, then success" || show_tail "$TMP/f0.out" "$TMP/f1.out"
r1=$(grep -l '^TORCHELASTIC_RESTART_COUNT=1$' "$d"/env.* 2>/dev/null | wc -l)
[ "$r1" = 4 ]
verdict "all 4 workers of the second round see TORCHELASTIC_RESTART_COUNT=1 ($r1)" ||
    { echo "# $(cd "$d" && grep -H '^TORCHELASTIC_RESTART_COUNT=' env.* | tr '\n' ' ')"; show_tail "$TMP/f0.out" "$TMP/f1.out"; }
unset FW_DIR FW_RANK FW_EXIT FW_FAIL_ATTEMPTS FW_SLEEP_MS

# 2b. The end of round 0 reaches the agent only after it has joined round 1: a node that ended the
# round itself (a failure, a hang) re-joins at once and may hear the next round's JOIN reply before
# the old end key's. A proxy holds the watch connection's replies back 1 s, past round 1's close
# (last_call_timeout 0.3 s; --nnodes=1 would host its own store); the round-1 group (running
# 2 s) must not be taken for ended and stopped, which would cost a third round.
"$BIN/ddp-rendezvous" --port 0 --no-auth >"$TMP/stale.daemon" 2>&1 &
dpid=$!
wait_for "$TMP/stale.daemon" '^listening on ' 5
python3 tests/helpers/watch_delay_proxy.py "$TMP/stale.port" \
    "$(sed -nE 's/^listening on .*:([0-9]+)$/\1/p' "$TMP/stale.daemon")" 1000 20 &
proxy=$!
for i in $(seq 100); do [ -f "$TMP/stale.port" ] && break; sleep 0.05; done
PORT=$(cat "$TMP/stale.port"); RUN=stale; d=$TMP/stale; mkdir -p "$d"
FW_DIR=$d FW_EXIT=1 FW_FAIL_ATTEMPTS=1 FW_SLEEP_MS=2000 \
    agent stale0 1:2 --nproc_per_node=1 --max_restarts=2 "$FW"; a=$LAST
wait $a; ra=$?
kill $proxy $dpid 2>/dev/null; wait $proxy $dpid 2>/dev/null
[ "$ra" = 0 ] && [ -f "$d/env.0.1" ] && [ ! -f "$d/env.0.2" ] &&
    ! grep -q "round 1 ended" "$TMP/stale0.out"
verdict "a round-0 end heard after joining round 1 stops nothing: 2 rounds, exit 0 (rc $ra)" ||
    show_tail "$TMP/stale0.out"

# 3. max_restarts spent: every node fails with exit 1 and a summary or message.
PORT=$(free_port); RUN=fail2; d=$TMP/fail2; mkdir -p "$d"
export FW_DIR=$d FW_RANK=0 FW_EXIT=7 FW_SLEEP_MS=3000
agent g0 2 --max_restarts=1 "$FW"; a=$LAST; agent g1 2 --max_restarts=1 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 1 ] && [ "$rb" = 1 ]
verdict "restarts spent: both agents exit 1"
check "the failing node's summary names rank 0 and exit code 7" \
    grep -qE "exitcode  : 7" "$TMP/g0.out" "$TMP/g1.out"
check "the message says max_restarts is spent" grep -q "max_restarts" "$TMP/g0.out" "$TMP/g1.out"
check "nothing left after a failed two-node job" no_leftovers
unset FW_DIR FW_RANK FW_EXIT FW_SLEEP_MS

# 4. SIGKILL of a non-hosting agent: the survivor re-forms alone (min 1) and finishes.
PORT=$(free_port); RUN=kill; d=$TMP/kill; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=1500
agent k0 1:2 "$FW"; a=$LAST
sleep 0.2
agent k1 1:2 "$FW"; b=$LAST
for i in $(seq 100); do [ -f "$d/env.3.0" ] || [ -f "$d/env.3.1" ] && break; sleep 0.05; done
kb=$(child_pid $b)
t0=$(date +%s%N)
kill -KILL "$kb"
wait $a; ra=$?; { wait $b; } 2>/dev/null
t1=$(date +%s%N)
check "after SIGKILL of one agent the other finishes alone (exit 0)" [ "$ra" = 0 ]
last=$(ls "$d"/env.0.* | sort -t. -k3 -n | tail -1)
check "the survivor re-formed as a world of 2 ($(basename "$last"))" grep -qx 'WORLD_SIZE=2' "$last"
check "the killed agent's workers and children are gone" no_leftovers 3
unset FW_DIR FW_SLEEP_MS

# 5. Scale-up: a node joining a running 1-node job makes it re-form with both.
PORT=$(free_port); RUN=scale; d=$TMP/scale; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=2500 FW_TERM_EXIT=143
agent s0 1:2 "$FW"; a=$LAST
for i in $(seq 100); do [ -f "$d/env.1.0" ] && break; sleep 0.05; done
agent s1 1:2 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ]
verdict "scale-up: both agents exit 0"
check "the first round had WORLD_SIZE=2" grep -qx 'WORLD_SIZE=2' "$d/env.0.0"
check "a later round had WORLD_SIZE=4" grep -qx 'WORLD_SIZE=4' $(ls "$d"/env.3.* 2>/dev/null | tail -1)
no_restart_counted() { ! grep -q '^TORCHELASTIC_RESTART_COUNT=[1-9]' "$d"/env.*; }
check "scale-up did not count as a restart" no_restart_counted
unset FW_DIR FW_SLEEP_MS FW_TERM_EXIT

# 5b. Both nodes fail together (every rank exits 1 after 300 ms, or when stopped): each agent
#     prints a summary, but only the node whose FAIL the store counted first has the root-cause
#     block; the other names that failure (the same rank) as on another node, and both shutdown
#     events carry the same root cause.
PORT=$(free_port); RUN=together; d=$TMP/together; mkdir -p "$d"
export FW_DIR=$d FW_EXIT=1 FW_DELAY_MS=300 FW_TERM_EXIT=1
agent tg0 2 --event_log_handler "json:$d/ev0.jsonl" "$FW"; a=$LAST
agent tg1 2 --event_log_handler "json:$d/ev1.jsonl" "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
unset FW_DIR FW_EXIT FW_DELAY_MS FW_TERM_EXIT
title='Root Cause (first observed failure):'
root=$(grep -l -x "$title" "$TMP/tg0.out" "$TMP/tg1.out")
other=$(grep -l -x "$title on another node" "$TMP/tg0.out" "$TMP/tg1.out")
root_rank=$(sed -n "/^$title\$/,\$p" $root /dev/null | sed -n 's/^  rank      : \([0-9]*\) .*/\1/p' | head -1)
named=$(grep -h -A1 -x "$title on another node" $other /dev/null | tail -1)
causes=$(python3 -c '
import json, sys
print("|".join(sorted({json.loads(l).get("root_cause") or "null" for f in sys.argv[1:]
                       for l in open(f) if json.loads(l)["event"] == "shutdown"})))' "$d"/ev0.jsonl "$d"/ev1.jsonl 2>/dev/null)
echo "# together: root cause in ${root:-?} (rank ${root_rank:-?}); the other names: ${named:-?}; events: ${causes:-?}"
[ "$ra" = 1 ] && [ "$rb" = 1 ] && [ "$(echo $root | wc -w)" = 1 ] && [ "$(echo $other | wc -w)" = 1 ] &&
    [ "$root" != "$other" ] && [[ "$named" == *" round 0: rank $root_rank ("*") exited with code 1" ]] &&
    [ "$causes" = "${named#  }" ]
verdict "two nodes fail together: one root cause, the same in both summaries and shutdown events" ||
    show_tail "$TMP/tg0.out" "$TMP/tg1.out"

# 6. A standalone ddp-rendezvous daemon serves the rendezvous, with a job token on every side.
tokhex=$(random_token "$TMP/token")
"$BIN/ddp-rendezvous" --port 0 --token-file "$TMP/token" >"$TMP/daemon.out" 2>"$TMP/daemon.err" &
dpid=$!
wait_for "$TMP/daemon.out" '^listening on ' 5
PORT=$(sed -E 's/.*:([0-9]+)$/\1/' "$TMP/daemon.out"); RUN=daemon; d=$TMP/daemon; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=100 DDPRUN_TOKEN_FILE=$TMP/token
agent dm0 2 "$FW"; a=$LAST; agent dm1 2 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ] && [ "$(cat "$d"/env.*.0 | grep -c '^WORLD_SIZE=4$')" = 4 ]
verdict "two agents rendezvous on an authenticated ddp-rendezvous daemon"
check "workers receive the job token for the store" grep -qx "DDPRUN_STORE_TOKEN=$tokhex" "$d/env.3.0"
# The same two commands again: the daemon still holds the finished run 'daemon' (an hour). Each
# agent is refused at once, exits 1 naming the id and what to do, and starts no worker (it used to
# exit 0, "the job finished without this node: nothing to do", having run nothing).
d=$TMP/daemon_again; mkdir -p "$d"; export FW_DIR=$d
agent dm0again 2 "$FW"; a=$LAST; agent dm1again 2 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
said="rendezvous 'daemon' finished already: use another --rdzv_id (the store keeps a finished run 3600s after its last node leaves"
[ "$ra" = 1 ] && [ "$rb" = 1 ] && [ "$(count_files "$d" env.)" = 0 ] &&
    grep -qF "$said" "$TMP/dm0again.out" && grep -qF "$said" "$TMP/dm1again.out"
verdict "the same job again on a run id the daemon holds finished: both exit 1 naming the id, no worker" ||
    show_tail "$TMP/dm0again.out" "$TMP/dm1again.out"
export FW_DIR=$TMP/daemon
random_token "$TMP/badtoken" >/dev/null
DDPRUN_TOKEN_FILE=$TMP/badtoken timeout 20 "$DDPRUN" --nnodes=2 --nproc_per_node=1 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=daemon2 --rdzv_conf="$CONF" \
    "$FW" >"$TMP/badtok.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "127.0.0.1:$PORT" "$TMP/badtok.out"
verdict "an agent with the wrong token is refused: exit 1, names the store"
# 6b. Restarts do not grow the daemon's store: as each round closes, the worker keys
#     ("ddpw/<run>/<round>/") and round-end keys of rounds before the previous one go. Every rank
#     sets a 100 kB key a round; rank 3 fails rounds 0-3; the store keeps rounds 3 and 4 only.
PORT=$(sed -E 's/.*:([0-9]+)$/\1/' "$TMP/daemon.out"); RUN=keys; d=$TMP/keys; mkdir -p "$d"
cat >"$d/w.sh" <<EOF
#!/bin/sh
"$BIN/tests/store_client" "\$DDPRUN_STORE_PORT" set-size "ddpw/\$DDPRUN_RUN_ID/\$DDPRUN_ROUND/b\$RANK" 100000
[ "\$RANK" != 3 ] || [ "\$DDPRUN_ROUND" -ge 4 ] || exit 1
sleep 0.5
EOF
chmod +x "$d/w.sh"
agent k0 2 --max_restarts=4 --no_python "$d/w.sh"; a=$LAST
agent k1 2 --max_restarts=4 --no_python "$d/w.sh"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
"$BIN/tests/store_client" "$PORT" stats >"$TMP/keys.stats" 2>&1
mem=$(sed -n 's/^mem_used //p' "$TMP/keys.stats")
check "5 rounds x 4 ranks x 100 kB: the daemon holds 2 rounds' keys, not 5 (mem_used ${mem:-?})" \
    bash -c "[ $ra = 0 ] && [ $rb = 0 ] && [ -n '$mem' ] && [ '$mem' -lt 1300000 ]"
kill -TERM $dpid; wait $dpid
unset FW_DIR FW_SLEEP_MS DDPRUN_TOKEN_FILE

# 6c. The daemon is SIGKILLed mid-job and started again on the same address: the agents keep
# trying to reach it (store_reconnect_timeout), stop their groups and form a new round on the
# fresh store, which knows nothing of the run. The agents carry what it forgot: the new round is
# numbered after the last one (DDPRUN_ROUND 2, so no worker key of round 0 is ever met again)
# and the restart counted before the loss stays counted (TORCHELASTIC_RESTART_COUNT=1). Rank 3
# fails round 0; the daemon goes during round 1.
PORT=$(free_port); RUN=phoenix; d=$TMP/phoenix; mkdir -p "$d"
daemon_up() {
    "$BIN/ddp-rendezvous" --port "$PORT" --no-auth >"$TMP/phoenix.d$1" 2>&1 &
    dpid=$!
    wait_for "$TMP/phoenix.d$1" '^listening on ' 5
}
daemon_up 0
export FW_DIR=$d FW_SLEEP_MS=1500 FW_RANK=3 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 FW_TERM_EXIT=143
agent ph0 2 --max_restarts=3 "$FW"; a=$LAST; agent ph1 2 --max_restarts=3 "$FW"; b=$LAST
for i in $(seq 200); do [ -f "$d/env.0.1" ] && [ -f "$d/env.3.1" ] && break; sleep 0.05; done
kill -KILL $dpid; wait $dpid 2>/dev/null
sleep 0.5
daemon_up 1
wait $a; ra=$?; wait $b; rb=$?
kill -TERM $dpid; wait $dpid
[ "$ra" = 0 ] && [ "$rb" = 0 ]
verdict "the daemon killed and restarted on its address: both agents exit 0" ||
    show_tail "$TMP/ph0.out" "$TMP/ph1.out"
check "both agents said they lost the store and reconnected" \
    bash -c "grep -q 'lost the rendezvous store at 127.0.0.1:$PORT' '$TMP/ph0.out' '$TMP/ph1.out' &&
        [ \$(cat '$TMP/ph0.out' '$TMP/ph1.out' | grep -c 'reconnected to the rendezvous store') = 2 ]"
round2() { [ "$(cat "$d"/env.*.2 2>/dev/null | grep -c '^DDPRUN_ROUND=2$')" = 4 ]; }
check "the fresh store's first round is round 2, all 4 ranks (no round number reused)" round2
kept() { [ "$(cat "$d"/env.*.2 2>/dev/null | grep -c '^TORCHELASTIC_RESTART_COUNT=1$')" = 4 ]; }
check "the restart counted before the loss stays counted: TORCHELASTIC_RESTART_COUNT=1 in round 2" kept
unset FW_RANK FW_EXIT FW_FAIL_ATTEMPTS

# 6d. The daemon does not come back: both agents give up after store_reconnect_timeout (2 s),
# exit 1 with a line naming the store and the bound, and leave nothing running.
PORT=$(free_port); RUN=gone; d=$TMP/gone; mkdir -p "$d"
daemon_up 2
export FW_DIR=$d FW_SLEEP_MS=20000
CONF=$CONF,store_reconnect_timeout=2 agent gn0 2 "$FW"; a=$LAST
CONF=$CONF,store_reconnect_timeout=2 agent gn1 2 "$FW"; b=$LAST
for i in $(seq 200); do [ -f "$d/env.0.0" ] && [ -f "$d/env.3.0" ] && break; sleep 0.05; done
t0=$(date +%s%N)
kill -KILL $dpid; wait $dpid 2>/dev/null
wait $a; ra=$?; wait $b; rb=$?
gone_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ra" = 1 ] && [ "$rb" = 1 ] && [ $gone_ms -lt 12000 ]
verdict "a daemon that stays gone: both agents exit 1 after store_reconnect_timeout=2s (${gone_ms} ms)" ||
    show_tail "$TMP/gn0.out" "$TMP/gn1.out"
check "the line names the store and the bound" \
    grep -q "unable to reach the rendezvous store at 127.0.0.1:$PORT again within store_reconnect_timeout=2s" "$TMP/gn0.out"
check "nothing left after the daemon stayed gone" no_leftovers

# 6e. An agent's store ends with that agent: when the hosting agent is SIGKILLed the other one
# checks that nobody serves the address any more (refused) and ends within
# AGENT_EMBEDDED_CHECK_MS (2 s), not store_reconnect_timeout, naming the lost store.
PORT=$(free_port); RUN=hosted; d=$TMP/hosted; mkdir -p "$d"
agent hs0 2 "$FW"; a=$LAST
sleep 0.2
agent hs1 2 "$FW"; b=$LAST
for i in $(seq 200); do [ -f "$d/env.0.0" ] && [ -f "$d/env.3.0" ] && break; sleep 0.05; done
t0=$(date +%s%N)
kill -KILL "$(child_pid $a)"
wait $b; rb=$?
hosted_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait $a
[ "$rb" = 1 ] && [ $hosted_ms -lt 8000 ] &&
    grep -q "lost the rendezvous store at 127.0.0.1:$PORT (served by the agent of another node, which is gone)" "$TMP/hs1.out" &&
    ! grep -q "reconnecting for up to" "$TMP/hs1.out"
verdict "the hosting agent SIGKILLed: the other exits 1 at once naming the agent's store (${hosted_ms} ms)" ||
    show_tail "$TMP/hs1.out"
check "nothing left after the hosting agent died" no_leftovers

# 6f. A daemon killed twice in a row: the agent's new control connection is made (and carries
# the JOIN) while its watch connection is still in its handshake, then lost. The agent must make
# both again and send the JOIN again; before, the loss was ignored while reconnecting, the watch
# connected, and the node waited for a JOIN that was never sent. A fake store plays the daemon:
# it closes the first pair after the JOIN, then (for as many pairs as it takes) answers one
# connection's handshake, closes it if it is the control connection (it sends the JOIN), and
# only then answers the other's; it writes "again" when a JOIN comes on a connection after that.
cat >"$TMP/fake_twice.py" <<'PY'
import os, select, socket, sys, time
portfile, result = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); s.settimeout(10)
open(portfile + ".tmp", "w").write(str(s.getsockname()[1])); os.rename(portfile + ".tmp", portfile)
def hs(c):                                       # VALIDATE u32 magic, PING u32 nonce
    b = b""
    while len(b) < 10:
        chunk = c.recv(10 - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b[6:10]
def first(c, wait):
    return c.recv(1) if select.select([c], [], [], wait)[0] else b""
a, b = s.accept()[0], s.accept()[0]
na, nb = hs(a), hs(b); a.sendall(na); b.sendall(nb)
select.select([a, b], [], [], 5); a.close(); b.close()             # the daemon dies
for _ in range(30):
    a, b = s.accept()[0], s.accept()[0]
    na, nb = hs(a), hs(b)
    a.sendall(na)
    if first(a, 0.5) == b"\x50":                                   # a is the control connection
        a.close(); b.sendall(nb)                                    # lost; the watch connects
        break
    a.close(); b.close()
else:
    sys.exit("the control connection never answered first")
end = time.monotonic() + 5
while time.monotonic() < end:
    try:
        c = s.accept()[0]
    except OSError:
        break
    c.sendall(hs(c))
    if first(c, 1) == b"\x50":
        open(result, "w").write("again\n")
        break
PY
rm -f "$TMP/fake_twice.port" "$TMP/fake_twice.res"
python3 "$TMP/fake_twice.py" "$TMP/fake_twice.port" "$TMP/fake_twice.res" 2>"$TMP/fake_twice.err" &
fake=$!
for i in $(seq 100); do [ -f "$TMP/fake_twice.port" ] && break; sleep 0.05; done
timeout -k 5 30 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$(cat "$TMP/fake_twice.port")" --rdzv_id=twice \
    --rdzv_conf="$CONF,store_reconnect_timeout=20" "$FW" >"$TMP/twice.out" 2>&1 &
tw=$!
wait "$fake"
kill -TERM "$tw" 2>/dev/null; wait "$tw" 2>/dev/null
check "a control connection lost while its watch connection was still connecting: the JOIN is sent again" \
    grep -qx again "$TMP/fake_twice.res"
grep -qx again "$TMP/fake_twice.res" 2>/dev/null || sed 's/^/#   /' "$TMP/fake_twice.err" "$TMP/twice.out" | tail -8
check "nothing left after the twice-killed store" no_leftovers
unset FW_DIR FW_SLEEP_MS FW_TERM_EXIT

# 7. --rdzv_backend=static with --node_rank and --master_addr/--master_port.
PORT=$(free_port); d=$TMP/static; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=100
for nr in 1 0; do
    timeout -k 5 40 "$DDPRUN" --nnodes=2 --nproc_per_node=2 --node_rank=$nr \
        --master_addr=127.0.0.1 --master_port="$PORT" --rdzv_conf="$CONF" "$FW" \
        >"$TMP/static$nr.out" 2>&1 &
    eval "s$nr=\$!"
done
wait $s0; r0=$?; wait $s1; r1=$?
g_of() { grep '^GROUP_RANK=' "$d/env.$1.0" | cut -d= -f2; }
[ "$r0" = 0 ] && [ "$r1" = 0 ]
verdict "static backend: both nodes exit 0" || show_tail "$TMP/static0.out" "$TMP/static1.out"
[ "$(g_of 2)" = 1 ] && [ "$(g_of 3)" = 1 ] && [ "$(g_of 0)" = 0 ]
verdict "static backend: --node_rank decides the ranks (node 1 started first has ranks 2,3)"
unset FW_DIR FW_SLEEP_MS
# 8. Nodes that finish apart: the first waits at the exit barrier while the second still runs for
# longer than the keep-alive bound (1 s). The waiting node must keep heartbeating, or the server
# declares it dead and ends the round under the node still running.
PORT=$(free_port); RUN=apart; d=$TMP/apart; mkdir -p "$d"
export FW_DIR=$d
FW_SLEEP_MS=100 agent ap0 2 "$FW"; a=$LAST
sleep 0.1
FW_SLEEP_MS=2500 agent ap1 2 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ] && [ ! -f "$d/sig.2.0" ] && [ ! -f "$d/env.2.1" ]
verdict "nodes finishing 2.4 s apart: both exit 0, no worker stopped or restarted"
unset FW_DIR
# 8b. A node whose workers finished waits at the exit barrier; then a worker of the other node
# fails. The job is not done: the waiting node must not leave with exit 0 (the failed node would
# wait for it until join_timeout), it re-joins and both groups run again. Node 0's ranks finish
# after 100 ms; rank 3 fails round 0 after 1 s.
PORT=$(free_port); RUN=late; d=$TMP/late; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=100 FW_RANK=3 FW_EXIT=1 FW_DELAY_MS=1000 FW_FAIL_ATTEMPTS=1
agent lt0 2 --node_rank=0 --max_restarts=1 "$FW"; a=$LAST
agent lt1 2 --node_rank=1 --max_restarts=1 "$FW"; b=$LAST
wait $a; ra=$?; wait $b; rb=$?
[ "$ra" = 0 ] && [ "$rb" = 0 ] && [ -f "$d/env.0.1" ] && [ -f "$d/env.3.1" ]
verdict "a failure after the other node's workers finished: it re-joins, both run round 1, exit 0" ||
    show_tail "$TMP/lt0.out" "$TMP/lt1.out"
check "the finished node says why it runs again" \
    grep -q "round 0 ended before every node passed the exit barrier: re-joining" "$TMP/lt0.out"
unset FW_DIR FW_RANK FW_EXIT FW_DELAY_MS FW_FAIL_ATTEMPTS

# 9. The round closes but not even the first worker can start (its log directory cannot be
# made): the node fails at once with exit 1 instead of waiting forever.
PORT=$(free_port); RUN=nostart; mkdir -p "$TMP/nostart"; : > "$TMP/nostart/attempt_0"
t0=$(date +%s%N)
timeout -k 5 20 "$DDPRUN" --nnodes=1:2 --nproc_per_node=2 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id="$RUN" --rdzv_conf="$CONF" \
    --log_dir "$TMP/nostart" "$FW" >"$TMP/nostart.out" 2>&1; rc=$?
t1=$(date +%s%N)
[ $rc = 1 ] && [ $(( (t1 - t0) / 1000000 )) -lt 10000 ] &&
    grep -q "unable to create $TMP/nostart/attempt_0: Not a directory" "$TMP/nostart.out"
verdict "no worker can start after the rendezvous: exit 1 at once, naming the path at fault"
# 10. A run id longer than the server keeps is refused up front, naming the flag (it used to be cut
# in the JOIN only: failures could not be reported and the other nodes exited 0).
long_id=$(printf 'j%.0s' $(seq 200))
timeout -k 5 20 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$(free_port)" --rdzv_id="$long_id" --rdzv_conf="$CONF" "$FW" \
    >"$TMP/longid.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- "--rdzv_id" "$TMP/longid.out"
verdict "an --rdzv_id over 128 characters: exit 2 naming the flag"
# 11. Text from the store reaches the log escaped: no control byte from the network gets to the
# operator's terminal. no_raw_controls FILE: no control byte other than newline in FILE.
no_raw_controls() { ! LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$1"; }
# a) The reason a round ended is the value of a store key, which any client of the store may SET.
PORT=$(free_port); RUN=reason; d=$TMP/reason; mkdir -p "$d"
export FW_DIR=$d FW_SLEEP_MS=2000 FW_TERM_EXIT=143
agent re0 1:2 "$FW"; a=$LAST
for i in $(seq 200); do [ -f "$d/env.1.0" ] && break; sleep 0.05; done
"$BIN/tests/store_client" "$PORT" set "__rdzv/reason/end/0" $'\e]0;pwned\a\e[2Jround over\r\nforged' \
    >/dev/null 2>"$TMP/reason.set"
wait $a; ra=$?
[ "$ra" = 0 ] && no_raw_controls "$TMP/re0.out" &&
    grep -qF 'W \e]0;pwned\a\e[2Jround over\r\nforged; re-joining' "$TMP/re0.out"
verdict "a round-end reason with control bytes is logged escaped, then the node re-joins (rc $ra)"
no_raw_controls "$TMP/re0.out" || sed 's/^/#   /' "$TMP/re0.out" | cat -v | tail -5
unset FW_DIR FW_SLEEP_MS FW_TERM_EXIT
# b) A store that refuses the JOIN with an error text full of control bytes (reply: u8 0x50, u8 1,
# i64 code, blob text; docs/protocol-rdzv.md). The fake answers each connection's VALIDATE + PING,
# then answers the first JOIN per MODE (refuse: an error text with control bytes; bigworld: a round
# whose world_size, 2^32, fits no int), and exits within 15 s.
cat >"$TMP/fake_rdzv.py" <<'PY'
import os, socket, struct, sys, threading, time
portfile, mode = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4); s.settimeout(15)
open(portfile + ".tmp", "w").write(str(s.getsockname()[1])); os.rename(portfile + ".tmp", portfile)
text = b"\x1b[2J\x1b[Hall nodes joined\x07\r\nforged line \x9b31m"
def read_exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b
def serve(c):
    try:
        c.settimeout(15)
        hs = read_exact(c, 10)                   # VALIDATE u32 magic, PING u32 nonce
        c.sendall(hs[6:10])
        if read_exact(c, 1) != b"\x50":
            return
        for _ in range(2):                       # run id, host
            read_exact(c, struct.unpack("<Q", read_exact(c, 8))[0])
        read_exact(c, 9 * 8)
        if mode == "refuse":
            c.sendall(bytes([0x50, 1]) + struct.pack("<qQ", -22, len(text)) + text)
        else:   # round 0, group rank 0 of 1, rank_base 0, world_size 2^32, master, port,
                # restarts, store flags, member, member key
            c.sendall(bytes([0x50, 0]) + struct.pack("<qqqqqQ", 0, 0, 1, 0, 1 << 32, 9) +
                      b"127.0.0.1" + struct.pack("<qqqqq", 29500, 0, 0, 1, 12345))
        time.sleep(5)
    except (EOFError, OSError):
        pass
end = time.monotonic() + 15
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except OSError:
        break
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
python3 "$TMP/fake_rdzv.py" "$TMP/fake_rdzv.port" refuse &
fake=$!
for i in $(seq 100); do [ -f "$TMP/fake_rdzv.port" ] && break; sleep 0.05; done
timeout -k 5 20 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$(cat "$TMP/fake_rdzv.port")" --rdzv_id=hostile --rdzv_conf="$CONF" \
    "$FW" >"$TMP/hostile.out" 2>&1; rc=$?
kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null
[ "$rc" = 1 ] && no_raw_controls "$TMP/hostile.out" &&
    grep -qF "rendezvous 'hostile': \e[2J\e[Hall nodes joined\a\r\nforged line \x9b31m" "$TMP/hostile.out" &&
    ! LC_ALL=C grep -q $'\x9b' "$TMP/hostile.out"
verdict "a JOIN refused with control bytes in its text: exit 1, the text logged escaped (rc $rc)"
no_raw_controls "$TMP/hostile.out" || sed 's/^/#   /' "$TMP/hostile.out" | cat -v | tail -5
# c) A JOIN answer whose numbers fit no int (world_size 2^32) is refused, not wrapped to 0.
rm -f "$TMP/fake_rdzv.port"; d=$TMP/bigworld; mkdir -p "$d"
python3 "$TMP/fake_rdzv.py" "$TMP/fake_rdzv.port" bigworld &
fake=$!
for i in $(seq 100); do [ -f "$TMP/fake_rdzv.port" ] && break; sleep 0.05; done
FW_DIR=$d timeout -k 5 20 "$DDPRUN" --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$(cat "$TMP/fake_rdzv.port")" --rdzv_id=big --rdzv_conf="$CONF" \
    "$FW" >"$TMP/bigworld.out" 2>&1; rc=$?
kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null
[ "$rc" = 1 ] && [ -z "$(ls -A "$d")" ] &&
    grep -qF "rendezvous 'big' at 127.0.0.1:$(cat "$TMP/fake_rdzv.port"): the JOIN reply is out of range (world_size outside 1..2147483647)" "$TMP/bigworld.out"
verdict "a JOIN answer with world_size 2^32: exit 1 naming the field, no worker (rc $rc)"
[ "$rc" = 1 ] || sed 's/^/#   /' "$TMP/bigworld.out" | tail -5

# d) A daemon that goes silent (SIGSTOP: no close ever comes, as a host cut off) while a JOIN is
# parked there: the agent's PING on its idle connection goes unanswered for the keep-alive bound
# (1 s here), the store is lost, and reconnecting runs out: store_reconnect_timeout (2 s). The
# stopped daemon's kernel still accepts, so each try's handshake is bounded by what is left of
# that window, not by read_timeout (30 s here). The agent exits 1 within seconds, not after
# read_timeout or join_timeout (20 s).
"$BIN/ddp-rendezvous" --port 0 --no-auth >"$TMP/silent.daemon" 2>&1 &
sd=$!
wait_for "$TMP/silent.daemon" '^listening on ' 5 >/dev/null
SDPORT=$(sed -nE 's/^listening on .*:([0-9]+)$/\1/p' "$TMP/silent.daemon")
d=$TMP/silent; mkdir -p "$d"
t0=$(date +%s%N)
FW_DIR=$d timeout -k 5 45 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$SDPORT" --rdzv_id=silent \
    --rdzv_conf="$CONF,store_reconnect_timeout=2,read_timeout=30" "$FW" >"$TMP/silent.out" 2>&1 &
sa=$!
sleep 0.5
kill -STOP "$sd"
wait "$sa"; rc=$?
dt=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "$sd"; kill "$sd"; wait "$sd" 2>/dev/null
[ "$rc" = 1 ] && [ $dt -lt 12000 ] && grep -q 'no answer while joining' "$TMP/silent.out" &&
    [ -z "$(ls -A "$d")" ]
verdict "a daemon silent under a parked JOIN: the agent finds it lost and exits 1 in $dt ms, not after read_timeout or join_timeout (rc $rc)" ||
    sed 's/^/#   /' "$TMP/silent.out" | tail -6

check "nothing left at the end" no_leftovers

finish
