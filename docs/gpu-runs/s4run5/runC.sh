#!/usr/bin/env bash
# s4run5: GPT-OSS / Qwen3 prefill with the wgmma sink attention (mode 2) vs the mma.sync default, tree 3035ef1
set -u
D=$1
mkdir -p /tmp/pb && tar xJf gpu-carry/pb-wg.tar.xz -C /tmp/pb
B=/tmp/pb/pb-wg/bin/tandem-bench
export LD_LIBRARY_PATH=/tmp/pb/pb-wg/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
run() { # NAME MODE ARGS
  local n=$1 m=$2; shift 2
  TANDEM_CUDA_ATTN_WGMMA=$m timeout 150 $B --device cuda --peak-tflops 790 --hbm-tbps 4.24 "$@" > $D/$n.log 2>&1
  echo "== $n (TANDEM_CUDA_ATTN_WGMMA=$m) rc=$?"; grep -E '^prefill |attention kernel|prefill runs' $D/$n.log | head -6
}
run oss20b_fp8_mode0 0 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192,32768 --repeat 3 --profile --batch none
run oss20b_fp8_mode2 2 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192,32768 --repeat 3 --profile --batch none
run oss120b_fp8_mode2 2 --synthetic $C/gpt-oss-120b.json --weights fp8 --prefill 8192 --repeat 3 --batch none
run qwen30b_fp8_mode2 2 --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --repeat 3 --batch none
