#!/usr/bin/env bash
# s14d (~4 min): the wgmma attention modes next to torch SDPA cuDNN / flash
# and flex_attention (bench_attention.py fixed: the decode rows now expect
# the TMA decode kernel, the default since s11), on p14's programs.
set -u
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/p14.tar.xz -C $OUT/u
P=$OUT/u/p14
OUT=$OUT/rs TANDEM_PREBUILT=$P BUDGET_S=260 BENCH_FP32=0 BENCH_WGMMA_MODES="9 8 6 5 2" BENCH_QWEN3_MODES="7 6 8" \
  timeout 280 bash tests/gpu/run.sh ceilings bench-attention > $OUT/runsh_attention.log 2>&1
echo "attention rc $?"
tail -5 $OUT/runsh_attention.log
rm -rf $OUT/u $OUT/rs/ab $OUT/rs/unpacked
grep -E '^GPU|^\| ' $OUT/rs/bench_attention.log | head -60
