#!/usr/bin/env bash
# s12b (s12run1): main 24b96bc (p12: clean CUDA build) against the same tree
# with fp8_rows_mma.cuh on e4m3 mma.sync m16n8k32 (p12n), same call: checks
# on p12n (engine, op cases, memcheck), decode rows both, bench_ops both,
# generate + ranks, the profile, 120B on an H200.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
t() { echo "[$(el) s] $*"; }
left() { [ $(el) -lt $1 ]; } # run the step only while under $1 s
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/p12.tar.xz -C $OUT/u && tar xJf gpu-carry/p12n.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
chk() { # chk TAG PROG [args]: ok / not ok counts of a check program
  local tag=$1; shift
  LD_LIBRARY_PATH=$OUT/u/p12n/lib timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' $OUT/$tag.log | tail -1)"
}
N=$OUT/u/p12n/bin
chk engine $N/test_engine_gpu 0
chk ops_matmul $N/test_cuda_ops 12 matmul
chk ops_moe_experts $N/test_cuda_ops 12 moe_experts
chk ops_pool_bf16 $N/test_cuda_ops 12 "pool bf16"
C=tests/fixtures/configs
bench() { # bench TREE TAG MODEL BATCHES [args]
  local tree=$1 tag=$2 model=$3 b=$4; shift 4
  LD_LIBRARY_PATH=$OUT/u/$tree/lib timeout 100 $OUT/u/$tree/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${tree}_${tag}_$model.log 2>&1
  echo "| $tree $tag | $model | $(grep -E '^decode' $OUT/b_${tree}_${tag}_$model.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
bench p12n tma gpt-oss-20b 1,4,8,32,64,128
bench p12 tma gpt-oss-20b 1,4,8,32,64,128
t "20b rows"
bench p12n tma qwen3-30b-a3b 1,8,32,128
bench p12 tma qwen3-30b-a3b 8,32,128
TANDEM_CUDA_ATTN_DECODE_TMA=0 bench p12n cpasync gpt-oss-20b 32,128
t "rows done"
for tr in p12n p12; do LD_LIBRARY_PATH=$OUT/u/$tr/lib timeout 60 $OUT/u/$tr/bin/bench_ops > $OUT/bench_ops_$tr.log 2>&1; done; t "bench_ops"
left 330 && { TANDEM_PREBUILT=$OUT/u/p12n OUT=$OUT/run BUDGET_S=100 timeout 110 bash tests/gpu/run.sh generate ranks > $OUT/run_generate.log 2>&1; t "run.sh generate ranks rc $?"; }
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
left 420 && chk memcheck_fp8 $SAN --tool memcheck --leak-check no --error-exitcode 9 $N/test_cuda_ops 7 "moe_experts/fp8"
left 450 && { bench p12n prof gpt-oss-20b 1,32,128 --profile; t "profile"; }
case "$GPU" in *H200*) left 480 && { bench p12n tma gpt-oss-120b 1,32,128; t "120b"; };; esac
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null; cp $OUT/run/*.log $OUT/logs/ 2>/dev/null; rm -rf $OUT/run
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
tar xzf $OUT/logs.tgz -O logs/run_generate.log 2>/dev/null | sed -n '/== summary/,$p' | cut -c1-300
tar xzf $OUT/logs.tgz -O logs/b_p12n_prof_gpt-oss-20b.log 2>/dev/null | grep -E "q/k/v/o|MoE experts|attention kernel|total|profile, decode" | head -16
for tr in p12n p12; do echo "bench_ops $tr"; tar xzf $OUT/logs.tgz -O logs/bench_ops_$tr.log | grep -E "skinny|cuBLASLt|gemv" | head -14; done
tar xzf $OUT/logs.tgz -O logs/b_p12n_tma_gpt-oss-20b.log | grep -iE "floor" | head -8
cat $OUT/rows.txt
t "end"
