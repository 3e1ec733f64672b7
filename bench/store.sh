#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Store benchmarks (make bench runs every bench/*.sh with BUILD set). Starts ddp-rendezvous on
# 127.0.0.1 port 0 (with a token, and with --no-auth for a like-for-like comparison), PyTorch's
# TCPStore when a Python with torch 2.x is found (see TORCH_PYTHON below), and
# redis-server when installed; drives them all with build/bench/bench_store; prints markdown.
#   BUILD=build bench/store.sh            (STORE_BENCH_QUICK=1: fewer iterations, N<=4096)
# CLIENTS (throughput; default "1 16 64 256"), SIZES (rendezvous N; default "1024 4096 16384",
# quick "1024 4096") and IDLE_CONNS (default 10000) override the sizes.
# Exits 1 when a figure cannot be measured: a server that does not start, a run that fails, a
# rendezvous of ddp-rendezvous or the floor that times out (TCPStore's may: its row says so).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
B=$BUILD/bench/bench_store
D=$BUILD/ddp-rendezvous
# TCPStore reference: TORCH_PYTHON, else the venv scripts/ensure-torch2.sh makes, else python3.
TORCH_PYTHON=${TORCH_PYTHON:-}
if [ -z "$TORCH_PYTHON" ]; then
    TORCH_PYTHON=python3
    [ -x .cache/torch2/bin/python ] && TORCH_PYTHON=.cache/torch2/bin/python
fi
QUICK=${STORE_BENCH_QUICK:-0}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/storebench.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
rc=0
# fail WHAT: a figure not measured; the run goes on and exits 1.
fail() {
    echo "# not measured: $1"
    rc=1
}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ -x "$B" ] && [ -x "$D" ] || { echo "bench/store.sh: build $B and $D first" >&2; exit 1; }

# start NAME CMD...: runs a server, waits (10 s) for "listening on 127.0.0.1:PORT"; sets
# PORT_NAME and PID_NAME.
start() {
    local name=$1; shift
    "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local pid=$!
    PIDS+=("$pid")
    local i
    for i in $(seq 1 200); do
        grep -q '^listening on ' "$TMP/$name.out" 2>/dev/null && break
        sleep 0.05
    done
    local port
    port=$(sed -nE 's/^listening on 127\.0\.0\.1:([0-9]+).*/\1/p' "$TMP/$name.out")
    [ -n "$port" ] || { echo "# $name did not start: $(tail -2 "$TMP/$name.err")"; return 1; }
    eval "PORT_$name=$port; PID_$name=$pid"
}

# With 2+ CPUs the servers (and the ping-pong reference) share CPU 1 and the client runs on
# CPU 0, so that other load on the machine cannot favour one server over another.
PIN=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    PIN=(taskset -c 1)
    export BENCH_SERVER_CPU=1
fi
# The last byte is fixed: a token file's trailing newline is stripped.
{ head -c 31 /dev/urandom; printf k; } >"$TMP/token"
chmod 600 "$TMP/token" # the store reads only private token files
HEX=$(od -An -tx1 -v "$TMP/token" | tr -d ' \n')
start auth "${PIN[@]}" "$D" --host 127.0.0.1 --port 0 --token-file "$TMP/token" --log-level error &&
    start open "${PIN[@]}" "$D" --host 127.0.0.1 --port 0 --no-auth --log-level error &&
    start floor "${PIN[@]}" "$BUILD/bench/bench_floor" || exit 1
servers=("ddprun+auth:auth:$HEX" "ddprun:open:")
# bench_floor joins the throughput and rendezvous rows (not latency: the echo is that floor).
floor_server="floor (kernel floor):floor:"
# TCPStore's server resolves each client's address to a name: it runs where no lookup can leave
# the machine (scripts/private-names.sh), or not at all.
if ! scripts/private-names.sh true 2>"$TMP/names.err"; then
    echo "# $(cat "$TMP/names.err"): TCPStore rows skipped"
elif "$TORCH_PYTHON" -c 'import torch.distributed' 2>/dev/null; then
    if start torch scripts/private-names.sh "${PIN[@]}" "$TORCH_PYTHON" bench/store_torch_server.py; then
        tv=$("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)')
        servers+=("TCPStore $tv:torch:")
    fi
else
    echo "# PyTorch not found (TORCH_PYTHON=$TORCH_PYTHON): TCPStore rows skipped"
fi

iters=20000; secs=3; sizes="1024 4096 16384"
[ "$QUICK" = 1 ] && { iters=3000; secs=1; sizes="1024 4096"; }
sizes=${SIZES:-$sizes}
CLIENTS=${CLIENTS:-1 16 64 256}
IDLE_CONNS=${IDLE_CONNS:-10000}

echo "### Round-trip latency, one client, 16-byte values ($(nproc) CPUs, $iters iterations)"
echo
echo "| operation | median us | p99 us | x ping-pong |"
echo "| --- | --- | --- | --- |"
DDPRUN_STORE_TOKEN=$HEX "$B" latency "$PORT_auth" "$iters" --ddprun >"$TMP/lat" ||
    fail "latency, ddprun+auth"
sed 's/^| /| ddprun+auth: /' "$TMP/lat"
if [ -n "${PORT_torch:-}" ]; then
    "$B" latency "$PORT_torch" "$iters" >"$TMP/lat" || fail "latency, TCPStore"
    grep -v ping-pong "$TMP/lat" | sed 's/^| /| TCPStore: /'
fi
echo

reps=3
[ "$QUICK" = 1 ] && reps=1
echo "### Throughput: SET then GET of each client's own key, one request in flight"
echo
echo "Median of $reps runs of ${secs} s each; the servers take turns within each round, so that"
echo "other load on the machine hits them alike. CPU columns: CPU time (user + system) per pair"
echo "of the server process and of the client, in the run with the median rate. \"floor\" is"
echo "bench_floor: a bare epoll loop with a fixed key table, one read and one write per request."
echo
echo "| server | clients | SET+GET pairs/s | requests/s | x TCPStore | server CPU us/pair | client CPU us/pair |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
# median_row FILE: the middle line of FILE sorted by its first number.
median_row() { sort -n "$1" | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
for c in $CLIENTS; do
    for r in $(seq 1 $reps); do
        for s in "${servers[@]}" "$floor_server"; do
            rest=${s#*:}; name=${rest%%:*}; tok=${rest#*:}
            eval "port=\$PORT_$name; spid=\$PID_$name"
            # rows: pairs/s server-us client-us
            DDPRUN_STORE_TOKEN=$tok BENCH_SERVER_PID=$spid "$B" throughput "$port" "$c" "$secs" \
                >"$TMP/tp" || fail "throughput, ${s%%:*}, $c clients"
            awk -F'|' '{gsub(/ /, ""); print $3, $5, $6}' "$TMP/tp" >>"$TMP/tp_${name}_$c"
        done
    done
    ref=
    [ -f "$TMP/tp_torch_$c" ] && ref=$(median_row "$TMP/tp_torch_$c" | cut -d' ' -f1)
    for s in "${servers[@]}" "$floor_server"; do
        label=${s%%:*}; rest=${s#*:}; name=${rest%%:*}
        read -r med scpu ccpu <<<"$(median_row "$TMP/tp_${name}_$c")"
        ratio=-
        [ -n "$ref" ] && [ "${ref:-0}" != 0 ] && ratio=$(awk -v a="$med" -v b="$ref" 'BEGIN {printf "%.2f", a / b}')
        echo "| $label | $c | $med | $((med * 2)) | $ratio | $scpu | $ccpu |"
    done
done
echo

echo "### Rendezvous: N connections each ADD(count), WAIT(barrier set by the last), GET(128 B id)"
echo
echo "Median of $reps runs (by seconds). CPU columns: CPU seconds (user + system) the server"
echo "process and the client used in that run."
echo
echo "| server | N | seconds | ranks/s | server CPU s | client CPU s |"
echo "| --- | --- | --- | --- | --- | --- |"
for s in "${servers[@]}" "$floor_server"; do
    label=${s%%:*}; rest=${s#*:}; name=${rest%%:*}; tok=${rest#*:}
    eval "port=\$PORT_$name; spid=\$PID_$name"
    ns=$sizes
    # TCPStore also at 128: the smallest job, where its per-connection cost shows alone.
    [ "$name" = torch ] && ns="128 $sizes"
    for n in $ns; do
        : >"$TMP/rdzv"
        for r in $(seq 1 $reps); do
            if ! DDPRUN_STORE_TOKEN=$tok BENCH_SERVER_PID=$spid timeout 120 "$B" rendezvous \
                "$port" "$n" >>"$TMP/rdzv"; then
                # TCPStore's timing out is its figure (one timeout is enough); anything else
                # cannot be measured.
                grep -q 'timed out' "$TMP/rdzv" && [ "$name" = torch ] && break
                fail "rendezvous, $label, N=$n"
                break
            fi
        done
        if grep -q 'timed out' "$TMP/rdzv"; then
            grep -m1 'timed out' "$TMP/rdzv"
        else
            sort -t'|' -k3 -n "$TMP/rdzv" | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'
        fi | sed "s/^| /| $label | /"
    done
done
echo

echo "### Server memory per idle authenticated connection"
echo
echo "| connections | RSS before KiB | RSS after KiB | bytes per connection |"
echo "| --- | --- | --- | --- |"
if ! start rss "${PIN[@]}" "$D" --host 127.0.0.1 --port 0 --token-file "$TMP/token" --log-level error ||
    ! DDPRUN_STORE_TOKEN=$HEX timeout 120 "$B" idle-rss "$PORT_rss" "$PID_rss" "$IDLE_CONNS"; then
    fail "server memory per idle connection"
fi
echo

if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
    rport=
    for try in 1 2 3 4 5; do
        p=$((20000 + RANDOM % 30000))
        "${PIN[@]}" redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
            >"$TMP/redis.out" 2>&1 &
        rpid=$!
        sleep 0.3
        if kill -0 "$rpid" 2>/dev/null && redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
            PIDS+=("$rpid"); rport=$p; break
        fi
        kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null
    done
    if [ -n "$rport" ]; then
        echo "### redis-server $(redis-server --version | sed -nE 's/.*v=([0-9.]+).*/\1/p') reference (redis-benchmark -d 16, requests/s)"
        echo
        echo "| clients | SET | GET |"
        echo "| --- | --- | --- |"
        for c in 1 16 64 256; do
            n=$((c == 1 ? 20000 : 100000))
            out=$(taskset -c 0 redis-benchmark -p "$rport" -t set,get -n "$n" -c "$c" -d 16 -q 2>/dev/null | tr '\r' '\n')
            set_rps=$(echo "$out" | sed -nE 's/^SET: ([0-9.]+) requests.*/\1/p' | tail -1)
            get_rps=$(echo "$out" | sed -nE 's/^GET: ([0-9.]+) requests.*/\1/p' | tail -1)
            echo "| $c | ${set_rps:-?} | ${get_rps:-?} |"
            [ -n "$set_rps" ] && [ -n "$get_rps" ] || fail "redis-benchmark, $c clients"
        done
        echo
    else
        fail "redis-server did not start (5 tries)"
    fi
else
    echo "# redis-server not installed: redis rows skipped"
fi
exit $rc
