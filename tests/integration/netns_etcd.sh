# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# A 3-member etcd cluster (Debian's etcd-server) on hosts a, b and c of netns_job.sh, and what the
# suites that run etcd-backed jobs on those hosts share (test_etcd_netns.sh,
# test_etcd_netns_stores.sh). A suite sources it after lib.sh and sets SECTIONS, then:
# `netns_etcd_require` (skip_all without root, the tools or etcd), HOSTS and netns_job.sh with
# its setup, `netns_etcd_start` (the members; skip_all when the cluster does not start; sets EPS,
# the members' client addresses, comma-separated), its cases, and `netns_etcd_end` (the members
# stopped, the suite's last checks, the namespaces removed) before `finish`.
# The helpers read $D (the job's directory: $D/H.out each host's agent, $D/ck its checkpoints).
EHOSTS="a b c"
CLUSTER="" EPS=""
# The jobs' workers: train on the CPU backend, 1 a host, 32 samples a step over 4096 samples, a
# checkpoint every 10 steps (TR, its arguments); the delay keeps them training while a fault is
# made. STEPS: a job's length; AGENT_LIMIT: each agent's bound in seconds.
AGENT_LIMIT=90
STEPS=60
# shellcheck disable=SC2054 # the commas are inside one value (--layers)
TR=(--layers 32,64,4 --samples 4096 --batch-size 32 --backend cpu --log-every 1000
    --checkpoint-every 10 --step-delay-ms 100)
declare -A EPID READY
# netns_etcd_require: skip_all unless this suite can run (root, ip/nsenter/unshare/timeout/
# setpriv, etcd).
netns_etcd_require() {
    local c
    [ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
    for c in ip nsenter unshare timeout setpriv; do
        command -v $c >/dev/null || skip_all "$c is missing"
    done
    command -v etcd >/dev/null 2>&1 ||
        skip_all "etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"
}
# etcd_on H: host H's member in the background, on its data dir (the same on a restart); its
# output appended to $TMP/etcd-H.log. nsenter, unshare, sh and setpriv all exec: EPID[H] is etcd,
# a child of this shell, killed with it.
etcd_on() {
    local h=$1 ip
    ip=$(addr_of "$h")
    READY[$h]=$(grep -c 'ready to serve client requests' "$TMP/etcd-$h.log" 2>/dev/null)
    nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" setpriv --pdeathsig KILL etcd --name "$h" \
        --data-dir "$TMP/etcd-$h" --listen-client-urls "http://$ip:2379" \
        --advertise-client-urls "http://$ip:2379" --listen-peer-urls "http://$ip:2380" \
        --initial-advertise-peer-urls "http://$ip:2380" --initial-cluster "$CLUSTER" \
        --initial-cluster-token "$P" >>"$TMP/etcd-$h.log" 2>&1 &
    EPID[$h]=$!
}
# etcd_ready H SECS: host H's member (started last by etcd_on) serves clients.
etcd_ready() {
    local end=$(($(now_ms) + $2 * 1000))
    while [ "$(grep -c 'ready to serve client requests' "$TMP/etcd-$1.log" 2>/dev/null)" -le "${READY[$1]:-0}" ]; do
        [ "$(now_ms)" -ge $end ] && { show_tail "$TMP/etcd-$1.log"; return 1; }
        running "${EPID[$1]}" || { show_tail "$TMP/etcd-$1.log"; return 1; }
        sleep 0.05
    done
}
etcd_reap() { wait "${EPID[$1]}" 2>/dev/null; }
# netns_etcd_start: the three members, serving clients (or skip_all).
netns_etcd_start() {
    local t h up=1
    t=$(now_ms)
    for h in $EHOSTS; do
        CLUSTER="$CLUSTER${CLUSTER:+,}$h=http://$(addr_of $h):2380"
        EPS="$EPS${EPS:+,}$(addr_of $h):2379"
    done
    for h in $EHOSTS; do etcd_on $h; done
    for h in $EHOSTS; do etcd_ready $h 30 || up=0; done
    [ $up = 1 ] || skip_all "the 3-member etcd cluster did not start in the namespaces"
    echo "# etcd members on ${P}a ${P}b ${P}c ($EPS) serving after $(($(now_ms) - t)) ms"
}

# netns_etcd_end: the members stopped; nothing left in the namespaces nor of the runs in
# /dev/shm; the namespaces removed (kept in NETNS_KEEP when set).
netns_etcd_end() {
    local h
    {
        for h in $EHOSTS; do
            kill -KILL "${EPID[$h]}"
            etcd_reap "$h"
        done
    } 2>/dev/null
    echo "# suite body: $(($(now_ms) - T_SUITE)) ms"
    check "no process left in our namespaces" ns_empty
    check "nothing of the runs left in /dev/shm" shm_clean
    teardown
    [ -n "${NETNS_KEEP:-}" ] && mkdir -p "$NETNS_KEEP" && cp -r "$TMP"/. "$NETNS_KEEP"/ 2>/dev/null
    check "namespaces removed" ns_gone
}
# serving: the host whose agent serves the store (the one that says so).
serving() {
    local h
    for h in a b c d; do grep -q 'served by this node' "$D/$h.out" 2>/dev/null && echo $h; done
}
# log_ms FILE REGEX: the time of day (ms) of the first line of FILE matching REGEX.
log_ms() {
    grep -E "$2" "$1" 2>/dev/null | head -1 |
        awk '{ split($3, t, "[:.]"); print ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + t[4] }'
}
day_ms() { date +%H:%M:%S.%N | awk '{ split($1, t, "[:.]"); print ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + int(t[4] / 1000000) }'; }
# procs_on H COMM: PIDs of COMM running in host H.
procs_on() {
    local p
    for p in $(ip netns pids "$P$1" 2>/dev/null); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && running "$p" && echo "$p"
    done
}
# raft_leader: the host whose member leads etcd's raft now (empty when none answers so).
raft_leader() {
    local h
    for h in $EHOSTS; do
        running "${EPID[$h]}" || continue
        on "$h" timeout 5 python3 -c '
import json, sys, urllib.request as u
r = json.load(u.urlopen(u.Request(sys.argv[1], data=b"{}"), timeout=2))
sys.exit(0 if r["header"]["member_id"] == r["leader"] else 1)' \
            "http://$(addr_of "$h"):2379/v3/maintenance/status" 2>/dev/null && { echo "$h"; return; }
    done
}
# kill_host H: everything running in host H frozen at once (its death), then SIGKILLed. A dead
# host's memory goes with it: the scratch directory its frozen workers name in /dev/shm (one for
# every namespace here) is removed as the host's death would.
kill_host() {
    local p d pids shm=
    pids=$(ip netns pids "$P$1" 2>/dev/null)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one PID a word
    kill -STOP $pids 2>/dev/null
    for p in $pids; do
        d=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's|^DDPRUN_SHM_DIR=||p')
        case $d in /dev/shm/ddprun-shm-*) shm="$shm $d" ;; esac
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    for p in $(ip netns pids "$P$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    for d in $shm; do rm -rf "$d"; done
}
# shm_clean: nothing of this suite's runs (ids ending -$P) left in /dev/shm: the agents remove
# their scratch and run directories, their guards do when an agent is SIGKILLed, and kill_host
# does a dead host's.
shm_clean() {
    local left
    left=$(compgen -G "/dev/shm/ddprun-*-$P-*" | tr '\n' ' ')
    [ -z "$left" ] || { echo "# left in /dev/shm: $left"; return 1; }
}
# checkpoints N SECS: at least N checkpoints in $D/ck.
checkpoints() { wait_count "$1" "$2" "$D/ck/ckpt-*.bin"; }
# last_step: the step of the newest checkpoint in $D/ck (one is written at --max-steps).
last_step() { ls "$D/ck" 2>/dev/null | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.bin$/\1/p' | sort -n | tail -1; }
ckpt_at() { printf '%s/ck/ckpt-%020d.bin' "$1" "$2"; }
# lines_since FILE REGEX T: lines of FILE matching REGEX logged at or after time of day T (ms).
lines_since() {
    grep -E "$2" "$1" 2>/dev/null |
        awk -v t="$3" '{ split($3, a, "[:.]"); if (((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4] >= t) n++ }
            END { print n + 0 }'
}
# first_since FILE REGEX T: the time of day (ms) of the first such line.
first_since() {
    grep -E "$2" "$1" 2>/dev/null |
        awk -v t="$3" '{ split($3, a, "[:.]"); m = ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4]
            if (m >= t) { print m; exit } }'
}
outs() { local h; for h in "$@"; do echo "$D/$h.out"; done; }
