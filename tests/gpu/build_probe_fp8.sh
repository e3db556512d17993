#!/usr/bin/env bash
# Builds tests/gpu/probe_fp8.cu (the FP8 cuBLASLt probe) into $1 (default
# build/probe_fp8) from the real kernels, without a GPU: nvcc for the .cu,
# cc for the host C it needs. Runs on the GPU machine with only the CUDA 13
# libraries (rpath /usr/local/cuda/lib64).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build/probe_fp8}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
for f in common/status.c kernels/kn_check.c kernels/dtype.c kernels/fp8.c; do
    cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -c "$f" -o "$TMP/$(basename "$f" .c).o"
done
for f in kernels/cuda/backend.cu kernels/cuda/gemm_fp8.cu kernels/cuda/lt_plan_cache.cu kernels/cuda/quant_fp8.cu \
         kernels/cuda/moe_experts.cu kernels/cuda/moe_grouped_fp8.cu kernels/cuda/matmul.cu kernels/cuda/gemm_bf16_lt.cu \
         tests/gpu/probe_fp8.cu; do
    "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra,-Werror \
        -I. -c "$f" -o "$TMP/$(basename "$f" .cu).o"
done
mkdir -p "$(dirname "$OUT")"
"$NVCC" -gencode=arch=compute_90a,code=sm_90a "$TMP"/*.o -o "$OUT" \
    -L/usr/local/cuda/lib64 -Xlinker -rpath,/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudart -lm
echo "built $OUT"
