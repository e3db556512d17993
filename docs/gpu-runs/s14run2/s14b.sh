#!/usr/bin/env bash
# s14b (one call, ~6 min): the decode table of main's tree p13 (c26a4a3;
# on an H200 it replaces PERF.md's s10run1 table) and the two unmeasured
# session-12 branches against it (from s13a.sh): p12y = branch staged-experts
# (grouped FP8 expert kernels with token rows staged in shared memory; also
# ffd67e6's cached cuBLASLt refusals), p12d = branch moe-gemv-down (the
# expert GEMV down kernel without clusters: arrival counters). The two
# branches' sources were lost with session 12's checkout (only these
# binaries remain): a branch that wins is rewritten from
# docs/gpu-runs/s12-next/README.md. Checks first (engine, the op cases each branch touches,
# memcheck), then decode rows of all three, then the profile.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
t() { echo "[$(el) s] $*"; }
left() { [ $(el) -lt $1 ]; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && for p in p13 p12y p12d; do tar xJf gpu-carry/$p.tar.xz -C $OUT/u; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TREE TAG PROG [args]
  local tree=$1 tag=$2; shift 2
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' $OUT/$tag.log | tail -1)"
}
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
chk p12y engine_y $OUT/u/p12y/bin/test_engine_gpu 0
chk p12d engine_d $OUT/u/p12d/bin/test_engine_gpu 0
chk p12y ops_moe_y $OUT/u/p12y/bin/test_cuda_ops 13 moe_experts
chk p12d ops_moe_d $OUT/u/p12d/bin/test_cuda_ops 13 "moe_experts/fp8 gemv"
C=tests/fixtures/configs
bench() { # bench TREE MODEL BATCHES [args]
  local tree=$1 model=$2 b=$3; shift 3
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 60 $OUT/u/$tree/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${tree}_$model$TAG.log 2>&1
  echo "| $tree$TAG | $model | $(grep -E '^decode' $OUT/b_${tree}_$model$TAG.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
TAG=
bench p13 gpt-oss-20b 1,2,4,8,32,64,128
bench p12y gpt-oss-20b 8,32,64,128
bench p12d gpt-oss-20b 1,2,4
bench p13 qwen3-30b-a3b 1,8,32
bench p12y qwen3-30b-a3b 8,32
bench p12d qwen3-30b-a3b 1
TAG=_rep bench p13 gpt-oss-20b 1,32,128   # repeated: the spread
TAG=
t "rows"
chk p12y memcheck_moe_y $SAN --tool memcheck --leak-check no --error-exitcode 9 $OUT/u/p12y/bin/test_cuda_ops 7 "moe_experts/fp8"
chk p12d memcheck_moe_d $SAN --tool memcheck --leak-check no --error-exitcode 9 $OUT/u/p12d/bin/test_cuda_ops 7 "moe_experts/fp8 gemv"
left 200 && chk p12y ops_matmul_y $OUT/u/p12y/bin/test_cuda_ops 13 "matmul_w/fp8"
left 230 && { TAG=_prof bench p12y gpt-oss-20b 32,128 --profile; TAG=_prof bench p12d gpt-oss-20b 1 --profile; t "profile"; }
case "$GPU" in *H200*)
  left 300 && { TAG= bench p13 gpt-oss-120b 1,8,32; TAG=_kvfp8 bench p13 gpt-oss-120b 128 --kv-dtype fp8; t "120b"; }
  left 400 && { TAG=_kvfp8 bench p13 qwen3-30b-a3b 128 --kv-dtype fp8; TAG= bench p12y gpt-oss-120b 32; t "qwen3 b128, 120b p12y"; };;
esac
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/rows.txt
t "end"
