#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The libraries' include graph follows the layering of docs/ARCHITECTURE.md: no library includes
# another's private header, and dependencies run one way (launcher -> agent -> rendezvous ->
# common; worker_template -> rendezvous -> common). scripts/check-layers.py prints the TAP lines.
cd "$(dirname "$0")/../.." && exec python3 scripts/check-layers.py
