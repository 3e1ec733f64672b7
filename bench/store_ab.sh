#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of the store side by side: has a change made it slower? Starts BASE_BUILD's and
# BUILD's ddp-rendezvous (--no-auth) on 127.0.0.1, both on CPU 1, and drives them in turn with
# BUILD's bench_store on CPU 0 (one client's SET+GET pairs/s and the server's CPU per pair, 16
# clients' the same, the round trip of PING and GET), REPS rounds; prints each figure's median and
# quartiles for both and their ratio, as markdown. The servers take turns within every round, so
# load elsewhere on the machine hits both alike; read a ratio against the quartiles beside it.
#   git worktree add /tmp/base <commit> && make -C /tmp/base build/ddp-rendezvous
#   BASE_BUILD=/tmp/base/build BUILD=build bench/store_ab.sh       (REPS=15, SECS=2 by default)
# Without BASE_BUILD the build is measured against itself (the noise floor of the method).
# Exits 1 when a server does not start or a run fails.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BASE_BUILD=${BASE_BUILD:-$BUILD}
REPS=${REPS:-15}
SECS=${SECS:-2}
B=$BUILD/bench/bench_store
for f in "$B" "$BUILD/ddp-rendezvous" "$BASE_BUILD/ddp-rendezvous"; do
    [ -x "$f" ] || { echo "bench/store_ab.sh: build $f first" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/storeab.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
PIN_SERVER=() PIN_CLIENT=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    PIN_SERVER=(taskset -c 1) PIN_CLIENT=(taskset -c 0)
    export BENCH_SERVER_CPU=1
fi

# start NAME BINARY: runs a store, waits (10 s) for "listening on 127.0.0.1:PORT"; sets PORT_NAME
# and PID_NAME.
start() {
    local name=$1 i port
    "${PIN_SERVER[@]}" "$2" --host 127.0.0.1 --port 0 --no-auth --log-level error \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    eval "PID_$name=$!"
    PIDS+=("$!")
    for i in $(seq 1 200); do
        grep -q '^listening on ' "$TMP/$name.out" 2>/dev/null && break
        sleep 0.05
    done
    port=$(sed -nE 's/^listening on 127\.0\.0\.1:([0-9]+).*/\1/p' "$TMP/$name.out")
    [ -n "$port" ] || { echo "# $name did not start: $(tail -2 "$TMP/$name.err")"; exit 1; }
    eval "PORT_$name=$port"
}
start base "$BASE_BUILD/ddp-rendezvous"
start new "$BUILD/ddp-rendezvous"

# One line "FIGURE SERVER VALUE" per figure measured, into $TMP/rows.
for r in $(seq 1 "$REPS"); do
    for s in base new; do
        eval "port=\$PORT_$s; pid=\$PID_$s"
        for c in 1 16; do
            BENCH_SERVER_PID=$pid "${PIN_CLIENT[@]}" "$B" throughput "$port" "$c" "$SECS" \
                >"$TMP/tp" || { echo "# throughput failed: $s, $c clients"; exit 1; }
            awk -F'|' -v s=$s -v c=$c '{gsub(/ /, ""); print "pairs/s," c, s, $3;
                print "server_us/pair," c, s, $5}' "$TMP/tp" >>"$TMP/rows"
        done
        "${PIN_CLIENT[@]}" "$B" latency "$port" 5000 --ddprun >"$TMP/lat" ||
            { echo "# latency failed: $s"; exit 1; }
        awk -F'|' -v s=$s '$2 ~ /PING|GET 16-byte value \(raw/ {
            n = $2 ~ /PING/ ? "PING_us" : "GET_us"; gsub(/ /, "", $3); print n ",1", s, $3 }' \
            "$TMP/lat" >>"$TMP/rows"
    done
done

echo "### The store, $BASE_BUILD (base) beside $BUILD (new): $REPS rounds, ${SECS} s runs, $(nproc) CPUs"
echo
python3 - "$TMP/rows" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    fig, server, value = line.split()
    rows[(fig, server)].append(float(value))
print("| figure | clients | base median (quartiles) | new median (quartiles) | new / base |")
print("| --- | --- | --- | --- | --- |")
bad = 0
for fig in sorted({f for f, _ in rows}):
    b, n = rows[(fig, "base")], rows[(fig, "new")]
    if not b or not n:
        bad = 1
        continue
    def cell(v):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        return f"{q[1]:.1f} ({q[0]:.1f}-{q[2]:.1f})"
    name, clients = fig.split(",")
    ratio = statistics.median(n) / statistics.median(b)
    print(f"| {name} | {clients} | {cell(b)} | {cell(n)} | {ratio:.3f} |")
sys.exit(bad)
PY
