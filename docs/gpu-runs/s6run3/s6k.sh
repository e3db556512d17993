#!/usr/bin/env bash
# s6run3: the session-6 GPU branches merged (fused decode kernels, FP8 GEMV,
# FP8 KV on the tensor-core decode attention + window pool, warp-specialised
# grouped FP8 GEMM): checks, then the engine benchmarks with each switch.
set -u
TSTART=$(date +%s)
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz
OUT0=$OUT
OUT=$OUT0/c BUDGET_S=200 bash tests/gpu/run.sh ops engine > $OUT0/checks.txt 2>&1
echo "checks rc $?"
B=$OUT0/c/unpacked/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
bench() { # NAME LIMIT [ENV=..] -- ARGS...
  local n=$1 lim=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local left=$(( 500 - ($(date +%s) - TSTART) ))
  [ $left -lt 20 ] && { echo "| $n | skipped (time) |" >> $OUT0/rows.txt; return; }
  [ $lim -gt $left ] && lim=$left
  env "${envs[@]}" timeout $lim $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) |attention kernel|MoE experts|KV cache|did not fit|failed' $OUT0/b_$n.log | head -24
  grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b 70 X=1 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
bench oss20b_nofuse_nogemv 40 TANDEM_CUDA_FP8_GEMV=0 TANDEM_CUDA_FUSED_DECODE=0 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
bench oss20b_nogemv 30 TANDEM_CUDA_FP8_GEMV=0 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
bench oss20b_moe7 40 TANDEM_CUDA_MOE_FP8_GEMM=7 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch none --repeat 3 --profile
bench oss20b_kvfp8 40 X=1 -- --synthetic $C/gpt-oss-20b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1,32,128 --context 8192 --steps 8 --repeat 3
bench oss120b_kvfp8 90 X=1 -- --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill 8192 --batch 1,32,128 --context 8192 --steps 8 --repeat 3
bench qwen30b 60 X=1 -- --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch 1,32 --context 8192 --steps 8 --repeat 3 --profile
bench qwen30b_moe7 35 TANDEM_CUDA_MOE_FP8_GEMM=7 -- --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch none --repeat 3
left=$(( 540 - ($(date +%s) - TSTART) ))
if [ $left -gt 25 ]; then
  for b in 1 32 128; do for d in bf16 fp8; do
    TANDEM_CUDA_ATTN_BF16=1 timeout 20 $B/bin/bench_attention decode $b 8192 $d >> $OUT0/attn_decode.txt 2>&1
  done; done
fi
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked c b_*.log 2>/dev/null; rm -rf c b_*.log)
echo; tail -14 $OUT0/checks.txt; echo; cat $OUT0/rows.txt; echo; grep -iE "decode|GB/s" $OUT0/attn_decode.txt | head -12
