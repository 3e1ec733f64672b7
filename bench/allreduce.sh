#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CPU allreduce, 2 ranks, float32 4 KiB..64 MiB: libddpw's shared-memory backend against the
# single-thread memcpy bandwidth measured in the same run and, where mpicc exists, Open MPI's
# MPI_Allreduce (shared-memory transport, vader) built here from bench/mpi_allreduce_ref.c.
# busbw = algbw * 2(n-1)/n (nccl-tests). Prints a markdown table.
#   BUILD=build BENCH_SECONDS=3 bench/allreduce.sh       (seconds per run)
# Exits 1 when a figure cannot be measured: no row, no memcpy reference, or a wrong sum.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
SECONDS_PER_RUN=${BENCH_SECONDS:-3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-ar.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$BUILD/bench/bench_allreduce" ] || { echo "# $BUILD/bench/bench_allreduce not built"; exit 1; }
timeout 300 "$BUILD/bench/bench_allreduce" --ranks 2 --seconds "$SECONDS_PER_RUN" >"$TMP/ddpw.txt" || {
    cat "$TMP/ddpw.txt"; exit 1; }
memcpy=$(sed -n 's/.*memcpy bandwidth.*: \([0-9.]*\) GB\/s/\1/p' "$TMP/ddpw.txt")
if [ -z "$memcpy" ] || ! grep -qE '^ *[0-9]+ ' "$TMP/ddpw.txt"; then
    echo "# bench_allreduce printed no memcpy reference or no size:"; sed 's/^/#   /' "$TMP/ddpw.txt"
    exit 1
fi
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    # Installed, the reference must run: a broken one is a figure not measured.
    mpicc -O2 -o "$TMP/mpi_ref" bench/mpi_allreduce_ref.c 2>"$TMP/mpi.err" &&
        timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
            "$TMP/mpi_ref" 4096 67108864 "$SECONDS_PER_RUN" >"$TMP/mpi.txt" 2>>"$TMP/mpi.err" || {
        echo "# Open MPI reference failed:"; tail -5 "$TMP/mpi.err" | sed 's/^/#   /'; exit 1; }
    have_mpi=1
fi
echo "command: \`BUILD=$BUILD bench/allreduce.sh\` ($(nproc) CPUs; single-thread memcpy ${memcpy} GB/s)"
echo
if [ $have_mpi = 1 ]; then
    echo "| size | ddpw time (us) | ddpw algbw (GB/s) | ddpw busbw (GB/s) | Open MPI busbw (GB/s) | ddpw / Open MPI | ddpw busbw / memcpy | wrong |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
else
    echo "| size | ddpw time (us) | ddpw algbw (GB/s) | ddpw busbw (GB/s) | Open MPI busbw | ddpw / Open MPI | ddpw busbw / memcpy | wrong |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "# Open MPI reference skipped (no mpicc/mpirun: apt-get install openmpi-bin libopenmpi-dev)"
    : >"$TMP/mpi.txt"
fi
# The reference's file is told apart by name: FNR == NR would also hold in the second file when
# the first is empty (no Open MPI).
awk -v memcpy="$memcpy" -v mpifile="$TMP/mpi.txt" '
    FILENAME == mpifile { if ($1 ~ /^[0-9]+$/) mpi[$1] = $5; next }
    $1 ~ /^[0-9]+$/ {
        b = $1; h = b >= 1048576 ? sprintf("%d MiB", b / 1048576) : sprintf("%d KiB", b / 1024)
        m = (b in mpi) ? mpi[b] : ""
        r = (m != "" && m > 0) ? sprintf("%.1fx", $5 / m) : "-"
        printf "| %s | %.1f | %.2f | %.2f | %s | %s | %.2f | %s |\n", h, $3, $4, $5, (m == "" ? "-" : m), r, $5 / memcpy, $6
        if ($6 != 0) wrong++
    }
    END { if (wrong) { print "# " wrong " sizes summed wrong"; exit 1 } }' "$TMP/mpi.txt" "$TMP/ddpw.txt"
