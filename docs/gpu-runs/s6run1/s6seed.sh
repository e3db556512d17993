#!/usr/bin/env bash
# s6run1: the seed article's prefill cost table, DP+EP decode rows and the
# communicator latencies (tests/gpu/seed_table.sh through run.sh seed-table).
set -u
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz
OUT0=$OUT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $OUT0/gpu.txt 2>&1
OUT=$OUT0/c BUDGET_S=450 bash tests/gpu/run.sh seed-table > $OUT0/run.txt 2>&1
echo "run rc $?"
cp $OUT0/c/seed_table.txt $OUT0/seed_table.txt 2>/dev/null
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked c 2>/dev/null; rm -rf c)
tail -70 $OUT0/seed_table.txt
