#!/usr/bin/env bash
# s8e (s8run7): why the streaming gate_up kernel runs at 1.8 TB/s: ncu warp
# stall reasons and instruction counts, new vs old (928bd50) kernel.
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT0=$OUT
mkdir -p $OUT0/u $OUT0/o && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u && tar xJf gpu-carry/prebuilt-old.tar.xz -C $OUT0/o
C=tests/fixtures/configs
for v in new old; do
  B=$OUT0/u/prebuilt; [ $v = old ] && B=$OUT0/o/prebuilt
  LD_LIBRARY_PATH=$B/lib timeout 120 ncu --clock-control none -k "regex:gate_up" --launch-count 1 --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    $B/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 --batch 1 --steps 1 --repeat 1 --cuda-graphs off > $OUT0/ncu_$v.txt 2>&1
  echo "== $v rc $?"
done
rm -rf $OUT0/u $OUT0/o
for v in new old; do echo "=== $v"; grep -E "Stall|stall|Warp Cycles|Issued|Eligible|Active Warps|Executed Ipc|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit|Duration|Shared Memory|Block Limit|Achieved|Registers|Instructions" $OUT0/ncu_$v.txt | head -60; done
