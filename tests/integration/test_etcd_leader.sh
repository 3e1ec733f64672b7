#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 37
# Leader election on etcd (rendezvous/etcd/rdzv_etcd_leader.c) through tests/helpers/etcd_leader.c,
# one candidate per process, lease TTL 2 s. First a hostile gateway: one error line naming the
# endpoint, a bounded close. Then a real etcd (Debian's etcd-server) on 127.0.0.1 alone: three
# candidates and an observer elect exactly one leader; SIGKILL of the leader: another leads
# within TTL + 1.5 s, and each live candidate reports nobody leading before it names the next;
# SIGSTOP of the leader past the TTL: on SIGCONT it reports the loss, its
# leadership ended before the next one began; a deposed leader's fenced write is refused; a resign
# hands over at once; the lead intervals of every candidate never overlap (one CLOCK_MONOTONIC for
# all); etcd stopped: the loss within the TTL and one error line per outage, then a leader again
# once etcd is back on its data dir; a 3-member etcd cluster with one member killed still elects
# and hands over, and so it does when the member the candidates call and watch hangs. Every
# process is stopped by PID.
. "$(dirname "$0")/lib.sh"

L=$BIN/tests/etcd_leader
TTL=2
# The real-etcd checks, as they read when they run (skipped under these names without etcd).
SECTIONS=("three candidates and an observer: exactly one leader, all see it"
    "SIGKILL of the leader: another leads within TTL + 1.5 s"
    "SIGKILL of the leader: each live candidate reports NONE before it names the next leader"
    "SIGSTOP past the TTL: on SIGCONT the old leader reports LOST, ended before the new one began"
    "a deposed leader's fenced write is refused, the leader's passes"
    "a resign hands over at once (under 1 s)"
    "the observer never campaigns and follows every leader"
    "lead intervals never overlap"
    "etcd stopped: the leader reports LOST within the TTL, one error line each, naming the endpoint"
    "etcd back on its data dir: one leader again within 2 TTL + 2 s"
    "3-member cluster, one member killed: one leader, and another within TTL + 2.5 s of its SIGKILL"
    "3-member cluster, the member called hung: the other candidate leads within TTL + 5 s of the leader's SIGKILL"
    "no leftover process")
mono() { python3 -c 'import time; print(int(time.monotonic() * 1000))'; }

declare -A PID
# cand NAME ENDPOINTS ARGS...: a candidate in the background, its lines in $TMP/NAME.log.
cand() {
    local name=$1 eps=$2; shift 2
    "$L" --endpoints "$eps" --timeout 1000 --key "$KEY" --ttl $TTL "$@" >"$TMP/$name.log" \
        2>"$TMP/$name.err" &
    PID[$name]=$!
    wait_for "$TMP/$name.log" STARTED 5 >/dev/null
}

# ---- a hostile gateway (tests/helpers/etcd_hostile.py): a grant never answered, a range
# answered with garbage. Each failure is one line naming the endpoint, retried without a line
# per retry; the close is bounded by the client's timeout. ----
python3 "$(dirname "$0")/../helpers/etcd_hostile.py" "$TMP/hostile.port" &
HOSTILE=$!
for _ in $(seq 100); do [ -s "$TMP/hostile.port" ] && break; sleep 0.05; done
HP=$(cat "$TMP/hostile.port" 2>/dev/null)
KEY=/ddprun/run0/leader
cand hc "127.0.0.1:$HP" --value hc-addr
cand ho "127.0.0.1:$HP" --observer
sleep 3.5
tc=$(mono)
kill -TERM "${PID[hc]}" "${PID[ho]}"
wait "${PID[hc]}"
rc1=$?
wait "${PID[ho]}"
rc2=$?
tc=$(( $(mono) - tc ))
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && [ "$tc" -lt 2500 ] &&
    [ "$(grep -c ' ERROR ' "$TMP/hc.log")" -eq 1 ] && [ "$(grep -c ' ERROR ' "$TMP/ho.log")" -eq 1 ] &&
    grep -q " ERROR http://127.0.0.1:$HP/v3/lease/grant: timed out after 1000 ms" "$TMP/hc.log" &&
    grep -q " ERROR http://127.0.0.1:$HP/v3/kv/range: reply is not JSON" "$TMP/ho.log" &&
    ! grep -qE ' (LEADING|OBSERVED) ' "$TMP/hc.log" "$TMP/ho.log"
verdict "hostile gateway: one error line each naming the endpoint, retried quietly, a bounded close" ||
    { echo "# close took $tc ms"; show_tail "$TMP/hc.log" "$TMP/ho.log"; }
kill "$HOSTILE" 2>/dev/null
wait "$HOSTILE" 2>/dev/null

command -v etcd >/dev/null 2>&1 ||
    skip_all "etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"

# start_etcd NAME CLIENT_PORT PEER_PORT CLUSTER [STATE]: one member on loopback; its PID in EPID.
start_etcd() {
    setpriv --pdeathsig KILL etcd --name "$1" --data-dir "$TMP/etcd-$1" \
        --listen-client-urls "http://127.0.0.1:$2" \
        --advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
        --initial-advertise-peer-urls "http://127.0.0.1:$3" --initial-cluster "$4" \
        --initial-cluster-state "${5:-new}" >>"$TMP/etcd-$1.log" 2>&1 &
    EPID=$!
}
stop_cand() { # NAME: SIGTERM (a close), then reap
    kill -TERM "${PID[$1]}" 2>/dev/null
    kill -CONT "${PID[$1]}" 2>/dev/null
    wait "${PID[$1]}" 2>/dev/null
}
# leading NAME...: the names whose last LEADING is not followed by LOST, RESIGNED or CLOSED.
leading() {
    local n
    for n in "$@"; do
        awk '$2 == "LEADING" { on = 1 } $2 == "LOST" || $2 == "RESIGNED" || $2 == "CLOSED" { on = 0 }
             END { exit !on }' "$TMP/$n.log" && echo "$n"
    done
}
# first_after FILE WORD T: the time of the first WORD line at or after T.
first_after() { awk -v w="$2" -v t="$3" '$2 == w && $1 >= t { print $1; exit }' "$1"; }
# wait_leader T S NAME...: waits up to S seconds for a LEADING at or after T in one of NAME's logs,
# and prints that NAME (WORD=LOST...: another word).
wait_leader() {
    local t=$1 s=$2 end n; shift 2
    end=$(( $(mono) + s * 1000 ))
    while [ "$(mono)" -lt "$end" ]; do
        for n in "$@"; do
            [ -n "$(first_after "$TMP/$n.log" "${WORD:-LEADING}" "$t")" ] &&
                { echo "$n"; return 0; }
        done
        sleep 0.05
    done
    return 1
}
# rev_of NAME: the revision of NAME's last LEADING.
rev_of() { awk '$2 == "LEADING" { sub("rev=", "", $3); r = $3 } END { print r }' "$TMP/$1.log"; }

# ---- one member ----
P1=$(free_port)
P2=$(free_port)
while [ "$P2" = "$P1" ]; do P2=$(free_port); done
ONE="one=http://127.0.0.1:$P2"
start_etcd one "$P1" "$P2" "$ONE"
ETCD=$EPID
if ! wait_for "$TMP/etcd-one.log" 'ready to serve client requests' 20 >/dev/null; then
    kill "$ETCD" 2>/dev/null
    skip_all "etcd did not start on 127.0.0.1:$P1"
fi
E=127.0.0.1:$P1
KEY=/ddprun/run1/leader

for n in a b c; do cand $n "$E" --value "$n-addr"; done
cand obs "$E" --observer
for n in a b c obs; do wait_for "$TMP/$n.log" 'LEADING|OBSERVED' 10 >/dev/null; done
sleep 0.5
LEADER=$(leading a b c)
rev=$(rev_of "$LEADER")
others=0
for n in a b c obs; do
    [ "$n" = "$LEADER" ] && continue
    grep -q " OBSERVED rev=$rev value=$LEADER-addr\$" "$TMP/$n.log" && others=$((others + 1))
done
[ "$(cat "$TMP"/{a,b,c,obs}.log | grep -c ' LEADING ')" -eq 1 ] && [ -n "$LEADER" ] &&
    [ "$others" -eq 3 ]
verdict "three candidates and an observer: exactly one leader, all see it" ||
    show_tail "$TMP"/{a,b,c,obs}.log

LIVE=$(echo a b c | tr ' ' '\n' | grep -vx "$LEADER" | tr '\n' ' ')
KILLED=$LEADER
tk=$(mono)
{ kill -KILL "${PID[$KILLED]}"; wait "${PID[$KILLED]}"; } 2>/dev/null
echo "$tk" >"$TMP/$KILLED.killed"
# shellcheck disable=SC2086
NEW=$(wait_leader "$tk" $((TTL + 3)) $LIVE)
ts=$(first_after "$TMP/$NEW.log" LEADING "$tk")
# shellcheck disable=SC2086
[ -n "$NEW" ] && [ $((ts - tk)) -le $((TTL * 1000 + 1500)) ] && sleep 0.3 &&
    [ "$(leading $LIVE | wc -l)" -eq 1 ]
verdict "SIGKILL of the leader: another leads within TTL + 1.5 s" ||
    show_tail "$TMP"/{a,b,c}.log
echo "# SIGKILL of the leader: the next led after $((ts - tk)) ms (TTL ${TTL} s)"
# Between the key's deletion and the next leader nobody is known to lead: a candidate that
# campaigns says so (NONE) before it names the winner (its own LEADING, or OBSERVED), so that a
# store it serves does not send clients meanwhile to the leader it saw last, the dead one.
first_report_after() {
    awk -v t="$2" '$1 >= t && ($2 == "NONE" || $2 == "LEADING" || $2 == "OBSERVED") { print $2; exit }' "$1"
}
gap=0
for n in $LIVE; do
    [ "$n" != "$NEW" ] && wait_for "$TMP/$n.log" " OBSERVED rev=$(rev_of "$NEW") " 3 >/dev/null
    [ "$(first_report_after "$TMP/$n.log" "$tk")" = NONE ] || gap=1
done
[ $gap = 0 ]
verdict "SIGKILL of the leader: each live candidate reports NONE before it names the next leader" || show_tail "$TMP"/{a,b,c}.log

STOPPED=$NEW
OTHER=$(echo $LIVE | tr ' ' '\n' | grep -vx "$STOPPED")
tstop=$(mono)
kill -STOP "${PID[$STOPPED]}"
NEXT=$(wait_leader "$tstop" $((TTL + 3)) "$OTHER")
sleep $((TTL + 1))
tcont=$(mono)
kill -CONT "${PID[$STOPPED]}"
WORD=LOST wait_leader "$tcont" 3 "$STOPPED" >/dev/null
lost=$(awk -v t="$tstop" '$2 == "LOST" && $1 >= t' "$TMP/$STOPPED.log" | head -1)
tlost=$(echo "$lost" | awk '{print $1}')
tend=$(echo "$lost" | awk '{sub("end=", "", $4); print $4}')
tnext=$(first_after "$TMP/$OTHER.log" LEADING "$tstop")
[ "$NEXT" = "$OTHER" ] && [ -n "$tend" ] && [ "$tend" -le "$tnext" ] && [ "$tlost" -ge "$tcont" ] &&
    echo "$lost" | grep -q 'lost leadership (lease [0-9a-f]*): no keepalive answered by'
verdict "SIGSTOP past the TTL: on SIGCONT the old leader reports LOST, ended before the new one began" ||
    show_tail "$TMP/$STOPPED.log" "$TMP/$OTHER.log"
echo "# SIGSTOP: old leadership ended at +$((tend - tstop)) ms, the next began at +$((tnext - tstop)) ms"

tf=$(mono)
kill -USR2 "${PID[$STOPPED]}" "${PID[$OTHER]}"
WORD=FENCED wait_leader "$tf" 3 "$STOPPED" >/dev/null
WORD=FENCED wait_leader "$tf" 3 "$OTHER" >/dev/null
[ -n "$(first_after "$TMP/$OTHER.log" FENCED "$tf")" ] &&
    grep -q " FENCED ok rev=$(rev_of "$OTHER")\$" "$TMP/$OTHER.log" &&
    grep -q " CHECK leading=1\$" "$TMP/$OTHER.log" && grep -q " CHECK leading=0\$" "$TMP/$STOPPED.log" &&
    grep -q " FENCED refused rev=$(rev_of "$STOPPED"): http://127.0.0.1:$P1/v3/kv/txn: fenced out" \
        "$TMP/$STOPPED.log"
verdict "a deposed leader's fenced write is refused, the leader's passes" ||
    show_tail "$TMP/$STOPPED.log" "$TMP/$OTHER.log"

tr0=$(mono)
kill -USR1 "${PID[$OTHER]}"
HAND=$(wait_leader "$tr0" 2 "$STOPPED")
th=$(first_after "$TMP/$STOPPED.log" LEADING "$tr0")
[ "$HAND" = "$STOPPED" ] && [ $((th - tr0)) -lt 1000 ] &&
    wait_for "$TMP/$OTHER.log" " OBSERVED rev=$(rev_of "$STOPPED") value=$STOPPED-addr\$" 2 >/dev/null
verdict "a resign hands over at once (under 1 s)" || show_tail "$TMP/$STOPPED.log" "$TMP/$OTHER.log"
echo "# resign: the next led after $((th - tr0)) ms"

# The observer saw each leader's revision, in order, and never led.
seen=$(awk '$2 == "OBSERVED" { sub("rev=", "", $3); printf "%s ", $3 }' "$TMP/obs.log")
want=$(cat "$TMP"/{a,b,c}.log | awk '$2 == "LEADING" { sub("rev=", "", $3); print $1, $3 }' |
    sort -n | awk '{printf "%s ", $2}')
[ "$seen" = "$want" ] && ! grep -q ' LEADING ' "$TMP/obs.log"
verdict "the observer never campaigns and follows every leader" ||
    { echo "# seen: $seen want: $want"; show_tail "$TMP/obs.log"; }

# no_overlap LOG...: every lead interval [LEADING, end) of the logs, the end being LOST's end=,
# RESIGNED, CLOSED, the SIGKILL (NAME.killed) or still open; no two intersect.
no_overlap() {
    python3 - "$@" <<'PY'
import os, sys
iv = []
for path in sys.argv[1:]:
    start = None
    for line in open(path):
        f = line.split()
        if len(f) < 2:
            continue
        t = int(f[0])
        if f[1] == "LEADING":
            start = t
        elif start is not None and f[1] in ("LOST", "RESIGNED", "CLOSED"):
            end = int(f[3][4:]) if f[1] == "LOST" else t
            iv.append((start, end, path))
            start = None
    if start is not None:
        killed = path[:-4] + ".killed"
        end = int(open(killed).read()) if os.path.exists(killed) else float("inf")
        iv.append((start, end, path))
iv.sort()
bad = [(a, b) for a, b in zip(iv, iv[1:]) if b[0] < a[1]]
for a, b in bad:
    print("# overlap:", a, b)
print("# %d lead intervals" % len(iv))
sys.exit(1 if bad or len(iv) < 4 else 0)
PY
}
no_overlap "$TMP"/{a,b,c}.log
verdict "lead intervals never overlap" || show_tail "$TMP"/{a,b,c}.log

# ---- etcd stopped, then back on its data dir ----
LEADER=$(leading "$STOPPED" "$OTHER")
t0=$(mono)
kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
WORD=LOST wait_leader "$t0" $((TTL + 2)) "$LEADER" >/dev/null
tl=$(awk -v t="$t0" '$2 == "LOST" && $1 >= t { print $1; exit }' "$TMP/$LEADER.log")
sleep 3
errs_ok=1
for n in "$STOPPED" "$OTHER" obs; do
    e=$(awk -v t="$t0" '$2 == "ERROR" && $1 >= t' "$TMP/$n.log")
    # A few distinct failures (the watch, the keepalive, the grant, the range), not one per retry.
    [ -n "$e" ] && [ "$(echo "$e" | wc -l)" -le 5 ] &&
        ! echo "$e" | grep -qv "ERROR http://127.0.0.1:$P1/" || errs_ok=0
done
[ -n "$tl" ] && [ $((tl - t0)) -le $((TTL * 1000 + 500)) ] && [ "$errs_ok" = 1 ]
verdict "etcd stopped: the leader reports LOST within the TTL, one error line each, naming the endpoint" ||
    show_tail "$TMP/$STOPPED.log" "$TMP/$OTHER.log" "$TMP/obs.log"
echo "# etcd stopped: the leader reported the loss after $((${tl:-0} - t0)) ms"

tb=$(mono)
start_etcd one "$P1" "$P2" "$ONE"
ETCD=$EPID
BACK=$(wait_leader "$tb" $((2 * TTL + 2)) "$STOPPED" "$OTHER")
tback=$(first_after "$TMP/$BACK.log" LEADING "$tb")
sleep 0.5
[ -n "$BACK" ] && [ "$(leading "$STOPPED" "$OTHER" | wc -l)" -eq 1 ]
verdict "etcd back on its data dir: one leader again within 2 TTL + 2 s" ||
    show_tail "$TMP/$STOPPED.log" "$TMP/$OTHER.log" "$TMP/etcd-one.log"
echo "# etcd back: a leader after $((${tback:-0} - tb)) ms"
for n in "$STOPPED" "$OTHER" obs; do stop_cand "$n"; done
kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null

# ---- a 3-member cluster, one member killed ----
ports=()
for _ in 1 2 3 4 5 6; do
    p=$(free_port)
    while printf '%s\n' "${ports[@]}" | grep -qx "$p"; do p=$(free_port); done
    ports+=("$p")
done
CL="m1=http://127.0.0.1:${ports[1]},m2=http://127.0.0.1:${ports[3]},m3=http://127.0.0.1:${ports[5]}"
start_etcd m1 "${ports[0]}" "${ports[1]}" "$CL"
M1=$EPID
start_etcd m2 "${ports[2]}" "${ports[3]}" "$CL"
M2=$EPID
start_etcd m3 "${ports[4]}" "${ports[5]}" "$CL"
M3=$EPID
up=1
for m in m1 m2 m3; do
    wait_for "$TMP/etcd-$m.log" 'ready to serve client requests' 30 >/dev/null || up=0
done
if [ "$up" = 1 ]; then
    { kill -KILL "$M1"; wait "$M1"; } 2>/dev/null
    EPS="127.0.0.1:${ports[0]},127.0.0.1:${ports[2]},127.0.0.1:${ports[4]}"
    KEY=/ddprun/run2/leader
    cand r "$EPS" --value r-addr
    cand s "$EPS" --value s-addr
    for n in r s; do wait_for "$TMP/$n.log" 'LEADING|OBSERVED' 10 >/dev/null; done
    sleep 0.3
    L1=$(leading r s)
    L2=$(echo r s | tr ' ' '\n' | grep -vx "$L1")
    tk=$(mono)
    { kill -KILL "${PID[$L1]}"; wait "${PID[$L1]}"; } 2>/dev/null
    N2=$(wait_leader "$tk" $((TTL + 4)) "$L2")
    tn=$(first_after "$TMP/$L2.log" LEADING "$tk")
    [ "$(echo "$L1" | wc -w)" -eq 1 ] && [ "$N2" = "$L2" ] &&
        [ $((tn - tk)) -le $((TTL * 1000 + 2500)) ]
    verdict "3-member cluster, one member killed: one leader, and another within TTL + 2.5 s of its SIGKILL" ||
        show_tail "$TMP/r.log" "$TMP/s.log"
    echo "# 3 members, one down: the next led after $((${tn:-0} - tk)) ms"
    stop_cand "$L2"

    # The member both candidates call and watch (the first of their list) hangs (SIGSTOP), then
    # the leader dies: the other's keepalive finds the member silent, its calls and its watch
    # move to the next member, and it sees the key go and leads.
    start_etcd m1 "${ports[0]}" "${ports[1]}" "$CL"
    M1=$EPID
    wait_for "$TMP/etcd-m1.log" 'ready to serve client requests' 30 >/dev/null
    KEY=/ddprun/run3/leader
    EPS="127.0.0.1:${ports[2]},127.0.0.1:${ports[4]},127.0.0.1:${ports[0]}"
    cand u "$EPS" --value u-addr
    cand v "$EPS" --value v-addr
    for n in u v; do wait_for "$TMP/$n.log" 'LEADING|OBSERVED' 10 >/dev/null; done
    sleep 0.3
    L1=$(leading u v)
    L2=$(echo u v | tr ' ' '\n' | grep -vx "$L1")
    kill -STOP "$M2"
    tk=$(mono)
    { kill -KILL "${PID[$L1]}"; wait "${PID[$L1]}"; } 2>/dev/null
    N2=$(wait_leader "$tk" $((TTL + 8)) "$L2")
    tn=$(first_after "$TMP/$L2.log" LEADING "$tk")
    kill -CONT "$M2"
    [ "$(echo "$L1" | wc -w)" -eq 1 ] && [ "$N2" = "$L2" ] &&
        [ $((tn - tk)) -le $((TTL * 1000 + 5000)) ]
    verdict "3-member cluster, the member called hung: the other candidate leads within TTL + 5 s of the leader's SIGKILL" ||
        show_tail "$TMP/u.log" "$TMP/v.log"
    if [ -n "$tn" ]; then
        echo "# 3 members, the one called hung: the next led after $((tn - tk)) ms"
    else
        echo "# 3 members, the one called hung: no other led"
    fi
    stop_cand "$L2"
else
    not_ok "3-member cluster, one member killed: one leader, and another within TTL + 2.5 s of its SIGKILL"
    not_ok "3-member cluster, the member called hung: the other candidate leads within TTL + 5 s of the leader's SIGKILL"
    show_tail "$TMP/etcd-m1.log" "$TMP/etcd-m2.log"
fi
for p in "$M1" "$M2" "$M3"; do kill -TERM "$p" 2>/dev/null; done
for p in "$M1" "$M2" "$M3"; do wait "$p" 2>/dev/null; done

check "no leftover process" no_leftovers 3
finish
