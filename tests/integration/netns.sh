# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Network namespaces made by a test or benchmark (sourced; needs root and `ip netns`): what
# netns_job.sh (test_netns.sh, test_quarantine.sh), test_worker_store.sh and ssh_hosts.sh
# (test_ssh.sh, bench/fanout.sh) share.
#
# netns_bridged_hosts PREFIX DIR [BRIDGE_ADDR]: namespace PREFIXbr with a bridge br0 (at
# BRIDGE_ADDR/24 when given, for a launcher that runs there), and for each short name h in HOSTS
# a namespace PREFIX$h whose eth0, a veth on the bridge, has the address `addr_of h` (the caller
# defines addr_of); IPv6 off everywhere, so nothing is sent by neighbour discovery. DIR/hosts names
# every host PREFIX$h at its address and DIR/resolv.conf points at loopback only, for the
# mount namespace each command runs in. Non-zero on the first failure.
#
# netns_dir_release: `ip netns add` makes /run/netns a mount point; once the caller has removed
# its namespaces, this undoes that when /run/netns was not there before (sourcing notes it) and is
# empty again.

NETNS_DIR_EXISTED=0
[ -d /run/netns ] && NETNS_DIR_EXISTED=1

netns_bridged_hosts() (
    set -e
    local p=$1 dir=$2 bridge_addr=${3:-} br=${1}br h ns
    ip netns add "$br"
    nsenter --net="/run/netns/$br" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
    ip -n "$br" link set lo up
    ip -n "$br" link add br0 type bridge
    [ -z "$bridge_addr" ] || ip -n "$br" addr add "$bridge_addr/24" dev br0
    ip -n "$br" link set br0 up
    for h in $HOSTS; do
        ns=$p$h
        ip netns add "$ns"
        nsenter --net="/run/netns/$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
        ip -n "$ns" link set lo up
        ip -n "$br" link add "v$h" type veth peer name eth0 netns "$ns"
        ip -n "$br" link set "v$h" master br0 up
        ip -n "$ns" addr add "$(addr_of "$h")/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
    {
        echo "127.0.0.1 localhost"
        for h in $HOSTS; do echo "$(addr_of "$h") $p$h"; done
    } >"$dir/hosts"
    printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$dir/resolv.conf"
)

netns_dir_release() {
    if [ "$NETNS_DIR_EXISTED" = 0 ] && [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount /run/netns 2>/dev/null
        rmdir /run/netns 2>/dev/null
    fi
    return 0
}
