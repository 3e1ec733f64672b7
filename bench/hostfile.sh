#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The host list's checks (launcher/hostfile.c), which run before any host is contacted: the wall
# time of `ddprun --hostfile FILE ...` for hostfiles of 1,000 to 65,536 hosts whose last line
# repeats the first host (so every line is read and checked, and the run ends with exit 2 at
# that line), and for one of 100,000 hosts (refused at line 65,537: more hosts than a job may
# have). Nothing is ever contacted: were a file to pass its checks, `--nnodes=1` (not the host
# count) would stop the run before any host is, and `--ssh false` is the ssh command anyway. The
# reference, in the same run, is awk finding the same duplicate in the same file (`awk
# 'seen[tolower($1)]++'`), a linear pass over the text. Medians of RUNS (default 7) interleaved
# runs.
#   BUILD=build bench/hostfile.sh        (RUNS=7, COUNTS="1000 20000 65536" override)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DDPRUN=$BUILD/ddprun
RUNS=${RUNS:-7}
COUNTS=${COUNTS:-"1000 20000 65536"}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-hostfile.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "command: \`BUILD=$BUILD bench/hostfile.sh\` ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo

# hostfile N DUP: N hosts "nodeNNNNNN slots=2", then (DUP=1) the first one again.
hostfile() {
    awk -v n="$1" -v dup="$2" 'BEGIN {
        for (i = 0; i < n; i++) printf "node%06d slots=2\n", i
        if (dup) print "node000000 slots=2"
    }'
}
# ms CMD...: wall milliseconds of CMD (its output to $TMP/last), which must exit 2 (ddprun) or 0/1
# (awk); anything else stops the benchmark.
ms() {
    local t0 t1 rc=0
    t0=$(date +%s%N)
    "$@" >"$TMP/last" 2>&1 || rc=$?
    t1=$(date +%s%N)
    if [ $rc -gt 2 ]; then
        echo "# $* exited $rc:" >&2
        sed 's/^/# /' "$TMP/last" >&2
        exit 1
    fi
    echo $(((t1 - t0) / 1000))
}
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
fmt() { awk -v us="$1" 'BEGIN { printf "%.1f ms", us / 1000 }'; }

echo "| hosts in the file | ddprun --hostfile (exit 2 at the last line) | reference: awk over the same file | ratio |"
echo "|---:|---:|---:|---:|"
row() { # LABEL FILE EXPECTED-ERROR
    local d=() r=() i
    for i in $(seq "$RUNS"); do
        d+=("$(ms "$DDPRUN" --hostfile "$2" --nnodes=1 --ssh false --no_python true)")
        grep -q "$3" "$TMP/last" || {
            echo "# ddprun did not refuse $2 with '$3':" >&2
            sed 's/^/# /' "$TMP/last" >&2
            exit 1
        }
        r+=("$(ms awk 'seen[tolower($1)]++ { print FILENAME ":" NR; exit 1 }' "$2")")
    done
    local dm rm
    dm=$(med "${d[@]}")
    rm=$(med "${r[@]}")
    echo "| $1 | $(fmt "$dm") | $(fmt "$rm") | $(awk -v a="$dm" -v b="$rm" 'BEGIN { printf "%.2fx", a / b }') |"
}
for n in $COUNTS; do
    hostfile "$n" 1 >"$TMP/hf$n"
    row "$n + 1 (a duplicate)" "$TMP/hf$n" "hf$n:$((n + 1)): 'node000000' is listed twice"
done
hostfile 100000 0 >"$TMP/hf100000"
row "100000 (over the limit)" "$TMP/hf100000" "hf100000:65537: more hosts than a job may have"
echo
echo "Wall time from fork to exit (ddprun's start included), median of $RUNS; the awk reference"
echo "stops at the same duplicate (it reads all 100,000 lines for the last row)."
