#!/usr/bin/env bash
# The CUDA MoE expert paths in one device call (about 2-3 minutes on an
# H200; run from anywhere, it works in the repository root). Builds nothing:
# the programs come from tests/gpu/make_prebuilt.sh DEST, given as
# $TANDEM_PREBUILT=DEST.
#   1. test_cuda_ops: every CUDA op vs the CPU backend, including both
#      bf16 expert paths (grouped kernel and per-expert cuBLAS, forced) on
#      GPT-OSS-20B and Qwen3-30B-A3B shapes, EP shards, k = 1..8, skewed
#      routes, odd sizes, no tokens;
#   2. bench_moe: kn_moe_experts alone, prefill 8192 and decode 1/8/32/128,
#      both paths, median of CUDA-event-timed calls next to the bytes/FLOPs
#      floor;
#   3. test_engine_gpu (the tiny fixtures' logits and tokens on the GPU vs
#      HF and the CPU, through the default path choice), then
#      tandem-bench --synthetic gpt-oss-20b: prefill 8192 and decode with
#      the default path choice, with --profile (the "MoE experts" group),
#      and decode again with TANDEM_CUDA_MOE_GROUPED=0 (the old per-expert
#      path) for the same-run comparison; Qwen3-30B-A3B decode if time;
#   4. compute-sanitizer memcheck on the expert cases if time is left;
#   5. a short summary last. Logs go to $OUT.
# Exit status non-zero when a check failed or a step did not run.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-moe}
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.used \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
run ldd "$BIN/test_cuda_ops" "$BIN/bench_moe" "$BIN/tandem-bench" "$BIN/test_engine_gpu" | grep "not found"

echo "== test_cuda_ops (seed $SEED)"
run timeout 300 "$BIN/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
grep -E '^not ok |Bail' "$OUT/test_cuda_ops.log"
tail -n 2 "$OUT/test_cuda_ops.log"
ops="exit $rc, $(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok"
moe_ok="$(grep -cE '^ok .*moe_experts bf16 (gpt-oss|qwen3|dim)' "$OUT/test_cuda_ops.log") ok, $(grep -cE '^not ok .*(moe_experts bf16 (gpt-oss|qwen3|dim)|kn_moe_experts)' "$OUT/test_cuda_ops.log") not ok"
worst=$(grep -E '^(not )?ok .*moe_experts bf16 (gpt-oss|qwen3|dim).*grouped path vs CPU' "$OUT/test_cuda_ops.log" |
        sed -n 's/.*rel err \([0-9.e+-]*\) .*/\1/p' | sort -g | tail -1)

echo "== bench_moe (kn_moe_experts alone)"
run timeout 60 "$BIN/bench_moe" --bf16-only --hbm-tbps "$HBM" --peak-tflops "$PEAK" 2>&1 | tee "$OUT/bench_moe.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench_moe failed"; status=1; }

echo "== test_engine_gpu (tiny HF fixtures on the GPU: logits and tokens vs HF and the CPU)"
run timeout 120 "$BIN/test_engine_gpu" 0 >"$OUT/test_engine_gpu.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
grep -E '^not ok |Bail' "$OUT/test_engine_gpu.log"
eng="exit $rc, $(grep -c '^ok ' "$OUT/test_engine_gpu.log") ok, $(grep -c '^not ok ' "$OUT/test_engine_gpu.log") not ok"

bench() {   # NAME TIMEOUT ARGS...
    local name=$1 limit=$2
    shift 2
    echo "== bench $name: tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda --peak-tflops "$PEAK" --hbm-tbps "$HBM" "$@" \
        >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
bench oss20b 120 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch 1,8,32,128 --context 8192 \
    --steps 16 --repeat 3 --profile
if [ "$(elapsed)" -lt 150 ]; then
    TANDEM_CUDA_MOE_GROUPED=0 bench oss20b_pergemm 60 --synthetic $C/gpt-oss-20b.json --prefill none \
        --batch 1,32 --context 8192 --steps 16 --repeat 3
fi

if [ "$(elapsed)" -lt 165 ]; then
    bench qwen30b 60 --synthetic $C/qwen3-30b-a3b.json --prefill none --batch 1,32 --context 8192 \
        --steps 16 --repeat 3 --profile
fi

san="not run (time)"
if [ "$(elapsed)" -lt 170 ] && command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (test_cuda_ops, expert cases only)"
    run timeout 60 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
        "$BIN/test_cuda_ops" "$SEED" moe >"$OUT/memcheck.log" 2>&1
    rc=$?
    san="exit $rc, $(grep -c '^ok ' "$OUT/memcheck.log") ok / $(grep -c '^not ok ' "$OUT/memcheck.log") not ok, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck.log" | tail -1)"
    [ "$rc" -eq 124 ] && san="timed out after 60 s ($san)"
    [ "$rc" -eq 9 ] && status=1
    tail -n 3 "$OUT/memcheck.log"
fi

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(elapsed) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| test_cuda_ops (seed $SEED) | $ops |"
echo "| of which the two expert paths | $moe_ok; worst grouped-vs-CPU rel err $worst (bound 3.9e-3) |"
echo "| test_engine_gpu | $eng |"
echo "| compute-sanitizer memcheck, expert cases | $san |"
for f in "$OUT"/bench_oss20b*.log "$OUT"/bench_qwen30b.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/bench_//')
    grep -E '^(prefill|decode) ' "$f" | sed "s#^#| $n: #; s#\$# |#"
    grep -E '^# (profile|  +(MoE experts|total))' "$f" | sed "s|^# profile, |# |" | sed "s#^#| $n: #; s#\$# |#"
done
echo
grep -E '^\| ' "$OUT/bench_moe.log"
exit $status
