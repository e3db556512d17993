#!/usr/bin/env bash
# s17c: the shortest call that can land session 17's kernels (s17b in the
# order that unlocks the most; each step only if its time fits L = $1).
# p20 = main bab0ebe + ws-pairs.patch + s17-kernels.patch + bf16y.patch;
# p19 = the same without bf16y.patch (docs/gpu-runs/s17-next/README.md).
set -u
T0=$(date +%s)
L=${1:-240}
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
need() { [ $(( $(date +%s) - T0 + $1 )) -lt $L ]; }
mkdir -p $OUT/u && tar xJf gpu-carry/p20.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
case "$GPU" in *H200*) HBM=4.229;; *) HBM=3.01;; esac; PK=789.8
B=$OUT/u/p20/bin; export LD_LIBRARY_PATH=$OUT/u/p20/lib
C=tests/fixtures/configs
chk() { local tag=$1; shift; timeout 60 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"; }
pre() { # pre TAG MODEL [env]
  local tag=$1 m=$2; shift 2
  env "$@" timeout 40 $B/tandem-bench --device cuda --peak-tflops $PK --hbm-tbps $HBM --synthetic $C/$m.json --weights fp8 \
    --prefill 8192 --batch none --repeat 3 --profile > $OUT/pre_${m}_$tag.log 2>&1
  echo "| prefill $tag | $m | $(grep -E '^prefill +prompt' $OUT/pre_${m}_$tag.log | tr -s ' ') |" | tee -a $OUT/rows.txt
}
chk ops_rope $B/test_cuda_ops 19 "rope_kv_append"
chk ops_sampling $B/test_cuda_ops 19 "sampl"
chk ops_paths $B/test_cuda_ops 19 "moe_paths/fp8"
chk ops_attn4 $B/test_cuda_ops 19 "pool wgmma tma-3wg"
timeout 40 $B/bench_moe --fp8-only --quick --hbm-tbps $HBM --peak-tflops $PK > $OUT/bench_moe_p20.log 2>&1; t "bench_moe p20 rc $?"
grep -E "prefill|tokens 512" $OUT/bench_moe_p20.log | grep -iE "GEMM|per-expert \|" | head -12
need 45 && pre single qwen3-30b-a3b
need 45 && pre pairs qwen3-30b-a3b TANDEM_CUDA_MOE_WS_CLUSTER=2
need 45 && pre unfused_rope qwen3-30b-a3b TANDEM_CUDA_FUSED_DECODE=0
need 50 && TANDEM_CUDA_MOE_WS_CLUSTER=2 chk engine_pairs $B/test_engine_gpu 0
need 40 && { timeout 40 python3 gpu-carry/attn_modes.py $B $OUT/attn_modes.json 8192 > $OUT/attn_modes.log 2>&1; t "attn rc $?"; tail -8 $OUT/attn_modes.log; }
if need 40; then
  mkdir -p $OUT/u && tar xJf gpu-carry/p19.tar.xz -C $OUT/u
  LD_LIBRARY_PATH=$OUT/u/p19/lib timeout 40 $OUT/u/p19/bin/bench_moe --fp8-only --quick --hbm-tbps $HBM --peak-tflops $PK > $OUT/bench_moe_p19.log 2>&1; t "bench_moe p19 rc $?"
  grep -E "prefill|tokens 512" $OUT/bench_moe_p19.log | grep -iE "GEMM|per-expert \|" | head -12
fi
need 35 && pre single gpt-oss-20b
need 35 && pre pairs gpt-oss-20b TANDEM_CUDA_MOE_WS_CLUSTER=2
rm -rf $OUT/u
cat $OUT/ops_*.log $OUT/engine_pairs.log 2>/dev/null | grep -E "^not ok|^#   " | head -10
t end
