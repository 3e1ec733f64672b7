#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The workers' store with a real PyTorch worker (bench/torch_worker_store.py, 2 ranks on gloo):
# rank 0's init_process_group time, and a failed group's restart-to-first-allreduce time (rank 1
# exits 1 in attempt 0; until rank 0's first allreduce of attempt 1 completes, Python's start and
# torch's import included), under ddprun with the agent's store (the default), ddprun with
# --worker_store=own (rank 0 hosts a TCPStore) and torchrun 2.x (its --standalone c10d
# rendezvous, whose agent serves the workers' store). Medians of RUNS runs (default 5) each; a
# run whose attempt 1 fails is counted, named by its first error line, and not timed.
# PyTorch: TORCH_PYTHON, else the venv scripts/ensure-torch2.sh makes; skipped without one.
# Everything runs under scripts/private-names.sh (TCPStore's server looks up client names).
# Without PyTorch 2.x or a private mount namespace it prints why and exits 77 (skipped). It exits
# 1 at the first ddprun run that fails (nothing is measured then): torchrun's failed restarts are
# its figure (counted in the last row), ddprun's are not. Each run is bounded by RUN_TIMEOUT_S
# (default 120); a torchrun run past it counts as failed.
#   BUILD=build bench/torch_worker_store.sh        (RUNS=5, RUN_TIMEOUT_S=120 override)
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-120}
PY=${TORCH_PYTHON:-}
[ -z "$PY" ] && [ -x .cache/torch2/bin/python ] && PY=.cache/torch2/bin/python
if [ -z "$PY" ] || ! "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    echo "# skipped: no PyTorch 2.x (set TORCH_PYTHON, or run scripts/ensure-torch2.sh)"
    exit 77
fi
if ! scripts/private-names.sh true 2>/dev/null; then
    echo "# skipped: scripts/private-names.sh cannot make a mount namespace here"
    exit 77
fi
VER=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/torchstore.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
W=$PWD/bench/torch_worker_store.py

# one KIND OUTDIR: one job, 2 workers, one restart allowed.
one() {
    local kind=$1 d=$2
    mkdir -p "$d"
    case $kind in
    agent | own)
        PYTHON_EXEC=$PY timeout -k 5 "$RUN_TIMEOUT_S" scripts/private-names.sh "$BUILD/ddprun" --standalone \
            --nproc_per_node=2 --max_restarts=1 --worker_store=$kind "$W" "$d" ;;
    torchrun)
        timeout -k 5 "$RUN_TIMEOUT_S" scripts/private-names.sh "$PY" -m torch.distributed.run --standalone \
            --nproc_per_node=2 --max_restarts=1 --monitor_interval=0.1 "$W" "$d" ;;
    esac >"$d/log" 2>&1
}

median() { sort -n | awk '{v[NR]=$1} END {if (NR) printf "%.1f", (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); else printf "-"}'; }

declare -A INIT0 INIT1 RESTART DONE
for kind in agent own torchrun; do
    : >"$TMP/$kind.init0" >"$TMP/$kind.init1" >"$TMP/$kind.restart"
    DONE[$kind]=0
    for i in $(seq "$RUNS"); do
        d=$TMP/$kind.$i
        if ! one $kind "$d" || [ ! -f "$d/r0.a1" ] || [ ! -f "$d/fail" ]; then
            echo "# $kind run $i failed: $(grep -m1 -oE '(RuntimeError|Error): .{0,160}' "$d/log")"
            if [ "$kind" != torchrun ]; then
                echo "# not measured: a ddprun run ($kind) failed; its log ends:"
                tail -5 "$d/log" | sed 's/^/#   /'
                exit 1
            fi
            continue
        fi
        DONE[$kind]=$((DONE[$kind] + 1))
        awk '{print $1}' "$d/r0.a0" >>"$TMP/$kind.init0"
        awk '{print $1}' "$d/r0.a1" >>"$TMP/$kind.init1"
        awk -v f="$(cat "$d/fail")" '{printf "%.1f\n", ($2 - f) * 1000}' "$d/r0.a1" >>"$TMP/$kind.restart"
    done
    INIT0[$kind]=$(median <"$TMP/$kind.init0")
    INIT1[$kind]=$(median <"$TMP/$kind.init1")
    RESTART[$kind]=$(median <"$TMP/$kind.restart")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
echo "torch $VER, gloo, 2 workers on one node, median of $RUNS runs each (ms)"
echo
echo "| measure | ddprun, agent's store | ddprun, --worker_store=own | torchrun $VER | agent / torchrun |"
echo "|---|---|---|---|---|"
echo "| rank 0 init_process_group, attempt 0 | ${INIT0[agent]} | ${INIT0[own]} | ${INIT0[torchrun]} | $(ratio "${INIT0[agent]}" "${INIT0[torchrun]}") |"
echo "| rank 0 init_process_group, attempt 1 | ${INIT1[agent]} | ${INIT1[own]} | ${INIT1[torchrun]} | $(ratio "${INIT1[agent]}" "${INIT1[torchrun]}") |"
echo "| rank 1 fails -> attempt 1's first allreduce done | ${RESTART[agent]} | ${RESTART[own]} | ${RESTART[torchrun]} | $(ratio "${RESTART[agent]}" "${RESTART[torchrun]}") |"
echo "| runs whose attempt 1 completed (the others are not timed) | ${DONE[agent]} of $RUNS | ${DONE[own]} of $RUNS | ${DONE[torchrun]} of $RUNS | - |"
rc=0
for kind in agent own; do
    [ "${DONE[$kind]}" = "$RUNS" ] || { echo "# not measured: $kind: $((RUNS - DONE[$kind])) of $RUNS runs failed"; rc=1; }
done
exit $rc
