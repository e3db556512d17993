#!/usr/bin/env bash
# s10a (s10run1): the landed tree (1e6a780) on the H200: the whole op table
# and the engine check, then the decode table (20B, 120B, Qwen3).
set -u
PROF=
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
TANDEM_PREBUILT=gpu-carry/pbase.tar.xz OUT=$OUT/run timeout 330 bash tests/gpu/run.sh ops engine > $OUT/runsh.log 2>&1
echo "run.sh rc $? at $(( $(date +%s) - T0 )) s"
mkdir -p $OUT/u && tar xJf gpu-carry/pbase.tar.xz -C $OUT/u
NEW=$OUT/u/pbase
C=tests/fixtures/configs
bench() { # bench TAG BUILD MODEL BATCHES
  LD_LIBRARY_PATH=$2/lib timeout 100 $2/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$3.json --weights fp8 --prefill none --batch $4 --context 8192 --steps 8 --repeat 3 $PROF > $OUT/b_$1_$3.log 2>&1
  echo "| $1 | $3 | $(grep -E '^decode' $OUT/b_$1_$3.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
PROF=--profile bench base $NEW gpt-oss-20b 1,2,4,8,32,128
bench base $NEW qwen3-30b-a3b 1,2,4,8,32
bench base $NEW gpt-oss-120b 1,32
LD_LIBRARY_PATH=$NEW/lib timeout 60 $NEW/bin/bench_ops > $OUT/bench_ops.log 2>&1; echo "bench_ops rc $?"
rm -rf $OUT/u
nvidia-smi --query-gpu=name --format=csv
tail -15 $OUT/runsh.log
grep -E "^#   |profile, decode" $OUT/b_base_gpt-oss-20b.log | head -80
cat $OUT/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
