#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 60
# Multi-node ddprun across real network hosts: three hosts made of
# network namespaces on this one machine, joined by veth pairs to a bridge that lives in a fourth
# namespace, each host with its own hostname and /etc/hosts (unshare --uts --mount and a bind
# mount, as tests/slurm/slurm-harness.sh does), one ddprun per host, the rendezvous endpoint given
# by host name. Checks: the job forms (ranks, GROUP_RANK, MASTER_ADDR of group rank 0, reachable
# from the others), with and without a job token (and a wrong token is refused); SIGKILL of an
# agent, a cut link and a stopped agent are detected within the keep-alive bound and the others
# carry on with fewer nodes; the stale node goes away by itself; a late node scales the job up; a
# worker failure restarts every node's group; train runs over TCP between two hosts; a hung worker
# on one host restarts both hosts' groups; nothing is left running in any namespace; the
# namespaces (and with them the bridge and veths) are always removed, also on failure or SIGTERM.
#
# Needs root and `ip netns`; otherwise every check is reported as skipped. Nothing outside our
# own namespaces is touched: the root namespace gets no interface, no address and no route.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
TRAIN=$BIN/train
fake_worker_env_clear
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE

# Fast timeouts: keep-alive bound 0.2 s x 3 = 600 ms, rounds close 300 ms after min nodes.
CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=3,close_timeout=5
KA_MS=600
KA_INTERVAL_MS=200
LC_MS=300
# What a loaded 2-core CI machine may add to a bound (scheduling, worker stop and start).
SLACK_MS=${NETNS_SLACK_MS:-700}
# Upper bound of any one agent; waits below are shorter.
AGENT_LIMIT=30

SECTIONS=("3 hosts form one job" "3 hosts with a job token" "SIGKILL of an agent" "cut link"
    "stopped agent" "link flap" "scale-up" "worker failure restarts every node" "train across 2 hosts"
    "PyTorch DDP across 2 hosts" "Kubernetes launches"
    "nothing left, namespaces removed")

[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for c in ip nsenter unshare timeout; do
    command -v $c >/dev/null || skip_all "$c is missing"
done

# ------------------------------------------------------------------------------------ hosts
HOSTS="a b c"
. "$(dirname "$0")/netns_job.sh"
netns_job_setup || skip_all "$NETNS_SETUP_WHY"

# survivors_reform T0: waits for a's and b's round 1; det/ref: ms from T0 to their stop/restart.
survivors_reform() {
    wait_count 4 5 "$D/a/env.*.1" "$D/b/env.*.1"
    det=$(since_ms "$(max_mtime "$D/a/sig.*.0" "$D/b/sig.*.0")" $1)
    ref=$(since_ms "$(max_mtime "$D/a/env.*.1" "$D/b/env.*.1")" $1)
}
# ranks_once ROUND WORLD: ranks 0..WORLD-1 each started exactly once in ROUND, over all hosts.
ranks_once() {
    local r
    for ((r = 0; r < $2; r++)); do [ "$(count "$D/[abc]/env.$r.$1")" = 1 ] || return 1; done
    [ "$(count "$D/[abc]/env.*.$1")" = "$2" ]
}
new_token() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }

# reachable ADDR PORT SERVER_HOST CLIENT_HOST...: a listener bound to ADDR:PORT on SERVER_HOST
# accepts a TCP connection from each client host.
reachable() {
    local addr=$1 port=$2 srv=$3 h lp rc=0
    shift 3
    command -v python3 >/dev/null || { echo "# python3 missing"; return 1; }
    on "$srv" timeout 10 python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("listening", flush=True)
s.settimeout(8)
for _ in range(int(sys.argv[3])):
    c, peer = s.accept()
    print("from", peer[0], flush=True)
    c.close()
' "$addr" "$port" $# >"$TMP/reach.out" 2>&1 &
    lp=$!
    LIVE[$lp]=1
    if wait_for "$TMP/reach.out" '^listening' 8; then
        for h; do
            on "$h" timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$addr" "$port" || {
                echo "# $P$h cannot connect to $addr:$port"
                rc=1
            }
        done
    else
        rc=1
    fi
    [ $rc = 0 ] || kill -KILL $lp 2>/dev/null
    wait $lp 2>/dev/null || rc=1
    unset "LIVE[$lp]"
    [ $rc = 0 ] || sed 's/^/#   /' "$TMP/reach.out"
    return $rc
}

# ------------------------------------------------------------------------------------ 1. forms
# Three hosts x 2 workers: one job of 6, the endpoint given by host name, host a hosts the store.
PORT=29401 RUN=form D=$TMP/form
export FW_SLEEP_MS=300
t=$(now_ms)
for h in $HOSTS; do agent $h 3 "$FW"; done
wait_all $HOSTS
echo "# 3-host job formed and finished in $(($(now_ms) - t)) ms"
check "3 hosts x 2 workers: every agent exits 0 ($(rcs $HOSTS))" all_rc 0 $HOSTS
check "6 workers, each with WORLD_SIZE=6" same_var WORLD_SIZE 6 "$D/[abc]/env.*.0"
check "ranks 0..5 each started once across the hosts" ranks_once 0 6
g0="" gr_ok=1 gseen=""
for h in $HOSTS; do
    gs=$(cat "$D/$h"/env.*.0 2>/dev/null | sed -n 's/^GROUP_RANK=//p' | sort -u)
    [ "$(count "$D/$h/env.*.0")" = 2 ] && [ "$(echo "$gs" | wc -w)" = 1 ] || gr_ok=0
    gseen="$gseen $gs"
    [ "$gs" = 0 ] && g0=$h
done
[ "$(echo $gseen | tr ' ' '\n' | sort -n | tr '\n' ' ')" = "0 1 2 " ] || gr_ok=0
check "each host runs 2 workers of one GROUP_RANK, group ranks 0,1,2 (a b c:$gseen)" [ $gr_ok = 1 ]
maddr=$(cat "$D"/[abc]/env.*.0 2>/dev/null | sed -n 's/^MASTER_ADDR=//p' | sort -u)
mport=$(cat "$D"/[abc]/env.*.0 2>/dev/null | sed -n 's/^MASTER_PORT=//p' | sort -u)
g0addr=$(addr_of "${g0:-none}")
check "one MASTER_ADDR for all, the address of group rank 0's host $P${g0:-?} ($maddr, expected ${g0addr:-?})" \
    cond '[ -n "$g0addr" ] && [ "$maddr" = "$g0addr" ] && [ "$(echo "$mport" | wc -w)" = 1 ]'
if [ -n "$g0" ] && [ -n "$g0addr" ] && [ "$maddr" = "$g0addr" ]; then
    others=$(for h in $HOSTS; do [ $h = "$g0" ] || echo $h; done)
    check "MASTER_ADDR:MASTER_PORT ($maddr:$mport) can be bound on $P$g0 and reached from the other hosts" \
        reachable "$maddr" "$mport" "$g0" $others
else
    not_ok "MASTER_ADDR:MASTER_PORT reachable from the other hosts (no consistent MASTER_ADDR)"
fi
hosting_ok() {
    grep -q "hosting the rendezvous store on $SUB.11:$PORT" "$D/a.out" &&
        ! grep -q "hosting the rendezvous store" "$D/b.out" "$D/c.out"
}
check "host a (the endpoint's address) hosts the store on $SUB.11:$PORT, b and c do not" hosting_ok
check "without a token: exactly one 'no job token' warning, from the hosting agent" \
    cond '[ "$(cat "$D"/[abc].out | grep -c "no job token")" = 1 ] && grep -q "no job token" "$D/a.out"'
unset FW_SLEEP_MS

# ------------------------------------------------------------------------------------ 1b. token
PORT=29402 RUN=token D=$TMP/token
export FW_SLEEP_MS=300 DDPRUN_TOKEN
DDPRUN_TOKEN=$(new_token)
for h in $HOSTS; do agent $h 3 "$FW"; done
wait_all $HOSTS
check "with DDPRUN_TOKEN on all 3 hosts: every agent exits 0 ($(rcs $HOSTS))" all_rc 0 $HOSTS
check "with a token: 6 workers with WORLD_SIZE=6, ranks 0..5 once" \
    cond 'same_var WORLD_SIZE 6 "$D/[abc]/env.*.0" && ranks_once 0 6'
check "with a token: no 'no job token' warning" \
    [ "$(cat "$D"/[abc].out | grep -c 'no job token')" = 0 ]
# A host with another token is refused; the other two form a job of 2 (min 2) without it.
PORT=29403 RUN=badtoken D=$TMP/badtoken
agent a 2:3 "$FW"
agent b 2:3 "$FW"
DDPRUN_TOKEN=$(new_token) agent c 2:3 "$FW"
wait_all $HOSTS
check "a wrong token on host c: c exits 1 ($(rcs c)), a and b run a job of 4 and exit 0 ($(rcs a b))" \
    cond 'all_rc 1 c && all_rc 0 a b && same_var WORLD_SIZE 4 "$D/[ab]/env.*.0" && [ "$(count "$D/c/env.*")" = 0 ]'
check "host c says its token was refused ($(grep -m1 -o 'E .*' "$D/c.out"))" grep -q 'refused the token' "$D/c.out"
unset FW_SLEEP_MS DDPRUN_TOKEN

# ------------------------------------------------------------------------------------ 2. SIGKILL
# SIGKILL of host c's agent (not the host of the store): a and b re-form as a job of 4.
PORT=29404 RUN=kill D=$TMP/kill
export FW_SLEEP_MS=2000
# bash reports a background job killed by a signal ("Killed") on its stderr: not for this one.
exec 3>&2 2>/dev/null
for h in $HOSTS; do agent $h 2:3 "$FW"; done
if wait_count 6 10 "$D/[abc]/env.*.0"; then
    kc=$(ddprun_of c)
    t0=$(now_ms)
    kill -KILL "$kc"
    survivors_reform $t0
fi
WAIT_S=10 wait_all $HOSTS
exec 2>&3 3>&-
echo "# SIGKILL of agent c: survivors stopped their workers after ${det:-?} ms, all 4 workers of the new round running after ${ref:-?} ms"
check "after SIGKILL of agent c, a and b finish (exit 0; c $(rcs c))" all_rc 0 a b
check "the survivors re-formed as one job of 4 (ranks 0..3 once, WORLD_SIZE=4)" \
    cond 'ranks_once 1 4 && same_var WORLD_SIZE 4 "$D/[ab]/env.*.1"'
check "SIGKILL detected within the keep-alive bound: ${det:-?} ms <= $KA_MS + $SLACK_MS ms" \
    le "${det:-999999}" $((KA_MS + SLACK_MS))
check "re-formed (new workers running) in ${ref:-?} ms <= $KA_MS + $LC_MS + $SLACK_MS ms" \
    le "${ref:-999999}" $((KA_MS + LC_MS + SLACK_MS))
check "the killed agent's workers are gone" workers_gone c 0
check "nothing left after the SIGKILL test" no_leftovers 3
unset FW_SLEEP_MS

# ------------------------------------------------------------------------------------ 3. link cut
# Host c's link goes down (its bridge port): a and b declare it dead after the keep-alive bound
# and carry on as a job of 4. c hears no answer to its heartbeats for as long: its network, as
# likely as the store, is at fault, so it keeps trying to reach the store (a's agent serves it)
# and, once the link is back, rejoins: the job scales up to 3 nodes again and all exit 0.
PORT=29405 RUN=cut D=$TMP/cut
export FW_SLEEP_MS=3500
for h in $HOSTS; do agent $h 2:3 "$FW"; done
det="" ref="" stale=""
if wait_count 6 10 "$D/[abc]/env.*.0"; then
    t0=$(now_ms)
    ip -n "${P}br" link set vc down
    survivors_reform $t0
    ip -n "${P}br" link set vc up
    t1=$(now_ms)
    # c's workers of a later round: it is back in the job.
    wait_count 1 6 "$D/c/env.*.[2-9]" && stale=$(($(now_ms) - t1))
fi
ip -n "${P}br" link set vc up 2>/dev/null
WAIT_S=15 wait_all $HOSTS
echo "# link of c cut: survivors stopped their workers after ${det:-?} ms, new round running after ${ref:-?} ms; c's workers ran again ${stale:-?} ms after the link came back (exit ${RC[c]})"
check "link of c cut: a and b finish as a job of 4 (exit 0: $(rcs a b))" \
    cond 'all_rc 0 a b && ranks_once 1 4 && same_var WORLD_SIZE 4 "$D/[ab]/env.*.1"'
# Its last heartbeat came at most one interval before the cut: it cannot be dead much earlier.
check "the silent host was detected by the keep-alive: $((KA_MS - KA_INTERVAL_MS)) - 10 <= ${det:-?} ms <= $KA_MS + $SLACK_MS ms" \
    cond 'le $((KA_MS - KA_INTERVAL_MS - 10)) "${det:-0}" && le "${det:-999999}" $((KA_MS + SLACK_MS))'
check "re-formed without it in ${ref:-?} ms <= $KA_MS + $LC_MS + $SLACK_MS ms" \
    le "${ref:-999999}" $((KA_MS + LC_MS + SLACK_MS))
rejoined() {
    grep -q 'reconnected to the rendezvous store' "$D/c.out" &&
        same_var WORLD_SIZE 6 "$D/[abc]/env.*.$1" && ranks_once "$1" 6
}
last=$(ls "$D"/c/env.*.* 2>/dev/null | sed 's/.*\.//' | sort -n | tail -1)
check "link back: c reconnects, a round of all 6 ranks runs (round ${last:-?}, ${stale:-?} ms after), all exit 0 ($(rcs $HOSTS))" \
    cond '[ -n "$stale" ] && all_rc 0 $HOSTS && rejoined "${last:-x}"'
check "c's workers of the round it was cut from are gone" workers_gone c 0
check "nothing left after the link test" no_leftovers 3
unset FW_SLEEP_MS

# ------------------------------------------------------------------------------------ 3b. SIGSTOP
PORT=29406 RUN=stop D=$TMP/stop
export FW_SLEEP_MS=2500
for h in $HOSTS; do agent $h 2:3 "$FW"; done
det="" ref="" stale=""
if wait_count 6 10 "$D/[abc]/env.*.0"; then
    sc=$(ddprun_of c)
    t0=$(now_ms)
    kill -STOP "$sc"
    survivors_reform $t0
    kill -CONT "$sc"
    t1=$(now_ms)
    wait_count 1 6 "$D/c/env.*.[2-9]" && stale=$(($(now_ms) - t1))
fi
WAIT_S=15 wait_all $HOSTS
echo "# agent c stopped: survivors stopped their workers after ${det:-?} ms, new round running after ${ref:-?} ms; c's workers ran again ${stale:-?} ms after SIGCONT (exit ${RC[c]})"
check "agent c stopped: a and b finish as a job of 4 (exit 0: $(rcs a b))" \
    cond 'all_rc 0 a b && ranks_once 1 4 && same_var WORLD_SIZE 4 "$D/[ab]/env.*.1"'
check "the stopped agent was detected by the keep-alive: $((KA_MS - KA_INTERVAL_MS)) - 10 <= ${det:-?} ms <= $KA_MS + $SLACK_MS ms" \
    cond 'le $((KA_MS - KA_INTERVAL_MS - 10)) "${det:-0}" && le "${det:-999999}" $((KA_MS + SLACK_MS))'
# The store (a's agent) closed the connection of the node it declared dead: on SIGCONT c sees it
# closed, finds the store still serving and rejoins, like a node whose link came back.
last=$(ls "$D"/c/env.*.* 2>/dev/null | sed 's/.*\.//' | sort -n | tail -1)
check "SIGCONT: c finds the store still serving and rejoins: a round of all 6 ranks (round ${last:-?}, ${stale:-?} ms after), all exit 0 ($(rcs $HOSTS))" \
    cond '[ -n "$stale" ] && all_rc 0 $HOSTS && rejoined "${last:-x}"'
check "the stopped agent's workers of its first round are gone" workers_gone c 0
unset FW_SLEEP_MS

# ------------------------------------------------------------------------------------ 3c. flap
# The link of host a, whose agent serves the store, is down for 4 s, within the keep-alive bound
# (0.5 s x 12 = 6 s): it must cost nothing. The heartbeats b and c sent into the outage are lost
# on the bridge, and TCP retransmits them on its exponential backoff (0.2, 0.4, 0.8, 1.7, 3.3,
# 6.9 s after the first send, on an idle link): the first copy after the link is back lands 6.9 s
# after it was sent, past the bound, whatever the phase of the cut (the 3.3 s copy is lost too).
# (A node whose own link is down retries every 0.5 s instead: the kernel sees the failure.) So b
# and c send BEAT_FOR on a fresh connection, which has no backoff to wait out.
PORT=29416 RUN=flap D=$TMP/flap
CONF_SAVED=$CONF
CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.5,keep_alive_max_attempt=12,close_timeout=10
export FW_SLEEP_MS=9000
for h in $HOSTS; do agent $h 3 "$FW"; done
cut=""
if wait_count 6 10 "$D/[abc]/env.*.0"; then
    sleep 1
    ip -n "${P}br" link set va down
    sleep 4
    ip -n "${P}br" link set va up
    cut=4
fi
ip -n "${P}br" link set va up 2>/dev/null
WAIT_S=20 wait_all $HOSTS
CONF=$CONF_SAVED
check "link of the store's host down ${cut:-?} s, inside the keep-alive bound: one round, all exit 0 ($(rcs $HOSTS))" \
    cond '[ -n "$cut" ] && all_rc 0 $HOSTS && ranks_once 0 6 && ! ls "$D"/[abc]/env.*.1 >/dev/null 2>&1'
check "b's and c's heartbeats went on a spare connection while their control connections retransmitted" \
    cond 'grep -q "heartbeats went on a spare connection" "$D/b.out" && grep -q "heartbeats went on a spare connection" "$D/c.out"'
unset FW_SLEEP_MS

# ------------------------------------------------------------------------------------ 4. scale-up
# a and b run a job of 4; c joins later: the job re-forms with all three (6 workers).
PORT=29407 RUN=scale D=$TMP/scale
export FW_SLEEP_MS=2500 FW_TERM_EXIT=143
agent a 2:3 "$FW"
agent b 2:3 "$FW"
ref=""
if wait_count 4 10 "$D/[ab]/env.*.0"; then
    t0=$(now_ms)
    agent c 2:3 "$FW"
    wait_count 6 5 "$D/[abc]/env.*.1" && ref=$(since_ms "$(max_mtime "$D/[abc]/env.*.1")" $t0)
fi
WAIT_S=10 wait_all $HOSTS
echo "# scale-up: all 6 workers of the grown job running ${ref:-?} ms after c started"
check "scale-up: every agent exits 0 ($(rcs $HOSTS))" all_rc 0 $HOSTS
check "the first round was a job of 4 on a and b" cond 'same_var WORLD_SIZE 4 "$D/[ab]/env.*.0" && ranks_once 0 4'
check "the next round is a job of 6 on all three hosts" cond 'same_var WORLD_SIZE 6 "$D/[abc]/env.*.1" && ranks_once 1 6'
no_restart_counted() { ! grep -q '^TORCHELASTIC_RESTART_COUNT=[1-9]' "$D"/[abc]/env.*; }
check "scale-up did not count as a restart" no_restart_counted
unset FW_SLEEP_MS FW_TERM_EXIT

# ------------------------------------------------------------------------------------ 5. failure
# Rank 5 fails once: every host's group restarts (TORCHELASTIC_RESTART_COUNT=1 everywhere).
PORT=29408 RUN=fail D=$TMP/fail
export FW_RANK=5 FW_EXIT=1 FW_FAIL_ATTEMPTS=1 FW_SLEEP_MS=300
for h in $HOSTS; do agent $h 3 --max_restarts=1 "$FW"; done
wait_all $HOSTS
check "a worker failure on one host, max_restarts=1: every agent exits 0 ($(rcs $HOSTS))" all_rc 0 $HOSTS
restarted_everywhere() {
    local h
    for h in $HOSTS; do
        [ "$(grep -l '^TORCHELASTIC_RESTART_COUNT=1$' "$D/$h"/env.*.1 2>/dev/null | wc -l)" = 2 ] || return 1
    done
    ranks_once 1 6
}
check "all 6 workers of the second round, on every host, see TORCHELASTIC_RESTART_COUNT=1" restarted_everywhere
unset FW_RANK FW_EXIT FW_FAIL_ATTEMPTS FW_SLEEP_MS
check "nothing left after the failure test" no_leftovers 3

# ------------------------------------------------------------------------------------ 6. train
# 2 hosts x 1 worker: the CPU backend's node leaders talk over TCP across the bridge.
PORT=29409 RUN=train D=$TMP/train
t=$(now_ms)
NPROC=1 agent a 2 "$TRAIN" --epochs 1 --samples 2048 --backend cpu --check-sync
NPROC=1 agent b 2 "$TRAIN" --epochs 1 --samples 2048 --backend cpu --check-sync
WAIT_S=25 wait_all a b
echo "# train across 2 hosts: $(($(now_ms) - t)) ms; $(grep -ho 'eval_accuracy [0-9.]*' "$D"/[ab].out | head -1)"
if all_rc 0 a b; then
    ok "train --epochs 1 --samples 2048 across 2 hosts x 1 worker exits 0 on both"
    check "train ran as a world of 2 and evaluated" \
        cond 'cat "$D"/[ab].out | grep -q "world 2, backend cpu" && cat "$D"/[ab].out | grep -q "eval_accuracy"'
else
    sed 's/^/#   /' "$D/a.out" "$D/b.out" | tail -30
    not_ok "train --epochs 1 --samples 2048 across 2 hosts x 1 worker ($(rcs a b))"
fi

# ------------------------------------------------------------------------------------ 6b. torch
# 2 hosts x 1 worker of real PyTorch (Debian's 1.13 and TORCH_PYTHON's 2.x, each that is here):
# a DDP step over gloo across the bridge; rank 1 fails attempt 0 after every rank initialised and
# both groups restart. With the agent's store (default) every rank is a client of the workers'
# store group rank 0's agent serves (it answers ddprun's STATS at MASTER_PORT) and attempt 1 sees
# none of attempt 0's keys; with --worker_store=own rank 0 hosts a TCPStore at MASTER_PORT.
HELPERS=$(cd "$(dirname "$0")/../helpers" && pwd)
tpys=()
for py in /usr/bin/python3 ${TORCH_PYTHON:-}; do
    "$py" -c 'import torch.distributed' 2>/dev/null && tpys+=("$py")
done
[ ${#tpys[@]} -gt 0 ] || skip "PyTorch DDP across 2 hosts" "no python3 here imports torch.distributed"
PORT=29411
for py in "${tpys[@]}"; do
    v="torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    for mode in agent own; do
        RUN=torch$((PORT - 29411)) D=$TMP/torch$((PORT - 29411))
        args=(--fail 1:0) what="group rank 0's agent serves the store"
        [ $mode = agent ] && args+=(--expect-agent-store)
        [ $mode = own ] && what="--worker_store=own, rank 0 hosts the store"
        t=$(now_ms)
        export PYTHON_EXEC=$py
        for h in a b; do
            NPROC=1 agent $h 2 --max_restarts=1 --worker_store=$mode \
                "$HELPERS/torch_ddp_step.py" "${args[@]}"
        done
        WAIT_S=$AGENT_LIMIT wait_all a b
        unset PYTHON_EXEC
        echo "# $v DDP across 2 hosts with a restart, --worker_store=$mode: $(($(now_ms) - t)) ms"
        if all_rc 0 a b && [ "$(cat "$D"/[ab].out | grep -c '^ddp rank [01]/2 attempt 1 ok$')" = 2 ] &&
            grep -q "rank 1 fails attempt 0 on purpose" "$D"/[ab].out; then
            ok "$v: DDP step across 2 hosts restarted after a failure ($what)"
        else
            sed 's/^/#   /' "$D/a.out" "$D/b.out" | grep -v '^# *$' | tail -30
            not_ok "$v: DDP step across 2 hosts restarted after a failure ($what; $(rcs a b))"
        fi
        PORT=$((PORT + 1))
    done
done
check "nothing left after the PyTorch jobs" no_leftovers 2

# ------------------------------------------------------------------------------------ 6c. k8s
# Kubernetes' ways of launching torchrun, each with the environment its operator documents, on
# hosts standing for the pods (KUBERNETES_SERVICE_HOST is set as in every pod; nothing contacts
# it). ddprun gets no job-shape flag where the operator gives none.
# pod H OUT ENV... -- ARGS...: ddprun in host H's namespaces with ENV, in the background.
pod() {
    local h=$1 out=$2 envs=()
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    mkdir -p "$D/$h"
    FW_DIR=$D/$h nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" env "${envs[@]}" \
        KUBERNETES_SERVICE_HOST=10.96.0.1 timeout -k 3 $AGENT_LIMIT "$DDPRUN" -v "$@" \
        >"$out" 2>&1 &
    PID[$h]=$!
    LIVE[$!]=1
}
# A PyTorchJob with a Master replica (non-elastic): the operator sets MASTER_ADDR (the master
# pod's name), MASTER_PORT, WORLD_SIZE (pods) and RANK (master 0, worker i at i + 1).
D=$TMP/pytorchjob
for h in a b; do
    r=$([ $h = a ] && echo 0 || echo 1)
    pod $h "$D/$h.out" MASTER_ADDR="${P}a" MASTER_PORT=29414 WORLD_SIZE=2 RANK=$r \
        PYTHONUNBUFFERED=0 -- "$FW"
done
wait_all a b
pj_ok() {
    all_rc 0 a b && same_var WORLD_SIZE 2 "$D/[ab]/env.*.0" &&
        grep -qx GROUP_RANK=0 "$D/a/env.0.0" && grep -qx GROUP_RANK=1 "$D/b/env.1.0" &&
        grep -q "kubernetes PyTorchJob: nnodes=2 from WORLD_SIZE" "$D/b.out" &&
        grep -q "kubernetes PyTorchJob: node_rank=1 from RANK" "$D/b.out"
}
check "PyTorchJob (non-elastic) environment, no flags: 2 pods form the job, GROUP_RANK = RANK" pj_ok
pj_ok || sed 's/^/#   /' "$D/a.out" "$D/b.out" | tail -12
# An Indexed Job (or a JobSet's pods): JOB_COMPLETION_INDEX is the node rank; the manifest gives
# the size and the endpoint (the first pod's headless-service name).
D=$TMP/indexed RUN=indexed
for h in a b; do
    i=$([ $h = a ] && echo 0 || echo 1)
    pod $h "$D/$h.out" JOB_COMPLETION_INDEX=$i -- --nnodes=2 --rdzv_backend=c10d \
        --rdzv_endpoint="${P}a:29415" --rdzv_id=indexed --rdzv_conf="$CONF" "$FW"
done
wait_all a b
ij_ok() {
    all_rc 0 a b && grep -qx GROUP_RANK=0 "$D/a/env.0.0" && grep -qx GROUP_RANK=1 "$D/b/env.1.0" &&
        grep -q "kubernetes Indexed Job: node_rank=1 from JOB_COMPLETION_INDEX" "$D/b.out"
}
check "Indexed Job: GROUP_RANK = JOB_COMPLETION_INDEX on each pod, the job forms" ij_ok
ij_ok || sed 's/^/#   /' "$D/a.out" "$D/b.out" | tail -12
check "nothing left after the Kubernetes jobs" no_leftovers 2

# ------------------------------------------------------------------------------------ 7. hang
# 2 hosts x 1 worker: rank 1 stops beating in the first attempt (alive, asleep). Its agent takes
# its stacks and ends the round for both hosts; both groups restart and finish.
PORT=29410 RUN=hang D=$TMP/hang
mkdir -p "$D"
cat >"$D/beat.sh" <<'EOF'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >>"$FW_DIR/attempts"
echo 0 >"$DDPRUN_HEARTBEAT_FILE"
[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 600
n=4; [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && n=60
i=0
while [ $i -lt $n ]; do i=$((i + 1)); echo $i >"$DDPRUN_HEARTBEAT_FILE"; sleep 0.25; done
EOF
chmod +x "$D/beat.sh"
for h in a b; do NPROC=1 agent $h 2 --max_restarts=1 --heartbeat_timeout=1 --stacks_timeout=5 "$D/beat.sh"; done
WAIT_S=25 wait_all a b
attempts_ok() { [ "$(tr '\n' ' ' <"$D/$1/attempts" 2>/dev/null)" = "0 1 " ]; }
if all_rc 0 a b && attempts_ok a && attempts_ok b; then
    ok "a hung worker on one host: both hosts restart once and exit 0"
else
    sed 's/^/#   /' "$D/a.out" "$D/b.out" | tail -30
    not_ok "a hung worker on one host: both hosts restart once and exit 0 ($(rcs a b); attempts a: $(tr '\n' ' ' <"$D/a/attempts" 2>/dev/null), b: $(tr '\n' ' ' <"$D/b/attempts" 2>/dev/null))"
fi
check "the hung worker's host says which rank hung and why" \
    cond 'cat "$D"/[ab].out | grep -qE "rank 1 \(local 0, pid [0-9]+\) hung: no heartbeat for"'
check "nothing left after the hang test" no_leftovers 3

# ------------------------------------------------------------------------------------ the end
check "nothing left running (tagged processes)" no_leftovers 3
check "no process left in any of our namespaces" ns_empty
teardown
[ -n "${NETNS_KEEP:-}" ] && mkdir -p "$NETNS_KEEP" && cp -r "$TMP"/. "$NETNS_KEEP"/ 2>/dev/null
check "namespaces removed (bridge and veths with them)" ns_gone
finish
