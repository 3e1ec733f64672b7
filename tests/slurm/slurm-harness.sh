#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# slurm-harness.sh: a real Slurm (Debian 12's slurm-wlm 22.05 + munge) on this one machine, for
# ddprun's tests. Everything lives in one directory; only what this script started is ever stopped,
# always by PID (pid files, our freezer cgroups, processes carrying our SLURM_CONF).
#
#   slurm-harness.sh install              apt-get install slurmctld slurmd slurm-client munge (root)
#   slurm-harness.sh up [NODES] [options] start munged, slurmctld and NODES slurmd's; wait until idle
#   slurm-harness.sh down [--keep-logs]   cancel jobs, stop everything started here, remove files
#   slurm-harness.sh exec CMD [ARGS...]   run a client (srun, sbatch, squeue...) on the "login node"
#   slurm-harness.sh node NAME CMD...     run CMD inside node NAME's namespaces
#   slurm-harness.sh status               daemons, sinfo, squeue
#
# up options:
#   --proctrack cgroup|linuxproc   ProctrackType (default cgroup when the cgroup-v1 freezer is
#                                  mounted and writable, else linuxproc)
#   --cpus C       CPUs each node advertises (default 8; SlurmdParameters=config_overrides)
#   --gpus G       fake GPUs per node (GRES gpu, File= /dev/null clones; default 2, 0 = none)
#   --killwait S   KillWait (default 10; Slurm's own default is 30)
#
# Layout. NODES=1 (single): slurmctld and one slurmd on 127.0.0.1; the slurmd and every client run
# in a private UTS + mount namespace whose hostname is the node's name and whose /etc/hosts maps
# that name to 127.0.0.1, so a job can resolve its own node even on a CI machine whose hostname
# does not resolve. NODES>1 (netns): one network namespace per node (n1..nN at $SUBNET.11..), the
# controller "ctl" at $SUBNET.1 on a bridge, no route out; clients run in the controller's
# namespace. Node names carry a per-cluster prefix (s<id>n1, s<id>n2...) so that two clusters on
# one machine never share a freezer cgroup; ports are picked free at `up`.
#
# Environment: SLURM_HARNESS_DIR (default /tmp/ddprun-slurm; must be the same for up, exec and
# down), SLURM_HARNESS_SUBNET (netns mode, default 10.214.0). DDP_TEST_TAG is removed from the
# daemons' environment (a test suite's leftover scan must not see them); clients keep it.
set -euo pipefail

D=${SLURM_HARNESS_DIR:-/tmp/ddprun-slurm}
SUBNET=${SLURM_HARNESS_SUBNET:-10.214.0}
CONF=$D/etc/slurm.conf
export SLURM_CONF=$CONF
# A harness started from inside a Slurm job must not hand that job's identity to its own clients.
for v in $(compgen -e | grep '^SLURM_' || true); do [ "$v" = SLURM_CONF ] || unset "$v"; done

log() { printf '[slurm-harness] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN{printf "%.1f", (b - a) / 1000}'; }

# State written by `up` (state.env): MODE, NODES, NSLIST, NSP, PROCTRACK, CTLHOST.
load_state() {
    MODE="" NODES="" NSLIST="" NSP="" PROCTRACK="" CTLHOST=""
    if [ -f "$D/state.env" ]; then
        # shellcheck disable=SC1091
        . "$D/state.env"
    fi
    return 0
}

# in_ns NETNS HOST CMD...: runs CMD in network namespace NETNS ("-": this one) inside a fresh
# UTS + mount namespace with hostname HOST and $D/etc/hosts bound on /etc/hosts. nsenter --net,
# not `ip netns exec`: the latter remounts /sys, which hides /sys/fs/cgroup from proctrack/cgroup.
# unshare and sh exec in place; with IN_NS_EXEC=exec this shell does too, so CMD gets its PID.
in_ns() {
    local ns=$1 h=$2; shift 2
    local pre=()
    [ "$ns" != "-" ] && pre=(nsenter "--net=/run/netns/$ns")
    ${IN_NS_EXEC:-} "${pre[@]}" unshare --uts --mount --propagation private /bin/sh -c \
        'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
        in_ns "$D/etc/hosts" "$h" "$@"
}

# client CMD...: a command on the login node (the controller's namespaces).
client() {
    [ -n "$MODE" ] || load_state
    case "$MODE" in
        netns) in_ns "${NSP}ctl" "$CTLHOST" "$@" ;;
        single) in_ns - "$CTLHOST" "$@" ;;
        *) die "cluster is not up (no $D/state.env)" ;;
    esac
}

# ------------------------------------------------------------------------------------ install
have_slurm() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null \
        && command -v munged >/dev/null
}

cmd_install() {
    have_slurm && return 0
    [ "$(id -u)" = 0 ] || die "install needs root"
    local t0; t0=$(now_ms)
    apt-get update -qq >/dev/null 2>&1 || apt-get update >&2 || die "apt-get update failed"
    # Without systemd (or with policy-rc.d) the packages' services are not started: we want that.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null || die "apt-get install failed"
    log "installed slurm + munge in $(since "$t0")s"
}

# ------------------------------------------------------------------------------------ ports
# free_port_pair: prints P such that TCP ports P and P+1 are free on every address. The range
# stays below ddprun's Slurm rendezvous ports (29400..32599) and Linux's ephemeral ones.
free_port_pair() {
    local used p i
    used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
    for i in $(seq 1 50); do
        p=$(( 20000 + (RANDOM % 4000) * 2 ))
        if ! grep -qx "$p" <<<"$used" && ! grep -qx "$((p + 1))" <<<"$used"; then
            echo "$p"; return 0
        fi
    done
    return 1
}

# ------------------------------------------------------------------------------------ up
# ERR trap of cmd_up: show the daemons' last log lines, tear down what was started, fail.
# cmd_down runs in a subshell: it turns errexit off, which must not leak into this shell.
up_failed() {
    trap - ERR
    log "up failed: tearing down"
    tail -n 5 "$D"/log/*.log "$D"/munge/munged.log >&2 2>/dev/null || true
    (cmd_down)
    exit 1
}

cmd_up() {
    local n=1 proctrack="" cpus=8 gpus=2 killwait=10
    while [ $# -gt 0 ]; do
        case "$1" in
            [0-9]*) n=$1 ;;
            --proctrack) proctrack=$2; shift ;;
            --cpus) cpus=$2; shift ;;
            --gpus) gpus=$2; shift ;;
            --killwait) killwait=$2; shift ;;
            *) die "unknown up option: $1" ;;
        esac
        shift
    done
    [ "$n" -ge 1 ] 2>/dev/null || die "NODES must be a number >= 1"
    [ "$(id -u)" = 0 ] || die "up needs root (the daemons run as root; namespaces need CAP_SYS_ADMIN)"
    have_slurm || cmd_install
    for c in unshare nsenter ss; do command -v $c >/dev/null || die "$c is missing (util-linux, iproute2)"; done
    if [ -z "$proctrack" ]; then
        if [ -d /sys/fs/cgroup/freezer ] && [ -w /sys/fs/cgroup/freezer ]; then
            proctrack=cgroup
        else
            proctrack=linuxproc
        fi
    fi
    case "$proctrack" in cgroup|linuxproc) ;; *) die "--proctrack: cgroup or linuxproc" ;; esac
    if [ -e "$D/state.env" ]; then log "$D holds a cluster: running down first"; (cmd_down); fi

    local t0; t0=$(now_ms)
    local port mode prefix names=() ctladdr nslist="" i
    port=$(free_port_pair) || die "no free port pair found"
    # A prefix no other cluster on this machine uses: it names our nodes' freezer cgroups and
    # our network namespaces, which `down` removes by name.
    for i in $(seq 1 50); do
        prefix="s$(( RANDOM % 900 + 100 ))"
        NSP="ddps${prefix#s}-"
        [ -e "/sys/fs/cgroup/freezer/slurm_${prefix}n1" ] || [ -e "/run/netns/${NSP}ctl" ] \
            || [ -e "/run/netns/${NSP}n1" ] || break
    done

    # From here on a failure tears down whatever was started.
    trap up_failed ERR
    mkdir -p "$D"
    chmod 0755 "$D" # munged requires execute permission for all on its socket's directories
    mkdir -p "$D"/{etc,state,spool,log,run,dev}
    install -d -m 0755 "$D/munge"

    for i in $(seq 1 "$n"); do names+=("${prefix}n$i"); done
    if [ "$n" = 1 ]; then mode=single; ctladdr=127.0.0.1; else mode=netns; ctladdr=$SUBNET.1; fi
    local ctlhost="${prefix}ctl"
    [ "$mode" = netns ] && { nslist="${NSP}ctl"; for i in $(seq 1 "$n"); do nslist="$nslist ${NSP}n$i"; done; }
    # Written first, so that `down` knows what to clean after a partial `up`.
    cat > "$D/state.env" <<EOF
MODE=$mode
NODES="${names[*]}"
NSLIST="$nslist"
NSP=$NSP
PROCTRACK=$proctrack
CTLHOST=$ctlhost
EOF
    load_state

    {
        echo "127.0.0.1 localhost"
        if [ "$mode" = single ]; then
            echo "127.0.0.1 $ctlhost ${names[0]}"
        else
            echo "$ctladdr $ctlhost"
            for i in $(seq 1 "$n"); do echo "$SUBNET.$((10 + i)) ${names[$((i - 1))]}"; done
        fi
    } > "$D/etc/hosts"

    # munge: own key and socket, run as root.
    mungekey -c -k "$D/munge/munge.key" -b 1024 2>/dev/null \
        || dd if=/dev/urandom of="$D/munge/munge.key" bs=128 count=1 status=none
    chmod 0600 "$D/munge/munge.key"
    ( unset DDP_TEST_TAG; exec munged --socket="$D/munge/munge.socket" --key-file="$D/munge/munge.key" \
        --log-file="$D/munge/munged.log" --pid-file="$D/munge/munged.pid" \
        --seed-file="$D/munge/munged.seed" )

    # Fake GPUs: char devices that behave like /dev/null.
    local gresline="" gresnode=""
    if [ "$gpus" -gt 0 ]; then
        for i in $(seq 0 $((gpus - 1))); do mknod "$D/dev/nvidia$i" c 1 3; done
        {
            echo "AutoDetect=off"
            for nm in "${names[@]}"; do echo "NodeName=$nm Name=gpu File=$D/dev/nvidia[0-$((gpus - 1))]"; done
        } > "$D/etc/gres.conf"
        gresline="GresTypes=gpu"; gresnode="Gres=gpu:$gpus"
    fi
    cat > "$D/etc/cgroup.conf" <<EOF
CgroupPlugin=autodetect
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
    {
        cat <<EOF
# generated by slurm-harness.sh ($mode, $n node(s))
ClusterName=ddptest
SlurmctldHost=$ctlhost($ctladdr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Lets a node advertise more CPUs than the machine has.
SlurmdParameters=config_overrides
MailProg=/bin/true
$gresline
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# The default batch_sched_delay=3 delays each sbatch start by up to 3 s.
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=$killwait
InactiveLimit=0
MinJobAge=300
# Batch jobs may be requeued (scontrol requeue) unless submitted with --no-requeue.
JobRequeue=1
EOF
        for i in $(seq 1 "$n"); do
            local nm=${names[$((i - 1))]} addr
            if [ "$mode" = single ]; then addr=127.0.0.1; else addr=$SUBNET.$((10 + i)); fi
            echo "NodeName=$nm NodeHostname=$nm NodeAddr=$addr CPUs=$cpus RealMemory=1000 $gresnode State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } > "$CONF"

    if [ "$mode" = netns ]; then
        command -v ip >/dev/null || die "ip (iproute2) is missing"
        local ctl=${NSP}ctl ns
        ip netns add "$ctl"
        nsenter --net="/run/netns/$ctl" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
        ip -n "$ctl" link set lo up
        ip -n "$ctl" link add br0 type bridge
        ip -n "$ctl" addr add "$ctladdr/24" dev br0
        ip -n "$ctl" link set br0 up
        for i in $(seq 1 "$n"); do
            ns=${NSP}n$i
            ip netns add "$ns"
            nsenter --net="/run/netns/$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
            ip -n "$ns" link set lo up
            ip -n "$ctl" link add "veth$i" type veth peer name eth0 netns "$ns"
            ip -n "$ctl" link set "veth$i" master br0 up
            ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev eth0
            ip -n "$ns" link set eth0 up
        done
    fi

    # The daemons fork into the background and write their pid files.
    (
        unset DDP_TEST_TAG
        if [ "$mode" = netns ]; then in_ns "${NSP}ctl" "$ctlhost" slurmctld -f "$CONF"; else in_ns - "$ctlhost" slurmctld -f "$CONF"; fi
        for i in $(seq 1 "$n"); do
            nm=${names[$((i - 1))]} ns=-
            [ "$mode" = netns ] && ns=${NSP}n$i
            mkdir -p "$D/spool/$nm"
            in_ns "$ns" "$nm" slurmd -f "$CONF" -N "$nm"
        done
    )

    # Bounded wait (30 s) until every node is idle.
    local st="" deadline=$(( $(now_ms) + 30000 ))
    while [ "$(now_ms)" -lt $deadline ]; do
        st=$(client sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
        [ "$st" = "idle " ] && break
        sleep 0.1
    done
    if [ "$st" != "idle " ]; then
        log "nodes not idle after 30 s: $(client sinfo -N 2>&1 | tr '\n' ';')"
        false # the ERR trap tears down
    fi
    trap - ERR
    log "up: $mode, $n node(s) [${names[*]}], proctrack/$proctrack, KillWait=$killwait, gpus/node=$gpus, port $port, in $(since "$t0")s"
}

# ------------------------------------------------------------------------------------ down
pid_alive() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
pid_of_file() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }

# stop_pids PID...: SIGTERM, up to 3 s for them to go, then SIGKILL.
stop_pids() {
    local p i alive
    for p in "$@"; do pid_alive "$p" && kill -TERM "$p" 2>/dev/null || true; done
    for i in $(seq 1 30); do
        alive=""
        for p in "$@"; do pid_alive "$p" && alive="$alive $p"; done
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    log "still alive 3 s after SIGTERM, sending SIGKILL:$alive"
    for p in $alive; do kill -KILL "$p" 2>/dev/null || true; done
}

# job_pids: processes that ran in a job of this cluster (our SLURM_CONF and a SLURM_JOB_ID in their
# environment), except this script and its ancestors; catches what escaped proctrack/linuxproc.
job_pids() {
    local anc=" " p=$$ f
    while [ "$p" -gt 1 ] 2>/dev/null; do
        anc="$anc$p "
        p=$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null || echo 1)
    done
    for f in $(grep -lsxzF "SLURM_CONF=$CONF" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        case "$anc" in *" $p "*) continue ;; esac
        grep -qsz '^SLURM_JOB_ID=' "$f" 2>/dev/null && echo "$p"
    done
    return 0
}

# wait_queue_empty SECS: bounded wait for squeue to list no job.
wait_queue_empty() {
    local deadline=$(( $(now_ms) + $1 * 1000 ))
    while [ "$(now_ms)" -lt $deadline ]; do
        [ -z "$(client squeue -h -o %i 2>/dev/null)" ] && return 0
        sleep 0.2
    done
    return 1
}

cmd_down() {
    trap - ERR
    set +e
    local keep=0; [ "${1:-}" = "--keep-logs" ] && keep=1
    local t0; t0=$(now_ms)
    load_state
    [ -d "$D" ] || return 0
    local nm p cg pids="" f
    # 1. Cancel every job; give them 3 s (teardown does not wait for KillWait).
    if [ -n "$MODE" ] && pid_alive "$(pid_of_file "$D/run/slurmctld.pid")"; then
        client scancel --user=root 2>/dev/null
        wait_queue_empty 3
    fi
    # 2. SIGKILL what is still in our freezer cgroups, and job processes that escaped proctrack.
    for nm in $NODES; do
        cg=/sys/fs/cgroup/freezer/slurm_$nm
        [ -d "$cg" ] && pids="$pids $(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    pids="$pids $(job_pids | tr '\n' ' ')"
    for p in $pids; do
        if pid_alive "$p"; then
            log "killing leftover job process $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | head -c 100)"
            kill -KILL "$p" 2>/dev/null
        fi
    done
    [ -n "${pids// /}" ] && [ -n "$MODE" ] && wait_queue_empty 2
    # 3. Daemons by pid file: slurmd's and slurmctld, then munged.
    local dpids=""
    for nm in $NODES; do dpids="$dpids $(pid_of_file "$D/run/slurmd-$nm.pid")"; done
    dpids="$dpids $(pid_of_file "$D/run/slurmctld.pid")"
    # shellcheck disable=SC2086
    stop_pids $dpids
    p=$(pid_of_file "$D/munge/munged.pid")
    [ -n "$p" ] && stop_pids "$p"
    # 4. slurmstepd's that outlived slurmd: ours when they hold a file under $D open (their log).
    for f in $(grep -lsz '^slurmstepd' /proc/[0-9]*/cmdline 2>/dev/null); do
        p=${f#/proc/}; p=${p%/cmdline}
        local fd ours=0
        for fd in "/proc/$p/fd/"*; do case "$(readlink "$fd" 2>/dev/null)" in "$D"/*) ours=1 ;; esac; done
        [ $ours = 1 ] && { log "killing leftover slurmstepd $p"; kill -KILL "$p" 2>/dev/null; }
    done
    # 5. Our network namespaces (by the names in state.env) and our freezer cgroups.
    local ns
    for ns in $NSLIST; do [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null; done
    # `ip netns add` bind-mounts /run/netns on itself; undo that once no namespace is left in it.
    if [ -n "$NSLIST" ] && [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null
    fi
    for nm in $NODES; do
        cg=/sys/fs/cgroup/freezer/slurm_$nm
        [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
        [ -d "$cg" ] && log "WARNING: could not remove $cg"
    done
    # 6. Files.
    if [ $keep = 1 ]; then
        find "$D" -mindepth 1 -maxdepth 1 ! -name log -exec rm -rf {} +
    else
        rm -rf "$D"
    fi
    log "down in $(since "$t0")s"
    return 0
}

cmd_status() {
    load_state
    [ -n "$MODE" ] || { echo "not up"; return 1; }
    echo "mode=$MODE nodes=[$NODES] proctrack=$PROCTRACK dir=$D"
    local f
    for f in "$D/munge/munged.pid" "$D/run/slurmctld.pid" "$D"/run/slurmd-*.pid; do
        [ -f "$f" ] || continue
        if pid_alive "$(cat "$f")"; then echo "$(basename "$f" .pid) pid $(cat "$f") alive"; else echo "$(basename "$f" .pid) DEAD"; fi
    done
    client sinfo -N -o '%N %T %c %G'
    client squeue
}

load_state
case "${1:-}" in
    install) shift; cmd_install "$@" ;;
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    # exec and node replace this script with the command (through unshare and sh, which exec too),
    # so the caller's $! and `timeout` reach srun or sbatch itself.
    exec) shift
          case "$MODE" in
              netns) IN_NS_EXEC="exec" in_ns "${NSP}ctl" "$CTLHOST" "$@" ;;
              single) IN_NS_EXEC="exec" in_ns - "$CTLHOST" "$@" ;;
              *) die "cluster is not up (no $D/state.env)" ;;
          esac ;;
    node) shift; nm=$1; shift
          case "$MODE" in
              netns) IN_NS_EXEC="exec" in_ns "${NSP}n${nm##*n}" "$nm" "$@" ;;
              single) IN_NS_EXEC="exec" in_ns - "$nm" "$@" ;;
              *) die "cluster is not up" ;;
          esac ;;
    status) cmd_status ;;
    *) sed -n '2,28p' "$0"; exit 2 ;;
esac
