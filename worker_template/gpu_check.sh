#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make gpu-check: proves the GPU path on a machine with CUDA devices, through ddprun as users run
# it. One line per check ("ok - ...", "not ok - ...", "skip - ... (needs 2+ GPUs)"), then one JSON
# line of figures ("gpu-check figures: {...}") and "gpu-check: all passed" or "gpu-check: FAILED".
#   0. the driver and the devices as CUDA sees them (bench_gpu info), and ddprun's own count
#      (--nproc_per_node=gpu) agreeing with it;
#   1. the CUDA MLP step against the CPU reference (unit test test_gpu_matches_cpu);
#   2. train --backend nccl vs --backend cpu, same seed: final parameters within tolerance;
#   3. ddprun --nproc_per_node=gpu with the default backend: NCCL chosen, ranks in sync;
#   4. the same under --virtual_local_rank (each worker sees its one device as device 0);
#   5. a run stopped mid-epoch and resumed from its checkpoint ends bitwise equal to an
#      uninterrupted one (the GPU path is deterministic on one machine);
#   6. (2+ GPUs) a rank SIGKILLed mid-collective: the group restarts and the job finishes;
#   7. the NCCL profiler plugin (libnccl-profiler-ddprun.so) times a program's own allreduces
#      and, with 2+ GPUs, shows the slow rank's compute per step above the others';
#   figures: cuBLAS SGEMM at train's shapes (the compute roof) and the MLP step's achieved
#   fraction of it, train samples/s after warm-up, NCCL allreduce busbw up to 1 GiB (2+ GPUs).
# Without a driver or a device it prints "SKIP: ..." and exits 0; a driver whose query fails is a
# failure, in one line with CUDA's error and both versions. Sized to finish well within the 8
# minutes a lent GPU machine gives it (not yet timed on one; the CPU rehearsal takes 5 s here).
# GPU_CHECK_REHEARSAL=cpu runs the script itself where there is no GPU (make test does): every
# check that does not need a GPU, with 2 CPU workers standing for 2 GPUs and smaller figures.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd)
DDPRUN=$BIN/ddprun
REHEARSAL=${GPU_CHECK_REHEARSAL:-}
NPROC=gpu BACKEND=nccl TPUT_SAMPLES=131072 AR_MAX=1073741824 SECONDS_PER=3
if [ "$REHEARSAL" = cpu ]; then
    line="rehearsal on the CPU backend: 2 workers stand for 2 GPUs, 2 device(s):"
    NPROC=2 BACKEND=cpu TPUT_SAMPLES=4096 AR_MAX=16777216 SECONDS_PER=1
    export CUDA_VISIBLE_DEVICES=0,1 # --virtual_local_rank hands one entry to each worker
fi
[ -n "$REHEARSAL" ] && (exit 0) || line=$("$BIN/bench/bench_gpu" info)
case $? in
0) echo "# $line" ;;
3)
    echo "SKIP: $line"
    exit 0
    ;;
*)
    echo "not ok - CUDA: $line"
    echo "gpu-check: FAILED"
    exit 1
    ;;
esac
if [ -z "$REHEARSAL" ] && ! ldd "$BIN/train" 2>/dev/null | grep -q libnccl; then
    echo "SKIP: $BIN/train was built without CUDA/NCCL (HAVE_CUDA=0)"
    exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")
JOB=
cleanup() {
    [ -n "$JOB" ] && kill -TERM "$JOB" 2>/dev/null && wait "$JOB" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail=0
pass() { echo "ok - $*"; }
bad() { echo "not ok - $*"; fail=1; }
need2() { echo "skip - $* (needs 2+ GPUs)"; }
gpu_only() { echo "skip - $* (needs a GPU: rehearsal)"; }
tail_of() { sed 's/^/#   /' "$1" | tail -"${2:-8}"; }
# same_files F...: every file exists and all are identical.
same_files() {
    local f
    for f; do [ -s "$f" ] && cmp -s "$1" "$f" || return 1; done
}

# 0. The device count: CUDA's, and ddprun's own (--nproc_per_node=gpu, what users run).
NCUDA=$(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) device(s):.*/\1/p')
NGPU=$(timeout 60 "$DDPRUN" --standalone --nproc_per_node="$NPROC" --no_python sh -c \
    'echo "$LOCAL_WORLD_SIZE"' 2>"$TMP/count.err" | head -1)
if [ -n "$NGPU" ] && [ "$NGPU" = "$NCUDA" ]; then
    pass "device count: ddprun --nproc_per_node=$NPROC and CUDA agree on $NGPU"
else
    bad "device count: ddprun says '${NGPU:-nothing}', CUDA $NCUDA"
    tail_of "$TMP/count.err" 3
    NGPU=${NCUDA:-1}
fi

# 1. CUDA kernels + cuBLAS against the CPU math, step by step.
[ -z "$REHEARSAL" ] && timeout 120 "$BIN/tests/unit/test_train" >"$TMP/unit.out" 2>&1
if [ -n "$REHEARSAL" ]; then
    gpu_only "CUDA MLP step matches the CPU reference"
elif grep -q '\[       OK \] test_gpu_matches_cpu' "$TMP/unit.out"; then
    pass "CUDA MLP step matches the CPU reference (gradients, loss, Adam)"
else
    bad "CUDA MLP step vs CPU reference"
    tail_of "$TMP/unit.out" 20
fi

# 2. Whole training runs, same seed: GPU (world of one, NCCL) vs CPU reference.
# shellcheck disable=SC2054 # the commas are inside one value (--layers)
COMMON=(--layers 64,256,128,10 --batch-size 64 --seed 3 --optimizer sgd --lr 0.02)
Q=(--quiet)
if [ -n "$REHEARSAL" ]; then
    gpu_only "train --backend nccl ends within tolerance of the CPU reference"
else
timeout 300 "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples 4096 --epochs 2 --backend cpu \
    --dump-params "$TMP/cpu.bin" >"$TMP/cpu.out" 2>&1 &&
    timeout 300 "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples 4096 --epochs 2 --backend nccl \
        --dump-params "$TMP/gpu.bin" >"$TMP/gpu.out" 2>&1
if [ $? -eq 0 ] && python3 - "$TMP/cpu.bin" "$TMP/gpu.bin" <<'PY'; then
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
assert len(a) == len(b) and len(a) > 0
n = len(a) // 4
x = struct.unpack("<%df" % n, a); y = struct.unpack("<%df" % n, b)
worst = max(abs(p - q) / (1e-3 + abs(p)) for p, q in zip(x, y))
print("# max relative parameter difference after 2 epochs: %.3g" % worst)
sys.exit(0 if worst < 5e-2 else 1)
PY
    pass "train --backend nccl ends within tolerance of the CPU reference"
else
    bad "train GPU vs CPU parameters"
    tail_of "$TMP/gpu.out"
fi
fi

# Every rank runs 64 steps an epoch, whatever the number of GPUs.
SAMPLES=$((4096 * NGPU))
# under_ddprun ARGS...: ddprun, one worker per GPU (as users run it), bounded.
under_ddprun() { timeout -k 5 300 "$DDPRUN" --standalone --nproc_per_node="$NPROC" "$@"; }
rank_files() { local r; for ((r = 0; r < NGPU; r++)); do echo "$1.$r.bin"; done; }

# synced_run NAME LABEL [DDPRUN FLAGS...]: one epoch under ddprun with --check-sync; passes when it
# exits 0 with the expected backend and every rank's parameters are identical.
synced_run() {
    local name=$1 label=$2 rc
    shift 2
    under_ddprun "$@" "$BIN/train" "${COMMON[@]}" --samples "$SAMPLES" --epochs 1 --check-sync \
        --dump-params "$TMP/$name.{rank}.bin" >"$TMP/$name.out" 2>&1
    rc=$?
    # shellcheck disable=SC2046 # one file per rank
    if [ $rc -eq 0 ] && grep -q "backend $BACKEND" "$TMP/$name.out" && same_files $(rank_files "$TMP/$name"); then
        pass "$label: $BACKEND on $NGPU rank(s), parameters identical"
    else
        bad "$label, backend $BACKEND (exit $rc)"
        tail_of "$TMP/$name.out"
    fi
}

# 3. The default backend choice through ddprun: NCCL, every rank in sync.
synced_run auto "ddprun --nproc_per_node=$NPROC, default backend"

# 4. --virtual_local_rank: LOCAL_RANK=0 and one visible device per worker; still NCCL.
synced_run vlr "--virtual_local_rank, one device each" --virtual_local_rank

# 4b. The collective timing (straggler detection): each rank's DDPRUN_TIMING_FILE counts its
#     steps, with time waited in collectives and time computed between them (CUDA events around
#     ncclAllReduce on NCCL, the host clock on the CPU backend).
under_ddprun --log_dir "$TMP/tlog" "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples "$SAMPLES" \
    --epochs 1 >"$TMP/timing.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && python3 - "$TMP/tlog" "$NGPU" <<'PY'; then
import glob, sys
files = sorted(glob.glob(sys.argv[1] + "/attempt_0/*/timing"))
assert len(files) == int(sys.argv[2]), files
for f in files:
    t, c, w, n, h = open(f).read().split()
    assert t == "t1" and int(n) >= 64 and int(c) > 0 and int(w) > 0, (f, c, w, n)
    print("# %s: %d steps, compute %.1f ms, wait %.1f ms" % (f[len(sys.argv[1]):], int(n),
          int(c) / 1e6, int(w) / 1e6))
PY
    pass "collective timing: every rank's timing file counts its 64 steps, compute and wait"
else
    bad "collective timing (exit $rc, or a timing file without the steps)"
    tail_of "$TMP/timing.out"
fi

# 5. Checkpoint, stop mid-epoch 2, resume: bitwise the uninterrupted run.
under_ddprun "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples "$SAMPLES" --epochs 2 --checkpoint-dir "$TMP/ckA" \
    --dump-params "$TMP/whole.bin" >"$TMP/whole.out" 2>&1 &&
    under_ddprun "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples "$SAMPLES" --epochs 2 --checkpoint-dir "$TMP/ckB" \
        --checkpoint-every 16 --max-steps 100 >"$TMP/part1.out" 2>&1 &&
    under_ddprun "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples "$SAMPLES" --epochs 2 --checkpoint-dir "$TMP/ckB" \
        --dump-params "$TMP/resumed.bin" >"$TMP/part2.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && same_files "$TMP/whole.bin" "$TMP/resumed.bin"; then
    pass "stopped at step 100 of 128, resumed from the step-96 checkpoint: bitwise the uninterrupted run"
else
    bad "checkpoint and resume on the GPU (exit $rc, or parameters differ)"
    tail_of "$TMP/part2.out"
fi

# 6. A rank killed mid-collective: the group stops, restarts from its checkpoint and finishes.
if [ "$NGPU" -ge 2 ]; then
    DDPRUN_COLL_TIMEOUT_MS=20000 timeout -k 5 300 "$DDPRUN" --standalone --nproc_per_node="$NPROC" \
        --max_restarts=1 "$BIN/train" "${COMMON[@]}" "${Q[@]}" --samples "$SAMPLES" --epochs 2 \
        --checkpoint-dir "$TMP/ckK" --checkpoint-every 16 --step-delay-ms 10 \
        --metrics "$TMP/kill.jsonl" --log-every 4 >"$TMP/kill.out" 2>&1 &
    JOB=$!
    victim=
    for _ in $(seq 600); do # until rank 0 has logged step 40 (at most 60 s)
        rows=$(grep -c '"step"' "$TMP/kill.jsonl" 2>/dev/null)
        if [ "${rows:-0}" -ge 10 ]; then
            # The worker of RANK=1 among ddprun's children (by PID, never by name).
            for c in $(cat /proc/"$JOB"/task/*/children 2>/dev/null); do
                for w in $c $(cat /proc/"$c"/task/*/children 2>/dev/null); do
                    tr '\0' '\n' <"/proc/$w/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$w
                done
            done
            break
        fi
        sleep 0.1
    done
    [ -n "$victim" ] && kill -KILL "$victim"
    wait "$JOB"
    rc=$?
    JOB=
    if [ -n "$victim" ] && [ $rc -eq 0 ] && grep -q "restarting, attempt 1" "$TMP/kill.out"; then
        pass "rank 1 SIGKILLed mid-training: the group stopped, restarted and finished"
    else
        bad "rank killed mid-collective (victim ${victim:-not found}, exit $rc)"
        tail_of "$TMP/kill.out" 12
    fi
else
    need2 "a rank SIGKILLed mid-collective: the others stop, the group restarts"
fi

# 7. The NCCL profiler plugin: a program that calls NCCL itself (nccl_direct, as PyTorch does)
# under ddprun with NCCL_PROFILER_PLUGIN naming the plugin, one rank per GPU, rank 1 sleeping 6 ms
# more than the others before each allreduce (a straggler). Each rank's DDPRUN_TIMING_FILE must
# count every allreduce as a step, and rank 1's compute per step must stand out while the others
# wait for it. With one GPU NCCL runs no kernel for a world of one: the plugin's load is checked.
PLUGIN=$BIN/lib/libnccl-profiler-ddprun.so
ITERS=200
if [ -n "$REHEARSAL" ]; then
    gpu_only "NCCL profiler plugin times a program's own allreduces"
elif [ ! -x "$BIN/tests/nccl_direct" ] || [ ! -f "$PLUGIN" ]; then
    bad "NCCL profiler plugin: $BIN/tests/nccl_direct or $PLUGIN not built"
else
    # shellcheck disable=SC2016 # $0, $RANK and $@ are the worker shell's
    NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT under_ddprun --no_python \
        sh -c ': >"$0.$RANK" && DDPRUN_TIMING_FILE="$0.$RANK" exec "$@"' "$TMP/timing" \
        "$BIN/tests/nccl_direct" --iters $ITERS --gap-ms 2 --slow-rank 1 --slow-ms 6 \
        >"$TMP/prof.out" 2>&1
    rc=$?
    grep -E 'ddprun profiler|profiler plugin' "$TMP/prof.out" | sed 's/^/#   /' | head -8
    if [ $rc -ne 0 ] || ! grep -q "ddprun profiler: rank 0 of $NGPU: timing communicator" "$TMP/prof.out"; then
        bad "NCCL profiler plugin: not loaded, or the run failed (exit $rc)"
        tail_of "$TMP/prof.out" 12
    elif [ "$NGPU" -lt 2 ]; then
        pass "NCCL profiler plugin loaded by NCCL and timing the world's communicator"
        need2 "NCCL profiler plugin: a slow rank's compute per step stands out"
    elif python3 - "$TMP/timing" "$NGPU" $ITERS <<'PY'; then
import sys
base, n, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = []
for r in range(n):
    f = open("%s.%d" % (base, r)).read().split()
    assert f[0] == "t1", "rank %d: no record" % r
    c, w, s = int(f[1]), int(f[2]), int(f[3])
    assert s == iters, "rank %d: %d steps, %d allreduces" % (r, s, iters)
    per.append((c / s / 1e6, w / s / 1e6))
    print("#   rank %d: compute %.2f ms, wait %.2f ms per step" % (r, per[-1][0], per[-1][1]))
others = [p for r, p in enumerate(per) if r != 1]
ok = per[1][0] > 1.5 * max(p[0] for p in others) and min(p[1] for p in others) > per[1][1]
sys.exit(0 if ok else 1)
PY
        pass "NCCL profiler plugin: every allreduce timed on $NGPU ranks, the slow rank's compute stands out"
    else
        bad "NCCL profiler plugin: the timing records (steps, or the slow rank not standing out)"
        tail_of "$TMP/prof.out" 12
    fi
fi

# Figures. The compute roof: every SGEMM of train's default MLP step at batch 256, best times.
BATCH=256
if [ -n "$REHEARSAL" ]; then
    gpu_only "cuBLAS SGEMM roof"
    : >"$TMP/sgemm.json"
else
    "$BIN/bench/bench_gpu" sgemm --layers 512,1024,512,10 --batch $BATCH --seconds $SECONDS_PER \
        >"$TMP/sgemm.json" 2>"$TMP/sgemm.err" || {
        bad "cuBLAS SGEMM roof"
        tail_of "$TMP/sgemm.err" 3
    }
fi
# Train's throughput after warm-up (the first rows dropped), default MLP, batch 256 per rank.
under_ddprun "$BIN/train" --batch-size $BATCH --samples $((TPUT_SAMPLES * NGPU)) --epochs 1 --log-every 4 \
    --metrics "$TMP/tput.jsonl" --quiet >"$TMP/tput.out" 2>&1 || {
    bad "train throughput run"
    tail_of "$TMP/tput.out"
}
BUSBW=null
if [ "$NGPU" -ge 2 ]; then
    under_ddprun "$BIN/bench/bench_allreduce" --backend $BACKEND --max-bytes $AR_MAX --seconds $SECONDS_PER \
        >"$TMP/ar.out" 2>&1 || bad "NCCL allreduce benchmark (an error, or a wrong sum)"
    grep -E '^ +[0-9]+ ' "$TMP/ar.out" | tail -4 | sed 's/^/# /'
    BUSBW=$(sed -n 's/^# busbw at the largest size: \([0-9.]*\) GB.*/\1/p' "$TMP/ar.out")
    [ -n "$BUSBW" ] || BUSBW=null
else
    need2 "NCCL allreduce busbw (one rank moves no bytes)"
fi
python3 - "$TMP/sgemm.json" "$TMP/tput.jsonl" "$NGPU" "$BUSBW" "$REHEARSAL" <<'PY' || bad "figures"
import json, sys
fig = {"gpus": int(sys.argv[3])}
try:
    s = json.loads(open(sys.argv[1]).read())
    fig.update(device=s["device"], sgemm_tflops=s["sgemm_tflops"])
except Exception:
    s = None
rows = [json.loads(l) for l in open(sys.argv[2]) if "samples_per_s" in l and "epoch_end" not in l]
rows = rows[3:] or rows  # after warm-up
sps = sorted(r["samples_per_s"] for r in rows)[len(rows) // 2] if rows else None
fig["train_samples_per_s"] = sps
if sps and s:
    per_gpu = sps / fig["gpus"]
    fig["mlp_step_tflops_per_gpu"] = round(per_gpu * s["sgemm_flop_per_sample"] / 1e12, 3)
    fig["mlp_fraction_of_sgemm_roof"] = round(fig["mlp_step_tflops_per_gpu"] / s["sgemm_tflops"], 3)
fig["allreduce_busbw_gbs_at_max_size"] = None if sys.argv[4] == "null" else float(sys.argv[4])
if sys.argv[5]:
    fig["rehearsal"] = sys.argv[5]
print("gpu-check figures: " + json.dumps(fig))
sys.exit(0 if sps and (s or sys.argv[5]) else 1)
PY
[ $fail = 0 ] && echo "gpu-check: all passed" || echo "gpu-check: FAILED"
exit $fail
