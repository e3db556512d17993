#!/usr/bin/env bash
# The grouped FP8 expert GEMMs (kernels/cuda/moe_gemm_fp8.cu) on the GPU, in
# one call that builds nothing there. Steps (arguments; default all five):
#   ops       test_cuda_ops SEED moe_paths/fp8: the FP8 expert paths on
#             GPT-OSS-20B, Qwen3-30B-A3B and an odd shape (dim 200, inter
#             130), the default batches, every CUDA path vs the CPU backend:
#             per-expert cuBLASLt, the decode kernels, the grouped GEMMs on
#             mma.sync, on wgmma and on the warp-specialised TMA + wgmma
#             kernel (moe_gemm_fp8_ws.cu), and each GEMM's two products paired with
#             the decode kernel's other one (so a failure names the
#             product); the GEMM modes run with the temporaries poisoned
#             (NaN). A failure prints its first wrong (token, column)s.
#   ops-all   test_cuda_ops SEED moe-fp8: every FP8 batch (experts of 200 and
#             300 rows, Qwen3 with 600 tokens: many tiles per block)
#   memcheck  compute-sanitizer memcheck on moe_paths/fp8
#   bench     bench_moe --fp8-only (per-expert, grouped decode kernels, the
#             grouped GEMMs on mma.sync, wgmma and warp-specialised; ms and
#             TFLOP/s) and
#             bench_moe_peer.py (torch._grouped_mm on the same shapes)
#   engine    tandem-bench --synthetic FP8 prefill 8192 with --profile on
#             GPT-OSS-20B, GPT-OSS-120B and Qwen3-30B-A3B, once per
#             TANDEM_CUDA_MOE_FP8_GEMM value in ENGINE_MODES (default
#             "0 4 7": per-expert cuBLASLt, GEMMs on wgmma, on the
#             warp-specialised kernel; 1 is mma.sync);
#             ENGINE_MODELS (default "oss20b qwen30b oss120b") picks models
#   engine-check  test_engine_gpu (the HF fixtures' logits and tokens on the
#             GPU) once per TANDEM_CUDA_MOE_FP8_GEMM value in CHECK_MODES
#             (default "7"; s5run3 passed 4, run.sh engine covers 1)
# A short table is printed last.
#
# Usage: TANDEM_PREBUILT=DIR|DIR.tar.xz [SEED=n] [OUT=dir]
#        bash tests/gpu/moe_gemm_check.sh [STEP ...]
# DIR is made by tests/gpu/make_prebuilt.sh on a machine with nvcc.
# BUDGET_S (default 560) bounds the whole run: each step's timeout is cut to
# what is left, and a step with under 20 s left is skipped and says so.
# Exit status non-zero when a step failed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
. tests/gpu/check_lib.sh

# tap NAME LOG SECONDS CMD...: a TAP program under timeout; its counts make
# a row, its failures (and the mismatch lines under them) are printed
tap() {
    local name=$1 log=$2 secs
    secs=$(limit "$3")
    shift 3
    echo "== $name"
    if [ "$secs" -lt 20 ]; then
        rows+=("| $name | skipped: out of time |"); status=1; return
    fi
    run timeout "$secs" "$@" >"$log" 2>&1
    local rc=$?
    local ok bad
    ok=$(grep -c '^ok ' "$log"); bad=$(grep -c '^not ok ' "$log")
    grep -A6 '^not ok ' "$log" | head -60
    tail -3 "$log"
    [ $rc -eq 0 ] && [ "$bad" -eq 0 ] || status=1
    rows+=("| $name | exit $rc, $ok ok, $bad not ok |")
}

engine() {
    local C=tests/fixtures/configs
    for model in ${ENGINE_MODELS:-oss20b qwen30b oss120b}; do
        case $model in
        oss20b) cfg=$C/gpt-oss-20b.json ;;
        oss120b) cfg=$C/gpt-oss-120b.json ;;
        qwen30b) cfg=$C/qwen3-30b-a3b.json ;;
        *) echo "unknown model $model"; status=1; continue ;;
        esac
        for m in ${ENGINE_MODES:-0 4 7}; do
            secs=$(limit 120)
            [ "$secs" -ge 30 ] || { rows+=("| tandem-bench $model mode $m | skipped: out of time |"); continue; }
            echo "== tandem-bench $model FP8 prefill 8192, TANDEM_CUDA_MOE_FP8_GEMM=$m"
            log="$OUT/engine_${model}_moegemm$m.log"
            run timeout "$secs" env TANDEM_CUDA_MOE_FP8_GEMM=$m "$BIN/tandem-bench" --device cuda --synthetic "$cfg" \
                --weights fp8 --prefill 8192 --batch none --repeat 3 --profile >"$log" 2>&1
            rc=$?
            grep -E '^prefill ' "$log"
            sed -n '/^# profile/,/wall time/p' "$log" | head -24
            [ $rc -eq 0 ] || status=1
            rows+=("| tandem-bench $model fp8 prefill 8192, TANDEM_CUDA_MOE_FP8_GEMM=$m | exit $rc; $(grep -E \
                '^prefill ' "$log" | tr -s ' ' | tr '\n' ';') |")
        done
    done
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ops ops-all memcheck bench engine)
for s in "${steps[@]}"; do
    case "$s" in
    ops) tap "test_cuda_ops $SEED moe_paths/fp8" "$OUT/moe_gemm_ops.log" 240 "$BIN/test_cuda_ops" "$SEED" \
             moe_paths/fp8 ;;
    ops-all) tap "test_cuda_ops $SEED moe-fp8" "$OUT/moe_gemm_ops_all.log" 300 "$BIN/test_cuda_ops" "$SEED" moe-fp8 ;;
    memcheck)
        san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
              /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
        if [ -n "$san" ]; then
            tap "memcheck moe_paths/fp8" "$OUT/moe_gemm_memcheck.log" 240 "$san" --tool memcheck --leak-check no \
                --error-exitcode 9 "$BIN/test_cuda_ops" "$SEED" moe_paths/fp8
            grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/moe_gemm_memcheck.log" | tail -1
        else
            rows+=("| memcheck | skipped: no compute-sanitizer |")
        fi ;;
    bench)
        secs=$(limit 200)
        echo "== bench_moe --fp8-only"
        run timeout "$secs" "$BIN/bench_moe" --fp8-only >"$OUT/bench_moe_fp8.log" 2>&1
        rc=$?
        grep -E '^\| ' "$OUT/bench_moe_fp8.log"
        [ $rc -eq 0 ] || status=1
        rows+=("| bench_moe --fp8-only | exit $rc |")
        secs=$(limit 90)
        echo "== torch grouped_mm peer"
        timeout "$secs" python3 tests/gpu/bench_moe_peer.py "$OUT" >"$OUT/bench_moe_peer.log" 2>&1
        rc=$?
        grep -E '^\| |^torch ' "$OUT/bench_moe_peer.log"
        rows+=("| bench_moe_peer.py | exit $rc |") ;;
    engine) engine ;;
    engine-check)
        for m in ${CHECK_MODES:-7}; do
            tap "test_engine_gpu, TANDEM_CUDA_MOE_FP8_GEMM=$m" "$OUT/moe_gemm_engine$m.log" 240 \
                env TANDEM_CUDA_MOE_FP8_GEMM=$m "$BIN/test_engine_gpu" 0
        done ;;
    *) echo "unknown step $s (see --help)"; status=1 ;;
    esac
done

echo
echo "| step | result |"
echo "| --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
exit $status
