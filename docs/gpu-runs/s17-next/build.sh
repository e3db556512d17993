#!/usr/bin/env bash
# Builds p19 (main + ws-pairs.patch + s17-kernels.patch) and p20 (+ bf16y.patch)
# into gpu-carry/p19.tar.xz and p20.tar.xz, and copies the helper scripts
# there, for s17b.sh / s17c.sh. Run from the repository root (~3 minutes on
# two cores). Usage: bash docs/gpu-runs/s17-next/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
HERE=docs/gpu-runs/s17-next
mkdir -p gpu-carry /tmp/pb
for p in p19 p20; do
    wt=/tmp/s17-$p
    git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
    git worktree add -f --detach "$wt" HEAD >/dev/null
    (cd "$wt" && git apply "$ROOT/docs/gpu-runs/s16-next/ws-pairs.patch" "$ROOT/$HERE/s17-kernels.patch")
    [ $p = p20 ] && (cd "$wt" && git apply "$ROOT/$HERE/bf16y.patch")
    (cd "$wt" && bash tests/gpu/make_prebuilt.sh /tmp/pb/$p | tail -n 1)
    (cd /tmp/pb && tar cJf "$ROOT/gpu-carry/$p.tar.xz" $p)
    git worktree remove --force "$wt"
done
cp $HERE/attn_modes.py $HERE/ncu_kernels.py $HERE/s17b.sh $HERE/s17c.sh gpu-carry/
ls -la gpu-carry/p19.tar.xz gpu-carry/p20.tar.xz
