# SPDX-License-Identifier: Apache-2.0
"""The worker of bench/etcd_failover.sh: one rank of a gloo job, started by ddprun or torchrun.

It writes FAILOVER_DIR/t.<host>.<pid> ("<CLOCK_MONOTONIC ns at start> <GROUP_RANK>") first,
before it imports torch, so that the bench can time the first worker of a round against the
kill. Then init_process_group from the environment, one allreduce, FAILOVER_DIR/ready.<host>.<pid>,
and allreduces every 50 ms: a rank that dies (its host killed) fails the others' next allreduce,
as a training step would. A worker started after the kill (FAILOVER_DIR/killed exists) runs 2 s of
allreduces and exits 0, ending the job; one started before it exits 1 after 120 s, a bound."""
import os
import sys
import time

T0 = time.monotonic_ns()
D = os.environ["FAILOVER_DIR"]
TAG = f"{os.environ.get('HOST_TAG', 'h')}.{os.getpid()}"
with open(f"{D}/t.{TAG}", "w") as f:
    f.write(f"{T0} {os.environ.get('GROUP_RANK', '-')}\n")
AFTER = os.path.exists(f"{D}/killed")

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
x = torch.ones(1)
dist.all_reduce(x)
open(f"{D}/ready.{TAG}", "w").close()
end = time.monotonic() + (2 if AFTER else 120)
while time.monotonic() < end:
    dist.all_reduce(x)
    time.sleep(0.05)
dist.destroy_process_group()
sys.exit(0 if AFTER else 1)
