#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 60
# Stragglers across hosts: first three agents told apart by loopback addresses (127.0.0.1-3, no
# root needed), then hosts a b c (d) made of network namespaces (netns_job.sh, as
# test_quarantine.sh uses them); one ddprun per host, the first host's agent serving the store,
# `train` on the CPU backend with one worker per host, --straggler_window 1, --straggler_windows 3.
# Checks: a host whose worker sleeps 10 ms after each step against the others' 3 ms
# (--step-delay-ms) is named on every node within 15 s of the start (3 windows of 1 s to judge,
# the first window, and room for a loaded machine), with its host and rank, in a line, a
# `straggler` event and `ddprun status`, and the others are never named; a job whose hosts run
# beside busy loops (one per core, started and killed by PID) names nobody; with
# --straggler_action=exclude and a spare d, the slow host c is excluded as a straggler (its agent
# exits 4 naming why), the spare takes its place in the next round and a b d finish with exit 0
# (on loopback, without a spare, it stays and the line says so); on loopback, a worker held to 10%
# of one CPU by a cgroup's CPU bandwidth limit is named and nobody else; nothing is left running,
# and the namespaces and the cgroup are removed.
#
# The cgroup part needs a cgroup hierarchy with the cpu controller where this shell may create a
# cgroup, the namespace part root and `ip netns`; otherwise their checks are reported as skipped.
. "$(dirname "$0")/lib.sh"
for c in setpriv timeout; do
    command -v $c >/dev/null || { skip "every check" "$c is missing"; finish; exit 0; }
done
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train
fake_worker_env_clear
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE

CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=5,close_timeout=5
AGENT_LIMIT=60
EXIT_UNFIT=4
STRAG=(--straggler_window 1 --straggler_windows 3)
# About 1.5 ms of CPU work per step on one idle core. In the slow-host and exclusion runs every
# worker also sleeps BASE_MS per step (standing for device compute, which the CPU contention of 3
# workers, 4 agents and the store on 2 cores does not stretch) and the slow host SLOW_MS. No
# evaluation at epoch ends: it is rank 0's alone, real extra compute that would make rank 0 slower.
TARGS=(--backend cpu --layers 256,512,10 --batch-size 64 --epochs 1000 --eval-samples 0 --quiet)
BASE_MS=3
SLOW_MS=10
# The bound on naming the slow host, from its first step (see above).
NAME_BOUND_S=15

# ----------------------------------------------------------------------------------- 0. loopback
# Without namespaces (and without root): three agents on one machine, told apart by their
# addresses on loopback (--local_addr 127.0.0.1..3), the third one's worker slower as below, with
# --straggler_action=exclude and no spare. The slow one is named within the bound, the others
# never; it stays (no spare to take its place), every node says so, and the job ends with exit 0.
LB=$TMP/loopback
mkdir -p "$LB"
LB_PORT=$(free_port)
declare -A LB_PID
trap 'for p in "${LB_PID[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
lb_start=$(($(date +%s%N) / 1000000))
for i in 1 2 3; do
    delay=3
    [ $i = 3 ] && delay=10
    # Each dies with the suite: timeout with its shell, ddprun with its timeout.
    setpriv --pdeathsig KILL timeout -k 3 60 setpriv --pdeathsig KILL "$DDPRUN" -v --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$LB_PORT" --rdzv_id=loop --local_addr="127.0.0.$i" \
        --straggler_window 1 --straggler_windows 3 --straggler_action exclude \
        "$TRAIN" --backend cpu --layers 256,512,10 \
        --batch-size 64 --epochs 1000 --eval-samples 0 --quiet --max-steps 1200 \
        --step-delay-ms $delay >"$LB/$i.out" 2>&1 &
    LB_PID[$i]=$!
done
wait_for "$LB/1.out" "straggler: rank [0-9]+ on node [0-9]+ \(127\.0\.0\.3\)" 25 >/dev/null
lb_named=$(($(date +%s%N) / 1000000))
lb_rc=""
for i in 1 2 3; do
    wait "${LB_PID[$i]}"
    lb_rc="$lb_rc $?"
    unset "LB_PID[$i]"
done
check "loopback: 127.0.0.3 named within 15 s of the start (after $((lb_named - lb_start)) ms)" \
    [ $((lb_named - lb_start)) -le 15000 ]
lb_others=$(grep -hoE "straggler: rank [0-9]+ on node [0-9]+ \(127\.0\.0\.[12]\)" "$LB"/*.out | head -2)
check "loopback: 127.0.0.1 and 127.0.0.2 never named (${lb_others:-none})" [ -z "$lb_others" ]
check "loopback: the job ends with exit 0 on every agent (${lb_rc# })" [ "$lb_rc" = " 0 0 0" ]
lb_kept=$(grep -lE "\(127\.0\.0\.3\).*exclude: host 127\.0\.0\.3 stays: no spare to take its place" \
    "$LB"/*.out | wc -l)
check "loopback: without a spare the slow host stays, and the nodes that name it say so ($lb_kept of 3)" \
    [ "$lb_kept" -ge 1 ]
check "nothing left after the loopback test" no_leftovers 3
trap - EXIT

# ----------------------------------------------------------------------------- 0b. cgroup throttle
# The same three loopback agents, every worker as fast (BASE_MS), and 127.0.0.3's worker, once it
# runs, moved into a cgroup of ours that holds it to 10% of one CPU (CFS bandwidth: cpu.max
# "1000 10000" in cgroup v2, cpu.cfs_quota_us / cpu.cfs_period_us where the cpu controller is
# on a v1 hierarchy): its ~1.5 ms of CPU per step then takes ~15 ms. 127.0.0.3 is named within
# the bound from its throttling, the others never; the job ends with exit 0, and the cgroup is
# removed. Needs a cgroup hierarchy with the cpu controller where this shell may create a cgroup
# (root, or a delegated subtree); otherwise its checks are skipped, naming why.
CG_CHECKS=("cgroup: the throttled 127.0.0.3 is named within ${NAME_BOUND_S} s of its throttling"
    "cgroup: 127.0.0.1 and 127.0.0.2 never named" "cgroup: the worker ran throttled"
    "cgroup: the job ends with exit 0 on every agent" "cgroup: the cgroup is removed, nothing left")
# cg_make: CG, a fresh cgroup limiting its processes to 10% of one CPU, below this shell's own
# cgroup where the hierarchy allows it (v1, or v2 at its root), else below the hierarchy's root.
# Returns 1 with CG_WHY when there is none to be had.
CG="" CG_WHY="" CG_ENABLED=""
cg_make() {
    local m own
    m=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") print $5; break } }' \
        /proc/self/mountinfo | head -1)
    if [ -n "$m" ] && grep -qw cpu "$m/cgroup.controllers" 2>/dev/null; then
        # A v2 cgroup with processes cannot give its children controllers, the root excepted:
        # ours goes below the root, whose subtree gets the cpu controller if it lacks it.
        if ! grep -qw cpu "$m/cgroup.subtree_control"; then
            echo +cpu 2>/dev/null >"$m/cgroup.subtree_control" ||
                { CG_WHY="cannot enable the cpu controller in $m/cgroup.subtree_control"; return 1; }
            CG_ENABLED=$m
        fi
        CG=$m/ddptest-$$-cpu
        mkdir "$CG" 2>/dev/null || { CG_WHY="cannot create a cgroup in $m (not root)"; CG=""; return 1; }
        echo "1000 10000" >"$CG/cpu.max" || { CG_WHY="cannot write $CG/cpu.max"; return 1; }
        return 0
    fi
    m=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" && $NF ~ /(^|,)cpu(,|$)/) print $5; break } }' \
        /proc/self/mountinfo | head -1)
    if [ -z "$m" ] || [ ! -e "$m/cpu.cfs_quota_us" ]; then
        CG_WHY="no cgroup hierarchy with the cpu controller (v2: not in cgroup.controllers)"
        return 1
    fi
    own=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3; exit }' /proc/self/cgroup)
    CG=$m${own%/}/ddptest-$$-cpu
    mkdir "$CG" 2>/dev/null || { CG=$m/ddptest-$$-cpu; mkdir "$CG" 2>/dev/null; } ||
        { CG_WHY="cannot create a cgroup in $m (not root, not delegated)"; CG=""; return 1; }
    if ! echo 10000 >"$CG/cpu.cfs_period_us" || ! echo 1000 >"$CG/cpu.cfs_quota_us"; then
        CG_WHY="cannot write $CG/cpu.cfs_quota_us"
        return 1
    fi
}
# cg_remove: removes CG once its processes are gone (bounded), and the controller it enabled.
cg_remove() {
    local i
    [ -n "$CG" ] || return 0
    for i in $(seq 150); do
        rmdir "$CG" 2>/dev/null && break
        sleep 0.02
    done
    [ -n "$CG_ENABLED" ] && echo -cpu 2>/dev/null >"$CG_ENABLED/cgroup.subtree_control"
    [ ! -d "$CG" ]
}
# worker_of PID: the `train` worker under ddprun PID (waits up to 15 s for it).
worker_of() {
    local i c
    for i in $(seq 750); do
        for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
            [ "$(cat /proc/"$c"/comm 2>/dev/null)" = train ] && { echo "$c"; return 0; }
        done
        sleep 0.02
    done
    return 1
}
if ! cg_make; then
    cg_remove
    for c in "${CG_CHECKS[@]}"; do skip "$c" "$CG_WHY"; done
else
    CGD=$TMP/cgroup
    mkdir -p "$CGD"
    CG_PORT=$(free_port)
    declare -A CG_PID
    trap 'for p in "${CG_PID[@]}"; do kill -KILL "$p" 2>/dev/null; done; cg_remove; rm -rf "$TMP"' EXIT
    for i in 1 2 3; do
        setpriv --pdeathsig KILL timeout -k 3 60 setpriv --pdeathsig KILL "$DDPRUN" -v --nnodes=3 \
            --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$CG_PORT" \
            --rdzv_id=cgroup --local_addr="127.0.0.$i" "${STRAG[@]}" "$TRAIN" "${TARGS[@]}" \
            --max-steps 500 --step-delay-ms $BASE_MS >"$CGD/$i.out" 2>&1 &
        CG_PID[$i]=$!
    done
    # timeout's child is ddprun (setpriv execs it); ddprun's child, the worker.
    cg_worker=$(worker_of "$(child_pid "${CG_PID[3]}")") &&
        echo "$cg_worker" >"$CG/cgroup.procs"
    cg_start=$(($(date +%s%N) / 1000000))
    cg_named=""
    wait_for "$CGD/1.out" "straggler: rank [0-9]+ on node [0-9]+ \(127\.0\.0\.3\)" 25 >/dev/null &&
        cg_named=$(($(date +%s%N) / 1000000))
    # Throttled periods, read while the worker is still in the cgroup.
    cg_throttled=$(awk '$1 == "nr_throttled" { print $2 }' "$CG/cpu.stat" 2>/dev/null)
    cg_rc=""
    for i in 1 2 3; do
        wait "${CG_PID[$i]}"
        cg_rc="$cg_rc $?"
        unset "CG_PID[$i]"
    done
    [ -n "$cg_named" ] && [ $((cg_named - cg_start)) -le $((NAME_BOUND_S * 1000)) ]
    verdict "${CG_CHECKS[0]} (after $((${cg_named:-0} - cg_start)) ms; worker ${cg_worker:-not found})"
    cg_others=$(grep -hoE "straggler: rank [0-9]+ on node [0-9]+ \(127\.0\.0\.[12]\)" "$CGD"/*.out | head -2)
    check "${CG_CHECKS[1]} (${cg_others:-none})" [ -z "$cg_others" ]
    check "${CG_CHECKS[2]} (${cg_throttled:-no} periods throttled)" [ "${cg_throttled:-0}" -gt 0 ]
    check "${CG_CHECKS[3]} (${cg_rc# })" [ "$cg_rc" = " 0 0 0" ]
    cg_remove && no_leftovers 3
    verdict "${CG_CHECKS[4]}"
    trap - EXIT
fi

SECTIONS=("a slow host is named within ${NAME_BOUND_S} s, the others never"
    "under CPU load nobody is named" "exclude with a spare: the spare takes the slow host's place"
    "nothing left, namespaces removed")

[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for c in ip nsenter unshare python3; do
    command -v $c >/dev/null || skip_all "$c is missing"
done

HOSTS="a b c d"
. "$(dirname "$0")/netns_job.sh"
netns_job_setup || skip_all "$NETNS_SETUP_WHY"
CADDR=$(addr_of c)
CADDR_RE=${CADDR//./\\.}

# named_others H...: the hosts other than c that some output among H names as a straggler.
named_others() {
    local h x
    for h; do
        for x in a b d; do
            grep -qE "straggler: rank [0-9]+ on node [0-9]+ \($(addr_of $x | sed 's/\./\\./g')\)" \
                "$D/$h.out" 2>/dev/null && echo "$x"
        done
    done | sort -u | tr '\n' ' '
}

# ----------------------------------------------------------------------------------- 1. named
# a b c, c's worker 7 ms slower per step: named on every node (line and event), shown by `ddprun
# status`; a and b never named. The job ends by itself (--max-steps), every host exit 0.
PORT=29471 RUN=slow D=$TMP/slow
mkdir -p "$D"
start=$(now_ms)
for h in a b c; do
    delay=$BASE_MS
    [ $h = c ] && delay=$SLOW_MS
    NPROC=1 agent $h 3 "${STRAG[@]}" --event_log_handler "json:$D/$h.ev" "$TRAIN" "${TARGS[@]}" \
        --max-steps 1200 --step-delay-ms $delay
done
wait_for "$D/a.out" "straggler: rank [0-9]+ on node [0-9]+ \($CADDR_RE\)" $((NAME_BOUND_S + 10)) >/dev/null
named=$(now_ms)
on b timeout 5 "$DDPRUN" status --rdzv_endpoint="${P}a:$PORT" --rdzv_id="$RUN" >"$D/status.txt" 2>&1
WAIT_S=40 wait_all a b c
# The workers start some hundreds of ms after ddprun; the bound is counted from ddprun's start,
# which only makes it stricter.
took=$((named - start))
check "c named within ${NAME_BOUND_S} s of the start (after $took ms)" \
    [ "$took" -le $((NAME_BOUND_S * 1000)) ]
grep -qE "straggler: rank [0-9]+ on node [0-9]+ \($CADDR_RE\) computes [0-9.]+x the median" \
    "$D/b.out" && grep -qE "straggler: rank [0-9]+ on node [0-9]+ \($CADDR_RE\)" "$D/c.out"
verdict "every node names c, with its rank and how much slower" || show_tail "$D/b.out" "$D/c.out"
others=$(named_others a b c)
check "a and b are never named (named:${others:- none})" [ -z "$others" ]
python3 - "$D/a.ev" "$CADDR" <<'EOF'
import json, sys
def named(e):
    return "straggler" in json.dumps(e) and sys.argv[2] in json.dumps(e)
events = []
for line in open(sys.argv[1]):
    try:
        events.append(json.loads(line))
    except ValueError:
        pass
sys.exit(0 if any(named(e) for e in events) else 1)
EOF
verdict "a straggler event names c's host" || sed 's/^/#   /' "$D/a.ev" | grep -i strag | head -3
grep -qE "^straggler: rank [0-9]+ on node [0-9]+ \($CADDR_RE\)" "$D/status.txt"
verdict "ddprun status shows c as a straggler" || sed 's/^/#   /' "$D/status.txt"
check "the job ends with exit 0 on every host ($(rcs a b c))" all_rc 0 a b c
check "nothing left after the slow-host test" no_leftovers 3

# ----------------------------------------------------------------------------------- 2. load
# The same job with no slow host, each host beside busy loops (one per core, outside the
# namespaces, killed by PID): no host is named.
PORT=29472 RUN=load D=$TMP/load
mkdir -p "$D"
BUSY=()
for _ in $(seq "$(nproc)"); do
    sh -c 'while :; do :; done' &
    BUSY+=($!)
    LIVE[$!]=1
done
for h in a b c; do
    NPROC=1 agent $h 3 "${STRAG[@]}" "$TRAIN" "${TARGS[@]}" --max-steps 600
done
WAIT_S=40 wait_all a b c
for p in "${BUSY[@]}"; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
    unset "LIVE[$p]"
done
named=$(grep -hE "straggler: rank" "$D"/[abc].out | head -3)
check "under load nobody is named (named:${named:- none})" [ -z "$named" ]
check "under load the job ends with exit 0 ($(rcs a b c))" all_rc 0 a b c
check "nothing left after the load test" no_leftovers 3

# ----------------------------------------------------------------------------------- 3. exclude
# --nnodes=2:3 on a b c, c slow, exclude; d starts once round 0 runs (a spare). c is named and
# excluded, round 1 closes with a b d, whose workers end the job; c's agent exits 4.
PORT=29473 RUN=excl D=$TMP/excl
mkdir -p "$D"
for h in a b c; do
    delay=$BASE_MS
    [ $h = c ] && delay=$SLOW_MS
    NPROC=1 agent $h 2:3 "${STRAG[@]}" --straggler_action exclude "$TRAIN" "${TARGS[@]}" \
        --max-steps 1500 --step-delay-ms $delay
done
wait_for "$D/a.out" "rendezvous 'excl' round 0: node" 15 >/dev/null
NPROC=1 agent d 2:3 "${STRAG[@]}" --straggler_action exclude "$TRAIN" "${TARGS[@]}" \
    --max-steps 1500 --step-delay-ms $BASE_MS
WAIT_S=50 wait_all a b c d
check "a b d finish with exit 0, c leaves with exit $EXIT_UNFIT ($(rcs a b c d))" \
    cond 'all_rc 0 a b d && all_rc $EXIT_UNFIT c'
grep -qE "host $CADDR_RE excluded as a straggler|$CADDR_RE excluded as a straggler" "$D/a.out" &&
    grep -q "excluded as a straggler" "$D/c.out"
verdict "c is excluded as a straggler, and its agent says why" || show_tail "$D/a.out" "$D/c.out"
others=$(named_others a b c d)
check "no other host is named (named:${others:- none})" [ -z "$others" ]
grep -qE "rendezvous 'excl' round 1: node [0-9] of 3" "$D/d.out" &&
    ! grep -qE "rendezvous 'excl' round 1: node" "$D/c.out"
verdict "the spare d ran in round 1, after the exclusion, and c did not" || show_tail "$D/d.out"
check "nothing left after the exclusion test" no_leftovers 3

# ------------------------------------------------------------------------------------ the end
check "no process left in any of our namespaces" ns_empty
teardown
[ -n "${NETNS_KEEP:-}" ] && mkdir -p "$NETNS_KEEP" && cp -r "$TMP"/. "$NETNS_KEEP"/ 2>/dev/null
check "namespaces removed (bridge and veths with them)" ns_gone
finish
