#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 18
# The store daemon (build/ddp-rendezvous) under real clients on 127.0.0.1, port 0: flags and
# exit codes, 200 concurrent clients, waits released by other clients, CANCEL_WAIT, refused
# authentication, hostile clients (malformed, oversized, truncated, slow reader, idle) cut off
# while others keep working, a PyTorch-style byte exchange, a clean exit on SIGTERM, and
# admission: idle sockets that never authenticate are evicted (oldest first, logged at most once
# a second) rather than lock token holders out, also under a low open-file limit.
# Helpers: tests/helpers/store_{client,swarm,hostile}.c. Every wait is bounded.
. "$(dirname "$0")/lib.sh"

D=$BIN/ddp-rendezvous
H=$BIN/tests
unset DDPRUN_STORE_TOKEN DDPRUN_TOKEN DDPRUN_TOKEN_FILE

# start_daemon NAME ARGS...: starts the daemon, waits for its "listening on" line; sets
# PID_<NAME> and PORT_<NAME>; its stdout/stderr go to $TMP/NAME.out / NAME.err.
start_daemon() {
    local name=$1; shift
    "$D" --host 127.0.0.1 --port 0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local pid=$!
    eval "PID_$name=$pid"
    wait_for "$TMP/$name.out" '^listening on 127\.0\.0\.1:[0-9]+$' 5 || return 1
    eval "PORT_$name=$(sed -nE 's/^listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$TMP/$name.out")"
}

# stop_daemon NAME: SIGTERM, then true when it exits 0 within 3 s.
stop_daemon() {
    local pid; eval "pid=\$PID_$1"
    kill -TERM "$pid" 2>/dev/null || return 1
    local i
    for i in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; return 1; fi
    wait "$pid"
}

# warn_lines FILE REGEX: number of warning lines matching REGEX.
warn_lines() { grep -E ' W ' "$1" | grep -cE "$2"; }

# hold_idle PORT N OUT: opens N connections to PORT that never send a byte and prints "open N" to
# OUT; then waits, at most 20 s, for the server to close them all and prints "closed K of N".
# Run it in the background and wait for its PID.
hold_idle() {
    python3 - "$1" "$2" >"$3" 2>&1 <<'PY'
import select, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
print("open %d" % n, flush=True)
left, end = set(socks), time.monotonic() + 20
while left and time.monotonic() < end:
    for s in select.select(list(left), [], [], 0.2)[0]:
        try:
            data = s.recv(64)
        except OSError:
            data = b""
        if not data:
            left.discard(s)
print("closed %d of %d" % (n - len(left), n), flush=True)
PY
}

# --- command line ---
"$D" --bogus >"$TMP/u.out" 2>"$TMP/u.err"; rc=$?
check "bad flag exits 2 with one line naming it" \
    test "$rc" = 2 -a "$(wc -l <"$TMP/u.err")" = 1 -a -n "$(grep -- '--bogus' "$TMP/u.err")"
"$D" --port 70000 --no-auth >/dev/null 2>"$TMP/u.err"; rc=$?
check "bad port exits 2 naming --port" test "$rc" = 2 -a -n "$(grep -- '--port' "$TMP/u.err")"
"$D" --port 0 >/dev/null 2>"$TMP/u.err"; rc=$?
check "no token and no --no-auth exits 2" test "$rc" = 2

TOKEN_HEX=$(random_token "$TMP/token")
printf 'short\n' >"$TMP/short"
chmod 600 "$TMP/short"
"$D" --port 0 --token-file "$TMP/short" >/dev/null 2>"$TMP/u.err"; rc=$?
check "a token shorter than 16 bytes is refused" test "$rc" = 1
cp "$TMP/token" "$TMP/loose" && chmod 644 "$TMP/loose"
timeout 5 "$D" --port 0 --token-file "$TMP/loose" >/dev/null 2>"$TMP/u.err"; rc=$?
check "a token file readable by others is refused: one line with its mode and the chmod to run" \
    test "$rc" = 1 -a "$(wc -l <"$TMP/u.err")" = 1 -a \
    -n "$(grep -F "$TMP/loose: mode 0644" "$TMP/u.err" | grep -F "chmod 600 $TMP/loose")"
DDPRUN_TOKEN_FILE=$TMP/loose timeout 5 "$H/store_client" 1 ping >/dev/null 2>"$TMP/u.err"; rc=$?
check "clients refuse a loose DDPRUN_TOKEN_FILE too, naming the variable" \
    test "$rc" != 0 -a "$rc" != 124 -a -n "$(grep -F 'DDPRUN_TOKEN_FILE' "$TMP/u.err" | grep -F 'chmod 600')"
ln -s "$TMP/token" "$TMP/token.link"
mkfifo -m 600 "$TMP/fifo"
timeout 5 "$D" --port 0 --token-file "$TMP/fifo" >/dev/null 2>"$TMP/u.err"; rc=$?
check "a FIFO as token file fails at once (no hang), naming the file" \
    test "$rc" = 1 -a -n "$(grep -F "$TMP/fifo: not a regular file" "$TMP/u.err")"

# A token error is one line naming its one source once (no prefix added on the way), saying what
# is expected, never showing the secret.
# token_refused NAME NEEDLE SECRET ENV... -- ARGS...: the daemon started with ENV and ARGS exits
# non-zero with one line holding NEEDLE and at most one DDPRUN_ name, and not holding SECRET.
token_refused() {
    local name=$1 needle=$2 secret=$3 rc; shift 3
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout 5 "$D" --port 0 "$@" >/dev/null 2>"$TMP/tok.err"; rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$(wc -l <"$TMP/tok.err")" = 1 ] &&
        grep -qF -- "$needle" "$TMP/tok.err" &&
        [ "$(grep -o 'DDPRUN_[A-Z_]*' "$TMP/tok.err" | wc -l)" -le 1 ] &&
        ! grep -qF -- "$secret" "$TMP/tok.err"; then
        ok "$name"
    else
        echo "# rc $rc:"; sed 's/^/#   /' "$TMP/tok.err"; not_ok "$name"
    fi
}
token_refused "DDPRUN_STORE_TOKEN not hex: one line, the variable once, what is expected" \
    "E DDPRUN_STORE_TOKEN: character 1 of 10 is not a hex digit: expected an even number of hex digits (0-9a-f)" \
    xyzsecret DDPRUN_STORE_TOKEN=xyzsecret0 --
token_refused "DDPRUN_TOKEN of odd length: one line naming it once" \
    "E DDPRUN_TOKEN: 3 hex digits, an odd number: expected an even number" abc DDPRUN_TOKEN=abc --
token_refused "DDPRUN_TOKEN too long: its length, not its text" \
    "E DDPRUN_TOKEN: 3000 hex digits, too many: expected an even number of hex digits (0-9a-f), at most 2048" \
    aaaaaaaa "DDPRUN_TOKEN=$(printf 'a%.0s' $(seq 3000))" --
: >"$TMP/empty.tok" && chmod 600 "$TMP/empty.tok"
token_refused "an empty DDPRUN_TOKEN_FILE: the variable and its path once" \
    "E DDPRUN_TOKEN_FILE=$TMP/empty.tok: the token is 0 bytes: expected 1..1024 bytes" \
    "token file" "DDPRUN_TOKEN_FILE=$TMP/empty.tok" --
token_refused "an empty --token-file: the flag and its path once" \
    "E --token-file $TMP/empty.tok: the token is 0 bytes: expected 1..1024 bytes" \
    "token file" DDPRUN_TOKEN=zz -- --token-file "$TMP/empty.tok"
token_refused "a missing DDPRUN_TOKEN_FILE: the variable and its path once" \
    "E DDPRUN_TOKEN_FILE=$TMP/nonexistent: unable to open: No such file or directory" \
    "token file" "DDPRUN_TOKEN_FILE=$TMP/nonexistent" --

# --- daemon A: token, small output cap and a short handshake deadline ---
start_daemon A --token-file "$TMP/token.link" --max-out-buf 1048576 --auth-idle-ms 400
check "daemon prints exactly one stdout line" test "$(wc -l <"$TMP/A.out")" = 1
P=$PORT_A
export DDPRUN_STORE_TOKEN=$TOKEN_HEX

out=$(timeout 30 "$H/store_swarm" "$P" 200 20000 2>&1)
check "200 concurrent clients: set, wait released by a neighbour, barrier, add" \
    test "$out" = "swarm ok 200"
check "the counter saw all 200" test "$(timeout 5 "$H/store_client" "$P" get swarm/count 0)" = 200

timeout 10 "$H/store_client" "$P" get late/key 5000 >"$TMP/waiter.out" 2>&1 &
waiter=$!
sleep 0.2
timeout 5 "$H/store_client" "$P" set late/key ncclid-bytes >/dev/null
wait "$waiter"; rc=$?
check "a parked get is released by another client's set" \
    test "$rc" = 0 -a "$(cat "$TMP/waiter.out")" = ncclid-bytes

out=$(timeout 5 "$H/store_client" "$P" get-then-ping never/set 200 2>&1)
check "get times out, CANCEL_WAIT, connection still usable" test "$out" = "$(printf 'timeout\npong')"
timeout 5 "$H/store_client" "$P" wait never/set 100 >/dev/null 2>&1; rc=$?
check "wait times out with exit 3" test "$rc" = 3
check "no parked waits left on the server" \
    grep -qx 'waiting 0' <(timeout 5 "$H/store_client" "$P" stats)

DDPRUN_STORE_TOKEN=$(printf '%064d' 0) timeout 5 "$H/store_client" "$P" ping >/dev/null \
    2>"$TMP/auth.err"; rc=$?
check "wrong token refused (exit 4, names the peer)" \
    test "$rc" = 4 -a -n "$(grep 'refused the token' "$TMP/auth.err")"
env -u DDPRUN_STORE_TOKEN timeout 5 "$H/store_client" "$P" ping >/dev/null 2>"$TMP/auth2.err"
rc=$?
check "missing token refused (exit 4, says which variable)" \
    test "$rc" = 4 -a -n "$(grep DDPRUN_STORE_TOKEN "$TMP/auth2.err")"
check "refused authentication logged with the peer address" \
    grep -qE 'W closing connection from 127\.0\.0\.1:[0-9]+: authentication refused' "$TMP/A.err"
out=$(timeout 12 "$H/store_hostile" "$P" rdzv-ctl)
check "a JOIN whose host holds control bytes gets an error reply naming the field" \
    test -n "$(printf '%s' "$out" | grep -E 'malformed JOIN: host holds byte 0x1b .*printable ASCII')"
out=$(env -u DDPRUN_STORE_TOKEN timeout 12 "$H/store_hostile" "$P" unauth)
check "commands before authentication close the connection" \
    grep -q 'GETNUMKEYS before authentication' "$TMP/A.err"
out=$(env -u DDPRUN_STORE_TOKEN timeout 12 "$H/store_hostile" "$P" unauth-rdzv)
check "a rendezvous command before authentication is named in the warning, not UNKNOWN" \
    grep -qE 'W closing connection from 127\.0\.0\.1:[0-9]+: RDZV_STATUS before authentication' "$TMP/A.err"

before=$(grep -c ' W ' "$TMP/A.err")
out=$(timeout 12 "$H/store_hostile" "$P" malformed)
check "malformed frame: connection closed" grep -q '^closed' <<<"$out"
check "malformed frame: exactly one warning naming the peer" test "$(grep -c ' W ' "$TMP/A.err")" = \
    $((before + 1)) -a "$(warn_lines "$TMP/A.err" \
    'from 127\.0\.0\.1:[0-9]+: malformed frame: unknown command 0x3f')" = 1
out=$(timeout 12 "$H/store_hostile" "$P" oversized)
check "oversized key length: closed with one warning" \
    test "$(warn_lines "$TMP/A.err" 'malformed GET frame: key length 1099511627776 exceeds 8192')" = 1
out=$(timeout 12 "$H/store_hostile" "$P" truncated)
check "truncated frame then EOF: one warning" \
    test "$(warn_lines "$TMP/A.err" 'ended inside a SET frame')" = 1
out=$(env -u DDPRUN_STORE_TOKEN timeout 12 "$H/store_hostile" "$P" no-validate)
check "a first command other than VALIDATE is refused" \
    grep -q 'first command is SET' "$TMP/A.err"

# The slow reader and the idle client run while a regular client keeps working.
timeout 15 "$H/store_hostile" "$P" slow-reader >"$TMP/slow.out" 2>&1 &
slow=$!
env -u DDPRUN_STORE_TOKEN timeout 15 "$H/store_hostile" "$P" idle >"$TMP/idle.out" 2>&1 &
idle=$!
ok_during=1
for i in $(seq 1 10); do
    timeout 5 "$H/store_client" "$P" add during/count 1 >/dev/null || ok_during=0
done
wait "$slow"; rc_slow=$?
wait "$idle"; rc_idle=$?
check "slow reader cut off past --max-out-buf" \
    test "$rc_slow" = 0 -a -n "$(grep -E 'slow reader: [0-9]+ bytes of replies unread \(limit 1048576\)' "$TMP/A.err")"
idle_ms=$(sed -nE 's/^closed after ([0-9]+) ms$/\1/p' "$TMP/idle.out")
check "idle unauthenticated client closed after --auth-idle-ms (${idle_ms:-?} ms)" \
    test "$rc_idle" = 0 -a "${idle_ms:-0}" -ge 380 -a "${idle_ms:-99999}" -lt 3000
check "idle close logged naming the peer" \
    grep -qE 'from 127\.0\.0\.1:[0-9]+: no authentication within 400 ms' "$TMP/A.err"
check "other clients kept working meanwhile" test "$ok_during" = 1
check "the daemon is still serving" test "$(timeout 5 "$H/store_client" "$P" ping)" = pong

# SIGTERM with a client parked in a wait: exit 0 promptly; the client sees the close.
timeout 10 "$H/store_client" "$P" get parked/forever -1 >/dev/null 2>&1 &
parked=$!
sleep 0.2
check "SIGTERM: clean exit 0 with a parked waiter" stop_daemon A
wait "$parked"; rc=$?
check "the parked client is told the connection closed" test "$rc" = 5

# --- daemon B: no authentication, one warning, PyTorch's byte exchange ---
unset DDPRUN_STORE_TOKEN
start_daemon B --no-auth --max-conns 4 --max-mem 4194304
check "--no-auth prints one warning line" test "$(warn_lines "$TMP/B.err" 'without authentication')" = 1
# Agents and `ddprun status` that hold a token refuse a store that cannot prove it holds the same
# one: whoever answers first on the endpoint would otherwise run the rendezvous and pick
# MASTER_ADDR. Each exits non-zero with one error line naming the endpoint; no worker starts.
random_token "$TMP/job.tok" >/dev/null
for n in 0 1; do
    DDPRUN_TOKEN_FILE=$TMP/job.tok timeout -k 2 20 "$BIN/ddprun" --nnodes 2 --nproc_per_node 1 \
        --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$PORT_B" --rdzv_id downgrade \
        --no_python touch "$TMP/downgrade.ran" >"$TMP/down$n.out" 2>&1 &
    eval "down_pid$n=$!"
done
wait "$down_pid0"; down_rc0=$?
wait "$down_pid1"; down_rc1=$?
down_lines() { grep -cE "127\.0\.0\.1:$PORT_B: the store has no token \(--no-auth\)" "$1"; }
[ "$down_rc0" != 0 ] && [ "$down_rc0" != 124 ] && [ "$down_rc1" != 0 ] && [ "$down_rc1" != 124 ] &&
    [ "$(down_lines "$TMP/down0.out")" = 1 ] && [ "$(down_lines "$TMP/down1.out")" = 1 ] &&
    [ ! -e "$TMP/downgrade.ran" ]
verdict "agents with a token refuse a --no-auth store: exit non-zero (${down_rc0}, ${down_rc1}), one line naming it, no worker" ||
    show_tail "$TMP/down0.out" "$TMP/down1.out"
DDPRUN_TOKEN_FILE=$TMP/job.tok timeout -k 2 10 "$BIN/ddprun" status \
    --rdzv_endpoint "127.0.0.1:$PORT_B" --rdzv_id downgrade >"$TMP/down_status.out" 2>&1
down_rc=$?
[ "$down_rc" != 0 ] && [ "$down_rc" != 124 ] && [ "$(down_lines "$TMP/down_status.out")" = 1 ]
verdict "ddprun status with a token refuses a --no-auth store (exit $down_rc)" ||
    show_tail "$TMP/down_status.out"
out=$(timeout 12 "$H/store_hostile" "$PORT_B" torch-compat 2>&1)
check "PyTorch TCPStore byte exchange (VALIDATE PING SET WAIT GET ADD CANCEL_WAIT CHECK ...)" \
    test "$out" = ok
timeout 5 "$H/store_client" "$PORT_B" set-size mem/one 1500000 >/dev/null; rc1=$?
timeout 5 "$H/store_client" "$PORT_B" set-size mem/two 1500000 >/dev/null 2>&1; rc2=$?
check "--max-mem: a SET past the memory limit closes only its connection" \
    test "$rc1" = 0 -a "$rc2" = 5 -a -n "$(grep -E 'memory limit \(4194304 bytes\)' "$TMP/B.err")"
check "the store still serves after the memory refusal" \
    test "$(timeout 5 "$H/store_client" "$PORT_B" ping)" = pong
# A peer that sends half a frame and resets (SO_LINGER 0) is named in the one warning line.
python3 - "$PORT_B" <<'PY'
import socket, struct, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", 7))
assert c.recv(4) == struct.pack("<I", 7)  # PING echoed: the daemon has accepted us
c.sendall(b"\x01" + struct.pack("<Q", 3) + b"abc" + struct.pack("<Q", 100) + b"xy")
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
c.close()
PY
wait_for "$TMP/B.err" 'inside a SET frame' 5 >/dev/null
check "half a frame, then a reset: one warning naming the peer (127.0.0.1:port)" \
    grep -qE 'W closing connection from 127\.0\.0\.1:[0-9]+: connection ended inside a SET frame' "$TMP/B.err"
# A client with Nagle on (no TCP_NODELAY) that sends SET, then GET, as two writes waits for the
# SET's ACK before the GET leaves: the daemon must ACK at once (a delayed ACK is 40 ms a pair).
nagle_s=$(python3 - "$PORT_B" <<'PY'
import socket, struct, sys, time
def blob(b): return struct.pack("<Q", len(b)) + b
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
c.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", 7))
assert c.recv(4) == struct.pack("<I", 7)
t = time.monotonic()
for i in range(50):
    c.sendall(b"\x01" + blob(b"nagle") + blob(b"v" * 16))
    c.sendall(b"\x03" + blob(b"nagle"))
    got = b""
    while len(got) < 24:
        got += c.recv(64)
print("%.2f" % (time.monotonic() - t))
PY
)
check "a Nagle client's 50 SET-then-GET pairs are not held by delayed ACKs (${nagle_s:-?} s, stalled: 2 s)" \
    awk -v t="${nagle_s:-9}" 'BEGIN { exit !(t < 1.0) }'
pids=()
for i in 1 2 3 4; do
    timeout 10 "$H/store_client" "$PORT_B" get conn/gate 8000 >/dev/null 2>&1 &
    pids+=($!)
done
sleep 0.3
timeout 5 "$H/store_client" "$PORT_B" ping >/dev/null 2>"$TMP/limit.err"; rc=$?
check "--max-conns: a fifth connection is refused" test "$rc" = 4
check "--no-auth: the refusal is logged naming the peer and the limit" \
    wait_for "$TMP/B.err" 'W refused connection from 127\.0\.0\.1:[0-9]+: connection limit 4 reached' 5
sleep 0.2
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
sleep 0.2
# PyTorch 2.x's TCPStore client (TORCH_PYTHON, as scripts/ensure-torch2.sh prints it; .ci/run sets
# it). Named explicitly, it must be there; the default python3 is tried and skipped without torch 2.x.
# The client looks addresses up by name: it runs under scripts/private-names.sh (no lookup leaves
# the machine), and is skipped, saying why, where that cannot be.
torch2='import sys, torch, torch.distributed; sys.exit(int(torch.__version__.split(".")[0]) < 2)'
name="PyTorch 2.x's own TCPStore clients (use_libuv True and False): every public method, with its value, blocking and timeout"
if ! scripts/private-names.sh true 2>"$TMP/names.err"; then
    skip "$name" "no private name lookups: $(cat "$TMP/names.err")"
elif [ -n "${TORCH_PYTHON:-}" ] || timeout 60 python3 -c "$torch2" 2>/dev/null; then
    py=${TORCH_PYTHON:-python3}
    out=$(timeout 60 scripts/private-names.sh "$py" tests/helpers/store_torch_client.py "$PORT_B" \
        2>"$TMP/torch.err")
    check "$name ($("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null))" \
        test "$out" = "torch client ok"
    [ "$out" = "torch client ok" ] || sed 's/^/#   /' "$TMP/torch.err" | head -20
else
    skip "$name" "python3 has no torch 2.x (TORCH_PYTHON=\$(scripts/ensure-torch2.sh) runs it)"
fi
check "SIGINT: clean exit 0" bash -c "kill -INT $PID_B; for i in \$(seq 60); do kill -0 $PID_B 2>/dev/null || exit 0; sleep 0.05; done; exit 1"
wait "$PID_B"; rc=$?
check "daemon B exit status 0" test "$rc" = 0

# --- daemon C: a token and --max-conns 10; idle sockets that never authenticate ---
export DDPRUN_STORE_TOKEN=$TOKEN_HEX
start_daemon C --token-file "$TMP/token" --max-conns 10 --auth-idle-ms 1500
hold_idle "$PORT_C" 20 "$TMP/idle20.out" &
holder=$!
wait_for "$TMP/idle20.out" '^open 20$' 10 >/dev/null
out=$(timeout 10 "$H/store_client" "$PORT_C" ping 2>&1)
check "20 idle unauthenticated sockets on --max-conns 10: a token holder still gets in" \
    test "$out" = pong
timeout 5 "$H/store_client" "$PORT_C" set flood/key survived >/dev/null 2>&1
check "... and can set and get" \
    test "$(timeout 5 "$H/store_client" "$PORT_C" get flood/key 0 2>&1)" = survived
check "the oldest handshake is evicted, logged naming both peers" wait_for "$TMP/C.err" \
    'W closing connection from 127\.0\.0\.1:[0-9]+: evicted, unauthenticated after [0-9]+ ms, to admit 127\.0\.0\.1:[0-9]+' 5
check "admission lines are rate-limited: a later line counts those not logged" \
    wait_for "$TMP/C.err" 'W [0-9]+ more (refused, evicted or idle )?connections? .*not logged' 5
check "at most one admission line per second" \
    test "$(warn_lines "$TMP/C.err" 'evicted, unauthenticated')" -le 2
wait "$holder"
check "every idle socket is closed: evicted or past the 1500 ms deadline" \
    grep -qx 'closed 20 of 20' "$TMP/idle20.out"
check "the evictions are counted" \
    grep -qE '^hs_evicted ([1-9][0-9]*)$' <(timeout 5 "$H/store_client" "$PORT_C" stats)
check "daemon C: clean exit" stop_daemon C

# --- daemon E: an open-file limit far below --max-conns ---
(ulimit -n 64 && exec "$D" --host 127.0.0.1 --port 0 --token-file "$TMP/token" --max-conns 1000 \
    >"$TMP/E.out" 2>"$TMP/E.err") &
PID_E=$!
wait_for "$TMP/E.out" '^listening on 127\.0\.0\.1:[0-9]+$' 5 >/dev/null
PORT_E=$(sed -nE 's/^listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$TMP/E.out")
check "ulimit -n 64: the daemon starts and says in one line that the open-file limit wins" \
    test -n "$PORT_E" -a "$(warn_lines "$TMP/E.err" \
    'connection limit 1000 clipped to [0-9]+: the open-file limit wins \(RLIMIT_NOFILE soft 64, hard 64')" = 1
hold_idle "${PORT_E:-1}" 100 "$TMP/idle100.out" &
holder=$!
wait_for "$TMP/idle100.out" '^open 100$' 10 >/dev/null
out=$(timeout 10 "$H/store_client" "${PORT_E:-1}" ping 2>&1)
check "100 idle sockets against 64 descriptors: a token holder still gets in" test "$out" = pong
kill -TERM "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
check "the surplus idle sockets were evicted, not left to run the daemon out of descriptors" \
    grep -qE '^hs_evicted ([1-9][0-9]*)$' <(timeout 5 "$H/store_client" "${PORT_E:-1}" stats)
check "daemon E: clean exit" stop_daemon E
unset DDPRUN_STORE_TOKEN

check "no processes left behind" no_leftovers 3
[ "$_failed" -gt 0 ] && sed "s/^/# A.err: /" "$TMP/A.err" | tail -30
finish
