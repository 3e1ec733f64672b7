#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 45
# --rdzv_conf etcd_stores=HOST:PORT+... (agent/rdzv_elect.c): store candidates at addresses known
# in advance (node rank i serves the i-th) stand for election through etcd; every other agent is
# a follower that never talks to etcd: it JOINs a candidate, and one that does not lead answers
# with the leader's address (DDP_ERDZV_MOVED). Without etcd: the key's bad values (exit 2, one
# line naming it); a candidate that names something that is not an address as the store (one
# line, exit 1 at once). With a real etcd (Debian's etcd-server) on 127.0.0.1 alone, started here and
# stopped by PID; every agent and daemon proves a job token; the followers are given an etcd endpoint where nothing listens (127.0.0.1:1), so
# a follower that asked etcd anything would fail:
# - candidates 1 and 2 start first (1 leads: the later candidates campaign later), then
#   candidate 0, which stands by; then 2 followers, which JOIN candidate 0 first: it names the
#   leader, they join there and the job of 5 forms; etcd holds the 3 candidates' watches alone;
# - SIGKILL of the serving candidate: the followers ask the candidates again, another candidate
#   serves, every survivor re-forms under it (round 1) and exits 0;
# - a follower started 2 s before its only candidate goes round the candidates until it answers:
#   the job forms and exits 0;
# - the serving candidate SIGKILLed and started again at once at its address, where the leader
#   key still names its previous agent's store until that lease lapses: its store answers "not
#   yet" (its own link, which follows the key there, is not refused and reconnected again and
#   again), the job of 3 re-forms with it and exits 0, and the store that serves then says so;
# - a candidate whose address is taken: one line naming etcd_stores, exit 2;
# - two ddp-rendezvous --etcd daemons as the candidates (etcd_agents_campaign=0: every agent a
#   follower): the agents JOIN the standby first, which names the serving one; exit 0;
# - a candidate name that does not resolve (under scripts/private-names.sh: no lookup leaves the
#   machine): the others keep it and the job of the resolvable one forms (exit 0); the node whose
#   own address it is exits 2 naming it;
# and no leftover process.
. "$(dirname "$0")/lib.sh"

etcd_agents_env
SECTIONS=("candidate 0 stands by while 1 leads; 2 followers JOIN through it: the job of 5 forms"
    "... the followers were named the leader by a candidate and never asked etcd"
    "... etcd holds the 3 candidates' watches alone"
    "SIGKILL of the serving candidate: another serves, the 4 survivors re-form and exit 0"
    "a follower started before its candidate goes round until it answers: exit 0"
    "a serving candidate started again at its address: not yet, no refusal loop; the job re-forms, exit 0"
    "... the store that serves then says so"
    "a candidate whose address is taken: one line naming etcd_stores, exit 2"
    "ddp-rendezvous --etcd daemons at etcd_stores: agents (campaign=0) JOIN the standby, follow it to the leader, exit 0"
    "a candidate's name that does not resolve: another's is kept, its own is an error"
    "no leftover process")

# ---- without etcd ----
etcd_refused "etcd_stores=x" "etcd_stores: 'x' is not HOST:PORT" --rdzv_conf=etcd_stores=x
etcd_refused "etcd_stores port 0" "etcd_stores: '127.0.0.1:0'" --rdzv_conf=etcd_stores=127.0.0.1:0
etcd_refused "etcd_stores twice" "names '127.0.0.1:5' twice" \
    --rdzv_conf=etcd_stores=127.0.0.1:5+127.0.0.1:5
etcd_refused "etcd_stores empty entry" "etcd_stores='+'" --rdzv_conf=etcd_stores=+
etcd_refused "etcd_candidates against etcd_stores" "etcd_candidates=1 but etcd_stores names 2" \
    "--rdzv_conf=etcd_candidates=1,etcd_stores=127.0.0.1:5+127.0.0.1:6"

# A candidate that names, as the store that serves, something that is not an address (no store
# of ours answers so): the follower says so in one line, escaped, and exits 1 at once, not after
# join_timeout. The fake candidate answers VALIDATE + PING on every connection, then every JOIN
# with DDP_ERDZV_MOVED (-4022) and its text.
python3 - "$TMP/odd.port" <<'PY' &
import os, socket, struct, sys, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); s.settimeout(20)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
text = b"not-an-address\x1b[31m"
def serve(c):
    c.settimeout(20)
    try:
        hs = b""
        while len(hs) < 10: hs += c.recv(10 - len(hs))    # VALIDATE (5 bytes) + PING (5 bytes)
        c.sendall(hs[6:10])                                # the PING's nonce back
        while True:
            req = c.recv(65536)
            if not req:
                break
            if req[0] == 0x50:
                c.sendall(bytes([0x50, 1]) + struct.pack("<qQ", -4022, len(text)) + text)
    except OSError:
        pass
    c.close()
try:
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
except OSError:
    pass
PY
odd=$!
for _ in $(seq 100); do [ -f "$TMP/odd.port" ] && break; sleep 0.05; done
t0=$(date +%s%N)
timeout -k 2 20 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint=127.0.0.1:1 --rdzv_id=odd \
    --rdzv_conf="etcd_agents_campaign=0,etcd_stores=127.0.0.1:$(cat "$TMP/odd.port" 2>/dev/null)" \
    "$FW" >"$TMP/odd.out" 2>&1
rc=$?
dt=$((($(date +%s%N) - t0) / 1000000))
kill "$odd" 2>/dev/null
wait "$odd" 2>/dev/null
[ $rc = 1 ] && [ $dt -lt 10000 ] &&
    one_error "$TMP/odd.out" "names 'not-an-address\e[31m' as the store that serves, not an address"
verdict "a candidate that names no address: one line (escaped), exit 1 at once" ||
    show_tail "$TMP/odd.out"
echo "# a candidate that names no address: exit $rc after $dt ms"

etcd_suite_member
# The agents prove a job token to every store they reach, candidates that redirect included.
export DDPRUN_TOKEN=$(random_token "$TMP/token")
S0=$(free_port); S1=$(free_port); S2=$(free_port)
STORES="127.0.0.1:$S0+127.0.0.1:$S1+127.0.0.1:$S2"

# agent NAME RUN RANK ETCD ARGS...: one agent in the background, its PID in APID[NAME].
agent() {
    local name=$1 run=$2 rank=$3 ep=$4; shift 4
    "$DDPRUN" -v --nnodes=4:5 --node_rank="$rank" --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="$ep" --rdzv_id="$run" --max_restarts=3 "$@" "$FW" \
        >"$TMP/$name.out" 2>&1 &
    APID[$name]=$!
}
watchers() {
    curl -s --max-time 5 "http://127.0.0.1:$P1/metrics" 2>/dev/null |
        sed -nE 's/^etcd_debugging_mvcc_watcher_total ([0-9.e+]+)$/\1/p' | head -1
}

# ---- 3 candidates, 2 followers ----
export FW_DIR=$TMP/st FW_SLEEP_MS=6000
mkdir -p "$FW_DIR"
agent st.1 st 1 "127.0.0.1:$P1" --rdzv_conf="$CONF,etcd_stores=$STORES"
agent st.2 st 2 "127.0.0.1:$P1" --rdzv_conf="$CONF,etcd_stores=$STORES"
wait_for "$TMP/st.1.out" 'served by this node' 15 >/dev/null
agent st.0 st 0 "127.0.0.1:$P1" --rdzv_conf="$CONF,etcd_stores=$STORES"
wait_for "$TMP/st.0.out" "rendezvous store now at 127.0.0.1:$S1" 15 >/dev/null
for i in 3 4; do agent "st.$i" st "$i" 127.0.0.1:1 --rdzv_conf="$CONF,etcd_stores=$STORES"; done
for _ in $(seq 400); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\.')" = 5 ] && break
    sleep 0.05
done
[ "$(ls "$FW_DIR" | grep -c '^pid\.')" = 5 ] && grep -q 'served by this node' "$TMP/st.1.out"
verdict "candidate 0 stands by while 1 leads; 2 followers JOIN through it: the job of 5 forms" ||
    show_tail "$TMP/st.0.out" "$TMP/st.1.out" "$TMP/st.3.out"
f=0
for i in 3 4; do
    grep -q 'a follower (node rank' "$TMP/st.$i.out" &&
        grep -q "rendezvous store now at 127.0.0.1:$S1 (named by the store candidate at 127.0.0.1:$S0)" \
            "$TMP/st.$i.out" && ! grep -qi 'etcd unreachable\|127.0.0.1:1\b' "$TMP/st.$i.out" ||
        f=1
done
[ $f = 0 ]
verdict "... the followers were named the leader by a candidate and never asked etcd" ||
    show_tail "$TMP/st.3.out"
w=$(watchers)
echo "# etcd watchers: $w"
[ "${w%.*}" = 3 ]
verdict "... etcd holds the 3 candidates' watches alone"

t0=$(date +%s%N)
kill -KILL "${APID[st.1]}"
wait "${APID[st.1]}" 2>/dev/null
ra=0
for i in 0 2 3 4; do reap "st.$i" 60 || ra=1; done
dt=$((($(date +%s%N) - t0) / 1000000))
new=""
for i in 0 2; do grep -q 'W rendezvous store now at .*served by this node' "$TMP/st.$i.out" && new=$i; done
[ $ra = 0 ] && [ -n "$new" ] && grep -q 'round 1: node' "$TMP/st.3.out" &&
    grep -q 'round 1: node' "$TMP/st.4.out"
verdict "SIGKILL of the serving candidate: another serves, the 4 survivors re-form and exit 0" ||
    show_tail "$TMP/st.0.out" "$TMP/st.2.out" "$TMP/st.3.out" "$TMP/st.4.out"
echo "# SIGKILL of the serving candidate (lease_ttl $TTL s): candidate $new serves; the survivors done after $dt ms"

# ---- a follower before its candidate ----
export FW_DIR=$TMP/early FW_SLEEP_MS=300
mkdir -p "$FW_DIR"
E0=$(free_port)
for i in 1 0; do
    "$DDPRUN" -v --nnodes=2 --node_rank=$i --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=early \
        --rdzv_conf="$CONF,etcd_stores=127.0.0.1:$E0" "$FW" >"$TMP/early.$i.out" 2>&1 &
    APID[early.$i]=$!
    [ $i = 1 ] && sleep 2
done
ra=0
for i in 0 1; do reap "early.$i" 40 || ra=1; done
[ $ra = 0 ] && grep -q 'a follower' "$TMP/early.1.out"
verdict "a follower started before its candidate goes round until it answers: exit 0" ||
    show_tail "$TMP/early.0.out" "$TMP/early.1.out"

# ---- the serving candidate started again at its address ----
export FW_DIR=$TMP/again FW_SLEEP_MS=5000
mkdir -p "$FW_DIR"
A0=$(free_port); A1=$(free_port)
ASTORES="127.0.0.1:$A0+127.0.0.1:$A1"
again() { # again RANK: the agent of node rank RANK (2: the follower), in the background
    "$DDPRUN" -v --nnodes=3 --node_rank="$1" --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=again --max_restarts=3 \
        --rdzv_conf="$CONF,etcd_stores=$ASTORES" "$FW" >>"$TMP/again.$1.out" 2>&1 &
    APID[again.$1]=$!
}
for i in 0 1 2; do again $i; done
for _ in $(seq 300); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\.')" = 3 ] && break
    sleep 0.05
done
K=0
grep -q 'served by this node' "$TMP/again.1.out" && K=1
kill -KILL "${APID[again.$K]}"
wait "${APID[again.$K]}" 2>/dev/null
echo "--- started again" >>"$TMP/again.$K.out"
again $K
ra=0
for i in 0 1 2; do reap "again.$i" 40 || ra=1; done
# After the restart: how often its own store refused it, and the store the others ended at.
lost=$(sed -n '/^--- started again/,$p' "$TMP/again.$K.out" | grep -c 'no longer serves')
last=$(cat "$TMP/again.$((1 - K)).out" "$TMP/again.2.out" | grep -o 'rendezvous store now at 127.0.0.1:[0-9]*' |
    tail -1 | grep -o '[0-9]*$')
[ $ra = 0 ] && [ "$lost" = 0 ] && grep -q 'round 1: node' "$TMP/again.2.out" &&
    sed -n '/^--- started again/,$p' "$TMP/again.$K.out" | grep -q 'round 1: node'
verdict "a serving candidate started again at its address: not yet, no refusal loop; the job re-forms, exit 0" ||
    { echo "# candidate $K restarted; refused by its own store $lost times"; show_tail "$TMP/again.$K.out" "$TMP/again.2.out"; }
if [ "$last" = "$([ $K = 0 ] && echo "$A0" || echo "$A1")" ]; then
    sed -n '/^--- started again/,$p' "$TMP/again.$K.out" | grep -q "store now at 127.0.0.1:$last, served by this node"
else
    grep -q "store now at 127.0.0.1:$last, served by this node" "$TMP/again.$((1 - K)).out"
fi
verdict "... the store that serves then says so" ||
    { echo "# the others ended at port $last"; show_tail "$TMP/again.0.out" "$TMP/again.1.out"; }
echo "# serving candidate $K restarted at its address; the store then served at port $last ($([ "$last" = "$A0" ] && echo candidate 0 || echo candidate 1))"

# ---- a candidate's address taken ----
T0=$(free_port)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(30)' "$T0" &
HOLD=$!
sleep 0.3
timeout 20 "$DDPRUN" --nnodes=2 --node_rank=0 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=taken \
    --rdzv_conf="$CONF,etcd_stores=127.0.0.1:$T0" "$FW" >"$TMP/taken.out" 2>&1
rc=$?
kill "$HOLD"
wait "$HOLD" 2>/dev/null
[ $rc = 2 ] && grep -q "unable to serve a rendezvous store on 127.0.0.1 (its address in --rdzv_conf etcd_stores)" "$TMP/taken.out"
verdict "a candidate whose address is taken: one line naming etcd_stores, exit 2" ||
    show_tail "$TMP/taken.out"

# ---- daemons as the candidates, every agent a follower ----
D1=$(free_port); D2=$(free_port)
for d in 1 2; do
    port=$D1
    [ $d = 2 ] && port=$D2
    "$BIN/ddp-rendezvous" --token-file "$TMP/token" --port "$port" --host 127.0.0.1 --etcd "127.0.0.1:$P1" \
        --etcd-lease-ttl "$TTL" --run-id daem >"$TMP/daemon.$d.log" 2>&1 &
    APID[daemon.$d]=$!
    wait_for "$TMP/daemon.$d.log" 'listening on' 15 >/dev/null
done
export FW_DIR=$TMP/daem FW_SLEEP_MS=300
mkdir -p "$FW_DIR"
for i in 0 1; do
    "$DDPRUN" -v --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:1 \
        --rdzv_id=daem --rdzv_conf="$CONF,etcd_agents_campaign=0,etcd_stores=127.0.0.1:$D2+127.0.0.1:$D1" \
        "$FW" >"$TMP/daem.$i.out" 2>&1 &
    APID[daem.$i]=$!
done
ra=0
for i in 0 1; do reap "daem.$i" 40 || ra=1; done
[ $ra = 0 ] && grep -q "rendezvous store now at 127.0.0.1:$D1 (named by the store candidate at 127.0.0.1:$D2)" \
        "$TMP/daem.0.out"
verdict "ddp-rendezvous --etcd daemons at etcd_stores: agents (campaign=0) JOIN the standby, follow it to the leader, exit 0" ||
    show_tail "$TMP/daemon.1.log" "$TMP/daemon.2.log" "$TMP/daem.0.out"
for d in 1 2; do kill -TERM "${APID[daemon.$d]}"; wait "${APID[daemon.$d]}" 2>/dev/null; done

# ---- a candidate's name that does not resolve (yet) ----
# Under scripts/private-names.sh a name missing from its hosts file fails on a loopback resolver:
# no lookup leaves the machine.
N0=$(free_port)
export FW_DIR=$TMP/names FW_SLEEP_MS=300
mkdir -p "$FW_DIR"
for i in 0 2; do
    scripts/private-names.sh "$DDPRUN" -v --nnodes=2:3 --node_rank=$i --nproc_per_node=1 \
        --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=names \
        --rdzv_conf="$CONF,etcd_stores=127.0.0.1:$N0+pending-pod:$N0" "$FW" \
        >"$TMP/names.$i.out" 2>&1 &
    APID[names.$i]=$!
done
ra=0
for i in 0 2; do reap "names.$i" 40 || ra=1; done
timeout 20 scripts/private-names.sh "$DDPRUN" --nnodes=2 --node_rank=1 --nproc_per_node=1 \
    --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=names1 \
    --rdzv_conf="$CONF,etcd_stores=127.0.0.1:$N0+pending-pod:$N0" "$FW" >"$TMP/names.1.out" 2>&1
rc=$?
if [ $ra = 125 ] || grep -q 'unable to make a mount namespace' "$TMP/names.0.out"; then
    skip "a candidate's name that does not resolve: another's is kept, its own is an error" \
        "no mount namespace here"
else
    [ $ra = 0 ] && [ $rc = 2 ] &&
        grep -q "etcd_stores: 'pending-pod:$N0' (this node's, node rank 1)" "$TMP/names.1.out"
    verdict "a candidate's name that does not resolve: another's is kept, its own is an error" ||
        show_tail "$TMP/names.0.out" "$TMP/names.2.out" "$TMP/names.1.out"
fi

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
check "no leftover process" no_leftovers
finish
