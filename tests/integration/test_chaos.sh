#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 200
# suite-timeout: 600
# The short fault-injection campaign (tests/chaos/chaos.py, docs/RELIABILITY.md): three hosts in
# network namespaces run `train` under a seeded random schedule of worker SIGKILL and SIGSTOP,
# agent SIGKILL (then started again), link flaps and outages, the ddp-rendezvous daemon killed
# and started again, the host that serves the store on etcd (--rdzv_backend=etcd, two store
# candidates at known addresses and a follower: --rdzv_conf etcd_stores) killed whole,
# sick nodes (a host whose group starts fail at once for a while, with max_node_failures=2 at
# the minimum node count: it must stay), and slow nodes (a host's workers SIGSTOP/SIGCONT
# duty-cycled for a few seconds: named a straggler, no other host ever named); at least
# CHAOS_MIN_PER_KIND (10) of each kind (3 in 10 of store host kills, 1 in 10 of slow nodes) in
# about CHAOS_MINUTES (1) minute, so that make test stays short: `make chaos` is the longer
# campaign. One check per invariant. The seed is printed: CHAOS_SEED=N replays the schedule.
. "$(dirname "$0")/lib.sh"
CHECKS=("every job ends with exit 0 on every host" "final parameters bitwise equal to a clean run"
    "every fault alone is detected within its bound" "a flap shorter than the keep-alive bound costs no restart"
    "nothing left: no process in any namespace, nothing of ddprun's in /dev/shm"
    "no torn checkpoint is ever found"
    "no growth from round to round (daemon memory, agents' descriptors)"
    "the daemon never ends unless the schedule kills it"
    "a sick node at the minimum node count is never excluded, and the store says it stays"
    "a slow node is named a straggler within its bound; no other host is ever named"
    "every host's last agent reports its goodput (shutdown event, summary line)"
    "at least ${CHAOS_MIN_PER_KIND:-10} faults of every kind (3 in 10 of store host kills, 1 in 10 of slow nodes)")
INVARIANTS=(exit params detect flap leftover checkpoint growth daemon quarantine straggler goodput
    coverage)
skip_all() {
    local c
    for c in "${CHECKS[@]}"; do skip "$c" "$1"; done
    finish
    exit 0
}
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
# Another ddprun job on the machine, started once the campaign runs: its scratch directory in
# /dev/shm is not the campaign's, which must neither count it as a leak nor remove it.
(sleep 3; exec "$BIN/ddprun" --standalone --no_python sleep 1200) >"$TMP/beside.out" 2>&1 &
beside=$!
python3 "$(dirname "$0")/../chaos/chaos.py" --bin "$BIN" --minutes "${CHAOS_MINUTES:-1}" \
    --min-per-kind "${CHAOS_MIN_PER_KIND:-10}" --json "$TMP/chaos.json" >"$TMP/chaos.out" 2>&1
rc=$?
# The other job's worker (a child of its ddprun) names its scratch directory.
beside_shm=""
for w in $(cat /proc/$beside/task/*/children 2>/dev/null); do
    beside_shm=$(tr '\0' '\n' </proc/$w/environ 2>/dev/null | sed -n 's/^DDPRUN_SHM_DIR=//p')
done
[ -n "$beside_shm" ] && [ -d "$beside_shm" ]
verdict "another ddprun job beside the campaign keeps its /dev/shm directory" || show_tail "$TMP/beside.out"
kill -TERM "$beside" 2>/dev/null
wait "$beside" 2>/dev/null
sed 's/^/# /' "$TMP/chaos.out" | grep -E '^# (chaos|# job|# clean)'
[ $rc = 77 ] && skip_all "$(grep -m1 -o 'skipped: .*' "$TMP/chaos.out")"
[ -s "$TMP/chaos.json" ] || { tail -30 "$TMP/chaos.out" | sed 's/^/#   /'; not_ok "the campaign ran (exit $rc)"; finish; exit 0; }
broken() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
bad=[t for inv,t in d["problems"] if inv==sys.argv[2] or (sys.argv[2]=="exit" and inv=="job")]
print("; ".join(bad)[:600]); sys.exit(1 if bad else 0)' "$TMP/chaos.json" "$1"; }
for i in "${!CHECKS[@]}"; do
    why=$(broken "${INVARIANTS[$i]}")
    check "${CHECKS[$i]}${why:+: $why}" [ -z "$why" ]
done
[ $rc = 0 ] || echo "# chaos exited $rc; its work directory: $(grep -o 'work directory kept: .*' "$TMP/chaos.out")"
finish
