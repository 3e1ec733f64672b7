#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""etcd_delay_proxy: a TCP proxy in front of one etcd member's JSON gateway that holds back
etcd's answer to every request on one path (say /v3/kv/txn, a candidate's campaign) by DELAY_MS.
The request itself passes at once, so etcd applies it and tells its watchers before the client
hears the answer: the window in which a new leader's key is known to everyone but its candidate.
Every other request and answer (watch streams, lease keepalives, ranges) passes untouched.

The client's requests are read as HTTP/1.1 (libcurl sends one at a time on a connection, with a
Content-Length body), so the bytes etcd sends after a request on that path are its answer.

usage: etcd_delay_proxy.py PORTFILE ETCD_PORT PATH DELAY_MS LIFETIME_S
Writes the port it listens on (127.0.0.1) to PORTFILE; exits after LIFETIME_S.
"""
import socket
import sys
import threading
import time

from proxy_listen import serve

portfile, etcd_port, path, delay, lifetime = (sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(),
                                              int(sys.argv[4]) / 1000.0, float(sys.argv[5]))


def read_request(sock, buf):
    """One request from buf + sock: (bytes, its path, the rest of buf); None at the end."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    req_path = parts[1] if len(parts) > 1 else b""
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], req_path, rest[length:]


def pipe(client):
    etcd = socket.create_connection(("127.0.0.1", etcd_port), timeout=lifetime)
    for s in (client, etcd):
        s.settimeout(lifetime)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hold_until = [0.0]  # the answer to the last request on the path goes out no earlier

    def upstream():  # client -> etcd, never delayed
        buf = b""
        try:
            while True:
                got = read_request(client, buf)
                if got is None:
                    break
                req, req_path, buf = got
                if req_path.split(b"?")[0] == path:
                    hold_until[0] = time.monotonic() + delay
                etcd.sendall(req)
        except (OSError, ValueError):
            pass
        for s in (etcd, client):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while True:
            chunk = etcd.recv(65536)
            if not chunk:
                break
            wait = hold_until[0] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            client.sendall(chunk)
    except OSError:
        pass
    for s in (client, etcd):
        try:
            s.close()
        except OSError:
            pass


serve(portfile, lifetime, pipe)
