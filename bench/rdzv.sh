#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Multi-node rendezvous: re-form time after a worker failure (4 agents x 2 workers on loopback:
# rank 5 fails, every node stops its group, re-joins and restarts; from the failure to the last
# worker of the new round running), and N simulated agents joining one run on ddp-rendezvous.
#   BUILD=build RUNS=5 JOIN_COUNTS="1000 4000" bench/rdzv.sh
# Exits non-zero when a figure cannot be measured.
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
JOIN_COUNTS=${JOIN_COUNTS:-1000 4000}
TMP=$(mktemp -d)
DPID=
trap '[ -n "$DPID" ] && kill "$DPID" 2>/dev/null; rm -rf "$TMP"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "| measure | ddprun | target |"
echo "|---|---|---|"
times=()
for r in $(seq "$RUNS"); do
    d=$TMP/reform$r; mkdir -p "$d"; port=$(free_port); pids=()
    for n in 0 1 2 3; do
        FW_DIR=$d FW_RANK=5 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 FW_DELAY_MS=300 FW_SLEEP_MS=600 \
        FW_TERM_EXIT=143 timeout 60 "$BUILD/ddprun" --nnodes=4 --nproc_per_node=2 \
            --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$port --rdzv_id=reform$r \
            --rdzv_conf=last_call_timeout=0.1,keep_alive_interval=1 --max_restarts=1 \
            "$BUILD/tests/fake_worker" >"$d/agent$n.out" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || { echo "# re-form run $r: an agent failed:"; tail -3 "$d"/agent*.out | sed 's/^/#   /'; exit 1; }
    done
    t=$(python3 - "$d" <<'PY'
import glob, sys
d = sys.argv[1]
fail = int(open(f"{d}/tfail.5.0").read())
starts = [int(open(f).read()) for f in glob.glob(f"{d}/t.*.1")]
assert len(starts) == 8, starts
print(f"{(max(starts) - fail) / 1e6:.2f}")
PY
)
    times+=("$t")
done
med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "| re-form after a worker failure, 4 nodes x 2 workers (failure -> all 8 running) | $med ms median of $RUNS (workers exit at once on SIGTERM) | <= 100 ms + workers' exit |"

"$BUILD/ddp-rendezvous" --port 0 --no-auth >"$TMP/daemon.out" 2>/dev/null &
DPID=$!
for i in $(seq 100); do grep -q listening "$TMP/daemon.out" && break; sleep 0.02; done
port=$(sed -nE 's/.*listening on .*:([0-9]+)$/\1/p' "$TMP/daemon.out")
[ -n "$port" ] || { echo "# ddp-rendezvous did not report its port within 2 s"; exit 1; }
for n in $JOIN_COUNTS; do "$BUILD/bench/bench_rdzv_join" "$port" "$n" "$RUNS"; done
