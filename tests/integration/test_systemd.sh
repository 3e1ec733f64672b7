#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddp-rendezvous as a systemd service (contrib/systemd/ddp-rendezvous.service): the daemon's
# readiness notification (sd_notify's protocol: READY=1 with its address to $NOTIFY_SOCKET once
# it accepts connections, STOPPING=1 on SIGTERM), received by a real AF_UNIX datagram socket, with
# a path and in the abstract namespace; `make install` into a prefix of the suite's own installs the
# unit naming the daemon it installed, and that unit passes `systemd-analyze verify`, and its
# `systemd-analyze security` exposure (offline) is printed and must stay "OK" (below 2.0).
. "$(dirname "$0")/lib.sh"
D=$BIN/ddp-rendezvous
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
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

# `make install` into a prefix of our own: the unit it installs names the daemon it installed.
P=$TMP/prefix
INSTALLED=$P/lib/systemd/system/ddp-rendezvous.service
make -s -C "$ROOT" install PREFIX="$P" BUILD="$BUILD" >"$TMP/install.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -x "$P/bin/ddp-rendezvous" ] &&
    grep -q "^ExecStart=$P/bin/ddp-rendezvous --host" "$INSTALLED" && ! grep -q /usr/bin/ "$INSTALLED"
verdict "make install PREFIX=DIR: the unit in DIR/lib/systemd/system runs DIR/bin/ddp-rendezvous (rc $rc)"
[ $rc -eq 0 ] || tail -3 "$TMP/install.out" | sed 's/^/# /'

if command -v systemd-analyze >/dev/null; then
    # The unit as installed, its Documentation= page where man finds it.
    MANPATH=$P/share/man systemd-analyze verify "$INSTALLED" >"$TMP/verify.out" 2>&1
    rc=$?
    check "systemd-analyze verify: the installed unit is valid" [ $rc -eq 0 ]
    sed 's/^/# /' "$TMP/verify.out" | head -5
    systemd-analyze security --offline=true "$INSTALLED" >"$TMP/sec.out" 2>&1
    level=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' "$TMP/sec.out")
    echo "# systemd-analyze security --offline=true: exposure ${level:-?}"
    check "systemd-analyze security: exposure ${level:-?}, below 2.0 (OK)" \
        awk -v l="${level:-99}" 'BEGIN { exit !(l < 2.0) }'
else
    skip "systemd-analyze verify: the installed unit is valid" "systemd-analyze is missing"
    skip "systemd-analyze security: exposure below 2.0 (OK)" "systemd-analyze is missing"
fi
finish
