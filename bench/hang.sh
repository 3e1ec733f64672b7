#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Hang detection, measured with real processes (bench/bench_beat_worker.c):
# 1. latency: a worker beats its file 100 times a second, then stops; the time from its last beat
#    to the agent's "hung" line, against the ideal (the --heartbeat_timeout itself);
# 2. cost: the agent's CPU time while 8 workers beat 1000 times a second each, through their
#    files (--heartbeat_timeout) and through output lines (--heartbeat_on_output), each against
#    the same workers with supervision off in the same run (their lines still pass the agent).
#   BUILD=build bench/hang.sh        (RUNS=10 latency runs, TIMEOUT_S=1, CPU_S=6 override)
# Exits non-zero when a figure cannot be measured (no "hung" line, an agent run that fails).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DDPRUN=$BUILD/ddprun
W=$BUILD/bench/bench_beat_worker
RUNS=${RUNS:-10}
TIMEOUT_S=${TIMEOUT_S:-1}
CPU_S=${CPU_S:-6}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-hang.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "command: \`BUILD=$BUILD bench/hang.sh\` ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo

# 1. Latency: the agent's log line (local time, ms) against the worker's last beat (wall clock).
lat=()
for i in $(seq "$RUNS"); do
    d=$TMP/lat$i
    mkdir -p "$d"
    timeout -k 5 60 "$DDPRUN" --heartbeat_timeout "$TIMEOUT_S" --stacks_timeout 1 --max_restarts 0 \
        --log_dir "$d/logs" "$W" hang 100 300 "$d/last" >"$d/out" 2>&1 || true
    v=$(python3 - "$d/last" "$d/out" "$TIMEOUT_S" <<'EOF'
import datetime, re, sys
last = float(open(sys.argv[1]).read())
line = next(l for l in open(sys.argv[2]) if re.search(r" hung: no heartbeat for .*taking the stacks", l))
hms = re.search(r" (\d\d):(\d\d):(\d\d)\.(\d{3}) ", line)
base = datetime.datetime.fromtimestamp(last)
cands = []
for day in (-1, 0, 1):
    d = base.date() + datetime.timedelta(days=day)
    t = datetime.datetime(d.year, d.month, d.day, int(hms[1]), int(hms[2]), int(hms[3]), int(hms[4]) * 1000)
    cands.append(t.timestamp())
seen = min(cands, key=lambda t: abs(t - last))
print("%.1f" % ((seen - last - float(sys.argv[3])) * 1000))
EOF
) || { echo "# latency run $i: no hung line in the agent's output"; tail -5 "$d/out" | sed 's/^/# /'; exit 1; }
    lat+=("$v")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mx() { printf '%s\n' "$@" | sort -g | tail -1; }
echo "| measure | median | max | reference, same run |"
echo "|---|---:|---:|---|"
echo "| detection after the last beat, beyond --heartbeat_timeout=$TIMEOUT_S s ($RUNS runs) | $(med "${lat[@]}") ms | $(mx "${lat[@]}") ms | ideal: 0 ms (detection exactly at the timeout) |"
echo

# 2. Agent CPU: utime + stime of the agent process over a window in the middle of the run.
tck=$(getconf CLK_TCK)
agent_cpu() { # MODE ARGS...: prints the agent's CPU % over CPU_S - 2 seconds
    local mode=$1; shift
    BEAT_DIR=$TMP "$DDPRUN" --nproc_per_node 8 "$@" "$W" "$mode" 1000 "$((CPU_S * 1000))" \
        >"$TMP/cpu.out" 2>&1 &
    local pid=$! t0 t1 c0 c1
    sleep 1
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat"); t0=$(date +%s%N)
    sleep "$((CPU_S - 2))"
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat"); t1=$(date +%s%N)
    wait "$pid" || { echo "# ddprun $* ($mode) failed:"; tail -5 "$TMP/cpu.out" | sed 's/^/# /'; return 1; }
    python3 -c "print('%.2f' % (($c1 - $c0) / $tck * 1e11 / ($t1 - $t0)))"
}
f_ref=$(agent_cpu file); f_on=$(agent_cpu file --heartbeat_timeout 5)
# Output lines: both runs route them through the agent to the console (tagged), which is the
# agent's work either way; the difference is what counting them as beats costs.
l_ref=$(agent_cpu line); l_on=$(agent_cpu line --heartbeat_on_output --heartbeat_timeout 5)
echo "| agent CPU, 8 workers x 1000 beats/s for ${CPU_S} s | supervised | reference, same run: supervision off |"
echo "|---|---:|---:|"
echo "| heartbeat file (utimensat), --heartbeat_timeout 5 | ${f_on} % | ${f_ref} % |"
echo "| output lines through the agent to the console, --heartbeat_on_output | ${l_on} % | ${l_ref} % |"
echo
echo "Log lines have 1 ms resolution and file times the kernel's coarse clock (a few ms), so a"
echo "detection may read as a few ms early. CPU % of one core from /proc/PID/stat (utime + stime, ${tck} ticks a second) over the middle $((CPU_S - 2)) s."
