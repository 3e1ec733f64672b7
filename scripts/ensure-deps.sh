#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages ddprun needs, when any is missing.
#   scripts/ensure-deps.sh           to build and run (make, make run)
#   scripts/ensure-deps.sh --test    also what the test suite drives (a real Slurm, PyTorch)
#   scripts/ensure-deps.sh --bench   also the benchmarks' references (Open MPI, redis, pdsh)
#   scripts/ensure-deps.sh --deb     also what `make deb` needs (debhelper, lintian)
# As root it runs apt-get (sudo when available); otherwise it prints the exact command and fails.
set -eu
# libcurl4-openssl-dev: <curl/curl.h> for the etcd client, which loads libcurl.so.4 at run time.
pkgs=(build-essential pkg-config libuv1-dev libjansson-dev libssl-dev libcmocka-dev libopenblas-dev
      libcurl4-openssl-dev python3 iproute2 procps)
# The Debian packaging (debian/, make deb): dpkg-buildpackage's helpers and the package checker.
deb_pkgs=(debhelper lintian)
for arg in "$@"; do
    case "$arg" in
    --test)
        # clang: libFuzzer; slurm + munge: tests/integration/test_slurm.sh;
        # python3-torch: tests/integration/test_torch.sh (PyTorch 1.13, /usr/bin/python3);
        # python3-venv: scripts/ensure-torch2.sh (PyTorch 2.x from PyPI, TCPStore compatibility);
        # gdb: test_agent_stacks' native backtrace case (skipped without it);
        # man-db, groff-base: test_man.sh renders the man pages and counts groff's warnings;
        # prometheus: test_metrics.sh checks the page with promtool and scrapes it for real;
        # python3-setuptools, python3-wheel: test_wheel.sh builds the wheel offline;
        # openssh-server (and its client): test_ssh.sh runs sshd in network namespaces;
        # the packaging's and git: test_deb.sh builds the Debian packages from a clone;
        # etcd-server (etcd 3.4): tests/integration/test_etcd_client.sh drives a real etcd.
        # chromium, python3-pil: test_report.sh renders `ddprun report`'s picture headless and
        # reads the screenshot.
        pkgs+=(clang slurmctld slurmd slurm-client munge python3-torch python3-venv gdb man-db
            groff-base prometheus python3-setuptools python3-wheel openssh-server
            openssh-client "${deb_pkgs[@]}" git etcd-server chromium python3-pil) ;;
    --bench)
        # pdsh: bench/fanout.sh's second reference beside mpirun --hostfile.
        pkgs+=(openmpi-bin libopenmpi-dev redis-server redis-tools pdsh) ;;
    --deb)
        pkgs+=("${deb_pkgs[@]}") ;;
    *)
        echo "ensure-deps: unknown argument '$arg' (use --test, --bench or --deb)" >&2
        exit 2 ;;
    esac
done
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=sudo
    else
        echo "ddprun: missing packages: ${missing[*]}" >&2
        echo "ddprun: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi
echo "ddprun: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
