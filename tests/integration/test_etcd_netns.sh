#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 60
# --rdzv_backend=etcd across real network hosts: four hosts a b c d made of network namespaces
# (netns_job.sh), a 3-member etcd cluster (Debian's etcd-server) with one member on each of a, b
# and c, started here with `setpriv --pdeathsig KILL`, one ddprun per host (d joins last: a spare,
# beyond --nnodes' max), workers of train on the CPU backend with checkpoints. Checks:
#  1. the job forms across 3 hosts, the spare waits, every agent exits 0;
#  2. SIGKILL of everything on the host whose agent serves the store (agent, workers, etcd
#     member) mid-job: the other two and the spare re-form under a new leader and finish from the
#     checkpoint, exit 0, no command typed again (here and in 4 the serving host is a, its agent
#     started first: its member is the first endpoint, the one every client calls and watches);
#  6. ... its parameters are bitwise those of the uninterrupted run of 1, at the same step;
#  4. the serving host's link cut mid-job: the cut-off agent says it lost its lease, stops its
#     workers within the lease TTL (+ slack) and exits non-zero, before another store serves; the
#     majority side re-forms and finishes, exit 0;
#  3. SIGKILL of one etcd member alone (the first endpoint, the one every agent talks to; its
#     host's agent lives): the workers go on, no new round, no agent says more than a line of it;
#  5. all three members SIGKILLed while workers train, restarted on their data dirs 10 s later
#     (lease_ttl 30: an agent rides out an outage of up to about two thirds of it): the job goes
#     on without a new round and exits 0; each agent says once that etcd is unreachable and once
#     that it answers again.
# Needs root, `ip netns` and etcd; otherwise every check is reported as skipped. Nothing outside
# our own namespaces is touched.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_ETCD_USER DDPRUN_ETCD_PASSWORD
TTL=3
CONF="last_call_timeout=1,lease_ttl=$TTL,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30"
# What a loaded 2-core machine may add to a bound (scheduling, worker stop and start).
SLACK_MS=${NETNS_SLACK_MS:-2000}

SECTIONS=("1. 3 hosts and a spare form one job through a 3-member etcd, every agent exits 0"
    "2. SIGKILL of the serving host (agent, workers, etcd member): the others and the spare finish, exit 0"
    "2. ... they re-formed under a new leader within lease_ttl + last_call_timeout (+ etcd's raft failover) + slack, from the checkpoint"
    "6. the parameters after the failover are bitwise those of the uninterrupted run, at the same step"
    "4. the serving host cut off: its agent loses its lease, stops its workers within lease_ttl + slack, exits non-zero"
    "4. ... it stopped serving before another store served; the majority side finishes, exit 0"
    "3. SIGKILL of one etcd member alone: the workers go on, no new round, at most a line per agent"
    "5. etcd killed, back on its data dirs 10 s later (lease_ttl 30): the workers go on, no new round, every agent exits 0"
    "5. ... one line each when etcd goes and one when it is back"
    "no process left in our namespaces" "nothing of the runs left in /dev/shm" "namespaces removed")

. "$(dirname "$0")/netns_etcd.sh"
netns_etcd_require
HOSTS="a b c d"
. "$(dirname "$0")/netns_job.sh"
netns_job_setup || skip_all "$NETNS_SETUP_WHY"
T_SUITE=$(now_ms)
netns_etcd_start

# ------------------------------------------------------------------------------------ helpers
# eagent H NNODES ARGS...: ddprun on host H with the etcd backend, in the background (PID[H] is
# its `timeout`); output in $D/H.out.
eagent() {
    local h=$1 nn=$2
    shift 2
    nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" \
        timeout -k 3 "$AGENT_LIMIT" "$DDPRUN" -v --nnodes="$nn" --nproc_per_node=1 \
        --rdzv_backend=etcd --rdzv_endpoint="$EPS" --rdzv_id="$RUN" --rdzv_conf="${ECONF:-$CONF}" \
        --max_restarts=3 "$@" >"$D/$h.out" 2>&1 &
    PID[$h]=$!
    LIVE[$!]=1
}
# job NAME ARGS...: a, b and c start train (ARGS added); once all three run round 0, d joins as
# a spare. D=$TMP/NAME; the checkpoints in $D/ck, the parameters in $D/params.bin. With LEAD=H,
# H's agent starts first and the others once it serves the store: H serves it.
job() {
    RUN=$1-$P D=$TMP/$1 # the run id names this suite's directories in /dev/shm
    shift
    mkdir -p "$D/ck"
    chmod 700 "$D/ck"
    local h
    if [ -n "${LEAD:-}" ]; then
        eagent "$LEAD" 3:3 "$TRAIN" "${TR[@]}" --checkpoint-dir "$D/ck" --dump-params "$D/params.bin" "$@"
        wait_for "$D/$LEAD.out" 'served by this node' 15 >/dev/null
    fi
    for h in a b c; do
        [ "$h" = "${LEAD:-}" ] && continue
        eagent $h 3:3 "$TRAIN" "${TR[@]}" --checkpoint-dir "$D/ck" --dump-params "$D/params.bin" \
            "$@"
    done
    for h in a b c; do wait_for "$D/$h.out" 'round 0: node' 30 >/dev/null || return 1; done
    eagent d 3:3 "$TRAIN" "${TR[@]}" --checkpoint-dir "$D/ck" --dump-params "$D/params.bin" \
        "$@"
    wait_for "$D/d.out" 'waiting as a spare' 15 >/dev/null
}
# ------------------------------------------------------------------------------------ 1. forms
t=$(now_ms)
job ref --epochs 3 --max-steps $STEPS
L1=$(serving)
WAIT_S=60 wait_all a b c d
REF_MS=$(($(now_ms) - t))
REF_STEP=$(last_step)
all_rc 0 a b c d && [ "$(echo $L1 | wc -w)" = 1 ] && [ -s "$D/params.bin" ] &&
    [ "$REF_STEP" = $STEPS ] && cat $(outs a b c) | grep -q 'world 3, backend cpu' &&
    grep -q 'waiting as a spare' "$D/d.out" && ! grep -q 'round 1' $(outs a b c d)
verdict "1. 3 hosts and a spare form one job through a 3-member etcd, every agent exits 0" ||
    { echo "# $(rcs a b c d), serving: '$L1', last step '$REF_STEP'"; show_tail $(outs a b c d); }
echo "# 1. uninterrupted: $REF_MS ms, $STEPS steps, store served on $P$L1"

# ------------------------------------------------------------------------------------ 2. kill
LEAD=a job kill --epochs 3 --max-steps $STEPS
K=$(serving)
SURV=$(echo a b c d | tr ' ' '\n' | grep -vx "$K" | tr '\n' ' ')
checkpoints 2 30
ck_before=$(count "$D/ck/ckpt-*.bin")
RAFT=$(raft_leader)
tk=$(day_ms)
# (bash's "Killed" notices of our background jobs say nothing here.)
{
    kill_host "$K"
    wait_agent "$K" 5
    etcd_reap "$K"
} 2>/dev/null
# shellcheck disable=SC2086
WAIT_S=60 wait_all $SURV
round1=""
for h in $SURV; do
    m=$(log_ms "$D/$h.out" 'round 1: node')
    [ -n "$m" ] && [ -z "$round1" -o "${m:-0}" -gt "${round1:-0}" ] && round1=$m
done
L2=$(grep -l 'rendezvous store now at .*served by this node' $(outs $SURV) | wc -l)
KILL_STEP=$(last_step)
# shellcheck disable=SC2086
all_rc 0 $SURV && [ -s "$D/params.bin" ] && grep -q '^resuming from' $(outs $SURV)
verdict "2. SIGKILL of the serving host (agent, workers, etcd member): the others and the spare finish, exit 0" ||
    { echo "# killed $P$K after $ck_before checkpoints; $(rcs $SURV)"; show_tail $(outs $SURV); }
DT=$(( ${round1:-0} - tk ))
# When the dead member led etcd's raft, the others elect another (about an election timeout, 1 s)
# and etcd's new leader extends every lease by its election timeout (1 s) before any expires.
RAFT_MS=0
[ "$RAFT" = "$K" ] && RAFT_MS=2000
[ -n "$round1" ] && [ $DT -le $((TTL * 1000 + 1000 + RAFT_MS + SLACK_MS)) ] && [ "$L2" -ge 1 ] &&
    grep -h '^resuming from' $(outs $SURV) | grep -qv '(step 0,'
verdict "2. ... they re-formed under a new leader within lease_ttl + last_call_timeout (+ etcd's raft failover) + slack, from the checkpoint" ||
    { echo "# round 1 ${DT} ms after the kill"; show_tail $(outs $SURV); }
echo "# 2. SIGKILL of $P$K (serving) -> round 1 on every survivor after $DT ms (lease_ttl $TTL s, last_call_timeout 1 s; etcd's raft leader was on ${RAFT:-?}$([ "$RAFT" = "$K" ] && echo ', killed with it'))"
echo "# 2. $(grep -h '^resuming from' $(outs $SURV) | head -1 | sed 's/.*(step/resumed at step/')"

cmp -s "$TMP/ref/params.bin" "$TMP/kill/params.bin" && [ "$KILL_STEP" = "$REF_STEP" ] &&
    cmp -s "$(ckpt_at "$TMP/ref" $STEPS)" "$(ckpt_at "$TMP/kill" $STEPS)"
verdict "6. the parameters after the failover are bitwise those of the uninterrupted run, at the same step" ||
    echo "# steps: uninterrupted '$REF_STEP', failover '$KILL_STEP'"

# The killed member back on its data dir: the cluster has three again for what follows.
etcd_on "$K"
etcd_ready "$K" 30 || echo "# member on $P$K did not come back"

# ------------------------------------------------------------------------------------ 4. partition
LEAD=a job cut --epochs 3 --max-steps $STEPS
C=$(serving)
MAJ=$(echo a b c d | tr ' ' '\n' | grep -vx "$C" | tr '\n' ' ')
checkpoints 2 30
tc=$(day_ms)
tcm=$(now_ms)
ip -n "${P}br" link set "v$C" down
# Its workers gone: polled, so that the time is ours, not the agent's.
gone_ms=""
while [ $(($(now_ms) - tcm)) -lt 20000 ]; do
    [ -z "$(procs_on "$C" train)" ] && { gone_ms=$(($(now_ms) - tcm)); break; }
    sleep 0.05
done
wait_agent "$C" 20
# shellcheck disable=SC2086
WAIT_S=60 wait_all $MAJ
lost=$(log_ms "$D/$C.out" 'lost the etcd lease of the rendezvous store')
newsrv=""
for h in $MAJ; do
    m=$(log_ms "$D/$h.out" 'W rendezvous store now at .*served by this node')
    [ -n "$m" ] && newsrv=$m
done
[ "${RC[$C]}" != 0 ] && [ "${RC[$C]}" != - ] && [ -n "$lost" ] && [ -n "$gone_ms" ] &&
    [ $((lost - tc)) -le $((TTL * 1000 + SLACK_MS)) ] && [ "$gone_ms" -le $((TTL * 1000 + SLACK_MS)) ]
verdict "4. the serving host cut off: its agent loses its lease, stops its workers within lease_ttl + slack, exits non-zero" ||
    { echo "# lost at ${lost:-never}, workers gone at +${gone_ms:-never} ms, $(rcs $C)"; show_tail "$D/$C.out"; }
# shellcheck disable=SC2086
all_rc 0 $MAJ && [ -n "$newsrv" ] && [ -n "$lost" ] && [ "$lost" -lt "$newsrv" ] && [ "$(last_step)" = $STEPS ]
verdict "4. ... it stopped serving before another store served; the majority side finishes, exit 0" ||
    { echo "# $(rcs $MAJ); lost ${lost:-?} new store ${newsrv:-?}"; show_tail $(outs $MAJ); }
# after T: "+N ms" from the cut, or "never".
after() { if [ -n "$1" ]; then echo "+$(($1 - tc)) ms"; else echo never; fi; }
echo "# 4. $P$C cut off: lease lost at $(after "$lost"), its workers gone at +${gone_ms:-?} ms, a new store served at $(after "$newsrv") (lease_ttl $TTL s)"
ip -n "${P}br" link set "v$C" up

# ------------------------------------------------------------------------------------ 3 and 5
# One job: a member killed alone (then back), then all three killed, back 10 s later.
STEPS_LONG=250
ECONF="last_call_timeout=1,lease_ttl=30,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30" \
    job etcd --epochs 20 --max-steps $STEPS_LONG
checkpoints 1 30
S=$(serving)
# The member every client starts with (the first endpoint): the agents' calls move to another.
M=a
t3d=$(day_ms)
{
    kill -KILL "${EPID[$M]}"
    etcd_reap "$M"
} 2>/dev/null
sleep 3
n_train=0
for h in a b c; do [ -n "$(procs_on $h train)" ] && n_train=$((n_train + 1)); done
few=1
for h in a b c d; do [ "$(lines_since "$D/$h.out" ' [WE] ' "$t3d")" -le 1 ] || few=0; done
[ "$n_train" = 3 ] && [ $few = 1 ] && ! grep -q 'round 1' $(outs a b c d) &&
    ! grep -q 'W rendezvous store now at' $(outs a b c d) && ! grep -q 'lost the etcd lease' $(outs a b c d)
verdict "3. SIGKILL of one etcd member alone: the workers go on, no new round, at most a line per agent" ||
    { echo "# killed the member on $P$M (store on $P$S); $n_train hosts train"; show_tail $(outs a b c d); }
echo "# 3. warnings after the kill: $(for h in a b c d; do printf '%s ' "$h=$(lines_since "$D/$h.out" ' [WE] ' "$t3d")"; done)"
etcd_on "$M"
etcd_ready "$M" 30 || echo "# member on $P$M did not come back"

t5d=$(day_ms)
{
    for h in $EHOSTS; do
        kill -KILL "${EPID[$h]}"
        etcd_reap "$h"
    done
} 2>/dev/null
sleep 10
n_train=0
for h in a b c; do [ -n "$(procs_on $h train)" ] && n_train=$((n_train + 1)); done
step_at=$(last_step)
for h in $EHOSTS; do etcd_on $h; done
for h in $EHOSTS; do etcd_ready $h 30 || echo "# member on $P$h did not come back"; done
echo "# 5. etcd serving again $(($(day_ms) - t5d)) ms after it was killed"
WAIT_S=90 wait_all a b c d
[ "$n_train" = 3 ] && all_rc 0 a b c d && ! grep -q 'round 1' $(outs a b c d) &&
    [ "$(last_step)" = $STEPS_LONG ] && [ "${step_at:-0}" -lt $STEPS_LONG ]
verdict "5. etcd killed, back on its data dirs 10 s later (lease_ttl 30): the workers go on, no new round, every agent exits 0" ||
    { echo "# $n_train hosts trained through it; $(rcs a b c d); step ${step_at:-?} at the end of the outage"; show_tail $(outs a b c d); }
lines=1
for h in a b c d; do
    [ "$(lines_since "$D/$h.out" 'W etcd unreachable' "$t5d")" = 1 ] &&
        [ "$(lines_since "$D/$h.out" 'answers again' "$t5d")" = 1 ] || lines=0
done
[ $lines = 1 ]
verdict "5. ... one line each when etcd goes and one when it is back" ||
    { for h in a b c d; do echo "# $h:"; grep -E 'etcd unreachable|answers again' "$D/$h.out" | sed 's/^/#   /'; done; }
down=$(first_since "$D/a.out" 'W etcd unreachable' "$t5d")
back=$(first_since "$D/a.out" 'answers again' "$t5d")
echo "# 5. etcd killed at +0, restarted at +10 s: a says unreachable at +$((${down:-0} - t5d)) ms, answers again at +$((${back:-0} - t5d)) ms; train at step ${step_at:-?} when etcd was restarted"

# ------------------------------------------------------------------------------------ the end
netns_etcd_end
finish
