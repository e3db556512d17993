#!/bin/sh
# runtime-packages.sh FILE...: the Debian/Ubuntu packages that provide the
# shared libraries FILE... load (ldd), one per line, sorted. The Dockerfile's
# build stage runs it on the programs and UCX so that the runtime stage
# installs exactly what they need on the same distribution, no guessed
# package names. Libraries that no package owns are left out on purpose:
# CUDA's (the runtime base image has them; libcuda comes from the node's
# driver), UCX's own (/opt/ucx, copied), NCCL's (installed at its pinned
# version by the Dockerfile itself), and "not found" ones (libcuda and
# libnvidia-ml have no driver in a build stage). Files that are not dynamic
# executables (the scripts next to the programs) add nothing.
set -eu
[ $# -gt 0 ] || { echo "usage: runtime-packages.sh FILE..." >&2; exit 2; }
libs=$(for f in "$@"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u)
for lib in $libs; do
    case "$lib" in
        /usr/local/cuda* | /opt/ucx/* | */libnccl.so*) continue ;;
    esac
    real=$(readlink -f "$lib")
    # dpkg -S names the owner as "pkg:arch: /path"; with usrmerge the
    # package may have installed it under /lib rather than /usr/lib, or the
    # other way round, and ldd may name either
    owner=
    for p in "$real" "${real#/usr}" "/usr$real" "$lib"; do
        owner=$(dpkg -S "$p" 2>/dev/null) && break
    done
    [ -n "$owner" ] || continue
    echo "${owner%%: *}"
done | sort -u
