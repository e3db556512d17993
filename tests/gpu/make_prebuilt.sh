#!/usr/bin/env bash
# Builds the GPU programs the engine's device run needs (test_cuda_ops,
# test_engine_gpu, the GPU tandem-bench and tandem-generate; test_comm_nccl
# and test_parallel_nccl for tests/gpu/run.sh nccl, test_rank_groups_gpu for
# run.sh ranks, bench_comm for run.sh bench-comm) on a machine with nvcc
# (and nccl.h) but maybe no GPU, into a folder that runs on the GPU machine
# without building there:
#   DEST/bin/  the programs (stripped)
#   DEST/lib/  the non-system libraries they load: cJSON, OpenBLAS and the
#              gfortran runtime OpenBLAS needs, cmocka (test_comm_nccl)
# The GPU machine then needs only glibc, libstdc++/libgomp and the CUDA 13
# libraries in /usr/local/cuda/lib64 (rpath). tests/gpu/run.sh takes DEST as
# $TANDEM_PREBUILT. Usage: tests/gpu/make_prebuilt.sh DEST
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:?usage: make_prebuilt.sh DEST}
BUILD=build-prebuilt
PROGS="tests/gpu/test_cuda_ops tests/gpu/test_engine_gpu tests/gpu/bench_attention tests/gpu/bench_moe tests/gpu/bench_ops gpu-bin/tandem-bench
       gpu-bin/tandem-generate tests/test_comm_nccl tests/gpu/test_parallel_nccl
       tests/gpu/test_rank_groups_gpu tests/gpu/bench_comm"
# A clean tree: the .cu objects do not track header changes.
rm -rf "$BUILD"
mkdir -p "$BUILD"
make -j2 CUDA=1 BUILD="$BUILD" $(for p in $PROGS; do echo "$BUILD/$p"; done) \
    >"$BUILD/make.log" 2>&1 || { tail -20 "$BUILD/make.log"; exit 1; }
mkdir -p "$DEST/bin" "$DEST/lib"
for p in $PROGS; do
    cp "$BUILD/$p" "$DEST/bin/"
    strip "$DEST/bin/$(basename "$p")"
done
# test_comm_nccl (built only when nccl.h was found: TANDEM_NCCL) adds cmocka;
# libnccl itself (200 MB) is not carried: the GPU machine's is used.
for lib in libcjson.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libcmocka.so.0; do
    path=$(ldd "$BUILD/gpu-bin/tandem-bench" "$BUILD/tests/test_comm_nccl" |
           awk -v l="$lib" '$1 == l { print $3; exit }')
    [ -n "$path" ] || { echo "make_prebuilt: $lib not linked"; exit 1; }
    cp -L "$path" "$DEST/lib/$lib"
done
echo "prebuilt in $DEST ($(git rev-parse --short HEAD)): $(ls "$DEST/bin" | tr '\n' ' ')($(du -sh "$DEST" | cut -f1))"
