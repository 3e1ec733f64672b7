# SPDX-License-Identifier: Apache-2.0
"""The PyTorch worker of bench/torch_worker_store.sh: times rank 0's init_process_group and
writes when its first allreduce of each attempt completed; in attempt 0, rank 1 fails after a
barrier (so every rank is in the collective world) and records when.

Files in the directory argv[1]: r<RANK>.a<ATTEMPT> = "<init ms> <first allreduce done, epoch s>",
fail = "<epoch s when rank 1 exits 1>".
"""
import os
import sys
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
t0 = time.perf_counter()
dist.init_process_group("gloo")
init_ms = (time.perf_counter() - t0) * 1000.0
t = torch.ones(1)
dist.all_reduce(t)
done = time.time()
with open(os.path.join(out, f"r{rank}.a{attempt}"), "w") as f:
    f.write(f"{init_ms:.3f} {done:.6f}\n")
if attempt == 0:
    dist.barrier()
    if rank == 1:
        with open(os.path.join(out, "fail"), "w") as f:
            f.write(f"{time.time():.6f}\n")
        os._exit(1)
    time.sleep(120)  # the launcher stops this group once rank 1 has failed
dist.destroy_process_group()
