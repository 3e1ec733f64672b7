#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench: runs every bench/*.sh (each prints markdown rows with its reference measured in the
# same run) but scale.sh and etcd_failover.sh, which take minutes and have their own targets
# (make bench-scale, make bench-etcd). Copy the
# figures, with this command, into docs/BENCHMARKS.md.
# Every benchmark exits 0 with its figures measured, 77 when it cannot run on this machine at all
# (no root, a tool missing: it prints why), and any other status when a figure cannot be measured;
# this exits 1 when one of them did. `make bench-smoke` runs each at its smallest size
# (tests/integration/test_bench_smoke.sh).
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
echo "# ddprun benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r)"
rc=0
for s in bench/*.sh; do
    case $s in bench/run.sh | bench/scale.sh | bench/etcd_failover.sh) continue ;; esac
    echo
    echo "## $(basename "$s" .sh)"
    bash "$s"
    st=$?
    case $st in
    0) ;;
    77) echo "# $s skipped" ;;
    *) echo "# $s failed (exit $st)"; rc=1 ;;
    esac
done
exit $rc
