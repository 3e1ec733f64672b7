#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The libraries' include graph follows the layering of docs/ARCHITECTURE.md: no library includes
# another's private header, and dependencies run one way (launcher -> agent -> the store's server
# and clients -> its protocol -> common; the store's round machine under its server alone;
# worker_template -> the store's clients). scripts/check-layers.py prints those TAP lines.
# Inside the libraries, files call each other one way, but for the circles that
# scripts/check-circles.py allows (docs/ARCHITECTURE.md, "Circles"); it reads the objects of
# $BUILD, and its TAP lines are numbered on from check-layers.py's.
cd "$(dirname "$0")/../.." || exit 1
layers=$(python3 scripts/check-layers.py)
rc=$?
printf '%s\n' "$layers"
n=$(grep -cE '^(not )?ok [0-9]+' <<<"$layers")
python3 scripts/check-circles.py --start $((n + 1)) || rc=1
exit "$rc"
