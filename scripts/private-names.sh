#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command where no name lookup can leave the machine: in a mount namespace of its own, over
# /etc/hosts and /etc/resolv.conf bind-mounted private copies. The hosts file names every form of
# loopback a server may see a client as (127.0.0.1, ::1 and the IPv4-mapped ::ffff:127.0.0.1 of a
# dual-stack listener) and this machine's host name; the resolver is 127.0.0.1 only, so a name
# missing from it is a failed lookup on loopback, never a packet to the configured DNS server.
# PyTorch's TCPStore server resolves every client's address to a name: its tests and benchmarks
# run under this. The command keeps this script's PID (unshare and sh exec it).
#   scripts/private-names.sh CMD [ARGS...]
# Exit 125 with one line on stderr when no mount namespace can be made (not root, no unshare).
set -eu
[ $# -ge 1 ] || { echo "usage: scripts/private-names.sh CMD [ARGS...]" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/private-names.XXXXXX")
host=$(hostname 2>/dev/null || echo localhost)
printf '127.0.0.1 localhost %s\n::1 localhost ip6-localhost\n::ffff:127.0.0.1 localhost\n' \
    "$host" >"$dir/hosts"
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$dir/resolv.conf"
chmod 644 "$dir/hosts" "$dir/resolv.conf"
if ! command -v unshare >/dev/null 2>&1 ||
    ! unshare --mount --propagation private true 2>/dev/null; then
    rm -rf "$dir"
    echo "private-names: unable to make a mount namespace (needs root and unshare from util-linux)" >&2
    exit 125
fi
# The files are read when the bind mounts are made; the directory can go at once after that.
exec unshare --mount --propagation private sh -c '
    mount --bind "$1/hosts" /etc/hosts && mount --bind "$1/resolv.conf" /etc/resolv.conf &&
        rm -rf "$1" || { echo "private-names: unable to bind-mount over /etc/hosts" >&2; exit 125; }
    shift; exec "$@"' sh "$dir" "$@"
