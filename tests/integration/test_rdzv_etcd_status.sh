#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddprun status --rdzv_backend=etcd (launcher/status_etcd.c): the store of a run whose agents
# elected it through etcd is found from the leader key <prefix>/<run_id>/leader. With a real etcd
# (Debian's etcd-server) on 127.0.0.1 alone, started here and stopped by PID: a 2-agent job's
# status (table: RUNNING, 2 members, the store named on stderr; --json: "store" and
# "elected_through"); an unknown run (exit 1, one line naming the key and the etcd endpoint); a
# leader key set by hand to bytes that are not an address (exit 1, one line, escaped); etcd down
# (exit 1, one line naming it, within the 5 s bound). Without etcd: a bad member, --rdzv_conf
# key or --rdzv_backend value is a usage error (exit 2).
. "$(dirname "$0")/lib.sh"

DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
fake_worker_env_clear
unset DDPRUN_ETCD_USER DDPRUN_ETCD_PASSWORD DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_STORE_TOKEN
SECTIONS=("status of a 2-agent etcd job: RUNNING with 2 members, the store named on stderr"
    "status --json: valid, with store and elected_through"
    "status of an unknown run: exit 1, one line naming the key and the etcd endpoint"
    "a leader key that is not an address: exit 1, one line, escaped"
    "etcd down: exit 1 within 7 s, one line naming it"
    "no leftover process")

# ---- without etcd: the job's parsing of the members and of --rdzv_conf (exit 2, naming it) ----
bad() { # WANT_IN_OUTPUT ARGS...
    local want=$1; shift
    "$DDPRUN" status --rdzv_backend=etcd --rdzv_id=x "$@" >"$TMP/bad.out" 2>&1
    local rc=$?
    if [ $rc = 2 ] && grep -q -- "$want" "$TMP/bad.out"; then
        ok "status usage error: $want (exit 2)"
    else
        not_ok "status usage error: $want (exit $rc)"; show_tail "$TMP/bad.out"
    fi
}
bad "'127.0.0.1:70000' has a port" --rdzv_endpoint=127.0.0.1:70000
bad "etcd_prefix='bad'" --rdzv_endpoint=127.0.0.1 --rdzv_conf=etcd_prefix=bad
bad "'etcd3' is not c10d or etcd" --rdzv_endpoint=127.0.0.1 --rdzv_backend=etcd3

etcd_suite_member
# etcd_up: the suite's member again, on its data dir; its PID in ETCD.
etcd_up() { etcd_member "$TMP/etcd" "$P1" "$P2"; }
EP="127.0.0.1:$P1"
CONF="last_call_timeout=1,lease_ttl=3,keep_alive_interval=1"

# ---- a 2-agent job, its workers running while status asks ----
export FW_DIR=$TMP/job FW_SLEEP_MS=30000
mkdir -p "$FW_DIR"
PIDS=()
for i in 1 2; do
    "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$EP" \
        --rdzv_id=est --rdzv_conf="$CONF" "$FW" >"$TMP/a$i.out" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 400); do
    [ "$(ls "$FW_DIR" | grep -c '^env\.')" = 2 ] && break
    sleep 0.05
done
"$DDPRUN" status --rdzv_backend=etcd --rdzv_endpoint="$EP" --rdzv_id=est \
    >"$TMP/st.txt" 2>"$TMP/st.err"; s1=$?
"$DDPRUN" status --rdzv-backend etcd --rdzv-endpoint "$EP" --rdzv-id est --json \
    --rdzv_conf=etcd_prefix=/ddprun >"$TMP/st.json" 2>"$TMP/stj.err"; s2=$?
"$DDPRUN" status --rdzv_backend=etcd --rdzv_endpoint="$EP" --rdzv_id=nosuch \
    >"$TMP/no.out" 2>&1; s3=$?
kill -TERM "${PIDS[@]}" 2>/dev/null
for p in "${PIDS[@]}"; do wait "$p"; done

[ $s1 = 0 ] && grep -q "run est: round 0, RUNNING" "$TMP/st.txt" &&
    grep -qx "nodes 2: 2 running, 0 joining, 0 spare, 0 idle" "$TMP/st.txt" &&
    [ "$(grep -cE '^[01] +127.0.0.1 +1 +running' "$TMP/st.txt")" = 2 ] &&
    [ "$(wc -l <"$TMP/st.err")" = 1 ] &&
    grep -qE "store 127\.0\.0\.1:[0-9]+, elected through etcd at http://$EP" "$TMP/st.err"
verdict "status of a 2-agent etcd job: RUNNING with 2 members, the store named on stderr" ||
    show_tail "$TMP/st.txt" "$TMP/st.err" "$TMP/a1.out"
json_ok() {
    python3 - "$TMP/st.json" "$EP" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "RUNNING" and len(d["members"]) == 2, d
assert re.fullmatch(r"127\.0\.0\.1:\d+", d["store"]), d["store"]
assert d["elected_through"] == "http://" + sys.argv[2], d["elected_through"]
PY
}
[ $s2 = 0 ] && json_ok
verdict "status --json: valid, with store and elected_through" ||
    show_tail "$TMP/st.json" "$TMP/stj.err"
[ $s3 = 1 ] && [ "$(wc -l <"$TMP/no.out")" = 1 ] &&
    grep -qF "no store elected for run nosuch (key /ddprun/nosuch/leader empty at http://$EP)" \
        "$TMP/no.out"
verdict "status of an unknown run: exit 1, one line naming the key and the etcd endpoint" ||
    show_tail "$TMP/no.out"

# ---- a leader key set by hand to something that is not an address ----
"$BIN/tests/etcd_client" --endpoints "$EP" put /hand/garb/leader $'\e[31mnot:ours' >/dev/null 2>&1
"$DDPRUN" status --rdzv_backend=etcd --rdzv_endpoint="$EP" --rdzv_id=garb \
    --rdzv_conf=etcd_prefix=/hand >"$TMP/garb.out" 2>&1; s4=$?
[ $s4 = 1 ] && [ "$(wc -l <"$TMP/garb.out")" = 1 ] &&
    grep -q "/hand/garb/leader holds .*not a store's address" "$TMP/garb.out" &&
    ! grep -q $'\e' "$TMP/garb.out"
verdict "a leader key that is not an address: exit 1, one line, escaped" || show_tail "$TMP/garb.out"

# ---- etcd down ----
kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
t0=$(date +%s%N)
"$DDPRUN" status --rdzv_backend=etcd --rdzv_endpoint="$EP" --rdzv_id=est >"$TMP/down.out" 2>&1
s5=$?
dt=$((($(date +%s%N) - t0) / 1000000))
[ $s5 = 1 ] && [ $dt -lt 7000 ] && [ "$(wc -l <"$TMP/down.out")" = 1 ] &&
    grep -q "etcd at $EP" "$TMP/down.out"
verdict "etcd down: exit 1 within 7 s, one line naming it" || show_tail "$TMP/down.out"
echo "# etcd down: exit $s5 after $dt ms"

check "no leftover process" no_leftovers
finish
