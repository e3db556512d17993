#!/usr/bin/env bash
# Runs each libFuzzer target named on the command line for FUZZ_SECONDS
# seconds (default 60), one after the other, starting from its seed corpus
# tests/fuzz/corpus/NAME/. New inputs go to build-fuzz/corpus/NAME/ (the
# seed corpus in the repository is only read); a crash, leak, timeout or
# violated property leaves its input in build-fuzz/artifacts/NAME/ and makes
# the run fail. FUZZ_TARGETS=a,b restricts the run to those names.
# Optional per target: tests/fuzz/NAME.dict (a libFuzzer dictionary) and
# tests/fuzz/NAME.options (extra libFuzzer flags).
# Prints one TAP line per target and a final "N passed, N failed".
set -u
BUILD=${FUZZ_BUILD:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
# The harnesses' own limits: a single input may take at most 10 s and the
# process 2 GiB (both tokenizers plus ASan's shadow stay well below).
TIMEOUT_EACH=${FUZZ_INPUT_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
passed=0
failed=0
for name in "$@"; do
    if [ -n "${FUZZ_TARGETS:-}" ] && [[ ",$FUZZ_TARGETS," != *",$name,"* ]]; then
        continue
    fi
    bin=$BUILD/fuzz/fuzz_$name
    seeds=tests/fuzz/corpus/$name
    work=$BUILD/corpus/$name
    art=$BUILD/artifacts/$name
    log=$BUILD/logs/$name.log
    mkdir -p "$work" "$art" "$(dirname "$log")"
    extra=()
    [ -f "tests/fuzz/$name.dict" ] && extra+=(-dict="tests/fuzz/$name.dict")
    # NAME.options: more libFuzzer flags for that target, on one line.
    # shellcheck disable=SC2207
    [ -f "tests/fuzz/$name.options" ] && extra+=($(cat "tests/fuzz/$name.options"))
    start=$SECONDS
    "$bin" -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT_EACH" -rss_limit_mb="$RSS_MB" \
        -artifact_prefix="$art/" -print_final_stats=1 "${extra[@]}" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok - fuzz $name: ${runs:-?} inputs in $((SECONDS - start)) s, coverage ${cov:-?}, no crash"
    else
        failed=$((failed + 1))
        echo "not ok - fuzz $name: exit $rc after $((SECONDS - start)) s (log $log, inputs in $art/)"
        grep -E 'ERROR|SUMMARY|fuzz property|runtime error|Test unit written' "$log" | head -20 | sed 's/^/    /'
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
