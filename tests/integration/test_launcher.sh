#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 24
# ddprun's command line against real processes: values it must refuse before anything starts (exit
# 2, one line naming the flag, no worker), `ddprun status` against servers that misbehave, and
# output that must not carry control bytes from the network to the operator's terminal; and the
# agent's end of a job started over ssh (--ssh_session), on loopback: the store's address arrives
# on stdin after the token, then the launcher's lines (signals, heartbeats and their silence).
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
fake_worker_env_clear
unset PET_NODE_RANK PET_NNODES PET_SHUTDOWN_TIMEOUT PET_RDZV_ENDPOINT PET_RDZV_BACKEND
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_STORE_TOKEN SLURM_JOB_ID SLURM_JOBID SLURM_STEP_ID SLURM_STEPID SLURM_NODEID

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 30 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 30 "$DDPRUN" "$@" >"$out" 2>&1
}

# refused NAME NEEDLE ARGS...: ddprun ARGS (with a fake_worker writing into a fresh directory)
# exits 2 with exactly one line, which contains NEEDLE, and no worker ran.
refused() {
    local name=$1 needle=$2; shift 2
    local d=$TMP/refused.$_n out=$TMP/refused.$_n.out rc
    mkdir -p "$d"
    FW_DIR=$d run_ddprun "$out" "$@" "$FW"; rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -qF -- "$needle" "$out" &&
        [ -z "$(ls -A "$d")" ]; then
        ok "$name"
    else
        echo "# rc $rc, output:"; sed 's/^/#   /' "$out"; echo "# worker files: $(ls "$d")"
        not_ok "$name"
    fi
}

# 1. The node rank must name one of the job's nodes: with one node, only 0.
refused "--node_rank=5 on one node -> exit 2 naming the flag, no worker" \
    "--node_rank: 5 is not below the node count 1" --node_rank=5
PET_NODE_RANK=1 refused "PET_NODE_RANK=1 on one node -> exit 2" "--node_rank: 1" --nproc_per_node=1
KUBERNETES_SERVICE_HOST=10.96.0.1 JOB_COMPLETION_INDEX=5 refused \
    "an Indexed Job's JOB_COMPLETION_INDEX=5 on one node -> exit 2 naming the variable" \
    "JOB_COMPLETION_INDEX=5 is not below the node count 1" --nproc_per_node=2
SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURM_STEP_NODELIST=127.0.0.1 SLURM_NNODES=99999999 \
    refused "SLURM_NNODES=99999999 -> exit 2 naming the variable, before any rendezvous" \
    "SLURM_NNODES: 99999999 nodes is more than a job may have (at most 65536" --nproc_per_node=1
SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURM_STEP_NODELIST='n[1-12345678901]' \
    refused "a Slurm hostlist with a 11-digit number -> exit 2 saying the number is too long" \
    "SLURM_STEP_NODELIST: malformed hostlist 'n[1-12345678901]' at offset 4: a number longer than 9 digits" \
    --nproc_per_node=1
refused "--rdzv_id with a byte that is not UTF-8, one node -> exit 2 naming the flag" \
    "--rdzv_id: 'ab\\xff' holds byte 0xff at position 2: a run id is printable ASCII only" \
    --rdzv_id=$'ab\xff'
PET_RDZV_ID=$'job\e]0;x' refused "PET_RDZV_ID with a control byte -> exit 2" \
    "--rdzv_id: 'job\\e]0;x' holds byte 0x1b" --nproc_per_node=1
refused "--node_rank=2 with --nnodes=1:2 -> exit 2" "--node_rank: 2 is not below the node count 2" \
    --nnodes=1:2 --node_rank=2
d=$TMP/rank0; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/rank0.out" --node_rank=0 "$FW"; rc=$?
[ $rc -eq 0 ] && grep -qx "RANK=0" "$d/env.0.0" && grep -qx "WORLD_SIZE=1" "$d/env.0.0"
verdict "--node_rank=0 on one node runs RANK=0 WORLD_SIZE=1"
# One node with torchrun's default rendezvous: each run its own uuid4 run id (torchrun 2.x runs it
# as --standalone), so tools grouping runs by TORCHELASTIC_RUN_ID do not merge unrelated jobs; a
# run id or port the user set is kept.
run_id_of() {
    local d=$TMP/runid.$RANDOM
    mkdir -p "$d"
    FW_DIR=$d run_ddprun "$d.out" "$@" "$FW" || { echo "# ddprun $*: rc $?"; sed 's/^/#   /' "$d.out"; }
    sed -n 's/^TORCHELASTIC_RUN_ID=//p' "$d/env.0.0"
}
id1=$(run_id_of --nproc_per_node=1); id2=$(run_id_of --nproc_per_node=1)
uuid4='^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
echo "$id1" | grep -Eq "$uuid4" && echo "$id2" | grep -Eq "$uuid4" && [ "$id1" != "$id2" ]
verdict "one node, no endpoint or port: each run gets its own uuid4 run id ('$id1', '$id2')"
[ "$(run_id_of --rdzv_id=nightly)" = nightly ] && [ "$(run_id_of --master_port="$(free_port)")" = none ]
verdict "--rdzv_id is kept, and --master_port keeps torchrun's static 'none'"
check "nothing left after the node rank checks" no_leftovers

# 2. Numbers have named bounds: a duration that would overflow the kill timer is refused, not
# turned into an immediate SIGKILL.
refused "--shutdown_timeout=1e17 -> exit 2 with the accepted range" \
    "--shutdown_timeout: '1e17' is outside 0..2000000 seconds" --shutdown_timeout=1e17
PET_SHUTDOWN_TIMEOUT=1e17 refused "PET_SHUTDOWN_TIMEOUT=1e17 -> exit 2 naming the variable" \
    "PET_SHUTDOWN_TIMEOUT: '1e17' is outside" --nproc_per_node=1
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e17 refused "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e17 -> exit 2" \
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '1e17' is outside" --nproc_per_node=1
refused "--monitor_interval=1e17 -> exit 2" "--monitor_interval: '1e17' is outside" \
    --monitor_interval=1e17
refused "--shutdown_timeout=0x10 (hex) -> exit 2" "'0x10' is not a number of seconds" \
    --shutdown_timeout=0x10
refused "--nnodes=1:70000 -> exit 2 before any rendezvous" \
    "--nnodes: '1:70000' is out of range (MIN and MAX in 1..65536)" --nnodes=1:70000
refused "--max_restarts=99999999999 -> exit 2" "--max_restarts: '99999999999' is out of range" \
    --max_restarts=99999999999
refused "--nproc_per_node=2x -> exit 2" "--nproc_per_node: '2x' is not a number" --nproc_per_node=2x
refused "--master_port=70000 -> exit 2" "--master_port: '70000' is out of range (1..65535)" \
    --master_port=70000
refused "--nnodes=65536 x --nproc_per_node=65536 overflows the world size -> exit 2 naming both" \
    "--nnodes (max 65536) x --nproc_per_node (65536) is 4294967296 ranks; the world size is at most 2147483647" \
    --nnodes=65536 --nproc_per_node=65536 --rdzv_endpoint=127.0.0.1:1
refused "--nnodes=1:65536 x --nproc_per_node=32768 (one rank past INT_MAX) -> exit 2" \
    "--nnodes (max 65536) x --nproc_per_node (32768) is 2147483648 ranks" \
    --nnodes=1:65536 --nproc_per_node=32768 --rdzv_endpoint=127.0.0.1:1
check "nothing left after the numeric checks" no_leftovers

# A script whose #! interpreter is missing: exit 2 naming the interpreter, not 127 as if the
# script itself were missing.
printf '#!/nonexistent/bin/python9\nprint(1)\n' >"$TMP/badinterp.sh"
chmod +x "$TMP/badinterp.sh"
run_ddprun "$TMP/badinterp.out" --nproc_per_node=1 "$TMP/badinterp.sh"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/badinterp.out")" -eq 1 ] &&
    grep -qF "its interpreter '/nonexistent/bin/python9' (#! line) not found" "$TMP/badinterp.out"
verdict "a script with a missing #! interpreter -> exit 2 naming the interpreter (rc $rc)"

# 3. The rendezvous endpoint is checked whatever the node count: its syntax always, and on one
# node (where the agent hosts its own store) that it is this machine. Addresses only: no name is
# looked up.
refused "--rdzv_endpoint='a b:1' (c10d, one node) -> exit 2 naming the character" \
    "--rdzv_endpoint: 'a b:1' has a character no host name has (' ')" \
    --rdzv_backend=c10d --rdzv_endpoint='a b:1'
refused "--rdzv_endpoint='a b:1' with the static backend -> exit 2 too" \
    "--rdzv_endpoint: 'a b:1' has a character" --rdzv_endpoint='a b:1'
refused "a remote --rdzv_endpoint on one node -> exit 2, not silently ignored" \
    "--rdzv_endpoint: '192.0.2.1' is not this machine; a one-node job meets nobody there" \
    --rdzv_backend=c10d --rdzv_endpoint=192.0.2.1:29400
PET_RDZV_ENDPOINT=192.0.2.1 refused "PET_RDZV_ENDPOINT=192.0.2.1 on one node -> exit 2" \
    "--rdzv_endpoint: '192.0.2.1' is not this machine" --rdzv_backend=c10d
refused "--master_addr='a;b' -> exit 2" "--master_addr: 'a;b' has a character" --master_addr='a;b'
d=$TMP/ep_local; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/ep_local.out" -v --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:1 "$FW"
rc=$?
[ $rc -eq 0 ] && [ -f "$d/env.0.0" ] &&
    grep -q "rdzv_endpoint 127.0.0.1:1 (127.0.0.1) is this machine; a one-node job hosts its own store" "$TMP/ep_local.out"
verdict "a local --rdzv_endpoint on one node runs, and -v says the job hosts its own store (rc $rc)"
check "nothing left after the endpoint checks" no_leftovers

# A store that misbehaves, on 127.0.0.1 port 0 (its port goes to PORTFILE). It answers the client
# handshake (VALIDATE + PING without a token), then the status request (RDZV_STATUS_PAGE, or
# RDZV_STATUS) per MODE:
#   trickle  the reply's header, then one byte a second of a 1000-byte JSON, for up to 60 s
#   silent   nothing at all (not even the handshake)
#   json     the reply with the JSON in $FAKE_JSON, then the connection stays open 10 s
# It serves one client and exits; the suite ends it by PID when it is still there.
cat >"$TMP/fake_store.py" <<'PY'
import os, socket, struct, sys, time
mode, portfile = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
os.rename(portfile + ".tmp", portfile)
srv.settimeout(30)
c, _ = srv.accept()
c.settimeout(30)
def read_exact(n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            sys.exit(0)
        b += chunk
    return b
if mode == "silent":
    time.sleep(60)
    sys.exit(0)
hs = read_exact(10)                      # VALIDATE u32 magic, PING u32 nonce
c.sendall(hs[6:10])                      # the nonce back
req = read_exact(9)                      # 0x56 or 0x53, u64 run id length
read_exact(struct.unpack("<Q", req[1:9])[0])
if req[0] == 0x56:
    read_exact(16)                       # i64 first, i64 limit
if mode == "trickle":
    c.sendall(bytes([req[0], 0]) + struct.pack("<Q", 1000))
    for _ in range(60):
        c.sendall(b" ")
        time.sleep(1)
else:
    body = os.environ["FAKE_JSON"].encode()
    c.sendall(bytes([req[0], 0]) + struct.pack("<Q", len(body)) + body)
    time.sleep(10)
PY

# fake_store MODE: starts the fake store; sets FAKE_PID and FAKE_PORT.
fake_store() {
    local pf=$TMP/fake.port.$_n
    rm -f "$pf"
    python3 "$TMP/fake_store.py" "$1" "$pf" &
    FAKE_PID=$!
    for _ in $(seq 200); do [ -s "$pf" ] && break; sleep 0.02; done
    FAKE_PORT=$(cat "$pf" 2>/dev/null)
}
stop_fake_store() { kill "$FAKE_PID" 2>/dev/null; wait "$FAKE_PID" 2>/dev/null; }

# 4. `ddprun status` has one deadline for the whole command.
if command -v python3 >/dev/null; then
    fake_store trickle
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id run1 \
        >"$TMP/st_trickle.out" 2>&1; rc=$?
    stop_fake_store
    [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/st_trickle.out")" -eq 1 ] &&
        grep -qF "ddprun status: 127.0.0.1:$FAKE_PORT: no answer within 10 s (--timeout): waiting for the reply to RDZV_STATUS" "$TMP/st_trickle.out"
    verdict "status against a store trickling its reply ends by the default 10 s deadline (rc $rc)"
    [ $rc -ne 0 ] || sed 's/^/#   /' "$TMP/st_trickle.out"

    fake_store silent
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id run1 \
        --timeout=0.5 >"$TMP/st_silent.out" 2>&1; rc=$?
    stop_fake_store
    [ $rc -eq 1 ] && grep -qF "127.0.0.1:$FAKE_PORT: no answer within 0.5 s (--timeout): waiting for the connection and handshake" "$TMP/st_silent.out"
    verdict "status --timeout=0.5 against a silent store: one line naming endpoint and phase (rc $rc)"

    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint 127.0.0.1:1 --rdzv_id x --timeout 2 \
        >"$TMP/st_refused.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && [ "$(grep -o '127\.0\.0\.1:1:' "$TMP/st_refused.out" | wc -l)" -eq 1 ]
    verdict "status against a closed port names the endpoint once (rc $rc)"
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint 127.0.0.1:1 --rdzv_id $'r\xc3' --timeout 2 \
        >"$TMP/st_badid.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -qF -- "--rdzv_id: 'r\xc3' holds byte 0xc3 at position 1" "$TMP/st_badid.out"
    verdict "status with a run id no store accepts is a usage error (rc $rc)"
    for v in 0 -1 1e17 x; do
        timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint 127.0.0.1:1 --rdzv_id x --timeout=$v \
            >"$TMP/st_badt.out" 2>&1; rc=$?
        [ $rc -eq 2 ] && grep -qF -- "--timeout: '$v'" "$TMP/st_badt.out" || break
    done
    verdict "status --timeout outside 0.001..86400 s is a usage error (rc $rc for '$v')"
else
    for n in "status against a store trickling its reply ends by the default 10 s deadline" \
             "status --timeout=0.5 against a silent store: one line naming endpoint and phase" \
             "status against a closed port names the endpoint once" \
             "status with a run id no store accepts is a usage error" \
             "status --timeout outside 0.001..86400 s is a usage error"; do
        skip "$n" "no python3 for the fake store"
    done
fi

# A store that wants a token: the message names the variables `ddprun status` reads.
random_token "$TMP/token" >/dev/null
"$BIN/ddp-rendezvous" --host 127.0.0.1 --port 0 --token-file "$TMP/token" >"$TMP/daemon.out" \
    2>"$TMP/daemon.err" &
DPID=$!
if wait_for "$TMP/daemon.out" '^listening on 127\.0\.0\.1:[0-9]+$' 5; then
    DPORT=$(sed -nE 's/^listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$TMP/daemon.out")
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$DPORT" --rdzv_id x \
        >"$TMP/st_auth.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/st_auth.out")" -eq 1 ] &&
        grep -qF "127.0.0.1:$DPORT: the store refused this client (no job token given): ddprun status reads the job token from DDPRUN_TOKEN, DDPRUN_TOKEN_FILE or DDPRUN_STORE_TOKEN" "$TMP/st_auth.out"
    verdict "status without the token names the variables it reads"
    [ $rc -eq 1 ] || sed 's/^/#   /' "$TMP/st_auth.out"
    DDPRUN_TOKEN=00ff timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$DPORT" \
        --rdzv_id x >"$TMP/st_auth2.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -qF "the store refused this client (wrong job token)" "$TMP/st_auth2.out"
    verdict "status with a wrong DDPRUN_TOKEN says the token was refused (rc $rc)"
else
    not_ok "the token daemon started"
fi
kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null

# A malformed token: one message naming its one source once and what is expected, never the
# secret; the same text from `ddprun status` and from a multi-node ddprun (exit 2, no worker).
: >"$TMP/empty.tok" && chmod 600 "$TMP/empty.tok"
for spec in "DDPRUN_STORE_TOKEN=xyzsecret0|DDPRUN_STORE_TOKEN: character 1 of 10 is not a hex digit: expected an even number of hex digits (0-9a-f), at most 2048" \
            "DDPRUN_TOKEN=abc|DDPRUN_TOKEN: 3 hex digits, an odd number: expected an even number of hex digits (0-9a-f), at most 2048" \
            "DDPRUN_TOKEN_FILE=$TMP/empty.tok|DDPRUN_TOKEN_FILE=$TMP/empty.tok: the token is 0 bytes: expected 1..1024 bytes (one trailing newline is not counted)"; do
    assign=${spec%%|*} msg=${spec#*|}
    env "$assign" timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint 127.0.0.1:1 --rdzv_id x \
        >"$TMP/st_tok.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && [ "$(head -1 "$TMP/st_tok.out")" = "ddprun status: $msg" ] &&
        [ "$(grep -o 'DDPRUN_[A-Z_]*' "$TMP/st_tok.out" | wc -l)" -eq 1 ] &&
        ! grep -q secret "$TMP/st_tok.out"
    verdict "status with ${assign%%=*} malformed: 'ddprun status: $msg' (rc $rc)"
    [ $rc -eq 2 ] || sed 's/^/#   /' "$TMP/st_tok.out"
    d=$TMP/tok.$_n; mkdir -p "$d"
    env "$assign" FW_DIR="$d" timeout -k 5 30 "$DDPRUN" --nnodes=2 --rdzv_endpoint=127.0.0.1:1 \
        --rdzv_id=x "$FW" >"$TMP/mn_tok.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && [ "$(cat "$TMP/mn_tok.out")" = "ddprun: $msg" ] && [ -z "$(ls -A "$d")" ]
    verdict "multi-node ddprun with ${assign%%=*} malformed: one line naming it once, no worker (rc $rc)"
    [ $rc -eq 2 ] || sed 's/^/#   /' "$TMP/mn_tok.out"
done
check "nothing left after the status checks" no_leftovers

# no_raw_controls FILE: true when FILE holds no control byte other than newline (no ESC, BEL, CR).
no_raw_controls() { ! LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$1"; }

# 5. Text from the network or from workers reaches the terminal escaped.
if command -v python3 >/dev/null; then
    export FAKE_JSON='{"run":"r1\u001b]0;title\u0007","round":2,"state":"running","restarts_used":0,"max_restarts":3,"min_nodes":1,"max_nodes":2,"last_failure":"rank 0 \u001b[31mred","members":[{"group_rank":0,"host":"evil\u001b[2J\u001b[H\r\nnode9 0 1 ok","nproc":1,"state":"ok\u0007","silent_ms":5}]}'
    fake_store json
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id r1 \
        >"$TMP/st_esc.out" 2>&1; rc=$?
    stop_fake_store
    [ $rc -eq 0 ] && no_raw_controls "$TMP/st_esc.out" && [ "$(wc -l <"$TMP/st_esc.out")" -eq 4 ] &&
        grep -qF 'evil\e[2J\e[H\r\nnode9 0 1 ok' "$TMP/st_esc.out" &&
        grep -qF 'run r1\e]0;title\a: round 2' "$TMP/st_esc.out" &&
        grep -qF 'last failure: rank 0 \e[31mred' "$TMP/st_esc.out"
    verdict "status escapes control bytes in host names, run id, states and the last failure"
    [ $rc -eq 0 ] && no_raw_controls "$TMP/st_esc.out" || sed 's/^/#   /' "$TMP/st_esc.out" | cat -v
    unset FAKE_JSON
    # --json re-serializes the reply: escaped control characters stay escaped, C1 controls and DEL
    # in strings become \u escapes, the content is unchanged.
    export FAKE_JSON=$'{"run":"r1\\u001b]0;t\\u0007","members":[{"host":"evil\xc2\x9b2J\x7fx","state":"ok"}]}'
    fake_store json
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id r1 --json \
        >"$TMP/st_json.out" 2>"$TMP/st_json.err"; rc=$?
    stop_fake_store
    same_json() {
        python3 -c 'import json,os,sys; assert json.load(open(sys.argv[1])) == json.loads(os.environ["FAKE_JSON"])' "$TMP/st_json.out"
    }
    [ $rc -eq 0 ] && no_raw_controls "$TMP/st_json.out" && ! LC_ALL=C grep -q $'[\x80-\xff]' "$TMP/st_json.out" &&
        grep -qF '"host":"evil\u009B2J\u007Fx"' "$TMP/st_json.out" && same_json
    verdict "status --json re-serializes: C1 controls and DEL escaped, same JSON (rc $rc)"
    [ $rc -eq 0 ] && no_raw_controls "$TMP/st_json.out" || sed 's/^/#   /' "$TMP/st_json.out" | cat -v
    # A reply that is not JSON (raw ESC after the object): one line naming the store, exit 1.
    export FAKE_JSON=$'{"run":"r1"}\e[2J\e]0;pwned\a'
    for fmt in --json ""; do
        fake_store json
        timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id r1 $fmt \
            >"$TMP/st_bad.out" 2>&1; rc=$?
        stop_fake_store
        [ $rc -eq 1 ] && no_raw_controls "$TMP/st_bad.out" && [ "$(wc -l <"$TMP/st_bad.out")" -eq 1 ] &&
            grep -qF "ddprun status: 127.0.0.1:$FAKE_PORT: the reply to RDZV_STATUS is not valid JSON (at byte 13 of 26)" "$TMP/st_bad.out"
        verdict "status ${fmt:-(table)} with a reply that is not JSON: one line, exit 1 (rc $rc)"
        [ $rc -eq 1 ] && no_raw_controls "$TMP/st_bad.out" || sed 's/^/#   /' "$TMP/st_bad.out" | cat -v
    done
    unset FAKE_JSON
    # Valid JSON of another shape: said so, and what is wrong with it (never "not valid JSON").
    for spec in '[1,2]|it is an array, not an object' '{"run":"r1"}|it has no "members"' \
        '{"run":"r1","members":{"a":1}}|its "members" is an object, not an array'; do
        export FAKE_JSON=${spec%%|*}
        fake_store json
        timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id r1 \
            >"$TMP/st_shape.out" 2>&1; rc=$?
        stop_fake_store
        [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/st_shape.out")" -eq 1 ] &&
            grep -qF "ddprun status: 127.0.0.1:$FAKE_PORT: the reply to RDZV_STATUS is JSON but not a run's status: ${spec#*|}" "$TMP/st_shape.out"
        verdict "status with the reply $FAKE_JSON: '${spec#*|}', exit 1 (rc $rc)" ||
            sed 's/^/#   /' "$TMP/st_shape.out"
    done
    # A run failed with max_restarts spent: its failures are one more than its restarts (the last
    # one failed the run), which the table must not print as "restarts 4 of 3".
    export FAKE_JSON='{"run":"r1","round":5,"state":"FAILED","restarts_used":4,"max_restarts":3,"min_nodes":1,"max_nodes":1,"members":[]}'
    fake_store json
    timeout -k 5 30 "$DDPRUN" status --rdzv_endpoint "127.0.0.1:$FAKE_PORT" --rdzv_id r1 \
        >"$TMP/st_spent.out" 2>&1; rc=$?
    stop_fake_store
    [ $rc -eq 0 ] && [ "$(head -1 "$TMP/st_spent.out")" = "run r1: round 5, FAILED, restarts 3 of 3 (spent), nodes min 1 max 1" ]
    verdict "status of a run whose max_restarts is spent: 'restarts 3 of 3 (spent)' (rc $rc)" ||
        sed 's/^/#   /' "$TMP/st_spent.out"
    unset FAKE_JSON
else
    skip "status escapes control bytes in host names, run id, states and the last failure" \
        "no python3 for the fake store"
    skip "status --json re-serializes: C1 controls and DEL escaped, same JSON" "no python3 for the fake store"
    skip "status --json with a reply that is not JSON: one line, exit 1" "no python3 for the fake store"
    skip "status (table) with a reply that is not JSON: one line, exit 1" "no python3 for the fake store"
    skip "status with JSON of another shape: said so" "no python3 for the fake store"
    skip "status of a run whose max_restarts is spent: 'restarts 3 of 3 (spent)'" "no python3 for the fake store"
fi
FW_EXIT=1 FW_ERROR='\u001b[2J\u001b[Hall good\r\u0007' run_ddprun "$TMP/sum_esc.out" \
    --nproc_per_node=1 "$FW"; rc=$?
[ $rc -eq 1 ] && no_raw_controls "$TMP/sum_esc.out" &&
    grep -qF 'RuntimeError: \e[2J\e[Hall good\r\a' "$TMP/sum_esc.out"
verdict "the failure summary escapes control bytes of the worker's error file (rc $rc)"
[ $rc -eq 1 ] && no_raw_controls "$TMP/sum_esc.out" || sed 's/^/#   /' "$TMP/sum_esc.out" | cat -v
check "nothing left after the escaping checks" no_leftovers

# --ssh_session, the agent a launching ddprun starts on each host: the first host's agent hosts
# the store on its ssh session's address (SSH_CONNECTION) and says where; the other hosts'
# agents are started at the same time and read that address on stdin, after the token.
tok=$(head -c 32 /dev/urandom | od -An -tx1 -v | tr -d ' \n')
printf '%s\n' "$tok" | run_ddprun "$TMP/sess_eof.out" --ssh_session=h1 --nnodes=2 --node_rank=1 \
    "$FW"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/sess_eof.out")" -eq 1 ] &&
    grep -qF -- "--ssh_session: stdin ended before the store's address" "$TMP/sess_eof.out"
verdict "--ssh_session on a host other than the first: stdin that ends after the token is refused in one line (rc $rc)" ||
    sed 's/^/#   /' "$TMP/sess_eof.out"
printf '%s\n127.0.0.1\n' "$tok" | run_ddprun "$TMP/sess_noport.out" --ssh_session=h1 --nnodes=2 \
    --node_rank=1 "$FW"; rc=$?
[ $rc -eq 2 ] && grep -qF -- "--ssh_session: the store's address has no port" "$TMP/sess_noport.out"
verdict "--ssh_session: a store address without a port is refused (rc $rc)" ||
    sed 's/^/#   /' "$TMP/sess_noport.out"
mkfifo "$TMP/sess0.in" "$TMP/sess1.in"
SSH_CONNECTION="127.0.0.1 40000 127.0.0.1 22" timeout -k 5 30 "$DDPRUN" --ssh_session=h0 \
    --nnodes=2 --node_rank=0 --rdzv_id=sess sh -c 'echo "rank $RANK of $WORLD_SIZE"' \
    <"$TMP/sess0.in" >"$TMP/sess0.out" 2>"$TMP/sess0.err" &
pid0=$!
timeout -k 5 30 "$DDPRUN" --ssh_session=h1 --nnodes=2 --node_rank=1 --rdzv_id=sess \
    sh -c 'echo "rank $RANK of $WORLD_SIZE"' <"$TMP/sess1.in" >"$TMP/sess1.out" 2>"$TMP/sess1.err" &
pid1=$!
exec 7>"$TMP/sess0.in" 8>"$TMP/sess1.in"
printf '%s\n' "$tok" >&7
printf '%s\n' "$tok" >&8
ep=""
for _ in $(seq 100); do
    ep=$(sed -n 's/^ddprun-agent-ready //p' "$TMP/sess0.out")
    [ -n "$ep" ] && break
    sleep 0.1
done
# Host 1 has been waiting on its stdin meanwhile; it still is.
running1=0
[ -d "/proc/$pid1" ] && running1=1
[ -n "$ep" ] && printf '%s\n' "$ep" >&8
wait $pid0; rc0=$?
wait $pid1; rc1=$?
exec 7>&- 8>&-
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $running1 = 1 ] && [ "${ep%:*}" = 127.0.0.1 ] &&
    grep -qx '\[h0:0\]:rank 0 of 2' "$TMP/sess0.out" && grep -qx '\[h1:1\]:rank 1 of 2' "$TMP/sess1.out"
verdict "--ssh_session: host 1, started with host 0, meets at the address host 0 reported, given on its stdin (rc $rc0 $rc1, store at '$ep')" ||
    for f in "$TMP"/sess[01].out "$TMP"/sess[01].err; do echo "# $f:"; sed 's/^/#   /' "$f"; done
check "nothing left after the --ssh_session checks" no_leftovers

# The launcher's lines after the token (AGENT_SSH_*, agent.h): "signal N" acts as signal N would
# (SIGUSR1 forwarded, SIGTERM stops the job with SIGTERM, which the worker traps to save), and
# once a heartbeat (an empty line) came, AGENT_SSH_SILENCE_MS (10 s) without a line stops the job
# as the session's end does. The agent's stdin stays open throughout.
SAVER='trap "echo usr1" USR1; trap "echo saved; exit 0" TERM; echo started; while :; do sleep 0.1; done'
mkfifo "$TMP/sess2.in" "$TMP/sess3.in"
timeout -k 5 30 "$DDPRUN" --ssh_session=h0 --nnodes=1 --node_rank=0 sh -c "$SAVER" \
    <"$TMP/sess2.in" >"$TMP/sess2.out" 2>&1 &
pid2=$!
exec 7>"$TMP/sess2.in"
printf '%s\n\n' "$tok" >&7
wait_for "$TMP/sess2.out" '^\[h0:0\]:started$' 10 && printf 'signal 10\n' >&7 &&
    wait_for "$TMP/sess2.out" '^\[h0:0\]:usr1$' 10 && printf 'signal 15\n' >&7
wait $pid2; rc=$?
exec 7>&-
[ $rc -eq 143 ] && grep -qx '\[h0:0\]:saved' "$TMP/sess2.out" && ! grep -q 'is gone' "$TMP/sess2.out"
verdict "--ssh_session: 'signal 10' reaches the worker, 'signal 15' stops it with SIGTERM, exit 143 (rc $rc)" ||
    sed 's/^/#   /' "$TMP/sess2.out"
timeout -k 5 30 "$DDPRUN" --ssh_session=h0 --nnodes=1 --node_rank=0 sh -c "$SAVER" \
    <"$TMP/sess3.in" >"$TMP/sess3.out" 2>&1 &
pid3=$!
exec 7>"$TMP/sess3.in"
printf '%s\n\n' "$tok" >&7
wait_for "$TMP/sess3.out" '^\[h0:0\]:started$' 10
t0=$(date +%s%N)
wait $pid3; rc=$?
took=$((($(date +%s%N) - t0) / 1000000))
exec 7>&-
[ $rc -eq 129 ] && grep -q 'no heartbeat on the ssh session for 10 s (the launching ddprun is gone' "$TMP/sess3.out"
verdict "--ssh_session: no line for 10 s after a heartbeat, stdin still open: the job stops as on SIGHUP in $took ms (rc $rc)" ||
    sed 's/^/#   /' "$TMP/sess3.out"
check "nothing left after the session line checks" no_leftovers

finish
