# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Agents of one ddprun job on network-namespace hosts (sourced after lib.sh; needs root and
# `ip netns`): what test_netns.sh and test_quarantine.sh share. The caller sets HOSTS (short
# names, single letters a..z, e.g. "a b c") before sourcing; this picks a prefix P and a subnet
# SUB unique to the run, defines addr_of (a is $SUB.11, b $SUB.12, ...), sources netns.sh and
# sets the EXIT/TERM/INT traps that tear everything down. Then:
#
#   netns_job_setup || skip_all "$NETNS_SETUP_WHY"   the bridge and the hosts, usable
#   on H CMD...        CMD in host H's namespaces (its hostname, our hosts file, no resolver)
#   agent H NNODES ARGS...   ddprun in host H, in the background: PID[H] is its `timeout`. Uses
#                      $PORT, $RUN, $D (FW_DIR=$D/H, output $D/H.out), $NPROC (default 2),
#                      $CONF (--rdzv_conf), $AGENT_LIMIT (seconds), the endpoint ${P}a:$PORT
#   wait_agent H SECS, wait_all H... (WAIT_S, default 15): RC[H]; rcs H..., all_rc CODE H...
#   teardown           SIGKILL what we started, delete the namespaces (idempotent)
#   ns_empty, ns_gone  no process left in our namespaces; the namespaces are gone
# and small helpers for the checks: now_ms, running, count, wait_count, since_ms, max_mtime,
# env_of, same_var, workers_gone, le, cond.

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# running PID: alive and not a zombie.
running() { [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# Names unique per run; a subnet away from the slurm harness's default 10.214.0.0/24.
P=ddp$$
while [ -e "/run/netns/${P}a" ] || [ -e "/run/netns/${P}br" ]; do P=ddp$$r$RANDOM; done
SUB=10.214.$((RANDOM % 200 + 20))
NSLIST="${P}br"
for _h in $HOSTS; do NSLIST="$NSLIST $P$_h"; done
unset _h
addr_of() { echo "$SUB.$(($(printf '%d' "'$1") - 97 + 11))"; }
. "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

declare -A PID RC LIVE
TORN=0

# teardown: SIGKILL what we started and is still running, anything left inside our namespaces,
# then delete the namespaces (their veths and the bridge go with them). Idempotent.
teardown() {
    [ "$TORN" = 1 ] && return 0
    TORN=1
    # bash would report each job killed here ("Killed") on stderr: nothing useful comes after.
    exec 2>/dev/null
    local p c ns
    # Our unreaped children (their PIDs cannot have been reused): SIGKILL what runs under each
    # (ddprun under `timeout`), give `timeout` a moment to reap it and go, then SIGKILL it.
    for p in "${!LIVE[@]}"; do
        for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do kill -KILL "$c" 2>/dev/null; done
    done
    for c in $(seq 50); do
        local alive=0
        for p in "${!LIVE[@]}"; do running "$p" && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.02
    done
    for p in "${!LIVE[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for ns in $NSLIST; do
        [ -e "/run/netns/$ns" ] || continue
        # Processes in a namespace this suite made are this suite's.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for p in "${!LIVE[@]}"; do wait "$p" 2>/dev/null; unset "LIVE[$p]"; done
    for ns in $NSLIST; do
        [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
    done
    netns_dir_release
}
# On an early exit (SIGTERM, a failure of the suite) finish does not run: remove $TMP here.
trap 'teardown; rm -rf "$TMP"' EXIT
trap 'echo "# SIGTERM: tearing down"; exit 143' TERM
trap 'echo "# SIGINT: tearing down"; exit 130' INT

_netns_job_make() (
    set -e
    netns_bridged_hosts "$P" "$TMP"
    # Usable, not just created (in a user namespace `ip netns add` can half-succeed).
    for h in $HOSTS; do
        nsenter --net="/run/netns/$P$h" ip -br addr show eth0 | grep -q "$(addr_of "$h")/"
    done
)
# netns_job_setup: makes the hosts; on failure tears down what was made, sets NETNS_SETUP_WHY
# and returns 1.
netns_job_setup() {
    local t rc h names=""
    t=$(now_ms)
    # Not `if ! _netns_job_make`: that context would switch off its `set -e`.
    _netns_job_make >"$TMP/setup.err" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
        NETNS_SETUP_WHY=$(grep -v '^$' "$TMP/setup.err" | tail -1)
        NETNS_SETUP_WHY="network namespaces unavailable: ${NETNS_SETUP_WHY:-ip netns add failed}"
        teardown
        return 1
    fi
    for h in $HOSTS; do names="$names $P$h"; done
    echo "# hosts$names on $SUB.0/24 (bridge in ${P}br), set up in $(($(now_ms) - t)) ms"
}

# INS: the rest of the command runs with host H's hostname, our hosts file on /etc/hosts and a
# resolver on loopback only on /etc/resolv.conf (PyTorch's TCPStore server looks up its clients'
# names: a name the hosts file lacks fails on loopback, no packet leaves). nsenter --net (not `ip
# netns exec`, which remounts /sys); nsenter, unshare and sh all exec, so a background job's $!
# ends up being the command itself.
INS=(unshare --uts --mount --propagation private /bin/sh -c
    'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && hostname "$3" &&
        shift 3 && exec "$@"' in_ns "$TMP/hosts" "$TMP/resolv.conf")
on() {
    local h=$1
    shift
    nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" "$@"
}

agent() {
    local h=$1 nn=$2
    shift 2
    mkdir -p "$D/$h"
    FW_DIR=$D/$h nsenter --net="/run/netns/$P$h" "${INS[@]}" "$P$h" \
        timeout -k 3 "$AGENT_LIMIT" "$DDPRUN" -v --nnodes="$nn" --nproc_per_node="${NPROC:-2}" \
        --rdzv_backend=c10d --rdzv_endpoint="${P}a:$PORT" --rdzv_id="$RUN" --rdzv_conf="$CONF" \
        "$@" >"$D/$h.out" 2>&1 &
    PID[$h]=$!
    LIVE[$!]=1
}

# ddprun_of H: the ddprun process of host H's agent.
ddprun_of() { child_pid "${PID[$1]}"; }

# wait_agent H SECS: waits at most SECS for host H's agent, SIGKILLs it after that; RC[H] ("-"
# when no agent was started on H since the last wait: its old PID may belong to another process).
wait_agent() {
    local h=$1 p=${PID[$1]:-} end=$(($(now_ms) + $2 * 1000)) c
    if [ -z "$p" ]; then
        RC[$h]=-
        return 0
    fi
    while running "$p"; do
        if [ "$(now_ms)" -ge $end ]; then
            echo "# agent on $h still running after $2 s: SIGKILL"
            for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do kill -KILL "$c" 2>/dev/null; done
            kill -KILL "$p" 2>/dev/null
            break
        fi
        sleep 0.02
    done
    wait "$p" 2>/dev/null
    RC[$h]=$?
    unset "LIVE[$p]" "PID[$h]"
}
wait_all() {
    local h
    for h in "$@"; do wait_agent "$h" "${WAIT_S:-15}"; done
}
rcs() {
    local h s=""
    for h in "$@"; do s="$s$h=${RC[$h]} "; done
    echo "${s% }"
}
all_rc() { # all_rc CODE H...
    local want=$1 h
    shift
    for h in "$@"; do [ "${RC[$h]}" = "$want" ] || return 1; done
}

# count PATTERN...: how many files match the patterns.
count() {
    local n=0 pat
    for pat; do n=$((n + $(compgen -G "$pat" | wc -l))); done
    echo $n
}
# wait_count N SECS PATTERN...: until at least N files match.
wait_count() {
    local n=$1 end=$(($(now_ms) + $2 * 1000))
    shift 2
    while [ "$(count "$@")" -lt "$n" ]; do
        [ "$(now_ms)" -ge $end ] && { echo "# timed out waiting for $n files like $*"; return 1; }
        sleep 0.02
    done
}
since_ms() { local d=$(($1 - $2)); echo $((d < 0 ? 0 : d)); }
mtime_ms() { echo $(($(date -r "$1" +%s%N) / 1000000)); }
# max_mtime PATTERN...: newest modification time (ms) of matching files. File times come from
# the kernel's coarse clock: up to a few ms behind `date`, so a delay measured with them can come
# out a few ms short (since_ms clamps it at 0).
max_mtime() {
    local m=0 f t pat
    for pat; do for f in $(compgen -G "$pat"); do
        t=$(mtime_ms "$f")
        [ "$t" -gt "$m" ] && m=$t
    done; done
    echo "$m"
}
env_of() { sed -n "s/^$2=//p" "$1" 2>/dev/null; }
# same_var VAR VALUE PATTERN...: every matching file has VAR=VALUE (and at least one matches).
same_var() {
    local var=$1 val=$2 f n=0 pat
    shift 2
    for pat; do for f in $(compgen -G "$pat"); do
        [ "$(env_of "$f" "$var")" = "$val" ] || return 1
        n=$((n + 1))
    done; done
    [ $n -gt 0 ]
}
# worker_alive PID H: PID is running and is still one of host H's workers. pid_max may be 32768
# (CI's is), and three suites at a time wrap it in seconds: a PID seen again may be another
# process's, so the worker's own environment must be there too (FW_DIR: agent() gives it to the
# host's ddprun, whose workers inherit it).
worker_alive() {
    running "$1" && grep -qzx "FW_DIR=$D/$2" "/proc/$1/environ" 2>/dev/null
}
# workers_gone H ROUND: the workers host H started in ROUND are not running (waits up to 2 s).
workers_gone() {
    local f p
    for f in $(compgen -G "$D/$1/pid.*.$2"); do
        p=$(cat "$f")
        for _ in $(seq 100); do worker_alive "$p" "$1" || break; sleep 0.02; done
        worker_alive "$p" "$1" && { echo "# worker $p ($f) still running"; return 1; }
    done
    return 0
}
le() { [ "$1" -le "$2" ]; }
# cond 'SHELL CONDITION': for check, when a condition has several parts.
cond() { eval "$1"; }
# ns_empty: no process left in any of our namespaces.
ns_empty() {
    local ns left=""
    for ns in $NSLIST; do
        [ -e "/run/netns/$ns" ] || continue
        left="$left$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    done
    [ -z "${left// /}" ] || { echo "# still in our namespaces: $left"; return 1; }
}
# ns_gone: after teardown, none of our namespaces is left.
ns_gone() {
    local ns
    for ns in $NSLIST; do [ ! -e "/run/netns/$ns" ] || return 1; done
    ! ip netns list 2>/dev/null | grep -q "^$P"
}
