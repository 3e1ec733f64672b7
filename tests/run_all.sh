#!/usr/bin/env bash
# Runs the unit test binaries (each under a timeout) and the integration suites, then prints one
# summary line "N passed, N failed" that CI reads. Exit status 0 only when nothing failed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mode=${1:-all}
passed=0
failed=0
failed_names=()

if [ "$mode" != --integration-only ]; then
    for t in ${UNIT_TESTS:-}; do
        out=$(timeout -k 5 120 "$t" 2>&1)
        rc=$?
        printf '%s\n' "$out" | grep -E '^\[ +(OK|FAILED|ERROR|PASSED) +\]|^\[ +RUN +\]' | grep -v RUN
        p=$(printf '%s\n' "$out" | grep -cE '^\[ +OK +\]')
        f=$(printf '%s\n' "$out" | grep -cE '^\[ +(FAILED|ERROR) +\] [A-Za-z_]')
        passed=$((passed + p))
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        if [ $rc -ne 0 ]; then
            printf '%s\n' "$out" | tail -20
            failed_names+=("$(basename "$t") (exit $rc)")
        fi
        failed=$((failed + f))
    done
    echo "unit: $passed passed, $failed failed"
fi

if [ "$mode" != --unit-only ]; then
    summary=$(mktemp)
    BUILD=$BUILD tests/integration/run.sh | tee "$summary"
    line=$(grep -E '^integration: [0-9]+ passed, [0-9]+ failed' "$summary" | tail -1)
    ip=$(echo "$line" | sed -E 's/^integration: ([0-9]+) passed.*/\1/')
    if_=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    [ -n "$line" ] || { ip=0; if_=1; failed_names+=("integration runner"); }
    grep -E '^not ok' "$summary" | while read -r l; do echo "  $l"; done
    passed=$((passed + ip))
    failed=$((failed + if_))
    rm -f "$summary"
fi

for n in "${failed_names[@]}"; do echo "failed: $n"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
