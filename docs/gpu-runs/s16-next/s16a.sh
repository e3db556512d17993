#!/usr/bin/env bash
# s16a (one call, ~6 min): p17 = main 8b6d16c (the FP8-page TMA decode
# attention and q/k/v quantized once, landed from s15run1's H100 checks).
# 1. checks on p17: engine, the FP8 decode attention and matmul_w_multi op cases;
# 2. the decode table (bf16 KV, and FP8 KV) of the three models, profiles;
# 3. prefill rows of the three models with --profile;
# 4. ncu of the grouped FP8 expert GEMM (moe_gemm_fp8_ws_kernel, prefill
#    8192 tokens) of GPT-OSS-20B and Qwen3: where its time goes (issue 17:
#    experts run at ~36% of the FP8 ceiling);
# 5. the peer: torch._grouped_mm on the same shapes.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/u && tar xJf gpu-carry/p17.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
U=$OUT/u/p17; B=$U/bin; export LD_LIBRARY_PATH=$U/lib
chk() { local tag=$1; shift; timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"; }
chk engine $B/test_engine_gpu 0
chk ops_fp8_decode $B/test_cuda_ops 16 "attention/pool bf16 fp8 KV decode"
chk ops_fp8_pool $B/test_cuda_ops 16 "attention/pool fp8 KV"
chk ops_multi $B/test_cuda_ops 16 matmul_w_multi
C=tests/fixtures/configs
bench() { # bench TAG MODEL BATCHES [args]
  local tag=$1 model=$2 b=$3; shift 3
  timeout 90 $B/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${model}_$tag.log 2>&1
  echo "| $tag | $model | $(grep -E '^decode' $OUT/b_${model}_$tag.log | awk '{printf "b%s %s %s %s  ", $3, $6, $9, $NF}') |" >> $OUT/rows.txt
}
bench bf16 gpt-oss-20b 1,2,4,8,32,64,128
bench kvfp8 gpt-oss-20b 1,8,32,64,128 --kv-dtype fp8
bench bf16 qwen3-30b-a3b 1,8,32,64
bench kvfp8 qwen3-30b-a3b 1,32,128 --kv-dtype fp8
bench bf16 gpt-oss-120b 1,8,32
bench kvfp8 gpt-oss-120b 1,128 --kv-dtype fp8
bench prof gpt-oss-20b 1,32,128 --profile
t decode
pre() { # pre MODEL TOKENS
  timeout 120 $B/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 --synthetic $C/$1.json --weights fp8 \
    --prefill $2 --batch none --repeat 3 --profile > $OUT/pre_$1_$2.log 2>&1
  echo "| prefill | $1 | $2 | $(grep -E '^prefill' $OUT/pre_$1_$2.log | head -3 | tr -s ' ' | tr '\n' ';') |" >> $OUT/rows.txt
}
pre gpt-oss-20b 8192
pre qwen3-30b-a3b 8192
pre gpt-oss-120b 8192
t prefill
for m in gpt-oss-20b qwen3-30b-a3b; do
  timeout 150 ncu --clock-control none -k regex:moe_gemm_fp8_ws --launch-count 2 --set full \
    $B/tandem-bench --device cuda --synthetic $C/$m.json --weights fp8 --prefill 8192 --batch none --repeat 1 \
    > $OUT/ncu_ws_$m.txt 2> $OUT/ncu_ws_$m.err
  t "ncu $m rc $?"
done
(cd tests/gpu && timeout 120 python3 bench_moe_peer.py $OUT > $OUT/bench_moe_peer.log 2>&1); t "peer rc $?"
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/*.txt $OUT/*.err $OUT/*.json $OUT/logs/ 2>/dev/null
cp $OUT/logs/rows.txt $OUT/rows.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O logs/engine.log logs/ops_fp8_decode.log logs/ops_multi.log 2>/dev/null | grep -E "^not ok" | head -10
for m in gpt-oss-20b qwen3-30b-a3b; do tar xzf $OUT/logs.tgz -O logs/ncu_ws_$m.txt | grep -E "moe_gemm_fp8_ws|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc A|Registers Per|Achieved Occ|Shared Memory Throughput" | head -40; done
cat $OUT/rows.txt
t end
