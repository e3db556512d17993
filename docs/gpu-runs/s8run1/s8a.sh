#!/usr/bin/env bash
# s8a (s8run1): 928bd50 as committed: the attention op cases (4066a08's split
# combine in attention.cu), the GEMV / expert op cases, the engine check,
# bench_ops (the 200-call GEMV rows, first run), decode rows.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT0=$OUT
mkdir -p $OUT0/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u
B=$OUT0/u/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
for f in attention gemv matmul_w "moe_paths/fp8 gpt" moe_router; do
  s=$(date +%s); OPS_FILTER="$f" timeout 150 $B/bin/test_cuda_ops 11 > "$OUT0/ops_${f//[ \/]/_}.log" 2>&1
  echo "| ops $f | rc $? | $(grep -c '^ok' "$OUT0/ops_${f//[ \/]/_}.log") ok | $(grep -c '^not ok' "$OUT0/ops_${f//[ \/]/_}.log") not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
done
s=$(date +%s); timeout 150 $B/bin/test_engine_gpu 0 > $OUT0/engine.log 2>&1
echo "| test_engine_gpu | rc $? | $(grep -c '^ok' $OUT0/engine.log) ok | $(grep -c '^not ok' $OUT0/engine.log) not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
s=$(date +%s); timeout 90 $B/bin/bench_ops > $OUT0/bench_ops.log 2>&1; echo "| bench_ops | rc $? | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
C=tests/fixtures/configs
bench() { local n=$1; shift
  timeout 60 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
grep -h "^not ok" $OUT0/ops_*.log $OUT0/engine.log | head
(cd $OUT0 && tar czf logs.tgz ops_*.log engine.log b_*.log 2>/dev/null; rm -rf u ops_*.log engine.log)
echo; grep -E '^\| ' $OUT0/bench_ops.log | grep -i "gemv\|expert" ; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
