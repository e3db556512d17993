#!/usr/bin/env bash
# The whole GPU batch in one device call (about 8 minutes on an H200): every
# check first, then the benchmarks the docs/PERF.md tables come from, then a
# short table. Builds nothing: the programs come from
#   TANDEM_PREBUILT=DEST          tests/gpu/make_prebuilt.sh DEST
#   TANDEM_PREBUILT_CLUSTER=DEST2 tests/gpu/make_prebuilt_cluster.sh DEST2
# Checks:
#   1. test_cuda_ops SEED          every CUDA op vs the CPU backend / float64
#   2. test_cuda_ops SEED moe-fp8  the FP8 expert paths (grouped and per-expert)
#   3. test_engine_gpu             the HF fixtures on the GPU (f32, bf16, fp8)
#   4. run_nccl.sh                 issue 6: NCCL at world size 1
#   5. run_cluster.sh              router + prefiller + decoder on --device cuda
# Benchmarks (random weights of the real configs, made on the GPU):
#   6. bench_moe                   the expert paths alone, bf16 and FP8; and
#                                  --varying-m: cublasGemmEx vs the cuBLASLt
#                                  plan cache under fresh per-expert row counts
#   7. tandem-bench                gpt-oss-20b bf16 and FP8, gpt-oss-120b FP8:
#                                  prefill 8192 / 32768, decode batch
#                                  1/8/32/128 at context 8192, with profiles
# Ceilings are the ones measured through torch earlier the same day
# (bf16 GEMM 789.8 TFLOP/s, device copy 4.229 TB/s; docs/PERF.md); override
# with PEAK_TFLOPS / HBM_TBPS. Logs go to $OUT. Exit status non-zero when a
# check failed or a benchmark did not run.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-all}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
SEED=${SEED:-$(date +%s)}
PEAK=${PEAK_TFLOPS:-789.8}
HBM=${HBM_TBPS:-4.229}
BUDGET=${BUDGET_S:-530}
P=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a make_prebuilt.sh folder}
BIN=$(cd "$P/bin" && pwd)
LIBS=$(cd "$P/lib" && pwd)
t_start=$(date +%s)
status=0
rows=()
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
left() { echo $(( BUDGET - ($(date +%s) - t_start) )); }
tap_counts() { echo "$(grep -c '^ok ' "$1") ok, $(grep -c '^not ok ' "$1") not ok"; }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total,memory.used \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
echo "seed $SEED, tree $(cat COMMIT 2>/dev/null || echo unknown)"

check() {   # NAME TIMEOUT LOG CMD...
    local name=$1 limit=$2 log=$3
    shift 3
    echo "== $name"
    run timeout "$limit" "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^not ok |Bail' "$log" | head -20
    tail -n 2 "$log"
    [ $rc -eq 0 ] || status=1
    rows+=("| $name | exit $rc, $(tap_counts "$log") |")
}
check "test_cuda_ops (seed $SEED)" 240 "$OUT/test_cuda_ops.log" "$BIN/test_cuda_ops" "$SEED"
check "test_cuda_ops moe-fp8 (seed $SEED)" 200 "$OUT/test_cuda_ops_fp8.log" \
    "$BIN/test_cuda_ops" "$SEED" moe-fp8
check "test_engine_gpu" 150 "$OUT/test_engine_gpu.log" "$BIN/test_engine_gpu" 0

echo "== run_nccl.sh"
OUT="$OUT/nccl" TANDEM_PREBUILT="$P" timeout 90 bash tests/gpu/run_nccl.sh >"$OUT/nccl.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
tail -n 6 "$OUT/nccl.txt"
rows+=("| run_nccl.sh | exit $rc, $(grep -c '^ok ' "$OUT/nccl.txt") ok, $(grep -c '^not ok ' "$OUT/nccl.txt") not ok; $(tail -n 1 "$OUT/nccl.txt") |")

if [ -n "${TANDEM_PREBUILT_CLUSTER:-}" ]; then
    echo "== run_cluster.sh"
    OUT="$OUT/cluster" TANDEM_PREBUILT="$TANDEM_PREBUILT_CLUSTER" timeout 120 \
        bash tests/gpu/run_cluster.sh >"$OUT/cluster.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    tail -n 4 "$OUT/cluster.txt"
    rows+=("| run_cluster.sh | exit $rc, $(grep -c '^ok ' "$OUT/cluster.txt") ok, $(grep -c '^not ok ' "$OUT/cluster.txt") not ok |")
fi

echo "== bench_moe"
run timeout 170 "$BIN/bench_moe" --hbm-tbps "$HBM" --peak-tflops "$PEAK" >"$OUT/bench_moe.log" 2>&1 ||
    { echo "bench_moe: exit $?"; status=1; }
echo "== bench_moe --varying-m (cublasGemmEx vs cached cuBLASLt plans, fresh row counts)"
run timeout 90 "$BIN/bench_moe" --varying-m >"$OUT/bench_moe_varying_m.log" 2>&1 ||
    { echo "bench_moe --varying-m: exit $?"; status=1; }
grep -E '^\| ' "$OUT/bench_moe_varying_m.log"

bench() {   # NAME MAX_SECONDS ARGS...
    local name=$1 limit=$2 l
    shift 2
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        echo "== bench $name: skipped (time budget spent)"
        rows+=("| bench $name | skipped: time budget |")
        return
    fi
    echo "== bench $name (${limit} s at most): tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda --peak-tflops "$PEAK" --hbm-tbps "$HBM" \
        "$@" >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    grep -E '^(prefill|decode) |^# (tandem-bench|prefill runs)' "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
bench oss20b_fp8 90 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192,32768 \
    --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
bench oss120b_fp8 110 --synthetic $C/gpt-oss-120b.json --weights fp8 --prefill 8192,32768 \
    --batch 1,8 --context 8192 --steps 8 --repeat 3 --profile
bench oss20b_bf16 90 --synthetic $C/gpt-oss-20b.json --weights bf16 --prefill 8192,32768 \
    --batch 1,8,32,128 --context 8192 --steps 8 --repeat 5 --profile
TANDEM_CUDA_MOE_GROUPED=0 bench oss20b_fp8_pergemm 45 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none \
    --batch 1,32 --context 8192 --steps 8 --repeat 3

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
for f in "$OUT"/bench_oss*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/^bench_//')
    grep -E '^(prefill|decode) ' "$f" | sed "s#^#| $n: #; s#\$# |#"
done
grep -E '^\| ' "$OUT/bench_moe.log"
exit $status
