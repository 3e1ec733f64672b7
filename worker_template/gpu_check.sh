#!/usr/bin/env bash
# make gpu-check / make test-gpu: the GPU checks of the worker template, for a machine with CUDA
# devices. Prints "SKIP: ..." and exits 0 where there is no device or the build has no CUDA.
#   1. the CUDA MLP step against the CPU reference (unit test test_gpu_matches_cpu);
#   2. train --backend nccl vs --backend cpu, same seed: final parameters within tolerance;
#   3. the NCCL path with one rank per GPU (store on 127.0.0.1, --check-sync, equal parameters);
#   4. benchmarks: train samples/s per GPU and NCCL allreduce busbw (bench_allreduce).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIP: no CUDA device"
    exit 0
fi
if ! ldd "$BIN/train" 2>/dev/null | grep -q libnccl; then
    echo "SKIP: $BIN/train was built without CUDA/NCCL (HAVE_CUDA=0)"
    exit 0
fi
NGPU=$(nvidia-smi -L | grep -c '^GPU')
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")
STORE_PID=
cleanup() { [ -n "$STORE_PID" ] && kill "$STORE_PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fail=0
pass() { echo "ok - $*"; }
bad() { echo "not ok - $*"; fail=1; }

echo "# $NGPU GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# 1. CUDA kernels + cuBLAS against the CPU math, step by step.
out=$(timeout 120 "$BIN/tests/unit/test_train" 2>&1)
if echo "$out" | grep -q '\[       OK \] test_gpu_matches_cpu'; then
    pass "CUDA MLP step matches the CPU reference (gradients, loss, Adam)"
else
    bad "CUDA MLP step vs CPU reference"; echo "$out" | tail -20
fi

# 2. Whole training runs, same seed: GPU (world of one, NCCL) vs CPU reference.
# shellcheck disable=SC2054 # the commas are inside one value (--layers)
COMMON=(--layers 64,256,128,10 --samples 4096 --batch-size 64 --epochs 2 --seed 3 --quiet
        --optimizer sgd --lr 0.02)
timeout 300 "$BIN/train" "${COMMON[@]}" --backend cpu --dump-params "$TMP/cpu.bin" &&
timeout 300 "$BIN/train" "${COMMON[@]}" --backend nccl --dump-params "$TMP/gpu.bin"
if [ $? -eq 0 ] && python3 - "$TMP/cpu.bin" "$TMP/gpu.bin" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
assert len(a) == len(b) and len(a) > 0
n = len(a) // 4
x = struct.unpack("<%df" % n, a); y = struct.unpack("<%df" % n, b)
worst = max(abs(p - q) / (1e-3 + abs(p)) for p, q in zip(x, y))
print("# max relative parameter difference after 2 epochs: %.3g" % worst)
sys.exit(0 if worst < 5e-2 else 1)
PY
then pass "train --backend nccl ends within tolerance of the CPU reference"
else bad "train GPU vs CPU parameters"; fi

# 3. One rank per GPU through the store.
out="$TMP/store.out"
"$BIN/ddp-rendezvous" --host 127.0.0.1 --port 0 --no-auth >"$out" 2>/dev/null &
STORE_PID=$!
for _ in $(seq 100); do grep -q 'listening on' "$out" 2>/dev/null && break; sleep 0.05; done
PORT=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$out" | head -1)
launch() { # launch RUN PROG ARGS...: one rank per GPU; 0 when all exit 0
    local run=$1 pids=() r rc=0; shift
    for ((r = 0; r < NGPU; r++)); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$NGPU LOCAL_WORLD_SIZE=$NGPU GROUP_RANK=0 \
        DDPRUN_STORE_ADDR=127.0.0.1 DDPRUN_STORE_PORT=$PORT DDPRUN_ROUND=0 DDPRUN_RUN_ID=$run \
            timeout 300 "$@" >"$TMP/$run.$r.out" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
if launch nccl "$BIN/train" "${COMMON[@]}" --backend nccl --check-sync \
        --dump-params "$TMP/nccl.{rank}.bin"; then
    same=1
    for ((r = 1; r < NGPU; r++)); do cmp -s "$TMP/nccl.0.bin" "$TMP/nccl.$r.bin" || same=0; done
    [ $same = 1 ] && pass "NCCL path, $NGPU rank(s), one per GPU: parameters identical" ||
        bad "NCCL ranks differ"
else
    bad "NCCL path with $NGPU rank(s)"; tail -5 "$TMP"/nccl.*.out
fi

# 4. Benchmarks.
echo "# train samples/s per GPU (default ~1M-parameter MLP, batch 256 per rank):"
launch tput "$BIN/train" --backend nccl --batch-size 256 --samples 65536 --epochs 1 \
    --log-every 50 --metrics "$TMP/tput.jsonl" --quiet
python3 - "$TMP/tput.jsonl" "$NGPU" <<'PY' || bad "train throughput"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "samples_per_s" in l]
rows = rows[1:] or rows
sps = sorted(r["samples_per_s"] for r in rows)[len(rows) // 2]
print("#   world %s: %.0f samples/s in all, %.0f per GPU" % (sys.argv[2], sps, sps / int(sys.argv[2])))
PY
if [ "$NGPU" -ge 2 ]; then
    launch ncclbench "$BIN/bench/bench_allreduce" --backend nccl --seconds 2 &&
        cat "$TMP/ncclbench.0.out" || bad "NCCL allreduce bench"
else
    echo "# NCCL allreduce busbw needs 2+ GPUs (busbw of 1 rank is 0 by definition): skipped"
fi
[ $fail = 0 ] && echo "gpu-check: all passed" || echo "gpu-check: FAILED"
exit $fail
