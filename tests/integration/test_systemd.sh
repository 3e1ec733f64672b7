#!/usr/bin/env bash
# ddp-rendezvous as a systemd service (contrib/systemd/ddp-rendezvous.service): the daemon's
# readiness notification (sd_notify's protocol: READY=1 with its address to $NOTIFY_SOCKET once
# it accepts connections, STOPPING=1 on SIGTERM), received by a real AF_UNIX datagram socket, with
# a path and in the abstract namespace; the unit passes `systemd-analyze verify`, and its
# `systemd-analyze security` exposure (offline) is printed and must stay "OK" (below 2.0).
. "$(dirname "$0")/lib.sh"
D=$BIN/ddp-rendezvous
UNIT=$(cd "$(dirname "$0")/../.." && pwd)/contrib/systemd/ddp-rendezvous.service
command -v python3 >/dev/null || { skip "sd_notify readiness" "python3 is missing"; finish; exit 0; }

# notify_run SOCKET: starts ddp-rendezvous with NOTIFY_SOCKET=SOCKET, a listener receiving its
# datagrams into $TMP/notify.out; SIGTERMs it once READY came; returns the daemon's exit code.
notify_run() {
    local sock=$1 lp dp rc
    rm -f "$TMP/notify.out" "$TMP/listening"
    python3 - "$sock" "$TMP/notify.out" "$TMP/listening" <<'PY' &
import socket, sys
path, out, flag = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + path[1:] if path.startswith("@") else path)
open(flag, "w").close()
s.settimeout(10)
with open(out, "w") as f:
    for _ in range(2):  # READY, then STOPPING
        f.write(s.recv(4096).decode() + "\n--\n")
        f.flush()
PY
    lp=$!
    for _ in $(seq 200); do [ -e "$TMP/listening" ] && break; sleep 0.05; done
    NOTIFY_SOCKET=$sock "$D" --host 127.0.0.1 --port 0 --no-auth >"$TMP/d.out" 2>&1 &
    dp=$!
    for _ in $(seq 200); do grep -q READY=1 "$TMP/notify.out" 2>/dev/null && break; sleep 0.05; done
    kill -TERM "$dp"
    wait "$dp"
    rc=$?
    wait "$lp"
    return $rc
}
notify_run "$TMP/notify.sock"; rc=$?
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/d.out")
check "NOTIFY_SOCKET (a path): READY=1, STATUS names the address, MAINPID; STOPPING=1 on SIGTERM; exit 0" \
    bash -c "[ $rc -eq 0 ] && [ -n '$port' ] && grep -qx READY=1 '$TMP/notify.out' &&
        grep -qx 'STATUS=listening on 127.0.0.1:$port' '$TMP/notify.out' &&
        grep -q '^MAINPID=[0-9]' '$TMP/notify.out' && grep -qx STOPPING=1 '$TMP/notify.out'"
notify_run "@ddptest-notify-$$"; rc=$?
check "NOTIFY_SOCKET in the abstract namespace ('@'): READY=1" \
    bash -c "[ $rc -eq 0 ] && grep -qx READY=1 '$TMP/notify.out'"

if command -v systemd-analyze >/dev/null; then
    # The unit as installed, pointed at this build; its Documentation= page where man finds it.
    sed "s|/usr/bin/ddp-rendezvous|$D|" "$UNIT" >"$TMP/ddp-rendezvous.service"
    mkdir -p "$TMP/man/man8"
    cp "$BIN/man/ddp-rendezvous.8" "$TMP/man/man8/" 2>/dev/null
    MANPATH=$TMP/man systemd-analyze verify "$TMP/ddp-rendezvous.service" >"$TMP/verify.out" 2>&1
    rc=$?
    check "systemd-analyze verify: the unit is valid" [ $rc -eq 0 ]
    sed 's/^/# /' "$TMP/verify.out" | head -5
    systemd-analyze security --offline=true "$TMP/ddp-rendezvous.service" >"$TMP/sec.out" 2>&1
    level=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' "$TMP/sec.out")
    echo "# systemd-analyze security --offline=true: exposure ${level:-?}"
    check "systemd-analyze security: exposure ${level:-?}, below 2.0 (OK)" \
        awk -v l="${level:-99}" 'BEGIN { exit !(l < 2.0) }'
else
    skip "systemd-analyze verify: the unit is valid" "systemd-analyze is missing"
    skip "systemd-analyze security: exposure below 2.0 (OK)" "systemd-analyze is missing"
fi
finish
