#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 23
# ddprun under a real Slurm (Debian's slurmctld/slurmd/munge, started by tests/slurm/slurm-harness.sh
# in a temporary directory and stopped at the end, also on failure): settings derived from the
# step, the example sbatch script with a requeue that resumes from the checkpoint, scancel under
# proctrack/cgroup and proctrack/linuxproc, srun's exit codes, the one-task-per-node rule, and a
# multi-node allocation made of network namespaces. Needs root; skips cleanly otherwise.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
H=$ROOT/tests/slurm/slurm-harness.sh
DDPRUN=$BIN/ddprun
FW=$BIN/tests/fake_worker
TRAIN=$BIN/train
fake_worker_env_clear
unset CUDA_VISIBLE_DEVICES
# The suite's own clients must not look like steps of some outer Slurm job.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
T0=$(date +%s%N)
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# skip_tests REASON NAME...: lib.sh's skip for each named test that cannot run.
skip_tests() {
    local why=$1 t; shift
    for t in "$@"; do skip "$t" "$why"; done
}

SINGLE_TESTS=("srun ddprun runs with derived settings" "-v names nnodes and node_rank sources"
    "-v names rdzv_id and the endpoint port" "-v: nproc_per_node from SLURM_GPUS_ON_NODE"
    "workers get the derived world" "no GPU request: --nproc_per_node is used"
    "CUDA_VISIBLE_DEVICES sets nproc" "nothing left after srun" "srun ddprun train"
    "second step of a job: rdzv_id JOB.1, next port" "batch step: rdzv_id JOB.batch"
    "sbatch single-node.sbatch completes"
    "requeue: SLURM_RESTART_COUNT reaches the workers" "requeue: train resumes from its checkpoint"
    "scancel (cgroup): every worker gets SIGTERM" "scancel (cgroup): srun exits 143 quickly"
    "scancel (cgroup): job gone" "scancel (cgroup): no process left"
    "scancel -s USR1 forwarded, job goes on" "USR1 not handled: 138"
    "workers ignoring SIGTERM: --shutdown_timeout" "failing worker: srun exits 1"
    "--ntasks-per-node=2 refused with the srun line" "--ntasks-per-node=2 started nothing")
LINUXPROC_TESTS=("scancel (linuxproc): srun exits 143" "scancel (linuxproc): every worker got SIGTERM"
    "scancel (linuxproc): no restart attempt" "scancel (linuxproc): job gone, no process left")
MULTI_TESTS=("netns cluster: srun -N2 runs on two nodes" "multi-node -v: nnodes and node_rank per node"
    "multi-node -v: endpoint is the step's first node" "srun -N2 -r2 in a 4-node job: endpoint and ranks"
    "srun -N2 -r2 in a 4-node job forms one job"
    "multi-node job: one world across nodes" "sbatch -N2 multi-node.sbatch completes"
    "multi-node job: nothing left")

if [ "$(id -u)" != 0 ]; then
    skip_tests "not root (the Slurm daemons run as root)" "${SINGLE_TESTS[@]}" "${LINUXPROC_TESTS[@]}" "${MULTI_TESTS[@]}"
    finish; exit
fi
for f in "$DDPRUN" "$FW"; do
    if [ ! -x "$f" ]; then
        skip_tests "$f not built" "${SINGLE_TESTS[@]}" "${LINUXPROC_TESTS[@]}" "${MULTI_TESTS[@]}"
        finish; exit
    fi
done

export SLURM_HARNESS_DIR
SLURM_HARNESS_DIR=$(mktemp -d /tmp/ddprun-slurm.XXXXXX)
cluster_up=0
down() {
    [ $cluster_up = 1 ] || [ -e "$SLURM_HARNESS_DIR" ] || return 0
    local log=/dev/null
    [ -d "$TMP" ] && log=$TMP/down.$RANDOM.log
    "$H" down >"$log" 2>&1
    cluster_up=0
}
# Whatever happens (failure, timeout from run.sh), the cluster goes down.
trap 'down; rm -rf "$SLURM_HARNESS_DIR" "$TMP"' EXIT
trap 'exit 143' TERM INT HUP

# up ARGS...: starts a cluster; returns nonzero (with the harness's log) when it cannot.
up() {
    down
    local t; t=$(date +%s%N)
    if "$H" up "$@" >"$TMP/up.log" 2>&1; then
        cluster_up=1
        echo "# slurm up $* in $(ms_since "$t") ms: $(tail -1 "$TMP/up.log" | sed 's/^\[slurm-harness\] //')"
        return 0
    fi
    sed 's/^/#   /' "$TMP/up.log" | tail -15
    return 1
}

# sl CMD...: a Slurm client command (squeue, sbatch, scancel...) on the cluster, bounded by 20 s.
sl() { timeout -k 2 20 "$H" exec "$@"; }
# srun_bg OUT ARGS...: srun ARGS in the background (bounded by 60 s), output to OUT; sets SPID.
srun_bg() {
    local out=$1; shift
    timeout -k 5 60 "$H" exec srun "$@" >"$out" 2>&1 &
    SPID=$!
}
# run_srun OUT ARGS...: srun ARGS, bounded by 60 s; returns srun's status. It runs in the
# background so that a SIGTERM to this suite (run.sh's timeout) runs the teardown at once.
run_srun() {
    srun_bg "$@"
    wait $SPID
}
# wait_files FILE... : bounded (10 s) wait for every FILE to exist.
wait_files() {
    local f all
    for _ in $(seq 500); do
        all=1
        for f in "$@"; do [ -e "$f" ] || all=0; done
        [ $all = 1 ] && return 0
        sleep 0.02
    done
    echo "# timed out waiting for $*"
    return 1
}
# job_state JOB: COMPLETED, RUNNING, PENDING... ("" when unknown).
job_state() { sl scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# wait_job_state JOB STATE SECS: bounded wait until squeue lists JOB in STATE ("": not at all).
wait_job_state() {
    local deadline=$(( $(date +%s) + $3 )) what="not $2"
    [ -z "$2" ] && what="still there"
    while [ "$(date +%s)" -lt $deadline ]; do
        [ "$(sl squeue -h -j "$1" -o %T 2>/dev/null)" = "$2" ] && return 0
        sleep 0.1
    done
    echo "# job $1 $what after $3 s: $(sl squeue -h -j "$1" -o '%T %R' 2>&1)"
    return 1
}
# wait_job_gone JOB SECS: bounded wait until JOB is neither pending, running nor completing.
wait_job_gone() { wait_job_state "$1" "" "$2"; }
# port JOB STEP: the rendezvous port ddprun derives (launcher/launch_slurm.h).
port() { echo $(( 29400 + 8 * ($1 % 400) + $2 )); }

# ------------------------------------------------------------------------- single node, cgroup
# proctrack/cgroup needs the cgroup-v1 freezer (as on the project's machines); without it the
# single-node tests run under linuxproc and the cgroup-only checks report SKIP.
CG=cgroup
[ -w /sys/fs/cgroup/freezer ] || CG=linuxproc
if ! up --proctrack $CG --gpus 2 --killwait 10; then
    skip_tests "Slurm did not start (log above)" "${SINGLE_TESTS[@]}" "${LINUXPROC_TESTS[@]}" "${MULTI_TESTS[@]}"
    finish; exit
fi
NODE=$(. "$SLURM_HARNESS_DIR/state.env"; echo "$NODES")

# 1. srun -N1 --ntasks-per-node=1 ddprun: everything comes from the step.
d=$TMP/derive; mkdir -p "$d"
FW_DIR=$d run_srun "$TMP/derive.out" -N1 --ntasks-per-node=1 --gpus-per-node=2 "$DDPRUN" -v "$FW"
rc=$?
check "srun -N1 --ntasks-per-node=1 --gpus-per-node=2 ddprun -v fake_worker exits 0" [ $rc -eq 0 ]
J=$(sed -n 's/^SLURM_JOB_ID=//p' "$d/env.0.0" 2>/dev/null)
grep -q "slurm: nnodes=1 from SLURM_STEP_NUM_NODES=1" "$TMP/derive.out" && \
    grep -q "slurm: node_rank=0 from SLURM_NODEID=0" "$TMP/derive.out"
verdict "-v: nnodes=1 from SLURM_STEP_NUM_NODES, node_rank=0 from SLURM_NODEID"
grep -q "slurm: rdzv_id=$J.0 from SLURM_JOB_ID=$J and SLURM_STEP_ID=0" "$TMP/derive.out" && \
    grep -q "slurm: rdzv_endpoint=$NODE:$(port "${J:-0}" 0) from the first host of SLURM_STEP_NODELIST=$NODE" "$TMP/derive.out"
verdict "-v: rdzv_id=$J.0, rdzv_endpoint=$NODE:$(port "${J:-0}" 0)"
check "-v: nproc_per_node=2 from SLURM_GPUS_ON_NODE=2 (fake GRES GPUs)" \
    grep -q "slurm: nproc_per_node=2 from SLURM_GPUS_ON_NODE=2" "$TMP/derive.out"
envok=1
for r in 0 1; do
    for kv in "RANK=$r" "LOCAL_RANK=$r" "WORLD_SIZE=2" "LOCAL_WORLD_SIZE=2" "GROUP_RANK=0" \
              "GROUP_WORLD_SIZE=1" "TORCHELASTIC_RUN_ID=$J.0" "SLURM_JOB_ID=$J"; do
        grep -qx "$kv" "$d/env.$r.0" 2>/dev/null || { echo "# rank $r lacks $kv"; envok=0; }
    done
done
[ -e "$d/pid.2.0" ] && { echo "# a third worker started"; envok=0; }
check "2 workers: RANK 0/1, WORLD_SIZE=2, TORCHELASTIC_RUN_ID=$J.0" [ $envok = 1 ]

# 2. Without a GPU request Slurm sets no SLURM_GPUS_ON_NODE: --nproc_per_node (or
#    CUDA_VISIBLE_DEVICES) decides.
d=$TMP/nogpu; mkdir -p "$d"
FW_DIR=$d run_srun "$TMP/nogpu.out" -N1 --ntasks-per-node=1 "$DDPRUN" -v --nproc_per_node=3 "$FW"
rc=$?
[ $rc -eq 0 ] && [ -e "$d/pid.2.0" ] && [ ! -e "$d/pid.3.0" ] && grep -qx WORLD_SIZE=3 "$d/env.0.0"
verdict "no GPU request: --nproc_per_node=3 starts 3 workers (WORLD_SIZE=3)"
d=$TMP/cvd; mkdir -p "$d"
# Slurm's gres plugin resets CUDA_VISIBLE_DEVICES for a step that requested no GPU, so the
# variable is set inside the step, as a site's prolog or a container runtime would.
FW_DIR=$d run_srun "$TMP/cvd.out" -N1 --ntasks-per-node=1 env CUDA_VISIBLE_DEVICES=0,1,2 \
    "$DDPRUN" -v "$FW"
rc=$?
[ $rc -eq 0 ] && [ -e "$d/pid.2.0" ] && [ ! -e "$d/pid.3.0" ] && \
    grep -q "nproc_per_node=3 from CUDA_VISIBLE_DEVICES" "$TMP/cvd.out"
verdict "CUDA_VISIBLE_DEVICES=0,1,2 (no GRES request) starts 3 workers"
check "nothing left after the srun steps" no_leftovers

# 3. The training job itself.
if [ -x "$TRAIN" ]; then
    run_srun "$TMP/train.out" -N1 --ntasks-per-node=1 --gpus-per-node=2 "$DDPRUN" "$TRAIN" --epochs 1 \
        --layers 32,64,4 --samples 1024 --batch-size 32 --backend cpu --log-every 1000
    rc=$?
    [ $rc -eq 0 ] && grep -q "train: world 2" "$TMP/train.out" && grep -q "epoch 1/1 done" "$TMP/train.out"
    verdict "srun -N1 ddprun train: world 2 trains an epoch, exit 0"
    [ $rc -eq 0 ] || tail -5 "$TMP/train.out" | sed 's/^/#   /'
else
    skip_tests "$TRAIN not built" "srun ddprun train"
fi

# 4. A second step of one job gets its own rendezvous id and port; ddprun run by the batch script
#    itself (no srun: the batch step) gets JOB.batch and the last port slot.
d=$TMP/step1; mkdir -p "$d/batch"
J2=$(cd "$TMP" && FW_DIR=$d sl sbatch --parsable -N1 -o "$TMP/step1.out" \
    --wrap "srun -n1 true; srun --ntasks-per-node=1 $DDPRUN -v --nproc_per_node=1 $FW;
            FW_DIR=$d/batch $DDPRUN -v --nproc_per_node=1 $FW; echo batch ddprun rc=\$?")
wait_job_gone "$J2" 30 >/dev/null
grep -q "slurm: rdzv_id=$J2.1 from" "$TMP/step1.out" && \
    grep -q "rdzv_endpoint=$NODE:$(port "${J2:-0}" 1) " "$TMP/step1.out" && \
    grep -qx "TORCHELASTIC_RUN_ID=$J2.1" "$d/env.0.0"
verdict "second step of job $J2: rdzv_id=$J2.1, port $(port "${J2:-0}" 1), TORCHELASTIC_RUN_ID=$J2.1"
grep -q "slurm: rdzv_id=$J2.batch from" "$TMP/step1.out" && \
    grep -q "rdzv_endpoint=$NODE:$(port "${J2:-0}" 7) " "$TMP/step1.out" && \
    grep -qx "TORCHELASTIC_RUN_ID=$J2.batch" "$d/batch/env.0.0" && grep -q "batch ddprun rc=0" "$TMP/step1.out"
verdict "ddprun in the batch script (no srun): rdzv_id=$J2.batch, port $(port "${J2:-0}" 7), exit 0"

# 5. The example script, then a requeue at "the time limit": USR1 to the batch shell (what
#    --signal=B:USR1@90 sends), whose trap requeues; the rerun sees SLURM_RESTART_COUNT=1 and train
#    resumes from its checkpoint.
if [ -x "$TRAIN" ]; then
    # A worker that shows what it sees, then becomes train.
    cat >"$TMP/train-wrap" <<EOF
#!/bin/sh
echo "worker rank \$RANK SLURM_RESTART_COUNT=\${SLURM_RESTART_COUNT:-unset}"
exec "$TRAIN" "\$@"
EOF
    chmod +x "$TMP/train-wrap"
    mkdir -p "$TMP/ex1"
    # shellcheck disable=SC2054 # --layers takes a comma list
    EX=(--layers 32,64,4 --samples 1024 --batch-size 32 --backend cpu --log-every 1000)
    t=$(date +%s%N)
    J3=$(cd "$TMP/ex1" && DDPRUN=$DDPRUN TRAIN=$TRAIN sl sbatch --parsable --gpus-per-node=2 \
        --cpus-per-task=2 -o "$TMP/ex1/out" "$ROOT/examples/slurm/single-node.sbatch" --epochs 2 "${EX[@]}")
    wait_job_gone "$J3" 60 >/dev/null
    st=$(job_state "$J3")
    [ "$st" = COMPLETED ] && grep -q "ddprun exited with status 0" "$TMP/ex1/out" && \
        grep -q "epoch 2/2 done" "$TMP/ex1/out"
    verdict "sbatch single-node.sbatch: job $J3 $st, 'ddprun exited with status 0' ($(ms_since "$t") ms)"
    [ "$st" = COMPLETED ] || tail -8 "$TMP/ex1/out" | sed 's/^/#   /'

    mkdir -p "$TMP/ex2"
    t=$(date +%s%N)
    J4=$(cd "$TMP/ex2" && DDPRUN=$DDPRUN TRAIN=$TMP/train-wrap sl sbatch --parsable --gpus-per-node=2 \
        --cpus-per-task=2 -o "$TMP/ex2/out" "$ROOT/examples/slurm/single-node.sbatch" --epochs 2 "${EX[@]}" \
        --checkpoint-every 4 --step-delay-ms 40)
    ck_ok=0
    for _ in $(seq 300); do
        ls "$TMP/ex2/checkpoints/$J4"/ckpt-* >/dev/null 2>&1 && { ck_ok=1; break; }
        sleep 0.05
    done
    sl scancel -b -s USR1 "$J4"
    wait_job_state "$J4" PENDING 20 && sl scontrol update jobid="$J4" StartTime=now
    wait_job_gone "$J4" 60 >/dev/null
    st=$(job_state "$J4")
    [ $ck_ok = 1 ] && grep -q "requeueing job $J4" "$TMP/ex2/out" && \
        grep -qE "worker rank [0-9]+ SLURM_RESTART_COUNT=(0|unset)" "$TMP/ex2/out" && \
        grep -qE "worker rank [0-9]+ SLURM_RESTART_COUNT=1" "$TMP/ex2/out"
    verdict "requeue (USR1 to the batch shell): rerun workers see SLURM_RESTART_COUNT=1"
    [ "$st" = COMPLETED ] && grep -q "resuming from $TMP/ex2/checkpoints/$J4/ckpt-" "$TMP/ex2/out" && \
        grep -q "ddprun exited with status 0" "$TMP/ex2/out"
    verdict "requeue: train resumes from its checkpoint and job $J4 completes ($st, $(ms_since "$t") ms)"
    [ "$st" = COMPLETED ] || tail -12 "$TMP/ex2/out" | sed 's/^/#   /'
else
    skip_tests "$TRAIN not built" "sbatch single-node.sbatch completes" \
        "requeue: SLURM_RESTART_COUNT reaches the workers" "requeue: train resumes from its checkpoint"
fi

# With FW_CHILD=1 a worker and its child append to the same sig file with two write()s each
# ("TERM", then "\n"), so lines can interleave ("TERMTERM"): match TERM anywhere in the file.
# scancel_run NAME OUTVAR DIR SRUN_ARGS...: starts a step whose workers write to DIR, waits until
# every worker of local ranks 0..NPROC-1 runs (NPROC from $NPROC), scancels the job, waits for
# srun; sets RC, MS (scancel -> srun exit) and JOBID.
scancel_run() {
    local out=$1 dir=$2; shift 2
    mkdir -p "$dir"
    FW_DIR=$dir srun_bg "$out" "$@"
    local want=() r
    for ((r = 0; r < NPROC; r++)); do want+=("$dir/pid.$r.0"); done
    wait_files "${want[@]}"
    sleep 0.2
    JOBID=$(sed -n 's/^SLURM_JOB_ID=//p' "$dir/env.0.0" 2>/dev/null)
    local t; t=$(date +%s%N)
    sl scancel "$JOBID"
    wait $SPID
    RC=$?
    MS=$(ms_since "$t")
}

# 6. scancel under proctrack/cgroup: SIGTERM reaches only ddprun, which forwards it; the workers
#    exit cleanly (FW_TERM_EXIT=0) and srun reports 128+15 well inside KillWait (10 s here).
if [ $CG = cgroup ]; then
    NPROC=2
    FW_TERM_EXIT=0 FW_CHILD=1 FW_SLEEP_MS=30000 scancel_run "$TMP/cg.out" "$TMP/cg" \
        -N1 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 "$FW"
    grep -q TERM "$TMP/cg/sig.0.0" && grep -q TERM "$TMP/cg/sig.1.0"
    verdict "scancel (cgroup): every worker got SIGTERM (from ddprun)"
    [ "$RC" -eq 143 ] && [ "$MS" -lt 5000 ]
    verdict "scancel (cgroup): srun exits 143 in $MS ms (KillWait 10 s)"
    [ "$RC" -eq 143 ] || sed 's/^/#   /' "$TMP/cg.out"
    check "scancel (cgroup): job $JOBID leaves the queue" wait_job_gone "$JOBID" 10
    check "scancel (cgroup): no worker or grandchild left" no_leftovers 3
else
    skip_tests "no writable cgroup-v1 freezer for proctrack/cgroup" "scancel (cgroup): every worker gets SIGTERM" \
        "scancel (cgroup): srun exits 143 quickly" "scancel (cgroup): job gone" "scancel (cgroup): no process left"
fi

# 7. SIGUSR1 from Slurm (scancel -s USR1, or --signal=USR1@T without B:) goes to ddprun, which
#    forwards it when listed in --signals_to_handle; the job goes on and ends normally.
d=$TMP/usr1; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=1500 srun_bg "$TMP/usr1.out" -N1 --ntasks-per-node=1 "$DDPRUN" \
    --nproc_per_node=2 --signals_to_handle=SIGTERM,SIGINT,SIGUSR1 "$FW"
wait_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
sl scancel -s USR1 "$(sed -n 's/^SLURM_JOB_ID=//p' "$d/env.0.0")"
wait $SPID; rc=$?
[ $rc -eq 0 ] && grep -qx USR1 "$d/sig.0.0" && grep -qx USR1 "$d/sig.1.0"
verdict "scancel -s USR1: forwarded to every worker, the job goes on, srun exits 0"

# 7b. Without SIGUSR1 in --signals_to_handle, USR1 ends ddprun as it ends torchrun: 128+10, and
#     Slurm kills what is left of the step.
d=$TMP/usr1x; mkdir -p "$d"
FW_DIR=$d FW_SLEEP_MS=20000 srun_bg "$TMP/usr1x.out" -N1 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 "$FW"
wait_files "$d/pid.0.0" "$d/pid.1.0"
sleep 0.1
J5=$(sed -n 's/^SLURM_JOB_ID=//p' "$d/env.0.0")
sl scancel -s USR1 "$J5"
wait $SPID; rc=$?
[ $rc -eq 138 ] && wait_job_gone "$J5" 10 && no_leftovers 3
verdict "scancel -s USR1 not in --signals_to_handle: srun exits 138, nothing left"

# 7c. Workers that ignore SIGTERM are SIGKILLed by ddprun after --shutdown_timeout, inside KillWait.
NPROC=2
FW_IGNORE_TERM=1 FW_SLEEP_MS=30000 scancel_run "$TMP/stub.out" "$TMP/stub" \
    -N1 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 --shutdown_timeout=1 "$FW"
[ "$RC" -eq 143 ] && [ "$MS" -lt 5000 ] && grep -q "shutdown_timeout=1s: sending SIGKILL" "$TMP/stub.out" && \
    wait_job_gone "$JOBID" 10 && no_leftovers 3
verdict "workers ignoring SIGTERM: killed after --shutdown_timeout=1, srun exits 143 in $MS ms"

# 8. srun's status reflects the job: 0 above, 143 for a signal above, 1 for a failed job.
FW_RANK=1 FW_EXIT=3 FW_SLEEP_MS=20000 run_srun "$TMP/fail.out" -N1 --ntasks-per-node=1 "$DDPRUN" \
    --nproc_per_node=2 "$FW"
rc=$?
[ $rc -eq 1 ] && grep -q "exitcode  : 3" "$TMP/fail.out" && grep -q "Exited with exit code 1" "$TMP/fail.out"
verdict "a failing worker (exit 3): ddprun exits 1, so does srun"

# 9. Two ddprun tasks on one node are refused before anything starts.
d=$TMP/twotask; mkdir -p "$d"
FW_DIR=$d run_srun "$TMP/twotask.out" -N1 --ntasks-per-node=2 "$DDPRUN" "$FW"
rc=$?
[ $rc -eq 2 ] && grep -q "2 ddprun tasks on a node (SLURM_STEP_TASKS_PER_NODE=2)" "$TMP/twotask.out" && \
    grep -q "srun -N1 --ntasks-per-node=1 ddprun" "$TMP/twotask.out"
verdict "srun --ntasks-per-node=2 ddprun: exit 2, message shows 'srun -N1 --ntasks-per-node=1 ddprun'"
check "--ntasks-per-node=2: no worker started" [ -z "$(ls "$d")" ]

# ------------------------------------------------------------------------- single node, linuxproc
# Here the workers get Slurm's SIGTERM at the same moment as ddprun (and die of it: no
# FW_TERM_EXIT). ddprun must not take their deaths for a failure worth a restart.
if up --proctrack linuxproc --gpus 0 --killwait 10; then
    NPROC=3
    FW_CHILD=1 FW_SLEEP_MS=30000 scancel_run "$TMP/lp.out" "$TMP/lp" \
        -N1 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=3 --max_restarts=3 "$FW"
    [ "$RC" -eq 143 ] && [ "$MS" -lt 5000 ]
    verdict "scancel (linuxproc): srun exits 143 in $MS ms"
    [ "$RC" -eq 143 ] || sed 's/^/#   /' "$TMP/lp.out"
    grep -q TERM "$TMP/lp/sig.0.0" && grep -q TERM "$TMP/lp/sig.1.0" && grep -q TERM "$TMP/lp/sig.2.0"
    verdict "scancel (linuxproc): every worker got SIGTERM"
    check "scancel (linuxproc): no restart attempt was started" [ -z "$(find "$TMP/lp" -name 'pid.*.[1-9]*')" ]
    grep -q "restarting" "$TMP/lp.out" && echo "# note: ddprun logged a restart before its own SIGTERM: $(grep restarting "$TMP/lp.out")"
    wait_job_gone "$JOBID" 10 && no_leftovers 3
    verdict "scancel (linuxproc): job $JOBID leaves the queue, no process left"
else
    skip_tests "Slurm with proctrack/linuxproc did not start" "${LINUXPROC_TESTS[@]}"
fi

# ------------------------------------------------------------------------- several nodes (netns)
# Four Slurm nodes, each a network + UTS + mount namespace with its own address and hostname:
# ddprun's derivation on real multi-node steps, and the jobs those steps form.
if command -v ip >/dev/null && up 4 --proctrack $CG --gpus 2 --killwait 10; then
    read -r -a N <<<"$(. "$SLURM_HARNESS_DIR/state.env"; echo "$NODES")"
    out=$(timeout 30 "$H" exec srun -N2 --ntasks-per-node=1 hostname 2>&1 | sort | tr '\n' ' ')
    check "netns cluster: srun -N2 hostname -> $out" [ "$out" = "${N[0]} ${N[1]} " ]
    d=$TMP/mn; mkdir -p "$d"
    FW_DIR=$d run_srun "$TMP/mn.out" -N2 --ntasks-per-node=1 --gpus-per-node=2 "$DDPRUN" -v "$FW"
    mrc=$?
    JM=$(grep -o 'rdzv_id=[0-9]*' "$TMP/mn.out" | head -1 | cut -d= -f2)
    [ "$(grep -c 'slurm: nnodes=2 from SLURM_STEP_NUM_NODES=2' "$TMP/mn.out")" = 2 ] && \
        grep -q "slurm: node_rank=0 from SLURM_NODEID=0" "$TMP/mn.out" && \
        grep -q "slurm: node_rank=1 from SLURM_NODEID=1" "$TMP/mn.out"
    verdict "multi-node -v: nnodes=2 on both nodes, node_rank 0 and 1"
    check "multi-node -v: both nodes use rdzv_endpoint=${N[0]}:$(port "${JM:-0}" 0)" \
        [ "$(grep -c "slurm: rdzv_endpoint=${N[0]}:$(port "${JM:-0}" 0) " "$TMP/mn.out")" = 2 ]
    # A step on a subset of the job's nodes: nodes 3 and 4 of a 4-node job.
    mkdir -p "$TMP/subw"
    JS=$(cd "$TMP" && sl sbatch --parsable -N4 -o "$TMP/sub.out" \
        --wrap "FW_DIR=$TMP/subw srun -N2 -r2 --ntasks-per-node=1 $DDPRUN -v --nproc_per_node=1 $FW")
    wait_job_gone "$JS" 30 >/dev/null
    jst=$(job_state "$JS")
    [ "$(grep -c "slurm: rdzv_endpoint=${N[2]}:$(port "${JS:-0}" 0) from the first host of SLURM_STEP_NODELIST=" "$TMP/sub.out")" = 2 ] && \
        grep -q "slurm: node_rank=1 from SLURM_NODEID=1" "$TMP/sub.out"
    verdict "srun -N2 -r2 in a 4-node job: endpoint ${N[2]}:$(port "${JS:-0}" 0), node_rank 0 and 1"
    [ "$jst" = COMPLETED ] && grep -qx WORLD_SIZE=2 "$TMP/subw/env.0.0" && \
        grep -qx WORLD_SIZE=2 "$TMP/subw/env.1.0" && grep -qx GROUP_RANK=1 "$TMP/subw/env.1.0"
    verdict "srun -N2 -r2 in a 4-node job forms one job on those 2 nodes (job $JS $jst, WORLD_SIZE=2)"
    wok=1
    for r in 0 1 2 3; do grep -qx WORLD_SIZE=4 "$d/env.$r.0" 2>/dev/null || wok=0; done
    [ $mrc -eq 0 ] && [ $wok = 1 ] && grep -qx "GROUP_RANK=1" "$d/env.3.0"
    verdict "multi-node job: 4 workers on 2 nodes, one world (RANK 0..3, WORLD_SIZE=4), exit 0"
    if [ -x "$TRAIN" ]; then
        mkdir -p "$TMP/exm"
        JX=$(cd "$TMP/exm" && DDPRUN=$DDPRUN TRAIN=$TRAIN sl sbatch --parsable -N2 --gpus-per-node=2 \
            --cpus-per-task=2 -o "$TMP/exm/out" "$ROOT/examples/slurm/multi-node.sbatch" --epochs 1 \
            --layers 32,64,4 --samples 1024 --batch-size 32 --backend cpu --log-every 1000)
        wait_job_gone "$JX" 60 >/dev/null
        st=$(job_state "$JX")
        [ "$st" = COMPLETED ] && \
            grep -q "train: world 4" "$TMP/exm/out" && grep -q "ddprun exited with status 0" "$TMP/exm/out"
        verdict "sbatch -N2 multi-node.sbatch: job $JX $st, world 4"
        [ "$st" = COMPLETED ] || tail -8 "$TMP/exm/out" | sed 's/^/#   /'
    else
        skip_tests "$TRAIN not built" "sbatch -N2 multi-node.sbatch completes"
    fi
    check "multi-node: nothing left" no_leftovers 3
else
    skip_tests "no multi-node cluster (needs ip from iproute2; log above)" "${MULTI_TESTS[@]}"
fi

down
echo "# slurm suite: $(ms_since "$T0") ms in all"
finish
