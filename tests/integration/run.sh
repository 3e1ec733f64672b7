#!/usr/bin/env bash
# Runs every tests/integration/test_*.sh (or those named as arguments) under a timeout. Each suite
# prints TAP-like "ok N - name" / "not ok N - name" lines; this prints the total at the end:
#   integration: N passed, N failed
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(tests/integration/test_*.sh)
passed=0
failed=0
for s in "${suites[@]}"; do
    [ -f "$s" ] || continue
    echo "# suite $(basename "$s")"
    out=$(mktemp)
    timeout -k 10 ${SUITE_TIMEOUT:-300} bash "$s" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    p=$(grep -cE '^ok [0-9]+' "$out")
    f=$(grep -cE '^not ok [0-9]+' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok 0 - $(basename "$s") exited with status $rc"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    rm -f "$out"
done
echo "integration: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
