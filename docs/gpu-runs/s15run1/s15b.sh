#!/usr/bin/env bash
# s15b (one call, ~3 min): p16 = main + fp8-decode-tma.patch (the TMA
# decode attention over FP8 pools: a tile's 16 rows as one 1-D bulk copy,
# widened to bf16 in shared memory). Checks: the attention op cases over
# FP8 pools (the new kernel with unwritten slots NaN, and the cp.async
# kernel again), the engine check (FP8 KV decode now takes the new kernel);
# timings: bench_attention's decode rows over FP8 and bf16 pools, new
# kernel vs cp.async (TANDEM_CUDA_ATTN_DECODE_TMA=0) in the same call, and
# engine decode rows with the FP8 cache against p14 (main).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/u && for p in p16 p14; do tar xJf gpu-carry/$p.tar.xz -C $OUT/u; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TREE TAG PROG [args]
  local tree=$1 tag=$2; shift 2
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"
}
B=$OUT/u/p16/bin
chk p16 engine $B/test_engine_gpu 0
chk p16 ops_fp8_decode $B/test_cuda_ops 16 "attention/pool bf16 fp8 KV decode"
chk p16 ops_fp8_pool $B/test_cuda_ops 16 "attention/pool fp8 KV"
for kv in fp8 bf16; do for bsz in 1 8 32 64 128; do for tma in 1 0; do
  r=$(LD_LIBRARY_PATH=$OUT/u/p16/lib TANDEM_CUDA_ATTN_BF16=1 TANDEM_CUDA_ATTN_DECODE_TMA=$tma timeout 30 \
      $B/bench_attention decode $bsz 8192 $kv 2>&1 | grep '^RESULT')
  echo "| $kv | b$bsz | tma=$tma | $r |" >> $OUT/attn_rows.txt
done; done; done
t "attention rows"
C=tests/fixtures/configs
bench() { # bench TREE MODEL BATCHES [args]
  local tree=$1 model=$2 b=$3; shift 3
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 60 $OUT/u/$tree/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${tree}_$model$TAG.log 2>&1
  echo "| $tree$TAG | $model | $(grep -E '^decode' $OUT/b_${tree}_$model$TAG.log | awk '{printf "b%s %s %s  ", $3, $6, $9}') |" >> $OUT/rows.txt
}
TAG=_kvfp8 bench p16 gpt-oss-20b 1,32,128 --kv-dtype fp8
TAG=_kvfp8 bench p14 gpt-oss-20b 1,32,128 --kv-dtype fp8
TAG=_kvfp8 bench p16 qwen3-30b-a3b 32,64 --kv-dtype fp8
TAG=_kvfp8 bench p14 qwen3-30b-a3b 32,64 --kv-dtype fp8
case "$GPU" in *H200*)
  TAG=_kvfp8 bench p16 gpt-oss-120b 128 --kv-dtype fp8
  TAG=_kvfp8 bench p14 gpt-oss-120b 128 --kv-dtype fp8;;
esac
t rows
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/attn_rows.txt | sed 's/RESULT //' | cut -c1-160
cat $OUT/rows.txt
t end
