#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make deb: the Debian packages of debian/, built by dpkg-buildpackage -us -uc -b in a copy of the
# tree under OUT/deb/ (dpkg-buildpackage cleans the tree it builds in, which would take OUT with
# it, and writes its results beside that tree), checked by lintian with a source package made
# for it (no error, no warning), then the .deb files are moved to OUT/ (default build/).
#   scripts/build-deb.sh [OUT]      DEB_JOBS: parallel jobs (default: the CPUs)
set -eu
cd "$(dirname "$0")/.."
out=${1:-build}
jobs=${DEB_JOBS:-$(nproc)}
for tool in dpkg-buildpackage dh lintian; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "make deb: $tool is missing; scripts/ensure-deps.sh --deb installs it" >&2
        exit 2
    fi
done
version=$(dpkg-parsechangelog -S Version)
upstream=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
if [ "$version" != "$upstream" ]; then
    echo "make deb: debian/changelog's version $version is not pyproject.toml's $upstream" >&2
    exit 2
fi
work=$out/deb
src=$work/ddprun-$version
rm -rf "$work"
mkdir -p "$src"
# The files git knows, as they are in the working tree, and new ones it does not ignore; from a
# tree without git (a release archive), everything but what builds leave.
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar -c --null -T - -f - | tar -x -C "$src"
else
    tar -c --exclude=./build --exclude=./build-san --exclude=./build-fuzz --exclude=./build-wheel \
        --exclude=./.cache --exclude="./$out" -f - . | tar -x -C "$src"
fi
# The source package too, for lintian alone: its checks of debian/ (control, copyright, rules)
# look at a source package, which the binary build (-b) does not make.
(cd "$work" && dpkg-source -b "ddprun-$version" >/dev/null)
# Without the calling make's variables (MAKEFLAGS carries its command line to every make below).
(cd "$src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL dpkg-buildpackage -us -uc -b -j"$jobs")
changes=$work/ddprun_${version}_$(dpkg-architecture -qDEB_HOST_ARCH).changes
echo "lintian $work/ddprun_$version.dsc $changes"
lintian --fail-on error,warning "$work/ddprun_$version.dsc" "$changes"
rm -rf "$src"
rm -f "$out"/ddprun_*.deb "$out"/ddp-rendezvous_*.deb "$out"/libddpw-dev_*.deb
mv "$work"/*.deb "$out"/
ls "$out"/*.deb
