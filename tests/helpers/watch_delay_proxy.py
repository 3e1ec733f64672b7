#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""watch_delay_proxy: a TCP proxy between an agent and a rendezvous store that holds back the
store's replies on the agent's watch connection (the one whose first request after the
handshake is not a JOIN) by DELAY_MS, in order. The control connection passes untouched. So an
end-of-round key's reply reaches the agent after the JOIN reply of the next round, as it may on
a loaded network, and the test sees whether the agent takes a stale round end for a new one.

usage: watch_delay_proxy.py PORTFILE STORE_PORT DELAY_MS LIFETIME_S
Writes the port it listens on (127.0.0.1) to PORTFILE; exits after LIFETIME_S.
"""
import queue
import socket
import sys
import threading
import time

from proxy_listen import serve

HANDSHAKE = 10  # VALIDATE (opcode + u32 magic) and PING (opcode + u32 nonce), no token
PING_ECHO = 4   # the store's answer to that handshake
JOIN = 0x50

portfile, store_port, delay, lifetime = (sys.argv[1], int(sys.argv[2]),
                                         int(sys.argv[3]) / 1000.0, float(sys.argv[4]))


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def pipe(client):
    store = socket.create_connection(("127.0.0.1", store_port), timeout=lifetime)
    for s in (client, store):
        s.settimeout(lifetime)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    is_watch = threading.Event()
    kind_known = threading.Event()

    def upstream():  # agent -> store, never delayed
        try:
            store.sendall(read_exact(client, HANDSHAKE))
            first = read_exact(client, 1)  # sent once the handshake is answered
            if first[0] != JOIN:
                is_watch.set()
            kind_known.set()
            store.sendall(first)
            while True:
                chunk = client.recv(65536)
                if not chunk:
                    break
                store.sendall(chunk)
        except (EOFError, OSError):
            pass
        kind_known.set()
        for s in (store, client):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    held = queue.Queue()

    def sender():  # store -> agent on the watch connection, each chunk DELAY_MS late
        while True:
            item = held.get()
            if item is None:
                return
            due, chunk = item
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                client.sendall(chunk)
            except OSError:
                return

    def downstream():
        threading.Thread(target=sender, daemon=True).start()
        try:
            client.sendall(read_exact(store, PING_ECHO))
            while True:
                chunk = store.recv(65536)
                if not chunk:
                    break
                kind_known.wait(lifetime)
                if is_watch.is_set():
                    held.put((time.monotonic() + delay, chunk))
                else:
                    client.sendall(chunk)
        except (EOFError, OSError):
            pass
        held.put(None)

    threading.Thread(target=upstream, daemon=True).start()
    threading.Thread(target=downstream, daemon=True).start()


serve(portfile, lifetime, pipe)
