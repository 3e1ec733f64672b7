#!/usr/bin/env bash
# Installs the Debian 12 packages ddprun builds and tests with, when any is missing.
# As root it runs apt-get; otherwise it prints the exact command to run and fails.
set -eu
pkgs=(build-essential pkg-config libuv1-dev libjansson-dev libssl-dev libcmocka-dev libopenblas-dev
      python3 iproute2 procps clang)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "ddprun: missing packages: ${missing[*]}" >&2
        echo "ddprun: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
else
    SUDO=
fi
echo "ddprun: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
