#!/usr/bin/env bash
# tandem-sim end to end: the shipped bursty trace (and that its generator
# still writes exactly it), the printed timeline and summary, and errors for
# bad input. Prints TAP lines.
set -u
BUILD=${TANDEM_BUILD:-build}
SIM=$BUILD/bin/tandem-sim
TRACES=tests/fixtures/traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
check() { # check NAME CONDITION-EXIT-STATUS
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; fi
}

"$SIM" --help >"$tmp/help" 2>&1
rc=$?
grep -q -- '--autoscale-prefill-target-utilisation' "$tmp/help" && grep -q -- '--gpu-hour-usd' "$tmp/help"
check "--help exits 0 and lists policy and cost flags" $((rc + $?))

python3 "$TRACES/gen_bursty_trace.py" --out "$tmp/bursty.csv" >/dev/null
cmp -s "$tmp/bursty.csv" "$TRACES/bursty.csv"
check "gen_bursty_trace.py regenerates the shipped bursty.csv byte for byte" $?

"$SIM" --trace "$TRACES/bursty.csv" --print-every-s 0 >"$tmp/out" 2>"$tmp/err"
check "tandem-sim runs the bursty trace" $?
requests=$(($(wc -l <"$TRACES/bursty.csv") - 1))
grep -q "^requests $requests, all served" "$tmp/out"
check "every one of the $requests requests is served" $?
# The prefill column reaches 3 ready replicas during a burst and returns to
# fewer afterwards (timeline rows: time ready/cur->want ...).
awk 'NF>=3 && $1 ~ /^[0-9.]+$/ { split($2, a, "/"); if (a[1] >= 3) up = 1; if (up && a[1] < 3) down = 1 }
     END { exit !(up && down) }' "$tmp/out"
check "prefill replicas go up in a burst and back down" $?
grep -qE '^cost per million input tokens \(prefill pool\): \$[0-9]+\.[0-9]{4}$' "$tmp/out" &&
    grep -qE '^cost per million output tokens \(decode pool\): \$[0-9]+\.[0-9]{4}$' "$tmp/out" &&
    grep -qE '^time to first token \(s\) +p50 ' "$tmp/out"
check "summary prints delay percentiles and cost per million tokens" $?

# Cost scales linearly with the GPU-hour price: $6.00 doubles the $3.00 cost.
"$SIM" --trace "$TRACES/bursty.csv" --gpu-hour-usd 6.00 >"$tmp/out6" 2>/dev/null
c3=$(sed -n 's/^cost at .* total \$\([0-9.]*\)$/\1/p' "$tmp/out")
c6=$(sed -n 's/^cost at .* total \$\([0-9.]*\)$/\1/p' "$tmp/out6")
awk -v a="$c3" -v b="$c6" 'BEGIN { exit !(a > 0 && (b - 2 * a) < 0.0002 && (2 * a - b) < 0.0002) }'
check "total cost at \$6.00/GPU-hour is twice the \$3.00 one ($c3 -> $c6)" $?

"$SIM" >/dev/null 2>"$tmp/e1"
rc=$?
[ "$rc" -eq 2 ] && grep -q -- '--trace FILE is required' "$tmp/e1"
check "missing --trace: exit 2 with a message" $?

"$SIM" --trace "$tmp/none.csv" >/dev/null 2>"$tmp/e2"
rc=$?
[ "$rc" -eq 1 ] && grep -q 'cannot open trace' "$tmp/e2"
check "missing trace file: exit 1 with a message" $?

printf '2.0,10,10\n1.0,10,10\n' >"$tmp/bad.csv"
"$SIM" --trace "$tmp/bad.csv" >/dev/null 2>"$tmp/e3"
rc=$?
[ "$rc" -eq 1 ] && grep -q 'bad.csv:2: arrival times must not decrease' "$tmp/e3"
check "unsorted trace: exit 1 naming the line" $?

"$SIM" --trace "$TRACES/bursty.csv" --autoscale-prefill-target-utilisation 2 >/dev/null 2>"$tmp/e4"
rc=$?
[ "$rc" -eq 2 ] && grep -q 'target-utilisation must be in (0, 1]' "$tmp/e4"
check "out-of-range flag: exit 2 with a message" $?

"$SIM" --trace "$TRACES/bursty.csv" --no-such-flag 1 >/dev/null 2>"$tmp/e5"
[ $? -eq 2 ] && grep -q 'unknown option --no-such-flag' "$tmp/e5"
check "unknown flag: exit 2" $?
