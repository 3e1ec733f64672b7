#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 14
# `pip install .` (pyproject.toml, setup.py): the wheel is built from a copy of the repository's
# tracked files, offline (--no-index, Debian's setuptools and wheel), installed into a fresh
# virtualenv (with Debian's PyTorch through --system-site-packages); the venv's ddprun and
# ddp-rendezvous need no library beyond libc, and the venv's ddprun runs a PyTorch DDP script;
# pip uninstall takes them away.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
names=("pip install . builds offline and puts ddprun and ddp-rendezvous in the venv's bin/"
    "the installed programs need no library beyond libc (static libuv, jansson, libcrypto)"
    "the venv's ddprun runs a PyTorch DDP step on 2 workers"
    "pip uninstall removes both programs")
why=
if ! "$PY" -c 'import venv, setuptools, wheel' 2>/dev/null; then
    why="$PY lacks venv, setuptools or wheel (apt-get install python3-venv python3-setuptools python3-wheel)"
elif ! git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    why="not a git checkout: the tracked files to build from are unknown"
fi
if [ -n "$why" ]; then
    for n in "${names[@]}"; do skip "$n" "$why"; done
    finish
    exit 0
fi
mkdir -p "$TMP/src"
(cd "$SRC" && git ls-files -z | xargs -0 cp --parents -t "$TMP/src")
"$PY" -m venv --system-site-packages "$TMP/venv"
V=$TMP/venv/bin
timeout 600 "$V/pip" install --no-index --no-build-isolation "$TMP/src" >"$TMP/pip.out" 2>&1
rc=$?
check "${names[0]}" bash -c "[ $rc -eq 0 ] && [ -x '$V/ddprun' ] && [ -x '$V/ddp-rendezvous' ]"
[ $rc -eq 0 ] || tail -15 "$TMP/pip.out" | sed 's/^/# /'
extra=$(ldd "$V/ddprun" "$V/ddp-rendezvous" 2>/dev/null | grep '=>' | grep -v -e libc.so -e linux-vdso)
check "${names[1]}${extra:+ (also:$(echo $extra | cut -c1-80))}" [ -z "$extra" ]
if "$V/python3" -c 'import torch.distributed' 2>/dev/null; then
    (cd "$TMP" && PATH=$V:$PATH timeout -k 5 120 "$SRC/scripts/private-names.sh" ddprun --standalone \
        --nproc_per_node=2 "$SRC/tests/helpers/torch_ddp_step.py" --expect-agent-store \
        >"$TMP/ddp.out" 2>&1)
    check "${names[2]}" bash -c "[ \$(grep -c '^ddp rank [01]/2 attempt 0 ok$' '$TMP/ddp.out') = 2 ]"
else
    skip "${names[2]}" "Debian's python3-torch is not installed"
fi
"$V/pip" uninstall -y ddprun >"$TMP/uninstall.out" 2>&1
check "${names[3]}" bash -c "[ ! -e '$V/ddprun' ] && [ ! -e '$V/ddp-rendezvous' ]"
finish
