#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Worker output through ddprun's console (agent/output.c, agent/console.c): the wall time of one
# worker writing a 100 MB line (then a newline), and 1,000,000 lines of 99 bytes, with ddprun's
# stdout a pipe into `cat` and a regular file, against the same worker without ddprun into
# `cat`, all in the same run. The goal: through a pipe within 1.5x of a file. The worker makes
# its bytes with head and tr (or yes and head), the same in every column.
#   BUILD=build bench/console.sh        (RUNS=5 override)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DDPRUN=$BUILD/ddprun
RUNS=${RUNS:-5}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-console.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "command: \`BUILD=$BUILD bench/console.sh\` ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo

LINE='head -c 100000000 /dev/zero | tr "\0" a; echo'
LINES='yes "$(printf "%098d" 0)" | head -n 1000000'
# ms MODE WORKER: wall milliseconds of one run. MODE: pipe (ddprun | cat), file (ddprun > file),
# bare (the worker | cat). The bytes that arrived are checked against want_bare or want_ddprun
# (set by the caller).
ms() {
    local t0 t1 rc=0 want=$want_ddprun
    [ "$1" = bare ] && want=$want_bare
    t0=$(date +%s%N)
    case $1 in
    pipe) "$DDPRUN" --no_python sh -c "$2" 2>"$TMP/err" | cat >"$TMP/out" || rc=$? ;;
    file) "$DDPRUN" --no_python sh -c "$2" >"$TMP/out" 2>"$TMP/err" || rc=$? ;;
    bare) sh -c "$2" | cat >"$TMP/out" || rc=$? ;;
    esac
    t1=$(date +%s%N)
    local got
    got=$(stat -c %s "$TMP/out")
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
        echo "# $1 run: exit $rc, $got bytes out of $want:" >&2
        tail -5 "$TMP/err" | sed 's/^/# /' >&2
        exit 1
    fi
    echo $(((t1 - t0) / 1000000))
}
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }

echo "| worker output | ddprun \| cat | ddprun > file | worker \| cat (no ddprun) | pipe / file (goal <= 1.5x) |"
echo "|---|---:|---:|---:|---:|"
row() { # LABEL WORKER BYTES-WRITTEN BYTES-ON-DDPRUN'S-STDOUT
    local p=() f=() b=() i
    want_bare=$3 want_ddprun=$4
    for i in $(seq "$RUNS"); do
        p+=("$(ms pipe "$2")")
        f+=("$(ms file "$2")")
        b+=("$(ms bare "$2")")
    done
    local pm fm bm
    pm=$(med "${p[@]}")
    fm=$(med "${f[@]}")
    bm=$(med "${b[@]}")
    echo "| $1 | $pm ms | $fm ms | $bm ms | $(ratio "$pm" "$fm") |"
}
row "one 100 MB line" "$LINE" 100000001 100001526
row "1,000,000 lines of 99 bytes" "$LINES" 99000000 99000000
echo
echo "Wall time from fork to exit, median of $RUNS interleaved runs; each run's output size is"
echo "checked. A line longer than 64 KiB reaches ddprun's stdout in 64 KiB pieces, each ended by a"
echo "newline (agent/output.c): the 100 MB line arrives as 1,526 lines, 1,525 bytes more than written."
