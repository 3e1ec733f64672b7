#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# train throughput on the CPU backend: samples/s with 1 and 2 ranks (default ~1M-parameter MLP,
# 512-1024-512-10, batch 64 per rank, SGD), median of the logged windows. 2 ranks talk through a
# ddp-rendezvous on 127.0.0.1 (port 0). Prints a markdown table.
#   BUILD=build SAMPLES=16384 bench/train.sh        (samples per epoch)
# Exits 1 when a figure cannot be measured (a run failed or logged no window).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-train.XXXXXX")
STORE_PID=
trap '[ -n "$STORE_PID" ] && kill $STORE_PID 2>/dev/null; rm -rf "$TMP"' EXIT
ARGS=(--backend cpu --samples "${SAMPLES:-16384}" --epochs 1 --batch-size 64 --log-every 16 --quiet
      --eval-samples 0)
# median FILE: the median samples/s of FILE's logged windows but the first; fails without one.
median() {
    python3 - "$1" <<'PY'
import json, sys
v = sorted(json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if "samples_per_s" in l)
if not v:
    sys.exit("# %s: no samples_per_s window logged" % sys.argv[1])
v = v[1:] or v
print("%.0f" % v[len(v) // 2])
PY
}
timeout 300 "$BIN/train" "${ARGS[@]}" --metrics "$TMP/w1.jsonl" || exit 1
w1=$(median "$TMP/w1.jsonl") || exit 1
"$BIN/ddp-rendezvous" --host 127.0.0.1 --port 0 --no-auth >"$TMP/store.out" 2>/dev/null &
STORE_PID=$!
for _ in $(seq 200); do grep -q 'listening on' "$TMP/store.out" 2>/dev/null && break; sleep 0.05; done
PORT=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$TMP/store.out" | head -1)
[ -n "$PORT" ] || { echo "# ddp-rendezvous did not report its port within 10 s"; cat "$TMP/store.out"; exit 1; }
pids=()
for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 DDPRUN_STORE_ADDR=127.0.0.1 \
    DDPRUN_STORE_PORT=$PORT DDPRUN_ROUND=0 DDPRUN_RUN_ID=bench-train \
        timeout 300 "$BIN/train" "${ARGS[@]}" --metrics "$TMP/w2.jsonl" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
w2=$(median "$TMP/w2.jsonl") || exit 1
echo "command: \`BUILD=$BUILD bench/train.sh\` ($(nproc) CPUs, OpenBLAS 1 thread per rank)"
echo
echo "| ranks | samples/s (all ranks) | per rank | scaling |"
echo "|---:|---:|---:|---:|"
echo "| 1 | $w1 | $w1 | 1.00 |"
awk -v a="$w1" -v b="$w2" 'BEGIN { printf "| 2 | %s | %.0f | %.2f |\n", b, b / 2, b / a }'
