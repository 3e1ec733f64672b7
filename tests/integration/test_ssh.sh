#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 43
# ddprun --hostfile / --hosts against real OpenSSH: three hosts made of network namespaces joined by
# a bridge in a fourth, where the launcher runs; each host has its own hostname, /etc/hosts, an sshd
# (Debian's openssh-server) with its own host key, and a key made here in its authorized keys. The
# launcher's ssh reads only a config made here (-F) whose Host entries are aliases with numeric
# HostName addresses: no name is ever looked up, and no interface outside the namespaces exists for
# a packet to leave by. Checks: a 2-host and a 3-host train job end with the same parameters as a
# one-host run of the same world size; slots per host are honoured; output comes back tagged with
# host and rank; Ctrl-C and SIGTERM at the launcher reach every worker as that signal (a worker that
# traps it saves), SIGUSR1/SIGUSR2 of --signals_to_handle reach every worker while the job goes on,
# and a second Ctrl-C kills at once workers that ignore the first; Ctrl-C, SIGTERM and kill -9 of
# the launcher, also after its network went away, leave no process of the job on any host, while a
# launcher suspended by Ctrl-Z is waited for; no session gets a terminal, whatever the ssh config or
# --ssh ask; an unreachable host, a refused key and a missing remote ddprun each give one clear
# line; with --nnodes=MIN:MAX the job goes on without unreachable hosts while at least MIN came up,
# and stops everything below MIN; a failing worker gives the job's exit code, and its own summary,
# naming its host and rank, reaches the launcher; --rdzv_backend=etcd (an etcd in the launcher's
# namespace) reaches every host's agent, which elect one store, also without the first host;
# hostile hostfiles are refused by line before any host is contacted.
#
# The hosts are made by ssh_hosts.sh. Needs root, `ip netns`, sshd and ssh; otherwise every check
# is reported as skipped.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
TRAIN=$BIN/train
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_SSH

SECTIONS=("2-host train equals a one-host world of 2" "3-host train equals a one-host world of 3"
    "slots per host honoured" "output tagged with host and rank" "a failing worker fails the job"
    "Ctrl-C stops every host" "workers get the launcher's signal"
    "SIGUSR1 and SIGUSR2 forwarded to every host" "a second Ctrl-C kills the workers at once"
    "kill -9 of the launcher leaves nothing" "no terminal whatever the ssh config says"
    "the launcher's network gone, then kill -9" "Ctrl-Z at the launcher is not its end"
    "unreachable host"
    "refused key" "missing remote ddprun" "--nnodes=2:3 goes on without an unreachable host"
    "--nnodes=3:3 with an unreachable host fails" "--nnodes=2:3 with two unreachable hosts fails"
    "--nnodes=2:3 without the first host fails" "--nnodes=2:3 goes on without an unfit host"
    "etcd over ssh" "etcd over ssh without the first host"
    "hostile hostfiles refused by line"
    "nothing left, namespaces removed")

[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for c in ip nsenter unshare timeout ssh ssh-keygen /usr/sbin/sshd; do
    command -v $c >/dev/null || skip_all "$c is missing (scripts/ensure-deps.sh --test)"
done

now_ms() { echo $(($(date +%s%N) / 1000000)); }
running() { [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# wait_launcher PID: waits for the launcher PID (a child of this shell) to end, SIGKILLs it past
# 20 s, and returns its exit status.
wait_launcher() {
    local i
    for i in $(seq 400); do running "$1" || break; sleep 0.05; done
    running "$1" && kill -KILL "$1"
    wait "$1"
}

# ------------------------------------------------------------------------------------ hosts
HOSTS="a b c"
SSHH_DIR=$TMP
# Port 2 of host a refuses connections; badkey is host a with another key, not authorized.
SSHH_NO_KEY=badkey
sshh_config_extra() {
    ssh-keygen -q -t ed25519 -N '' -C ddptest-other -f "$TMP/id_other"
    chmod 600 "$TMP/id_other"
    printf 'Host noport\n  HostName %s\n  Port 2\n' "$(addr_of a)"
    printf 'Host badkey\n  HostName %s\n  IdentityFile %s\n' "$(addr_of a)" "$TMP/id_other"
}
. "$(dirname "$0")/ssh_hosts.sh"
teardown() { exec 2>/dev/null; sshh_teardown; }
trap 'teardown; rm -rf "$TMP"' EXIT
trap 'echo "# SIGTERM: tearing down"; exit 143' TERM
trap 'echo "# SIGINT: tearing down"; exit 130' INT

t_setup=$(now_ms)
sshh_setup >"$TMP/setup.err" 2>&1
setup_rc=$?
if [ $setup_rc != 0 ]; then
    why=$(grep -v '^$' "$TMP/setup.err" | tail -1)
    teardown
    skip_all "network namespaces unavailable: ${why:-ip netns add failed}"
fi
if ! sshh_start; then
    show_tail "$TMP"/sshd_?.log
    teardown
    skip_all "sshd did not come up in the namespaces"
fi
echo "# hosts ${P}a ${P}b ${P}c on $SUB.0/24 with sshd, launcher in ${P}br, set up in $(($(now_ms) - t_setup)) ms"

# launch ARGS...: ddprun with the test's ssh config, in the launcher's namespace, bounded.
launch() {
    ip netns exec "${P}br" timeout -k 3 60 "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" "$@"
}
# job_procs: processes in the hosts' namespaces other than the sshd listeners (a job's agents,
# workers, sshd's per-session processes), and ssh clients in the launcher's.
job_procs() {
    local h p
    for h in $HOSTS; do
        for p in $(ip netns pids "$P$h" 2>/dev/null); do
            [ "$p" = "$(child_of_ins "$h")" ] && continue
            running "$p" && echo "$h:$p:$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | head -c 80)"
        done
    done
    for p in $(ip netns pids "${P}br" 2>/dev/null); do
        running "$p" && echo "br:$p:$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | head -c 80)"
    done
}
# The sshd listener of host H: $! of the nsenter/unshare/sh chain, which all exec.
child_of_ins() { echo "${SSHD[$1]}"; }
# nothing_left SECS: no job process on any host within SECS.
nothing_left() {
    local end=$(($(now_ms) + $1 * 1000)) left
    while :; do
        left=$(job_procs)
        [ -z "$left" ] && return 0
        [ "$(now_ms)" -ge $end ] && break
        sleep 0.05
    done
    echo "$left" | sed 's/^/# left: /'
    return 1
}
params_close() { # params_close A B: float32 parameter files agree up to rounding
    python3 -c '
import struct, sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert len(a) == len(b) > 0
n = len(a) // 4
x, y = struct.unpack("<%df" % n, a), struct.unpack("<%df" % n, b)
worst = max(abs(p - q) / (1e-3 + abs(p)) for p, q in zip(x, y))
assert worst < 1e-3, worst' "$1" "$2"
}

SMALL=(--layers 32,64,4 --samples 2048 --batch-size 16 --backend cpu --log-every 1000 --epochs 1 --max-steps 20)
D=$TMP/work
mkdir -p "$D"
cd "$D" || exit 1

# ------------------------------------------------------------------------------------ 1. train
for n in 2 3; do
    hosts=$(for h in $HOSTS; do echo "node$h"; done | head -$n | paste -sd,)
    launch --hosts "$hosts" --nproc_per_node=1 "$TRAIN" "${SMALL[@]}" \
        --dump-params "$D/ssh$n.bin" >"$D/ssh$n.out" 2>&1
    rc=$?
    timeout -k 3 60 "$DDPRUN" --standalone --nproc_per_node=$n "$TRAIN" "${SMALL[@]}" \
        --dump-params "$D/one$n.bin" >"$D/one$n.out" 2>&1
    rc1=$?
    [ $rc = 0 ] && [ $rc1 = 0 ] && params_close "$D/one$n.bin" "$D/ssh$n.bin"
    verdict "$n hosts x 1 worker over ssh: train exits 0 with the parameters of a one-host world of $n (rc $rc, $rc1)" ||
        show_tail "$D/ssh$n.out" "$D/one$n.out"
done
check "the 3-host job ran as a world of 3" grep -q "world 3" "$D/ssh3.out"

# ------------------------------------------------------------------------------------ 2. slots
printf '# the job\nnodea slots=2\n\nnodeb:1   # one\nnodec slots=3\n' >"$D/hostfile"
launch --hostfile "$D/hostfile" sh -c \
    'echo "r=$RANK lr=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE g=$GROUP_RANK ws=$WORLD_SIZE h=$(hostname)"' \
    >"$D/slots.out" 2>"$D/slots.err"
rc=$?
check "hostfile with slots 2,1,3: exit 0 (rc $rc)" [ $rc = 0 ]
want="[nodea:0]:r=0 lr=0 lws=2 g=0 ws=6 h=${P}a
[nodea:1]:r=1 lr=1 lws=2 g=0 ws=6 h=${P}a
[nodeb:2]:r=2 lr=0 lws=1 g=1 ws=6 h=${P}b
[nodec:3]:r=3 lr=0 lws=3 g=2 ws=6 h=${P}c
[nodec:4]:r=4 lr=1 lws=3 g=2 ws=6 h=${P}c
[nodec:5]:r=5 lr=2 lws=3 g=2 ws=6 h=${P}c"
[ "$(sort "$D/slots.out")" = "$want" ]
verdict "slots per host honoured: ranks, local ranks, node ranks in file order, each on its own host" ||
    { show_tail "$D/slots.out" "$D/slots.err"; }

# ------------------------------------------------------------------------------------ 3. output
launch --hostfile "$D/hostfile" --exclude nodec sh -c \
    'i=0; while [ $i -lt 200 ]; do echo "line $RANK $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1)); done; echo "err $RANK" >&2' \
    >"$D/out.out" 2>"$D/out.err"
rc=$?
bad=$(grep -cvE '^\[node[ab]:[0-2]\]:line [0-2] [0-9]+ x{52}$' "$D/out.out")
count=$(wc -l <"$D/out.out")
[ $rc = 0 ] && [ "$bad" = 0 ] && [ "$count" = 600 ] &&
    [ "$(grep -c '^\[nodea:[01]\]:line' "$D/out.out")" = 400 ] &&
    grep -q '^\[nodeb:2\]:err 2$' "$D/out.err"
verdict "--exclude nodec: 600 whole lines, each tagged [host:rank], stderr tagged too (rc $rc, $bad bad of $count)" ||
    show_tail "$D/out.out" "$D/out.err"

# The program's arguments cross the remote shell unchanged: quotes, blanks, $, `, ;, empty.
launch --hosts nodeb:1 printf '%s|' "it's" 'a  b' '$HOME' '`id`' ';x' '"q"' '' '*' >"$D/args.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(cat "$D/args.out")" = "[nodeb:0]:it's|a  b|\$HOME|\`id\`|;x|\"q\"||*|" ]
verdict "program arguments with quotes, blanks, \$, \`, ; and an empty one reach the host unchanged (rc $rc)" ||
    show_tail "$D/args.out"

# Environment: the default set (NCCL_*, PET_*, ...) and -x reach the agents and their workers;
# --env_policy none sends only -x; other variables stay here.
NCCL_DEBUG=INFO PET_MAX_RESTARTS=0 DDPTEST_X=from-launcher DDPTEST_OTHER=no \
    launch --hosts nodea:1,nodeb:1 -x DDPTEST_X -x 'DDPTEST_Y=a b' \
    sh -c 'echo "env:$NCCL_DEBUG|$PET_MAX_RESTARTS|$DDPTEST_X|$DDPTEST_Y|${DDPTEST_OTHER:-unset}"' \
    >"$D/env.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c ':env:INFO|0|from-launcher|a b|unset$' "$D/env.out")" = 2 ]
verdict "NCCL_*, PET_* and -x VAR / -x VAR=VAL reach every host's workers, nothing else does (rc $rc)" ||
    show_tail "$D/env.out"
NCCL_DEBUG=INFO launch --hosts nodea:1 --env_policy none -x DDPTEST_Y=1 \
    sh -c 'echo "env:${NCCL_DEBUG:-unset}|$DDPTEST_Y"' >"$D/env2.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q ':env:unset|1$' "$D/env2.out"
verdict "--env_policy none: only -x reaches the host (rc $rc)" || show_tail "$D/env2.out"

# ------------------------------------------------------------------------------------ 4. failure
launch --hosts nodea:1,nodeb:1,nodec:1 sh -c 'if [ "$RANK" = 2 ]; then exit 3; fi; exec sleep 30' \
    >"$D/fail.out" 2>&1
rc=$?
# The failed rank's own summary comes from its host, whichever host ends first: the store's
# host stays until the others have their answer, and the launcher lets them end by themselves.
[ $rc = 1 ] && grep -q "ddprun: the job failed on host" "$D/fail.out" &&
    grep -A8 "^Root Cause" "$D/fail.out" | grep -q "host      : ${P}c\$" &&
    grep -A8 "^Root Cause" "$D/fail.out" | grep -q "rank      : 2 (local_rank: 0)" &&
    grep -A8 "^Root Cause" "$D/fail.out" | grep -q "exitcode  : 3 "
verdict "rank 2 exits 3: the job fails with exit 1; rank 2's own summary names its host, rank and exit code (rc $rc)" ||
    show_tail "$D/fail.out"
check "nothing of the failed job left on any host" nothing_left 10
# Every host fails together: ranks 1 and 2 exit 3 at the same time, and rank 0 exits 3 when it is
# stopped. Every agent prints a summary, but the job has one root cause, the failure the store
# counted first: exactly one summary holds the root-cause block, the others name it (the same
# rank) as on another node, and the launcher's last line names its host, whichever ended first.
launch --hosts nodea:1,nodeb:1,nodec:1 \
    sh -c 'trap "exit 3" TERM; [ "$RANK" = 0 ] || { sleep 0.3; exit 3; }; sleep 30 & wait' \
    >"$D/fail3.out" 2>&1
rc=$?
title='Root Cause (first observed failure):'
root_rank=$(sed -n "/^$title\$/,\$p" "$D/fail3.out" | sed -n 's/^  rank      : \([0-9]*\) .*/\1/p' | head -1)
root_host=$(sed -n "/^$title\$/,\$p" "$D/fail3.out" | sed -n 's/^  host      : //p' | head -1)
others=$(grep -A1 -x "$title on another node" "$D/fail3.out" | grep -v -x -e "$title on another node" -e -- |
    sed -n 's/.* round 0: rank \([0-9]*\) .*exited with code 3$/\1/p' | sort -u | tr '\n' ' ')
echo "# together: root cause rank ${root_rank:-?} on ${root_host:-?}; the others name rank(s) ${others:-?}"
[ $rc = 1 ] && [ "$(grep -c -x "$title" "$D/fail3.out")" = 1 ] &&
    [ "$(grep -c -x "$title on another node" "$D/fail3.out")" = 2 ] && [ "$others" = "$root_rank " ] &&
    grep -q -x "ddprun: the job failed on host node${root_host#$P} (node_rank [0-9]): exit 1; the root cause was there" "$D/fail3.out"
verdict "three hosts fail together: one root cause, named the same by every summary and the launcher's last line (rc $rc)" ||
    show_tail "$D/fail3.out"
check "nothing of the job that failed together left on any host" nothing_left 10

# ------------------------------------------------------------------------------------ 5. Ctrl-C
# Each worker traps the signal to save a checkpoint, as one node lets it: over ssh it must get
# the signal the launcher got (not the SIGHUP of a session's end), and no agent may say the
# launcher is gone while it stops the job on purpose.
SAVER='trap "echo saved \$RANK; exit 0" TERM INT; echo "started $RANK"; while :; do sleep 0.1; done'
for sig in INT TERM; do
    want=$((128 + $(kill -l $sig)))
    ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:2,nodeb:2,nodec:2 \
        sh -c "$SAVER" >"$D/sig.out" 2>"$D/sig.err" &
    lp=$!
    n=0
    for i in $(seq 300); do
        n=$(grep -c '^\[node.:[0-5]\]:started' "$D/sig.out")
        [ "$n" = 6 ] && break
        sleep 0.05
    done
    if [ $sig = INT ]; then
        # The token travels on ssh's stdin: no command line on any side holds 64 hex digits.
        hexes=$(job_procs | grep -cE '[0-9a-f]{64}')
        check "with the job running, no command line of ssh, sshd, agent or worker holds the token" \
            [ "$hexes" = 0 ]
    fi
    kill -$sig $lp
    t=$(now_ms)
    wait_launcher $lp
    rc=$?
    took=$(($(now_ms) - t))
    saved=$(grep -c '^\[node.:[0-5]\]:saved [0-5]$' "$D/sig.out")
    gone=$(grep -c 'launching ddprun is gone' "$D/sig.err")
    # (No command substitution in verdict's arguments: it would set the $? verdict reads.)
    [ "$n" = 6 ] && [ $rc = $want ] && [ "$saved" = 6 ] && [ "$gone" = 0 ]
    verdict "SIG$sig at the launcher once all 6 workers run: each worker gets SIG$sig ($saved of 6 saved), no agent says the launcher is gone ($gone), it exits $want (rc $rc) in $took ms" ||
        show_tail "$D/sig.out" "$D/sig.err"
    check "after SIG$sig no process of the job on any host" nothing_left 10
done

# ------------------------------------------------------------------------------------ 5b. SIGUSR1
# --signals_to_handle with SIGUSR1 and SIGUSR2 (Slurm's --signal warning): each reaches every
# remote worker, as on one node, and the job goes on until SIGTERM.
ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:1,nodeb:1 \
    --signals_to_handle SIGTERM,SIGUSR1,SIGUSR2 sh -c \
    'trap "echo usr1 \$RANK" USR1; trap "echo usr2 \$RANK" USR2; trap "exit 0" TERM
     echo "started $RANK"; while :; do sleep 0.1; done' >"$D/usr.out" 2>"$D/usr.err" &
lp=$!
wait_for "$D/usr.out" '^\[nodeb:1\]:started' 15 && wait_for "$D/usr.out" '^\[nodea:0\]:started' 5
kill -USR1 $lp
wait_for "$D/usr.out" '^\[nodea:0\]:usr1 0$' 10 && wait_for "$D/usr.out" '^\[nodeb:1\]:usr1 1$' 10
u1=$?
kill -USR2 $lp 2>/dev/null
wait_for "$D/usr.out" '^\[nodea:0\]:usr2 0$' 10 && wait_for "$D/usr.out" '^\[nodeb:1\]:usr2 1$' 10
u2=$?
running $lp
alive=$?
kill -TERM $lp 2>/dev/null
wait_launcher $lp
rc=$?
[ $u1 = 0 ] && [ $u2 = 0 ] && [ $alive = 0 ] && [ $rc = 143 ]
verdict "SIGUSR1 and SIGUSR2 at the launcher reach both hosts' workers, the job runs on, SIGTERM ends it (rc $rc)" ||
    show_tail "$D/usr.out" "$D/usr.err"
check "after the forwarded signals and SIGTERM no process of the job on any host" nothing_left 10

# ------------------------------------------------------------------------------------ 5c. 2nd Ctrl-C
# Workers that ignore SIGTERM, SIGINT and SIGHUP, a long --shutdown_timeout: the first Ctrl-C waits for
# them, the second kills them on every host at once, and the launcher returns once they are gone.
ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:1,nodeb:1 \
    --shutdown_timeout 60 sh -c 'trap "" TERM INT HUP; echo "started $RANK"; exec sleep 120' \
    >"$D/k2.out" 2>"$D/k2.err" &
lp=$!
wait_for "$D/k2.out" '^\[nodeb:1\]:started' 15 && wait_for "$D/k2.out" '^\[nodea:0\]:started' 5
kill -INT $lp
wait_for "$D/k2.err" 'forwarding it to 1 worker' 10
kill -INT $lp
t=$(now_ms)
wait_launcher $lp
rc=$?
took=$(($(now_ms) - t))
# The moment the launcher has returned: no agent and no worker on any host.
left=$(job_procs | grep -E 'ssh_session|sleep 120')
[ $rc = 130 ] && [ -z "$left" ]
verdict "a second SIGINT kills the workers that ignore it on every host; the launcher returns once they are gone, in $took ms (rc $rc)" ||
    { echo "$left" | sed 's/^/# left: /'; show_tail "$D/k2.out" "$D/k2.err"; }
check "after the second SIGINT no process of the job on any host" nothing_left 10

# ------------------------------------------------------------------------------------ 6. kill -9
ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:2,nodeb:2,nodec:2 \
    sh -c 'echo "started $RANK"; exec sleep 60' >"$D/k9.out" 2>"$D/k9.err" &
lp=$!
for i in $(seq 300); do
    [ "$(grep -c 'started' "$D/k9.out")" = 6 ] && break
    sleep 0.05
done
n=$(grep -c 'started' "$D/k9.out")
kill -KILL $lp
wait $lp 2>/dev/null
t=$(now_ms)
nothing_left 15
gone=$?
took=$(($(now_ms) - t))
[ "$n" = 6 ] && [ $gone = 0 ]
verdict "kill -9 of the launcher with 6 workers running ($n started): every host's agent and workers gone in $took ms" ||
    show_tail "$D/k9.err"

# ------------------------------------------------------------------------------------ 6b. no tty
# RequestTTY force in the user's ssh config, -tt or -o RequestTTY=force in --ssh: the sessions
# still get no terminal, so no pty echoes the token back, and the session's end still stops the job.
{ printf 'Host *\n  RequestTTY force\n'; cat "$TMP/ssh_config"; } >"$TMP/ssh_config_tty"
for how in "RequestTTY force in the ssh config" "--ssh 'ssh -tt'" "--ssh 'ssh -o RequestTTY=force'"; do
    case $how in
    RequestTTY*) sshcmd="ssh -F $TMP/ssh_config_tty" ;;
    *-tt*) sshcmd="ssh -tt -F $TMP/ssh_config" ;;
    *) sshcmd="ssh -o RequestTTY=force -F $TMP/ssh_config" ;;
    esac
    # Each worker says what its agent's stdout is: a pipe to sshd, never a terminal.
    ip netns exec "${P}br" "$DDPRUN" --ssh "$sshcmd" --hosts nodea:1,nodeb:1 \
        sh -c 'echo "started $RANK $(readlink /proc/$PPID/fd/1)"; exec sleep 60' \
        >"$D/tty.out" 2>"$D/tty.err" &
    lp=$!
    for i in $(seq 300); do
        [ "$(grep -c 'started' "$D/tty.out")" = 2 ] && break
        running $lp || break
        sleep 0.05
    done
    n=$(grep -c 'started [01] pipe:' "$D/tty.out")
    hexes=$(cat "$D/tty.out" "$D/tty.err" | grep -cE '[0-9a-f]{64}')
    [ "$n" = 2 ] && [ "$hexes" = 0 ]
    verdict "$how: both agents run without a terminal ($n of 2), no token on the launcher's output ($hexes)" ||
        show_tail "$D/tty.out" "$D/tty.err"
    kill -KILL $lp 2>/dev/null
    wait $lp 2>/dev/null
    check "$how: kill -9 of the launcher leaves nothing on any host" nothing_left 15
done

# ------------------------------------------------------------------------------------ 6c. net gone
# The launcher's address removed, then kill -9: no FIN or RST can reach the hosts, so their
# sessions never end. The agents miss the launcher's heartbeats and stop their jobs (within
# AGENT_SSH_SILENCE_MS, 10 s), and the launcher's ssh clients give up (ServerAliveInterval).
ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:1,nodeb:1 \
    sh -c 'echo "started $RANK"; exec sleep 120' >"$D/net.out" 2>"$D/net.err" &
lp=$!
wait_for "$D/net.out" '^\[nodeb:1\]:started' 15 && wait_for "$D/net.out" '^\[nodea:0\]:started' 5
started=$?
ip -n "${P}br" addr del "$SUB.1/24" dev br0
kill -KILL $lp
wait $lp 2>/dev/null
t=$(now_ms)
# agents_left SECS: agents or workers on a host after SECS.
agents_left() {
    local end=$(($(now_ms) + $1 * 1000))
    while [ "$(now_ms)" -lt $end ]; do
        job_procs | grep -qE '^[abc]:.*(ssh_session|sleep 120)' || return 1
        sleep 0.1
    done
    job_procs | grep -E '^[abc]:.*(ssh_session|sleep 120)' | sed 's/^/# left: /'
    return 0
}
agents_left 20
stayed=$?
took=$(($(now_ms) - t))
[ $started = 0 ] && [ $stayed = 1 ]
verdict "launcher's address gone, then kill -9: every host's agent and workers stop in $took ms (bound: 10 s without a heartbeat)"
end=$(($(now_ms) + 20000))
while job_procs | grep -q '^br:' && [ "$(now_ms)" -lt $end ]; do sleep 0.1; done
clients=$(job_procs | grep -c '^br:')
took=$(($(now_ms) - t))
check "the launcher's ssh clients give up on the silent hosts ($clients left after $took ms)" [ "$clients" = 0 ]
ip -n "${P}br" addr add "$SUB.1/24" dev br0
# sshd's session processes wait for the dead client's TCP: they are this suite's, in its hosts.
for p in $(job_procs | cut -d: -f2); do kill -KILL "$p" 2>/dev/null; done
check "nothing left after the launcher's network went away" nothing_left 5

# ------------------------------------------------------------------------------------ 6d. Ctrl-Z
# A launcher suspended with Ctrl-Z (SIGTSTP) sends no heartbeat, yet is not gone: it tells the
# agents first, and the job runs on past AGENT_SSH_SILENCE_MS (10 s) until it is continued.
ip netns exec "${P}br" "$DDPRUN" --ssh "ssh -F $TMP/ssh_config" --hosts nodea:1,nodeb:1 \
    sh -c 'echo "started $RANK"; exec sleep 120' >"$D/tstp.out" 2>"$D/tstp.err" &
lp=$!
wait_for "$D/tstp.out" '^\[nodeb:1\]:started' 15 && wait_for "$D/tstp.out" '^\[nodea:0\]:started' 5
started=$?
kill -TSTP $lp
for i in $(seq 100); do [ "$(awk '{print $3}' /proc/$lp/stat 2>/dev/null)" = T ] && break; sleep 0.05; done
state=$(awk '{print $3}' /proc/$lp/stat 2>/dev/null)
# The absence of a stop can only be seen by waiting past its bound.
sleep 13
n=$(job_procs | grep -cE '^[ab]:.*sleep 120')
kill -CONT $lp
kill -TERM $lp
wait_launcher $lp
rc=$?
[ $started = 0 ] && [ "$state" = T ] && [ "$n" = 2 ] && [ $rc = 143 ]
verdict "Ctrl-Z at the launcher: it stops ($state), both workers still run 13 s later ($n of 2), SIGTERM after SIGCONT ends the job (rc $rc)" ||
    show_tail "$D/tstp.out" "$D/tstp.err"
check "nothing left after the suspended launcher's job" nothing_left 10

# ------------------------------------------------------------------------------------ 7. errors
one_line() { # one_line FILE REGEX: FILE's ddprun line matches, and it is a single line
    [ "$(grep -c '^ddprun: host ' "$1")" = 1 ] && grep -qE "$2" "$1"
}
launch --hosts nodea,noport,nodeb true >"$D/e1.out" 2>&1
rc=$?
[ $rc = 1 ] && one_line "$D/e1.out" '^ddprun: host noport: unable to start the agent over ssh \(exit 255\): ssh: connect to host [0-9.]+ port 2: Connection refused$'
verdict "unreachable host: one line naming it and ssh's message, exit 1 (rc $rc)" || show_tail "$D/e1.out"
check "nothing left on the other hosts after the unreachable one" nothing_left 10

launch --hosts nodea,badkey true >"$D/e2.out" 2>&1
rc=$?
[ $rc = 1 ] && one_line "$D/e2.out" '^ddprun: host badkey: .*Permission denied \(publickey\)'
verdict "refused key: one line naming the host and 'Permission denied (publickey)' (rc $rc)" ||
    show_tail "$D/e2.out"

launch --hosts nodea,nodeb --remote_ddprun /nonexistent/ddprun true >"$D/e3.out" 2>&1
rc=$?
# Both hosts are started at once and lack it alike: the first to answer is named.
[ $rc = 1 ] && one_line "$D/e3.out" '^ddprun: host node[ab]: .*exit 127.*/nonexistent/ddprun.*(not found|No such file).*--remote_ddprun'
verdict "missing remote ddprun: one line naming the host, the path and --remote_ddprun (rc $rc)" ||
    show_tail "$D/e3.out"
check "nothing left after the start errors" nothing_left 10

# ------------------------------------------------------------------------------------ 7b. MIN:MAX
# noport refuses connections: with --nnodes=2:3 the job runs as a world of the two other hosts,
# the third host of the file taking the free node rank 1.
printf 'nodea\nnoport\nnodec\n' >"$D/hf_elastic"
launch --hostfile "$D/hf_elastic" --nnodes=2:3 --rdzv_conf last_call_timeout=1 \
    sh -c 'echo "g=$GROUP_RANK r=$RANK ws=$WORLD_SIZE h=$(hostname)"' >"$D/el.out" 2>"$D/el.err"
rc=$?
want="[nodea:0]:g=0 r=0 ws=2 h=${P}a
[nodec:1]:g=1 r=1 ws=2 h=${P}c"
[ $rc = 0 ] && [ "$(sort "$D/el.out")" = "$want" ] && one_line "$D/el.err" \
    '^ddprun: host noport: unable to start the agent over ssh \(exit 255\): ssh: connect to host [0-9.]+ port 2: Connection refused$' &&
    grep -qx 'ddprun: going on with 2 of 3 hosts (--nnodes=2:3); not started: noport' "$D/el.err"
verdict "--nnodes=2:3, 3 hosts, noport unreachable: world of 2 on nodea and nodec, noport named (rc $rc)" ||
    show_tail "$D/el.out" "$D/el.err"
check "nothing left after the job without noport" nothing_left 10

launch --hostfile "$D/hf_elastic" --nnodes=3:3 true >"$D/el3.out" 2>&1
rc=$?
[ $rc = 1 ] && one_line "$D/el3.out" '^ddprun: host noport: .*Connection refused$' &&
    ! grep -q 'going on' "$D/el3.out"
verdict "--nnodes=3:3, noport unreachable: one line naming it, exit 1 (rc $rc)" || show_tail "$D/el3.out"
check "nothing left after --nnodes=3:3 failed" nothing_left 10

# nodea comes up (it is started first, alone); the other two cannot: below MIN, nodea is stopped.
printf 'nodea\nnoport\nbadkey\n' >"$D/hf_elastic2"
launch --hostfile "$D/hf_elastic2" --nnodes=2:3 sh -c 'echo "started $RANK"; exec sleep 60' \
    >"$D/el2.out" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^ddprun: host ' "$D/el2.out")" = 2 ] &&
    grep -q '^ddprun: host noport: .*Connection refused$' "$D/el2.out" &&
    grep -q '^ddprun: host badkey: .*Permission denied (publickey)' "$D/el2.out" &&
    grep -qx 'ddprun: only 1 of 3 hosts can come up and --nnodes=2:3 needs 2: stopping the job' "$D/el2.out"
verdict "--nnodes=2:3 with noport and badkey unreachable: both named, below MIN, exit 1 (rc $rc)" ||
    show_tail "$D/el2.out"
check "nothing left on nodea after the job fell below MIN" nothing_left 10

printf 'noport\nnodea\nnodeb\n' >"$D/hf_elastic3"
launch --hostfile "$D/hf_elastic3" --nnodes=2:3 true >"$D/el4.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q '^ddprun: host noport: .*Connection refused$' "$D/el4.out" &&
    grep -q '^ddprun: the first host, noport, hosts the store' "$D/el4.out"
verdict "--nnodes=2:3 without the first host: it hosts the store, exit 1 (rc $rc)" || show_tail "$D/el4.out"
check "nothing left after the first host was unreachable" nothing_left 10

# nodec's health check fails: nodea and nodeb form a world of 2 and end 0; nodec exits 4 (unfit)
# at join_timeout, which does not fail the job.
launch --hosts nodea,nodeb,nodec --nnodes=2:3 \
    --rdzv_conf last_call_timeout=1,join_timeout=4 --health_check "[ \"\$(hostname)\" != ${P}c ]" \
    sh -c 'echo "ws=$WORLD_SIZE h=$(hostname)"' >"$D/unfit.out" 2>"$D/unfit.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c 'ws=2 h=' "$D/unfit.out")" = 2 ] && ! grep -q "h=${P}c" "$D/unfit.out" &&
    grep -qx 'ddprun: host nodec is unfit (its health check failed until join_timeout, or the store excluded it after max_node_failures; its output says why): the job goes on without it' "$D/unfit.err"
verdict "--nnodes=2:3, nodec's health check fails: world of 2, nodec named unfit, exit 0 (rc $rc)" ||
    show_tail "$D/unfit.out" "$D/unfit.err"
check "nothing left after the job without the unfit host" nothing_left 10

# ------------------------------------------------------------------------------------ 7c. etcd
# --rdzv_backend=etcd: every host's agent gets the backend and the members (one etcd member in the
# launcher's namespace, on the bridge's address); the agents elect the store among themselves, so
# one serves it, and with --nnodes=2:3 the job goes on without the first host.
if command -v etcd >/dev/null 2>&1; then
    ip netns exec "${P}br" setpriv --pdeathsig KILL etcd --name one --data-dir "$TMP/etcd" \
        --listen-client-urls "http://$SUB.1:2379" --advertise-client-urls "http://$SUB.1:2379" \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster one=http://127.0.0.1:2380 >"$TMP/etcd.log" 2>&1 &
    ETCD=$!
    if wait_for "$TMP/etcd.log" 'ready to serve client requests' 20 >/dev/null; then
        launch -v --hosts nodea:1,nodeb:1,nodec:1 --rdzv_backend=etcd --rdzv_endpoint="$SUB.1:2379" \
            --rdzv_conf=lease_ttl=3 sh -c 'echo "etcd r=$RANK ws=$WORLD_SIZE h=$(hostname)"' \
            >"$D/etcd.out" 2>"$D/etcd.err"
        rc=$?
        [ $rc = 0 ] && [ "$(grep -c '^\[node[abc]:[0-2]\]:etcd r=[0-2] ws=3 h=' "$D/etcd.out")" = 3 ] &&
            [ "$(grep -c "rendezvous store now at .*elected through etcd at $SUB.1:2379" "$D/etcd.err")" = 3 ] &&
            [ "$(grep -c 'served by this node' "$D/etcd.err")" = 1 ]
        verdict "--rdzv_backend=etcd over ssh: 3 hosts elect one store through etcd, a world of 3, exit 0 (rc $rc)" ||
            show_tail "$D/etcd.out" "$D/etcd.err"
        launch --hostfile "$D/hf_elastic3" --nnodes=2:3 --rdzv_backend=etcd \
            --rdzv_endpoint="$SUB.1:2379" --rdzv_conf=lease_ttl=3,last_call_timeout=1 \
            sh -c 'echo "etcd2 ws=$WORLD_SIZE"' >"$D/etcd2.out" 2>"$D/etcd2.err"
        rc=$?
        [ $rc = 0 ] && [ "$(grep -c 'etcd2 ws=2$' "$D/etcd2.out")" = 2 ] &&
            grep -q '^ddprun: host noport: .*Connection refused$' "$D/etcd2.err" &&
            ! grep -q 'hosts the store' "$D/etcd2.err"
        verdict "--rdzv_backend=etcd over ssh, --nnodes=2:3, the first host unreachable: no host is special, world of 2 (rc $rc)" ||
            show_tail "$D/etcd2.out" "$D/etcd2.err"
    else
        skip "--rdzv_backend=etcd over ssh" "etcd did not start in ${P}br"
        skip "--rdzv_backend=etcd over ssh without the first host" "etcd did not start in ${P}br"
    fi
    kill "$ETCD" 2>/dev/null
    wait "$ETCD" 2>/dev/null
else
    skip "--rdzv_backend=etcd over ssh" "etcd is missing (scripts/ensure-deps.sh --test)"
    skip "--rdzv_backend=etcd over ssh without the first host" "etcd is missing"
fi
check "nothing left after the etcd jobs" nothing_left 10

# ------------------------------------------------------------------------------------ 8. hostile
hostile() { # hostile NAME CONTENT EXPECTED: refused with exit 2, one line, before any ssh
    printf -- "$2" >"$D/hf_$1"
    launch --hostfile "$D/hf_$1" true >"$D/h.out" 2>&1
    local rc=$?
    [ $rc = 2 ] && [ "$(wc -l <"$D/h.out")" = 1 ] && grep -qF "$3" "$D/h.out"
    verdict "hostile hostfile ($1): exit 2, one line: $3" || show_tail "$D/h.out"
}
hostile dup 'nodea\nnodeb\nnodea slots=2\n' "hf_dup:3: 'nodea' is listed twice (first on line 1)"
hostile zero 'nodea slots=0\n' "hf_zero:1: 'slots=0' is out of range"
hostile absurd 'nodea\nnodeb slots=1000000\n' "hf_absurd:2: 'slots=1000000' is out of range"
hostile option '-oProxyCommand=touch_/tmp/pwned\n' "hf_option:1: '-oProxyCommand=touch_/tmp/pwned' is not a host name"
hostile shell 'nodea\nnodeb;reboot\n' "hf_shell:2: 'nodeb;reboot' is not a host name"
hostile empty '# nothing\n\n' "no hosts in it"
hostile word 'nodea cpus=4\n' "hf_word:1: 'cpus=4' is not a host's setting"
launch --hostfile "$D/hostfile" --exclude nodea,nodeb,nodec true >"$D/h.out" 2>&1
check "--exclude of every host: exit 2 with one line" \
    bash -c "[ $? = 2 ] && grep -q 'leaves no host' '$D/h.out'"
launch --hostfile "$D/hostfile" --nnodes 2 true >"$D/h.out" 2>&1
check "--nnodes other than the host count: exit 2 naming --nnodes" \
    bash -c "[ $? = 2 ] && grep -q '^ddprun: --nnodes: --hostfile gives 3 host' '$D/h.out'"
launch --hostfile "$D/hostfile" --nnodes 4:6 true >"$D/h.out" 2>&1
check "--nnodes=4:6 with 3 hosts: exit 2 naming --nnodes" \
    bash -c "[ $? = 2 ] && grep -qx 'ddprun: --nnodes: 4:6 needs at least 4 hosts and --hostfile gives 3' '$D/h.out'"

# ------------------------------------------------------------------------------------ end
check "nothing left on any host at the end" nothing_left 5
cd / || true
teardown
left=""
for ns in $NSLIST; do [ -e "/run/netns/$ns" ] && left="$left $ns"; done
check "namespaces removed (left:${left:- none})" [ -z "$left" ]
finish
