#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs PyTorch 2.x from PyPI into a virtual environment and prints its python on stdout.
# Used by the store's compatibility test (PyTorch's own TCPStore client against ddp-rendezvous,
# tests/integration/test_store.sh) and the store benchmark's TCPStore reference (bench/store.sh):
#   TORCH_PYTHON=$(scripts/ensure-torch2.sh) make test
# Debian 12's python3-torch is 1.13, whose TCPStore predates the 2.x protocol. PyPI's Linux wheel
# pulls CUDA libraries with it: about 5.5 GB on disk, so the script wants 12 GB free first.
#   scripts/ensure-torch2.sh [DIR]      (default .cache/torch2 in the checkout)
# Exit 1 with one line on stderr saying what is missing when it cannot install.
set -eu
cd "$(dirname "$0")/.."
DIR=${1:-.cache/torch2}
PY=$DIR/bin/python
has_torch2() {
    "$PY" -c 'import sys, torch, torch.distributed; sys.exit(int(torch.__version__.split(".")[0]) < 2)' \
        2>/dev/null
}
# py-spy (a few MB) goes into the same environment: the hang tests read a Python worker's stacks
# with it (tests/integration/test_hang.sh) and skip that check, saying so, without it.
# python-etcd (pure Python) too: torchrun's etcd-v2 rendezvous needs it, and bench/etcd_failover.sh
# runs torchrun on it beside ddprun's etcd backend (it skips that row, saying so, without it).
with_extras() {
    [ -x "$DIR/bin/py-spy" ] ||
        timeout 300 "$PY" -m pip install --disable-pip-version-check -q py-spy >&2 ||
        echo "ensure-torch2: pip install py-spy failed: the Python stacks check will be skipped" >&2
    "$PY" -c 'import etcd' 2>/dev/null ||
        timeout 300 "$PY" -m pip install --disable-pip-version-check -q python-etcd >&2 ||
        echo "ensure-torch2: pip install python-etcd failed: torchrun's etcd-v2 reference will be skipped" >&2
}
if [ -x "$PY" ] && has_torch2; then
    with_extras
    echo "$(cd "$DIR" && pwd)/bin/python"
    exit 0
fi
mkdir -p "$DIR"
free_kib=$(df -Pk "$DIR" | awk 'NR == 2 {print $4}')
if [ "${free_kib:-0}" -lt $((12 * 1024 * 1024)) ]; then
    echo "ensure-torch2: $((free_kib / 1024 / 1024)) GB free under $DIR, PyTorch 2.x needs 12 GB" >&2
    exit 1
fi
if [ ! -x "$PY" ]; then
    if ! python3 -m venv "$DIR" >/dev/null 2>&1; then
        rm -rf "$DIR"
        echo "ensure-torch2: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
fi
echo "ensure-torch2: installing torch 2.x from PyPI into $DIR (about 5.5 GB)" >&2
if ! timeout 1800 "$PY" -m pip install --disable-pip-version-check -q 'torch>=2' >&2; then
    echo "ensure-torch2: pip install torch failed or took over 30 minutes (PyPI reachable?)" >&2
    exit 1
fi
has_torch2 || { echo "ensure-torch2: torch installed in $DIR but does not import" >&2; exit 1; }
with_extras
echo "$(cd "$DIR" && pwd)/bin/python"
