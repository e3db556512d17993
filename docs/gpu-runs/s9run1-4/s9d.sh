#!/usr/bin/env bash
# s9b (s9run1): the norms folded into q/k/v and the router
# (kn_matmul_w_multi_normed, kn_moe_router_normed): their op cases and the
# neighbours', test_engine_gpu, decode rows old vs new in the same run, and
# a warm-cache per-kernel profile of a batch-1 step.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
NEWTAR=${NEWTAR:-gpu-carry/pnew3.tar.xz}
mkdir -p $OUT/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT/u && tar xJf $NEWTAR -C $OUT/u
OLD=$OUT/u/prebuilt NEW=$OUT/u/$(basename $NEWTAR .tar.xz)
C=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
i=0
for f in normed moe_router gemv norm matmul_w_multi "pool bf16" "seq decode"; do
  i=$((i+1))
  CMOCKA_MESSAGE_OUTPUT=TAP LD_LIBRARY_PATH=$NEW/lib timeout 120 $NEW/bin/test_cuda_ops 1796415011 "$f" > $OUT/ops_$i.log 2>&1
  echo "| ops $f | rc $? | ok $(grep -c '^ok' $OUT/ops_$i.log) | not ok $(grep -c '^not ok' $OUT/ops_$i.log) |" >> $OUT/rows.txt
done
echo "ops done $(( $(date +%s) - T0 )) s"
CMOCKA_MESSAGE_OUTPUT=TAP LD_LIBRARY_PATH=$NEW/lib timeout 200 $NEW/bin/test_engine_gpu > $OUT/engine.log 2>&1
echo "| engine | rc $? | ok $(grep -c '^ok' $OUT/engine.log) | not ok $(grep -c '^not ok' $OUT/engine.log) |" >> $OUT/rows.txt
echo "engine done $(( $(date +%s) - T0 )) s"
bench() { # bench TAG BUILD MODEL BATCHES
  LD_LIBRARY_PATH=$2/lib timeout 90 $2/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$3.json --weights fp8 --prefill none --batch $4 --context 8192 --steps 8 --repeat 3 > $OUT/b_$1_$3.log 2>&1
  echo "| $1 | $3 | $(grep -E '^decode' $OUT/b_$1_$3.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
bench old $OLD gpt-oss-20b 1,8,32,128
bench new $NEW gpt-oss-20b 1,8,32,128
bench old $OLD gpt-oss-20b 1
bench new $NEW gpt-oss-20b 1
bench old $OLD qwen3-30b-a3b 1,32
bench new $NEW qwen3-30b-a3b 1,32
echo "bench done $(( $(date +%s) - T0 )) s"
NEWTAR=$NEWTAR bash gpu-carry/s9c.sh > $OUT/s9c.out 2>&1
rm -rf $OUT/u
cat $OUT/smi.txt
grep -h '^not ok' $OUT/ops_*.log $OUT/engine.log | head -20
echo; cat $OUT/s9c.out
echo; cat $OUT/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
