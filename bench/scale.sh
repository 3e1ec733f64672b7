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
# The etcd backend (--rdzv_backend=etcd) at ETCD_COUNTS (default "1000 16000"; empty skips it,
# as does a machine without etcd): a fresh etcd member per count (its data on disk under TMPDIR).
# ETCD_MODE=stores (the default; --rdzv_conf etcd_stores=HOST:PORT+...): ETCD_CANDIDATES (default
# 3, at least 2) `ddp-rendezvous --etcd --run-id ...` daemons at fixed ports are the store
# candidates and alone talk to etcd (a lease of ETCD_TTL s, default 4 as the daemon's, a campaign
# and a watch per run id); the first starts alone and leads, the others once it serves (the
# election is decided). The election: first start -> every candidate knows the leader (each says
# it listens). Then bench_rdzv_scale's N nodes JOIN at the second candidate, which redirects each
# to the leader (the worst case: one redirect a node): the join (ETCD_JOIN_RUNS runs, default 3,
# median; also at the leader directly), the keep-alive window (ETCD_KEEPALIVE_S, default 20),
# the re-forms, on the leader's store (its CPU and RSS); then, unless ETCD_FAILOVER=0, the leader
# is killed (SIGKILL) while the nodes heartbeat: kill -> every node assigned at the new leader
# (each connects to the next candidate, which answers "the dead store" until the lease lapses,
# then redirects to the new leader or serves). Each candidate stands for 1 + 2 x ETCD_JOIN_RUNS
# run ids (the main run and each join run).
# ETCD_MODE=readers, the earlier design (--rdzv_conf etcd_candidates=K): bench_etcd_elect's N
# agents elect the store: ETCD_CANDIDATES candidates (a lease renewed every ETCD_TTL/3 s, default
# TTL 5, a campaign, a watch of the leader key) and N - ETCD_CANDIDATES readers (one read of the
# leader key spread over N x ETCD_SPREAD_US microseconds, default 500 as the agent's);
# ETCD_CANDIDATES=0 makes every agent a candidate. Then bench_rdzv_scale's N nodes JOIN that store
# (its address read from the election) while the candidates hold their leases; then the leader
# resigns and all learn the next one (the readers read again).
# Both: etcd's load comes from its /metrics: gRPC messages received (one a request through the
# JSON gateway) per second while bench_rdzv_scale runs, keys, leases, its CPU and RSS, its WAL
# fsyncs.
# Exits 1 when a figure cannot be measured: a count that fails, the idle connections, or a
# torchrun count with no result at all (one that passes LIMIT is a result: where it stops). A
# readers' count that does not elect within 120 s, or whose candidates lose leases, is a result
# (its row says so), not a failure; a store candidate that does not serve, or loses its lease, is
# a failure.
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
ETCD_COUNTS=${ETCD_COUNTS-1000 16000}
ETCD_KEEPALIVE_S=${ETCD_KEEPALIVE_S:-20}
ETCD_MODE=${ETCD_MODE:-stores}
ETCD_CANDIDATES=${ETCD_CANDIDATES:-3}
ETCD_SPREAD_US=${ETCD_SPREAD_US:-500}
ETCD_JOIN_RUNS=${ETCD_JOIN_RUNS:-3}
ETCD_FAILOVER=${ETCD_FAILOVER:-1}
case "$ETCD_MODE" in
stores)
    ETCD_TTL=${ETCD_TTL:-4}
    if [ -n "$ETCD_COUNTS" ] && [ "$ETCD_CANDIDATES" -lt 2 ]; then
        echo "bench/scale.sh: ETCD_CANDIDATES=$ETCD_CANDIDATES: the store candidates' mode needs at least 2 (one leads, the nodes JOIN at another)" >&2
        exit 2
    fi
    ;;
readers) ETCD_TTL=${ETCD_TTL:-5} ;;
*)
    echo "bench/scale.sh: ETCD_MODE=$ETCD_MODE: not 'stores' or 'readers'" >&2
    exit 2
    ;;
esac
EPID=
CPID=
KPIDS=()
rc=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/scale.XXXXXX")
DPID=
SPID=
trap 'for p in "$DPID" "$SPID" "$CPID" ${KPIDS[@]+"${KPIDS[@]}"} "$EPID"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
# Every simulated node is a descriptor in the bench and in the store: raise the soft limit (and
# the hard one where this may: a redirected node holds two connections a moment, the candidate's
# and the leader's; the simulator closes the first early when it must).
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 65536 ] || ulimit -Hn 65536 2>/dev/null
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
# etcd_load URL: "msgs keys leases fsyncs fsync_s" from a member's /metrics.
etcd_load() {
    python3 - "$1" <<'EOF2'
import sys, urllib.request
m = {}
for line in urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode().splitlines():
    if line and not line.startswith("#"):
        name = line.split("{")[0].split(" ")[0]
        m[name] = m.get(name, 0) + float(line.rsplit(" ", 1)[1])
g = lambda k: m.get(k, 0)
print("%d %d %d %d %.3f" % (g("grpc_server_msg_received_total"), g("etcd_debugging_mvcc_keys_total"),
      g("etcd_debugging_lease_granted_total") - g("etcd_debugging_lease_revoked_total"),
      g("etcd_disk_wal_fsync_duration_seconds_count"), g("etcd_disk_wal_fsync_duration_seconds_sum")))
EOF2
}
# etcd_get URL KEY: the key's value (empty when it has none).
etcd_get() {
    python3 - "$1" "$2" <<'EOF2'
import base64, json, sys, urllib.request
k = base64.b64encode(sys.argv[2].encode()).decode()
r = json.load(urllib.request.urlopen(sys.argv[1] + "/v3/kv/range", json.dumps({"key": k}).encode(), timeout=10))
print(base64.b64decode(r["kvs"][0]["value"]).decode() if r.get("kvs") else "")
EOF2
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# elect_wait REGEX: waits (130 s at most) for a line of bench_etcd_elect's output (CPID, into
# $TMP/elect.out) that matches REGEX, while it runs.
elect_wait() {
    local _
    for _ in $(seq 1300); do
        grep -q "$1" "$TMP/elect.out" && break
        kill -0 "$CPID" 2>/dev/null || break
        sleep 0.1
    done
}
# etcd_window_start URL: etcd's load as bench_rdzv_scale starts: m1 (its requests so far), t1
# (ns) and e1 (its CPU ticks). The caller declares them (and etcd_window_end's) local.
etcd_window_start() {
    read -r m1 _ <<<"$(etcd_load "$1")"
    t1=$(date +%s%N)
    e1=$(ticks "$EPID")
}
# etcd_window_end URL RPS_FORMAT: etcd's load once bench_rdzv_scale is over: m2 keys leases f2 fs2
# (etcd_load), ersss (its RSS, MiB), and over the window wall (s), rps (requests/s, printed with
# RPS_FORMAT), cpu (% of a core) and fsm (a WAL fsync's mean).
etcd_window_end() {
    read -r m2 keys leases f2 fs2 <<<"$(etcd_load "$1")"
    local t2 e2
    t2=$(date +%s%N)
    e2=$(ticks "$EPID")
    ersss=$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$EPID/status")
    wall=$(awk -v a="$t1" -v b="$t2" 'BEGIN {print (b - a) / 1e9}')
    rps=$(awk -v a="$m1" -v b="$m2" -v w="$wall" -v f="$2" 'BEGIN {printf f, (b - a) / w}')
    cpu=$(awk -v a="$e1" -v b="$e2" -v w="$wall" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b - a) / hz / w * 100}')
    fsm=$(awk -v c="$f2" -v s="$fs2" 'BEGIN {printf "%.1f ms", c ? s / c * 1000 : 0}')
}
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# etcd_start N: a fresh etcd member (its data under TMP); sets EPID, ep (its client port) and url;
# returns 1 when it is not ready within 10 s.
etcd_start() {
    ep=$(free_port)
    local pp
    pp=$(free_port)
    url=http://127.0.0.1:$ep
    setpriv --pdeathsig KILL etcd --name one --data-dir "$TMP/etcd.$1" \
        --listen-client-urls "$url" --advertise-client-urls "$url" \
        --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
        --initial-cluster "one=http://127.0.0.1:$pp" >"$TMP/etcd.log" 2>&1 &
    EPID=$!
    for _ in $(seq 200); do grep -qs "ready to serve client requests" "$TMP/etcd.log" && break; sleep 0.05; done
    grep -q 'ready to serve client requests' "$TMP/etcd.log"
}
# wait_listening FILE...: until each daemon's stdout says it listens (an etcd daemon says so once
# its election named a store for every run), at most 20 s; returns 1 when one did not.
wait_listening() {
    local f
    for _ in $(seq 2000); do
        for f in "$@"; do grep -qs listening "$f" || { sleep 0.01; continue 2; }; done
        return 0
    done
    return 1
}
# reap_all PID...: ends the (disowned) candidates, bounded: SIGTERM, then SIGKILL after 5 s.
reap_all() {
    local p
    for p in "$@"; do kill "$p" 2>/dev/null; done
    for p in "$@"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || continue 2; sleep 0.05; done
        kill -KILL "$p" 2>/dev/null
    done
}
# etcd_stores N: the store candidates' mode; sets line (the summary line) and prints the row.
etcd_stores() {
    local n=$1 run=scale-$1 ids=() ports=() outs=() i r stores fo=()
    ids=(--run-id "$run")
    for r in $(seq 0 $((ETCD_JOIN_RUNS - 1))); do ids+=(--run-id "$run-j$r" --run-id "$run-d$r"); done
    for i in $(seq 0 $((ETCD_CANDIDATES - 1))); do
        ports+=("$(free_port)")
        outs+=("$TMP/cand.$i.out")
    done
    stores=$(printf '127.0.0.1:%s+' "${ports[@]}")
    stores=${stores%+}
    read -r m0 _ <<<"$(etcd_load "$url")"
    local t0 t1 elect
    t0=$(date +%s%N)
    for i in "${!ports[@]}"; do
        setpriv --pdeathsig KILL "$BUILD/ddp-rendezvous" --no-auth --port "${ports[$i]}" \
            --etcd "127.0.0.1:$ep" --etcd-lease-ttl "$ETCD_TTL" "${ids[@]}" \
            >"$TMP/cand.$i.out" 2>"$TMP/cand.$i.err" &
        KPIDS+=($!)
        # The failover kills the leader: no word from the shell about it (reap_all reaps).
        disown "$!"
        # The first leads every run: the others start once it serves.
        if [ "$i" = 0 ] && ! wait_listening "${outs[0]}"; then
            line="etcd-scale nodes=$n failed: the first store candidate did not serve: $(tail -1 "$TMP/cand.0.err")"
            return 1
        fi
    done
    if ! wait_listening "${outs[@]}"; then
        line="etcd-scale nodes=$n failed: a store candidate did not learn the leader: $(tail -qn1 "$TMP"/cand.*.err | tr '\n' ' ')"
        return 1
    fi
    t1=$(date +%s%N)
    elect=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) / 1e6}')
    if [ "$(etcd_get "$url" "/ddprun/$run/leader")" != "127.0.0.1:${ports[0]}" ]; then
        line="etcd-scale nodes=$n failed: the first store candidate (127.0.0.1:${ports[0]}) does not lead run $run"
        return 1
    fi
    [ "$ETCD_FAILOVER" = 1 ] && fo=(--failover "$stores")
    local m1 e1 m2 keys leases f2 fs2 ersss wall rps cpu fsm brc
    etcd_window_start "$url"
    # The nodes JOIN at the second candidate, which redirects each to the first: the worst case.
    timeout 900 "$BUILD/bench/bench_rdzv_scale" "${ports[0]}" "${KPIDS[0]}" "$n" \
        --keepalive-s "$ETCD_KEEPALIVE_S" --keep-alive-ms "$KEEP_ALIVE_MS" --ddprun "$BUILD/ddprun" \
        --run-id "$run" --join-runs "$ETCD_JOIN_RUNS" --join-at "${ports[1]}" "${fo[@]}" \
        >"$TMP/scale.out" 2>"$TMP/scale.err"
    brc=$?
    etcd_window_end "$url" "%.1f"
    grep -v '^rdzv-scale \|^|' "$TMP/scale.out"
    if [ $brc -ne 0 ]; then
        line="etcd-scale nodes=$n failed: bench_rdzv_scale exit $brc: $(tail -1 "$TMP/scale.err")"
        return 1
    fi
    # Every candidate but the one the failover killed still holds its leases.
    local alive=0 lost=0
    for i in "${!KPIDS[@]}"; do
        if kill -0 "${KPIDS[$i]}" 2>/dev/null; then alive=$((alive + 1)); elif [ "$i" != 0 ] || [ "$ETCD_FAILOVER" != 1 ]; then lost=$((lost + 1)); fi
    done
    local sl join direct redir reform fail kcore krss
    sl=$(grep '^rdzv-scale ' "$TMP/scale.out")
    field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p" <<<"$sl"; }
    join=$(field join_ms)
    direct=$(field join_direct_ms)
    redir=$(field redirects_per_node)
    reform=$(field reform_ms)
    fail=$(field failover_ms)
    kcore=$(field keepalive_core_pct)
    krss=$(field store_rss_mib)
    echo "| $n | $elect ms | $join ms ($redir redirects a node) | $direct ms | $reform ms | ${fail:--} ms | $rps | $keys | $leases | $cpu | $ersss | $f2 ($fsm) | $kcore | $krss | $alive alive, $lost lost |"
    echo "# $n nodes: the election took $((m1 - m0)) etcd requests; the job $((m2 - m1)) over $(printf '%.0f' "$wall") s"
    line="etcd-scale nodes=$n elect_ms=$elect join_ms=$join join_direct_ms=$direct reform_ms=$reform failover_ms=${fail:--} etcd_rps=$rps etcd_keys=$keys etcd_leases=$leases"
    [ "$lost" = 0 ] || { line="$line ($lost candidates lost their lease)"; return 1; }
    return 0
}
# etcd_readers N: the readers' mode (ETCD_MODE=readers); sets line and prints the row.
etcd_readers() {
    local n=$1 kargs=() elect m0 m1 m2 keys leases f2 fs2 t1 e1 ersss wall rps cpu fsm brc addr
    local reelect hold
    if ! start_daemon; then
        line="etcd-scale nodes=$n failed: ddp-rendezvous did not start"
        return 1
    fi
    [ "$ETCD_CANDIDATES" -gt 0 ] && kargs=("$ETCD_CANDIDATES" "$ETCD_SPREAD_US")
    read -r m0 _ <<<"$(etcd_load "$url")"
    "$BUILD/bench/bench_etcd_elect" "127.0.0.1:$ep" "$n" "/ddprun/scale-$n/leader" \
        "127.0.0.1:$port" "$ETCD_TTL" "${kargs[@]}" >"$TMP/elect.out" 2>"$TMP/elect.err" &
    CPID=$!
    elect_wait '^etcd-elect '
    elect=$(sed -nE 's/^etcd-elect .*elect_ms=([0-9.]+).*/\1/p' "$TMP/elect.out")
    if [ -z "$elect" ]; then
        line="etcd-scale nodes=$n stopped: $(grep -v 'lost its lease' "$TMP/elect.err" | tail -1) ($(grep -c 'lost its lease' "$TMP/elect.err") leases lost)"
        readers_end
        return 0
    fi
    # The nodes join the store the election named (every candidate published it).
    addr=$(etcd_get "$url" "/ddprun/scale-$n/leader")
    etcd_window_start "$url"
    timeout 600 "$BUILD/bench/bench_rdzv_scale" "${addr##*:}" "$DPID" "$n" \
        --keepalive-s "$ETCD_KEEPALIVE_S" --keep-alive-ms "$KEEP_ALIVE_MS" --ddprun "$BUILD/ddprun" \
        >"$TMP/scale.out" 2>"$TMP/scale.err"
    brc=$?
    etcd_window_end "$url" "%.0f"
    kill -USR1 "$CPID"
    elect_wait '^etcd-reelect '
    reelect=$(sed -nE 's/^etcd-reelect .*reelect_ms=([0-9.]+).*/\1/p' "$TMP/elect.out")
    readers_end
    hold=$(sed -nE 's/^etcd-hold .*lost=([0-9]+) errors=([0-9]+).*/\1 lost, \2 failed/p' "$TMP/elect.out")
    if [ $brc -ne 0 ]; then
        line="etcd-scale nodes=$n failed: bench_rdzv_scale exit $brc: $(tail -1 "$TMP/scale.err")"
        return 1
    fi
    local join fail total
    join=$(sed -nE 's/^rdzv-scale .*join_ms=([0-9.]+).*/\1/p' "$TMP/scale.out")
    fail=$(sed -nE "s/^rdzv-scale .*reform_ms=([0-9.]+).*/\1/p" "$TMP/scale.out")
    total=$(awk -v a="$elect" -v b="$join" 'BEGIN {printf "%.1f", a + b}')
    echo "| $n | $elect ms | $join ms | $total ms | $fail ms | ${reelect:-not within 130 s} ms | $rps | $keys | $leases | $cpu | $ersss | $f2 ($fsm) | ${hold:-?} |"
    echo "# $n nodes: election took $((m1 - m0)) etcd requests"
    line="etcd-scale nodes=$n elect_ms=$elect join_ms=$total reform_ms=$fail reelect_ms=${reelect:--} etcd_rps=$rps etcd_keys=$keys etcd_leases=$leases"
    return 0
}
# readers_end: stops the readers' election (it prints its etcd-hold line) and the store.
readers_end() {
    kill -TERM "$CPID" 2>/dev/null
    wait "$CPID" 2>/dev/null
    CPID=
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=
}
etcd_lines=()
if [ -z "$ETCD_COUNTS" ]; then
    :
elif ! command -v etcd >/dev/null 2>&1; then
    echo "# etcd backend skipped: etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"
else
    echo
    if [ "$ETCD_MODE" = readers ]; then
        echo "The etcd backend, readers' mode ($(etcd --version | sed -n 's/^etcd Version: //p'), one member, lease TTL $ETCD_TTL s, candidates ${ETCD_CANDIDATES/#0/every agent}, readers spread over N x $ETCD_SPREAD_US us), $ETCD_KEEPALIVE_S s keep-alive window:"
        echo
        echo "| nodes | election (all know the store) | JOIN at the store | join (election + JOIN) | re-form (the slower of after FAIL and after silence) | re-election (leader resigns) | etcd: requests/s while the job runs | keys | leases | etcd CPU % of a core | etcd RSS MiB | WAL fsyncs (mean) | leases lost, calls failed |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    else
        echo "The etcd backend, store candidates ($(etcd --version | sed -n 's/^etcd Version: //p'), one member; $ETCD_CANDIDATES ddp-rendezvous --etcd, lease TTL $ETCD_TTL s, each standing for $((1 + 2 * ETCD_JOIN_RUNS)) run ids; every node JOINs at a candidate that does not lead), $ETCD_KEEPALIVE_S s keep-alive window:"
        echo
        echo "| nodes | election ($ETCD_CANDIDATES candidates know the leader) | join, redirected | join at the leader | re-form (the slower of after FAIL and after silence) | failover (leader killed -> every node at the new one) | etcd: requests/s while the job runs | keys | leases | etcd CPU % of a core | etcd RSS MiB | WAL fsyncs (mean) | leader: keep-alive % of a core | leader RSS MiB | candidates |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    fi
    for n in $ETCD_COUNTS; do
        line=""
        if ! etcd_start "$n"; then
            line="etcd-scale nodes=$n failed: etcd did not start"
            rc=1
        elif [ "$ETCD_MODE" = readers ]; then
            etcd_readers "$n" || rc=1
        else
            etcd_stores "$n" || rc=1
            reap_all "${KPIDS[@]}"
            KPIDS=()
        fi
        kill "$EPID" 2>/dev/null
        wait "$EPID" 2>/dev/null
        EPID=
        rm -rf "$TMP/etcd.$n"
        echo "$line"
        etcd_lines+=("$line")
    done
fi
echo
printf '%s\n' "${summary[@]}" "${etcd_lines[@]}"
exit $rc
