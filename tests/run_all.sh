#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the unit test binaries (each under a timeout) and the integration suites, then prints one
# summary line that CI reads:
#   N passed, N failed, N skipped
# A skipped test (cmocka's skip(), an integration "ok N - name # SKIP reason") is counted apart,
# never as a pass. Exit status 0 only when nothing failed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mode=${1:-all}
passed=0
failed=0
skipped=0
failed_names=()

# cmocka prints each test's result on stdout while the tests run ("[       OK ] name",
# "[  FAILED  ] name", "[  SKIPPED ] name"); a test whose setup or teardown failed is reported on
# stderr as "[  ERROR   ] name", and so is the closing summary, which names the failed and skipped
# tests again. count_results STATUS FILE counts a status's per-test lines in FILE (stdout), only
# those between "[==========] Running" and "[==========] N test(s) run.", never a summary list.
count_results() {
    awk -v st="$1" '
        /^\[==========\] Running / { on = 1; next }
        /^\[==========\] [0-9]+ test\(s\) run\./ { on = 0; next }
        on && $0 ~ "^\\[ +" st " +\\] [A-Za-z_]" { n++ }
        END { print n + 0 }' "$2"
}

if [ "$mode" != --integration-only ]; then
    out=$(mktemp)
    err=$(mktemp)
    for t in ${UNIT_TESTS:-}; do
        timeout -k 5 120 "$t" >"$out" 2>"$err"
        rc=$?
        grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' "$out"
        grep -E '^\[ +ERROR +\] [A-Za-z_]|^\[ +PASSED +\]' "$err"
        p=$(count_results OK "$out")
        k=$(count_results SKIPPED "$out")
        f=$(( $(count_results FAILED "$out") + $(grep -cE '^\[ +ERROR +\] [A-Za-z_]' "$err") ))
        passed=$((passed + p))
        skipped=$((skipped + k))
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        if [ $rc -ne 0 ]; then
            tail -20 "$err"
            failed_names+=("$(basename "$t") (exit $rc)")
        fi
        failed=$((failed + f))
    done
    rm -f "$out" "$err"
    echo "unit: $passed passed, $failed failed, $skipped skipped"
fi

if [ "$mode" != --unit-only ]; then
    summary=$(mktemp)
    BUILD=$BUILD tests/integration/run.sh | tee "$summary"
    line=$(grep -E '^integration: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$summary" | tail -1)
    if [ -n "$line" ]; then
        read -r ip if_ ik <<<"$(echo "$line" | sed -E 's/^integration: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/')"
    else
        ip=0; if_=1; ik=0
        failed_names+=("integration runner (no summary line)")
    fi
    grep -E '^not ok' "$summary" | while read -r l; do echo "  $l"; done
    passed=$((passed + ip))
    failed=$((failed + if_))
    skipped=$((skipped + ik))
    rm -f "$summary"
fi

for n in "${failed_names[@]}"; do echo "failed: $n"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
