#!/usr/bin/env bash
# s8f (s8run8): the committed kernels (928bd50 + bench_ops timing in graphs):
# the whole op table and the engine check (tests/gpu/run.sh ops engine:
# 4066a08's split combine in attention.cu), bench_ops' decode rows in
# graphs, the decode table.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT0=$OUT
TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz OUT=$OUT0/run BUDGET_S=500 bash tests/gpu/run.sh ops engine > $OUT0/checks.txt 2>&1
echo "run.sh ops engine rc $?"
B=$OUT0/run/unpacked/prebuilt; [ -d $B ] || B=$(dirname $(find $OUT0/run -name test_cuda_ops -path '*bin*' | head -1))/..
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
timeout 60 $B/bin/bench_ops > $OUT0/bench_ops.log 2>&1; echo "bench_ops rc $?"
C=tests/fixtures/configs
bench() { local n=$1; shift
  timeout 80 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,2,4,8,32,128 --context 8192 --steps 8 --repeat 3
bench oss120b --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
bench qwen30b --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
(cd $OUT0 && tar czf logs.tgz run/*.log b_*.log 2>/dev/null; rm -rf run/unpacked run/*/ 2>/dev/null)
tail -25 $OUT0/checks.txt; echo; grep -E '^\| ' $OUT0/bench_ops.log | grep -iE "gemv|expert|rmsnorm \(|rope|router" | grep -v "8192" | cut -c1-160; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
