#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `ddprun report` at scale: a file of events as AGENTS agents write them (EVENTS_PER_AGENT each:
# group starts, worker exits, restart costs, shutdowns with goodput), read and drawn as an SVG.
# Prints a markdown row per size: agents, events, the file's size, the wall time, the peak memory
# (the child's max RSS) and the picture's size. The events are made up: the figure is the
# reader's and the drawer's, not a job's.
#   BUILD=build AGENTS="1000 16000" EVENTS_PER_AGENT=20 bench/report.sh
# Exits 1 when a size cannot be drawn (ddprun report fails, or its SVG is no XML).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
AGENTS=${AGENTS:-"1000 16000"}
EVENTS_PER_AGENT=${EVENTS_PER_AGENT:-20}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-report.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "| agents | events | file | wall | peak memory | SVG |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in $AGENTS; do
    python3 - "$TMP/ev.jsonl" "$n" "$EVENTS_PER_AGENT" "$BUILD/ddprun" "$TMP/out.svg" <<'PY' || exit 1
import json, os, resource, subprocess, sys, time
import xml.etree.ElementTree as ET
path, agents, per, ddprun, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
kinds = ["worker_group_started", "worker_started", "worker_exited", "restart_cost", "shutdown"]
with open(path, "w") as f:
    for k in range(per):
        for a in range(agents):
            ms = k * 5000 + a % 1000
            e = {"ts": "2026-12-07T04:%02d:%02d.%03dZ" % (ms // 60000 % 60, ms // 1000 % 60, ms % 1000),
                 "event": kinds[k % 5], "run_id": "bench", "host": "host%05d" % a,
                 "agent_pid": 1000 + a, "node_rank": a, "attempt": k // 5}
            if e["event"] == "worker_group_started":
                e.update(round=k // 5, nproc=8, rank_base=8 * a, world_size=8 * agents)
            elif e["event"] == "worker_exited":
                e.update(rank=8 * a, local_rank=0, pid=5, exit_code=1 if a == 1 else 0, signal=None)
            elif e["event"] == "restart_cost":
                e.update(restart=k // 5, lost_ms=900, detect_ms=100, stop_ms=100, rendezvous_ms=100,
                         start_ms=300, redo_ms=300, failed_step=40)
            elif e["event"] == "shutdown":
                e.update(result="succeeded", signal=None, root_cause=None,
                         goodput={"wall_ms": 20000, "productive_ms": 18000, "ratio": 0.9,
                                  "lost_ms": 900, "restarts": 1})
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
t0 = time.monotonic()
rc = subprocess.run([ddprun, "report", path, "-o", out]).returncode
wall = time.monotonic() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if rc != 0:
    sys.exit("ddprun report failed (exit %d)" % rc)
ET.parse(out)
print("| %d | %d | %.1f MB | %.2f s | %.0f MiB | %.1f MB |" % (agents, agents * per,
      os.path.getsize(path) / 1e6, wall, rss, os.path.getsize(out) / 1e6))
PY
done
