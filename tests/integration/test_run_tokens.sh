#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a shared store kept apart by run tokens: `ddp-rendezvous --run-token RUN` derives a run's
# token from the store's; a job holding it (DDPRUN_TOKEN) trains as with the store's token, workers
# included; a client holding another run's token cannot read that run's STATUS, ABORT it, mark a
# host UNFIT, JOIN it (as a spare with a forged host) or read its keys: each attempt is refused
# with one line naming both runs, the connection is closed, and the run goes on untouched. Even
# with the store's token, a spare that never ran in a group cannot stop the run or speak for a
# member's host. The store's token (the operator) still sees every run. Everything on 127.0.0.1.
. "$(dirname "$0")/lib.sh"
D=$BIN/ddp-rendezvous
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
H=$BIN/tests
fake_worker_env_clear
unset DDPRUN_STORE_TOKEN DDPRUN_TOKEN DDPRUN_TOKEN_FILE
CONF=last_call_timeout=0.3,join_timeout=20,keep_alive_interval=0.2,keep_alive_max_attempt=5,close_timeout=5

random_token "$TMP/store.tok" >/dev/null
PORT=$(free_port)
"$D" --host 127.0.0.1 --port "$PORT" --token-file "$TMP/store.tok" -v >"$TMP/d.out" 2>"$TMP/d.err" &
DPID=$!
wait_for "$TMP/d.out" '^listening on ' 5 || { not_ok "the store starts"; finish; exit 1; }

# --run-token: 64 hex digits, the same for the same run, another for another run; no run token
# without a store token, and a run id no store accepts is refused naming the flag.
TA=$("$D" --token-file "$TMP/store.tok" --run-token a)
TA2=$("$D" --token-file "$TMP/store.tok" --run-token a)
TB=$("$D" --token-file "$TMP/store.tok" --run-token b)
[[ "$TA" =~ ^[0-9a-f]{64}$ ]] && [ "$TA" = "$TA2" ] && [[ "$TB" =~ ^[0-9a-f]{64}$ ]] && [ "$TA" != "$TB" ]
verdict "--run-token prints a run's token: 64 hex digits, one per run id"
"$D" --no-auth --run-token a >/dev/null 2>"$TMP/rt1.err"; r1=$?
"$D" --token-file "$TMP/store.tok" --run-token "$(printf 'a\tb')" >/dev/null 2>"$TMP/rt2.err"; r2=$?
[ "$r1" = 2 ] && [ "$r2" = 2 ] && grep -q -- '--run-token' "$TMP/rt1.err" && grep -q -- '--run-token' "$TMP/rt2.err"
verdict "--run-token without a store token, or for a run id no store accepts: exit 2 naming the flag"

# agent NAME RUN TOKEN ARGS...: one node of a 2-node job (pid in $LAST), output in $TMP/NAME.out.
agent() {
    local name=$1 run=$2 tok=$3; shift 3
    DDPRUN_TOKEN=$tok timeout -k 5 60 "$DDPRUN" --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id="$run" --rdzv_conf="$CONF" "$@" \
        >"$TMP/$name.out" 2>&1 &
    LAST=$!
}

# 1. A job holding its run token trains: its agents and its workers (whose keys live in the store
# under ddpw/a/...) are served.
agent a0 a "$TA" "$BIN/train" --epochs 1; p0=$LAST
agent a1 a "$TA" "$BIN/train" --epochs 1; p1=$LAST
wait "$p0"; r0=$?; wait "$p1"; r1=$?
# Rank 0 reports the accuracy: on whichever node the store made group rank 0.
[ "$r0" = 0 ] && [ "$r1" = 0 ] && cat "$TMP/a0.out" "$TMP/a1.out" | grep -q 'eval_accuracy'
verdict "a job holding its run token trains on the shared store (exit $r0, $r1)" ||
    show_tail "$TMP/a0.out" "$TMP/a1.out" "$TMP/d.err"

# 2. Run b runs; a holder of run a's token attacks it.
export FW_SLEEP_MS=4000 FW_DIR=$TMP/b
mkdir -p "$FW_DIR"
agent b0 b "$TB" "$FW"; pb0=$LAST
agent b1 b "$TB" "$FW"; pb1=$LAST
running() {
    DDPRUN_TOKEN=$TB timeout 5 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_id b \
        --json >"$TMP/b_status.json" 2>&1 && grep -q '"state": *"RUNNING"' "$TMP/b_status.json"
}
for _ in $(seq 100); do running && break; sleep 0.05; done
check "run b is RUNNING with its own run token" running

for cmd in status abort unfit join get; do
    STORE_HOSTILE_RUN=a DDPRUN_TOKEN=$TA timeout 15 "$H/store_hostile" "$PORT" other-run "$cmd" b \
        >"$TMP/attack_$cmd.out" 2>&1
    eval "rc_$cmd=$?"
done
named() { grep -q "run token of 'a'" "$1"; }
[ "$rc_status" = 0 ] && [ "$rc_join" = 0 ] &&
    named "$TMP/attack_status.out" && named "$TMP/attack_join.out" &&
    grep -q '^closed after' "$TMP/attack_status.out" && grep -q '^closed after' "$TMP/attack_join.out"
verdict "another run's token: STATUS and JOIN (a spare, forged host) of run b refused naming both runs, connection closed" ||
    show_tail "$TMP/attack_status.out" "$TMP/attack_join.out"
[ "$rc_abort" = 0 ] && [ "$rc_unfit" = 0 ] && [ "$rc_get" = 0 ] &&
    grep -q '^closed after' "$TMP/attack_abort.out" && grep -q '^closed after' "$TMP/attack_unfit.out" &&
    grep -q '^closed after' "$TMP/attack_get.out"
verdict "another run's token: ABORT, UNFIT and reading run b's keys refused, connection closed" ||
    show_tail "$TMP/attack_abort.out" "$TMP/attack_unfit.out" "$TMP/attack_get.out"
[ "$(grep -c "run token of 'a'" "$TMP/d.err")" -ge 5 ]
verdict "the store logs each refusal naming the peer and both runs" || show_tail "$TMP/d.err"

# Even with the store's token, a node that never ran in one of run b's groups (a spare with a
# forged host) cannot stop the run or speak for a member's host: both are answered "ignored".
for cmd in spare-abort spare-unfit; do
    DDPRUN_TOKEN_FILE=$TMP/store.tok timeout 15 "$H/store_hostile" "$PORT" other-run "$cmd" b \
        >"$TMP/attack_$cmd.out" 2>&1
    eval "rc_${cmd#spare-}2=$?"
done
[ "$rc_abort2" = 0 ] && [ "$rc_unfit2" = 0 ] && running
verdict "a spare (forged host, the store's token) cannot ABORT run b or mark a member's host unfit" ||
    show_tail "$TMP/attack_spare-abort.out" "$TMP/attack_spare-unfit.out" "$TMP/d.err"

# Run a's token does not authenticate for run b at all (wrong token), nor without naming its run.
DDPRUN_TOKEN=$TA timeout 5 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_id b \
    >"$TMP/ab.out" 2>&1; rab=$?
DDPRUN_TOKEN=$TA timeout 5 "$H/store_client" "$PORT" ping >"$TMP/anon.out" 2>&1; ranon=$?
[ "$rab" = 1 ] && grep -q 'wrong job token' "$TMP/ab.out" && [ "$ranon" != 0 ]
verdict "run a's token is refused for run b's status, and without a run (exit $rab, $ranon)" ||
    show_tail "$TMP/ab.out" "$TMP/anon.out"

# The operator (the store's token) sees every run; run b is untouched: no unfit host, no forged
# spare, and both nodes finish with exit 0.
DDPRUN_TOKEN_FILE=$TMP/store.tok timeout 5 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$PORT" \
    --rdzv_id b --json >"$TMP/op.json" 2>&1; rop=$?
[ "$rop" = 0 ] && grep -q '"state": *"RUNNING"' "$TMP/op.json" && ! grep -q '10\.66\.66\.66' "$TMP/op.json"
verdict "the store's token reads run b's status: RUNNING, no trace of the attacker" || show_tail "$TMP/op.json"
wait "$pb0"; rb0=$?; wait "$pb1"; rb1=$?
[ "$rb0" = 0 ] && [ "$rb1" = 0 ]
verdict "run b finishes untouched: both nodes exit 0" || show_tail "$TMP/b0.out" "$TMP/b1.out"

kill -TERM "$DPID"; wait "$DPID"
check "nothing left running" no_leftovers 3
finish
