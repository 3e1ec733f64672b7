#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every tests/integration/test_*.sh (or those named as arguments) under a timeout. Each suite
# prints TAP lines: "ok N - name", "not ok N - name", and "ok N - name # SKIP reason" for a check
# that cannot run on this machine (lib.sh's skip). This prints the total at the end:
#   integration: N passed, N failed, N skipped
# A skip is never counted as a pass. A suite fails as a whole when it exits non-zero without a
# "not ok" line, or when it reports no check at all.
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(tests/integration/test_*.sh)
passed=0
failed=0
skipped=0
for s in "${suites[@]}"; do
    if [ ! -f "$s" ]; then
        echo "not ok 0 - $s: no such suite"
        failed=$((failed + 1))
        continue
    fi
    echo "# suite $(basename "$s")"
    t0=$(date +%s)
    out=$(mktemp)
    # A suite may ask for more than the default with a "# suite-timeout: SECONDS" line.
    limit=$(sed -n '1,5s/^# suite-timeout: \([0-9][0-9]*\)$/\1/p' "$s" | head -1)
    timeout -k 10 "${SUITE_TIMEOUT:-${limit:-300}}" bash "$s" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    # The directive as TAP harnesses read it: case-insensitive, "# SKIP", "#skip", "# Skipped".
    k=$(grep -ciE '^ok [0-9]+( .*)? #[[:space:]]*skip' "$out")
    p=$(( $(grep -cE '^ok [0-9]+' "$out") - k ))
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
    echo "# suite $(basename "$s"): $(($(date +%s) - t0)) s"
    rm -f "$out"
done
echo "integration: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
