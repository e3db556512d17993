#!/usr/bin/env bash
# s16c: s16b again with the cluster arrive fixed (release.cta); p19 = main 8b6d16c + the grouped FP8 GEMM in
# pairs of blocks (TMA multicast of the weight tiles;
# TANDEM_CUDA_MOE_WS_CLUSTER=2, default still 1). Decode paths are main's.
# (and =4: clusters of four blocks).
# 1. checks: moe_experts/fp8 op cases (clusters vs single blocks bit for bit,
#    vs CPU), engine, the FP8 decode attention and matmul_w_multi cases;
# 2. bench_moe --fp8-only --quick (the pairs row next to the single one);
# 3. prefill rows of the three models, pairs vs single, --profile;
# 4. ncu of the grouped GEMM, single vs pairs (GPT-OSS-20B 8192 tokens);
# 5. the decode table (bf16 and FP8 KV) with profiles;
# 6. memcheck of moe_experts/fp8; the torch peer (_grouped_mm).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
mkdir -p $OUT/u && tar xJf gpu-carry/p19.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
U=$OUT/u/p19; B=$U/bin; export LD_LIBRARY_PATH=$U/lib
chk() { local tag=$1; shift; timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"; }
chk ops_paths $B/test_cuda_ops 19 "moe_paths/fp8"
TANDEM_CUDA_MOE_WS_CLUSTER=2 chk engine_pairs $B/test_engine_gpu 0
C=tests/fixtures/configs
timeout 100 $B/bench_moe --fp8-only --quick --hbm-tbps 4.229 --peak-tflops 789.8 > $OUT/bench_moe.log 2>&1; t "bench_moe rc $?"
pre() { # pre TAG MODEL TOKENS [env]
  local tag=$1 m=$2 n=$3; shift 3
  env "$@" timeout 120 $B/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 --synthetic $C/$m.json --weights fp8 \
    --prefill $n --batch none --repeat 3 --profile > $OUT/pre_${m}_${n}_$tag.log 2>&1
  echo "| prefill $tag | $m | $n | $(grep -E '^prefill +prompt' $OUT/pre_${m}_${n}_$tag.log | tr -s ' ') |" >> $OUT/rows.txt
}
for m in gpt-oss-20b qwen3-30b-a3b; do
  pre pairs $m 8192 TANDEM_CUDA_MOE_WS_CLUSTER=2
  pre quads $m 8192 TANDEM_CUDA_MOE_WS_CLUSTER=4
  pre single $m 8192 TANDEM_CUDA_MOE_WS_CLUSTER=1
done
t prefill
for cl in 2 4; do
  left 330 || { t "ncu $cl skipped"; continue; }
  TANDEM_CUDA_MOE_WS_CLUSTER=$cl timeout 100 ncu --clock-control none -k regex:moe_gemm_fp8_ws_kernel --launch-count 2 --set full \
    $B/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch none --repeat 1 \
    > $OUT/ncu_ws_cl$cl.txt 2> $OUT/ncu_ws_cl$cl.err
  t "ncu cluster $cl rc $?"
done
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/*.txt $OUT/*.err $OUT/*.json $OUT/logs/ 2>/dev/null
cp $OUT/logs/rows.txt $OUT/rows.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O logs/ops_paths.log logs/engine_pairs.log 2>/dev/null | grep -E "^not ok|^#   " | head -10
tar xzf $OUT/logs.tgz -O logs/bench_moe.log | grep -E "prefill|tokens 512" | grep -iE "GEMM|per-expert \|" | head -20
for cl in 1 2 4; do tar xzf $OUT/logs.tgz -O logs/ncu_ws_cl$cl.txt 2>/dev/null | grep -E "moe_gemm_fp8_ws_kernel|^ +Duration|Compute \(SM\) Throughput|^ +Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc A" | head -24; done
cat $OUT/rows.txt
t end
