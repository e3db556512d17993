#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU (the device
# machine, or `make bench-gpu` anywhere with CUDA):
#   1. builds the GPU programs with CUDA=1 (kernels + tests/gpu/*.c);
#   2. runs test_cuda_ops: every CUDA op against the CPU backend and float64
#      (TAP), again with TF32 products allowed, and under compute-sanitizer
#      memcheck;
#   3. runs the attention benchmark next to torch SDPA, and the dense ops'
#      (matmul, MoE experts, RMSNorm) on GPT-OSS-20B prefill shapes;
#   4. prints a short table last;
#   5. with ENGINE=1 (the default), then runs tests/gpu/run_engine.sh: the
#      engine's checks on the GPU (the tiny HF fixtures' logits and tokens,
#      CPU vs GPU) and, with ENGINE_BENCH=1, the model benchmarks
#      (tandem-bench --synthetic on GPT-OSS-20B and Qwen3-30B-A3B shapes).
#      ENGINE=0 skips it; run_engine.sh alone skips this kernel suite.
# Full logs go to $OUT (default /tmp/tandem-gpu). Exit status: non-zero if
# the build or any check failed.
#
# When the machine cannot build (no BLAS headers, say), a bundle of the same
# programs built elsewhere with `make CUDA=1 gpu-progs` can be given as
# $TANDEM_GPU_PREBUILT (a .tgz holding test_cuda_ops and bench_attention);
# the summary says which was used.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
BUILD=${BUILD_GPU:-build-cuda}
SEED=${SEED:-$(date +%s)}
status=0

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
nvcc --version | tail -1

echo "== build (make CUDA=1 gpu-progs)"
build_how="device: make CUDA=1 gpu-progs"
if ! make -j"$(nproc)" CUDA=1 BUILD="$BUILD" gpu-progs >"$OUT/build.log" 2>&1; then
    tail -n 5 "$OUT/build.log"
    if [ -n "${TANDEM_GPU_PREBUILT:-}" ] && [ -f "$TANDEM_GPU_PREBUILT" ]; then
        mkdir -p "$BUILD/tests/gpu" && tar xzf "$TANDEM_GPU_PREBUILT" -C "$BUILD/tests/gpu" || exit 1
        build_how="prebuilt bundle (device build failed, see build.log)"
        [ -d "$BUILD/tests/gpu/lib" ] && export LD_LIBRARY_PATH="$PWD/$BUILD/tests/gpu/lib:${LD_LIBRARY_PATH:-}"
    else
        echo "build failed and no prebuilt bundle"; exit 1
    fi
fi
echo "$build_how"

echo "== test_cuda_ops (seed $SEED)"
"$BUILD/tests/gpu/test_cuda_ops" "$SEED" 2>&1 | tee "$OUT/test_cuda_ops.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
n_ok=$(grep -c '^ok ' "$OUT/test_cuda_ops.log")
n_bad=$(grep -c '^not ok ' "$OUT/test_cuda_ops.log")

echo "== test_cuda_ops with TANDEM_CUDA_TF32=1 (cuBLAS TF32 products, bound 2e-3)"
TANDEM_CUDA_TF32=1 "$BUILD/tests/gpu/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops_tf32.log" 2>&1
[ $? -eq 0 ] || status=1
tf32_ok=$(grep -c '^ok ' "$OUT/test_cuda_ops_tf32.log")
tf32_bad=$(grep -c '^not ok ' "$OUT/test_cuda_ops_tf32.log")
grep -E '^not ok |matmul m=300' "$OUT/test_cuda_ops_tf32.log"

san="not run"
if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck"
    timeout 180 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
        "$BUILD/tests/gpu/test_cuda_ops" "$SEED" >"$OUT/memcheck.log" 2>&1
    rc=$?
    san="exit $rc, $(grep -c '^ok ' "$OUT/memcheck.log") ok / $(grep -c '^not ok ' "$OUT/memcheck.log") not ok, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck.log" | tail -1)"
    [ "$rc" -eq 124 ] && san="timed out after 180 s ($san)"
    [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || status=1
    tail -n 3 "$OUT/memcheck.log"
fi

echo "== attention benchmark"
python3 tests/gpu/bench_attention.py "$BUILD" "$OUT" 2>&1 | tee "$OUT/bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== dense ops benchmark"
"$BUILD/tests/gpu/bench_ops" 2>&1 | tee "$OUT/bench_ops.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(head -2 "$OUT/gpu.txt" | tail -1 | cut -d, -f1))"
echo "| step | result |"
echo "| --- | --- |"
echo "| build | $build_how |"
echo "| test_cuda_ops (seed $SEED) | $n_ok ok, $n_bad not ok |"
echo "| test_cuda_ops, TANDEM_CUDA_TF32=1 | $tf32_ok ok, $tf32_bad not ok |"
echo "| compute-sanitizer memcheck | $san |"
grep -E '^GPU: ' "$OUT/bench.log"
grep -E '^\| ' "$OUT/bench.log"
echo
grep -E '^\| ' "$OUT/bench_ops.log"

if [ "${ENGINE:-1}" = 1 ]; then
    echo
    echo "== engine (tests/gpu/run_engine.sh, ENGINE_BENCH=${ENGINE_BENCH:-0})"
    OUT="$OUT/engine" BENCH="${ENGINE_BENCH:-0}" SEED="$SEED" bash tests/gpu/run_engine.sh || status=1
fi
exit $status
