#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Launch overhead, restart latency and peak RSS of the agent (bench/bench_launch.c).
#   BUILD=build RUNS=30 TORCH_RUNS=3 bench/launch.sh
# Exits non-zero when a figure cannot be measured, torchrun's included where it is installed.
set -eu
BUILD=${BUILD:-build}
TORCH_RUNS=${TORCH_RUNS:-3}
echo "| measure | ddprun | reference | ratio / target |"
echo "|---|---|---|---|"
"$BUILD/bench/bench_launch" "$BUILD/ddprun" "$BUILD/tests/fake_worker" "${RUNS:-30}"
# torchrun as a further reference, where Debian's python3-torch is installed (PyTorch 1.13 needs
# both -r and -t to start; --monitor_interval 0.1 as torch 2.x defaults to).
if command -v torchrun >/dev/null 2>&1; then
    ts=()
    for _ in $(seq "$TORCH_RUNS"); do
        t0=$(date +%s%N)
        timeout -k 5 120 torchrun --standalone --nproc_per_node=8 --no_python -r 1 -t 1 \
            --monitor_interval 0.1 /bin/true >/dev/null 2>&1 ||
            { echo "| torchrun reference | failed | - | - |"; exit 1; }
        ts+=($(( ($(date +%s%N) - t0) / 1000000 )))
    done
    med=$(printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "| reference: Debian's torchrun, same 8 x /bin/true | ${med} ms median of $TORCH_RUNS | - | - |"
fi
