#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 35
# --rdzv_conf etcd_stores across real network hosts: four hosts a b c d made of network namespaces
# (netns_job.sh), a 3-member etcd cluster on a, b and c (netns_etcd.sh), workers of train on the
# CPU backend with checkpoints. The store candidates are the agents of a, b and c (node ranks 0,
# 1, 2, each serving its store at its host's address, port $SPORT); d's agent (node rank 3) is a
# follower, given an etcd endpoint where no host answers ($SUB.99): a follower that asked etcd
# anything would never join. Checks:
#  a. the job of 4 (--nnodes=4: it needs d) forms through the candidates and finishes, exit 0;
#  b. SIGKILL of everything on the serving candidate's host (agent, workers, etcd member) mid-job
#     (--nnodes=3:4: the three left, d among them, are the minimum): the others re-form under
#     another candidate and finish from the checkpoint, exit 0; the follower's next round within
#     the bound below;
#  c. the serving candidate's host cut off (its veth down) mid-job: the follower's connections
#     to that host now time out instead of being refused, yet it finds the new leader through the
#     other candidates within the bound below; the cut-off agent stops (exit non-zero), the
#     majority side finishes, exit 0.
# The follower's bound, from the fault to its next round, is the sum of:
#  - lease_ttl: the lost leader's lease lapses within it of the fault (its last keepalive came
#    before), then another candidate wins at once, and the others watch it win;
#  - etcd's raft failover when the lost host's member led the raft (an election timeout, 1 s, and
#    etcd's new leader extends every lease by another before any expires): 2 s, else 0;
#  - the follower's own round of the candidates while they still name the lost store: at most
#    one back-off (its bound is 100 ms for a job this small; 1 s counted) and one connect bound
#    to the lost host (tried only past lease_ttl of the loss, at every fourth such answer, 250 ms;
#    1 s counted) before it asks a candidate that names the new leader;
#  - last_call_timeout (1 s): the round forms once the last node joined and the call lapses;
#  - slack for a loaded 2-core machine.
# The measured times are printed as comments. Needs root, `ip netns` and etcd; otherwise every
# check is reported as skipped. Nothing outside our own namespaces is touched.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_ETCD_USER DDPRUN_ETCD_PASSWORD
TTL=3
SPORT=29511
SLACK_MS=${NETNS_SLACK_MS:-2000}
# The follower's back-off and connect bounds (agent/rdzv_elect.c AGENT_FOLLOW_BACKOFF_MS,
# AGENT_FOLLOW_CONNECT_MS) and the round's last call.
FOLLOW_MS=$((1000 + 1000))
LAST_CALL_MS=1000

SECTIONS=("a. 3 candidates and a follower that never asks etcd form a job of 4, every agent exits 0"
    "b. SIGKILL of the serving candidate's host: the others, the follower among them, re-form under another candidate from the checkpoint, exit 0"
    "b. ... the follower's next round within lease_ttl + (raft failover) + back-off + connect bound + last call + slack"
    "c. the serving candidate's host cut off: the follower, its connections there timing out, finds the new leader through the other candidates within the bound"
    "c. ... the cut-off agent stops (exit non-zero), the majority side finishes, exit 0"
    "no process left in our namespaces" "nothing of the runs left in /dev/shm" "namespaces removed")

. "$(dirname "$0")/netns_etcd.sh"
netns_etcd_require
HOSTS="a b c d"
. "$(dirname "$0")/netns_job.sh"
netns_job_setup || skip_all "$NETNS_SETUP_WHY"
T_SUITE=$(now_ms)
netns_etcd_start

STORES="$(addr_of a):$SPORT+$(addr_of b):$SPORT+$(addr_of c):$SPORT"
CONF="last_call_timeout=1,lease_ttl=$TTL,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30,etcd_stores=$STORES"
NOBODY=$SUB.99:2379
declare -A RANK=([a]=0 [b]=1 [c]=2 [d]=3)

# sagent H NNODES ARGS...: ddprun on host H at its node rank, in the background (PID[H] is its
# `timeout`); output in $D/H.out. d, the follower, is given an etcd endpoint nobody answers.
sagent() {
    local h=$1 nn=$2 ep=$EPS
    shift 2
    [ "$h" = d ] && ep=$NOBODY
    nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" \
        timeout -k 3 "$AGENT_LIMIT" "$DDPRUN" -v --nnodes="$nn" --node_rank="${RANK[$h]}" \
        --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" --rdzv_id="$RUN" \
        --rdzv_conf="$CONF" --max_restarts=3 "$TRAIN" "${TR[@]}" --checkpoint-dir "$D/ck" \
        --dump-params "$D/params.bin" "$@" >"$D/$h.out" 2>&1 &
    PID[$h]=$!
    LIVE[$!]=1
}
# sjob NAME NNODES ARGS...: a's agent first (rank 0, it campaigns first and serves), then b, c
# and d once it serves; returns once every host runs round 0.
sjob() {
    RUN=$1-$P D=$TMP/$1 # the run id names this suite's directories in /dev/shm
    local nn=$2 h
    shift 2
    mkdir -p "$D/ck"
    chmod 700 "$D/ck"
    sagent a "$nn" "$@"
    wait_for "$D/a.out" 'served by this node' 15 >/dev/null
    for h in b c d; do sagent $h "$nn" "$@"; done
    for h in a b c d; do wait_for "$D/$h.out" 'round 0: node' 30 >/dev/null || return 1; done
}
# follower_clean: d said it follows, and nothing of etcd.
follower_clean() {
    grep -q 'etcd: a follower (node rank 3)' "$D/d.out" && ! grep -qi 'etcd unreachable' "$D/d.out" &&
        ! grep -q "$NOBODY" "$D/d.out"
}
# new_store H...: "MS HOST", the first of hosts H... to say it serves the store since T0.
new_store() {
    local h m best=""
    for h in "$@"; do
        m=$(first_since "$D/$h.out" 'W rendezvous store now at .*served by this node' "$T0")
        [ -n "$m" ] && { [ -z "$best" ] || [ "$m" -lt "${best% *}" ]; } && best="$m $h"
    done
    echo "$best"
}
# last_reach: "MS ADDR", the last store (candidate or not) the follower reached since T0 before
# its round 1: the one that took its JOIN.
last_reach() {
    grep -E "W rendezvous store (now|found) at |round 1: node" \
        "$D/d.out" | sed -n '/round 1: node/q;p' |
        awk -v t="$T0" '{ split($3, a, "[:.]"); m = ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4]
            if (m >= t && match($0, /store (now|found) at [^ ,]+/)) {
                s = substr($0, RSTART, RLENGTH); sub(/.* /, "", s); last = m " " s } }
            END { print last }'
}
# after T: "+N ms" from T0, or "never".
after() { if [ -n "$1" ]; then echo "+$(($1 - T0)) ms"; else echo never; fi; }

# ------------------------------------------------------------------------------------ a. forms
t=$(now_ms)
sjob form 4 --epochs 3 --max-steps 30
WAIT_S=60 wait_all a b c d
L=$(serving)
all_rc 0 a b c d && [ "$L" = a ] && [ "$(last_step)" = 30 ] && [ -s "$D/params.bin" ] &&
    cat $(outs a b c d) | grep -q 'world 4, backend cpu' && follower_clean &&
    ! grep -q 'round 1' $(outs a b c d)
verdict "a. 3 candidates and a follower that never asks etcd form a job of 4, every agent exits 0" ||
    { echo "# $(rcs a b c d), serving: '$L', last step '$(last_step)'"; show_tail $(outs a b c d); }
echo "# a. a job of 4 through the candidates: $(($(now_ms) - t)) ms, store served on $P$L"

# ------------------------------------------------------------------------------------ b. kill
sjob kill 3:4 --epochs 3 --max-steps $STEPS
K=$(serving)
SURV=$(echo a b c d | tr ' ' '\n' | grep -vx "$K" | tr '\n' ' ')
checkpoints 2 30
RAFT=$(raft_leader)
T0=$(day_ms)
{
    kill_host "$K"
    wait_agent "$K" 5
    etcd_reap "$K"
} 2>/dev/null
# shellcheck disable=SC2086
WAIT_S=60 wait_all $SURV
lost=$(first_since "$D/d.out" 'W lost the rendezvous store' "$T0")
round1=$(log_ms "$D/d.out" 'round 1: node')
new=$(grep -l 'W rendezvous store now at .*served by this node' $(outs $SURV) | wc -l)
read -r newsrv newh <<<"$(new_store $SURV)"
read -r moved maddr <<<"$(last_reach)"
RAFT_MS=0
[ "$RAFT" = "$K" ] && RAFT_MS=2000
BOUND=$((TTL * 1000 + RAFT_MS + FOLLOW_MS + LAST_CALL_MS + SLACK_MS))
# shellcheck disable=SC2086
all_rc 0 $SURV && [ "$new" = 1 ] && [ "$maddr" = "$(addr_of "$newh"):$SPORT" ] && [ "$(last_step)" = $STEPS ] && follower_clean &&
    grep -h '^resuming from' $(outs $SURV) | grep -qv '(step 0,' && grep -q 'world 3' "$D/d.out"
verdict "b. SIGKILL of the serving candidate's host: the others, the follower among them, re-form under another candidate from the checkpoint, exit 0" ||
    { echo "# killed $P$K; $(rcs $SURV); new stores said: $new"; show_tail $(outs $SURV); }
[ -n "$round1" ] && [ $((round1 - T0)) -le $BOUND ]
verdict "b. ... the follower's next round within lease_ttl + (raft failover) + back-off + connect bound + last call + slack" ||
    { echo "# follower's round 1 at $(after "$round1"), bound $BOUND ms"; show_tail "$D/d.out"; }
echo "# b. SIGKILL of $P$K (serving; etcd's raft leader on ${RAFT:-?}): the follower lost it at $(after "$lost"), the new store served on $P${newh:-?} at $(after "$newsrv"), the follower reached it at $(after "$moved"), ran round 1 at $(after "$round1") (bound $BOUND ms)"
etcd_on "$K"
etcd_ready "$K" 30 || echo "# member on $P$K did not come back"

# ------------------------------------------------------------------------------------ c. cut
sjob cut 3:4 --epochs 3 --max-steps $STEPS
C=$(serving)
MAJ=$(echo a b c d | tr ' ' '\n' | grep -vx "$C" | tr '\n' ' ')
checkpoints 2 30
RAFT=$(raft_leader)
T0=$(day_ms)
ip -n "${P}br" link set "v$C" down
wait_agent "$C" 20
# shellcheck disable=SC2086
WAIT_S=60 wait_all $MAJ
lost=$(first_since "$D/d.out" 'W lost the rendezvous store' "$T0")
round1=$(log_ms "$D/d.out" 'round 1: node')
gone=$(log_ms "$D/$C.out" 'lost the etcd lease of the rendezvous store')
read -r newsrv newh <<<"$(new_store $MAJ)"
read -r moved maddr <<<"$(last_reach)"
RAFT_MS=0
[ "$RAFT" = "$C" ] && RAFT_MS=2000
BOUND=$((TTL * 1000 + RAFT_MS + FOLLOW_MS + LAST_CALL_MS + SLACK_MS))
[ -n "$round1" ] && [ $((round1 - T0)) -le $BOUND ] && [ "$maddr" = "$(addr_of "$newh"):$SPORT" ] && follower_clean &&
    grep -q 'world 3' "$D/d.out"
verdict "c. the serving candidate's host cut off: the follower, its connections there timing out, finds the new leader through the other candidates within the bound" ||
    { echo "# follower's round 1 at $(after "$round1"), bound $BOUND ms"; show_tail "$D/d.out"; }
# shellcheck disable=SC2086
[ "${RC[$C]}" != 0 ] && [ "${RC[$C]}" != - ] && [ -n "$gone" ] && all_rc 0 $MAJ &&
    [ "$(last_step)" = $STEPS ] && [ -z "$(procs_on "$C" train)" ]
verdict "c. ... the cut-off agent stops (exit non-zero), the majority side finishes, exit 0" ||
    { echo "# $(rcs $C $MAJ); lease lost at $(after "$gone")"; show_tail $(outs $C $MAJ); }
echo "# c. $P$C cut off (serving; etcd's raft leader on ${RAFT:-?}): its lease lost at $(after "$gone"), a new store served on $P${newh:-?} at $(after "$newsrv"); the follower lost it at $(after "$lost"), reached it at $(after "$moved"), ran round 1 at $(after "$round1") (bound $BOUND ms)"
ip -n "${P}br" link set "v$C" up

# ------------------------------------------------------------------------------------ the end
netns_etcd_end
finish
