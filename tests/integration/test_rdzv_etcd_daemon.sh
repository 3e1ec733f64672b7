#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 58
# ddp-rendezvous --etcd: standalone store daemons stand for election on a run's leader key as the
# agents of --rdzv_backend=etcd do (rendezvous/server/rdzv_daemon_etcd.c), and agents with
# etcd_agents_campaign=0 follow the store they elect. Without etcd: bad flags and keys (exit 2,
# one line naming each) and an etcd that is not there (exit 1 within 10 s + 3 s, one error line
# naming it). With a real etcd (Debian's etcd-server) on 127.0.0.1, started here: two daemons, one
# serving, one standing by; a 2-node job forms on the serving daemon and exits 0; SIGKILL of the
# serving daemon mid-job: the other takes over and the job re-forms and exits 0, no command
# typed again; SIGSTOP of the serving daemon past its lease: another takes over, and on SIGCONT it
# stops serving, says so in one line and exits 1; SIGTERM of the serving daemon (lease 8 s): it
# resigns, another takes over within 3 s, and it exits 0; etcd down 3 s within the lease: the
# serving daemon goes on, one line when etcd goes and one when it is back. The run's records
# (rdzv_etcd_records.h), with a serving daemon A and a standby B: a job served by A finishes and
# its DONE mark is in etcd; a host excluded under max_node_failures on A has its record in etcd;
# A's SIGKILL: B takes over and loads both; a spare of the finished run, stopped through its end,
# resumed, JOINs through B, is told the run is done and exits 0; the excluded host, started again,
# is refused at its first JOIN through B (exit 4, no worker). A takeover whose campaign answer
# comes late (tests/helpers/etcd_delay_proxy.py holds back etcd's answers to the standby's txns):
# the agents that JOIN it meanwhile are told "not yet", never sent back to the dead daemon, and
# the job re-forms on it and exits 0. Every process is stopped by PID.
. "$(dirname "$0")/lib.sh"

DDPRUN=$BIN/ddprun
RDZV=$BIN/ddp-rendezvous
FW=$BIN/tests/fake_worker
ETCDC=$BIN/tests/etcd_client
fake_worker_env_clear
unset DDPRUN_ETCD_USER DDPRUN_ETCD_PASSWORD DDPRUN_TOKEN DDPRUN_TOKEN_FILE
TTL=3
LATE_MS=1200 # how long the proxy holds back the standby's campaign answer
# The real-etcd checks, as they read when they run (skipped under these names without etcd).
SECTIONS=("two daemons: each run served by exactly one, the other standing by"
    "2 agents (etcd_agents_campaign=0) form on the serving daemon and exit 0"
    "SIGKILL of the serving daemon mid-job: the other takes over, the job re-forms and exits 0"
    "SIGSTOP of the serving daemon past its lease: another takes over; on SIGCONT it exits 1 with one line"
    "SIGTERM of the serving daemon (lease 8 s): another takes over within 3 s, it exits 0"
    "etcd down 3 s: the serving daemon goes on serving; one line when etcd goes, one when it is back"
    "records: a job served by daemon A finishes, its DONE mark is in etcd"
    "records: a host excluded on daemon A has its record in etcd"
    "records: A's SIGKILL: B takes over and loads the DONE mark and the host record"
    "records: a spare of the finished run JOINs through B, is told the run is done and exits 0"
    "records: the excluded host stays excluded across the failover: refused through B (exit 4), no worker"
    "SIGKILL of the serving daemon, the next one's campaign answered ${LATE_MS} ms late: the agents wait for it, never sent back to the dead one, and exit 0"
    "no leftover process")

# ---- without etcd ----
bad() { # NAME WANT_IN_LINE ARGS...: exit 2 and one line naming what is wrong
    local name=$1 want=$2; shift 2
    "$RDZV" --no-auth --port 0 "$@" >"$TMP/bad.out" 2>&1
    local rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.out")" = 1 ] && grep -q -- "$want" "$TMP/bad.out"; then
        ok "bad flag: $name (exit 2, one line naming it)"
    else
        not_ok "bad flag: $name (exit $rc)"; show_tail "$TMP/bad.out"
    fi
}
bad "--etcd without --run-id" "--etcd: name the runs" --etcd 127.0.0.1:1
bad "--run-id without --etcd" "--run-id" --run-id r
bad "a member's port" "'127.0.0.1:70000'" --etcd 127.0.0.1:1,127.0.0.1:70000 --run-id r
bad "a member without a port" "'etcd1'" --etcd etcd1 --run-id r
bad "--etcd-lease-ttl 1" "--etcd-lease-ttl: '1'" --etcd 127.0.0.1:1 --run-id r --etcd-lease-ttl 1
bad "--etcd-prefix without /" "--etcd-prefix: 'ddp'" --etcd 127.0.0.1:1 --run-id r --etcd-prefix ddp
bad "--etcd-cert without --etcd-key" "--etcd-key" --etcd 127.0.0.1:1 --run-id r --etcd-cert /c.pem
bad "an unknown flag" "--etcd-nope" --etcd-nope x
DDPRUN_ETCD_USER=u bad "a user without a password" "DDPRUN_ETCD_PASSWORD" --etcd 127.0.0.1:1 --run-id r
"$DDPRUN" --nnodes=2 --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:1 \
    --rdzv_conf=etcd_agents_campaign=maybe "$FW" >"$TMP/camp.out" 2>&1
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/camp.out")" = 1 ] && grep -q "etcd_agents_campaign='maybe'" "$TMP/camp.out"
verdict "bad key: etcd_agents_campaign=maybe (exit 2, one line naming it)" || show_tail "$TMP/camp.out"

NOPE=$(free_port)
t0=$(date +%s%N)
"$RDZV" --no-auth --port 0 --etcd "127.0.0.1:$NOPE" --run-id nope >"$TMP/nope.out" 2>&1
rc=$?
dt=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 1 ] && [ $dt -lt 13000 ] && one_error "$TMP/nope.out" "127.0.0.1:$NOPE" &&
    ! grep -q 'listening on' "$TMP/nope.out"
verdict "etcd not reachable: exit 1 within 13 s, one error line naming it, never listening" ||
    show_tail "$TMP/nope.out"
echo "# etcd not reachable: exit $rc after $dt ms"

etcd_suite_member
HEX=$(random_token "$TMP/token")
export DDPRUN_TOKEN=$HEX

declare -A PID
# daemon NAME TTL: a ddp-rendezvous standing for runs form, kill and idle; its PID in PID[NAME].
daemon() {
    "$RDZV" --token-file "$TMP/token" --port 0 --log-level info --etcd "127.0.0.1:$P1" \
        --etcd-lease-ttl "$2" --run-id form --run-id kill --run-id idle >"$TMP/$1.out" 2>&1 &
    PID[$1]=$!
}
# agent NAME RUN [NNODES [ARGS...]]: one agent (2 nodes unless NNODES) that follows the daemons'
# store; its PID in PID[NAME].
agent() {
    local name=$1 run=$2 nn=${3:-2}
    shift $(($# < 3 ? $# : 3))
    "$DDPRUN" -v --nnodes="$nn" --nproc_per_node=2 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id="$run" --max_restarts=3 \
        --rdzv_conf="last_call_timeout=1,lease_ttl=$TTL,keep_alive_interval=1,etcd_agents_campaign=0" \
        "$@" "$FW" >"$TMP/$name.out" 2>&1 &
    PID[$name]=$!
}
# reap NAME [TIMEOUT_S]: its exit code (137 after a SIGKILL at the timeout).
reap() {
    local p=${PID[$1]} i
    for i in $(seq $((${2:-40} * 20))); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.05
    done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
    wait "$p"
}
# serving RUN NAMES...: the names of the daemons whose last word on RUN is that they serve it.
serving() {
    local run=$1 n; shift
    for n in "$@"; do
        grep -E "run $run: (this store serves|standing by|lost the etcd lease)" "$TMP/$n.out" |
            tail -1 | grep -q 'this store serves' && echo "$n"
    done
}
addr_of() { sed -n 's/^listening on //p' "$TMP/$1.out"; }

# ---- two daemons: one serves, one stands by ----
daemon d1 $TTL
daemon d2 $TTL
up=0
for n in d1 d2; do wait_for "$TMP/$n.out" '^listening on' 20 >/dev/null || up=1; done
[ $up = 0 ] && [ "$(serving form d1 d2 | wc -l)" = 1 ] && [ "$(serving kill d1 d2 | wc -l)" = 1 ] &&
    [ "$(cat "$TMP/d1.out" "$TMP/d2.out" | grep -c 'run form: standing by')" = 1 ]
verdict "two daemons: each run served by exactly one, the other standing by" ||
    show_tail "$TMP/d1.out" "$TMP/d2.out"

# ---- a job forms on the serving daemon ----
export FW_DIR=$TMP/form FW_SLEEP_MS=300
mkdir -p "$FW_DIR"
srv=$(serving form d1 d2)
agent f1 form
agent f2 form
rf=0
for n in f1 f2; do reap $n 40 || rf=1; done
at=0
for n in f1 f2; do
    grep -q "rendezvous store now at $(addr_of "$srv") (elected" "$TMP/$n.out" || at=1
    grep -q 'served by this node' "$TMP/$n.out" && at=1
done
[ $rf = 0 ] && [ $at = 0 ] && [ "$(ls "$FW_DIR" | grep -c '^env\.')" = 4 ]
verdict "2 agents (etcd_agents_campaign=0) form on the serving daemon and exit 0" ||
    show_tail "$TMP/f1.out" "$TMP/f2.out" "$TMP/$srv.out"

# ---- SIGKILL of the serving daemon mid-job ----
export FW_DIR=$TMP/kill FW_SLEEP_MS=6000
mkdir -p "$FW_DIR"
agent k1 kill
agent k2 kill
for _ in $(seq 300); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\..*\.0$')" = 4 ] && break
    sleep 0.05
done
srv=$(serving kill d1 d2)
other=d1; [ "$srv" = d1 ] && other=d2
tk=$(date +%s%N)
kill -KILL "${PID[$srv]}"
wait "${PID[$srv]}" 2>/dev/null
wait_for "$TMP/$other.out" " W run kill: this store serves" $((TTL + 3)) >/dev/null
took=$?
dt=$((($(date +%s%N) - tk) / 1000000))
rk=0
for n in k1 k2; do reap $n 60 || rk=1; done
moved=0
for n in k1 k2; do
    grep -q " W rendezvous store now at $(addr_of "$other") (elected" "$TMP/$n.out" || moved=1
    grep -q "round 1: node" "$TMP/$n.out" || moved=1
done
[ -n "$srv" ] && [ $took = 0 ] && [ $rk = 0 ] && [ $moved = 0 ]
verdict "SIGKILL of the serving daemon mid-job: the other takes over, the job re-forms and exits 0" ||
    show_tail "$TMP/k1.out" "$TMP/k2.out" "$TMP/$other.out"
echo "# SIGKILL of the serving daemon: the other serves after $dt ms (lease $TTL s)"

# ---- SIGSTOP of the serving daemon past its lease ----
daemon d3 8
wait_for "$TMP/d3.out" 'run idle: standing by' 20 >/dev/null
kill -STOP "${PID[$other]}"
wait_for "$TMP/d3.out" " W run idle: this store serves" $((TTL + 4)) >/dev/null
took=$?
kill -CONT "${PID[$other]}"
reap "$other" 10
rc=$?
[ $took = 0 ] && [ $rc = 1 ] && [ "$(grep -c ' E .*lost the etcd lease' "$TMP/$other.out")" = 1 ]
verdict "SIGSTOP of the serving daemon past its lease: another takes over; on SIGCONT it exits 1 with one line" ||
    show_tail "$TMP/$other.out" "$TMP/d3.out"

# ---- SIGTERM of the serving daemon: it resigns ----
daemon d4 8
wait_for "$TMP/d4.out" 'run idle: standing by' 20 >/dev/null
t0=$(date +%s%N)
kill -TERM "${PID[d3]}"
wait_for "$TMP/d4.out" " W run idle: this store serves" 3 >/dev/null
took=$?
dt=$((($(date +%s%N) - t0) / 1000000))
reap d3 10
rc=$?
[ $took = 0 ] && [ $rc = 0 ]
verdict "SIGTERM of the serving daemon (lease 8 s): another takes over within 3 s, it exits 0" ||
    show_tail "$TMP/d3.out" "$TMP/d4.out"
echo "# SIGTERM of the serving daemon: the other serves after $dt ms (lease 8 s)"

# ---- etcd down 3 s, within the serving daemon's lease (8 s) ----
kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
sleep 3
etcd_member "$TMP/etcd" "$P1" "$P2"
wait_for "$TMP/d4.out" 'answers again' 15 >/dev/null
kill -0 "${PID[d4]}" 2>/dev/null && [ "$(grep -c ' W etcd unreachable' "$TMP/d4.out")" = 1 ] &&
    [ "$(grep -c 'answers again' "$TMP/d4.out")" = 1 ] && [ "$(serving idle d4)" = d4 ]
verdict "etcd down 3 s: the serving daemon goes on serving; one line when etcd goes, one when it is back" ||
    show_tail "$TMP/d4.out"

kill -TERM "${PID[d4]}"
reap d4 10

# ---- the run's records across a failover: A serves runs done and quar, B stands by ----
etcd_get() { "$ETCDC" --endpoints "127.0.0.1:$P1" get "$1" 2>&1; }
records_daemon() {
    "$RDZV" --token-file "$TMP/token" --port 0 --log-level info --etcd "127.0.0.1:$P1" \
        --etcd-lease-ttl $TTL --run-id done --run-id quar >"$TMP/$1.out" 2>&1 &
    PID[$1]=$!
}
records_daemon rA
wait_for "$TMP/rA.out" '^listening on' 20 >/dev/null
records_daemon rB
wait_for "$TMP/rB.out" '^listening on' 20 >/dev/null
# Quarantine: a 2:3 job on 127.0.0.1 and .2; a third node on .3 whose workers fail is excluded.
export FW_DIR=$TMP/quar FW_SLEEP_MS=30000
mkdir -p "$FW_DIR" "$TMP/quar3" "$TMP/quar3b" "$TMP/done"
agent q1 quar 2:3 --local_addr=127.0.0.1 --max_node_failures=1
agent q2 quar 2:3 --local_addr=127.0.0.2 --max_node_failures=1
# The DONE mark: a 2-node job, and a spare stopped while it waits (answered at its keep-alive
# bound, then dropped, before the job ends: no DONE reply waits for it on A).
FW_DIR=$TMP/done FW_SLEEP_MS=7000 agent n1 done
FW_DIR=$TMP/done FW_SLEEP_MS=7000 agent n2 done
workers "$TMP/done" 4
FW_DIR=$TMP/done agent n3 done
wait_for "$TMP/n3.out" 'waiting as a spare' 15 >/dev/null
spare=$?
kill -STOP "${PID[n3]}"
workers "$FW_DIR" 4
FW_DIR=$TMP/quar3 FW_EXIT=1 agent q3 quar 2:3 --local_addr=127.0.0.3 --max_node_failures=1
reap q3 40
rq3=$?
rn=0
for n in n1 n2; do reap $n 40 || rn=1; done
etcd_get /ddprun/done/done >"$TMP/done.key"
etcd_get /ddprun/quar/hosts/127.0.0.3 >"$TMP/quar.key"
[ "$(serving done rA rB)" = rA ] && [ "$(serving quar rA rB)" = rA ] && [ $spare = 0 ] &&
    [ $rn = 0 ] && grep -q '{"round":0}' "$TMP/done.key"
verdict "records: a job served by daemon A finishes, its DONE mark is in etcd" ||
    { cat "$TMP/done.key"; show_tail "$TMP/n1.out" "$TMP/n3.out" "$TMP/rA.out"; }
[ $rq3 = 4 ] && grep -q '"excluded":true' "$TMP/quar.key"
verdict "records: a host excluded on daemon A has its record in etcd" ||
    { cat "$TMP/quar.key"; show_tail "$TMP/q3.out" "$TMP/rA.out"; }
tk=$(date +%s%N)
kill -KILL "${PID[rA]}"
wait "${PID[rA]}" 2>/dev/null
took=0
for run in done quar; do
    wait_for "$TMP/rB.out" " W run $run: this store serves" $((TTL + 5)) >/dev/null || took=1
done
dt=$((($(date +%s%N) - tk) / 1000000))
[ $took = 0 ] && grep -q "rendezvous 'done': loaded from etcd its DONE mark, 0 host records" "$TMP/rB.out" &&
    grep -q "rendezvous 'quar': loaded from etcd 1 host record" "$TMP/rB.out"
verdict "records: A's SIGKILL: B takes over and loads the DONE mark and the host record" ||
    show_tail "$TMP/rB.out"
echo "# records: B serves both runs, their records loaded, $dt ms after A's SIGKILL (lease $TTL s)"
kill -CONT "${PID[n3]}"
reap n3 20
rn3=$?
[ $rn3 = 0 ] && grep -q " W rendezvous store now at $(addr_of rB) (elected" "$TMP/n3.out" &&
    grep -q "rendezvous 'done' finished" "$TMP/n3.out" && ! grep -q 'round [0-9]*: node' "$TMP/n3.out"
verdict "records: a spare of the finished run JOINs through B, is told the run is done and exits 0" ||
    show_tail "$TMP/n3.out" "$TMP/rB.out"
FW_DIR=$TMP/quar3b FW_EXIT=1 agent q3b quar 2:3 --local_addr=127.0.0.3 --max_node_failures=1
reap q3b 25
rq3b=$?
[ $rq3b = 4 ] && grep -q 'host 127.0.0.3 is excluded after 1 group failures' "$TMP/q3b.out" &&
    grep -q "rendezvous store now at $(addr_of rB) (elected" "$TMP/q3b.out" &&
    [ -z "$(ls "$TMP/quar3b")" ]
verdict "records: the excluded host stays excluded across the failover: refused through B (exit 4), no worker" ||
    show_tail "$TMP/q3b.out" "$TMP/rB.out"
for n in q1 q2 rB; do kill -TERM "${PID[$n]}"; done
for n in q1 q2 rB; do reap $n 15; done

# ---- a takeover whose campaign answer comes late ----
# lA serves run late; lB stands by, talking to etcd through a proxy that holds back etcd's
# answers to its txns (its campaign) by LATE_MS. On lA's SIGKILL, lB's campaign commits and the
# agents, told by their watch, JOIN lB before lB knows that it leads: it says "not yet" (never
# the dead lA's address, which would keep them knocking there for store_reconnect_timeout), and
# they form on it once it serves.
python3 tests/helpers/etcd_delay_proxy.py "$TMP/late.port" "$P1" /v3/kv/txn $LATE_MS 120 &
PROXY=$!
for _ in $(seq 100); do [ -f "$TMP/late.port" ] && break; sleep 0.05; done
late_daemon() { # NAME ETCD_PORT
    "$RDZV" --token-file "$TMP/token" --port 0 --log-level info --etcd "127.0.0.1:$2" \
        --etcd-lease-ttl $TTL --run-id late >"$TMP/$1.out" 2>&1 &
    PID[$1]=$!
}
late_daemon lA "$P1"
wait_for "$TMP/lA.out" ' run late: this store serves' 20 >/dev/null
late_daemon lB "$(cat "$TMP/late.port")"
wait_for "$TMP/lB.out" 'run late: standing by' $((LATE_MS / 1000 + 10)) >/dev/null
export FW_DIR=$TMP/late FW_SLEEP_MS=4000
mkdir -p "$FW_DIR"
agent l1 late
agent l2 late
workers "$FW_DIR" 4
tk=$(date +%s%N)
kill -KILL "${PID[lA]}"
wait "${PID[lA]}" 2>/dev/null
rl=0
for n in l1 l2; do reap $n $((TTL + LATE_MS / 1000 + 15)) || rl=1; done
dt=$((($(date +%s%N) - tk) / 1000000))
back=0
for n in l1 l2; do
    grep -q " W rendezvous store now at $(addr_of lB) (elected" "$TMP/$n.out" || back=1
    grep -q "round 1: node" "$TMP/$n.out" || back=1
    grep -q 'named by the store candidate' "$TMP/$n.out" && back=1
done
[ $rl = 0 ] && [ $back = 0 ] && grep -q ' W run late: this store serves' "$TMP/lB.out"
verdict "SIGKILL of the serving daemon, the next one's campaign answered ${LATE_MS} ms late: the agents wait for it, never sent back to the dead one, and exit 0" ||
    show_tail "$TMP/l1.out" "$TMP/l2.out" "$TMP/lB.out"
echo "# late campaign answer: the job re-formed on lB and ended $dt ms after lA's SIGKILL (lease $TTL s)"
kill -TERM "${PID[lB]}"
reap lB 10
kill "$PROXY" 2>/dev/null
wait "$PROXY" 2>/dev/null

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
check "no leftover process" no_leftovers
finish
