#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A hostile etcd JSON gateway on 127.0.0.1 for tests/integration/test_etcd_client.sh.

    etcd_hostile.py PORT_FILE

Listens on 127.0.0.1, port 0, writes the port to PORT_FILE, and answers each path with a reply
the client must refuse: /v3/kv/range garbage, /v3/kv/put an HTTP 500, /v3/kv/deleterange a body
over the client's 16 MiB limit, /v3/kv/txn the wrong types, /v3/lease/grant nothing for 60 s,
/v3/lease/revoke a number too big for int64, /v3/watch one good message then a garbage line,
/v3/lease/keepalive a line that never ends (bytes past the limit). Serves until killed."""
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HEADER = '{"header":{"revision":"5"}'


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, chunks):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for c in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
            self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        p = self.path
        try:
            if p == "/v3/kv/range":
                self.reply(200, b"{not json")
            elif p == "/v3/kv/put":
                self.reply(500, b'{"error":"boom","message":"member is on fire","code":13}')
            elif p == "/v3/kv/deleterange":
                self.reply(200, b'{"x":"' + b"a" * (17 << 20) + b'"}')
            elif p == "/v3/kv/txn":
                self.reply(200, (HEADER + ',"succeeded":"yes"}').encode())
            elif p == "/v3/lease/grant":
                time.sleep(60)
            elif p == "/v3/lease/revoke":
                self.reply(200, b'{"header":{"revision":"99999999999999999999999"}}')
            elif p == "/v3/watch":
                self.stream([(' {"result":' + HEADER + ',"created":true}}\n').encode(),
                             b"\x00garbage\n"])
                time.sleep(5)
            elif p == "/v3/lease/keepalive":
                self.stream([b"x" * (1 << 20)] * 20)
                time.sleep(5)
            else:
                self.reply(404, b"no")
        except (BrokenPipeError, ConnectionResetError):
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up on a reply it refused is the point of the test


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()
