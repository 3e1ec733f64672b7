#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 27
# --rdzv_backend=etcd, what a failover must not lose, with real agents and a real etcd (Debian's
# etcd-server) on loopback, started here and stopped by PID.
#   Fencing: the serving agent and a second one are stopped (SIGSTOP) past lease_ttl; the third
#   leads. Resumed, the old leader stops serving (one line) and leaves (exit 1) without serving
#   another round; the second, resumed, follows the election to the new leader (its line names
#   the new leader's address) and re-forms with it; both exit 0. (A resumed process runs its
#   timers before the I/O that waited for it, epoll_wait returning EINTR after SIGCONT, so the
#   old store closes before it reads a request: its refusal, and an agent's reaction to one, are
#   checked in tests/unit/test_rdzv_round_calls.c and test_agent_rdzv_link.c.)
#   The DONE mark: a finished run leaves <prefix>/R/done in etcd. A spare stopped through the
#   end of the run and resumed after its leader left leads, loads the mark and exits 0; a new
#   agent with the same run id is refused as finished (exit 1) and starts no worker.
#   Quarantine: a host excluded under max_node_failures leaves <prefix>/R/hosts/HOST in etcd;
#   after the serving agent's SIGKILL the new leader loads it, and the host, started again, is
#   refused at its first JOIN (exit 4) and starts no worker.
# Hosts are loopback addresses (--local_addr 127.0.0.1..3). Every process is stopped by PID.
. "$(dirname "$0")/lib.sh"

etcd_agents_env
ETCDC=$BIN/tests/etcd_client
SECTIONS=("fencing: the old leader, resumed past its lease, stops serving (one line) and leaves (exit 1)"
    "... an agent resumed with it follows the election to the new leader (its line) and re-forms; both others exit 0"
    "a finished run leaves its DONE mark in etcd"
    "... a spare resumed after its leader left leads, loads the DONE mark and exits 0"
    "... a new agent with the finished run's id: refused as finished (exit 1), no worker"
    "an excluded host leaves its record in etcd"
    "... after the leader's SIGKILL the new leader loads it: the host is refused at once (exit 4), no worker"
    "no leftover process")

etcd_suite_member

# agent NAME NNODES RUN ARGS...: one agent in the background, its PID in APID[NAME].
agent() {
    local name=$1 nn=$2 run=$3; shift 3
    "$DDPRUN" -v --nnodes="$nn" --nproc_per_node=2 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id="$run" --rdzv_conf="$CONF" --max_restarts=3 \
        "$@" "$FW" >"$TMP/$name.out" 2>&1 &
    APID[$name]=$!
}
# leader_of NAME...: the one whose agent serves the store.
leader_of() {
    local n
    for n in "$@"; do grep -q 'served by this node' "$TMP/$n.out" && echo "$n"; done | head -1
}
etcd_get() { "$ETCDC" --endpoints "127.0.0.1:$P1" get "$1" 2>&1; }

# ---- fencing: a leader resumed past its lease stops serving; the others follow the election ----
export FW_DIR=$TMP/fence FW_SLEEP_MS=8000
mkdir -p "$FW_DIR"
for i in 1 2 3; do agent "f$i" 2:3 fence; done
workers "$FW_DIR" 6
L=$(leader_of f1 f2 f3)
others=()
for n in f1 f2 f3; do [ "$n" != "$L" ] && others+=("$n"); done
B=${others[0]} C=${others[1]}
kill -STOP "${APID[$L]}"
sleep 1.6
kill -STOP "${APID[$B]}"
wait_for "$TMP/$C.out" ' W rendezvous store now at .*served by this node' $((TTL + 10)) >/dev/null
led=$?
# The new leader's store, as its agent names it.
NEW=$(sed -n 's/.* W rendezvous store now at \([^ ,]*\), served by this node.*/\1/p' "$TMP/$C.out" | head -1)
kill -CONT "${APID[$L]}"
reap "$L" 20
rl=$?
kill -CONT "${APID[$B]}"
rb=0 rc=0
reap "$B" 40 || rb=$?
reap "$C" 40 || rc=$?
[ -n "$L" ] && [ $led = 0 ] && [ $rl = 1 ] &&
    [ "$(grep -c 'lost the etcd lease of the rendezvous store .*stopped serving it' "$TMP/$L.out")" = 1 ] &&
    ! grep -q 'round 1' "$TMP/$L.out"
verdict "fencing: the old leader, resumed past its lease, stops serving (one line) and leaves (exit 1)" ||
    show_tail "$TMP/$L.out" "$TMP/$C.out"
[ -n "$NEW" ] && [ $rb = 0 ] && [ $rc = 0 ] &&
    grep -q " W rendezvous store now at $NEW (elected" "$TMP/$B.out" &&
    grep -q "round 1: node" "$TMP/$B.out" && grep -q "round 1: node" "$TMP/$C.out"
verdict "... an agent resumed with it follows the election to the new leader (its line) and re-forms; both others exit 0" ||
    show_tail "$TMP/$B.out" "$TMP/$C.out"
echo "# fencing: the new leader's store at $NEW"

# ---- the DONE mark ----
export FW_DIR=$TMP/done FW_SLEEP_MS=7000
mkdir -p "$FW_DIR"
for i in 1 2; do agent "d$i" 2 done; done
workers "$FW_DIR" 4
agent d3 2 done # a spare: the run is at --nnodes' max
wait_for "$TMP/d3.out" 'waiting as a spare' 15 >/dev/null
spare=$?
kill -STOP "${APID[d3]}"
ra=0
for i in 1 2; do reap "d$i" 40 || ra=1; done
etcd_get /ddprun/done/done >"$TMP/done.key"
[ $spare = 0 ] && [ $ra = 0 ] && grep -q '"round"' "$TMP/done.key"
verdict "a finished run leaves its DONE mark in etcd" ||
    { cat "$TMP/done.key"; show_tail "$TMP/d1.out" "$TMP/d2.out" "$TMP/d3.out"; }
kill -CONT "${APID[d3]}"
reap d3 $((TTL + 25))
r3=$?
[ $r3 = 0 ] && grep -q 'loaded from etcd its DONE mark' "$TMP/d3.out" &&
    ! grep -q 'round 1: node' "$TMP/d3.out"
verdict "... a spare resumed after its leader left leads, loads the DONE mark and exits 0" ||
    show_tail "$TMP/d3.out"
export FW_DIR=$TMP/done4
mkdir -p "$FW_DIR"
agent d4 2 done
reap d4 25
r4=$?
[ $r4 = 1 ] && grep -q "finished already" "$TMP/d4.out" && [ -z "$(ls "$FW_DIR")" ]
verdict "... a new agent with the finished run's id: refused as finished (exit 1), no worker" ||
    show_tail "$TMP/d4.out"

# ---- quarantine across a failover ----
export FW_DIR=$TMP/quar FW_SLEEP_MS=30000
mkdir -p "$FW_DIR"
agent q1 2:3 quar --local_addr=127.0.0.1 --max_node_failures=1
agent q2 2:3 quar --local_addr=127.0.0.2 --max_node_failures=1
workers "$FW_DIR" 4
L=$(leader_of q1 q2)
S=q1
[ "$L" = q1 ] && S=q2
FW_DIR=$TMP/quar3 FW_EXIT=1 agent q3 2:3 quar --local_addr=127.0.0.3 --max_node_failures=1
mkdir -p "$TMP/quar3"
reap q3 40
r3=$?
etcd_get /ddprun/quar/hosts/127.0.0.3 >"$TMP/quar.key"
[ -n "$L" ] && [ $r3 = 4 ] && grep -q '"excluded":true' "$TMP/quar.key"
verdict "an excluded host leaves its record in etcd" ||
    { cat "$TMP/quar.key"; show_tail "$TMP/q3.out" "$TMP/$L.out"; }
kill -KILL "${APID[$L]}"
wait "${APID[$L]}" 2>/dev/null
wait_for "$TMP/$S.out" 'loaded from etcd 1 host record' $((TTL + 10)) >/dev/null
loaded=$?
mkdir -p "$TMP/quar3b"
FW_DIR=$TMP/quar3b FW_EXIT=1 agent q3b 2:3 quar --local_addr=127.0.0.3 --max_node_failures=1
reap q3b 25
r3b=$?
kill -TERM "${APID[$S]}"
reap "$S" 20
[ $loaded = 0 ] && [ $r3b = 4 ] && grep -q 'host 127.0.0.3 is excluded after 1 group failures' "$TMP/q3b.out" &&
    ! grep -q 'round [0-9]*: node' "$TMP/q3b.out" && [ -z "$(ls "$TMP/quar3b")" ]
verdict "... after the leader's SIGKILL the new leader loads it: the host is refused at once (exit 4), no worker" ||
    show_tail "$TMP/$S.out" "$TMP/q3b.out"

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
check "no leftover process" no_leftovers
finish
