#!/usr/bin/env bash
# The Hopper wgmma prefill attention (kernels/cuda/attention_wgmma.cu) on
# the GPU, in one call that builds nothing there:
#   sass       cuobjdump of test_cuda_ops: attn_wgmma_kernel's and both
#              attn_wgmma_tma_kernel's HGMMA count, local-memory (LDL/STL)
#              count, registers and stack
#   ops-off    test_cuda_ops SEED attention (the wgmma switch off: the
#              earlier kernels; the `pool wgmma` cases turn it on themselves)
#   ops-on     only with MODES set: the `pool bf16 bf16 KV` cases with
#              TANDEM_CUDA_ATTN_WGMMA=m for each m in MODES (since every
#              case names its kernel, these run the mma.sync kernel
#              whatever the switch says: the `pool wgmma <mode>` cases of
#              ops-off are the wgmma checks)
#   memcheck   compute-sanitizer memcheck on the `pool wgmma` cases
#   bench      tests/gpu/bench_attention.py with BENCH_ONLY_WGMMA=1: the
#              wgmma forms and the mma.sync kernel over a bf16 cache next
#              to torch SDPA cuDNN and flash, prefill 8192 and 32768,
#              window 0 / 128, and the Qwen3 shape (head_dim 128) in modes
#              7 and 6 next to cuDNN
# A short table is printed last; a failed case's log lines (which case,
# the first bad row/head/dim) are printed under its step.
# With the argument `engine`, instead: tandem-bench --synthetic GPT-OSS-20B
# FP8 (ENGINE_CONFIG: another file of tests/fixtures/configs, e.g.
# qwen3-30b-a3b for head_dim 128), prefill ENGINE_PREFILL (default
# 8192,32768) with --profile, once per TANDEM_CUDA_ATTN_WGMMA value in
# ENGINE_MODES (default "0 3"), the prefill lines and the attention share of
# the profile printed.
#
# MODES (default none) picks the modes of the ops-on runs, OPS_FILTER
# (default "attention") the ops-off run's cases, MEMCHECK_FILTER (default
# "pool wgmma"; several filters separated by '|', one memcheck run each,
# e.g. "pool wgmma tma-window|d128") memcheck's, BENCH_WGMMA_MODES the
# bench's; ENGINE_MODES set adds the `engine` comparison after the bench.
#
# Usage: TANDEM_PREBUILT=DIR|DIR.tar.xz [SEED=n] [OUT=dir]
#        bash tests/gpu/attn_wgmma_check.sh [engine]
# DIR is made by tests/gpu/make_prebuilt.sh on a machine with nvcc.
# BUDGET_S (default 560) bounds the whole run: each step's timeout is cut
# to what is left, and a step with under 20 s left is skipped and says so.
# The TMA kernel traps (a launch failure) rather than hang on a barrier.
# Exit status non-zero when a step failed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
. tests/gpu/check_lib.sh

engine_step() {
    local cfg=${ENGINE_CONFIG:-gpt-oss-20b}
    for m in ${ENGINE_MODES:-0 3}; do
        secs=$(limit 150)
        [ "$secs" -ge 30 ] || { rows+=("| tandem-bench mode $m | skipped: out of time |"); continue; }
        echo "== tandem-bench $cfg FP8, TANDEM_CUDA_ATTN_WGMMA=$m"
        run timeout "$secs" env TANDEM_CUDA_ATTN_WGMMA=$m "$BIN/tandem-bench" --device cuda \
            --synthetic "tests/fixtures/configs/$cfg.json" --weights fp8 --prefill "${ENGINE_PREFILL:-8192,32768}" \
            --batch none --repeat 3 --profile >"$OUT/engine_${cfg}_wgmma$m.log" 2>&1
        rc=$?
        grep -iE '^prefill |attention' "$OUT/engine_${cfg}_wgmma$m.log" | head -12
        [ $rc -eq 0 ] || status=1
        rows+=("| tandem-bench $cfg fp8, TANDEM_CUDA_ATTN_WGMMA=$m | exit $rc; $(grep -E '^prefill ' \
            "$OUT/engine_${cfg}_wgmma$m.log" | tr -s ' ' | tr '\n' ';') |")
    done
}
print_rows() {
    echo
    echo "| step | result |"
    echo "| --- | --- |"
    for r in "${rows[@]}"; do echo "$r"; done
}
if [ "${1:-}" = engine ]; then
    engine_step
    print_rows
    exit $status
fi

echo "== sass: the wgmma kernels in test_cuda_ops"
if command -v cuobjdump >/dev/null; then
    all=$(mktemp)
    cuobjdump -sass "$BIN/test_cuda_ops" >"$all" 2>&1
    cuobjdump -res-usage "$BIN/test_cuda_ops" 2>&1 | grep -A1 attn_wgmma >"$OUT/res_usage.txt"
    for k in $(grep -oE 'Function : [^ ]*attn_wgmma[^ ]*' "$all" |
               grep -oE 'attn_wgmma(_tma|_window)?_kernel(ILi[0-9]ELb[01]ELb[01]ELi[0-9]+ELb[01]ELb[01]E)?' | sort -u); do
        # the kernel's own listing: from its Function header to the next one
        awk -v k="$k" '/Function : / { on = index($0, k) > 0 } on' "$all" >"$OUT/sass_$k.txt"
        hg=$(grep -c 'HGMMA' "$OUT/sass_$k.txt"); ll=$(grep -cE '\b(LDL|STL)\b' "$OUT/sass_$k.txt")
        res=$(grep -A1 "$k" "$OUT/res_usage.txt" | tail -1 | tr -s ' ')
        echo "$k: HGMMA $hg, LDL/STL $ll; $res"
        [ "$hg" -gt 0 ] && [ "$ll" -eq 0 ] || status=1
        rows+=("| sass $k | HGMMA $hg, LDL/STL $ll; $res |")
    done
else
    rows+=("| sass | not run: no cuobjdump |")
fi

# ops NAME LOG SECONDS [ENV=..] CMD...: a TAP run under timeout; failures and
# the first bad lines printed
ops() {
    local name=$1 log=$2 secs
    secs=$(limit "$3")
    shift 3
    echo "== $name"
    if [ "$secs" -lt 20 ]; then
        rows+=("| $name | skipped: out of time |"); status=1; return
    fi
    run timeout "$secs" env "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^not ok |^# .*(first bad|rel err|did not run|failed|error)|Bail' "$log" | head -40
    tail -n 2 "$log"
    [ $rc -eq 0 ] || status=1
    rows+=("| $name | exit $rc, $(grep -c '^ok ' "$log") ok, $(grep -c '^not ok ' "$log") not ok |")
}
ops "ops attention, wgmma switch off" "$OUT/ops_attn_off.log" 240 TANDEM_CUDA_ATTN_WGMMA=0 \
    "$BIN/test_cuda_ops" "$SEED" "${OPS_FILTER:-attention}"
for m in ${MODES-}; do
    ops "ops pool bf16 bf16 KV, TANDEM_CUDA_ATTN_WGMMA=$m" "$OUT/ops_attn_on$m.log" 90 \
        TANDEM_CUDA_ATTN_WGMMA=$m "$BIN/test_cuda_ops" "$SEED" "pool bf16 bf16 KV"
done

san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$san" ]; then
    IFS='|' read -r -a mfilters <<<"${MEMCHECK_FILTER:-pool wgmma}"
    mi=0
    for mf in "${mfilters[@]}"; do
        mi=$((mi + 1))
        ops "memcheck, cases matching '$mf'" "$OUT/memcheck_wgmma$mi.log" 180 TANDEM_CUDA_ATTN_WGMMA=1 \
            "$san" --tool memcheck --leak-check no --error-exitcode 9 "$BIN/test_cuda_ops" "$SEED" "$mf"
        grep -E '^=========' "$OUT/memcheck_wgmma$mi.log" | head -20
        rows+=("| memcheck summary '$mf' | $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck_wgmma$mi.log" | tail -1) |")
    done
else
    rows+=("| memcheck | not run: no compute-sanitizer |")
fi

echo "== bench_attention.py (BENCH_ONLY_WGMMA=1)"
AB=$(mktemp -d) && mkdir -p "$AB/tests/gpu" && cp "$BIN/bench_attention" "$AB/tests/gpu/"
secs=$(limit 150)
if [ "$secs" -ge 20 ]; then
    BENCH_ONLY_WGMMA=1 timeout "$secs" python3 tests/gpu/bench_attention.py "$AB" "$OUT" >"$OUT/bench_attention.log" 2>&1
    rc=$?
else
    rc="skipped: out of time"; echo "$rc" >"$OUT/bench_attention.log"
fi
[ "$rc" = 0 ] || { status=1; tail -n 15 "$OUT/bench_attention.log"; }
rows+=("| bench_attention | exit $rc |")

# ENGINE_MODES set: the tandem-bench comparison too (see `engine` above)
[ -n "${ENGINE_MODES:-}" ] && engine_step
echo
grep -E '^GPU: |^\| ' "$OUT/bench_attention.log"
print_rows
exit $status
