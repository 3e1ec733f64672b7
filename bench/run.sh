#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench: runs every bench/*.sh (each prints markdown rows with its reference measured in the
# same run) but scale.sh, which takes minutes and has its own target (make bench-scale). Copy the
# figures, with this command, into docs/BENCHMARKS.md.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
echo "# ddprun benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r)"
rc=0
for s in bench/*.sh; do
    [ "$s" = bench/run.sh ] || [ "$s" = bench/scale.sh ] && continue
    echo
    echo "## $(basename "$s" .sh)"
    bash "$s" || { echo "# $s failed"; rc=1; }
done
exit $rc
