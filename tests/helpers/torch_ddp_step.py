# SPDX-License-Identifier: Apache-2.0
"""One real DDP training step under ddprun, checked against the same step computed alone.

Every rank joins with init_process_group("gloo") (env://), wraps a seeded Linear model in
DistributedDataParallel, takes one SGD step on its own batch, and then checks that its
parameters equal those of one plain step on the mean of every rank's gradient, which each rank
recomputes by itself (the batches are seeded by rank). Prints one line per rank:
    ddp rank R/W attempt A ok
Options:
    --expect-agent-store   MASTER_ADDR:MASTER_PORT must be ddprun's store (it answers ddprun's
                           STATS command; PyTorch's TCPStore does not know it),
                           TORCHELASTIC_USE_AGENT_STORE must be True, and a key each rank sets
                           in attempt 0 must be gone in later attempts
    --fail R:A             rank R raises in attempt A, after a barrier that every rank reached
                           (so the attempt's keys are all in the store)
"""
import argparse
import os
import socket
import struct

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class RawStore:
    """TCPStore's wire protocol (PyTorch >= 2.2 numbering), for what PyTorch's client cannot ask:
    ddprun's STATS, and keys outside init_process_group's prefix."""

    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=10)
        self.s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE))  # VALIDATE

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise SystemExit("the store at MASTER_ADDR:MASTER_PORT closed the connection")
            buf += chunk
        return buf

    @staticmethod
    def _blob(b):
        return struct.pack("<Q", len(b)) + b

    def stats(self):
        self.s.sendall(b"\x43")  # ddprun's STATS
        return self._read(struct.unpack("<Q", self._read(8))[0]).decode()

    def set(self, key, value):
        self.s.sendall(b"\x01" + self._blob(key.encode()) + self._blob(value))

    def check(self, key):
        self.s.sendall(b"\x05" + struct.pack("<Q", 1) + self._blob(key.encode()))
        return self._read(1) == b"\x00"

    def close(self):
        self.s.close()


def batch(rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect-agent-store", action="store_true")
    ap.add_argument("--fail", default="")
    args = ap.parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if args.expect_agent_store:
        assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        raw = RawStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        assert "\nkeys " in "\n" + raw.stats(), "MASTER_PORT is not ddprun's store"
        # A key of this rank's own from attempt 0 must be gone in every later attempt.
        mark = f"torch_ddp_step/rank{os.environ['RANK']}"
        if attempt == 0:
            raw.set(mark, b"attempt 0")
        else:
            assert not raw.check(mark), f"attempt {attempt} sees {mark} of attempt 0"
        raw.close()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = DistributedDataParallel(model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    x, y = batch(rank)
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    dist.barrier()
    if args.fail:
        fr, fa = (int(v) for v in args.fail.split(":"))
        if rank == fr and attempt == fa:
            raise RuntimeError(f"rank {rank} fails attempt {attempt} on purpose")

    # The same step alone: the mean of every rank's gradient.
    ref = model()
    grads = []
    for r in range(world):
        ref.zero_grad()
        xr, yr = batch(r)
        torch.nn.functional.mse_loss(ref(xr), yr).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    with torch.no_grad():
        for i, p in enumerate(ref.parameters()):
            p -= 0.5 * sum(g[i] for g in grads) / world
    for mine, want in zip(ddp.module.parameters(), ref.parameters()):
        assert torch.allclose(mine, want, atol=1e-6), f"rank {rank}: DDP step differs"
    print(f"ddp rank {rank}/{world} attempt {attempt} ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
