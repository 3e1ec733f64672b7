#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The workers' store on a shared host (docs/protocol.md, "The workers' store"): a one-node job's
# two workers (tests/helpers/tcpstore_raw.py worker, TCPStore's protocol by hand) hold a
# connection to the agent's store for the whole job while, from outside the job,
#   - another user (uid 65534, setpriv) connects and is refused with one line naming its
#     address and uid, and its SET never reaches the store; the job's user is served;
#   - the job's user pushes 8 MiB values until the memory limit fitted to 2 workers
#     (64 MiB + 2 x 16 MiB) closes that connection; the store serves on;
#   - the job's user opens 200 connections that never send: the connection limit fitted to 2
#     workers (64 + 2 x 16) holds, and once they are 5 s old a worker's new connection evicts
#     one of them instead of being refused.
# The workers then check their first connection still works, that the stranger's key is absent,
# and that a fresh connection is served; the job exits 0. Then, on two hosts made of network
# namespaces (nothing in the root namespace): a job bound to host A's address refuses another
# user on A and serves a peer on host B, whose owner the kernel cannot know.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
RAW=$(cd "$(dirname "$0")/../helpers" && pwd)/tcpstore_raw.py
names=("another user's connection to the workers' store is refused"
    "the refusal is logged with the peer's address and uid"
    "the job's user is served beside the refused one"
    "the memory limit fitted to the job closes the connection that passes it"
    "the store serves on after the memory limit (the values deleted)"
    "the connection limit fitted to the job holds against a flood of idle connections"
    "the refused newcomers are logged with the limit"
    "the job's workers run normally through all of it (exit 0)"
    "a worker's new connection evicted a never-used one at the limit"
    "nothing left after the workers' store job")
why=
[ "$(id -u)" -eq 0 ] || why="needs root (to run a client as another user)"
command -v setpriv >/dev/null || why="setpriv missing (util-linux)"
[ -x /usr/bin/python3 ] || why="no /usr/bin/python3 (a python another user can run)"
if [ -n "$why" ]; then
    for t in "${names[@]}"; do skip "$t" "$why"; done
    finish; exit
fi

d=$TMP/job; mkdir -p "$d"
(exec timeout -k 5 120 "$DDPRUN" --standalone --nproc_per_node=2 "$RAW" worker "$d" \
    >"$TMP/job.out" 2>&1) &
pid=$!
for _ in $(seq 500); do [ -f "$d/port" ] && break; sleep 0.02; done
PORT=$(cat "$d/port" 2>/dev/null)
if [ -z "$PORT" ]; then
    for t in "${names[@]}"; do not_ok "$t (the job's workers did not start)"; done
    show_tail "$TMP/job.out"
    kill "$(child_pid $pid)" 2>/dev/null; wait $pid 2>/dev/null
    finish; exit
fi

# 1. Another user: refused at once, one line naming its address and uid; the same user is served.
r=$(cd / && timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups \
    /usr/bin/python3 "$RAW" probe 127.0.0.1 "$PORT" stranger)
lport=${r#* }
check "${names[0]}" [ "${r%% *}" = refused ]
wait_for "$TMP/job.out" "refused connection from 127\.0\.0\.1:$lport: its socket belongs to uid 65534, not the job's user \(uid $(id -u)\)" 5
verdict "${names[1]}"
r=$(timeout 20 python3 "$RAW" probe 127.0.0.1 "$PORT" mine)
check "${names[2]}" [ "${r%% *}" = served ]

# 2. Memory: 16 values of 8 MiB (128 MiB) do not fit 96 MiB; the connection that passes the limit
# is closed with a line naming it, and a fresh connection deletes what was stored.
timeout 60 python3 "$RAW" fill "$PORT" 8388608 16 >"$TMP/fill.out" 2>&1
stored=$(sed -n 's/^stored //p' "$TMP/fill.out")
[ -n "$stored" ] && [ "$stored" -lt 16 ] &&
    wait_for "$TMP/job.out" "store memory limit \(100663296 bytes\) reached" 5
verdict "${names[3]} ($stored values stored)" || show_tail "$TMP/fill.out"
check "${names[4]}" grep -qx deleted "$TMP/fill.out"

# 3. A flood of never-used connections by the job's own user: at most 96 connections in all (the
# workers hold 2). A quiet second first, so that the admission log (one line a second) shows the
# first refusal.
sleep 1.1
timeout 90 python3 "$RAW" flood "$PORT" 200 "$d" >"$TMP/flood.out" 2>&1 &
fpid=$!
wait_for "$TMP/flood.out" "^open [0-9]+ closed [0-9]+$" 30
read -r _ open _ closed <"$TMP/flood.out"
[ -n "$open" ] && [ "$open" -le 94 ] && [ "$closed" -ge 1 ] && [ $((open + closed)) -eq 200 ]
verdict "${names[5]} (open $open, closed $closed)" || show_tail "$TMP/flood.out"
wait_for "$TMP/job.out" "refused connection from 127\.0\.0\.1:[0-9]+: connection limit 96 reached" 5
verdict "${names[6]}"

# The flood's connections stay open and unused; past 5 s the workers' new connections may evict
# them. The workers finish: first connection intact, no stranger's key, a fresh connection served.
sleep 5.5
touch "$d/go"
wait $pid; rc=$?
[ $rc -eq 0 ] && grep -q "worker 0 ok" "$TMP/job.out" && grep -q "worker 1 ok" "$TMP/job.out"
verdict "${names[7]}" || show_tail "$TMP/job.out"
check "${names[8]}" grep -qE "closing connection from 127\.0\.0\.1:[0-9]+: evicted, no command in [0-9]+ ms, to admit 127\.0\.0\.1:[0-9]+ \(connection limit 96 reached\)" "$TMP/job.out"
touch "$d/release"
wait $fpid 2>/dev/null
check "${names[9]}" no_leftovers 3

# 4. Another address than loopback (docs/protocol.md): two hosts made of network namespaces,
# joined by a veth pair, nothing in the root namespace. The job on host A binds A's address. A
# socket of another user on A itself is found by the kernel and refused; one on host B is a
# remote peer, which the kernel cannot vouch for, and is served as before; the job's user on A
# is served.
ns_names=("another user on the store's host, through a non-loopback address, is refused"
    "a peer on another host is served (its owner is not the kernel's to say)"
    "the job's user on the store's host is served through its address"
    "the job on a non-loopback address runs normally (exit 0)")
P=ddpws$$
SUB=10.215.$((RANDOM % 200 + 20))
. "$(dirname "$0")/netns.sh"
ns_teardown() {
    local ns p
    for ns in ${P}a ${P}b; do
        [ -e "/run/netns/$ns" ] || continue
        # Processes in a namespace this suite made are this suite's.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    netns_dir_release
}
trap 'ns_teardown; rm -rf "$TMP"' EXIT
ns_setup() (
    set -e
    for h in a b; do
        ip netns add "$P$h"
        nsenter --net="/run/netns/$P$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
        ip -n "$P$h" link set lo up
    done
    ip -n "${P}a" link add eth0 type veth peer name eth0 netns "${P}b"
    ip -n "${P}a" addr add "$SUB.1/24" dev eth0
    ip -n "${P}b" addr add "$SUB.2/24" dev eth0
    ip -n "${P}a" link set eth0 up
    ip -n "${P}b" link set eth0 up
    nsenter --net="/run/netns/${P}a" ip -br addr show eth0 | grep -q "$SUB.1/"
)
in_ns() { local h=$1; shift; nsenter --net="/run/netns/$P$h" "$@"; }
why=
command -v ip >/dev/null && command -v nsenter >/dev/null || why="ip or nsenter missing"
[ -z "$why" ] && { ns_setup >"$TMP/ns.err" 2>&1 || why="network namespaces unavailable: $(tail -1 "$TMP/ns.err")"; }
if [ -n "$why" ]; then
    for t in "${ns_names[@]}"; do skip "$t" "$why"; done
    finish; exit
fi
d=$TMP/nsjob; mkdir -p "$d"
(exec nsenter --net="/run/netns/${P}a" timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=2 \
    --master_addr "$SUB.1" "$RAW" worker "$d" >"$TMP/nsjob.out" 2>&1) &
pid=$!
for _ in $(seq 500); do [ -f "$d/port" ] && break; sleep 0.02; done
PORT=$(cat "$d/port" 2>/dev/null)
r=$(cd / && in_ns a timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups \
    /usr/bin/python3 "$RAW" probe "$SUB.1" "${PORT:-1}" stranger)
lport=${r#* }
[ "${r%% *}" = refused ] &&
    wait_for "$TMP/nsjob.out" "refused connection from ${SUB//./\\.}\.1:$lport: its socket belongs to uid 65534" 5
verdict "${ns_names[0]}" || show_tail "$TMP/nsjob.out"
r=$(cd / && in_ns b timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups \
    /usr/bin/python3 "$RAW" probe "$SUB.1" "${PORT:-1}" remote)
check "${ns_names[1]}" [ "${r%% *}" = served ]
r=$(in_ns a timeout 20 /usr/bin/python3 "$RAW" probe "$SUB.1" "${PORT:-1}" mine)
check "${ns_names[2]}" [ "${r%% *}" = served ]
touch "$d/go"
wait $pid; rc=$?
[ $rc -eq 0 ] && grep -q "worker 0 ok" "$TMP/nsjob.out" && grep -q "worker 1 ok" "$TMP/nsjob.out"
verdict "${ns_names[3]}" || show_tail "$TMP/nsjob.out"
ns_teardown
finish
