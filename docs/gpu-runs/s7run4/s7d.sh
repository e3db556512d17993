#!/usr/bin/env bash
# s7d: the qwen3 fp8 moe_paths case alone (s7c's ops timed out there), then
# the checks, then decode rows with the R>1 GEMV fix and 256-key splits.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT0=$OUT
mkdir -p $OUT0/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u
B=$OUT0/u/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
s=$(date +%s); OPS_FILTER="moe_paths/fp8 qwen3" timeout 100 $B/bin/test_cuda_ops 7 > $OUT0/qwen_paths.log 2>&1
echo "| qwen3 fp8 moe_paths alone | rc $? | $(( $(date +%s) - s )) s | $(grep -c '^ok' $OUT0/qwen_paths.log) ok $(grep -c '^not ok' $OUT0/qwen_paths.log) not ok |" > $OUT0/rows.txt
s=$(date +%s); OPS_FILTER="moe_paths/fp8 gpt-oss" timeout 60 $B/bin/test_cuda_ops 7 > $OUT0/oss_paths.log 2>&1
echo "| oss20b fp8 moe_paths alone | rc $? | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz
s=$(date +%s); OUT=$OUT0/c BUDGET_S=300 bash tests/gpu/run.sh ops engine > $OUT0/checks.txt 2>&1
echo "checks rc $? $(( $(date +%s) - s )) s"
C=tests/fixtures/configs
bench() { local n=$1; shift
  timeout 60 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,2,4,8,32 --context 8192 --steps 8 --repeat 3 --profile
bench oss120b --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1 --context 8192 --steps 8 --repeat 3
bench qwen30b --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch 1 --context 8192 --steps 8 --repeat 3
(cd $OUT0 && tar czf logs.tgz c/*.log c/*.txt b_*.log qwen_paths.log oss_paths.log 2>/dev/null; rm -rf c u)
echo; tail -7 $OUT0/checks.txt; echo; tail -4 $OUT0/qwen_paths.log; echo; grep -E "^#   |^decode" $OUT0/b_oss20b.log | head -20
echo; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
