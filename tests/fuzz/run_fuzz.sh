#!/usr/bin/env bash
# Runs each libFuzzer target named on the command line for FUZZ_SECONDS
# seconds (default 60), FUZZ_JOBS (default 2) at a time (each libFuzzer
# process is one thread, so on a machine with that many cores each target
# gets a whole core for its FUZZ_SECONDS), starting from its seed corpus
# tests/fuzz/corpus/NAME/. New inputs go to build-fuzz/corpus/NAME/ (the
# seed corpus in the repository is only read); a crash, leak, timeout or
# violated property leaves its input in build-fuzz/artifacts/NAME/ and makes
# the run fail. FUZZ_TARGETS=a,b restricts the run to those names.
# Optional per target: tests/fuzz/NAME.dict (a libFuzzer dictionary) and
# tests/fuzz/NAME.options (extra libFuzzer flags).
# Prints one TAP line per target, in the order given, and a final
# "N passed, N failed".
set -u
BUILD=${FUZZ_BUILD:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
case "$JOBS" in ''|*[!0-9]*|0) echo "FUZZ_JOBS must be a positive integer, not '$JOBS'" >&2; exit 2 ;; esac
# The harnesses' own limits: a single input may take at most 10 s and the
# process 2 GiB (both tokenizers plus ASan's shadow stay well below).
TIMEOUT_EACH=${FUZZ_INPUT_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
passed=0
failed=0
mkdir -p "$BUILD/logs"

# fuzz_one NAME: runs one target; its TAP block goes to logs/NAME.tap
# (renamed into place when complete) and its exit status to logs/NAME.rc.
fuzz_one() {
    local name=$1 bin seeds work art log tap rc runs cov start
    bin=$BUILD/fuzz/fuzz_$name
    seeds=tests/fuzz/corpus/$name
    work=$BUILD/corpus/$name
    art=$BUILD/artifacts/$name
    log=$BUILD/logs/$name.log
    tap=$BUILD/logs/$name.tap
    mkdir -p "$work" "$art"
    local extra=()
    [ -f "tests/fuzz/$name.dict" ] && extra+=(-dict="tests/fuzz/$name.dict")
    # NAME.options: more libFuzzer flags for that target, on one line.
    # shellcheck disable=SC2207
    [ -f "tests/fuzz/$name.options" ] && extra+=($(cat "tests/fuzz/$name.options"))
    start=$SECONDS
    # -max_total_time ends the run; the outer timeout only catches a target
    # that never returns (stuck in its exit-time leak check, say): a failure.
    timeout --kill-after=10 $((SECONDS_EACH + TIMEOUT_EACH + 120)) \
    "$bin" -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT_EACH" -rss_limit_mb="$RSS_MB" \
        -artifact_prefix="$art/" -print_final_stats=1 "${extra[@]}" "$work" "$seeds" >"$log" 2>&1 </dev/null
    rc=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
    if [ "$rc" -eq 0 ]; then
        echo "ok - fuzz $name: ${runs:-?} inputs in $((SECONDS - start)) s, coverage ${cov:-?}, no crash" >"$tap.tmp"
    else
        {
            echo "not ok - fuzz $name: exit $rc after $((SECONDS - start)) s (log $log, inputs in $art/)"
            grep -E 'ERROR|SUMMARY|fuzz property|runtime error|Test unit written' "$log" | head -20 | sed 's/^/    /'
        } >"$tap.tmp"
    fi
    echo "$rc" >"$BUILD/logs/$name.rc"
    mv "$tap.tmp" "$tap"
}

names=()
for name in "$@"; do
    if [ -n "${FUZZ_TARGETS:-}" ] && [[ ",$FUZZ_TARGETS," != *",$name,"* ]]; then
        continue
    fi
    names+=("$name")
    rm -f "$BUILD/logs/$name.tap" "$BUILD/logs/$name.rc"
done

# report I: prints target I's block (in the order given) and counts it
report() {
    local name=${names[$1]} rc
    if [ -f "$BUILD/logs/$name.tap" ]; then
        rc=$(cat "$BUILD/logs/$name.rc")
        cat "$BUILD/logs/$name.tap"
    else
        rc=1
        echo "not ok - fuzz $name: ended without a result (runner killed?)"
    fi
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

n=${#names[@]}
started=0
next=0
running=0
while [ "$next" -lt "$n" ]; do
    while [ "$running" -lt "$JOBS" ] && [ "$started" -lt "$n" ]; do
        fuzz_one "${names[$started]}" &
        started=$((started + 1))
        running=$((running + 1))
    done
    if [ "$running" -gt 0 ]; then
        wait -n
        running=$((running - 1))
    fi
    while [ "$next" -lt "$n" ] && { [ -f "$BUILD/logs/${names[$next]}.tap" ] ||
                                     { [ "$running" -eq 0 ] && [ "$started" -eq "$n" ]; }; }; do
        report "$next"
        next=$((next + 1))
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
