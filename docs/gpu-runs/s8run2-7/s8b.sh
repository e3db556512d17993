#!/usr/bin/env bash
# s8b (s8run2): persistent streaming FP8 GEMVs (dense, expert gate_up, expert
# down without clusters): their op cases, memcheck of them, the engine check,
# bench_ops in graphs, decode rows old (928bd50) vs new in the same call.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT0=$OUT
mkdir -p $OUT0/u $OUT0/o && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u && tar xJf gpu-carry/prebuilt-old.tar.xz -C $OUT0/o
B=$OUT0/u/prebuilt; O=$OUT0/o/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
for f in gemv matmul_w moe; do
  s=$(date +%s); OPS_FILTER="$f" timeout 150 $B/bin/test_cuda_ops 11 > "$OUT0/ops_$f.log" 2>&1
  echo "| ops $f | rc $? | $(grep -c '^ok' "$OUT0/ops_$f.log") ok | $(grep -c '^not ok' "$OUT0/ops_$f.log") not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
done
s=$(date +%s); timeout 150 $B/bin/test_engine_gpu 0 > $OUT0/engine.log 2>&1
echo "| test_engine_gpu | rc $? | $(grep -c '^ok' $OUT0/engine.log) ok | $(grep -c '^not ok' $OUT0/engine.log) not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
C=tests/fixtures/configs
bench() { local n=$1 bin=$2; shift 2
  timeout 60 $bin/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
for v in new old; do
  bin=$B; [ $v = old ] && bin=$O
  bench oss20b_$v $bin --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,2,4,8,32 --context 8192 --steps 8 --repeat 3
  bench oss120b_$v $bin --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1 --context 8192 --steps 8 --repeat 3
  bench qwen30b_$v $bin --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill none --batch 1 --context 8192 --steps 8 --repeat 3
done
s=$(date +%s); timeout 90 $B/bin/bench_ops > $OUT0/bench_ops.log 2>&1; echo "| bench_ops | rc $? | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
if command -v compute-sanitizer >/dev/null; then
  for f in gemv "moe_paths/fp8 gpt"; do
    s=$(date +%s); OPS_FILTER="$f" timeout 120 compute-sanitizer --tool memcheck $B/bin/test_cuda_ops 11 > "$OUT0/mc_${f//[ \/]/_}.log" 2>&1
    echo "| memcheck $f | rc $? | $(grep -c '^ok' "$OUT0/mc_${f//[ \/]/_}.log") ok | $(grep -c '^not ok' "$OUT0/mc_${f//[ \/]/_}.log") not ok | $(grep 'ERROR SUMMARY' "$OUT0/mc_${f//[ \/]/_}.log" | tail -1) | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
  done
fi
grep -h "^not ok" $OUT0/ops_*.log $OUT0/engine.log | head
(cd $OUT0 && tar czf logs.tgz ops_*.log mc_*.log engine.log b_*.log 2>/dev/null; rm -rf u o ops_*.log mc_*.log engine.log)
echo; grep -E '^\| ' $OUT0/bench_ops.log | grep -i "gemv\|expert\|rmsnorm\|rope\|router" | grep -v cuBLASLt | cut -c1-150; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
