#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 32
# Goodput and the cost of each restart, on one node with real processes: train on the CPU backend
# starts 2 s late and fails at step 30 after a checkpoint at step 20, and the summary's start and
# redo match what was injected; the restart_cost event and the metrics agree with the line; a
# hang's detection is its silence; a job without beats says so; beats without a step (output
# lines) leave redo out; on two nodes, `ddprun status` shows, live, the goodput of the node
# with beats as its own line says at the end, and none for the node without.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 90 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 90 "$DDPRUN" "$@" >"$out" 2>&1
}

# get PORT PATH: the body of an HTTP GET on 127.0.0.1.
get() {
    python3 - "$1" "$2" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", sys.argv[2])
sys.stdout.write(c.getresponse().read().decode())
PY
}

# The goodput line's numbers as JSON: ratio, wall, productive, lost, restarts and each part shown.
line_json() {
    python3 - "$1" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"goodput ([0-9.]+)% of ([0-9.]+) s \(productive ([0-9.]+) s\)(?:; lost ([0-9.]+) s in (\d+) restarts?:([^;\n]*))?", text)
if not m:
    sys.exit("no goodput line")
out = {"ratio": float(m.group(1)) / 100, "wall": float(m.group(2)), "productive": float(m.group(3)),
       "lost": float(m.group(4) or 0), "restarts": int(m.group(5) or 0)}
for name, v in re.findall(r"(\w+) ([0-9.]+) s", m.group(6) or ""):
    out[name] = float(v)
print(json.dumps(out))
PY
}

# 1. train, 2 ranks: a wrapper sleeps 2 s before train starts (its first beat), train saves a
# checkpoint at step 20 and fails at step 30 in the first attempt; steps take 100 ms
# (--step-delay-ms), so the restart redoes 10 steps: about 1 s.
d=$TMP/train; mkdir -p "$d/ckpt"; chmod 700 "$d/ckpt"
cat >"$d/w.sh" <<EOF
#!/bin/sh
sleep 2
exec "$TRAIN" --backend cpu --samples 8192 --batch-size 32 --layers 16,32,4 --epochs 1 \\
    --checkpoint-dir "$d/ckpt" --checkpoint-every 20 --fail-at-step 30 --step-delay-ms 100 \\
    --max-steps 90 --eval-samples 0 --quiet
EOF
chmod +x "$d/w.sh"
MP=$(free_port)
t0=$(date +%s%N)
run_ddprun "$d/out" --nproc_per_node 2 --no_python --heartbeat_timeout 5 --max_restarts 1 \
    --event_log_handler "json:$d/events.jsonl" --metrics "127.0.0.1:$MP" "$d/w.sh" &
job=$!
# The page is read once the restart is measured (its event is written), while the job runs on.
wait_for "$d/events.jsonl" '"event":"restart_cost"' 40 >/dev/null && get "$MP" /metrics >"$d/page"
wait "$job"; rc=$?
wall=$(( ($(date +%s%N) - t0) / 1000000 ))
check "train failing at step 30 once: restarted, exit 0" [ $rc -eq 0 ] || show_tail "$d/out"
line_json "$d/out" >"$d/line.json"
check "the goodput line is said (restarts: at the default level)" [ -s "$d/line.json" ] ||
    show_tail "$d/out"
check "the line: 1 restart; start 2.0-3.5 s (2 s of sleep injected); redo 0.8-2.0 s (10 steps of 0.1 s)" \
    python3 - "$d/line.json" "$wall" <<'PY'
import json, sys
l = json.load(open(sys.argv[1])); wall = int(sys.argv[2]) / 1000
assert l["restarts"] == 1, l
assert 2.0 <= l["start"] <= 3.5, l
assert 0.8 <= l["redo"] <= 2.0, l
assert 0 <= l["detect"] <= 0.5 and 0 <= l["stop"] <= 1.0 and 0 <= l["rendezvous"] <= 1.0, l
assert abs(l["lost"] - sum(l[p] for p in ("detect", "stop", "rendezvous", "start", "redo"))) < 0.03, l
# The job's wall as ddprun measured it, within what the test saw from outside.
assert wall - 1.5 <= l["wall"] <= wall + 0.1, (l, wall)
# 90 new steps of 0.1 s at least; the 10 redone are not counted twice (the sum below).
assert 8.5 <= l["productive"], l
assert abs(l["ratio"] - l["productive"] / l["wall"]) < 0.01, l
# wall = the first start (2 s+) + productive + lost + the end, nothing else.
assert l["productive"] + l["lost"] + 2.0 <= l["wall"] + 0.1, l
PY
sed 's/^/# line: /' "$d/line.json"
check "one restart_cost event, its parts those of the line, failed at step 30" \
    python3 - "$d/events.jsonl" "$d/line.json" <<'PY'
import json, sys
ev = [json.loads(x) for x in open(sys.argv[1])]
costs = [e for e in ev if e["event"] == "restart_cost"]
l = json.load(open(sys.argv[2]))
assert len(costs) == 1, costs
c = costs[0]
assert c["restart"] == 1 and c["attempt"] == 1 and c["failed_step"] == 30, c
parts = ("detect", "stop", "rendezvous", "start", "redo")
assert c["lost_ms"] == sum(c[p + "_ms"] for p in parts), c
for p in parts:
    assert abs(c[p + "_ms"] / 1000 - l[p]) <= 0.006, (p, c, l)
PY
check "metrics: goodput ratio, productive time and the restart's parts (those of the event)" \
    python3 - "$d/page" "$d/events.jsonl" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
c = [json.loads(x) for x in open(sys.argv[2]) if '"restart_cost"' in x][0]
def value(name, labels=""):
    m = re.search("^" + re.escape(name) + r"\{[^}]*" + re.escape(labels) + r"[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None
r = value("ddprun_agent_goodput_ratio")
assert r is not None and 0 < r < 1, r
assert value("ddprun_agent_productive_seconds_total") > 1
for p in ("detect", "stop", "rendezvous", "start", "redo"):
    assert abs(value("ddprun_agent_restart_seconds_total", 'part="%s"' % p) - c[p + "_ms"] / 1000) < 0.002, p
PY
if command -v promtool >/dev/null; then
    promtool check metrics <"$d/page" >"$d/promtool.out" 2>&1
    check "promtool check metrics on the page with goodput: no problem" \
        bash -c "[ $? -eq 0 ] && [ ! -s '$d/promtool.out' ]" || show_tail "$d/promtool.out"
else
    skip "promtool check metrics on the page with goodput: no problem" "promtool is missing"
fi

# 2. A hang: the worker beats 5 steps, then stops beating; detection is the hang watch's
# silence (--heartbeat_timeout 1); the second attempt beats past step 5 and exits 0.
d=$TMP/hang; mkdir -p "$d"
cat >"$d/w.sh" <<'EOF'
#!/bin/sh
i=0
while [ $i -lt 10 ]; do
    i=$((i + 1)); echo $i >"$DDPRUN_HEARTBEAT_FILE"; sleep 0.1
    [ $i -eq 5 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && sleep 600
done
exit 0
EOF
chmod +x "$d/w.sh"
run_ddprun "$d/out" --heartbeat_timeout 1 --max_restarts 1 --stacks_timeout 5 \
    --event_log_handler "json:$d/events.jsonl" "$d/w.sh"; rc=$?
check "a hung worker: restarted, exit 0" [ $rc -eq 0 ] || show_tail "$d/out"
check "the hang's detection is its silence (1.0-2.5 s), its failed step 5, redo 0.3-1.5 s" \
    python3 - "$d/events.jsonl" <<'PY'
import json, sys
c = [json.loads(x) for x in open(sys.argv[1]) if '"restart_cost"' in x]
assert len(c) == 1, c
c = c[0]
assert 1000 <= c["detect_ms"] <= 2500 and c["failed_step"] == 5, c
# the second attempt passes step 5 after about 4 steps of 0.1 s
assert 300 <= c["redo_ms"] <= 1500, c
PY

# 3. No beat source (no --heartbeat_timeout), both attempts fail: the failure summary says there
# are no step beats and gives what is known (stop, rendezvous); the event has nulls for the rest.
d=$TMP/nobeat; mkdir -p "$d"
printf '#!/bin/sh\nsleep 0.3\nexit 3\n' >"$d/w.sh"; chmod +x "$d/w.sh"
run_ddprun "$d/out" --max_restarts 1 --event_log_handler "json:$d/events.jsonl" "$d/w.sh"; rc=$?
check "a job failing twice: exit 1" [ $rc -eq 1 ]
check "the summary: goodput unknown, no step beats, one restart with stop and rendezvous" \
    grep -qE '^goodput unknown: no step beats \(--heartbeat_timeout is off\); wall [0-9.]+ s; lost [0-9.]+ s in 1 restart: stop [0-9.]+ s, rendezvous [0-9.]+ s$' "$d/out" ||
    show_tail "$d/out"
check "the summary's line sits before its closing rule" \
    bash -c "grep -A1 '^goodput unknown' '$d/out' | tail -1 | grep -q '^====='"
check "restart_cost without beats: detect, start and redo null, failed_step null" \
    python3 - "$d/events.jsonl" <<'PY'
import json, sys
c = [json.loads(x) for x in open(sys.argv[1]) if '"restart_cost"' in x]
assert len(c) == 1, c
c = c[0]
assert c["detect_ms"] is None and c["start_ms"] is None and c["redo_ms"] is None, c
assert c["failed_step"] is None and c["stop_ms"] >= 0 and c["rendezvous_ms"] >= 0, c
assert c["lost_ms"] == c["stop_ms"] + c["rendezvous_ms"], c
PY

# 4. Output lines as beats (--heartbeat_on_output): no step, so redo is not known; the start is
# the time to the first line (0.5 s of sleep first).
d=$TMP/output; mkdir -p "$d"
cat >"$d/w.sh" <<'EOF'
#!/bin/sh
sleep 0.5
for i in 1 2 3 4 5; do echo "line $i"; sleep 0.1; done
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 1
exit 0
EOF
chmod +x "$d/w.sh"
run_ddprun "$d/out" --heartbeat_timeout 5 --heartbeat_on_output --max_restarts 1 "$d/w.sh"; rc=$?
check "output beats: restarted, exit 0" [ $rc -eq 0 ]
check "output beats: start 0.5-1.5 s, and redo not known (the beats carry no step)" \
    bash -c "line=\$(grep -oE 'goodput [0-9.]+% .*' '$d/out') &&
        echo \"\$line\" | grep -qE 'start (0\.[5-9]|1\.[0-4])[0-9] s; redo not known: the beats carry no step$'" ||
    show_tail "$d/out"

# 5. Live, in `ddprun status`: two nodes meet at a c10d store; node A supervises heartbeats, node
# B does not. A's worker beats a step every 0.1 s and fails at step 20 in the first attempt;
# every attempt resumes at step 10 and ends at step 80 (about 7 s). Late in the second attempt
# (step 50 or more, its restart closed) status shows A's goodput, the same in the table, its job
# line and --json; B shows none. At the end A's own line agrees with what status showed: the
# same restart and lost time (0.01 s: the line's rounding), and wall and productive time that
# grew between the two by at most the time that passed (plus 1 s: the report is one keep-alive
# of 0.2 s old or more on a loaded machine, and the line's rounding).
d=$TMP/status; mkdir -p "$d"
cat >"$d/w.sh" <<'EOF'
#!/bin/sh
i=0
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || i=10
while [ $i -lt 80 ]; do
    i=$((i + 1))
    [ -n "${DDPRUN_HEARTBEAT_FILE:-}" ] && echo $i >"$DDPRUN_HEARTBEAT_FILE"
    sleep 0.1
    [ $i -eq 20 ] && [ "${GP_FAIL:-}" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 1
done
exit 0
EOF
chmod +x "$d/w.sh"
PORT=$(free_port)
CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=5
# node OUTFILE ARGS...: one agent of the two-node job, bounded by 60 s.
node() {
    local out=$1; shift
    timeout -k 5 60 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=gp --rdzv_conf="$CONF" --max_restarts 1 \
        "$@" "$d/w.sh" >"$out" 2>&1
}
GP_FAIL=1 node "$d/a.out" --heartbeat_timeout 5 &
a=$!
node "$d/b.out" &
b=$!
status() { timeout -k 2 15 "$DDPRUN" status --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=gp "$@"; }
# late FILE: true when the status JSON in FILE shows A's goodput with its restart closed and
# its step at 50 or more.
late() {
    python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(1)
m = [x for x in d["members"] if "goodput" in x]
ok = len(m) == 1 and m[0]["goodput"]["restarts"] == 1 and m[0].get("step", 0) >= 50
sys.exit(0 if ok else 1)
PY
}
for i in $(seq 200); do
    status --json >"$d/st.json" 2>&1 && late "$d/st.json" && break
    sleep 0.1
done
status >"$d/st.txt" 2>&1
status --json >"$d/st2.json" 2>&1
t_status=$(date +%s%N)
wait $a; ra=$?
t_end=$(date +%s%N)
wait $b; rb=$?
check "two nodes, A's worker failing at step 20 once: restarted, both exit 0 ($ra $rb)" \
    [ "$ra" = 0 -a "$rb" = 0 ] || show_tail "$d/a.out" "$d/b.out"
check "status --json late in the job: A's goodput with its restart, B none (no beats)" \
    python3 - "$d/st.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ms = d["members"]
assert len(ms) == 2, ms
a = [m for m in ms if "goodput" in m]
b = [m for m in ms if "goodput" not in m]
assert len(a) == 1 and len(b) == 1, ms
g = a[0]["goodput"]
assert g["restarts"] == 1 and 0 < g["lost_ms"] < g["wall_ms"], g
assert 0 < g["productive_ms"] < g["wall_ms"], g
assert abs(g["ratio"] - g["productive_ms"] / g["wall_ms"]) < 1e-6, g
# B supervises no heartbeats: it reports nothing, not even a step.
assert "step" not in b[0] and "beat_age_ms" not in b[0], b
# The job's figure is over the one node that reports: its own numbers.
j = d["goodput"]
assert j["nodes"] == 1, j
assert all(j[k] == g[k] for k in ("wall_ms", "productive_ms", "lost_ms", "restarts")), (j, g)
PY
sed 's/^/# status: /' "$d/st.txt"
check "the table: 'goodput R% of W s; lost L s in 1 restart (1 node)' between the two --json answers; A's column R%, B's '-'" \
    python3 - "$d/st.txt" "$d/st.json" "$d/st2.json" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
before, after = (json.load(open(p))["goodput"] for p in sys.argv[2:])
m = re.search(r"^goodput ([0-9.]+)% of ([0-9.]+) s; lost ([0-9.]+) s in 1 restart \(1 node\)$", text, re.M)
assert m, text
pct, wall, lost = float(m.group(1)), float(m.group(2)), float(m.group(3))
# The table was read between the two JSON answers: its wall lies between theirs; its ratio
# too, but for the saw-tooth of productive time, which moves at each beat (0.1 s apart, more on
# a loaded machine): 5 points.
assert before["wall_ms"] / 1000 - 0.05 <= wall <= after["wall_ms"] / 1000 + 0.05, (wall, before, after)
lo, hi = sorted((before["ratio"], after["ratio"]))
assert lo * 100 - 5 <= pct <= hi * 100 + 5, (pct, before, after)
assert abs(lost - after["lost_ms"] / 1000) <= 0.005, (lost, after)
rows = [l for l in text.splitlines() if re.match(r"^[01] +127\.0\.0\.1 +1 +running ", l)]
assert len(rows) == 2, text
# A's row ends with the job line's figure (one node, one reply); B's with no step, beat, goodput.
assert sum(r.endswith(" %s%%" % m.group(1)) for r in rows) == 1, (rows, m.group(1))
assert sum(bool(re.search(r" - +- +-$", r)) for r in rows) == 1, rows
PY
line_json "$d/a.out" >"$d/line.json"
check "A's own line at the end agrees with status: 1 restart, the same lost time, wall and productive grown by at most the time since" \
    python3 - "$d/line.json" "$d/st2.json" "$t_status" "$t_end" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))
g = [m for m in json.load(open(sys.argv[2]))["members"] if "goodput" in m][0]["goodput"]
since = (int(sys.argv[4]) - int(sys.argv[3])) / 1e9
wall, prod, lost = g["wall_ms"] / 1000, g["productive_ms"] / 1000, g["lost_ms"] / 1000
print("# status: wall %.2f productive %.2f lost %.2f; line: wall %.2f productive %.2f lost %.2f; %.2f s apart"
      % (wall, prod, lost, l["wall"], l["productive"], l["lost"], since))
assert l["restarts"] == 1 == g["restarts"], (l, g)
assert abs(l["lost"] - lost) <= 0.01, (l, g)
assert wall - 0.05 <= l["wall"] <= wall + since + 1.0, (l, g, since)
assert prod - 0.05 <= l["productive"] <= prod + (l["wall"] - wall) + 1.0, (l, g, since)
PY
grep -qE 'goodput unknown: no step beats \(--heartbeat_timeout is off\); wall [0-9.]+ s; lost [0-9.]+ s in 1 restart' "$d/b.out"
verdict "B's own line: goodput unknown (no beats), its restart counted" || show_tail "$d/b.out"

check "no process left behind" no_leftovers
finish
