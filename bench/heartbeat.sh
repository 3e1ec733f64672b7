#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The cost of a heartbeat (bench/bench_heartbeat.c): ns per ddpw_heartbeat call, rate-limited and
# with every beat writing, against a bare coarse-clock read and a bare pwrite in the same run.
# The files go in TMPDIR (default /tmp), whose file system the table names.
#   BUILD=build bench/heartbeat.sh        (CALLS, WRITES, RUNS override 10^7, 10^6, 5)
# Exits non-zero when a figure cannot be measured (bench_heartbeat fails).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-heartbeat.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "command: \`BUILD=$BUILD bench/heartbeat.sh\` ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| measure | ns per call (median of ${RUNS:-5}) | reference, same run | ratio |"
echo "|---|---:|---|---:|"
"$BUILD/bench/bench_heartbeat" "$TMP" "${CALLS:-10000000}" "${WRITES:-1000000}" "${RUNS:-5}"
