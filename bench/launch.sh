#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Launch overhead, restart latency and peak RSS of the agent (bench/bench_launch.c).
set -eu
BUILD=${BUILD:-build}
echo "| measure | ddprun | reference | ratio / target |"
echo "|---|---|---|---|"
"$BUILD/bench/bench_launch" "$BUILD/ddprun" "$BUILD/tests/fake_worker" "${RUNS:-30}"
# torchrun as a further reference, where Debian's python3-torch is installed (PyTorch 1.13 needs
# both -r and -t to start; --monitor_interval 0.1 as torch 2.x defaults to).
if command -v torchrun >/dev/null 2>&1; then
    ts=()
    for _ in 1 2 3; do
        t0=$(date +%s%N)
        torchrun --standalone --nproc_per_node=8 --no_python -r 1 -t 1 --monitor_interval 0.1 \
            /bin/true >/dev/null 2>&1 || { echo "| torchrun reference | failed | - | - |"; exit 0; }
        ts+=($(( ($(date +%s%N) - t0) / 1000000 )))
    done
    med=$(printf '%s\n' "${ts[@]}" | sort -n | sed -n 2p)
    echo "| reference: Debian's torchrun, same 8 x /bin/true | ${med} ms median of 3 | - | - |"
fi
