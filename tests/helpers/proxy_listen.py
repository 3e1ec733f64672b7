# SPDX-License-Identifier: Apache-2.0
"""proxy_listen: the listening side of the test proxies (watch_delay_proxy.py,
etcd_delay_proxy.py): a socket on 127.0.0.1 at the kernel's pick, its port written to PORTFILE
(whole, through a rename, so that a suite polling for the file never reads half of it), and one
thread per connection running handle(conn) until LIFETIME_S have passed."""
import os
import socket
import threading
import time


def serve(portfile, lifetime, handle):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    end = time.monotonic() + lifetime
    while time.monotonic() < end:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        threading.Thread(target=handle, args=(conn,), daemon=True).start()
