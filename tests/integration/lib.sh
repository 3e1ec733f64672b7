# SPDX-License-Identifier: Apache-2.0
# Shared helpers for integration suites: sourced, not run.
#
# Every process a suite starts carries DDP_TEST_TAG in its environment (inherited by workers and
# their children), so leftovers are found by scanning /proc for that tag, and only our own
# processes are ever signalled, by PID.
set -u
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd)
export DDP_TEST_TAG="ddptest-$$-$RANDOM$RANDOM"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ddptest.XXXXXX")
# Run directories ddprun keeps after a failure land here and go away with the suite.
export TMPDIR=$TMP
_n=0
_failed=0

ok() { _n=$((_n + 1)); echo "ok $_n - $*"; }
not_ok() { _n=$((_n + 1)); _failed=$((_failed + 1)); echo "not ok $_n - $*"; }

# skip NAME REASON: a check that cannot run here, as a TAP skip: "ok N - NAME # SKIP REASON".
# run.sh counts it as skipped, never as passed. Name the check as it reads when it runs, so the
# same line is found either way; one call per check that did not run.
skip() {
    [ $# -eq 2 ] && [ -n "$2" ] || { not_ok "skip needs NAME and REASON (got: $*)"; return; }
    _n=$((_n + 1))
    echo "ok $_n - $1 # SKIP $2"
}

# The fake worker (tests/fake_worker) reads FW_* variables: a suite starts with none of them
# inherited from the shell that runs it, and sets what each check needs.
fake_worker_env_clear() {
    local v
    for v in $(compgen -e | grep '^FW_'); do unset "$v"; done
}

# skip_all WHY: a suite that cannot run here (no root, a missing tool) reports each of its
# SECTIONS (an array the suite defines) as skipped with WHY, and ends.
skip_all() {
    local s
    for s in "${SECTIONS[@]}"; do skip "$s" "$1"; done
    finish
    exit 0
}

# check NAME CMD...: runs CMD; ok when it exits 0.
check() {
    local name=$1; shift
    if "$@"; then ok "$name"; else not_ok "$name"; fi
}

# tagged_alive PID: PID runs (not a zombie) and still carries our tag. A PID read from a file may
# name another process by now: pid_max may be 32768 (CI's is), and three suites at a time wrap it
# in seconds.
tagged_alive() {
    [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ] &&
        grep -qzx "DDP_TEST_TAG=$DDP_TEST_TAG" "/proc/$1/environ" 2>/dev/null
}

# tagged_pids: PIDs of live processes carrying our tag, other than this suite's own shells.
tagged_pids() {
    local f p c
    for f in $(grep -lzx "DDP_TEST_TAG=$DDP_TEST_TAG" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = $$ ] && continue
        c=$(tr '\0' ' ' 2>/dev/null < /proc/$p/cmdline)
        case "$c" in *tests/integration/*|"") continue ;; esac
        [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" = Z ] && continue
        echo "$p"
    done
}

# no_leftovers [WAIT_S]: true when no tagged process remains within WAIT_S seconds (default 3);
# otherwise lists them, kills them by PID and returns false.
# free_port: a TCP port free on 127.0.0.1, below the kernel's ephemeral range: a port another
# process's bind(0) (an agent's workers' store, a client) is never handed between this pick and
# the listener that uses it, as one picked by bind(0) itself can be.
free_port() {
    python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(20000, max(20001, low))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}

no_leftovers() {
    local deadline=$(( $(date +%s%N) / 1000000 + ${1:-3} * 1000 ))
    local left
    while :; do
        left=$(tagged_pids)
        [ -z "$left" ] && return 0
        [ $(( $(date +%s%N) / 1000000 )) -ge $deadline ] && break
        sleep 0.05
    done
    for p in $left; do
        echo "# leftover pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"
        kill -KILL "$p" 2>/dev/null
    done
    return 1
}

# wait_for FILE REGEX [TIMEOUT_S]: waits until a line of FILE matches REGEX.
wait_for() {
    local deadline=$(( $(date +%s%N) / 1000000 + ${3:-10} * 1000 ))
    while [ $(( $(date +%s%N) / 1000000 )) -lt $deadline ]; do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.02
    done
    echo "# timed out waiting for /$2/ in $1:"; sed 's/^/#   /' "$1" 2>/dev/null | tail -20
    return 1
}

# show_tail FILE...: the last 15 lines of each FILE as TAP comments, for a failed check whose
# cause is in a process's output (CI shows only the suite's own output).
show_tail() {
    local f
    for f in "$@"; do
        echo "# --- $f:"
        tail -15 "$f" 2>/dev/null | sed 's/^/#   /'
    done
}

# child_pid PID: the (first) child of PID, e.g. ddprun under `timeout`; waits up to 2 s for it.
child_pid() {
    local i c
    for i in $(seq 100); do
        c=$(cat /proc/$1/task/*/children 2>/dev/null | awk '{print $1}')
        [ -n "$c" ] && { echo "$c"; return 0; }
        sleep 0.02
    done
    return 1
}

# random_token FILE: 32 random bytes for a --token-file / DDPRUN_TOKEN_FILE, and prints their hex.
# A token file's one trailing newline (and CR) is stripped, as `echo secret > file` expects, so the
# last byte is fixed to a letter: a random 0x0a there would make the token one byte shorter than the
# hex the test expects (that flaked once in 256 runs).
# The file is private (mode 600): a token file that group or others can read is refused.
random_token() {
    (umask 077 && { head -c 31 /dev/urandom; printf k; } >"$1")
    chmod 600 "$1"
    od -An -tx1 -v "$1" | tr -d ' \n'
}

# finish: cleanup and exit status for the suite.
finish() {
    no_leftovers 1 >/dev/null 2>&1 || true
    rm -rf "$TMP"
    [ "$_failed" -eq 0 ]
}

# verdict NAME: ok when the command just before it succeeded. For conditions with && or ||,
# which `check` cannot take as arguments:  [ "$a" = 0 ] && [ "$b" = 0 ]; verdict "both exit 0"
# It returns 1 when the check failed, so that diagnostics can follow: verdict "x" || show_tail F
verdict() {
    if [ $? -eq 0 ]; then ok "$1"; else not_ok "$1"; return 1; fi
}

# etcd_refused NAME WANT_IN_LINE ARGS...: ddprun --rdzv_backend=etcd with ARGS (a bad flag or
# --rdzv_conf value) exits 2 with one line that contains WANT_IN_LINE, before any etcd is asked.
etcd_refused() {
    local name=$1 want=$2; shift 2
    "$DDPRUN" --nnodes=2 --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:1 --rdzv_id=bad "$@" "$FW" \
        >"$TMP/bad.out" 2>&1
    local rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.out")" = 1 ] && grep -q -- "$want" "$TMP/bad.out"; then
        ok "bad value: $name (exit 2, one line naming it)"
    else
        not_ok "bad value: $name (exit $rc)"; show_tail "$TMP/bad.out"
    fi
}

# APID: agents a suite started in the background, their PIDs by name.
declare -A APID
# workers DIR N: waits (10 s at most) until N fake workers (FW_DIR=DIR) of round 0 run.
workers() {
    local _
    for _ in $(seq 200); do
        [ "$(ls "$1" | grep -c '^pid\..*\.0$')" = "$2" ] && return 0
        sleep 0.05
    done
    return 1
}
# reap NAME [TIMEOUT_S]: waits up to TIMEOUT_S (default 40) for APID[NAME] to exit, then
# SIGKILLs it (continued first: it may be stopped); its exit code (137 after that SIGKILL).
reap() {
    local p=${APID[$1]} i
    for i in $(seq $((${2:-40} * 20))); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$p" 2>/dev/null; then
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p"
    fi
    wait "$p"
}

# one_error FILE TEXT: FILE holds exactly one error line (" E "), and it holds TEXT (a fixed
# string): the one line a refused start or a lost rendezvous must print.
one_error() {
    [ "$(grep -c ' E ' "$1")" = 1 ] && grep ' E ' "$1" | grep -qF -- "$2"
}

# etcd_agents_env: what the suites of agents on one local etcd member share: DDPRUN and FW (the
# fake worker, none of the caller's FW_* settings), no etcd credentials from the caller, a lease
# of TTL=3 s and CONF (the rendezvous settings every agent gets).
etcd_agents_env() {
    DDPRUN=$BIN/ddprun
    FW=$BIN/tests/fake_worker
    fake_worker_env_clear
    unset DDPRUN_ETCD_USER DDPRUN_ETCD_PASSWORD
    TTL=3
    CONF="last_call_timeout=1,lease_ttl=$TTL,keep_alive_interval=1"
}

# etcd_suite_member: the suite's one etcd member (etcd_member on $TMP/etcd, client port P1, peer
# port P2, both picked here), ready to serve; the suite is skipped whole (skip_all) when etcd is
# not installed or does not start.
etcd_suite_member() {
    command -v etcd >/dev/null 2>&1 ||
        skip_all "etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"
    P1=$(free_port)
    P2=$(free_port)
    while [ "$P2" = "$P1" ]; do P2=$(free_port); done
    etcd_member "$TMP/etcd" "$P1" "$P2"
    if ! wait_for "$TMP/etcd.log" 'ready to serve client requests' 20 >/dev/null; then
        kill "$ETCD" 2>/dev/null
        skip_all "etcd did not start on 127.0.0.1:$P1"
    fi
}

# etcd_member DIR CLIENT_PORT PEER_PORT: one etcd member ("one") on 127.0.0.1 in the background,
# its data in DIR (the same on a restart), its output appended to DIR.log; its PID in ETCD.
etcd_member() {
    setpriv --pdeathsig KILL etcd --name one --data-dir "$1" \
        --listen-client-urls "http://127.0.0.1:$2" \
        --advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
        --initial-advertise-peer-urls "http://127.0.0.1:$3" \
        --initial-cluster "one=http://127.0.0.1:$3" >>"$1.log" 2>&1 &
    ETCD=$!
}
