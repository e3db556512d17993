#!/usr/bin/env bash
# Builds the cluster's three executables with the CUDA backend (make CUDA=1)
# on a machine with nvcc but maybe no GPU, into a folder that runs on the GPU
# machine, which has neither protoc-c, UCX, ZeroMQ nor libmicrohttpd:
#   DEST/bin/  tandem-router, tandem-prefiller, tandem-decoder,
#              tandem-generate (the one-process reference for a seeded
#              request) and tandem-servebench (the serve step's client),
#              stripped
#   DEST/lib/  every shared library they load that is not glibc's, the GCC
#              runtime's (libstdc++, libgcc_s, libgomp) or CUDA's
#              (/usr/local/cuda/lib64, found through the rpath): ZeroMQ,
#              protobuf-c, UCX (ucp/uct/ucs/ucm), libmicrohttpd, libsodium,
#              cJSON, libcurl (the router's Kubernetes scaler), libibverbs,
#              the BLAS, and what those load
# BLAS: the CUDA backend never calls it (cuBLAS does the products), so by
# default the programs link Debian's reference BLAS (libblas3, 0.5 MB)
# instead of OpenBLAS (36 MB with its per-CPU kernels), which keeps the
# folder near 25 MB; --device cpu then works but slowly. PREBUILT_BLAS=openblas
# links OpenBLAS as `make` does.
#   DEST/ucx/  UCX's transport modules (Debian's: cma, ib, rdmacm; no CUDA
#              transports, so the workers stage GPU KV through host buffers)
#              and their libraries go to DEST/lib; run with
#              UCX_MODULE_DIR=DEST/ucx
#   DEST/BUILD_INFO  commit, compiler, library list
# tests/gpu/run.sh cluster takes DEST as $TANDEM_PREBUILT.
# Usage: tests/gpu/make_prebuilt_cluster.sh DEST   (DEST inside the tree, e.g.
# prebuilt-cluster, which .gitignore keeps out of commits; the device call
# carries it)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:?usage: make_prebuilt_cluster.sh DEST}
BUILD=build-prebuilt-cluster
PROGS="tandem-router tandem-prefiller tandem-decoder tandem-generate tandem-servebench"
UCX_MODULES=/usr/lib/x86_64-linux-gnu/ucx
# A clean tree: the .cu objects do not track header changes.
rm -rf "$BUILD" "$DEST"
mkdir -p "$BUILD"
blas=()
blas_dir=""
if [ "${PREBUILT_BLAS:-netlib}" = netlib ]; then
    [ -f /usr/lib/x86_64-linux-gnu/blas/libblas.so ] ||
        { echo "make_prebuilt_cluster: no reference BLAS (apt-get install libblas-dev), or PREBUILT_BLAS=openblas"; exit 1; }
    # libblas.so.3 is an alternative that points at OpenBLAS here: resolve
    # it (ldd below) in the reference BLAS's own folder
    blas_dir=/usr/lib/x86_64-linux-gnu/blas
    blas=("PKG_LIBS=$(pkg-config --libs ucx libzmq libprotobuf-c libmicrohttpd libcjson) -L/usr/lib/x86_64-linux-gnu/blas -lblas")
fi
make -j2 CUDA=1 BUILD="$BUILD" "${blas[@]}" $(for p in $PROGS; do echo "$BUILD/bin/$p"; done) \
    >"$BUILD/make.log" 2>&1 || { tail -20 "$BUILD/make.log"; exit 1; }
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/ucx"
for p in $PROGS; do
    cp "$BUILD/bin/$p" "$DEST/bin/"
    strip "$DEST/bin/$p"
done
for m in "$UCX_MODULES"/libuct_*.so.0; do
    cp -L "$m" "$DEST/ucx/$(basename "$m")"
    strip --strip-unneeded "$DEST/ucx/$(basename "$m")"
done
# What the GPU machine certainly has: glibc, the GCC runtime the CUDA
# toolkit itself needs, and CUDA (rpath /usr/local/cuda/lib64).
system_lib() {
    case "$1" in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libpthread.so.* | \
        libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | \
        libstdc++.so.* | libgcc_s.so.* | libgomp.so.*) return 0 ;;
    esac
    case "$2" in /usr/local/cuda*) return 0 ;; esac
    return 1
}
# The programs' and the UCX modules' libraries, and theirs (ldd lists the
# whole closure).
ldd() { LD_LIBRARY_PATH=$blas_dir command ldd "$@"; }
ldd "$DEST"/bin/* "$DEST"/ucx/* | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
while read -r name path; do
    system_lib "$name" "$path" && continue
    [ -f "$DEST/lib/$name" ] && continue
    cp -L "$path" "$DEST/lib/$name"
    strip --strip-unneeded "$DEST/lib/$name" 2>/dev/null || true
done
if ldd "$DEST"/bin/* "$DEST"/ucx/* | grep -q "not found"; then
    echo "make_prebuilt_cluster: unresolved libraries:"
    ldd "$DEST"/bin/* "$DEST"/ucx/* | grep "not found"
    exit 1
fi
{
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(cc --version | head -1), $(/usr/local/cuda/bin/nvcc --version | tail -1)"
    echo "BLAS ${PREBUILT_BLAS:-netlib}; UCX $(pkg-config --modversion ucx), modules: $(ls "$DEST/ucx" | tr '\n' ' ')"
    echo "lib: $(ls "$DEST/lib" | tr '\n' ' ')"
} >"$DEST/BUILD_INFO"
echo "prebuilt cluster in $DEST ($(git rev-parse --short HEAD)): $(ls "$DEST/bin" | tr '\n' ' ')," \
    "$(ls "$DEST/lib" | wc -l) libraries, $(du -sh "$DEST" | cut -f1)"
