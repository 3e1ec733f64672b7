#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 60
# --rdzv_backend=etcd: the agents elect through an etcd lease which of them serves the rendezvous
# store (agent/rdzv_elect.c). Without etcd: the flag's bad values (one line naming the key, exit
# 2) and an etcd that is not there (exit 1 with one line naming it, within 10 s + 3 s). With a
# real etcd (Debian's etcd-server) on 127.0.0.1 alone, started here and stopped by PID: a 2-node
# and a 3-node job form and exit 0 with exactly one agent serving; SIGKILL of the serving agent
# mid-job (--nnodes=2:3, 3 agents): the other two re-form under a new leader within
# lease_ttl + last_call_timeout + 2 s of the kill and exit 0, no command typed again; SIGSTOP of
# the serving agent past the TTL: the others re-form and finish, and on SIGCONT it stops serving
# and leaves (exit 1); SIGTERM of the serving agent (lease_ttl 8): it resigns on its way out, so
# the others name a new leader within 3 s of the signal, not after the TTL, and exit 0; etcd down 3 s within the lease: the workers go on, one line when it goes and
# one when it is back. Every process is stopped by PID.
. "$(dirname "$0")/lib.sh"

etcd_agents_env
SECTIONS=("2 nodes form through etcd and exit 0, one agent serving"
    "3 nodes form through etcd and exit 0, one agent serving"
    "SIGKILL of the serving agent (2:3, 3 agents): the other two exit 0 under a new leader"
    "... they re-formed within lease_ttl + last_call_timeout + 2 s of the kill"
    "... one line each says the store moved; the killed agent's workers are gone"
    "SIGSTOP of the serving agent past the TTL: the others re-form and exit 0"
    "... on SIGCONT it stops serving and leaves (exit 1, one line)"
    "SIGTERM of the serving agent (lease_ttl 8): the others name a new leader within 3 s and exit 0"
    "a leader key that is not an address: one line (escaped), no worker, exit 1 at the start bound"
    "etcd down 3 s (lease_ttl 8): the workers go on, exit 0; one line each when it goes, one when it is back"
    "no leftover process")

# ---- without etcd ----
etcd_refused "lease_ttl=1" "lease_ttl='1'" --rdzv_conf=lease_ttl=1
etcd_refused "lease_ttl=x" "lease_ttl='x'" --rdzv_conf=lease_ttl=x
etcd_refused "etcd_prefix without /" "etcd_prefix='ddp'" --rdzv_conf=etcd_prefix=ddp
etcd_refused "etcd_cacert empty" "etcd_cacert=''" --rdzv_conf=etcd_cacert=
etcd_refused "a member's port" "'b:70000'" --rdzv_endpoint=127.0.0.1:1,b:70000
etcd_refused "etcd_cert without etcd_key" "etcd_key" --rdzv_conf=etcd_cert=/c.pem
etcd_refused "an unknown backend" "'etcd3'" --rdzv_backend=etcd3
etcd_refused "no endpoint" "needs --rdzv_endpoint" --rdzv_endpoint=
DDPRUN_ETCD_USER=u etcd_refused "a user without a password" "DDPRUN_ETCD_PASSWORD"
"$DDPRUN" --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:1,127.0.0.1:2 "$FW" \
    >"$TMP/c10d.out" 2>&1
rc=$?
check "c10d refuses a list of endpoints (exit 2, naming --rdzv_endpoint)" \
    bash -c "[ $rc = 2 ] && grep -q -- '--rdzv_endpoint' '$TMP/c10d.out'"

NOPE=$(free_port)
t0=$(date +%s%N)
"$DDPRUN" --nnodes=2 --rdzv_backend=etcd-v2 --rdzv_endpoint="127.0.0.1:$NOPE" --rdzv_id=nope "$FW" \
    >"$TMP/nope.out" 2>&1
rc=$?
dt=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 1 ] && [ $dt -lt 13000 ] && one_error "$TMP/nope.out" "127.0.0.1:$NOPE"
verdict "etcd not reachable (etcd-v2 spelling): exit 1 within 13 s, one error line naming it" ||
    show_tail "$TMP/nope.out"
echo "# etcd not reachable: exit $rc after $dt ms"

etcd_suite_member
# etcd_up: the suite's member again, on its data dir; its PID in ETCD.
etcd_up() { etcd_member "$TMP/etcd" "$P1" "$P2"; }

# agent NAME NNODES RUN ARGS...: one agent in the background, its PID in APID[NAME].
agent() {
    local name=$1 nn=$2 run=$3; shift 3
    "$DDPRUN" -v --nnodes="$nn" --nproc_per_node=2 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$P1" --rdzv_id="$run" --rdzv_conf="$CONF" --max_restarts=3 \
        "$@" "$FW" >"$TMP/$name.out" 2>&1 &
    APID[$name]=$!
}
serving() { grep -l 'served by this node' "$@" 2>/dev/null | wc -l; }

# ---- a job forms ----
for n in 2 3; do
    export FW_DIR=$TMP/form$n FW_SLEEP_MS=300
    mkdir -p "$FW_DIR"
    names=()
    for i in $(seq $n); do agent "f$n.$i" $n "form$n"; names+=("f$n.$i"); done
    all=0
    for nm in "${names[@]}"; do reap "$nm"; [ $? = 0 ] || all=1; done
    outs=("${names[@]/#/$TMP/}"); outs=("${outs[@]/%/.out}")
    [ $all = 0 ] && [ "$(serving "${outs[@]}")" = 1 ] &&
        [ "$(ls "$FW_DIR" | grep -c '^env\.')" = $((2 * n)) ]
    verdict "$n nodes form through etcd and exit 0, one agent serving" || show_tail "${outs[@]}"
done

# ---- SIGKILL of the serving agent ----
export FW_DIR=$TMP/kill FW_SLEEP_MS=6000
mkdir -p "$FW_DIR"
for i in 1 2 3; do agent "k$i" 2:3 kill; done
for _ in $(seq 200); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\..*\.0$')" = 6 ] && break
    sleep 0.05
done
leader=""
for i in 1 2 3; do grep -q 'served by this node' "$TMP/k$i.out" && leader=$i; done
others=()
for i in 1 2 3; do [ "$i" != "$leader" ] && others+=("$i"); done
lpids=$(cat "$FW_DIR"/pid.*.0 2>/dev/null)
tk=$(date +%s%N)
kill -KILL "${APID[k$leader]}"
wait "${APID[k$leader]}" 2>/dev/null
reformed=0
for i in "${others[@]}"; do
    wait_for "$TMP/k$i.out" "round 1: node" $((TTL + 1 + 2)) >/dev/null || reformed=1
done
dt=$((($(date +%s%N) - tk) / 1000000))
ra=0
for i in "${others[@]}"; do reap "k$i" 40 || ra=1; done
[ -n "$leader" ] && [ $ra = 0 ]
verdict "SIGKILL of the serving agent (2:3, 3 agents): the other two exit 0 under a new leader" ||
    show_tail "$TMP/k1.out" "$TMP/k2.out" "$TMP/k3.out"
[ $reformed = 0 ]
verdict "... they re-formed within lease_ttl + last_call_timeout + 2 s of the kill" ||
    show_tail "$TMP/k${others[0]}.out"
echo "# SIGKILL of the serving agent: round 1 on both others after $dt ms (lease_ttl $TTL s)"
moved=0
for i in "${others[@]}"; do
    [ "$(grep -c ' W rendezvous store now at' "$TMP/k$i.out")" = 1 ] || moved=1
done
gone=0
for p in $lpids; do
    if kill -0 "$p" 2>/dev/null; then
        grep -q "$DDP_TEST_TAG" "/proc/$p/environ" 2>/dev/null && gone=1
    fi
done
[ $moved = 0 ] && [ $gone = 0 ]
verdict "... one line each says the store moved; the killed agent's workers are gone" ||
    show_tail "$TMP/k${others[0]}.out"

# ---- SIGSTOP of the serving agent past the TTL ----
export FW_DIR=$TMP/stop FW_SLEEP_MS=6000
mkdir -p "$FW_DIR"
for i in 1 2 3; do agent "s$i" 2:3 stop; done
for _ in $(seq 200); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\..*\.0$')" = 6 ] && break
    sleep 0.05
done
leader=""
for i in 1 2 3; do grep -q 'served by this node' "$TMP/s$i.out" && leader=$i; done
others=()
for i in 1 2 3; do [ "$i" != "$leader" ] && others+=("$i"); done
kill -STOP "${APID[s$leader]}"
re=0
for i in "${others[@]}"; do wait_for "$TMP/s$i.out" "round 1: node" $((TTL + 8)) >/dev/null || re=1; done
kill -CONT "${APID[s$leader]}"
reap "s$leader" 20
rl=$?
ra=0
for i in "${others[@]}"; do reap "s$i" 40 || ra=1; done
[ -n "$leader" ] && [ $re = 0 ] && [ $ra = 0 ]
verdict "SIGSTOP of the serving agent past the TTL: the others re-form and exit 0" ||
    show_tail "$TMP/s1.out" "$TMP/s2.out" "$TMP/s3.out"
[ $rl = 1 ] && [ "$(grep -c 'lost the etcd lease of the rendezvous store' "$TMP/s$leader.out")" = 1 ]
verdict "... on SIGCONT it stops serving and leaves (exit 1, one line)" ||
    show_tail "$TMP/s$leader.out"

# ---- SIGTERM of the serving agent: it resigns (key deleted, lease revoked) as it leaves ----
export FW_DIR=$TMP/term FW_SLEEP_MS=6000
mkdir -p "$FW_DIR"
for i in 1 2 3; do CONF="last_call_timeout=1,lease_ttl=8,keep_alive_interval=1" agent "t$i" 2:3 term; done
for _ in $(seq 200); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\..*\.0$')" = 6 ] && break
    sleep 0.05
done
leader=""
for i in 1 2 3; do grep -q 'served by this node' "$TMP/t$i.out" && leader=$i; done
others=()
for i in 1 2 3; do [ "$i" != "$leader" ] && others+=("$i"); done
t0=$(date +%s%N)
kill -TERM "${APID[t$leader]}"
named=0
for i in "${others[@]}"; do wait_for "$TMP/t$i.out" " W rendezvous store now at" 3 >/dev/null || named=1; done
dt=$((($(date +%s%N) - t0) / 1000000))
reap "t$leader" 20
ra=0
for i in "${others[@]}"; do reap "t$i" 40 || ra=1; done
[ -n "$leader" ] && [ $named = 0 ] && [ $dt -lt 3000 ] && [ $ra = 0 ]
verdict "SIGTERM of the serving agent (lease_ttl 8): the others name a new leader within 3 s and exit 0" ||
    show_tail "$TMP/t1.out" "$TMP/t2.out" "$TMP/t3.out"
echo "# SIGTERM of the serving agent: a new leader named on both others after $dt ms (lease_ttl 8 s)"

# ---- a leader key that is not ours (a prefix shared with something else) ----
"$BIN/tests/etcd_client" --endpoints "127.0.0.1:$P1" put /other/garb/leader $'\e[31mnot ours' \
    >/dev/null 2>&1
export FW_DIR=$TMP/garb FW_SLEEP_MS=100
mkdir -p "$FW_DIR"
agent g1 2 garb --rdzv_conf="$CONF,etcd_prefix=/other"
reap g1 20
rc=$?
[ $rc = 1 ] && [ "$(grep -c 'not a store.s address' "$TMP/g1.out")" = 1 ] &&
    ! grep -q $'\e' "$TMP/g1.out" && [ -z "$(ls "$FW_DIR")" ]
verdict "a leader key that is not an address: one line (escaped), no worker, exit 1 at the start bound" ||
    show_tail "$TMP/g1.out"

# ---- etcd down for 3 s, within the lease ----
export FW_DIR=$TMP/down FW_SLEEP_MS=8000
mkdir -p "$FW_DIR"
for i in 1 2; do CONF="last_call_timeout=1,lease_ttl=8" agent "d$i" 2 down; done
for _ in $(seq 200); do
    [ "$(ls "$FW_DIR" | grep -c '^pid\..*\.0$')" = 4 ] && break
    sleep 0.05
done
kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
sleep 3
etcd_up
ra=0
for i in 1 2; do reap "d$i" 40 || ra=1; done
lines=0
for i in 1 2; do
    [ "$(grep -c 'W etcd unreachable' "$TMP/d$i.out")" = 1 ] &&
        [ "$(grep -c 'answers again' "$TMP/d$i.out")" = 1 ] &&
        ! grep -q 'round 1' "$TMP/d$i.out" || lines=1
done
[ $ra = 0 ] && [ $lines = 0 ]
verdict "etcd down 3 s (lease_ttl 8): the workers go on, exit 0; one line each when it goes, one when it is back" ||
    show_tail "$TMP/d1.out" "$TMP/d2.out"

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
check "no leftover process" no_leftovers
finish
