#!/usr/bin/env bash
# ddprun's command line against real processes: values it must refuse before anything starts (exit
# 2, one line naming the flag, no worker), `ddprun status` against servers that misbehave, and
# output that must not carry control bytes from the network to the operator's terminal.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
unset FW_EXIT FW_SIGNAL FW_RANK FW_SLEEP_MS FW_DIR
unset PET_NODE_RANK PET_NNODES PET_SHUTDOWN_TIMEOUT PET_RDZV_ENDPOINT PET_RDZV_BACKEND
unset DDPRUN_TOKEN DDPRUN_TOKEN_FILE SLURM_JOB_ID SLURM_JOBID SLURM_STEP_ID SLURM_STEPID SLURM_NODEID

# run_ddprun OUTFILE ARGS...: runs ddprun bounded by 30 s; stdout+stderr to OUTFILE; returns rc.
run_ddprun() {
    local out=$1; shift
    timeout -k 5 30 "$DDPRUN" "$@" >"$out" 2>&1
}

# refused NAME NEEDLE ARGS...: ddprun ARGS (with a fake_worker writing into a fresh directory)
# exits 2 with exactly one line, which contains NEEDLE, and no worker ran.
refused() {
    local name=$1 needle=$2; shift 2
    local d=$TMP/refused.$_n out=$TMP/refused.$_n.out rc
    mkdir -p "$d"
    FW_DIR=$d run_ddprun "$out" "$@" "$FW"; rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -qF -- "$needle" "$out" &&
        [ -z "$(ls -A "$d")" ]; then
        ok "$name"
    else
        echo "# rc $rc, output:"; sed 's/^/#   /' "$out"; echo "# worker files: $(ls "$d")"
        not_ok "$name"
    fi
}

# 1. The node rank must name one of the job's nodes: with one node, only 0.
refused "--node_rank=5 on one node -> exit 2 naming the flag, no worker" \
    "--node_rank: 5 is not below the node count 1" --node_rank=5
PET_NODE_RANK=1 refused "PET_NODE_RANK=1 on one node -> exit 2" "--node_rank: 1" --nproc_per_node=1
refused "--node_rank=2 with --nnodes=1:2 -> exit 2" "--node_rank: 2 is not below the node count 2" \
    --nnodes=1:2 --node_rank=2
d=$TMP/rank0; mkdir -p "$d"
FW_DIR=$d run_ddprun "$TMP/rank0.out" --node_rank=0 "$FW"; rc=$?
[ $rc -eq 0 ] && grep -qx "RANK=0" "$d/env.0.0" && grep -qx "WORLD_SIZE=1" "$d/env.0.0"
verdict "--node_rank=0 on one node runs RANK=0 WORLD_SIZE=1"
check "nothing left after the node rank checks" no_leftovers

# 2. Numbers have named bounds: a duration that would overflow the kill timer is refused, not
# turned into an immediate SIGKILL.
refused "--shutdown_timeout=1e17 -> exit 2 with the accepted range" \
    "--shutdown_timeout: '1e17' is outside 0..2000000 seconds" --shutdown_timeout=1e17
PET_SHUTDOWN_TIMEOUT=1e17 refused "PET_SHUTDOWN_TIMEOUT=1e17 -> exit 2 naming the variable" \
    "PET_SHUTDOWN_TIMEOUT: '1e17' is outside" --nproc_per_node=1
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e17 refused "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e17 -> exit 2" \
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '1e17' is outside" --nproc_per_node=1
refused "--monitor_interval=1e17 -> exit 2" "--monitor_interval: '1e17' is outside" \
    --monitor_interval=1e17
refused "--shutdown_timeout=0x10 (hex) -> exit 2" "'0x10' is not a number of seconds" \
    --shutdown_timeout=0x10
refused "--nnodes=1:70000 -> exit 2 before any rendezvous" \
    "--nnodes: '1:70000' is out of range (MIN and MAX in 1..65536)" --nnodes=1:70000
refused "--max_restarts=99999999999 -> exit 2" "--max_restarts: '99999999999' is out of range" \
    --max_restarts=99999999999
refused "--nproc_per_node=2x -> exit 2" "--nproc_per_node: '2x' is not a number" --nproc_per_node=2x
refused "--master_port=70000 -> exit 2" "--master_port: '70000' is out of range (1..65535)" \
    --master_port=70000
check "nothing left after the numeric checks" no_leftovers

finish
