#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench-scale: every rendezvous path at 1,000 / 4,000 / 16,000 simulated nodes on one
# ddp-rendezvous (bench_rdzv_scale, a fresh daemon per count), then torchrun's c10d rendezvous
# (bench/scale_torch.py: DynamicRendezvousHandler nodes against a TCPStore in its own process)
# at the counts it reaches within LIMIT seconds a step; prints one line per count last,
# `rdzv-scale nodes=N join_ms=... reform_ms=... detect_ms=... keepalive_core_pct=...
# store_rss_mib=... status_ms=...`. Copy the tables, with this command, into docs/BENCHMARKS.md.
#   BUILD=build COUNTS="1000 4000 16000" KEEPALIVE_S=60 KEEPALIVE_SMALL_S=20 \
#   KEEP_ALIVE_MS=5000 IDLE_CONNS=10000 TORCH_COUNTS="8 32 128 256 512" LIMIT=60 bench/scale.sh
# The largest count heartbeats for KEEPALIVE_S (60 s, the recorded figure), the others for
# KEEPALIVE_SMALL_S; KEEPALIVE_S=10 makes a quick run. KEEP_ALIVE_MS is the simulated run's
# keep-alive interval (a silent node is detected 3 intervals after its last beat), IDLE_CONNS the
# idle store connections of the last table. TORCH_COUNTS= skips the reference.
# Exits 1 when a figure cannot be measured: a count that fails, the idle connections, or a
# torchrun count with no result at all (one that passes LIMIT is a result: where it stops).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
COUNTS=${COUNTS:-1000 4000 16000}
KEEPALIVE_S=${KEEPALIVE_S:-60}
KEEPALIVE_SMALL_S=${KEEPALIVE_SMALL_S:-20}
TORCH_COUNTS=${TORCH_COUNTS-8 32 128 256 512}
LIMIT=${LIMIT:-60}
KEEP_ALIVE_MS=${KEEP_ALIVE_MS:-5000}
IDLE_CONNS=${IDLE_CONNS:-10000}
rc=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/scale.XXXXXX")
DPID=
SPID=
trap '[ -n "$DPID" ] && kill "$DPID" 2>/dev/null; [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMP"' EXIT
# Every simulated node is a descriptor in the bench and in the store: raise the soft limit.
ulimit -n "$(ulimit -Hn)"
largest=$(printf '%s\n' $COUNTS | sort -n | tail -1)

# start_daemon: a fresh ddp-rendezvous on 127.0.0.1 port 0; sets DPID and port (empty when it
# did not report its port within 4 s).
start_daemon() {
    "$BUILD/ddp-rendezvous" --port 0 --no-auth >"$TMP/daemon.out" 2>"$TMP/daemon.err" &
    DPID=$!
    for _ in $(seq 200); do grep -q listening "$TMP/daemon.out" && break; sleep 0.02; done
    port=$(sed -nE 's/.*listening on .*:([0-9]+)$/\1/p' "$TMP/daemon.out")
    [ -n "$port" ] && return 0
    echo "# ddp-rendezvous did not report its port:"
    sed 's/^/#   /' "$TMP/daemon.err" | tail -5
    return 1
}

echo "# ddprun rendezvous at scale, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| nodes | join ms | re-form after silence, less detection (ms) | re-form after FAIL (ms) | detection (ms) | scale-down 100, less last call (ms) | scale-up 100 (ms) | keep-alive: store % of a core | store RSS MiB | status (text) | status --json | status --all | STATUS (whole) reply |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
summary=()
for n in $COUNTS; do
    window=$KEEPALIVE_SMALL_S
    [ "$n" = "$largest" ] && window=$KEEPALIVE_S
    if start_daemon; then
        timeout 600 "$BUILD/bench/bench_rdzv_scale" "$port" "$DPID" "$n" --keepalive-s "$window" \
            --keep-alive-ms "$KEEP_ALIVE_MS" --ddprun "$BUILD/ddprun" >"$TMP/scale.out"
        brc=$?
    else
        brc=1
        : >"$TMP/scale.out"
    fi
    grep -v '^rdzv-scale ' "$TMP/scale.out"
    if [ $brc -eq 0 ]; then
        summary+=("$(grep '^rdzv-scale ' "$TMP/scale.out")")
    else
        summary+=("rdzv-scale nodes=$n failed (exit $brc)")
        sed 's/^/#   /' "$TMP/daemon.err" | tail -5
        rc=1
    fi
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=
done

# The workers' store is the same server: what one more idle client connection costs it (RSS; the
# kernel's socket buffers come on top), for group rank 0's store, which every worker connects to.
echo
echo "| idle store connections | RSS before KiB | RSS after KiB | bytes per connection |"
echo "|---|---|---|---|"
if ! start_daemon || ! timeout 120 "$BUILD/bench/bench_store" idle-rss "$port" "$DPID" "$IDLE_CONNS"; then
    echo "| $IDLE_CONNS | not measured | - | - |"
    rc=1
fi
kill "$DPID" 2>/dev/null
wait "$DPID" 2>/dev/null
DPID=

PY=${TORCH_PYTHON:-}
[ -z "$PY" ] && [ -x .cache/torch2/bin/python ] && PY=.cache/torch2/bin/python
torch_lines=()
if [ -z "$TORCH_COUNTS" ]; then
    :
elif [ -z "$PY" ] || ! "$PY" -c 'import torch.distributed.elastic.rendezvous' 2>/dev/null; then
    echo "# torchrun reference skipped: no PyTorch 2.x (set TORCH_PYTHON)"
elif ! scripts/private-names.sh true 2>/dev/null; then
    echo "# torchrun reference skipped: scripts/private-names.sh cannot make a mount namespace"
else
    echo
    echo "torchrun's c10d rendezvous ($("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)), $KEEPALIVE_SMALL_S s keep-alive window, $LIMIT s bound a step:"
    for n in $TORCH_COUNTS; do
        # TCPStore's server and clients look client addresses up by name: no lookup may leave
        # the machine, so each count runs in a mount namespace of private names.
        scripts/private-names.sh sh -c '
            "$1" bench/store_torch_server.py >"$2/torch.out" 2>/dev/null &
            spid=$!
            for _ in $(seq 400); do grep -q listening "$2/torch.out" && break; sleep 0.05; done
            port=$(sed -nE "s/.*:([0-9]+) .*/\1/p" "$2/torch.out")
            timeout $(($4 * 3 + $5 + 60)) "$1" bench/scale_torch.py "$spid" "$port" "$3" "$5" "$4" \
                2>"$2/torch.err" | grep "^torch-scale "
            kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null' sh "$PY" "$TMP" "$n" "$LIMIT" \
            "$KEEPALIVE_SMALL_S" >"$TMP/torch.line"
        line=$(cat "$TMP/torch.line")
        if [ -z "$line" ]; then
            line="torch-scale nodes=$n stopped: no result ($(grep -v Warning "$TMP/torch.err" | tail -1))"
            rc=1
        fi
        torch_lines+=("$line")
        echo "$line"
        case "$line" in *stopped*) break ;; esac
    done
fi
echo
printf '%s\n' "${summary[@]}"
exit $rc
