#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torchrun's rendezvous at N simulated nodes, the reference of bench/scale.sh.

Each node is a thread with its own TCPStore client and its own DynamicRendezvousHandler over a
C10dRendezvousBackend (the handler `torchrun --rdzv_backend=c10d` builds; every node's address is
127.0.0.1, where group rank 0's handler opens the workers' store), against a TCPStore served by
another process (bench/store_torch_server.py, PID and port given), whose CPU time is
read from /proc. Like torchrun's agent, every node calls next_rendezvous() to join and, while
its round runs, asks num_nodes_waiting() every monitor interval (0.1 s, torchrun's default) and
re-joins when it is non-zero; the handler's own thread sends a keep-alive every 5 s. Measured:
  join       every node calls next_rendezvous() at once -> the last returns (torchrun delays
             each first join by 0-0.3 s on purpose; that is part of its join)
  keep-alive the store's CPU share over WINDOW seconds of the running round
  re-form    one node re-joins (a FAIL: its workers failed) -> every node holds the new round
Prints one line `torch-scale nodes=N join_ms=... reform_ms=... keepalive_core_pct=...
store_rss_delta_mib=... client_cpu_s=... state_bytes=...`, or `torch-scale nodes=N stopped: WHY` when a step passes
its bound (join or re-form over LIMIT seconds).
Usage: scale_torch.py STORE_PID PORT N WINDOW LIMIT (run under scripts/private-names.sh)."""
import datetime
import os
import resource
import sys
import threading
import time

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)

MONITOR_S = 0.1


def store_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def store_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return -1.0


def main():
    spid, port, n, window, limit = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                    float(sys.argv[4]), float(sys.argv[5]))
    run_id = f"torch-scale-{os.getpid()}-{n}"
    rss0 = store_rss_mib(spid)  # the store's process holds PyTorch itself: report what the run adds
    timeout = RendezvousTimeout(join=datetime.timedelta(seconds=limit),
                                last_call=datetime.timedelta(seconds=1),
                                close=datetime.timedelta(seconds=limit))
    handlers = []
    for i in range(n):
        store = TCPStore("127.0.0.1", port, is_master=False, use_libuv=True,
                         timeout=datetime.timedelta(seconds=limit))
        backend = C10dRendezvousBackend(store, run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(
            run_id, store, backend, min_nodes=n, max_nodes=n,
            local_addr="127.0.0.1", timeout=timeout))
    rounds = [-1] * n
    joined_at = [0.0] * n
    errors = []
    fail_now = [False] * n  # the node's workers failed: its agent re-joins
    start = threading.Barrier(n + 1)
    stop = threading.Event()
    cond = threading.Condition()

    def node(i):
        h = handlers[i]
        try:
            start.wait()
            h.next_rendezvous()
            with cond:
                rounds[i], joined_at[i] = 0, time.monotonic()
                cond.notify_all()
            while not stop.is_set():
                time.sleep(MONITOR_S)
                failed, fail_now[i] = fail_now[i], False
                if failed or h.num_nodes_waiting() > 0:
                    h.next_rendezvous()
                    with cond:  # its rounds, counted: every node joins each one
                        rounds[i], joined_at[i] = rounds[i] + 1, time.monotonic()
                        cond.notify_all()
        except Exception as e:  # a node that fails ends the measurement with its reason
            with cond:
                errors.append(f"node {i}: {type(e).__name__}: {e}")
                cond.notify_all()

    def wait_round(r, t0):
        with cond:
            ok = cond.wait_for(lambda: errors or all(x >= r for x in rounds),
                               timeout=max(0.0, t0 + limit - time.monotonic()))
        return ok and not errors

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    cpu0 = time.process_time()
    start.wait()
    t0 = time.monotonic()
    if not wait_round(0, t0):
        print(f"torch-scale nodes={n} stopped: join not done within {limit:.0f} s "
              f"({sum(r >= 0 for r in rounds)} of {n} joined){'; ' + errors[0] if errors else ''}",
              flush=True)
        os._exit(0)
    join_ms = (max(joined_at) - t0) * 1e3
    c0, w0 = store_cpu_s(spid), time.monotonic()
    time.sleep(window)
    core_pct = (store_cpu_s(spid) - c0) / (time.monotonic() - w0) * 100
    rss = store_rss_mib(spid) - rss0
    r0 = max(rounds)
    # A FAIL: node 1's workers failed, its agent re-joins; the others see it waiting.
    t1 = time.monotonic()
    fail_now[1 % n] = True
    if not wait_round(r0 + 1, t1):
        print(f"torch-scale nodes={n} join_ms={join_ms:.1f} keepalive_core_pct={core_pct:.2f} "
              f"store_rss_delta_mib={rss:.1f} stopped: re-form not done within {limit:.0f} s"
              f"{'; ' + errors[0] if errors else ''}", flush=True)
        os._exit(0)
    reform_ms = (max(joined_at) - t1) * 1e3
    stop.set()
    # The state every node reads at each poll and compare-and-sets at each keep-alive.
    state_bytes = len(handlers[0]._store.get("torch.rendezvous." + run_id))
    print(f"torch-scale nodes={n} join_ms={join_ms:.1f} reform_ms={reform_ms:.1f} "
          f"keepalive_core_pct={core_pct:.2f} store_rss_delta_mib={rss:.1f} "
          f"client_cpu_s={time.process_time() - cpu0:.1f} state_bytes={state_bytes}", flush=True)
    os._exit(0)  # the handlers' keep-alive threads and open stores need no orderly end


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    main()
