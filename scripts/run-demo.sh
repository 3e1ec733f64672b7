#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: data-parallel training of the template MLP under ddprun, one worker per GPU when
# there are GPUs, else 2 workers on the CPU.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    nproc=gpu
else
    nproc=2
fi
echo "+ $BUILD/ddprun --standalone --nproc_per_node=$nproc $BUILD/train $*" >&2
exec "$BUILD/ddprun" --standalone --nproc_per_node=$nproc "$BUILD/train" "$@"
