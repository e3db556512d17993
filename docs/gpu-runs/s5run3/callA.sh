#!/usr/bin/env bash
# s5run3: the GPU branches merged (decode graphs + decode mma attention,
# grouped FP8 expert GEMMs, wgmma attention modes 6-9 / head_dim 128, EP on
# the device, same-host shm KV) before they land: checks, then tandem-bench.
set -u
TSTART=$(date +%s)
G=/tmp/gv; mkdir -p $G && tar xJf gpu-carry/gv-tree.tar.xz -C $G
cp gpu-carry/COMMIT-gv $G/COMMIT
cp gpu-carry/prebuilt.tar.xz gpu-carry/prebuilt-cluster.tar.xz $G/
cd $G
export TANDEM_PREBUILT=$G/prebuilt.tar.xz TANDEM_PREBUILT_CLUSTER=$G/prebuilt-cluster.tar.xz
OUT0=$OUT
OUT=$OUT0/checks BUDGET_S=280 bash tests/gpu/run.sh ops engine cluster ranks cluster-ranks > $OUT0/checks.txt 2>&1
echo "checks rc $?"
B=$OUT0/checks/unpacked/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
T0=$(date +%s)
bench() { # NAME LIMIT ENV... -- ARGS...
  local n=$1 lim=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local left=$(( 555 - ($(date +%s) - TSTART) ))
  [ $left -lt 25 ] && { echo "| $n | skipped (time) |" >> $OUT0/rows.txt; return; }
  [ $lim -gt $left ] && lim=$left
  env "${envs[@]}" timeout $lim $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  local rc=$?
  echo "== $n rc=$rc"; grep -E '^(prefill|decode) |attention kernel|MoE experts|CUDA graphs' $OUT0/b_$n.log | head -14
  grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b_default 80 X=1 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
bench qwen30b_default 60 X=1 -- --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch 1,32 --context 8192 --steps 8 --repeat 3 --profile
bench qwen30b_attn7 40 TANDEM_CUDA_ATTN_WGMMA=7 -- --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch none --repeat 3 --profile
bench oss120b_default 60 X=1 -- --synthetic $C/gpt-oss-120b.json --weights fp8 --prefill 8192 --batch 1 --context 8192 --steps 8 --repeat 3 --profile
bench oss20b_moe4 40 TANDEM_CUDA_MOE_FP8_GEMM=4 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch none --repeat 3 --profile
bench oss20b_nographs 40 X=1 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,32,128 --context 8192 --steps 8 --repeat 3 --cuda-graphs off
bench oss120b_moe4 45 TANDEM_CUDA_MOE_FP8_GEMM=4 -- --synthetic $C/gpt-oss-120b.json --weights fp8 --prefill 8192 --batch none --repeat 3 --profile
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked checks b_*.log 2>/dev/null; rm -rf checks b_*.log)
echo; tail -16 $OUT0/checks.txt; echo; cat $OUT0/rows.txt
