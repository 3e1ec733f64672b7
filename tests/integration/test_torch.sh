#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 31
# Drop-in compatibility with real PyTorch: an unmodified script that calls init_process_group("gloo")
# with env:// runs under ddprun, and @record's error file reaches the failure summary; a real DDP
# step (tests/helpers/torch_ddp_step.py) survives a restart with the workers' store served by the
# agent (the default: every rank a client, attempt 0's keys gone in attempt 1) and with
# --worker_store=own (rank 0 hosts it). Runs with Debian's python3-torch (1.13, /usr/bin/python3:
# PyTorch <= 2.0's store numbering) and with TORCH_PYTHON (PyTorch 2.x from PyPI,
# scripts/ensure-torch2.sh; .ci/run sets it), each that is there. PyTorch's own TCPStore server
# (--worker_store=own) resolves each client's address to a name: the jobs run under
# scripts/private-names.sh, so that no lookup leaves the machine.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
pys=()
for py in /usr/bin/python3 ${TORCH_PYTHON:-}; do
    if "$py" -c 'import torch.distributed' 2>/dev/null; then
        pys+=("$py")
    elif [ "$py" = "${TORCH_PYTHON:-}" ]; then
        not_ok "TORCH_PYTHON=$py cannot import torch.distributed"
    fi
done
PRIVATE_NAMES=$(cd "$(dirname "$0")/../.." && pwd)/scripts/private-names.sh
HELPERS=$(cd "$(dirname "$0")/../helpers" && pwd)
why=
if [ ${#pys[@]} -eq 0 ]; then
    why="PyTorch not importable by /usr/bin/python3 (apt-get install python3-torch)"
elif ! "$PRIVATE_NAMES" true 2>"$TMP/names.err"; then
    why="no private name lookups: $(cat "$TMP/names.err")"
fi
if [ -n "$why" ]; then
    for t in "init_process_group(env://) + all_reduce under ddprun" \
        "a worker's exception fails the job (exit 1)" "@record's error file reaches the summary" \
        "the summary names rank 1 as the root cause" "nothing left after the PyTorch job" \
        "DDP step and a restart on the agent's store" "DDP step and a restart, --worker_store=own" \
        "nothing left after the DDP jobs"; do
        skip "torch: $t" "$why"
    done
    finish; exit
fi

cat > "$TMP/allreduce.py" <<'PY'
import os, sys
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    if sys.argv[1:] == ["fail"] and rank == 1:
        raise RuntimeError("boom from rank 1")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"torch rank {rank}/{world} sum {t.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
PY
root_cause_is_rank1() { grep -A4 "Root Cause" "$TMP/fail.out" | grep -q "rank      : 1"; }

for py in "${pys[@]}"; do
    export PYTHON_EXEC=$py
    v="torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    timeout -k 5 120 "$PRIVATE_NAMES" "$DDPRUN" --standalone --nproc_per_node=2 "$TMP/allreduce.py" \
        >"$TMP/ok.out" 2>&1; rc=$?
    [ $rc -eq 0 ] && grep -q "torch rank 0/2 sum 3" "$TMP/ok.out" && \
        grep -q "torch rank 1/2 sum 3" "$TMP/ok.out"
    verdict "$v: init_process_group(env://) + all_reduce under ddprun"
    [ $rc -eq 0 ] || sed 's/^/# /' "$TMP/ok.out" | tail -20

    timeout -k 5 120 "$PRIVATE_NAMES" "$DDPRUN" --standalone --nproc_per_node=2 \
        "$TMP/allreduce.py" fail >"$TMP/fail.out" 2>&1; rc=$?
    check "$v: a worker's exception fails the job (exit 1)" [ $rc -eq 1 ]
    check "$v: @record's error file reaches the summary" \
        grep -q "RuntimeError: boom from rank 1" "$TMP/fail.out"
    check "$v: the summary names rank 1 as the root cause" root_cause_is_rank1
    check "$v: nothing left after the PyTorch job" no_leftovers

    # A real DDP step, rank 1 failing attempt 0 after every rank initialised: attempt 1 runs
    # on an emptied store. The agent's store (default) answers ddprun's STATS at MASTER_PORT.
    for mode in agent own; do
        args=(--fail 1:0) what="DDP step and a restart on the agent's store"
        [ $mode = agent ] && args+=(--expect-agent-store)
        [ $mode = own ] && what="DDP step and a restart, --worker_store=own"
        timeout -k 5 120 "$PRIVATE_NAMES" "$DDPRUN" --standalone --nproc_per_node=2 \
            --max_restarts=1 --worker_store=$mode "$HELPERS/torch_ddp_step.py" "${args[@]}" \
            >"$TMP/ddp.out" 2>&1; rc=$?
        [ $rc -eq 0 ] && [ "$(grep -c '^ddp rank [01]/2 attempt 1 ok$' "$TMP/ddp.out")" = 2 ] &&
            grep -q "rank 1 fails attempt 0 on purpose" "$TMP/ddp.out"
        verdict "$v: $what"
        [ $rc -eq 0 ] || sed 's/^/# /' "$TMP/ddp.out" | grep -v '^# *$' | tail -20
    done
    check "$v: nothing left after the DDP jobs" no_leftovers
done
finish
