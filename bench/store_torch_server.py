#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference server for bench/store.sh: PyTorch's own c10d TCPStore (libuv backend) on
127.0.0.1, port 0. Prints "listening on 127.0.0.1:PORT", then serves until SIGTERM/SIGINT."""
import datetime
import signal
import sys

from torch.distributed import TCPStore

store = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=60))
print(f"listening on 127.0.0.1:{store.port} (libuv={store.libuvBackend})", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
try:
    signal.pause()
except KeyboardInterrupt:
    pass
