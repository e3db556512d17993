#!/usr/bin/env bash
# s14e (~2 min): p15 = p14 + kn_matmul_w_multi quantizing x once for all its
# FP8 layers past the skinny kernel's rows (q/k/v at batch > 64): the
# matmul_w op cases (multi bit for bit equal to each layer alone), the
# engine check, decode rows against p14 in the same call.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/u && for p in p15 p14; do tar xJf gpu-carry/$p.tar.xz -C $OUT/u; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TREE TAG PROG [args]
  local tree=$1 tag=$2; shift 2
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 90 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"
}
B=$OUT/u/p15/bin
chk p15 engine $B/test_engine_gpu 0
chk p15 ops_multi $B/test_cuda_ops 15 matmul_w_multi
chk p15 ops_matmul_fp8 $B/test_cuda_ops 15 "matmul_w/fp8"
C=tests/fixtures/configs
bench() { # bench TREE MODEL BATCHES [args]
  local tree=$1 model=$2 b=$3; shift 3
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 60 $OUT/u/$tree/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${tree}_$model$TAG.log 2>&1
  echo "| $tree$TAG | $model | $(grep -E '^decode' $OUT/b_${tree}_$model$TAG.log | awk '{printf "b%s %s %s  ", $3, $6, $9}') |" >> $OUT/rows.txt
}
TAG=
bench p15 gpt-oss-20b 1,32,64,128
bench p14 gpt-oss-20b 1,32,64,128
bench p15 qwen3-30b-a3b 32,64
bench p14 qwen3-30b-a3b 32,64
TAG=_rep bench p15 gpt-oss-20b 64,128
TAG=_rep bench p14 gpt-oss-20b 64,128
TAG=_prof bench p15 gpt-oss-20b 128 --profile
t rows
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/rows.txt
t end
