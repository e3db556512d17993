#!/usr/bin/env bash
# s15a (one call, ~5 min): p15 = main + qkv-quantize-once.patch +
# skinny-warps.patch (tests/gpu/make_prebuilt.sh), p14 = main. Checks the
# two patches (the matmul_w / matmul_w_multi op cases: multi bit for bit
# equal to each layer alone, the skinny kernel at 4 / 8 / 16 warps a block
# within its float64 bound; engine), then decode rows of p15 against p14
# in the same call, the skinny block sizes swept by
# TANDEM_CUDA_FP8_SKINNY_WARPS, and bench_ops' FP8 decode rows (q/k/v/o at
# 1-128 rows on every path). On an H200 the rows also give main's decode
# table with session 14's kernels (s14run3 measured them on an H100 only).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/u && for p in p15 p14; do tar xJf gpu-carry/$p.tar.xz -C $OUT/u; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TREE TAG PROG [args]
  local tree=$1 tag=$2; shift 2
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 120 "$@" > $OUT/$tag.log 2>&1
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
bench p15 gpt-oss-20b 1,2,4,8,32,64,128
bench p14 gpt-oss-20b 1,2,4,8,32,64,128
for w in 4 16; do TAG=_w$w TANDEM_CUDA_FP8_SKINNY_WARPS=$w bench p15 gpt-oss-20b 8,16,32,64; done
TAG=
bench p15 qwen3-30b-a3b 1,8,32,64
bench p14 qwen3-30b-a3b 1,8,32,64
for w in 4 16; do TAG=_w$w TANDEM_CUDA_FP8_SKINNY_WARPS=$w bench p15 qwen3-30b-a3b 8,32,64; done
TAG=_rep bench p15 gpt-oss-20b 1,32,128
TAG=_rep bench p14 gpt-oss-20b 1,32,128
case "$GPU" in *H200*)
  TAG= bench p15 gpt-oss-120b 1,8,32
  TAG=_kvfp8 bench p15 gpt-oss-120b 128 --kv-dtype fp8
  TAG=_kvfp8 bench p15 qwen3-30b-a3b 128 --kv-dtype fp8
  TAG=;;
esac
TAG=_prof bench p15 gpt-oss-20b 1,32,128 --profile
t rows
LD_LIBRARY_PATH=$OUT/u/p15/lib timeout 120 $B/bench_ops > $OUT/bench_ops.log 2>&1
t "bench_ops rc $?"
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/rows.txt
t end
