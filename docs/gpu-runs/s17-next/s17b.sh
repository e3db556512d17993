#!/usr/bin/env bash
# s17b: s17a in priority order, each step run only when the call has time
# left for it (need N: N more seconds before the limit L = $1).
# p19 = main bab0ebe + docs/gpu-runs/s16-next/ws-pairs.patch (cluster arrive at CTA
# scope; TANDEM_CUDA_MOE_WS_CLUSTER=1/2/4, default 1) + sampling.cu's block_broadcast
# + the fused rope_kv kernel at every size + attention mode 4 = mode 2 with three
# warpgroups. p20 = p19 + bf16 y (the down product's per-route output).
set -u
T0=$(date +%s)
L=${1:-420}
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
need() { [ $(( $(date +%s) - T0 + $1 )) -lt $L ]; }
mkdir -p $OUT/u && tar xJf gpu-carry/p19.tar.xz -C $OUT/u && tar xJf gpu-carry/p20.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
case "$GPU" in *H200*) HBM=4.229;; *) HBM=3.01;; esac; PK=789.8
B19=$OUT/u/p19/bin; B20=$OUT/u/p20/bin; export LD_LIBRARY_PATH=$OUT/u/p19/lib
C=tests/fixtures/configs
chk() { local tag=$1; shift; timeout 120 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"; }
pre() { # pre BIN TAG MODEL [env]
  local b=$1 tag=$2 m=$3; shift 3
  env "$@" timeout 60 $b/tandem-bench --device cuda --peak-tflops $PK --hbm-tbps $HBM --synthetic $C/$m.json --weights fp8 \
    --prefill 8192 --batch none --repeat 3 --profile > $OUT/pre_${m}_$tag.log 2>&1
  echo "| prefill $tag | $m | $(grep -E '^prefill +prompt' $OUT/pre_${m}_$tag.log | tr -s ' ') |" >> $OUT/rows.txt
}
chk ops_paths $B19/test_cuda_ops 19 "moe_paths/fp8"
chk ops_paths_p20 $B20/test_cuda_ops 19 "moe_paths/fp8"
TANDEM_CUDA_MOE_WS_CLUSTER=2 chk engine_pairs $B20/test_engine_gpu 0
timeout 60 $B19/bench_moe --fp8-only --quick --hbm-tbps $HBM --peak-tflops $PK > $OUT/bench_moe.log 2>&1; t "bench_moe rc $?"
timeout 60 $B20/bench_moe --fp8-only --quick --hbm-tbps $HBM --peak-tflops $PK > $OUT/bench_moe_p20.log 2>&1; t "bench_moe p20 rc $?"
need 60 && { timeout 90 python3 gpu-carry/attn_modes.py $B19 $OUT/attn_modes.json > $OUT/attn_modes.log 2>&1; t "attn modes rc $?"; }
for m in gpt-oss-20b qwen3-30b-a3b; do
  need 60 || break
  pre $B19 single $m TANDEM_CUDA_MOE_WS_CLUSTER=1
  pre $B20 p20_pairs $m TANDEM_CUDA_MOE_WS_CLUSTER=2
  pre $B20 p20_single $m TANDEM_CUDA_MOE_WS_CLUSTER=1
done
need 40 && pre $B19 unfused_rope qwen3-30b-a3b TANDEM_CUDA_FUSED_DECODE=0
t prefill
need 50 && chk ops_attn4 $B19/test_cuda_ops 19 "pool wgmma tma-3wg"
need 40 && chk ops_rope $B19/test_cuda_ops 19 "rope_kv_append"
need 40 && chk ops_sampling $B19/test_cuda_ops 19 "sampl"
need 50 && TANDEM_CUDA_MOE_WS_CLUSTER=2 chk ops_experts_pairs $B20/test_cuda_ops 19 "moe_experts/fp8"
need 70 && { timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k 'regex:^(?!fill_)' --launch-count 45 \
    $B20/tandem-bench --device cuda --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch none --repeat 1 \
    > $OUT/ncu_k_qwen3.csv 2> $OUT/ncu_k_qwen3.err; t "ncu kernels rc $?"; }
bench() { # bench TAG MODEL BATCHES [args]
  local tag=$1 model=$2 b=$3; shift 3
  need 45 || { t "decode $tag $model skipped"; return; }
  timeout 45 $B20/tandem-bench --device cuda --peak-tflops $PK --hbm-tbps $HBM \
    --synthetic $C/$model.json --weights fp8 --prefill none --batch $b --context 8192 --steps 8 --repeat 3 "$@" > $OUT/b_${model}_$tag.log 2>&1
  echo "| decode $tag | $model | $(grep -E '^decode' $OUT/b_${model}_$tag.log | awk '{printf "b%s %s %s  ", $3, $6, $NF}') |" >> $OUT/rows.txt
}
bench bf16 gpt-oss-20b 1,32,128
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
need 50 && [ -n "$SAN" ] && { TANDEM_CUDA_MOE_WS_CLUSTER=2 timeout 45 $SAN --tool memcheck $B20/test_cuda_ops 19 "moe_paths/fp8 dim 200" > $OUT/memcheck_moe.log 2>&1; t "memcheck rc $? $(grep -cE '^ok' $OUT/memcheck_moe.log) ok $(grep -E 'ERROR SUMMARY' $OUT/memcheck_moe.log)"; }
need 40 && { (cd tests/gpu && timeout 35 python3 bench_moe_peer.py $OUT > $OUT/bench_moe_peer.log 2>&1); t "peer rc $?"; }
rm -rf $OUT/u
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/*.txt $OUT/*.err $OUT/*.json $OUT/*.csv $OUT/logs/ 2>/dev/null
cp $OUT/logs/rows.txt $OUT/rows.txt
tar czf $OUT/logs.tgz -C $OUT logs
cat $OUT/logs/ops_*.log $OUT/logs/engine_pairs.log 2>/dev/null | grep -E "^not ok|^#   " | head -10
for f in bench_moe bench_moe_p20; do echo "== $f"; grep -E "prefill|tokens 512" $OUT/logs/$f.log 2>/dev/null | grep -iE "GEMM|per-expert \|" | head -12; done
tail -6 $OUT/logs/bench_moe_peer.log 2>/dev/null
tail -14 $OUT/logs/attn_modes.log 2>/dev/null
python3 gpu-carry/ncu_kernels.py $OUT/logs/ncu_k_qwen3.csv 2>/dev/null | head -40
rm -rf $OUT/logs
cat $OUT/rows.txt
t end
