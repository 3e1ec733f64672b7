# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Hosts made of network namespaces, each with its own sshd, for tests/integration/test_ssh.sh and
# bench/fanout.sh (sourced; needs root, `ip netns`, sshd and ssh). Host i of the list in HOSTS (short
# names) is namespace $P$h at address $SUB.(10+i), joined by a bridge in namespace ${P}br, where
# the launcher runs. Each host has its own hostname, /etc/hosts, a resolver on loopback only, a
# host key, and a key made here in its authorized keys. The launcher's ssh reads only the config
# $SSHH_DIR/ssh_config (-F) whose Host entries are aliases node$h with numeric HostName
# addresses: no name is ever looked up, and no interface outside the namespaces exists for a
# packet to leave by.
#
# Before sourcing: HOSTS, SSHH_DIR (a private directory). Optional: SSHH_NO_KEY (hosts of the
# config that get no key), and a function sshh_config_extra that prints more Host entries.
# Then: sshh_setup (namespaces, keys, configs; non-zero on failure, the reason on stderr),
# sshh_start (the sshds, non-zero unless every host answers within 10 s), sshh_teardown (kills
# every process in the namespaces, removes them; idempotent).

P=ssh$$
while [ -e "/run/netns/${P}br" ]; do P=ssh$$r$RANDOM; done
SUB=10.$((RANDOM % 40 + 200)).$((RANDOM % 200 + 20))
NSLIST="${P}br"
for _h in $HOSTS; do NSLIST="$NSLIST $P$_h"; done
addr_of() {
    local i=11 h
    for h in $HOSTS; do
        [ "$h" = "$1" ] && echo "$SUB.$i" && return 0
        i=$((i + 1))
    done
    return 1
}
. "$(dirname "${BASH_SOURCE[0]}")/netns.sh"
declare -A SSHD
SSHH_TORN=0

sshh_teardown() {
    [ "$SSHH_TORN" = 1 ] && return 0
    SSHH_TORN=1
    local p ns
    for ns in $NSLIST; do
        [ -e "/run/netns/$ns" ] || continue
        # Processes in a namespace made here are this script's.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for p in "${SSHD[@]}"; do wait "$p" 2>/dev/null; done
    for ns in $NSLIST; do
        [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
    done
    netns_dir_release
}

sshh_setup() (
    set -e
    D=$SSHH_DIR
    netns_bridged_hosts "$P" "$D" "$SUB.1"
    ssh-keygen -q -t ed25519 -N '' -C ddptest -f "$D/id"
    cp "$D/id.pub" "$D/authorized_keys"
    : >"$D/known_hosts"
    : >"$D/ssh_config"
    for h in $HOSTS; do
        ssh-keygen -q -t ed25519 -N '' -f "$D/hostkey_$h"
        echo "$(addr_of "$h") $(cut -d' ' -f1,2 "$D/hostkey_$h.pub")" >>"$D/known_hosts"
        # An alias only this ssh config knows: the store's address must come from the host.
        printf 'Host node%s\n  HostName %s\n' "$h" "$(addr_of "$h")" >>"$D/ssh_config"
        cat >"$D/sshd_config_$h" <<EOF
ListenAddress $(addr_of "$h"):22
HostKey $D/hostkey_$h
AuthorizedKeysFile $D/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PidFile none
LogLevel ERROR
MaxStartups 100
MaxSessions 100
EOF
    done
    if declare -F sshh_config_extra >/dev/null; then sshh_config_extra >>"$D/ssh_config"; fi
    {
        # IdentityFile adds up over matching entries: the SSHH_NO_KEY hosts get none of it.
        echo "Host *$(for n in ${SSHH_NO_KEY:-}; do printf ' !%s' "$n"; done)"
        echo "  IdentityFile $D/id"
        echo "Host *"
        echo "  User root"
        echo "  IdentitiesOnly yes"
        echo "  UserKnownHostsFile $D/known_hosts"
        echo "  GlobalKnownHostsFile /dev/null"
        echo "  StrictHostKeyChecking yes"
        echo "  CheckHostIP no"
        echo "  ControlMaster no"
        echo "  AddressFamily inet"
        echo "  LogLevel ERROR"
    } >>"$D/ssh_config"
    chmod 600 "$D/id"
    for h in $HOSTS; do chmod 600 "$D/hostkey_$h"; done
)

sshh_start() {
    # Each sshd (and so each job process of its host) runs with the host's hostname, our hosts
    # file on /etc/hosts and a resolver on loopback only on /etc/resolv.conf. sshd wants its
    # privilege separation directory, /run/sshd: each host gets its own /run, a tmpfs in its
    # private mount namespace, so the machine's /run is never touched. The hosts share this
    # machine's files, root's ~/.bashrc too, which bash reads for every command sshd runs: each
    # host sees an empty one instead, as a fresh machine has. What that file starts (a pyenv init
    # takes a lock in the one shared home) would otherwise run once per host per command and
    # serialise logins to hosts that are meant to be separate machines.
    local bashrc
    bashrc=$(getent passwd root | cut -d: -f6)/.bashrc
    : >"$SSHH_DIR/empty_bashrc"
    local ins=(unshare --uts --mount --propagation private /bin/sh -c
        'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf &&
            { [ ! -f "$4" ] || mount --bind "$3" "$4"; } && hostname "$5" &&
            mount -t tmpfs -o mode=755 ddptest-run /run && mkdir -m 755 /run/sshd &&
            shift 5 && exec "$@"' in_ns "$SSHH_DIR/hosts" "$SSHH_DIR/resolv.conf"
        "$SSHH_DIR/empty_bashrc" "$bashrc")
    local h i up
    for h in $HOSTS; do
        nsenter --net="/run/netns/$P$h" "${ins[@]}" "$P$h" \
            /usr/sbin/sshd -D -e -f "$SSHH_DIR/sshd_config_$h" >"$SSHH_DIR/sshd_$h.log" 2>&1 &
        SSHD[$h]=$!
    done
    # Up when each answers a command (bounded).
    for i in $(seq 100); do
        up=1
        for h in $HOSTS; do
            ip netns exec "${P}br" ssh -F "$SSHH_DIR/ssh_config" -o BatchMode=yes "node$h" true \
                2>/dev/null || { up=0 && break; }
        done
        [ $up = 1 ] && return 0
        sleep 0.1
    done
    return 1
}
