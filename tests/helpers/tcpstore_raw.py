#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tcpstore_raw: TCPStore's wire protocol (PyTorch >= 2.2's numbering, docs/protocol.md) spoken
by hand against the workers' store at 127.0.0.1:PORT (or HOST:PORT), for
tests/integration/test_worker_store.sh. No torch needed.

  tcpstore_raw.py probe HOST PORT KEY
      VALIDATE, SET KEY, then PING: prints "served LOCALPORT" when the PING is answered,
      "refused LOCALPORT" when the store closed the connection. Exit 0 either way.
  tcpstore_raw.py fill PORT NBYTES COUNT
      SETs COUNT values of NBYTES under fill/0, fill/1, ... on one connection, each followed by
      a PING; prints "stored N" (the values answered before the store closed the connection, or
      COUNT), then DELETE_KEYs them on a fresh connection and prints "deleted".
  tcpstore_raw.py flood PORT N DIR
      Opens N connections that send nothing; after a second prints "open A closed B" (the ones
      the store closed at once), then holds the open ones until DIR/release exists (60 s at most).
  tcpstore_raw.py worker DIR
      A job's worker (RANK, MASTER_ADDR, MASTER_PORT from the environment): sets w<RANK> on one
      connection (rank 0 writes MASTER_PORT to DIR/port), waits for DIR/go (60 s at most), then
      reads the other rank's key on that connection (open since the start), checks that
      "stranger" was never set, and sets and reads a key on a fresh connection. Prints
      "worker RANK ok"; exit 1 with a line on stderr otherwise.
"""
import os
import socket
import struct
import sys
import time

MAGIC = 0x3C85F7CE
VALIDATE, SET, GET, DELETE_KEY, PING = 0, 1, 3, 8, 13


def blob(b):
    return struct.pack("<Q", len(b)) + b


def recvn(s, n):
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise ConnectionError("closed by the store")
        out += got
    return out


def connect(host, port):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC))
    return s


def ping(s, nonce=7):
    s.sendall(bytes([PING]) + struct.pack("<I", nonce))
    if struct.unpack("<I", recvn(s, 4))[0] != nonce:
        raise ConnectionError("wrong PING answer")


def set_key(s, k, v):
    s.sendall(bytes([SET]) + blob(k) + blob(v))


def get_key(s, k):
    s.sendall(bytes([GET]) + blob(k))
    return recvn(s, struct.unpack("<Q", recvn(s, 8))[0])


def probe(host, port, key):
    s = socket.create_connection((host, int(port)), timeout=10)
    local = s.getsockname()[1]
    try:
        s.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC))
        set_key(s, key.encode(), b"x")
        ping(s)
        print(f"served {local}")
    except (ConnectionError, OSError):
        print(f"refused {local}")


def fill(port, nbytes, count):
    s = connect("127.0.0.1", int(port))
    stored = 0
    try:
        for i in range(int(count)):
            set_key(s, f"fill/{i}".encode(), b"v" * int(nbytes))
            ping(s)
            stored += 1
    except (ConnectionError, OSError):
        pass
    s.close()
    print(f"stored {stored}", flush=True)
    s = connect("127.0.0.1", int(port))
    for i in range(int(count)):
        s.sendall(bytes([DELETE_KEY]) + blob(f"fill/{i}".encode()))
        recvn(s, 8)
    print("deleted")


def flood(port, n, d):
    socks = []
    for _ in range(int(n)):
        try:
            socks.append(socket.create_connection(("127.0.0.1", int(port)), timeout=10))
        except OSError:
            pass
    time.sleep(1)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print(f"open {len(socks) - closed} closed {closed}", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)


def worker(d):
    rank = int(os.environ["RANK"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    s = connect(host, port)
    set_key(s, f"w{rank}".encode(), b"here")
    ping(s)
    if rank == 0:
        with open(os.path.join(d, "port.tmp"), "w") as f:
            f.write(f"{port}\n")
        os.rename(os.path.join(d, "port.tmp"), os.path.join(d, "port"))
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "go")):
        if time.monotonic() > deadline:
            sys.exit(f"worker {rank}: no go within 60 s")
        time.sleep(0.05)
    other = f"w{1 - rank}".encode()
    if get_key(s, other) != b"here":
        sys.exit(f"worker {rank}: {other!r} missing on the first connection")
    if get_key(s, b"stranger") != b"":
        sys.exit(f"worker {rank}: another user's key is in the store")
    s2 = connect(host, port)
    set_key(s2, f"late{rank}".encode(), b"yes")
    if get_key(s2, f"late{rank}".encode()) != b"yes":
        sys.exit(f"worker {rank}: a fresh connection was not served")
    print(f"worker {rank} ok", flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"probe": probe, "fill": fill, "flood": flood, "worker": worker}[cmd](*args)
