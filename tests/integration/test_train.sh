#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 11
# Integration suite for libddpw and train: real processes on 127.0.0.1, a real ddp-rendezvous
# (port 0), ranks started by this script with the environment the agent gives workers (the
# launcher is not needed). Covers learning, identical parameters across ranks, CPU allreduce
# with 2 and 3 ranks, kill + restart from a checkpoint (bitwise identical to an uninterrupted
# run, also when the newest checkpoint is torn), authentication, clean errors, and hostile
# inputs (shared directories, symlinks, a FIFO checkpoint, non-finite values, huge lines), and the
# heartbeat file (the final step at the end; a symlink refused without stopping the run).
. "$(dirname "$0")/lib.sh"

TRAIN="$BIN/train"
# shellcheck disable=SC2054 # the commas are inside one value (--layers)
SMALL=(--layers 32,64,4 --samples 4096 --batch-size 32 --backend cpu --log-every 1000)
STORE_PID=
PORT=

# start_store [ARGS...]: starts ddp-rendezvous on 127.0.0.1 port 0; sets STORE_PID and PORT.
start_store() {
    local out="$TMP/store.$RANDOM.out"
    "$BIN/ddp-rendezvous" --host 127.0.0.1 --port 0 "$@" >"$out" 2>"$out.err" &
    STORE_PID=$!
    wait_for "$out" 'listening on' 10 || return 1
    PORT=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$out" | head -1)
    [ -n "$PORT" ]
}

stop_store() {
    [ -n "$STORE_PID" ] && kill "$STORE_PID" 2>/dev/null && wait "$STORE_PID" 2>/dev/null
    STORE_PID=
}

# rank_env RANK WORLD ROUND RUN: sets RENV to the worker environment of one local rank.
rank_env() {
    RENV=(RANK="$1" LOCAL_RANK="$1" WORLD_SIZE="$2" LOCAL_WORLD_SIZE="$2" GROUP_RANK=0
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 TORCHELASTIC_RESTART_COUNT="$3"
        TORCHELASTIC_ERROR_FILE="$TMP/err.$4.$1.json" TORCHELASTIC_RUN_ID="$4"
        DDPRUN_STORE_ADDR=127.0.0.1 DDPRUN_STORE_PORT="$PORT" DDPRUN_ROUND="$3" DDPRUN_RUN_ID="$4")
}

# n_ckpt DIR: number of checkpoint files in DIR.
n_ckpt() {
    local f n=0
    for f in "$1"/ckpt-*.bin; do [ -e "$f" ] && n=$((n + 1)); done
    echo $n
}

# run_world WORLD ROUND RUN PROG ARGS...: runs WORLD ranks of PROG in the background, waits
# (bounded, 60 s) and returns 0 when every rank exited 0. Output in $TMP/RUN.r<rank>.out.
run_world() {
    local world=$1 round=$2 run=$3; shift 3
    local pids=() r rc=0
    for ((r = 0; r < world; r++)); do
        rank_env $r "$world" "$round" "$run"
        env "${RENV[@]}" timeout -k 2 60 "$@" \
            >"$TMP/$run.r$r.out" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

# wait_bounded PID SECS: waits for a background child, killing it after SECS; returns its status.
wait_bounded() {
    local pid=$1 end=$(($(date +%s) + $2))
    while [ -d /proc/$pid ] && [ "$(awk '{print $3}' /proc/$pid/stat 2>/dev/null)" != Z ]; do
        if [ "$(date +%s)" -ge $end ]; then kill -KILL "$pid" 2>/dev/null; break; fi
        sleep 0.02
    done
    wait "$pid"
}

eval_acc() { grep -o 'eval_accuracy [0-9.]*' "$1" | tail -1 | awk '{print $2}'; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

start_store --no-auth || { not_ok "store starts"; finish; exit 1; }

# 1. A world of one (no DDPRUN_* at all) learns, and writes JSON-lines metrics.
(cd "$TMP" && timeout 60 "$TRAIN" "${SMALL[@]}" --epochs 3 --metrics m1.jsonl >solo.out 2>&1)
acc=$(eval_acc "$TMP/solo.out")
check "world of one learns (eval accuracy ${acc:-none} > 0.6, chance 0.25)" above "${acc:-0}" 0.6
check "metrics are JSON lines with step, epoch, loss, accuracy, samples_per_s" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows and all(k in r for r in rows for k in ("step", "epoch", "loss", "accuracy"))
assert any("samples_per_s" in r for r in rows)' "$TMP/m1.jsonl"

# 2. Two ranks on the CPU backend: learn, stay in sync every epoch, end with equal parameters.
run_world 2 0 dp "$TRAIN" "${SMALL[@]}" --epochs 3 --check-sync --dump-params "$TMP/dp.{rank}.bin"
rc=$?
acc=$(eval_acc "$TMP/dp.r0.out")
check "2 ranks train and exit 0" [ $rc -eq 0 ]
check "2 ranks learn (eval accuracy ${acc:-none} > 0.6)" above "${acc:-0}" 0.6
check "2 ranks end with bitwise identical parameters" cmp -s "$TMP/dp.0.bin" "$TMP/dp.1.bin"
check "only rank 0 prints progress" [ ! -s "$TMP/dp.r1.out" ]

# 2a. Data-parallel equivalence end to end: 2 ranks x batch 32 see, step by step, the same
#     samples as 1 rank x batch 64 (DistributedSampler strides the same permutation), so the
#     parameters after 20 steps agree up to float rounding.
run_world 2 0 eq2 "$TRAIN" "${SMALL[@]}" --epochs 1 --max-steps 20 --dump-params "$TMP/eq2.bin"
rc=$?
(cd "$TMP" && timeout 60 "$TRAIN" "${SMALL[@]}" --batch-size 64 --epochs 1 --max-steps 20 \
    --dump-params "$TMP/eq1.bin" >eq1.out 2>&1)
check "2 ranks x 32 == 1 rank x 64 after 20 steps (float tolerance)" \
    python3 -c '
import struct, sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert sys.argv[3] == "0" and len(a) == len(b) > 0
n = len(a) // 4
x, y = struct.unpack("<%df" % n, a), struct.unpack("<%df" % n, b)
worst = max(abs(p - q) / (1e-3 + abs(p)) for p, q in zip(x, y))
assert worst < 1e-3, worst' "$TMP/eq1.bin" "$TMP/eq2.bin" "$rc"

# 2e. --virtual_local_rank: every worker has LOCAL_RANK=0 (its one visible device); the CPU
#     backend places them on the node by DDPRUN_LOCAL_RANK, so they meet as the same 2-rank world
#     (bitwise the run of 2a). A 10 s collective timeout bounds a mistake.
DDPRUN_COLL_TIMEOUT_MS=10000 CUDA_VISIBLE_DEVICES=0,1 timeout -k 2 60 "$BIN/ddprun" --standalone \
    --nproc_per_node=2 --virtual_local_rank "$TRAIN" "${SMALL[@]}" --backend auto --epochs 1 \
    --max-steps 20 --dump-params "$TMP/vlr.bin" >"$TMP/vlr.out" 2>&1
rc=$?
check "--virtual_local_rank, no GPU: 2 workers with LOCAL_RANK=0 train on the CPU backend, exit 0" \
    [ $rc -eq 0 ]
check "--virtual_local_rank: the same parameters as 2 ranks with their own LOCAL_RANK (bitwise)" \
    cmp -s "$TMP/vlr.bin" "$TMP/eq2.bin"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/vlr.out" | tail -5

# 2b. Two "nodes" of two ranks each on this machine: shared memory inside each node, the TCP
#     ring between the node leaders. Ranks stay bitwise in sync.
pids=()
for r in 0 1 2 3; do
    rank_env $r 4 0 mn
    env "${RENV[@]}" LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) \
        timeout -k 2 60 "$TRAIN" "${SMALL[@]}" --epochs 2 --check-sync \
        --dump-params "$TMP/mn.{rank}.bin" >"$TMP/mn.r$r.out" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
acc=$(eval_acc "$TMP/mn.r0.out")
check "2 nodes x 2 ranks (cpu backend over shm + TCP) train, eval accuracy ${acc:-none} > 0.6" \
    bash -c "[ $rc -eq 0 ] && awk -v a='${acc:-0}' 'BEGIN { exit !(a > 0.6) }'"
check "2 nodes x 2 ranks end with bitwise identical parameters" \
    bash -c "cmp -s '$TMP/mn.0.bin' '$TMP/mn.1.bin' && cmp -s '$TMP/mn.0.bin' '$TMP/mn.2.bin' && cmp -s '$TMP/mn.0.bin' '$TMP/mn.3.bin'"

# 2c. Heartbeat: each rank gets its own empty 0600 file in DDPRUN_HEARTBEAT_FILE, as the agent
#     makes them. After training, checkpoints and evaluation included, each file holds the final
#     step, 128 (4096 samples / 2 ranks / 32 per batch = 64 steps per epoch, 2 epochs), in the
#     form the agent reads: at most 32 bytes, a decimal number and a newline.
pids=()
for r in 0 1; do
    : >"$TMP/hb.$r" && chmod 600 "$TMP/hb.$r"
    rank_env $r 2 0 hb
    env "${RENV[@]}" DDPRUN_HEARTBEAT_FILE="$TMP/hb.$r" timeout -k 2 60 "$TRAIN" "${SMALL[@]}" \
        --epochs 2 --checkpoint-dir "$TMP/ck-hb" --checkpoint-every 16 >"$TMP/hb.r$r.out" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
hb0=$(head -c 32 "$TMP/hb.0")
hb1=$(head -c 32 "$TMP/hb.1")
check "heartbeat: after training both ranks' files hold the final step (rc $rc, '$hb0', '$hb1')" \
    bash -c "[ $rc -eq 0 ] && [ '$hb0' = 00000000000000000128 ] && [ '$hb1' = 00000000000000000128 ] && [ \$(stat -c %s '$TMP/hb.0') -eq 21 ]"

# 2d. A heartbeat file that is a symlink is refused with one warning naming it, the link is not
#     followed, and training goes on (the job never dies of its heartbeat).
: >"$TMP/hb.victim"
ln -s "$TMP/hb.victim" "$TMP/hb.link"
(cd "$TMP" && DDPRUN_HEARTBEAT_FILE="$TMP/hb.link" timeout 60 "$TRAIN" "${SMALL[@]}" --epochs 1 \
    --quiet >hblink.out 2>&1)
rc=$?
check "heartbeat: a symlinked file is refused with one warning and training finishes (rc $rc)" \
    bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'heartbeat file .*hb.link is a symbolic link' '$TMP/hblink.out') -eq 1 ] && [ ! -s '$TMP/hb.victim' ]"

# 3. CPU allreduce correctness (values checked on every rank) with 2 and 3 ranks.
for n in 2 3; do
    run_world $n 0 ar$n "$BIN/bench/bench_allreduce" --min-bytes 4 --max-bytes 4M --seconds 0.3
    rc=$?
    wrong=$(awk '$1 ~ /^[0-9]+$/ { s += $6 } END { print s + 0 }' "$TMP/ar$n.r0.out")
    rows=$(awk '$1 ~ /^[0-9]+$/' "$TMP/ar$n.r0.out" | wc -l)
    check "cpu allreduce with $n ranks: $rows sizes, 0 wrong values (got $wrong)" \
        [ $rc -eq 0 -a "$wrong" = 0 -a "$rows" -ge 18 ]
done

# 4. Restart: an uninterrupted run, then a run killed mid-training and restarted with the next
#    round, resuming from its checkpoint (the newest one torn on purpose): same bits at the end.
RS=(--epochs 4 --checkpoint-every 16)
run_world 2 0 ref "$TRAIN" "${SMALL[@]}" "${RS[@]}" --checkpoint-dir "$TMP/ck-ref" \
    --dump-params "$TMP/ref.bin"
check "uninterrupted reference run" [ $? -eq 0 -a -s "$TMP/ref.bin" ]

mkdir -p "$TMP/ck"
pids=()
for r in 0 1; do
    # No `timeout` wrapper here: the kill below must reach train itself (wait_bounded bounds it).
    rank_env $r 2 0 rs
    env "${RENV[@]}" "$TRAIN" "${SMALL[@]}" "${RS[@]}" \
        --checkpoint-dir "$TMP/ck" --dump-params "$TMP/rs.bin" --step-delay-ms 4 \
        >"$TMP/rs.r$r.out" 2>&1 &
    pids+=($!)
done
# Wait for two checkpoints, then kill rank 1 hard mid-run.
deadline=$(($(date +%s) + 20))
while [ "$(n_ckpt "$TMP/ck")" -lt 2 ] && [ "$(date +%s)" -lt $deadline ]; do
    sleep 0.02
done
kill -KILL "${pids[1]}" 2>/dev/null
wait_bounded "${pids[1]}" 10 2>/dev/null
t0=$(date +%s%N)
wait_bounded "${pids[0]}" 30
rc0=$?
dt=$((($(date +%s%N) - t0) / 1000000))
check "rank 0 notices its dead peer and fails (rc $rc0) within 5 s (${dt} ms)" \
    [ $rc0 -ne 0 -a $rc0 -ne 124 -a $dt -lt 5000 ]
check "rank 0 names the dead rank in stderr and in its error file" \
    grep -q 'rank 1' "$TMP/err.rs.0.json"
check "the killed run left checkpoints but had not finished" [ ! -e "$TMP/rs.bin" ]
newest=
for f in "$TMP"/ck/ckpt-*.bin; do [ -e "$f" ] && newest=$(basename "$f"); done # glob order: newest last
n_ck=$(n_ckpt "$TMP/ck")
# Tear the newest checkpoint: the restart must fall back to the previous one.
if [ -n "$newest" ] && [ "$n_ck" -ge 2 ]; then
    truncate -s 100 "$TMP/ck/$newest"
fi
run_world 2 1 rs "$TRAIN" "${SMALL[@]}" "${RS[@]}" --checkpoint-dir "$TMP/ck" \
    --dump-params "$TMP/rs.bin"
check "restart (round 1) finishes" [ $? -eq 0 ]
check "restart resumed from a checkpoint" grep -q '^resuming from' "$TMP/rs.r0.out"
check "restart skipped the torn checkpoint" grep -q 'skipped 1 unusable checkpoint' "$TMP/rs.r0.out"
check "restarted run ends bitwise identical to the uninterrupted run" cmp -s "$TMP/ref.bin" "$TMP/rs.bin"
# A segment whose creator (the PID in its name) has exited is left over; one of a live process
# belongs to a job still running beside this suite.
orphan_segments() {
    local f pid
    for f in /dev/shm/ddpw-*; do
        [ -e "$f" ] || continue
        pid=${f#/dev/shm/ddpw-}; pid=${pid%%-*}
        [ -d "/proc/$pid" ] || echo "$f"
    done
}
check "no shared-memory segment left in /dev/shm" [ -z "$(orphan_segments)" ]

# 4b. The same with Adam (its state is two moments and a step count): stop after 90 steps (mid
#     epoch 2), resume in round 1 from the epoch-1 checkpoint, compare with an uninterrupted run.
AD=(--optimizer adam --lr 0.005 --epochs 2)
run_world 2 0 adref "$TRAIN" "${SMALL[@]}" "${AD[@]}" --checkpoint-dir "$TMP/ck-adref" \
    --dump-params "$TMP/adref.bin"
rc1=$?
run_world 2 0 ad "$TRAIN" "${SMALL[@]}" "${AD[@]}" --checkpoint-dir "$TMP/ck-ad" --max-steps 90
rc2=$?
run_world 2 1 ad "$TRAIN" "${SMALL[@]}" "${AD[@]}" --checkpoint-dir "$TMP/ck-ad" \
    --dump-params "$TMP/ad.bin"
rc3=$?
check "adam: resumed run ends bitwise identical to the uninterrupted run" \
    bash -c "[ $rc1$rc2$rc3 = 000 ] && grep -q '^resuming from' '$TMP/ad.r0.out' && cmp -s '$TMP/adref.bin' '$TMP/ad.bin'"
stop_store

# 5. Authentication: the right token works; a wrong one fails with a clear error.
TOKEN=00112233445566778899aabbccddeeff0123456789abcdef
printf '%s' "$TOKEN" | xxd -r -p >"$TMP/token" 2>/dev/null ||
    python3 -c 'import sys; open(sys.argv[1], "wb").write(bytes.fromhex(sys.argv[2]))' "$TMP/token" "$TOKEN"
chmod 600 "$TMP/token" # the store reads only private token files
start_store --token-file "$TMP/token" || not_ok "store with a token starts"
DDPRUN_STORE_TOKEN=$TOKEN run_world 2 0 auth "$TRAIN" "${SMALL[@]}" --epochs 1
check "ranks authenticate with DDPRUN_STORE_TOKEN" [ $? -eq 0 ]
DDPRUN_STORE_TOKEN=ffff2233445566778899aabbccddeeff0123456789abcdef \
    run_world 2 0 badauth "$TRAIN" "${SMALL[@]}" --epochs 1
rc=$?
check "a wrong token is refused with a clear error" \
    bash -c "[ $rc -ne 0 ] && grep -qiE 'token|auth' '$TMP/badauth.r0.out'"
stop_store

# 6. Clean errors: no GPU, bad flags, bad environment, malformed CSV.
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
    TORCHELASTIC_ERROR_FILE=$TMP/nogpu.json timeout 30 "$TRAIN" --backend nccl \
        >"$TMP/nogpu.out" 2>&1
    rc=$?
    check "--backend nccl without a GPU exits 1 (got $rc) saying so" \
        bash -c "[ $rc -eq 1 ] && grep -Eq 'backend nccl: rank 0 on node 0 \(.*\): no CUDA (device|driver)' '$TMP/nogpu.out'"
    check "the error file has PyTorch's shape" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["message"]
assert "no CUDA d" in m["message"] and m["extraInfo"]["timestamp"].isdigit()' "$TMP/nogpu.json"
    timeout 30 "$TRAIN" --backend auto --epochs 1 --samples 512 >"$TMP/noauto.out" 2>&1
    check "--backend auto without a GPU trains on the CPU backend without a warning" \
        bash -c "[ $? -eq 0 ] && grep -q 'backend cpu' '$TMP/noauto.out' && ! grep -q warning '$TMP/noauto.out'"
else
    skip "--backend nccl without a GPU exits 1 saying so" "a GPU is present"
    skip "the error file has PyTorch's shape" "a GPU is present"
    skip "--backend auto without a GPU trains on the CPU backend without a warning" "a GPU is present"
fi

# 6a. A CUDA driver older than the runtime (tests/helpers/fake_libcuda_old.c, through
#     LD_LIBRARY_PATH): cudaGetDeviceCount fails with cudaErrorInsufficientDriver. That is kept
#     and said with both versions, never taken for "no GPU": NCCL fails with it, AUTO warns with
#     it and trains on the CPU. Under ddprun the 2 ranks agree: the same line from each, at once.
OLD_DRIVER=$BIN/tests/old_driver
LD_LIBRARY_PATH=$OLD_DRIVER timeout 30 "$TRAIN" --backend nccl >"$TMP/olddrv.out" 2>&1
rc=$?
if grep -q "this build has no CUDA support" "$TMP/olddrv.out"; then
    for t in "--backend nccl under an old driver names CUDA's error and both versions" \
        "--backend auto under an old driver warns with it and trains on the CPU" \
        "2 ranks under an old driver: the same error line from each, exit 1"; do
        skip "$t" "train was built without CUDA"
    done
else
    want="cudaGetDeviceCount: cudaErrorInsufficientDriver \(driver 11\.8, runtime [0-9]+\.[0-9]+\)"
    check "--backend nccl under an old driver names CUDA's error and both versions" \
        bash -c "[ $rc -eq 1 ] && grep -Eq 'backend nccl: rank 0 on node 0 \(.*\): $want' '$TMP/olddrv.out'"
    LD_LIBRARY_PATH=$OLD_DRIVER timeout 30 "$TRAIN" --backend auto --epochs 1 --samples 512 \
        >"$TMP/olddrv2.out" 2>&1
    check "--backend auto under an old driver warns with it and trains on the CPU" \
        bash -c "[ $? -eq 0 ] && grep -Eq 'warning: backend auto: the CPU backend for every rank.*$want' '$TMP/olddrv2.out' && grep -q 'backend cpu' '$TMP/olddrv2.out'"
    LD_LIBRARY_PATH=$OLD_DRIVER timeout 60 "$BIN/ddprun" --standalone --nproc_per_node=2 "$TRAIN" \
        --backend nccl >"$TMP/olddrv3.out" 2>&1
    rc=$?
    check "2 ranks under an old driver: the same error line from each, exit 1" \
        bash -c "[ $rc -eq 1 ] && [ \$(grep -Ec ' E rank [01]: worker init: backend nccl: rank 0 on node 0 \(.*\): $want' '$TMP/olddrv3.out') = 2 ]"
fi
"$TRAIN" --epochs 0 >"$TMP/flag.out" 2>&1
rc=$?
check "a bad flag value exits 2 with one line naming it" \
    bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$TMP/flag.out') -eq 1 ] && grep -q -- '--epochs' '$TMP/flag.out'"
"$TRAIN" --frobnicate >"$TMP/flag2.out" 2>&1
check "an unknown flag exits 2 naming it" \
    bash -c "[ $? -eq 2 ] && grep -q -- '--frobnicate' '$TMP/flag2.out'"
RANK=3 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 "$TRAIN" >"$TMP/env.out" 2>&1
check "a bad RANK exits 1 naming the variable" \
    bash -c "[ $? -eq 1 ] && grep -q \"RANK='3'\" '$TMP/env.out'"
printf 'label,a,b\n1,0.5,2\n0,1,oops\n' >"$TMP/bad.csv"
"$TRAIN" --data "$TMP/bad.csv" >"$TMP/csv.out" 2>&1
check "a malformed CSV row is named by line" \
    bash -c "[ $? -eq 1 ] && grep -q 'bad.csv:3: field 3' '$TMP/csv.out'"
python3 -c '
import random
random.seed(3)
with open("'"$TMP"'/good.csv", "w") as f:
    f.write("label,x,y\n")
    for _ in range(1200):
        x, y = random.uniform(-1, 1), random.uniform(-1, 1)
        f.write("%d,%.4f,%.4f\n" % (int(x * y > 0), x, y))'
timeout 60 "$TRAIN" --data "$TMP/good.csv" --layers 2,32,2 --epochs 8 --batch-size 16 \
    --optimizer adam --lr 0.01 --log-every 1000 >"$TMP/csvok.out" 2>&1
acc=$(eval_acc "$TMP/csvok.out")
check "training on a CSV file learns (eval accuracy ${acc:-none} > 0.8)" above "${acc:-0}" 0.8

# 6b. make gpu-check, rehearsed on the CPU backend (2 workers stand for 2 GPUs): the script that
#     proves the GPU path on a lent GPU machine runs its every check that needs no GPU here.
GPU_CHECK_REHEARSAL=cpu BUILD=$BUILD timeout 300 bash worker_template/gpu_check.sh \
    >"$TMP/gpucheck.out" 2>&1
rc=$?
check "gpu-check rehearsal: every check that needs no GPU passes, one JSON line of figures" \
    bash -c "[ $rc -eq 0 ] && grep -q '^gpu-check: all passed' '$TMP/gpucheck.out' &&
        [ \$(grep -c '^ok - ' '$TMP/gpucheck.out') = 6 ] && ! grep -q '^not ok' '$TMP/gpucheck.out' &&
        grep -q '^gpu-check figures: {' '$TMP/gpucheck.out'"
[ $rc -eq 0 ] && [ "$(grep -c '^ok - ' "$TMP/gpucheck.out")" = 6 ] ||
    sed 's/^/# /' "$TMP/gpucheck.out" | tail -15

# 7. Files in shared directories: a checkpoint directory others may write is refused; symlinks
#    planted at --metrics and --dump-params are never written through.
TINY=(--layers 8,16,2 --samples 256 --batch-size 32 --backend cpu --epochs 1 --quiet)
mkdir -p "$TMP/shared" && chmod 0777 "$TMP/shared"
timeout 30 "$TRAIN" "${TINY[@]}" --checkpoint-dir "$TMP/shared" >"$TMP/shared.out" 2>&1
rc=$?
check "a checkpoint dir writable by others (no sticky bit) exits 1 (got $rc) naming dir and mode" \
    bash -c "[ $rc -eq 1 ] && [ \$(wc -l <'$TMP/shared.out') -eq 1 ] && grep -q '$TMP/shared (mode 0777)' '$TMP/shared.out'"
chmod 1777 "$TMP/shared"
timeout 30 "$TRAIN" "${TINY[@]}" --checkpoint-dir "$TMP/shared" >"$TMP/sticky.out" 2>&1
check "the same directory with the sticky bit is accepted" [ $? -eq 0 -a "$(n_ckpt "$TMP/shared")" -ge 1 ]
printf 'precious' >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/metrics.jsonl"
timeout 30 "$TRAIN" "${TINY[@]}" --metrics "$TMP/metrics.jsonl" >"$TMP/mlink.out" 2>&1
rc=$?
check "--metrics at a symlink exits 1 (got $rc) and leaves its target alone" \
    bash -c "[ $rc -eq 1 ] && grep -q 'symbolic link' '$TMP/mlink.out' && [ \"\$(cat '$TMP/victim')\" = precious ]"
ln -s "$TMP/victim" "$TMP/dump.bin"
timeout 30 "$TRAIN" "${TINY[@]}" --dump-params "$TMP/dump.bin" >"$TMP/dlink.out" 2>&1
rc=$?
check "--dump-params at a symlink replaces the link (rc $rc), its target untouched" \
    bash -c "[ $rc -eq 0 ] && [ -f '$TMP/dump.bin' ] && [ ! -L '$TMP/dump.bin' ] && [ \"\$(cat '$TMP/victim')\" = precious ]"

# 8. A FIFO named like the newest checkpoint: resume skips it (never blocks on it) and uses the
#    newest regular checkpoint.
mkdir -p "$TMP/ckfifo" && chmod 0700 "$TMP/ckfifo"
timeout 30 "$TRAIN" "${TINY[@]}" --checkpoint-dir "$TMP/ckfifo" >"$TMP/ckfifo1.out" 2>&1
mkfifo "$TMP/ckfifo/ckpt-00000000000000099999.bin"
timeout 10 "$TRAIN" "${TINY[@]}" --epochs 2 --checkpoint-dir "$TMP/ckfifo" >"$TMP/ckfifo2.out" 2>&1
rc=$?
check "a FIFO checkpoint is skipped, not opened (rc $rc, 124 = hung)" \
    bash -c "[ $rc -eq 0 ] && grep -q 'not a regular file' '$TMP/ckfifo2.out'"

# 9. Values that are not finite: refused in the CSV (file and line named) and on the command line;
#    a loss that becomes NaN stops every rank at that step (exit 1, rank and step named).
printf 'label,a,b\n1,0.5,2\n0,1e39,1\n' >"$TMP/inf.csv"
timeout 30 "$TRAIN" --data "$TMP/inf.csv" >"$TMP/inf.out" 2>&1
check "a CSV value that overflows float32 is refused by file and line" \
    bash -c "[ $? -eq 1 ] && grep -q 'inf.csv:3: field 2 (.1e39.) is not a finite float32' '$TMP/inf.out'"
timeout 30 "$TRAIN" --lr 1e39 >"$TMP/lr.out" 2>&1
check "--lr 1e39 exits 2 naming the flag" \
    bash -c "[ $? -eq 2 ] && [ \$(wc -l <'$TMP/lr.out') -eq 1 ] && grep -q -- '--lr' '$TMP/lr.out'"
python3 -c '
with open("'"$TMP"'/huge.csv", "w") as f:
    for i in range(256):
        f.write("%d,3e38,-3e38,3e38\n" % (i % 2))'
start_store --no-auth || not_ok "store starts again"
run_world 2 0 nan "$TRAIN" --data "$TMP/huge.csv" --layers 3,8,2 --batch-size 16 --backend cpu \
    --epochs 1 --quiet
rc=$?
stop_store
check "a non-finite loss stops both ranks at step 1 (exit 1), each naming its rank" \
    bash -c "[ $rc -ne 0 ] && grep -q 'rank 0: step 1: the .* is not finite' '$TMP/nan.r0.out' && grep -q 'rank 1: step 1: the .* is not finite' '$TMP/nan.r1.out'"
python3 -c '
with open("'"$TMP"'/long.csv", "w") as f:
    f.write("1" + ",0.5" * 600000 + "\n")'
timeout 30 "$TRAIN" --data "$TMP/long.csv" >"$TMP/long.out" 2>&1
check "a CSV line over 1 MiB is refused by file and line, not blamed on --layers" \
    bash -c "[ $? -eq 1 ] && grep -q 'long.csv:1: line longer than 1048576 bytes' '$TMP/long.out' && ! grep -q -- '--layers' '$TMP/long.out'"

check "no process left behind" no_leftovers 3
finish
