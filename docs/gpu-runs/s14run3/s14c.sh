#!/usr/bin/env bash
# s14c (one call, ~7 min): p14 = session 14's rewrite of the two lost
# session-12 branches (grouped FP8 expert kernels with staged token rows;
# the expert GEMV down kernel on arrival counters instead of clusters),
# checked (engine, the moe_experts op cases incl. staged vs unstaged bit
# for bit, memcheck), timed against p13 (main before) and p12y / p12d (the
# session-12 binaries s14run2 measured) in the same call; then the wgmma
# attention modes next to torch SDPA (s14a's attention step, whose
# TANDEM_PREBUILT pointed at the wrong folder).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
t() { echo "[$(el) s] $*"; }
left() { [ $(el) -lt $1 ]; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && for p in p14 p13 p12y p12d; do tar xJf gpu-carry/$p.tar.xz -C $OUT/u; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TREE TAG PROG [args]
  local tree=$1 tag=$2; shift 2
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 120 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' $OUT/$tag.log | tail -1)"
}
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
B=$OUT/u/p14/bin
chk p14 engine $B/test_engine_gpu 0
chk p14 ops_moe $B/test_cuda_ops 14 moe_experts
C=tests/fixtures/configs
bench() { # bench TREE MODEL BATCHES [args]
  local tree=$1 model=$2 b=$3; shift 3
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 60 $OUT/u/$tree/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${tree}_$model$TAG.log 2>&1
  echo "| $tree$TAG | $model | $(grep -E '^decode' $OUT/b_${tree}_$model$TAG.log | awk '{printf "b%s %s %s  ", $3, $6, $9}') |" >> $OUT/rows.txt
}
TAG=
bench p14 gpt-oss-20b 1,2,4,8,32,64,128
bench p13 gpt-oss-20b 1,2,4,8,32,64,128
bench p12y gpt-oss-20b 8,32,64,128
bench p12d gpt-oss-20b 1,2,4
TAG=_unstaged TANDEM_CUDA_MOE_STAGED=0 bench p14 gpt-oss-20b 32,128
TAG=
bench p14 qwen3-30b-a3b 1,8,32
bench p13 qwen3-30b-a3b 1,8,32
bench p12y qwen3-30b-a3b 8,32
bench p12d qwen3-30b-a3b 1
TAG=_rep bench p14 gpt-oss-20b 1,32,128
TAG=_rep bench p13 gpt-oss-20b 1,32,128
TAG=
case "$GPU" in *H200*)
  bench p14 gpt-oss-120b 1,8,32
  TAG=_kvfp8 bench p14 gpt-oss-120b 128 --kv-dtype fp8
  TAG=_kvfp8 bench p14 qwen3-30b-a3b 128 --kv-dtype fp8
  TAG=;;
esac
t "rows"
TAG=_prof bench p14 gpt-oss-20b 1,32,128 --profile
t "profile"
chk p14 memcheck_moe $SAN --tool memcheck --leak-check no --error-exitcode 9 $B/test_cuda_ops 7 "moe_experts/fp8"
# the attention modes next to the peers (run.sh: ceilings, then bench_attention.py)
if left 250; then
  P=$OUT/u/p14
  OUT=$OUT/rs TANDEM_PREBUILT=$P BUDGET_S=200 BENCH_WGMMA_MODES="9 8 6 5 2" BENCH_QWEN3_MODES="7 6 8" \
    timeout 230 bash tests/gpu/run.sh ceilings bench-attention > $OUT/runsh_attention.log 2>&1
  t "attention rc $?"
  grep -E '^\| ' $OUT/rs/bench_attention.log | head -40
fi
rm -rf $OUT/u $OUT/rs/ab $OUT/rs/unpacked
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/rs $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/rows.txt
t "end"
