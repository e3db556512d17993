#!/usr/bin/env bash
# s11b (s11run2): the TMA decode attention (attention_decode_tma.cu) and the
# merged skinny kernel (2-64 rows, expert down back to one warp a 16-column
# tile) on the GPU: op cases (attention, matmul, moe_experts), memcheck of
# the decode cases, the engine check, bench_attention decode TMA vs cp.async,
# decode rows with TANDEM_CUDA_ATTN_DECODE_TMA=1 (default) and 0 from the
# same programs, the profile, bench_ops, ncu of the decode kernel alone.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/ptma.tar.xz -C $OUT/u
NEW=$OUT/u/ptma
export LD_LIBRARY_PATH=$NEW/lib
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 $NEW/bin/test_engine_gpu 0 > $OUT/engine.log 2>&1
t "engine rc $? $(grep -cE '^ok' $OUT/engine.log) ok $(grep -cE '^not ok' $OUT/engine.log) not ok"
for f in "pool bf16" attention matmul moe_experts; do
  [ "$f" = attention ] && continue
  timeout 150 $NEW/bin/test_cuda_ops 11 "$f" > "$OUT/ops_${f// /_}.log" 2>&1
  t "ops $f rc $? $(grep -cE '^ok' "$OUT/ops_${f// /_}.log") ok $(grep -cE '^not ok' "$OUT/ops_${f// /_}.log") not ok"
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
timeout 120 $SAN --tool memcheck --leak-check no --error-exitcode 9 $NEW/bin/test_cuda_ops 7 "pool bf16 decode" > $OUT/memcheck_decode.log 2>&1
t "memcheck (pool bf16 decode) rc $? $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' $OUT/memcheck_decode.log | tail -1) $(grep -cE '^ok' $OUT/memcheck_decode.log) ok $(grep -cE '^not ok' $OUT/memcheck_decode.log) not ok"
for tma in 1 0; do
  for b in 8 32 128; do TANDEM_CUDA_ATTN_DECODE_TMA=$tma TANDEM_CUDA_ATTN_BF16=1 timeout 30 $NEW/bin/bench_attention decode $b 8192 bf16 >> $OUT/battn.txt 2>&1; done
  TANDEM_CUDA_ATTN_DECODE_TMA=$tma TANDEM_CUDA_ATTN_BF16=1 timeout 30 $NEW/bin/bench_attention decode 32 8192 bf16 qwen3 >> $OUT/battn.txt 2>&1
done
t "bench_attention done"
C=tests/fixtures/configs
bench() { # bench TAG MODEL BATCHES [args]
  local tag=$1 model=$2 b=$3; shift 3
  timeout 100 $NEW/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 ${PROF:-} "$@" > $OUT/b_${tag}_$model.log 2>&1
  echo "| $tag | $model | $(grep -E '^decode' $OUT/b_${tag}_$model.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
TANDEM_CUDA_ATTN_DECODE_TMA=0 bench cpasync gpt-oss-20b 1,8,32,128
bench tma gpt-oss-20b 1,2,4,8,32,64,128
TANDEM_CUDA_ATTN_DECODE_TMA=0 bench cpasync qwen3-30b-a3b 1,8,32
bench tma qwen3-30b-a3b 1,8,32
t "decode rows done"
PROF=--profile bench tma-prof gpt-oss-20b 32,128
timeout 60 $NEW/bin/bench_ops > $OUT/bench_ops.log 2>&1; t "bench_ops rc $?"
TANDEM_CUDA_ATTN_BF16=1 timeout 60 ncu --clock-control none -k regex:attn_decode --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  $NEW/bin/bench_attention decode 128 8192 bf16 > $OUT/ncu_attn.txt 2>&1
t "ncu attention rc $?"
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
grep -E "^not ok" -r $OUT/ 2>/dev/null | head; tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
tar xzf $OUT/logs.tgz -O logs/bench_ops.log | grep "fp8 gemv\|skinny\|cuBLASLt" | grep -E "\| (32|64|128) x" | head -12
tar xzf $OUT/logs.tgz -O logs/b_tma-prof_gpt-oss-20b.log | grep -E "q/k/v/o|MoE experts|attention kernel|total|profile, decode" | head -12
sed 's/ ms_min.*bytes=/ bytes=/' $OUT/battn.txt
grep -E "DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Block Limit Shared" $OUT/ncu_attn.txt | head -12
cat $OUT/rows.txt
t "end"
