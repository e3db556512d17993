#!/usr/bin/env bash
# s11a (s11run1; was s10e): the skinny FP8 kernel (gemm_fp8_skinny.cu) and the shared
# fp8_rows_mma.cuh on the GPU, in one call: the op cases it touches
# (matmul*, moe_experts*) on CPU and CUDA, those under compute-sanitizer,
# the engine check, bench_ops' FP8 decode rows (GEMV / skinny / cuBLASLt),
# decode with it on (default) and off (TANDEM_CUDA_FP8_SKINNY=0) from the
# same programs, the expert down kernel split over K (pmoe) against the
# previous one (pskinny), GPT-OSS-120B at batch 128 (FP8 KV), then Nsight Compute
# over one eager decode step at batch 32 and 128 (GPT-OSS-20B).
set -u
PROF=
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/pskinny.tar.xz -C $OUT/u && tar xJf gpu-carry/pmoe.tar.xz -C $OUT/u
SK=$OUT/u/pskinny NEW=$OUT/u/pmoe
export LD_LIBRARY_PATH=$NEW/lib
nvidia-smi --query-gpu=name --format=csv,noheader
for f in matmul moe_experts; do
  timeout 120 $NEW/bin/test_cuda_ops 11 $f > $OUT/ops_$f.log 2>&1
  t "ops $f rc $? $(grep -cE '^ok' $OUT/ops_$f.log) ok $(grep -cE '^not ok' $OUT/ops_$f.log) not ok"
done
timeout 200 $NEW/bin/test_engine_gpu 0 > $OUT/engine.log 2>&1
t "engine rc $? $(grep -cE '^ok' $OUT/engine.log) ok $(grep -cE '^not ok' $OUT/engine.log) not ok"
C=tests/fixtures/configs
# the decode attention alone: bench_attention rows and one ncu of batch 128
for b in 32 128; do TANDEM_CUDA_ATTN_BF16=1 timeout 30 $NEW/bin/bench_attention decode $b 8192 bf16 >> $OUT/battn.txt 2>&1; done
TANDEM_CUDA_ATTN_BF16=1 timeout 30 $NEW/bin/bench_attention decode 32 8192 bf16 qwen3 >> $OUT/battn.txt 2>&1
TANDEM_CUDA_ATTN_BF16=1 timeout 60 ncu --clock-control none -k regex:attn_decode --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  $NEW/bin/bench_attention decode 128 8192 bf16 > $OUT/ncu_attn.txt 2>&1
t "attention bench + ncu rc $?"
bench() { # bench TAG MODEL BATCHES [args] (programs: $P, default pmoe)
  local tag=$1 model=$2 b=$3; shift 3
  timeout 100 ${P:-$NEW}/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 $PROF "$@" > $OUT/b_${tag}_$model.log 2>&1
  echo "| $tag | $model | $(grep -E '^decode' $OUT/b_${tag}_$model.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
# base: the old dense path and the old expert down kernel; skinny: the new
# dense path; moe: the new dense path and the K-split expert down kernel
P=$SK TANDEM_CUDA_FP8_SKINNY=0 bench base gpt-oss-20b 1,2,4,8,32,128
P=$SK bench skinny gpt-oss-20b 1,2,4,8,32,128
bench moe gpt-oss-20b 1,2,4,8,32,128
P=$SK TANDEM_CUDA_FP8_SKINNY=0 bench base qwen3-30b-a3b 1,8,32
P=$SK bench skinny qwen3-30b-a3b 1,8,32
bench moe qwen3-30b-a3b 1,8,32
P=$SK TANDEM_CUDA_FP8_SKINNY=0 bench base-fp8kv gpt-oss-120b 1,32 --kv-dtype fp8
bench moe-fp8kv gpt-oss-120b 1,32,128 --kv-dtype fp8
t "decode rows done"
PROF=--profile bench moe-prof gpt-oss-20b 32,128
timeout 60 $NEW/bin/bench_ops > $OUT/bench_ops.log 2>&1; t "bench_ops rc $?"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  for f in "fp8 gemv" "moe_experts"; do
    timeout 45 $SAN --tool memcheck --leak-check no --error-exitcode 9 $NEW/bin/test_cuda_ops 7 "$f" > "$OUT/memcheck_${f// /_}.log" 2>&1
    t "memcheck ($f) rc $? $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck_${f// /_}.log" | tail -1) $(grep -cE '^ok' "$OUT/memcheck_${f// /_}.log") ok $(grep -cE '^not ok' "$OUT/memcheck_${f// /_}.log") not ok"
  done
fi
K='regex:gemv|skinny|attn|rms|rope|route|router|gather|embed|add_|sample|logit|kv_append|moe_|quant|to_bf16|bias|gemm|nvjet|xmma|cutlass|sm90|combine'
for b in 128; do
  [ $(( $(date +%s) - T0 )) -gt 380 ] && { t "ncu b$b skipped (time)"; continue; }
  timeout 90 ncu --clock-control none -k "$K" --launch-count 320 --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
    $NEW/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 --batch $b --steps 1 --repeat 1 --cuda-graphs off > $OUT/ncu_b$b.csv 2> $OUT/ncu_b$b.err
  t "ncu b$b rc $?"
  python3 gpu-carry/ncu_table.py $OUT/ncu_b$b.csv > $OUT/ncu_b${b}_table.txt 2>&1
done
gzip -f $OUT/ncu_b32.csv $OUT/ncu_b128.csv 2>/dev/null
rm -rf $OUT/u
grep -E "^not ok" $OUT/ops_*.log $OUT/engine.log $OUT/memcheck_*.log | head -10
grep "fp8 gemv" $OUT/bench_ops.log | awk -F'|' '{printf "%s|%s|%s|%s\n", $2, $3, $4, $5}' | sed 's/fp8 gemv //; s/ +bias//; s/(GPT-OSS)//'
grep -E "q/k/v/o|MoE experts|attention kernel|total|profile, decode" $OUT/b_moe-prof_gpt-oss-20b.log | head -20
for b in 128; do echo "== ncu batch $b"; head -16 $OUT/ncu_b${b}_table.txt; done
cat $OUT/battn.txt
grep -E "DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall|Duration|Registers|No Eligible|Issued Warp" $OUT/ncu_attn.txt | head -20
cat $OUT/rows.txt
t "end"
