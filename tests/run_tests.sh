#!/usr/bin/env bash
# Runs every unit test binary (cmocka, TAP output) and every integration
# script, counts the individual test cases, and ends with the one summary
# line CI reads: "N passed, N failed".
#
# A program that exits non-zero without reporting a failing case (a crash,
# a sanitizer report, a timeout) counts as one failure of its own.
# TEST_FILTER=substring runs only the matching programs.
set -u
BUILD=${BUILD:-build}
TIMEOUT=${TEST_TIMEOUT:-600}
export CMOCKA_MESSAGE_OUTPUT=TAP
export TANDEM_BUILD=$BUILD
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
passed=0
failed=0
failures=()
logdir=$BUILD/test-logs
mkdir -p "$logdir"

run_one() {
    local prog=$1 name log rc p f
    name=$(basename "${@: -1}")
    log=$logdir/$name.log
    local start=$SECONDS
    timeout --kill-after=10 "$TIMEOUT" "$@" >"$log" 2>&1
    rc=$?
    p=$(grep -cE '^ok ' "$log")
    f=$(grep -cE '^not ok ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc" >>"$log"
    fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        p=1   # a program that reports no cases counts as one case
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - start))
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        grep -E '^not ok |^# ' "$log" | head -40 | sed 's/^/    /'
        tail -n 15 "$log" | sed 's/^/    | /'
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *"${TEST_FILTER:-}"*) ;; *) continue ;; esac
    run_one "$t"
done
for t in tests/integration/test_*.sh; do
    [ -f "$t" ] || continue
    case "$t" in *"${TEST_FILTER:-}"*) ;; *) continue ;; esac
    run_one bash "$t"
done

if [ ${#failures[@]} -gt 0 ]; then
    echo "failing programs: ${failures[*]} (logs in $logdir)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
