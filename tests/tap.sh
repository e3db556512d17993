# TAP for the test scripts (sourced): one count of cases and of failures,
# ok / not_ok / check, and the plan line at the end. tests/run_tests.sh
# counts the "ok" and "not ok" lines and prints the "# " comments of a
# failing program.
T_N=0
T_FAILED=0

ok() { T_N=$((T_N + 1)); echo "ok $T_N - $1"; }

# not_ok NAME [DIAGNOSTIC...]: every line of each diagnostic becomes a TAP
# comment (a multi-line one too: the runner keeps only comment lines).
not_ok() {
    T_N=$((T_N + 1))
    T_FAILED=$((T_FAILED + 1))
    echo "not ok $T_N - $1"
    shift
    local l
    for l in "$@"; do printf '%s\n' "$l" | sed 's/^/# /'; done
}

# check NAME STATUS [DIAGNOSTIC...]: ok when STATUS (a command's exit
# status) is 0, else not_ok with the diagnostics.
check() {
    local name=$1 rc=$2
    shift 2
    if [ "$rc" -eq 0 ]; then ok "$name"; else not_ok "$name" "$@"; fi
}

# tap_plan: the plan line; returns non-zero when a case failed.
tap_plan() {
    echo "1..$T_N"
    [ "$T_FAILED" -eq 0 ]
}
