#!/usr/bin/env bash
# The bf16 GEMMs through cuBLASLt with cached plans (kernels/cuda/
# gemm_bf16_lt.cu, lt_plan_cache.cu) in one device call of about 3
# minutes (run from anywhere; it works in the repository root). Builds
# nothing: the programs come from tests/gpu/make_prebuilt.sh DEST, given as
# $TANDEM_PREBUILT=DEST.
#   1. test_cuda_ops: every CUDA op vs the CPU, including the new series of
#      many row counts through one backend (odd m 1..299, bucket edges
#      16/17/31/32/33/1023/1024/1025, both bf16 GEMM paths) and the
#      per-expert MoE path with fresh routes for 13 token counts (1 and 4
#      streams); the FP8 lines check the shared plan cache from gemm_fp8.cu;
#   2. bench_moe --varying-m: 24-layer forwards of per-expert GEMMs with
#      fresh row counts, cublasGemmEx vs cached cuBLASLt plans, host wall;
#   3. the measurement that started it: tandem-bench --synthetic
#      gpt-oss-20b --prefill 8192 --repeat 5 --profile with
#      TANDEM_CUDA_LT_CACHE=0 (cublasGemmEx) and with the default;
#   4. a short summary last. Logs go to $OUT (default /tmp/tandem-gpu-lt).
# Exit status non-zero when a check failed or a step did not run.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-lt}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SEED=${SEED:-$(date +%s)}
status=0
t_start=$(date +%s)
P=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a make_prebuilt.sh folder}
BIN=$(cd "$P/bin" && pwd)
LIBS=$(cd "$P/lib" && pwd)
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
elapsed() { echo $(( $(date +%s) - t_start )); }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$OUT/gpu.txt"
run ldd "$BIN/test_cuda_ops" "$BIN/bench_moe" "$BIN/tandem-bench" | grep "not found"

echo "== test_cuda_ops (seed $SEED)"
run timeout 240 "$BIN/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
grep -E '^not ok |Bail' "$OUT/test_cuda_ops.log"
grep -E 'row counts|via |^# matmul_w bf16' "$OUT/test_cuda_ops.log"
tail -n 2 "$OUT/test_cuda_ops.log"
ops="exit $rc, $(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok"
rows="$(grep -cE '^ok .*(row counts|via )' "$OUT/test_cuda_ops.log") ok, $(grep -cE '^not ok .*(row counts|via )' "$OUT/test_cuda_ops.log") not ok"
fp8="$(grep -cE '^ok .*fp8' "$OUT/test_cuda_ops.log") ok, $(grep -cE '^not ok .*fp8' "$OUT/test_cuda_ops.log") not ok"

echo "== bench_moe --varying-m"
run timeout 150 "$BIN/bench_moe" --varying-m 2>&1 | tee "$OUT/bench_varying_m.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench_moe --varying-m failed"; status=1; }

bench() {   # NAME TIMEOUT ARGS... (environment from the caller)
    local name=$1 limit=$2
    shift 2
    echo "== bench $name: tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda "$@" >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
TANDEM_CUDA_LT_CACHE=0 bench oss20b_gemmex 150 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch none \
    --repeat 5 --profile
bench oss20b_lt 150 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch none --repeat 5 --profile

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(elapsed) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| test_cuda_ops (seed $SEED) | $ops |"
echo "| of which the row-count series | $rows |"
echo "| of which FP8 (shared plan cache) | $fp8 |"
for f in "$OUT"/bench_oss20b_gemmex.log "$OUT"/bench_oss20b_lt.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/bench_//')
    grep -E '^# prefill runs|^prefill |^#   (MoE experts|total) |wall time' "$f" | sed "s#^#| $n: #; s#\$# |#"
done
echo
grep -E '^\| ' "$OUT/bench_varying_m.log"
exit $status
