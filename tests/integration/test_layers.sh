#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The libraries' include graph follows the layering of docs/ARCHITECTURE.md: no library includes
# another's private header, and dependencies run one way (launcher -> agent -> the store's server
# and clients -> its protocol -> common; the store's round machine under its server alone;
# worker_template -> the store's clients). scripts/check-layers.py prints the TAP lines.
cd "$(dirname "$0")/../.." && exec python3 scripts/check-layers.py
