#!/usr/bin/env bash
# The FP8 grouped MoE expert kernels (kernels/cuda/moe_grouped_fp8.cu) in
# one device call of about 4-5 minutes on an H200. Builds nothing: the
# programs come from tests/gpu/make_prebuilt.sh DEST, given as
# $TANDEM_PREBUILT=DEST. Run from anywhere (it works in the repository root).
#   1. test_cuda_ops SEED moe-fp8: both FP8 expert paths (grouped kernels
#      and per-expert cuBLASLt, forced) vs the CPU backend and each other on
#      GPT-OSS-20B (2880: padded rows/scales) and Qwen3-30B-A3B shapes and a
#      200/130 one; 0-300 tokens, k 1..8, skewed routes, EP shards, output
#      poisoned with NaN;
#   2. bench_moe --fp8-only: kn_moe_experts alone, decode 1/8/32/128, 512
#      and prefill 8192, grouped vs per-expert, weight GB/s and x floor;
#   3. tandem-bench --weights fp8 --synthetic: GPT-OSS-20B decode 1/8/32 at
#      context 8192 with the default path choice (grouped for decode) and
#      with TANDEM_CUDA_MOE_GROUPED=0 (the per-expert path, before this
#      change), --profile for the "MoE experts" group; GPT-OSS-120B decode 1/8/32;
#   4. compute-sanitizer memcheck of step 1 if time is left;
#   5. a summary last. Logs go to $OUT. Exit status non-zero when a check failed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-moe-fp8}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SEED=${SEED:-$(date +%s)}
HBM=${HBM_TBPS:-4.229}
PEAK=${PEAK_TFLOPS:-789.8}
status=0
t_start=$(date +%s)
P=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a make_prebuilt.sh folder}
BIN=$(cd "$P/bin" && pwd)
LIBS=$(cd "$P/lib" && pwd)
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
elapsed() { echo $(( $(date +%s) - t_start )); }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total,memory.used --format=csv 2>&1 | tee "$OUT/gpu.txt"

echo "== test_cuda_ops $SEED moe-fp8 (FP8 expert paths)"
run timeout 200 "$BIN/test_cuda_ops" "$SEED" moe-fp8 >"$OUT/test_cuda_ops.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
grep -E '^not ok |Bail' "$OUT/test_cuda_ops.log"
tail -n 2 "$OUT/test_cuda_ops.log"
ops="exit $rc, $(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok"
worst() { grep -E "^(not )?ok .*moe_experts fp8 .*$1" "$OUT/test_cuda_ops.log" |
          sed -n 's/.*rel err \([0-9.e+-]*\) .*/\1/p' | sort -g | tail -1; }
w_gc=$(worst 'grouped path vs CPU')
w_pc=$(worst 'per-expert path vs CPU')
w_gp=$(worst 'grouped vs per-expert')

echo "== bench_moe --fp8-only (kn_moe_experts alone)"
run timeout 150 "$BIN/bench_moe" --fp8-only --hbm-tbps "$HBM" --peak-tflops "$PEAK" 2>&1 | tee "$OUT/bench_moe.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench_moe failed"; status=1; }

bench() {   # NAME TIMEOUT ARGS...
    local name=$1 limit=$2
    shift 2
    echo "== bench $name: tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda --weights fp8 --peak-tflops "$PEAK" --hbm-tbps "$HBM" \
        "$@" >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
bench oss20b_grouped 70 --synthetic $C/gpt-oss-20b.json --prefill none --batch 1,8,32 --context 8192 \
    --steps 16 --repeat 3 --profile
TANDEM_CUDA_MOE_GROUPED=0 bench oss20b_pergemm 70 --synthetic $C/gpt-oss-20b.json --prefill none \
    --batch 1,8,32 --context 8192 --steps 16 --repeat 3
if [ "$(elapsed)" -lt 330 ]; then
    bench oss120b_grouped 100 --synthetic $C/gpt-oss-120b.json --prefill none --batch 1,8,32 --context 8192 \
        --steps 16 --repeat 3 --profile
fi

san="not run (time)"
if [ "$(elapsed)" -lt 420 ] && command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (test_cuda_ops moe-fp8)"
    run timeout 120 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
        "$BIN/test_cuda_ops" "$SEED" moe-fp8 >"$OUT/memcheck.log" 2>&1
    rc=$?
    san="exit $rc, $(grep -c '^ok ' "$OUT/memcheck.log") ok / $(grep -c '^not ok ' "$OUT/memcheck.log") not ok, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck.log" | tail -1)"
    [ "$rc" -eq 124 ] && san="timed out after 120 s ($san)"
    [ "$rc" -eq 9 ] && status=1
    tail -n 3 "$OUT/memcheck.log"
fi

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(elapsed) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| test_cuda_ops moe-fp8 (seed $SEED) | $ops |"
echo "| worst rel err (bound 2e-2) | grouped vs CPU $w_gc; per-expert vs CPU $w_pc; grouped vs per-expert $w_gp |"
echo "| compute-sanitizer memcheck, FP8 expert cases | $san |"
for f in "$OUT"/bench_oss*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/bench_//')
    grep -E '^(prefill|decode) ' "$f" | sed "s#^#| $n: #; s#\$# |#"
    grep -E '^# (profile|  +(MoE experts|total))' "$f" | sed "s|^# profile, |# |" | sed "s#^#| $n: #; s#\$# |#"
done
echo
grep -E '^\| ' "$OUT/bench_moe.log"
exit $status
