#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fan-out over ssh: wall time from the command to its exit, every worker having run, for 2, 4, 8
# and 16 hosts x 2 workers of /bin/true, for ddprun --hosts, Open MPI's mpirun --hostfile (its ssh
# launcher) and pdsh -R ssh on the same hosts: network namespaces with their own sshd
# (tests/integration/ssh_hosts.sh), the launchers in another. Medians of RUNS (default 5)
# interleaved runs, the order rotated each run. Needs root, `ip netns`, sshd, ssh, mpirun, pdsh:
# without one of them it prints why and exits 77 (skipped). Exits 1 when a figure cannot be
# measured (a host that does not run its workers, a run that fails).
set -u
BUILD=${BUILD:-build}
DDPRUN=$(cd "$BUILD" && pwd)/ddprun
RUNS=${RUNS:-5}
COUNTS=${COUNTS:-"2 4 8 16"}
echo "| hosts x workers | ddprun --hosts | mpirun --hostfile | pdsh -R ssh | ddprun / mpirun |"
echo "|---|---|---|---|---|"
skip() {
    echo "| fan-out over ssh | skipped: $1 | - | - | - |"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for c in ip nsenter unshare ssh ssh-keygen /usr/sbin/sshd mpirun pdsh; do
    command -v $c >/dev/null || skip "$c is missing"
done
max=0
for n in $COUNTS; do [ "$n" -gt $max ] && max=$n; done
HOSTS=$(seq -f 'h%g' 1 "$max" | paste -sd' ')
SSHH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ddpbench.XXXXXX")
. "$(dirname "$0")/../tests/integration/ssh_hosts.sh"
trap 'sshh_teardown 2>/dev/null; rm -rf "$SSHH_DIR"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
sshh_setup >"$SSHH_DIR/setup.err" 2>&1 || skip "network namespaces: $(tail -1 "$SSHH_DIR/setup.err")"
sshh_start || skip "sshd did not come up in the namespaces"
CFG=$SSHH_DIR/ssh_config

# in_br CMD...: CMD in the launchers' namespace, bounded, its output to $OUTF.
OUTF=$SSHH_DIR/runs.log
in_br() { ip netns exec "${P}br" timeout -k 3 120 "$@" </dev/null >"$OUTF" 2>&1; }
names() { seq -f 'nodeh%g' 1 "$1"; }
# run_TOOL N [PROGRAM]: 2 workers of PROGRAM (default /bin/true) on each of the first N hosts.
run_ddprun() {
    in_br "$DDPRUN" --ssh "ssh -F $CFG" --hosts "$(names "$1" | sed 's/$/:2/' | paste -sd,)" \
        "${2:-/bin/true}"
}
run_mpirun() {
    names "$1" | sed 's/$/ slots=2/' >"$SSHH_DIR/hf"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in_br mpirun --allow-run-as-root \
        --hostfile "$SSHH_DIR/hf" -np $(($1 * 2)) --mca plm_rsh_agent ssh \
        --mca plm_rsh_args "-F $CFG -o BatchMode=yes" --mca oob_tcp_if_include "$SUB.0/24" \
        "${2:-/bin/true}"
}
run_pdsh() {
    PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS="-F $CFG -o BatchMode=yes %h" in_br pdsh -f 32 \
        -w "$(names "$1" | paste -sd,)" "${2:-/bin/true} & ${2:-/bin/true} & wait"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
TOOLS=(ddprun mpirun pdsh)
rc=0
# Each tool once with /bin/hostname first: every host must answer twice, or its times mean nothing.
for n in $COUNTS; do
    for t in "${TOOLS[@]}"; do
        "run_$t" "$n" /bin/hostname
        got=$(grep -oE "${P}h[0-9]+\$" "$OUTF" | sort | uniq -c | awk '$1 == 2' | wc -l)
        if [ "$got" != "$n" ]; then
            echo "| $n x 2 | $t: $got of $n hosts ran 2 workers; skipped | - | - | - |"
            sed 's/^/# /' "$OUTF" | tail -5
            exit 1
        fi
    done
done
for n in $COUNTS; do
    declare -A T=([ddprun]="" [mpirun]="" [pdsh]="")
    fail=""
    for r in $(seq "$RUNS"); do
        for k in 0 1 2; do
            t=${TOOLS[$(((r + k) % 3))]}
            t0=$(date +%s%N)
            "run_$t" "$n" || fail="$fail $t"
            T[$t]="${T[$t]} $((($(date +%s%N) - t0) / 1000000))"
        done
    done
    d=$(printf '%s\n' ${T[ddprun]} | median)
    m=$(printf '%s\n' ${T[mpirun]} | median)
    p=$(printf '%s\n' ${T[pdsh]} | median)
    echo "| $n x 2 | $d ms | $m ms | $p ms | $(awk -v a="$d" -v b="$m" 'BEGIN {printf "%.2f", a / b}') |"
    [ -z "$fail" ] || { echo "# failed runs:$fail"; rc=1; }
done
echo "# medians of $RUNS interleaved runs each; wall time from the command to its exit"
exit $rc
