#!/usr/bin/env bash
# s11c: why tandem-bench faults with the TMA decode attention (graphs on/off,
# compute-sanitizer), and the FP8 matmul case of odd n at 100 rows.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/ptma.tar.xz -C $OUT/u
NEW=$OUT/u/ptma
export LD_LIBRARY_PATH=$NEW/lib
C=tests/fixtures/configs
B="$NEW/bin/tandem-bench --device cuda --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill none --context 8192 --steps 2 --repeat 1"
timeout 60 $B --batch 1 --cuda-graphs off > $OUT/nograph.log 2>&1; t "no graphs rc $?"; grep -E "^decode|illegal" $OUT/nograph.log | head -3
timeout 60 $B --batch 1 > $OUT/graph.log 2>&1; t "graphs rc $?"; grep -E "^decode|illegal" $OUT/graph.log | head -3
timeout 200 compute-sanitizer --tool memcheck --leak-check no --print-limit 5 $B --batch 1 --cuda-graphs off > $OUT/san.log 2>&1; t "sanitizer rc $?"
grep -vE "^tandem: kn_(host_)?free" $OUT/san.log | head -60
timeout 150 $NEW/bin/test_cuda_ops 11 "fp8 gemv m=1" > $OUT/mm.log 2>&1; t "ops fp8 gemv m=1.. rc $? $(grep -c '^ok' $OUT/mm.log) ok $(grep -c '^not ok' $OUT/mm.log) not ok"
rm -rf $OUT/u
