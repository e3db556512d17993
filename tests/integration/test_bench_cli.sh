#!/usr/bin/env bash
# tandem-bench end to end on the CPU: a checkpoint and a synthetic model of
# the same config both produce the prefill and decode rows, --profile prints
# every group, the floors appear when asked for, the parallel layouts (TP=2/
# EP=2 prefill, DP=2xEP=2 decode, forked ranks on the host communicator)
# report rank 0's rows, and bad arguments give a clear message with exit
# status 2 (1 for runtime errors, also when every rank fails to load). Measures nothing
# itself: it only checks that the benchmark runs and reports.
set -u
BUILD=${TANDEM_BUILD:-build}
BENCH=$BUILD/bin/tandem-bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tandem-bench-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../tap.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [ ! -x "$BENCH" ]; then
    not_ok "tandem-bench is built at $BENCH"
    echo "1..$T_N"
    exit 1
fi

small="--prefill 16,40 --batch 1,3 --context 24 --steps 2 --repeat 1"
timeout 120 "$BENCH" --model tests/fixtures/gpt_oss_tiny $small >"$tmp/ckpt" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^prefill ' "$tmp/ckpt")" -eq 2 ] &&
   [ "$(grep -c '^decode ' "$tmp/ckpt")" -eq 2 ] && grep -q "prefilled by the model" "$tmp/ckpt"; then
    ok "checkpoint: 2 prefill and 2 decode rows"
else
    not_ok "checkpoint: 2 prefill and 2 decode rows" "exit $rc" "$(cat "$tmp/ckpt" "$tmp/err")"
fi

timeout 120 "$BENCH" --synthetic tests/fixtures/qwen3_moe_tiny/config.json --seed 3 $small \
    --profile --peak-tflops 100 --hbm-tbps 1 >"$tmp/syn" 2>"$tmp/err"
rc=$?
groups=$(grep -c '^#   ' "$tmp/syn")
if [ $rc -eq 0 ] && grep -q "random weights (seed 3)" "$tmp/syn" &&
   grep -q "cache filled with random values" "$tmp/syn" &&
   [ "$(grep -cE '^(prefill|decode) .* [0-9.]+ +[0-9.]+$' "$tmp/syn")" -eq 4 ] &&
   [ "$groups" -eq 32 ] && grep -q "MoE experts" "$tmp/syn"; then
    ok "synthetic: rows with floors, and a profile of 7 groups + total per shape"
else
    not_ok "synthetic: rows with floors and profile" "exit $rc, $groups profile lines" \
        "$(cat "$tmp/syn" "$tmp/err")"
fi

for lay in "--tp 2 --ep 2" "--dp 2 --ep 2"; do
    # shellcheck disable=SC2086
    timeout 120 "$BENCH" --synthetic tests/fixtures/gpt_oss_tiny $small $lay >"$tmp/par" 2>"$tmp/err"
    rc=$?
    want="layout TP=${lay:5:1} EP=2 DP=1"
    [ "${lay:2:2}" = dp ] && want="layout TP=1 EP=2 DP=2"
    if [ $rc -eq 0 ] && grep -q "$want: 2 ranks (devices cpu), rank communicator host" "$tmp/par" &&
       [ "$(grep -c '^prefill ' "$tmp/par")" -eq 2 ] && [ "$(grep -c '^decode ' "$tmp/par")" -eq 2 ]; then
        ok "$lay: two forked ranks, rank 0's 2 prefill and 2 decode rows"
    else
        not_ok "$lay: two forked ranks, rank 0's rows" "exit $rc" "$(cat "$tmp/par" "$tmp/err")"
    fi
done

# --chunk-tokens: the 40-token prompt in chunks of 16 (as the prefiller runs
# long prompts), the 16-token one in one forward; the row says which
timeout 120 "$BENCH" --synthetic tests/fixtures/gpt_oss_tiny --prefill 16,40 --batch none \
    --repeat 1 --chunk-tokens 16 >"$tmp/chunk" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && grep -qE '^prefill +prompt 40 \(chunks of 16\) ' "$tmp/chunk" &&
   grep -qE '^prefill +prompt 16 +[0-9]' "$tmp/chunk"; then
    ok "--chunk-tokens 16: 'prompt 40 (chunks of 16)' and 'prompt 16' in one forward"
else
    not_ok "--chunk-tokens rows" "exit $rc" "$(cat "$tmp/chunk" "$tmp/err")"
fi

expect_fail() {   # NAME STATUS MESSAGE ARGS...
    local name=$1 want=$2 msg=$3
    shift 3
    timeout 60 "$BENCH" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq "$want" ] && grep -qF -- "$msg" "$tmp/err"; then
        ok "$name (exit $rc: $(head -1 "$tmp/err"))"
    else
        not_ok "$name" "exit $rc (want $want)" "$(head -3 "$tmp/err")"
    fi
}
expect_fail "neither --model nor --synthetic" 2 "exactly one of --model"
expect_fail "both --model and --synthetic" 2 "exactly one of --model" --model tests/fixtures/gpt_oss_tiny \
    --synthetic tests/fixtures/gpt_oss_tiny
expect_fail "bad --device" 2 "bad value for --device" --model tests/fixtures/gpt_oss_tiny --device tpu
expect_fail "bad --weights" 2 "bad value for --weights" --model tests/fixtures/gpt_oss_tiny --weights int4
expect_fail "bad --context-fill" 2 "bad value for --context-fill" --model tests/fixtures/gpt_oss_tiny \
    --context-fill zeros
expect_fail "bad --prefill list" 2 "bad value for --prefill" --model tests/fixtures/gpt_oss_tiny --prefill 8,,9
expect_fail "bad --chunk-tokens" 2 "bad value for --chunk-tokens" --model tests/fixtures/gpt_oss_tiny \
    --chunk-tokens -4
expect_fail "unknown option" 2 "unknown option" --model tests/fixtures/gpt_oss_tiny --fast
expect_fail "missing synthetic config" 1 "No such file" --synthetic "$tmp/absent.json"
expect_fail "--tp with --dp" 2 "not a layout the workers run" --synthetic tests/fixtures/gpt_oss_tiny \
    --tp 2 --dp 2
expect_fail "--ep not dividing the ranks" 2 "--ep 4 must divide the 2 TP ranks" \
    --synthetic tests/fixtures/gpt_oss_tiny --tp 2 --ep 4
expect_fail "bad --rank-devices" 2 "bad value for --rank-devices" --synthetic tests/fixtures/gpt_oss_tiny \
    --tp 2 --rank-devices 0,x
expect_fail "missing synthetic config, two ranks" 1 "No such file" --synthetic "$tmp/absent.json" --tp 2
if ! ldd "$BENCH" | grep -q libcudart; then
    expect_fail "--device cuda on a CPU-only build" 1 "this build has no CUDA backend" \
        --model tests/fixtures/gpt_oss_tiny --device cuda
fi
timeout 10 "$BENCH" --help >"$tmp/out" 2>&1
if [ $? -eq 0 ] && grep -q "usage: tandem-bench" "$tmp/out" && grep -q -- "--synthetic" "$tmp/out"; then
    ok "--help prints usage and exits 0"
else
    not_ok "--help prints usage and exits 0"
fi
tap_plan
