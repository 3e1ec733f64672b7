#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 30
# --rdzv_conf etcd_candidates=K (agent/rdzv_elect.c): only the agents of node rank below K stand
# for election through etcd; the others read the leader key, with no lease and no watch, and read
# it again only when their store connection is lost. Without etcd: the key's bad values (exit 2,
# one line naming it). With a real etcd (Debian's etcd-server) on 127.0.0.1 alone, started here
# and stopped by PID: 4 agents (--node_rank 0..3, --nnodes=3:4) with etcd_candidates=2 form one
# job; ranks 2 and 3 say they are not candidates and ranks 0 and 1 do not; etcd holds the watches
# of 2 agents, not 4 (its watcher gauge; the same job with etcd_candidates=0 shows 4); SIGKILL of
# the serving candidate moves the store to the other candidate (it says it serves), every
# survivor re-forms under it and exits 0; agents without a node rank stand whatever K is (2 agents,
# etcd_candidates=1, no --node_rank: neither says it is a reader, the job exits 0); and no
# leftover process.
. "$(dirname "$0")/lib.sh"

etcd_agents_env
SECTIONS=("4 agents, etcd_candidates=2: the job forms; ranks 2 and 3 are readers, 0 and 1 candidates"
    "... etcd holds 2 agents' watches (4 with etcd_candidates=0)"
    "SIGKILL of the serving candidate: the other candidate serves, the 3 survivors exit 0"
    "agents without a node rank (etcd_candidates=1): both stand, the job forms and exits 0"
    "no leftover process")

# ---- without etcd ----
etcd_refused "etcd_candidates=x" "etcd_candidates='x'" --rdzv_conf=etcd_candidates=x
etcd_refused "etcd_candidates=-1" "etcd_candidates='-1'" --rdzv_conf=etcd_candidates=-1
etcd_refused "etcd_candidates=5000" "etcd_candidates='5000'" --rdzv_conf=etcd_candidates=5000

etcd_suite_member

# agent NAME RUN RANK ARGS...: one agent in the background, its PID in APID[NAME].
agent() {
    local name=$1 run=$2 rank=$3; shift 3
    "$DDPRUN" -v --nnodes=3:4 --node_rank="$rank" --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id="$run" --max_restarts=3 "$@" "$FW" \
        >"$TMP/$name.out" 2>&1 &
    APID[$name]=$!
}
# watchers: etcd's count of open watches (etcd_debugging_mvcc_watcher_total).
watchers() {
    curl -s --max-time 5 "http://127.0.0.1:$P1/metrics" 2>/dev/null |
        sed -nE 's/^etcd_debugging_mvcc_watcher_total ([0-9.e+]+)$/\1/p' | head -1
}
# start_job RUN K: 4 agents a RUN.0..3 with etcd_candidates=K, waits for their 4 workers.
start_job() {
    local run=$1 k=$2 i
    export FW_DIR=$TMP/$run FW_SLEEP_MS=6000
    mkdir -p "$FW_DIR"
    for i in 0 1 2 3; do agent "$run.$i" "$run" "$i" --rdzv_conf="$CONF,etcd_candidates=$k"; done
    for _ in $(seq 400); do
        [ "$(ls "$FW_DIR" | grep -c '^pid\.')" = 4 ] && break
        sleep 0.05
    done
}

# ---- every agent a candidate: the comparison ----
start_job all 0
sleep 0.5
w_all=$(watchers)
for i in 0 1 2 3; do reap "all.$i" 40 >/dev/null; done

# ---- etcd_candidates=2 ----
start_job kc 2
sleep 0.5
w_kc=$(watchers)
leader=""
for i in 0 1 2 3; do grep -q 'served by this node' "$TMP/kc.$i.out" && leader=$i; done
readers=0
for i in 2 3; do grep -q 'not a store candidate' "$TMP/kc.$i.out" && readers=$((readers + 1)); done
for i in 0 1; do grep -q 'not a store candidate' "$TMP/kc.$i.out" && readers=$((readers + 10)); done
[ "$(ls "$TMP/kc" | grep -c '^pid\.')" = 4 ] && [ $readers = 2 ] &&
    { [ "$leader" = 0 ] || [ "$leader" = 1 ]; }
verdict "4 agents, etcd_candidates=2: the job forms; ranks 2 and 3 are readers, 0 and 1 candidates" ||
    show_tail "$TMP/kc.0.out" "$TMP/kc.2.out"
echo "# etcd watchers: $w_kc with etcd_candidates=2, $w_all with every agent a candidate"
[ "${w_kc%.*}" = 2 ] && [ "${w_all%.*}" = 4 ]
verdict "... etcd holds 2 agents' watches (4 with etcd_candidates=0)"

other=$((1 - ${leader:-0}))
t0=$(date +%s%N)
[ -n "$leader" ] && kill -KILL "${APID[kc.$leader]}"
wait "${APID[kc.$leader]}" 2>/dev/null
ra=0
for i in 0 1 2 3; do [ "$i" != "$leader" ] && { reap "kc.$i" 60 || ra=1; }; done
dt=$((($(date +%s%N) - t0) / 1000000))
moved=0
for i in 2 3; do grep -q ' W rendezvous store now at' "$TMP/kc.$i.out" || moved=1; done
[ -n "$leader" ] && [ $ra = 0 ] && [ $moved = 0 ] &&
    grep -q 'served by this node' "$TMP/kc.$other.out" &&
    grep -q 'round 1: node' "$TMP/kc.2.out"
verdict "SIGKILL of the serving candidate: the other candidate serves, the 3 survivors exit 0" ||
    show_tail "$TMP/kc.0.out" "$TMP/kc.1.out" "$TMP/kc.2.out" "$TMP/kc.3.out"
echo "# SIGKILL of the serving candidate (lease_ttl $TTL s): the survivors done after $dt ms"

# ---- no node rank: every agent stands ----
export FW_DIR=$TMP/nr FW_SLEEP_MS=300
mkdir -p "$FW_DIR"
for i in 1 2; do
    "$DDPRUN" -v --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id=norank --rdzv_conf="$CONF,etcd_candidates=1" \
        "$FW" >"$TMP/nr.$i.out" 2>&1 &
    APID[nr.$i]=$!
done
ra=0
for i in 1 2; do reap "nr.$i" 40 || ra=1; done
[ $ra = 0 ] && ! grep -q 'not a store candidate' "$TMP/nr.1.out" "$TMP/nr.2.out" &&
    [ "$(grep -l 'served by this node' "$TMP/nr.1.out" "$TMP/nr.2.out" | wc -l)" = 1 ]
verdict "agents without a node rank (etcd_candidates=1): both stand, the job forms and exits 0" ||
    show_tail "$TMP/nr.1.out" "$TMP/nr.2.out"

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
check "no leftover process" no_leftovers
finish
