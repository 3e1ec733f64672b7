#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 26
# Quarantine and spares across real network hosts: four hosts a b c d made of network namespaces
# (netns_job.sh, as test_netns.sh uses them), one ddprun per host, host a's agent serving the
# store. Checks: a host whose workers always fail is excluded after max_node_failures=2 group
# failures, its agent leaves with a line naming the exclusion, a spare (d, beyond --nnodes' max)
# takes its place and the job ends with exit 0 after exactly 2 restarts, `ddprun status` showing
# the spare and the excluded host; train with a sick host ends with the parameters of a run that
# never met it; at min_nodes the host is kept and max_restarts ends the run as without the bound;
# a spare outlives many keep-alive bounds by joining again, and when a member is SIGKILLed it
# takes the place without the others waiting for last_call_timeout; a spare never needed leaves
# with exit 0 once the others pass their exit barrier (FINISH); a host whose --health_check
# fails never joins (the store shows it unfit) and leaves with exit 4 while the others run; the
# store's own host excluded keeps serving the store to the end; nothing is left running in any
# namespace, and the namespaces are always removed, also on failure or SIGTERM.
#
# Needs root and `ip netns`; otherwise every check is reported as skipped.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
TRAIN=$BIN/train
fake_worker_env_clear
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE

# Fast timeouts: keep-alive bound 0.2 s x 3 = 600 ms, rounds close 300 ms after min nodes.
CONF_FAST=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=3,close_timeout=5
KA_MS=600
# What a loaded 2-core CI machine may add to a bound (scheduling, worker stop and start).
SLACK_MS=${NETNS_SLACK_MS:-700}
AGENT_LIMIT=30
# The exit status of an agent whose host the store excluded: the node is unfit.
EXIT_UNFIT=4

SECTIONS=("a failing host is excluded, a spare takes its place"
    "train with a sick host ends with the parameters of a run without it"
    "exclusion never drops the job below min_nodes" "a spare's keep-alive, and its place after a SIGKILL"
    "a spare never needed leaves with exit 0" "a crash loop backs off: a late spare replaces the host"
    "a host whose health check fails never joins"
    "the store's own host excluded"
    "nothing left, namespaces removed")

[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for c in ip nsenter unshare timeout python3; do
    command -v $c >/dev/null || skip_all "$c is missing"
done

HOSTS="a b c d"
. "$(dirname "$0")/netns_job.sh"
netns_job_setup || skip_all "$NETNS_SETUP_WHY"

# status_json OUT: `ddprun status --json` of the run, asked from host b; 0 when it answered.
status_json() {
    on b timeout 5 "$DDPRUN" status --rdzv_endpoint="${P}a:$PORT" --rdzv_id="$RUN" --json \
        --timeout 3 >"$1" 2>&1
}
# json FILE EXPR: prints the Python expression EXPR over the JSON in FILE (as s), empty when the
# file is not JSON. `member(h)` is host h's member record, `host(h)` its host record.
json() {
    python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(1)
addr = dict(a.split("=") for a in sys.argv[3:])
def member(h):
    return next((m for m in s.get("members", []) if m.get("host") == addr[h]), {})
def host(h):
    return next((x for x in s.get("hosts", []) if x.get("host") == addr[h]), {})
print(eval(sys.argv[2]))
' "$1" "$2" $(for h in $HOSTS; do echo "$h=$(addr_of $h)"; done) 2>/dev/null
}
# wait_status OUT SECS EXPR: asks for the status until EXPR is True (at most SECS seconds).
wait_status() {
    local end=$(($(now_ms) + $2 * 1000))
    while [ "$(now_ms)" -lt $end ]; do
        status_json "$1" && [ "$(json "$1" "$3")" = True ] && return 0
        sleep 0.05
    done
    echo "# status never had $3:"
    sed 's/^/#   /' "$1" | cut -c1-600
    return 1
}
# rounds_of H: the rounds host H's workers ran in (from their env files), space-separated.
rounds_of() {
    compgen -G "$D/$1/env.*" | sed 's/.*\.//' | sort -n | uniq | tr '\n' ' ' | sed 's/ $//'
}
# group_ranks ROUND H...: each host's GROUP_RANK in ROUND, "h=r" space-separated.
group_ranks() {
    local r=$1 h s=""
    shift
    for h; do s="$s$h=$(cat "$D/$h"/env.*."$r" 2>/dev/null | sed -n 's/^GROUP_RANK=//p' | sort -u | tr '\n' ,) "; done
    echo "${s% }"
}
# round_is ROUND WORLD H...: the workers of ROUND ran on exactly hosts H (one each, NPROC=1) with
# WORLD_SIZE=WORLD and distinct group ranks 0..WORLD-1, and on no other host.
round_is() {
    local r=$1 w=$2 h ranks=""
    shift 2
    [ "$(count "$D"/[abcd]/env.*."$r")" = $# ] || return 1
    for h; do
        [ "$(count "$D/$h/env.*.$r")" = 1 ] || return 1
        ranks="$ranks $(env_of "$D/$h"/env.*."$r" GROUP_RANK)"
    done
    same_var WORLD_SIZE "$w" "$D/[abcd]/env.*.$r" &&
        [ "$(echo $ranks | tr ' ' '\n' | sort -n | tr '\n' ' ')" = "$(seq 0 $(($# - 1)) | tr '\n' ' ')" ]
}
# outs_say REGEX H...: some host's output among H matches REGEX.
outs_say() {
    local re=$1 h
    shift
    for h; do grep -qE "$re" "$D/$h.out" && return 0; done
    return 1
}
# by_round MS: writes $D/worker.sh, a fake worker that sleeps FW_SLEEP_MS in the rounds below
# SLOW_ROUNDS (default 1) and MS in the later ones, so that a job ends soon after the rounds under
# test.
by_round() {
    cat >"$D/worker.sh" <<EOF
#!/bin/sh
[ "\${DDPRUN_ROUND:-0}" -lt "\${SLOW_ROUNDS:-1}" ] || FW_SLEEP_MS=$1
export FW_SLEEP_MS
exec "$FW" "\$@"
EOF
    chmod +x "$D/worker.sh"
}
CADDR=$(addr_of c)
CADDR_RE=${CADDR//./\\.}

# ------------------------------------------------------------------------------------ 1. excluded
# --nnodes=2:3 on a b c, host c's workers fail 2 s into every round, max_node_failures=2 and
# room for 5 restarts. d starts once round 1 runs: it is beyond max, a spare. c's second failure
# excludes it (a, b and the spare d still number min 2); round 2 closes at max with a b d at
# once, and its workers end the job.
PORT=29451 RUN=sick D=$TMP/sick
mkdir -p "$D"
CONF=$CONF_FAST,max_node_failures=2
by_round 1500
export FW_SLEEP_MS=5000 SLOW_ROUNDS=2
t=$(now_ms)
NPROC=1 agent a 2:3 --max_restarts=5 "$D/worker.sh"
NPROC=1 agent b 2:3 --max_restarts=5 "$D/worker.sh"
NPROC=1 FW_EXIT=1 FW_DELAY_MS=2000 agent c 2:3 --max_restarts=5 "$D/worker.sh"
spare_seen=0 excl_seen=0
if wait_count 3 10 "$D/[abc]/env.*.1"; then
    NPROC=1 agent d 2:3 --max_restarts=5 "$D/worker.sh"
    wait_status "$D/st_spare.json" 3 'member("d").get("state") == "spare"' && spare_seen=1
    wait_count 3 8 "$D/[abd]/env.*.2" &&
        wait_status "$D/st_excl.json" 3 'host("c").get("excluded") is True' && excl_seen=1
fi
WAIT_S=20 wait_all a b c d
echo "# failing host c: job of a b d done in $(($(now_ms) - t)) ms; c ran rounds $(rounds_of c), d rounds $(rounds_of d)"
check "a b d exit 0 ($(rcs a b d))" all_rc 0 a b d
check "c's agent leaves with exit $EXIT_UNFIT, node unfit ($(rcs c))" all_rc $EXIT_UNFIT c
check "c says it is excluded after 2 group failures (max_node_failures=2): $(grep -m1 -o "host $CADDR_RE is excluded.*" "$D/c.out" | cut -c1-120)" \
    grep -qE "host $CADDR_RE is excluded after 2 group failures \(max_node_failures=2\); the last: round 1: " "$D/c.out"
check "c's workers ran in rounds 0 and 1 only ($(rounds_of c))" [ "$(rounds_of c)" = "0 1" ]
check "the others heard why round 1 ended: host $CADDR excluded after 2 failures" \
    outs_say "round 1 ended: .*host $CADDR_RE excluded after 2 failures \(max_node_failures=2\)" a b
check "d waited as a spare while a b c ran round 1 (status: $(json "$D/st_spare.json" 'member("d").get("state")'))" \
    cond '[ $spare_seen = 1 ] && grep -q "waiting as a spare" "$D/d.out"'
check "the final round 2 ran on a b d, WORLD_SIZE=3, group ranks 0..2 ($(group_ranks 2 a b d))" round_is 2 3 a b d
check "no round after 2 (rounds: a $(rounds_of a), d $(rounds_of d))" cond '[ "$(count "$D"/[abcd]/env.*.[3-9])" = 0 ]'
check "exactly 2 restarts: round 2's workers see TORCHELASTIC_RESTART_COUNT=2" \
    same_var TORCHELASTIC_RESTART_COUNT 2 "$D/[abd]/env.*.2"
check "ddprun status shows c excluded with 2 failures, restarts_used 2 ($(json "$D/st_excl.json" 'host("c")'))" \
    cond '[ $excl_seen = 1 ] && [ "$(json "$D/st_excl.json" "(host(\"c\").get(\"failures\"), s.get(\"restarts_used\"))")" = "(2, 2)" ]'
all_rc 0 a b d && all_rc $EXIT_UNFIT c || show_tail "$D/a.out" "$D/c.out" "$D/d.out"
unset FW_SLEEP_MS SLOW_ROUNDS
check "nothing left after the exclusion test" no_leftovers 3

# ------------------------------------------------------------------------------------ 2. train
# train on a b c (1 worker each, CPU backend), --nnodes=2:3; on host c every worker fails at
# once (its wrapper exits 1 there: a node whose GPU or disk is gone). After 2 failures c is
# excluded and a b train as a world of 2. Their final parameters must be bitwise those of a run
# on a b alone, which never met c (train starts afresh each round: no checkpoint directory).
D=$TMP/sick_train
mkdir -p "$D"
cat >"$TMP/sick.sh" <<EOF
#!/bin/sh
if [ "\$(hostname)" = "${P}c" ]; then echo "sick host \$(hostname): worker fails" >&2; exit 1; fi
exec "$TRAIN" "\$@"
EOF
chmod +x "$TMP/sick.sh"
TARGS=(--layers 16,32,4 --samples 1024 --batch-size 32 --epochs 2 --eval-samples 256 --backend cpu
    --check-sync)
PORT=29452 RUN=trainsick
CONF=$CONF_FAST,max_node_failures=2
t=$(now_ms)
for h in a b c; do
    NPROC=1 agent $h 2:3 --max_restarts=5 "$TMP/sick.sh" "${TARGS[@]}" --dump-params "$D/p.{rank}.bin"
done
WAIT_S=25 wait_all a b c
echo "# train with a sick host: $(($(now_ms) - t)) ms, c's worker failed $(grep -c "worker fails" "$D/c.out") times"
if all_rc 0 a b && all_rc $EXIT_UNFIT c; then
    ok "train with sick host c: a b exit 0, c exits $EXIT_UNFIT ($(rcs a b c))"
else
    not_ok "train with sick host c: a b exit 0, c exits $EXIT_UNFIT ($(rcs a b c))"
    show_tail "$D/a.out" "$D/c.out"
fi
check "c was excluded after 2 failures: $(grep -m1 -o 'host [0-9.]* is excluded.*' "$D/c.out" | cut -c1-100)" \
    grep -qE "host $CADDR_RE is excluded after 2 group failures" "$D/c.out"
check "the sick run's last round trained as a world of 2" outs_say "train: world 2, backend cpu" a b
SICK=$D
PORT=29453 RUN=trainref CONF=$CONF_FAST D=$TMP/ref_train
t=$(now_ms)
for h in a b; do NPROC=1 agent $h 2 "$TRAIN" "${TARGS[@]}" --dump-params "$D/p.{rank}.bin"; done
WAIT_S=25 wait_all a b
echo "# the reference run on a b: $(($(now_ms) - t)) ms"
check "the reference run on a b alone exits 0 ($(rcs a b))" all_rc 0 a b
check "final parameters: both ranks equal, and bitwise equal to the run that never met c" \
    cond 'cmp -s "$SICK/p.0.bin" "$SICK/p.1.bin" && cmp -s "$D/p.0.bin" "$D/p.1.bin" &&
        cmp -s "$SICK/p.0.bin" "$D/p.0.bin" && [ -s "$D/p.0.bin" ]'
check "nothing left after the train runs" no_leftovers 3

# ------------------------------------------------------------------------------------ 3. at min
# --nnodes=2:2 on a and c, c's workers fail 0.7 s into every round, max_node_failures=2,
# max_restarts=3: without c the job would stop, so c stays; the restart budget ends the run as
# without the bound (exit 1 everywhere) and says which host failed.
PORT=29454 RUN=atmin D=$TMP/atmin
CONF=$CONF_FAST,max_node_failures=2
export FW_SLEEP_MS=5000
NPROC=1 agent a 2:2 --max_restarts=3 "$FW"
NPROC=1 FW_EXIT=1 FW_DELAY_MS=700 agent c 2:2 --max_restarts=3 "$FW"
kept_seen=0
wait_count 2 10 "$D/[ac]/env.*.2" &&
    wait_status "$D/st_kept.json" 2 'host("c").get("kept_at_min") is True' && kept_seen=1
WAIT_S=20 wait_all a c
unset FW_SLEEP_MS
echo "# at min: c ran rounds $(rounds_of c); $(grep -m1 -o "max_restarts ([0-9]*) spent.*" "$D/a.out" | cut -c1-100)"
check "at min_nodes: every agent exits 1 ($(rcs a c))" all_rc 1 a c
check "c was never excluded: no exclusion refusal, its workers ran in all 4 rounds ($(rounds_of c))" \
    cond '! grep -q "is excluded after" "$D/a.out" "$D/c.out" && [ "$(rounds_of c)" = "0 1 2 3" ]'
check "round 1 ended with c kept: 2 failures, but stays: without it 1 of min 2 nodes" \
    outs_say "round 1 ended: .*host $CADDR_RE has 2 failures \(max_node_failures=2\) but stays: without it 1 of min 2 nodes" a c
check "ddprun status: c kept at min with its failures ($(json "$D/st_kept.json" 'host("c")'))" \
    cond '[ $kept_seen = 1 ] && [ "$(json "$D/st_kept.json" "host(\"c\").get(\"excluded\")")" = False ]'
check "max_restarts (3) ends the run and names c's failure" \
    outs_say "max_restarts \(3\) spent; last failure: node [0-9]+ \($CADDR_RE\) round 3: " a
check "c's summary names its failed rank as the root cause" \
    cond 'grep -q "Root Cause" "$D/c.out" && grep -q "exitcode  *: 1" "$D/c.out"'
check "nothing left after the test at min" no_leftovers 3

# ------------------------------------------------------------------------------------ 4. spare
# --nnodes=2:3 on a b c with join_timeout=2 and a long last_call_timeout (5 s); d is a spare. It
# waits longer than join_timeout, 4.5 keep-alive bounds: the store answers it each bound and it
# joins again, so it is neither dropped nor timed out, and its --health_check runs before each of
# those JOINs (it counts itself in a file). Then c's agent is SIGKILLed: round 0 ends, and round 1
# closes at max with a b d as soon as a and b are back, where without the spare they would wait out
# last_call_timeout and go on alone.
PORT=29455 RUN=spare D=$TMP/spare
mkdir -p "$D"
LC_LONG_MS=5000 JOIN_TIMEOUT_MS=2000
CONF=last_call_timeout=5,join_timeout=2,keep_alive_interval=0.2,keep_alive_max_attempt=3,close_timeout=5
by_round 1000
export FW_SLEEP_MS=8000
for h in a b c; do NPROC=1 agent $h 2:3 "$D/worker.sh"; done
waited="" silent="" ref="" spare_ok=0 checks=0
exec 3>&2 2>/dev/null
if wait_count 3 10 "$D/[abc]/env.*.0"; then
    NPROC=1 agent d 2:3 --health_check "echo >>$D/d.checks" "$D/worker.sh"
    if wait_status "$D/st1.json" 3 'member("d").get("state") == "spare"'; then
        t_spare=$(now_ms)
        sleep 2.7
        status_json "$D/st2.json"
        waited=$(($(now_ms) - t_spare))
        silent=$(json "$D/st2.json" 'member("d").get("silent_ms")')
        [ "$(json "$D/st2.json" 'member("d").get("state")')" = spare ] && spare_ok=1
        checks=$(wc -l <"$D/d.checks")
    fi
    kc=$(ddprun_of c)
    t0=$(now_ms)
    kill -KILL "$kc"
    wait_count 3 8 "$D/[abd]/env.*.1" && ref=$(since_ms "$(max_mtime "$D/[abd]/env.*.1")" $t0)
fi
WAIT_S=15 wait_all a b c d
exec 2>&3 3>&-
echo "# spare d: still a spare after ${waited:-?} ms, last heard ${silent:-?} ms before; after SIGKILL of c, round 1 running after ${ref:-?} ms"
check "ddprun status lists d as a spare, and still after ${waited:-?} ms (join_timeout $JOIN_TIMEOUT_MS ms, keep-alive bound $KA_MS ms)" \
    cond '[ $spare_ok = 1 ] && le $JOIN_TIMEOUT_MS "${waited:-0}"'
check "the spare joined again within a keep-alive bound: last heard ${silent:-?} ms <= $KA_MS + $SLACK_MS ms before" \
    le "${silent:-999999}" $((KA_MS + SLACK_MS))
check "the spare's health check ran before each JOIN again: $checks times in ${waited:-?} ms" \
    le 3 "$checks"
check "after SIGKILL of c, round 1 runs on a b d (WORLD_SIZE=3, group ranks $(group_ranks 1 a b d))" round_is 1 3 a b d
check "the spare took c's place in ${ref:-?} ms <= keep-alive bound $KA_MS + $SLACK_MS ms (last_call_timeout $LC_LONG_MS ms)" \
    le "${ref:-999999}" $((KA_MS + SLACK_MS))
check "a b d exit 0 ($(rcs a b d))" all_rc 0 a b d
all_rc 0 a b d || show_tail "$D/a.out" "$D/d.out"
check "the killed agent's workers are gone" workers_gone c 0
unset FW_SLEEP_MS
check "nothing left after the spare test" no_leftovers 3

# ------------------------------------------------------------------------------------ spare at the end
# --nnodes=2:2 on a b, c a spare that is never needed: a and b pass the exit barrier, the first
# FINISH makes the run DONE, and c leaves with exit 0 saying the run finished, its workers never
# started; the store host (a) does not wait for it. Without FINISH c would be left joining a run
# whose members hang up (and form a round of its own, or time out with exit 1).
PORT=29458 RUN=spareend D=$TMP/spareend
mkdir -p "$D"
CONF=$CONF_FAST
export FW_SLEEP_MS=1500
for h in a b; do NPROC=1 agent $h 2:2 "$FW"; done
exec 3>&2 2>/dev/null
wait_count 2 10 "$D/[ab]/env.*.0" && NPROC=1 agent c 2:2 "$FW"
WAIT_S=15 wait_all a b c
exec 2>&3 3>&-
unset FW_SLEEP_MS
check "a spare never needed: a b exit 0, c exits 0 too ($(rcs a b c)), its workers never ran" \
    cond 'all_rc 0 a b c && [ "$(count "$D/c/env.*")" = 0 ]'
check "c says the run finished without it" \
    grep -q "rendezvous '$RUN' finished: round 0 passed its exit barrier" "$D/c.out"
check "nothing left after the spare-at-the-end test" no_leftovers 3

# ------------------------------------------------------------------------------------ crash loop
# --nnodes=2:2 on a b, --max_restarts=10, max_node_failures=2; b's workers fail at once in every
# round. The store backs the crash loop off (restart 1 at once, then 100 ms doubling), so the ten
# restarts take seconds, not milliseconds: spare c, started a second after round 0, is there when
# b fails again, b is excluded, and the job ends on a c with exit 0 (without the back-off the
# restarts were spent before c came, and every node failed).
PORT=29459 RUN=loop D=$TMP/loop
mkdir -p "$D"
CONF=$CONF_FAST,max_node_failures=2
export FW_SLEEP_MS=1000
NPROC=1 agent a 2:2 --max_restarts=10 "$FW"
NPROC=1 FW_EXIT=1 agent b 2:2 --max_restarts=10 "$FW"
exec 3>&2 2>/dev/null
# Each host's first start, whatever its round: b's failure can stop a's round-0 worker before it
# writes its file, and the next round starts at once.
if wait_count 1 10 "$D/a/env.*" && wait_count 1 10 "$D/b/env.*"; then
    sleep 1
    NPROC=1 agent c 2:2 --max_restarts=10 "$FW"
fi
WAIT_S=30 wait_all a b c
exec 2>&3 3>&-
unset FW_SLEEP_MS
last=$(rounds_of a | awk '{print $NF}')
echo "# crash loop: b ran rounds $(rounds_of b); a ran $(rounds_of a); c ran $(rounds_of c)"
check "a crash loop backs off: the spare c, a second late, replaces b; a c exit 0, b exits $EXIT_UNFIT ($(rcs a b c))" \
    cond 'all_rc 0 a c && all_rc $EXIT_UNFIT b && round_is "${last:-x}" 2 a c'
all_rc 0 a c && all_rc $EXIT_UNFIT b || show_tail "$D/a.out" "$D/b.out" "$D/c.out"
check "nothing left after the crash-loop test" no_leftovers 3

# ------------------------------------------------------------------------------------ health checks
# --nnodes=2:3 on a b c; c's --health_check fails (exit 7, "no IB link"): c never joins, the store
# shows it unfit with the reason (UNFIT), a and b form the job of 2 after last_call_timeout and exit
# 0, and c leaves with exit 4 at join_timeout (4 s), its workers never started.
PORT=29456 RUN=health D=$TMP/health
mkdir -p "$D"
CONF=last_call_timeout=0.3,join_timeout=4,keep_alive_interval=0.2,keep_alive_max_attempt=3,close_timeout=5
export FW_SLEEP_MS=3000
NPROC=1 agent a 2:3 --health_check 'exit 0' "$FW"
NPROC=1 agent b 2:3 "$FW"
NPROC=1 agent c 2:3 --health_check 'echo no IB link; exit 7' "$FW"
unfit_seen=0
exec 3>&2 2>/dev/null
wait_count 2 10 "$D/[ab]/env.*.0" &&
    wait_status "$D/st_unfit.json" 5 'host("c").get("unfit") is True' && unfit_seen=1
WAIT_S=15 wait_all a b c
exec 2>&3 3>&-
unset FW_SLEEP_MS
echo "# health: c's record $(json "$D/st_unfit.json" 'host("c")')"
check "a host whose check fails never joins: a b run a job of 2 and exit 0 ($(rcs a b)), c ran nothing" \
    cond 'all_rc 0 a b && round_is 0 2 a b && [ "$(count "$D/c/env.*")" = 0 ]'
check "ddprun status shows c unfit with its check's reason" \
    cond '[ $unfit_seen = 1 ] && json "$D/st_unfit.json" "host(\"c\").get(\"reason\")" | grep -q "exit status 7; output: no IB link"'
check "c leaves with exit $EXIT_UNFIT at join_timeout ($(rcs c)), saying why" \
    cond 'all_rc $EXIT_UNFIT c && grep -q "this node is unfit: its health check failed" "$D/c.out"'
check "nothing left after the health-check test" no_leftovers 3

# ------------------------------------------------------------------------------------ store host
# The sick host is the one whose agent serves the store (a): it is excluded, yet the run goes on on
# its store. a's agent keeps serving it with no worker until b, c and the spare d are done, then
# leaves with exit 4; b c d exit 0.
PORT=29457 RUN=storehost D=$TMP/storehost
mkdir -p "$D"
CONF=$CONF_FAST,max_node_failures=1
by_round 500
export FW_SLEEP_MS=3000
NPROC=1 FW_EXIT=1 FW_DELAY_MS=500 agent a 2:3 --max_restarts=3 "$D/worker.sh"
for h in b c; do NPROC=1 agent $h 2:3 --max_restarts=3 "$D/worker.sh"; done
exec 3>&2 2>/dev/null
wait_count 3 10 "$D/[abc]/env.*.0" && NPROC=1 agent d 2:3 --max_restarts=3 "$D/worker.sh"
WAIT_S=20 wait_all a b c d
exec 2>&3 3>&-
unset FW_SLEEP_MS
check "the store's own host excluded: b c d finish round 1 as a job of 3 and exit 0 ($(rcs b c d))" \
    cond 'all_rc 0 b c d && round_is 1 3 b c d'
check "a served the store to the end, then left with exit $EXIT_UNFIT ($(rcs a))" \
    cond 'all_rc $EXIT_UNFIT a && grep -q "keeps serving it, with no worker" "$D/a.out"'
check "nothing left after the store-host test" no_leftovers 3

# ------------------------------------------------------------------------------------ the end
check "nothing left running (tagged processes)" no_leftovers 3
check "no process left in any of our namespaces" ns_empty
teardown
[ -n "${NETNS_KEEP:-}" ] && mkdir -p "$NETNS_KEEP" && cp -r "$TMP"/. "$NETNS_KEEP"/ 2>/dev/null
check "namespaces removed (bridge and veths with them)" ns_gone
finish
