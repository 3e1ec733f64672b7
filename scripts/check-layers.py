#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the include graph between ddprun's libraries (docs/ARCHITECTURE.md, "Layers").

Each library directory (common, the four parts of the store and the etcd client under rendezvous/,
worker_template, agent, launcher) has public headers under <dir>/include/ and private ones beside
its sources. This prints one TAP line per rule:
  - a library includes only its own headers and other libraries' public headers (no *_int.h or
    other private header of another library), with one exception: the store's wire (the private
    headers of rendezvous/protocol: frame codec, limits, handshake) is shared by the store's
    other parts and no one else;
  - the dependencies between libraries form no cycle, and each is one the layering allows.
A program's own files beside a library (PROGRAM_EXTRA) may also use the public headers listed for them.
tests/, bench/ and fuzz/ are clients, not libraries: they may use any public header, and the
store's own tests may use its private ones (rendezvous/module.mk says which).
Exit 0 when every rule holds."""
import os
import re
import sys

PROTOCOL, ROUND, SERVER, CLIENT = (
    "rendezvous/protocol", "rendezvous/round", "rendezvous/server", "rendezvous/client")
ETCD = "rendezvous/etcd"
LIBS = ["common", PROTOCOL, ROUND, SERVER, CLIENT, ETCD, "worker_template", "agent", "launcher"]
# The allowed edges: a library may depend on those listed (and, through them, on theirs). The
# round machine is the server's alone: programs outside the store speak to it through a client.
ALLOWED = {
    "common": set(),
    PROTOCOL: {"common"},
    ROUND: {PROTOCOL, "common"},
    SERVER: {ROUND, PROTOCOL, "common"},
    CLIENT: {PROTOCOL, "common"},
    # The etcd client speaks etcd's protocol, not the store's: common alone.
    ETCD: {"common"},
    "worker_template": {CLIENT, PROTOCOL, "common"},
    "agent": {SERVER, CLIENT, PROTOCOL, ETCD, "common"},
    # `ddprun status --rdzv_backend=etcd` reads the leader key itself.
    "launcher": {"agent", SERVER, CLIENT, PROTOCOL, ETCD, "common"},
}
# Files beside a library's that are a program's, not the library's (its archive never holds them),
# with what that program may use besides what its library may: ddp-rendezvous --etcd stands for
# election through the etcd client (rendezvous/server/rdzv_daemon_etcd.c), which librdzv.a's
# store does not need.
PROGRAM_EXTRA = {
    "rendezvous/server/main.c": {ETCD},
    "rendezvous/server/rdzv_daemon_etcd.c": {ETCD},
}
# Private headers a library shares with the libraries listed, and with no one else.
SHARED_PRIVATE = {PROTOCOL: {ROUND, SERVER, CLIENT}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def header_owners(root):
    """Maps a header's file name to (library, public?)."""
    owners = {}
    for lib in LIBS:
        for dirpath, _, files in os.walk(os.path.join(root, lib)):
            for f in files:
                if f.endswith(".h"):
                    public = os.path.relpath(dirpath, root).startswith(lib + "/include")
                    owners.setdefault(f, []).append((lib, public))
    return owners


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    owners = header_owners(root)
    problems, edges = [], {lib: set() for lib in LIBS}
    for f, o in owners.items():
        if len(o) > 1:
            problems.append(f"header {f} exists in {', '.join(l for l, _ in o)}")
    for lib in LIBS:
        for dirpath, _, files in os.walk(os.path.join(root, lib)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                    name = os.path.basename(inc)
                    if name not in owners:
                        continue  # a header of the same directory tree that is not a library's
                    owner, public = owners[name][0]
                    if owner == lib:
                        continue
                    if owner in PROGRAM_EXTRA.get(rel, ()):
                        if not public:
                            problems.append(f"{rel} includes {owner}'s private header {inc}")
                        continue
                    edges[lib].add(owner)
                    if not public and lib not in SHARED_PRIVATE.get(owner, ()):
                        problems.append(f"{rel} includes {owner}'s private header {inc}")
                    if owner not in ALLOWED[lib]:
                        problems.append(f"{rel} includes {inc}: {lib} may not depend on {owner}")
    n = 0
    for p in problems:
        n += 1
        print(f"not ok {n} - {p}")
    n += 1
    graph = "; ".join(f"{l} -> {', '.join(sorted(edges[l])) or '(nothing)'}" for l in LIBS)
    print(f"{'not ok' if problems else 'ok'} {n} - library layering: {graph}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
