#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every tests/integration/test_*.sh (or those named as arguments) under a timeout. Each suite
# prints TAP lines: "ok N - name", "not ok N - name", and "ok N - name # SKIP reason" for a check
# that cannot run on this machine (lib.sh's skip). This prints the total at the end:
#   integration: N passed, N failed, N skipped
# A skip is never counted as a pass. A suite fails as a whole when it exits non-zero without a
# "not ok" line, or when it reports no check at all.
#
# Suites run side by side, INTEGRATION_JOBS at a time (default 3): most of a suite's time is spent
# waiting (timeouts, keep-alives, restarts), not computing. Each suite's output is printed whole
# when it ends. A suite says in its first lines how it shares the machine:
#   # suite-timeout: SECONDS   more than the default 300 s
#   # suite-cost: SECONDS      about how long it runs; the longest start first
#   # suite-alone              nothing else runs beside it (it installs packages, scans the disk)
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
jobs=${INTEGRATION_JOBS:-3}
case $jobs in '' | *[!0-9]* | 0) echo "INTEGRATION_JOBS must be a positive number (got '$jobs')" >&2; exit 2 ;; esac
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(tests/integration/test_*.sh)

# header_value FILE KEY: the value of a "# KEY: VALUE" line among FILE's first lines.
header_value() { sed -n "1,8s/^# $2: \\([0-9][0-9]*\\)\$/\\1/p" "$1" | head -1; }

passed=0
failed=0
skipped=0
missing=()
runnable=()
for s in "${suites[@]}"; do
    if [ -f "$s" ]; then runnable+=("$s"); else missing+=("$s"); fi
done
for s in "${missing[@]}"; do
    echo "not ok 0 - $s: no such suite"
    failed=$((failed + 1))
done

# The order: suites that must run alone first (nothing else has started), then the rest longest
# first, so the last to start are short and the lanes end together.
order=()
while IFS= read -r line; do order+=("${line#* }"); done < <(
    for s in "${runnable[@]}"; do
        if grep -qx '# suite-alone' <(head -8 "$s"); then echo "999999 $s"; else
            echo "$(header_value "$s" suite-cost | grep . || echo 10) $s"; fi
    done | sort -s -k1,1nr)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_one SUITE N: runs SUITE under its timeout; its output goes to $work/N.out, the seconds it
# took and its exit status to $work/N.end.
run_one() {
    local s=$1 n=$2 limit t0 rc
    limit=$(header_value "$s" suite-timeout)
    t0=$(date +%s)
    timeout -k 10 "${SUITE_TIMEOUT:-${limit:-300}}" bash "$s" >"$work/$n.out" 2>&1 </dev/null
    rc=$?
    echo "$(($(date +%s) - t0)) $rc" >"$work/$n.end"
}

# report SUITE N: prints the suite's output and adds its counts to the totals.
report() {
    local s=$1 n=$2 out="$work/$2.out" secs rc k p f
    read -r secs rc <"$work/$n.end"
    echo "# suite $(basename "$s")"
    cat "$out"
    # The directive as TAP harnesses read it: case-insensitive, "# SKIP", "#skip", "# Skipped".
    k=$(grep -ciE '^ok [0-9]+( .*)? #[[:space:]]*skip' "$out")
    p=$(($(grep -cE '^ok [0-9]+' "$out") - k))
    f=$(grep -cE '^not ok [0-9]+' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok 0 - $(basename "$s") exited with status $rc"
        f=1
    elif [ $((p + f + k)) -eq 0 ]; then
        echo "not ok 0 - $(basename "$s") reported no check"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
    # What each suite costs, for keeping make test within its time budget.
    echo "# suite $(basename "$s"): $secs s"
}

declare -A running=() # PID -> index in order
t_start=$(date +%s)
next=0
while [ $next -lt ${#order[@]} ] || [ ${#running[@]} -gt 0 ]; do
    while [ $next -lt ${#order[@]} ] && [ ${#running[@]} -lt "$jobs" ]; do
        s=${order[$next]}
        alone=0
        grep -qx '# suite-alone' <(head -8 "$s") && alone=1
        # A suite that runs alone waits for the lanes to empty; nothing starts beside it.
        [ $alone = 1 ] && [ ${#running[@]} -gt 0 ] && break
        run_one "$s" "$next" &
        running[$!]=$next
        next=$((next + 1))
        [ $alone = 1 ] && break
    done
    wait -n -p done_pid "${!running[@]}"
    i=${running[$done_pid]}
    unset "running[$done_pid]"
    report "${order[$i]}" "$i"
done
echo "# integration suites: $(($(date +%s) - t_start)) s with $jobs at a time"
echo "integration: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
