#!/usr/bin/env bash
# FP8 weights on the GPU, in one device call of about 6 minutes (run from
# anywhere; it works in the repository root):
#   1. the programs: $TANDEM_PREBUILT (tests/gpu/make_prebuilt.sh) when
#      given, else `make CUDA=1 gpu-progs gpu-engine-progs` here; the FP8
#      cuBLASLt probe (tests/gpu/probe_fp8.cu) when nvcc is here to build it;
#   2. checks: test_cuda_ops (its FP8 lines: kn_matmul_w and kn_moe_experts
#      with FP8 weights vs the CPU backend and float64, k = 2880) and
#      test_engine_gpu (its FP8 lines: the fp8 model vs the bf16 model and
#      the CPU's fp8 model on the tiny fixtures, synthetic fp8 on both);
#   3. benchmarks, tandem-bench --synthetic --weights fp8 (random FP8 codes
#      and block scales made on the GPU): gpt-oss-120b (about 122 GB of
#      weights: it fits one H200) and gpt-oss-20b, prefill 8192 and 32768,
#      decode at batch 1, 8, 32, 128 with context 8192 (shapes whose fp32 KV
#      cache does not fit say so and the run goes on), each only while the
#      time budget lasts;
#   4. a short table last.
# Logs go to $OUT (default /tmp/tandem-gpu-fp8). Exit status non-zero if a
# check failed or a benchmark did not run. BUDGET (seconds, default 330)
# bounds the whole run.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-fp8}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SEED=${SEED:-$(date +%s)}
BUDGET=${BUDGET:-330}
status=0
t_start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t_start) )); }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$OUT/gpu.txt"

echo "== programs"
LIBS=""
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
if [ -n "${TANDEM_PREBUILT:-}" ] && [ -x "$TANDEM_PREBUILT/bin/tandem-bench" ]; then
    BIN=$TANDEM_PREBUILT/bin
    LIBS=$(cd "$TANDEM_PREBUILT/lib" && pwd)
    how="prebuilt ($TANDEM_PREBUILT)"
    if run ldd "$BIN/tandem-bench" "$BIN/test_engine_gpu" "$BIN/test_cuda_ops" | grep "not found"; then
        BIN=""
        LIBS=""
    fi
fi
if [ -z "${BIN:-}" ]; then
    how="built here: make CUDA=1 gpu-progs gpu-engine-progs"
    if ! make -j"$(nproc)" CUDA=1 gpu-progs gpu-engine-progs >"$OUT/build.log" 2>&1; then
        tail -n 8 "$OUT/build.log"
        echo "build failed"; exit 1
    fi
    BIN=build-cuda/tests/gpu
    mkdir -p build-cuda/tests/gpu && cp build-cuda/gpu-bin/* "$BIN/"
fi
echo "$how"

probe="not built (no nvcc)"
if [ -x "$BIN/probe_fp8" ] || { command -v nvcc >/dev/null &&
                                 tests/gpu/build_probe_fp8.sh "$OUT/probe_fp8" >"$OUT/probe_build.log" 2>&1; }; then
    P=$BIN/probe_fp8
    [ -x "$P" ] || P=$OUT/probe_fp8
    echo "== probe_fp8 (cuBLASLt block-scaled FP8 vs float64)"
    run timeout 90 "$P" >"$OUT/probe.log" 2>&1
    prc=$?
    grep -E '^(FAIL|SUMMARY|TIME|device)' "$OUT/probe.log"
    probe="$(grep -c '^PASS' "$OUT/probe.log") pass, $(grep -c '^FAIL' "$OUT/probe.log") fail (exit $prc)"
    [ $prc -eq 0 ] || status=1
fi

echo "== test_cuda_ops (seed $SEED)"
run timeout 240 "$BIN/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops.log" 2>&1
[ $? -eq 0 ] || status=1
grep -E '^not ok |fp8' "$OUT/test_cuda_ops.log"
ops="$(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok; fp8: $(grep -c '^ok .*fp8' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok .*fp8' "$OUT/test_cuda_ops.log") not ok"

echo "== test_engine_gpu"
run timeout 240 "$BIN/test_engine_gpu" 0 >"$OUT/test_engine_gpu.log" 2>&1
[ $? -eq 0 ] || status=1
grep -E '^not ok |fp8' "$OUT/test_engine_gpu.log"
eng="$(grep -c '^ok ' "$OUT/test_engine_gpu.log") ok, $(grep -c '^not ok ' "$OUT/test_engine_gpu.log") not ok; fp8: $(grep -c '^ok .*fp8' "$OUT/test_engine_gpu.log") ok, $(grep -c '^not ok .*fp8' "$OUT/test_engine_gpu.log") not ok"

bench() {   # NAME MAX_SECONDS ARGS...
    local name=$1 limit=$2
    shift 2
    local l
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        echo "== bench $name: skipped (time budget spent)"
        echo "skipped: time budget" >"$OUT/bench_$name.log"
        return
    fi
    echo "== bench $name (${limit} s at most): tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda --weights fp8 "$@" >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
bench oss120b_8k 110 --synthetic $C/gpt-oss-120b.json --prefill 8192 --batch 1,8,32,128 \
    --context 8192 --steps 8 --repeat 3 --profile --peak-tflops 789.8 --hbm-tbps 4.229
bench oss20b_8k 70 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch 1,8,32,128 \
    --context 8192 --steps 8 --repeat 3 --profile --peak-tflops 789.8 --hbm-tbps 4.229
bench oss120b_32k 60 --synthetic $C/gpt-oss-120b.json --prefill 32768 --batch none --repeat 2 --profile --peak-tflops 789.8
bench oss20b_32k 45 --synthetic $C/gpt-oss-20b.json --prefill 32768 --batch none --repeat 2 --peak-tflops 789.8

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| programs | $how |"
echo "| probe_fp8 | $probe |"
echo "| test_cuda_ops (seed $SEED) | $ops |"
echo "| test_engine_gpu | $eng |"
for f in "$OUT"/bench_*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/bench_//')
    grep -E 'weights ready|did not fit|skipped' "$f" | sed "s|^|$n |"
    grep -E '^(prefill|decode) ' "$f" | sed "s|^|$n |"
done
exit $status
