#!/usr/bin/env bash
# Runs every unit test binary (cmocka, TAP output) and every integration
# script, counts the individual test cases, and ends with the one summary
# line CI reads: "N passed, N failed".
#
# A program that exits non-zero without reporting a failing case (a crash,
# a sanitizer report, a timeout) counts as one failure of its own.
# TEST_FILTER=substring runs only the matching programs.
# TEST_JOBS=N runs N programs at a time (default 2): every program takes
# its own ephemeral ports (port 0, read back) and its own mktemp
# directory, so they do not meet. Each program's line (and, when it
# failed, its failing cases and the end of its log) is printed as one
# block when it ends.
# TEST_SKIP_NO_C=1 (make test-asan) skips the programs listed in
# tests/no_c_tests.txt, which run no C code of ours: a sanitizer build
# cannot change what they check, and `make test` runs them.
# Per-program wall times (ms) go to $BUILD/test-logs/times.tsv.
set -u
BUILD=${BUILD:-build}
TIMEOUT=${TEST_TIMEOUT:-600}
JOBS=${TEST_JOBS:-2}
export CMOCKA_MESSAGE_OUTPUT=TAP
export TANDEM_BUILD=$BUILD
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# OpenMP threads that wait sleep instead of spinning: two programs run at a
# time, each often several processes with OMP_NUM_THREADS threads, on as
# few as 2 cores, and libgomp's default spin-wait took a fifth of the CPU
# from the processes with work (the results do not depend on it).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# In the sanitizer build an abort() inside a library (a ZeroMQ or glibc
# assertion, libmicrohttpd's panic) prints a sanitizer report with the
# stack, which the cluster tests show with the failing process's log; a
# plain abort leaves only "exit status 134".
export ASAN_OPTIONS=${ASAN_OPTIONS:-handle_abort=1}
# python3 for the test scripts (hundreds of short calls: JSON fields, HTTP
# clients): the system's, which `make deps` provisions (python3-jsonschema,
# python3-jinja2), called directly. A version manager's shim first on PATH
# (pyenv's is a bash script forking ~40 processes) cost ~0.6 s of CPU a
# call, half of `make test`'s CPU time on a 2-core machine. TEST_PYTHON
# names another interpreter.
py=${TEST_PYTHON:-}
[ -z "$py" ] && [ -x /usr/bin/python3 ] && py=/usr/bin/python3
if [ -n "$py" ]; then
    case "$BUILD" in /*) pybin=$BUILD/test-bin ;; *) pybin=$PWD/$BUILD/test-bin ;; esac
    mkdir -p "$pybin" && ln -sf "$py" "$pybin/python3" && export PATH="$pybin:$PATH"
fi
case "$JOBS" in ''|*[!0-9]*|0) echo "TEST_JOBS must be a positive integer, not '$JOBS'" >&2; exit 2 ;; esac
passed=0
failed=0
failures=()
logdir=$BUILD/test-logs
mkdir -p "$logdir"
rm -f "$logdir"/*.result "$logdir/times.tsv"

# no_c NAME: whether NAME is listed in tests/no_c_tests.txt
no_c=()
if [ "${TEST_SKIP_NO_C:-0}" = 1 ] && [ -f tests/no_c_tests.txt ]; then
    while read -r line; do
        line=${line%%#*}
        line=${line//[[:space:]]/}
        [ -n "$line" ] && no_c+=("$line")
    done < tests/no_c_tests.txt
fi
is_no_c() {
    local n
    for n in "${no_c[@]+"${no_c[@]}"}"; do [ "$n" = "$1" ] && return 0; done
    return 1
}

# The programs: the longest first (measured; a name missing from FIRST only
# changes the order), then the integration scripts (mostly waiting on
# processes), then the unit programs, so both slots stay busy to the end.
FIRST=" test_valgrind_engine.sh test_ops test_grammar test_servebench.sh test_fault_wireup_freeze.sh
        test_autoscale_local.sh test_cluster_tool_choice.sh test_cluster_structured.sh "
FIRST=" $(echo $FIRST) "
names=()
cmds=()
skipped=()
add() { # add NAME CMD... (TEST_FILTER matches the program's path)
    case "${*: -1}" in *"${TEST_FILTER:-}"*) ;; *) return ;; esac
    if is_no_c "$1"; then skipped+=("$1"); return; fi
    names+=("$1")
    cmds+=("${*:2}")
}
for f in $FIRST; do
    case $f in
    *.sh) [ -f "tests/integration/$f" ] && add "$f" bash "tests/integration/$f" ;;
    *) [ -x "$BUILD/tests/$f" ] && add "$f" "$BUILD/tests/$f" ;;
    esac
done
for t in tests/integration/test_*.sh; do
    [ -f "$t" ] || continue
    case "$FIRST" in *" $(basename "$t") "*) continue ;; esac
    add "$(basename "$t")" bash "$t"
done
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$FIRST" in *" $(basename "$t") "*) continue ;; esac
    add "$(basename "$t")" "$t"
done

# run_one NAME CMD...: runs one program with its log, then writes
# "passed failed seconds milliseconds" to NAME.result (renamed into place,
# so the parent never reads half a line).
run_one() {
    local name=$1 log rc p f t0 ms
    shift
    log=$logdir/$name.log
    t0=${EPOCHREALTIME/./}
    timeout --kill-after=10 "$TIMEOUT" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
    p=$(grep -cE '^ok ' "$log")
    f=$(grep -cE '^not ok ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc" >>"$log"
    fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        p=1   # a program that reports no cases counts as one case
    fi
    echo "$p $f $((ms / 1000)) $ms" >"$logdir/$name.result.tmp"
    mv "$logdir/$name.result.tmp" "$logdir/$name.result"
}

# report I: prints program I's block and adds up its counts
report() {
    local name=${names[$1]} log p f s ms
    log=$logdir/$name.log
    if [ -f "$logdir/$name.result" ]; then
        read -r p f s ms <"$logdir/$name.result"
    else
        p=0 f=1 s=0 ms=0
        echo "not ok - $name ended without a result (runner killed?)" >>"$log"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    printf '%s\t%d\n' "$name" "$ms" >>"$logdir/times.tsv"
    printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" "$s"
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        grep -E '^not ok |^# ' "$log" | head -40 | sed 's/^/    /'
        tail -n 15 "$log" | sed 's/^/    | /'
    fi
}

n=${#names[@]}
started=0
done_n=0
running=0
reported=()
while [ "$done_n" -lt "$n" ]; do
    while [ "$running" -lt "$JOBS" ] && [ "$started" -lt "$n" ]; do
        # shellcheck disable=SC2086  # cmds are "bash PATH" or "PATH", no spaces in paths
        run_one "${names[$started]}" ${cmds[$started]} &
        started=$((started + 1))
        running=$((running + 1))
    done
    if [ "$running" -gt 0 ]; then
        wait -n
        running=$((running - 1))
    fi
    # every program that ended since (all of them once none runs)
    for ((i = 0; i < started; i++)); do
        [ -z "${reported[$i]:-}" ] || continue
        if [ -f "$logdir/${names[$i]}.result" ] || [ "$running" -eq 0 ]; then
            report "$i"
            reported[$i]=1
            done_n=$((done_n + 1))
        fi
    done
done

for s in "${skipped[@]+"${skipped[@]}"}"; do
    echo "$s: skipped here (runs no C code of ours: tests/no_c_tests.txt; make test runs it)"
done
if [ ${#failures[@]} -gt 0 ]; then
    echo "failing programs: ${failures[*]} (logs in $logdir)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
