#!/usr/bin/env bash
# Builds the GPU programs (kernels' checks, the engine's GPU test, the
# GPU tandem-bench / tandem-generate) on a machine with nvcc but maybe no
# GPU, into a folder that runs on the GPU machine without building there:
#   DEST/bin/{test_cuda_ops,test_engine_gpu,tandem-bench,tandem-generate,...}
#   DEST/lib/libcjson.so.1
# OpenBLAS (and the gfortran runtime it needs) is linked statically, so the
# GPU machine needs only glibc, libstdc++/libgomp and the CUDA 13 libraries
# in /usr/local/cuda/lib64 (rpath). tests/gpu/run_engine.sh takes DEST as
# $TANDEM_PREBUILT. Usage: tests/gpu/make_prebuilt.sh DEST
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:?usage: make_prebuilt.sh DEST}
BUILD=build-prebuilt
GCCLIB=$(dirname "$(gcc -print-file-name=libgfortran.a)")
OPENBLAS_A=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.a)
rm -rf "$BUILD/cuda"   # .cu objects do not track header changes: rebuild them
make -j2 CUDA=1 BUILD="$BUILD" gpu-progs gpu-engine-progs \
    BLAS_LIBS="$OPENBLAS_A $GCCLIB/libgfortran.a $GCCLIB/libquadmath.a -lpthread" \
    CJSON_LIBS="-l:libcjson.so.1" >"$BUILD.log" 2>&1 || { tail -20 "$BUILD.log"; exit 1; }
mkdir -p "$DEST/bin" "$DEST/lib"
cp "$BUILD"/tests/gpu/* "$BUILD"/gpu-bin/* "$DEST/bin/"
cp -L /usr/lib/x86_64-linux-gnu/libcjson.so.1 "$DEST/lib/"
echo "prebuilt in $DEST ($(git rev-parse --short HEAD)): $(ls "$DEST/bin" | tr '\n' ' ')"
