#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `ddprun report`: the picture of a real job's life. Three agents on 127.0.0.1 (each with a host
# name of its own where a UTS namespace can be made) run train on the CPU backend with
# --nnodes=2, so the third waits as a spare; node 1's workers fail at step 15 in the first
# attempt, and every agent appends its events to one file. The report's SVG must parse as XML,
# name every host and agent, carry the goodput figure the agents' shutdown events give and each
# agent's own summary figure, draw each restart's parts, the spare and the failure; the .html
# embeds it; headless Chromium, with no network, renders both to a screenshot that is not blank
# and shows the picture's colours. A job whose restarts run out shows its root cause. Bad input
# (a missing file, a line that is not JSON, a JSON line that is not an event of ddprun's, an
# empty file, an output it cannot write, usage errors): one line naming the file and line, a
# non-zero exit, and no output file, temporary or partial, left behind.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train

CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=5,close_timeout=5

# Host names of their own when this shell may make UTS namespaces (root); else the machine's.
if unshare --uts true 2>/dev/null; then UTS=1; else UTS=0; fi

# agent NAME NNODES ARGS...: one ddprun in the background (its `timeout` in PID[NAME]), host
# name node-NAME where UTS=1, output in $d/NAME.out, events appended to $d/events.jsonl.
declare -A PID
agent() {
    local name=$1 nn=$2; shift 2
    local pre=()
    [ $UTS = 1 ] && pre=(unshare --uts sh -c 'hostname "$0" && exec "$@"' "node-$name")
    "${pre[@]}" timeout -k 5 60 "$DDPRUN" --nnodes="$nn" --nproc_per_node=2 \
        --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id="$RUN" \
        --rdzv_conf="$CONF" --heartbeat_timeout 5 --no_python \
        --event_log_handler "json:$d/events.jsonl" "$@" >"$d/$name.out" 2>&1 &
    PID[$name]=$!
}

# The worker: train, node 1 failing at step 15 in the first attempt (train's --fail-at-step),
# a checkpoint every 10 steps of 50 ms, so the restart redoes 5 steps.
worker_script() {
    cat >"$1" <<EOF
#!/bin/sh
fail=
[ "\$GROUP_RANK" = 1 ] && fail="--fail-at-step 15"
mkdir -p "$2/ckpt\$GROUP_RANK" && chmod 700 "$2/ckpt\$GROUP_RANK"
exec "$TRAIN" --backend cpu --samples 4096 --batch-size 32 --layers 16,32,4 --epochs 1 \\
    --checkpoint-dir "$2/ckpt\$GROUP_RANK" --checkpoint-every 10 \$fail --step-delay-ms 50 \\
    --max-steps ${3:-40} --eval-samples 0 --quiet
EOF
    chmod +x "$1"
}

# 1. A job with a failure, its restart and a spare.
d=$TMP/job; mkdir -p "$d"; PORT=$(free_port); RUN=rep$$
worker_script "$d/w.sh" "$d"
agent a 2 --max_restarts 2 "$d/w.sh"; sleep 0.3
agent b 2 --max_restarts 2 "$d/w.sh"; sleep 0.3
agent c 2 --max_restarts 2 "$d/w.sh"
rcs=
for n in a b c; do wait "${PID[$n]}"; rcs="$rcs$?"; done
check "three agents (one a spare), node 1 failing once: all exit 0" [ "$rcs" = 000 ] ||
    show_tail "$d/a.out" "$d/b.out" "$d/c.out"

"$DDPRUN" report "$d/events.jsonl" -o "$d/job.svg" >"$d/report.out" 2>&1; rc=$?
check "report -o job.svg: exit 0, nothing said" bash -c "[ $rc = 0 ] && [ ! -s '$d/report.out' ]" ||
    show_tail "$d/report.out"
"$DDPRUN" report "$d/events.jsonl" --output="$d/job.html" >"$d/report_html.out" 2>&1; rc=$?
check "report --output=job.html: exit 0" [ $rc = 0 ]

# The agents' own summary lines: each one's goodput, for the picture's lanes.
grep -hoE 'goodput [0-9.]+% of' "$d/a.out" "$d/b.out" >"$d/lines.txt"
check "the SVG parses as XML and names every host and agent, the job's goodput figure and each agent's" \
    python3 - "$d/job.svg" "$d/events.jsonl" "$d/lines.txt" <<'PY'
import json, re, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
text = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
ev = [json.loads(x) for x in open(sys.argv[2])]
agents = {(e["host"], e["agent_pid"]) for e in ev}
assert len(agents) == 3, agents
for host, pid in agents:
    assert host in text, host
    assert "pid %d" % pid in text, pid
# The job's figure: the productive time of the agents that measured it over their wall time.
downs = [e for e in ev if e["event"] == "shutdown"]
assert len(downs) == 3, downs
g = [e["goodput"] for e in downs if e["goodput"]["ratio"] is not None]
assert len(g) == 2, g  # the spare ran no group
fig = "goodput %.1f%%" % (100.0 * sum(x["productive_ms"] for x in g) / sum(x["wall_ms"] for x in g))
assert fig in text, (fig, text[:300])
# Each agent's own line, within the rounding of the event's four decimals.
lanes = [float(x) for x in re.findall(r"(?:succeeded|failed), goodput ([0-9.]+)%", text)]
said = [float(x) for x in re.findall(r"goodput ([0-9.]+)% of", open(sys.argv[3]).read())]
assert len(lanes) == 2 and len(said) == 2, (lanes, said)
for v in said:
    assert min(abs(v - w) for w in lanes) <= 0.1001, (said, lanes)
PY
check "the SVG draws every restart's parts, the failure with its exit, the spare and each round" \
    python3 - "$d/job.svg" "$d/events.jsonl" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
ev = [json.loads(x) for x in open(sys.argv[2])]
titles = [t.text or "" for t in root.iter(NS + "title")]
costs = [e for e in ev if e["event"] == "restart_cost"]
assert len(costs) >= 2, costs  # the restart, as each of the two working agents measured it
for p in ("detect", "stop", "rendezvous", "start", "redo"):
    n = sum(1 for t in titles if t.startswith("restart 1: " + p + " "))
    assert n == sum(1 for c in costs if c[p + "_ms"] is not None), (p, n)
text = " ".join("".join(e.itertext()) for e in root.iter(NS + "text"))
failed = [e for e in ev if e["event"] == "worker_group_failed"]
assert failed, "no failure in the events"
assert "attempt 0 failed: rank %d exited with code 1" % failed[0]["rank"] in text, text
assert any(t.startswith("a spare") for t in titles), titles
rounds = {e["round"] for e in ev if e["event"] == "rendezvous_joined"}
for r in rounds:
    assert "round %d" % r in text, r
assert "lost " in text and " in 1 restart" in text, text[:400]
PY
check "the .html holds the same SVG inline, and nothing that fetches or runs" \
    python3 - "$d/job.html" "$d/job.svg" <<'PY'
import re, sys
h = open(sys.argv[1]).read(); s = open(sys.argv[2]).read()
body = s[s.index("<svg"):]
assert body in h, "the svg is not inline"
assert "<script" not in h.lower() and "@import" not in h and "@font-face" not in h
# No URL but the SVG namespace's (a name, never fetched).
urls = set(re.findall(r"(?:https?|ftp|file)://[^\s\"'<>)]+", h))
assert urls <= {"http://www.w3.org/2000/svg"}, urls
assert not re.search(r"\b(?:href|src)\s*=", h), "a link"
PY

# Each restart's parts meet at the next group's spawn: detect, stop and rendezvous end where
# the bar of the group after it begins, start and redo follow from there.
parts_meet() {
    python3 - "$1" <<'PY'
import re, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
bars = [(float(r.get("x")), float(r.get("width")), float(r.get("y")), r.find(NS + "title").text)
        for r in root.iter(NS + "rect") if r.find(NS + "title") is not None]
groups = [(x, y) for x, w, y, t in bars if re.match(r"attempt [1-9]", t)]
seen = 0
for x, w, y, t in bars:
    m = re.match(r"restart \d+: (\w+) ", t)
    if not m:
        continue
    # the group of this lane (its bar 25 px above the parts) that starts nearest
    spawn = min((gx for gx, gy in groups if 0 < y - gy < 40), key=lambda gx: abs(gx - x - w)
                if m.group(1) in ("detect", "stop", "rendezvous") else abs(gx - x))
    edge = x + w if m.group(1) in ("detect", "stop", "rendezvous") else x
    if m.group(1) in ("rendezvous", "start"):
        assert abs(edge - spawn) <= 1.5, (t, edge, spawn)
        seen += 1
assert seen >= 1, bars
PY
}
check "each restart's parts meet at the next group's spawn" parts_meet "$d/job.svg"

# 2. Chromium draws both, with no network: a screenshot that is not blank and shows the
# picture's own colours (a group's bar, a failure's mark, the spare's hatching).
CHROMIUM=$(command -v chromium || command -v chromium-browser)
shot() { # shot FILE PNG: the screenshot of FILE; 0 when one came
    local net=()
    unshare -n true 2>/dev/null && net=(unshare -n)
    timeout -k 5 60 "${net[@]}" "$CHROMIUM" --headless --no-sandbox --disable-gpu \
        --proxy-server=127.0.0.1:9 --user-data-dir="$TMP/chromium" --hide-scrollbars \
        --window-size=1280,700 --screenshot="$2" "file://$1" >"$2.log" 2>&1
    [ -s "$2" ]
}
# Not blank: many pixels not white, many colours, and the picture's own among them. PIL when
# python3-pil is there, else the PNG (8-bit RGB or RGBA, as Chromium writes it) read here.
shot_check() {
    python3 - "$1" <<'PY'
import struct, sys, zlib
def pixels(path):
    try:
        from PIL import Image
        im = Image.open(path).convert("RGB")
        return list(im.getdata())
    except ImportError:
        pass
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw, out, prev = zlib.decompress(idat), [], bytearray(w * bpp)
    stride = w * bpp + 1
    for y in range(h):
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += [tuple(line[i:i + 3]) for i in range(0, len(line), bpp)]
        prev = line
    return out
px = pixels(sys.argv[1])
colours = set(px)
ink = sum(1 for p in px if p != (255, 255, 255))
assert len(colours) >= 20, len(colours)
assert ink >= len(px) // 20, (ink, len(px))
for want in ((0x4e, 0x79, 0xa7), (0xd6, 0x27, 0x28), (0x59, 0xa1, 0x4f)):
    assert any(max(abs(a - b) for a, b in zip(p, want)) <= 6 for p in colours), want
print("# %d colours, %.0f%% of the pixels inked" % (len(colours), 100.0 * ink / len(px)))
PY
}
if [ -n "$CHROMIUM" ]; then
    shot "$d/job.svg" "$d/svg.png"
    check "Chromium (no network) renders the SVG: a screenshot" [ -s "$d/svg.png" ] ||
        show_tail "$d/svg.png.log"
    check "the SVG's screenshot is not blank: many colours, the picture's own" shot_check "$d/svg.png"
    shot "$d/job.html" "$d/html.png"
    check "Chromium (no network) renders the .html: a screenshot" [ -s "$d/html.png" ] ||
        show_tail "$d/html.png.log"
    check "the .html's screenshot is not blank: many colours, the picture's own" shot_check "$d/html.png"
else
    for n in "Chromium (no network) renders the SVG: a screenshot" \
        "the SVG's screenshot is not blank: many colours, the picture's own" \
        "Chromium (no network) renders the .html: a screenshot" \
        "the .html's screenshot is not blank: many colours, the picture's own"; do
        skip "$n" "chromium is not installed (scripts/ensure-deps.sh --test)"
    done
fi

# 3. A job whose restarts run out: the picture names the root cause the store gave.
d=$TMP/fail; mkdir -p "$d"; PORT=$(free_port); RUN=repf$$
worker_script "$d/w.sh" "$d" 30
agent a 2 --max_restarts 0 "$d/w.sh"; agent b 2 --max_restarts 0 "$d/w.sh"
rcs=; for n in a b; do wait "${PID[$n]}"; rcs="$rcs$?"; done
check "two agents, node 1 failing, no restarts: both exit 1" [ "$rcs" = 11 ]
"$DDPRUN" report "$d/events.jsonl" -o "$d/fail.svg" >"$d/report.out" 2>&1
check "the failed job's picture names its root cause, as the shutdown events do" \
    python3 - "$d/fail.svg" "$d/events.jsonl" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
text = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
causes = {json.loads(x)["root_cause"] for x in open(sys.argv[2]) if '"shutdown"' in x}
causes.discard(None)
assert len(causes) == 1, causes
assert "root cause: " + causes.pop() in text, text[:500]
assert "failed" in text
PY

# A restart without beats (no --heartbeat_timeout) is measured at the next spawn: its event comes
# before that group's start, and its parts still end there.
d=$TMP/nobeat; mkdir -p "$d"
timeout -k 5 30 "$DDPRUN" --max_restarts 1 --event_log_handler "json:$d/events.jsonl" --no_python \
    sh -c 'sleep 0.3; exit 3' >"$d/out" 2>&1
"$DDPRUN" report "$d/events.jsonl" -o "$d/nobeat.svg" >"$d/report.out" 2>&1
check "a restart without beats: stop and rendezvous end at the second group's spawn" \
    parts_meet "$d/nobeat.svg"

# 4. Events the agents of this tree do not write yet, and text XML cannot hold: a straggler (by
# name, whatever its fields), an exclusion, a host name with markup and a control character.
d=$TMP/more; mkdir -p "$d"
cp "$TMP/job/events.jsonl" "$d/events.jsonl"
python3 - "$d/events.jsonl" <<'PY'
import json, sys
ev = [json.loads(x) for x in open(sys.argv[1])]
last = ev[-1]
head = {k: last[k] for k in ("ts", "run_id", "host", "agent_pid", "node_rank", "attempt")}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(dict(head, event="straggler", rank=3, slower=1.5, since_step=12)) + "\n")
    f.write(json.dumps(dict(head, event="node_excluded", reason="2 group failures")) + "\n")
    f.write(json.dumps(dict(head, event="shutdown", host="<h&\"x\x01>", agent_pid=1, result="unfit",
                            signal=None, root_cause=None)) + "\n")
PY
"$DDPRUN" report "$d/events.jsonl" -o "$d/more.svg" >"$d/report.out" 2>&1; rc=$?
check "a straggler (rank, how much slower), an exclusion and a host with markup: drawn, valid XML" \
    python3 - "$d/more.svg" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
text = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
assert "straggler: rank 3, slower 1.5, since_step 12" in text, text
assert "excluded (quarantine): 2 group failures" in text
assert '<h&"x >' in text
PY

# 5. Bad input: one line naming the file (and line), exit 1 (2 for usage), no output left.
d=$TMP/bad; mkdir -p "$d/out"
head -3 "$TMP/job/events.jsonl" >"$d/notjson.jsonl"; echo 'ddprun was here' >>"$d/notjson.jsonl"
tail -2 "$TMP/job/events.jsonl" >>"$d/notjson.jsonl"
head -2 "$TMP/job/events.jsonl" >"$d/notours.jsonl"; echo '{"ts":"x","level":"info"}' >>"$d/notours.jsonl"
head -1 "$TMP/job/events.jsonl" | sed 's/"ts":"[^"]*"/"ts":"yesterday"/' >"$d/badts.jsonl"
: >"$d/empty.jsonl"
bad() { # bad NAME CODE PATTERN ARGS...: exit CODE, one line matching PATTERN, no output file
    local name=$1 code=$2 pat=$3; shift 3
    "$DDPRUN" report "$@" >"$d/msg" 2>&1; local rc=$?
    [ $rc = "$code" ] && [ "$(wc -l <"$d/msg")" = 1 ] && grep -qE "$pat" "$d/msg" &&
        [ -z "$(ls -A "$d/out")" ]
    verdict "$name" || { echo "# rc $rc"; show_tail "$d/msg"; ls -A "$d/out" | sed 's/^/# left: /'; }
}
bad "a missing events file: exit 1, its name and why" 1 \
    "^ddprun report: $d/nosuch.jsonl: No such file or directory$" "$d/nosuch.jsonl" -o "$d/out/x.svg"
bad "a line that is not JSON: exit 1, file and line 4" 1 \
    "^ddprun report: $d/notjson.jsonl:4: not JSON \(" "$d/notjson.jsonl" -o "$d/out/x.svg"
bad "a JSON line not an event of ddprun's: exit 1, file and line 3, the field missing" 1 \
    "^ddprun report: $d/notours.jsonl:3: not an event of ddprun's \(no \"event\"\)$" \
    "$d/notours.jsonl" -o "$d/out/x.html"
bad "a time that is not ours: exit 1, file and line 1" 1 \
    "^ddprun report: $d/badts.jsonl:1: not an event of ddprun's \(\"ts\" is not a UTC time" \
    "$d/badts.jsonl" -o "$d/out/x.svg"
bad "an empty file: exit 1, no events" 1 "^ddprun report: $d/empty.jsonl: no events$" \
    "$d/empty.jsonl" -o "$d/out/x.svg"
bad "a directory as the events file: exit 1, its name" 1 "^ddprun report: $d/out(:1)?: Is a directory$" \
    "$d/out" -o "$d/out/x.svg"
bad "an output whose directory is missing: exit 1, its name" 1 \
    "^ddprun report: $d/out/no/x.svg: No such file or directory$" \
    "$TMP/job/events.jsonl" -o "$d/out/no/x.svg"
bad "no -o: usage, exit 2" 2 "^ddprun report: -o OUT.svg or -o OUT.html is missing$" \
    "$TMP/job/events.jsonl"
bad "-o x.png: usage, exit 2, the names it takes" 2 "^ddprun report: -o .*x.png: the name must end in .svg, .html or .htm$" \
    "$TMP/job/events.jsonl" -o "$d/out/x.png"
bad "an unknown flag: usage, exit 2, the flag" 2 "^ddprun report: unknown flag '--colour'$" \
    "$TMP/job/events.jsonl" --colour -o "$d/out/x.svg"
# Bad input leaves an earlier picture as it was.
cp "$TMP/job/job.svg" "$d/keep.svg"
"$DDPRUN" report "$d/notjson.jsonl" -o "$d/keep.svg" 2>/dev/null
check "bad input leaves an earlier picture whole, and no temporary file beside it" \
    bash -c "cmp -s '$TMP/job/job.svg' '$d/keep.svg' && [ \$(ls -A '$d' | grep -c tmp) = 0 ]"
"$DDPRUN" report --help >"$d/help" 2>&1; rc=$?
check "report --help: exit 0, the usage and the exit codes" \
    bash -c "[ $rc = 0 ] && grep -q '^usage: ddprun report EVENTS.jsonl -o OUT.svg|OUT.html' '$d/help' && grep -q 'Exit codes' '$d/help'"

check "no process left behind" no_leftovers
finish
