#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 33
# suite-alone
# The Debian packages (debian/, make deb): built by `make deb` from a clean clone of the
# repository (its committed tree), lintian-clean, installed with apt on this machine (root); the
# quick-start job and a worker built with `pkg-config ddpw` run from the installed paths alone,
# the installed systemd unit passes `systemd-analyze verify`; apt-get purge then leaves nothing of
# the packages behind. The packages are purged however the suite ends.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PKGS=(ddprun ddp-rendezvous libddpw-dev)
UNIT=/lib/systemd/system/ddp-rendezvous.service
names=("make deb in a clean clone leaves ddprun, ddp-rendezvous and libddpw-dev .deb files in build/"
    "lintian passes the packages: no error, no warning"
    "apt-get installs the three packages"
    "the quick-start job (/usr/bin/ddprun, /usr/libexec/ddprun/train, 2 workers) trains and exits 0"
    "a worker built with \$(pkg-config --cflags --libs ddpw) from the installed example runs on 2 ranks"
    "systemd-analyze verify: the installed unit, ExecStart=/usr/bin/ddp-rendezvous of ddp-rendezvous"
    "apt-get purge removes the packages and every file and directory of theirs")
# skip_from I REASON: the checks from names[I] on cannot run; the suite ends.
skip_from() {
    local i
    for ((i = $1; i < ${#names[@]}; i++)); do skip "${names[$i]}" "$2"; done
    finish
    exit 0
}
why=
for t in git dpkg-buildpackage dh lintian apt-get cc pkg-config; do
    command -v "$t" >/dev/null 2>&1 || { why="$t is missing (scripts/ensure-deps.sh --deb)"; break; }
done
[ -n "$why" ] || [ "$(id -u)" -eq 0 ] || why="installing packages needs root"
[ -n "$why" ] || git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 ||
    why="not a git checkout: there is no clean clone to build from"
if [ -z "$why" ]; then
    for p in "${PKGS[@]}"; do
        if dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qv '^unknown ok not-installed$'; then
            why="package $p is on this machine already; the suite would remove it"
        fi
    done
fi
[ -z "$why" ] || skip_from 0 "$why"

installed() {
    local p
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qv '^unknown ok not-installed$' && return 0
    done
    return 1
}
# apt_get ARGS...: apt-get, waiting for another apt's lock rather than failing.
apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=120 "$@"
}
cleanup() {
    installed && apt_get purge "${PKGS[@]}" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "# SIGTERM: purging"; exit 143' TERM
trap 'echo "# SIGINT: purging"; exit 130' INT

C=$TMP/clone
git clone -q "$SRC" "$C" 2>"$TMP/clone.err"
if ! (cd "$C" && dpkg-checkbuilddeps) >"$TMP/builddeps.out" 2>&1; then
    rm -rf "$C"
    skip_from 0 "$(sed -n 's/^dpkg-checkbuilddeps: error: //p' "$TMP/builddeps.out" | head -1)"
fi
# The unit tests and the debug symbol packages are left out: make test runs the tests, and the
# symbols are not what this suite checks.
t0=$(date +%s)
(cd "$C" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD DEB_BUILD_OPTIONS="nocheck noddebs" \
    make deb DEB_JOBS=2) >"$TMP/deb.out" 2>&1
rc=$?
echo "# make deb: $(($(date +%s) - t0)) s"
debs=()
for p in "${PKGS[@]}"; do debs+=("$(ls "$C"/build/"${p}"_*.deb 2>/dev/null | head -1)"); done
[ $rc -eq 0 ] && [ -f "${debs[0]}" ] && [ -f "${debs[1]}" ] && [ -f "${debs[2]}" ]
verdict "${names[0]} (rc $rc)" || show_tail "$TMP/deb.out"
grep -q '^lintian .*\.dsc .*\.changes$' "$TMP/deb.out" && ! grep -qE '^[EW]: ' "$TMP/deb.out" && [ $rc -eq 0 ]
verdict "${names[1]}" || grep -E '^[EW]: ' "$TMP/deb.out" | head -10 | sed 's/^/# /'
[ $rc -eq 0 ] || skip_from 2 "make deb failed: nothing to install"

# No file of the packages may exist before them: purging would remove someone else's. Their
# directories that exist already are not theirs to remove.
for d in "${debs[@]}"; do dpkg-deb --fsys-tarfile "$d" | tar -t; done | sed 's|^\./|/|; s|/$||' |
    grep -v '^$' | sort -u >"$TMP/paths"
: >"$TMP/dirs_before"
while read -r f; do
    if [ -d "$f" ]; then
        echo "$f" >>"$TMP/dirs_before"
    elif [ -e "$f" ] || [ -L "$f" ]; then
        skip_from 2 "$f exists before the packages are installed"
    fi
done <"$TMP/paths"

# snapshot: every path in the system's directories named after the packages or their libraries,
# and any user or group of that name (a maintainer script's leftovers are in no package's list).
# Temporary files and the checkout, where other programs' files of those names come and go, are
# left out.
snapshot() {
    local roots=(/etc /usr /var /opt /srv) r
    for r in /lib /lib64; do [ -L "$r" ] || [ ! -d "$r" ] || roots+=("$r"); done
    find "${roots[@]}" -xdev \( -path /var/tmp -o -path "$SRC" -o -path "$TMP" \) -prune -o \
        \( -name '*ddprun*' -o -name '*ddp-rendezvous*' -o -name '*ddpw*' -o -name 'librdzv*' \
        -o -name 'libddpcommon*' \) -print 2>/dev/null
    getent passwd | grep -iE '^[^:]*ddp'
    getent group | grep -iE '^[^:]*ddp'
}
snapshot | sort >"$TMP/before"

# apt installs the three packages and nothing else: what they depend on is what they were built
# with, so no package is fetched from anywhere.
apt_get install --simulate --no-install-recommends "${debs[@]}" >"$TMP/simulate.out" 2>&1
other=$(sed -n 's/^Inst \([^ ]*\) .*/\1/p' "$TMP/simulate.out" | grep -vxE 'ddprun|ddp-rendezvous|libddpw-dev' |
    tr '\n' ' ')
[ -z "$other" ] || skip_from 2 "apt would install other packages too: $other"
apt_get install --no-install-recommends "${debs[@]}" >"$TMP/install.out" 2>&1
rc=$?
n=0
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qx 'install ok installed' && n=$((n + 1))
done
[ $rc -eq 0 ] && [ $n -eq 3 ]
verdict "${names[2]} (rc $rc, $n installed)" || show_tail "$TMP/install.out"

# A shell that knows only the system's paths: no build/, no LD_LIBRARY_PATH, no PKG_CONFIG_PATH.
installed_env() {
    env -i PATH=/usr/bin:/bin HOME="$TMP" TMPDIR="$TMP" DDP_TEST_TAG="$DDP_TEST_TAG" "$@"
}
(cd "$TMP" && installed_env timeout -k 5 120 ddprun --standalone --nproc_per_node=2 \
    /usr/libexec/ddprun/train) >"$TMP/train.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -qE '^epoch [0-9]+/[0-9]+ done: .* eval_accuracy [0-9.]+$' "$TMP/train.out"
verdict "${names[3]} (rc $rc)" || show_tail "$TMP/train.out"

EX=/usr/share/doc/libddpw-dev/examples/allreduce.c
(cd "$TMP" && installed_env sh -c "cc -o allreduce $EX \$(pkg-config --cflags --libs ddpw)" &&
    installed_env timeout -k 5 60 ddprun --standalone --nproc_per_node=2 ./allreduce) \
    >"$TMP/worker.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -cE '^rank [01]/2: cpu allreduce sum 3 \(expected 3\)$' "$TMP/worker.out")" = 2 ]
verdict "${names[4]} (rc $rc)" || show_tail "$TMP/worker.out"

if command -v systemd-analyze >/dev/null 2>&1; then
    # verify formats the page of Documentation= with man; at a width other than man's default,
    # man-db saves no formatted copy in /var/cache/man (which no package owns, and which the
    # purge would leave behind).
    MANWIDTH=100 systemd-analyze verify "$UNIT" >"$TMP/verify.out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q '^ExecStart=/usr/bin/ddp-rendezvous ' "$UNIT" &&
        [ "$(dpkg-query -S /usr/bin/ddp-rendezvous 2>/dev/null)" = "ddp-rendezvous: /usr/bin/ddp-rendezvous" ]
    verdict "${names[5]} (rc $rc)" || show_tail "$TMP/verify.out"
else
    skip "${names[5]}" "systemd-analyze is missing"
fi

no_leftovers 3
apt_get purge "${PKGS[@]}" >"$TMP/purge.out" 2>&1
rc=$?
# Left: a package's state, a file of theirs, a directory of theirs that was not there before, or
# anything new in the snapshot (deb-systemd-helper's record of the unit, a maintainer script's file).
left=()
installed && left+=("dpkg state")
while read -r f; do
    if [ -d "$f" ]; then
        grep -qxF "$f" "$TMP/dirs_before" || left+=("$f/")
    elif [ -e "$f" ] || [ -L "$f" ]; then
        left+=("$f")
    fi
done <"$TMP/paths"
snapshot | sort >"$TMP/after"
left+=($(comm -13 "$TMP/before" "$TMP/after"))
[ $rc -eq 0 ] && [ ${#left[@]} -eq 0 ]
verdict "${names[6]} (rc $rc${left:+; left: ${left[*]:0:5}})" || show_tail "$TMP/purge.out"
finish
