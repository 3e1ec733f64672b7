#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --event_log_handler json: structured events, one JSON object a line, against real runs: a
# failure and its restart, a hang, a termination signal, a two-node rendezvous; json:PATH appends
# to a file; every line carries the common fields; a path that cannot be written is exit 2.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
fake_worker_env_clear
command -v python3 >/dev/null || { skip "structured events" "python3 is missing"; finish; exit 0; }

# events FILE CHECK: parses every JSON line of FILE (other lines ignored) and runs the Python
# expression CHECK on `ev` (the list of events, in order) and `names` (their names).
events() {
    python3 - "$1" "$2" <<'PY'
import datetime, json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
common = ["ts", "event", "run_id", "host", "agent_pid", "node_rank", "attempt"]
for e in ev:
    assert list(e)[:7] == common, e  # the common fields, first, in this order
    datetime.datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
names = [e["event"] for e in ev]
ok = eval("(" + sys.argv[2] + "\n)")
if not ok:
    print("# events:", names)
sys.exit(0 if ok else 1)
PY
}
export -f events # for the checks run under bash -c

# 1. Rank 1 fails the first attempt; the group restarts and succeeds.
FW_EXIT=1 FW_RANK=1 FW_FAIL_ATTEMPTS=1 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 \
    --max_restarts=1 --event_log_handler json "$FW" >"$TMP/restart.out" 2>&1
check "a failure and its restart: started, exited, group failed (rank 1, exit), group started again, shutdown succeeded" \
    events "$TMP/restart.out" '
names.count("worker_started") == 4 and names.count("worker_exited") == 4
and [e["attempt"] for e in ev if e["event"] == "worker_group_started"] == [0, 1]
and [(e["rank"], e["cause"]) for e in ev if e["event"] == "worker_group_failed"] == [(1, "exit")]
and [e["exit_code"] for e in ev if e["event"] == "worker_exited" and e["attempt"] == 0
     and e["rank"] == 1] == [1]
and names[-1] == "shutdown" and ev[-1]["result"] == "succeeded" and ev[-1]["signal"] is None
and names.index("worker_group_failed") < len(names) - 1 - names[::-1].index("worker_group_started")'

# 2. json:PATH appends: two runs, two shutdowns in one file; nothing of it on stderr.
for i in 1 2; do
    timeout -k 5 30 "$DDPRUN" --standalone --event_log_handler "json:$TMP/ev.jsonl" "$FW" \
        >"$TMP/path$i.out" 2>&1
done
check "json:PATH: two runs append to one file, stderr has no event" \
    bash -c "events '$TMP/ev.jsonl' 'names.count(\"shutdown\") == 2 and len(set(e[\"run_id\"] for e in ev)) == 2' &&
        ! grep -q '^{' '$TMP/path1.out'"

# 3. A hung worker: worker_hung names it and how long it was silent.
timeout -k 5 40 "$DDPRUN" --standalone --heartbeat_timeout=0.5 --initial_heartbeat_timeout=0.5 \
    --stacks_timeout=5 --event_log_handler json --no_python sh -c 'sleep 30' >"$TMP/hang.out" 2>&1
check "a hang: worker_hung (rank 0, silent >= 500 ms, no step), then shutdown failed" \
    events "$TMP/hang.out" '
[(e["rank"], e["silent_ms"] >= 500, e["step"]) for e in ev if e["event"] == "worker_hung"]
== [(0, True, None)] and ev[-1]["event"] == "shutdown" and ev[-1]["result"] == "failed"'

# 4. SIGTERM to ddprun: the shutdown says so.
timeout -k 5 30 "$DDPRUN" --standalone --event_log_handler json --no_python sleep 30 \
    >"$TMP/term.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q worker_started "$TMP/term.out" 2>/dev/null && break; sleep 0.05; done
kill -TERM "$(child_pid "$pid" 2>/dev/null || echo "$pid")" 2>/dev/null
wait "$pid"
check "SIGTERM: worker_exited by SIGTERM, shutdown with result signal, signal SIGTERM" \
    events "$TMP/term.out" '
[e["signal"] for e in ev if e["event"] == "worker_exited"] == ["SIGTERM"]
and ev[-1]["event"] == "shutdown" and ev[-1]["result"] == "signal" and ev[-1]["signal"] == "SIGTERM"'

# 5. Two nodes on loopback: each agent's rendezvous_joined says the round's shape.
port=$(free_port)
for n in 0 1; do
    timeout -k 5 30 "$DDPRUN" --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="ev$$" --event_log_handler json "$FW" \
        >"$TMP/node$n.out" 2>&1 &
    pids[$n]=$!
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
check "two nodes: each rendezvous_joined has round 0, nnodes 2, world_size 4; node ranks 0 and 1" \
    bash -c "[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] &&
        events '$TMP/node0.out' '[(e[\"round\"], e[\"nnodes\"], e[\"world_size\"]) for e in ev if e[\"event\"] == \"rendezvous_joined\"] == [(0, 2, 4)]' &&
        events '$TMP/node1.out' '[(e[\"round\"], e[\"nnodes\"], e[\"world_size\"]) for e in ev if e[\"event\"] == \"rendezvous_joined\"] == [(0, 2, 4)]' &&
        [ \"\$(cat '$TMP'/node[01].out | grep rendezvous_joined | grep -o '\"node_rank\":[01]' | sort | tr '\n' ' ')\" = '\"node_rank\":0 \"node_rank\":1 ' ]"

# 6. A path that cannot be written: exit 2, one line naming the flag; nothing started.
timeout 10 "$DDPRUN" --standalone --event_log_handler "json:$TMP/no/such/dir/ev" "$FW" \
    >"$TMP/bad.out" 2>&1; rc=$?
check "json:PATH that cannot be opened: exit 2, one line naming --event_log_handler" \
    bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$TMP/bad.out') = 1 ] &&
        grep -q -- '--event_log_handler: unable to open $TMP/no/such/dir/ev' '$TMP/bad.out'"
check "nothing left running" no_leftovers
finish
