#!/usr/bin/env bash
# Launch overhead, restart latency and peak RSS of the agent (bench/bench_launch.c).
set -eu
BUILD=${BUILD:-build}
echo "| measure | ddprun | reference | ratio / target |"
echo "|---|---|---|---|"
"$BUILD/bench/bench_launch" "$BUILD/ddprun" "$BUILD/tests/fake_worker" "${RUNS:-30}"
