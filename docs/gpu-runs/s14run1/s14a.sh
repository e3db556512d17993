#!/usr/bin/env bash
# s14a (one call, ~8 min): main's tree p13 checked (c26a4a3's split-KV
# helpers and session 13's attention_tile_softmax.cuh have never run on a
# GPU), then what issue 17 has never had measured:
# the wgmma attention modes 5, 6, 8, 9 next to mode 2/7 and torch SDPA
# cuDNN / flash / flex_attention at 8192 and 32768, and the prefill rows of
# the three models on the landed tree. Programs: gpu-carry/p13.tar.xz
# (tests/gpu/make_prebuilt.sh of session 13's last kernel commit).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
t() { echo "[$(el) s] $*"; }
left() { [ $(el) -lt $1 ]; }
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/u && tar xJf gpu-carry/p13.tar.xz -C $OUT/u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
B=$OUT/u/p13/bin
chk() { # chk TAG PROG [args]
  local tag=$1; shift
  LD_LIBRARY_PATH=$OUT/u/p13/lib timeout 150 "$@" > $OUT/$tag.log 2>&1
  t "$tag rc $? $(grep -cE '^ok' $OUT/$tag.log) ok $(grep -cE '^not ok' $OUT/$tag.log) not ok"
}
chk engine $B/test_engine_gpu 0
chk ops_attention $B/test_cuda_ops 13 attention
chk ops_pool $B/test_cuda_ops 13 pool
# the attention modes next to the peers (run.sh: ceilings, then bench_attention.py)
OUT=$OUT/rs TANDEM_PREBUILT=$OUT/u/p13 BUDGET_S=300 BENCH_WGMMA_MODES="9 8 6 5 2" BENCH_QWEN3_MODES="7 6 8" \
  bash tests/gpu/run.sh ceilings bench-attention > $OUT/runsh_attention.log 2>&1
t "attention rc $?"
grep -E '^\| ' $OUT/rs/bench_attention.log | head -40
C=tests/fixtures/configs
pre() { # pre MODEL LENGTHS
  LD_LIBRARY_PATH=$OUT/u/p13/lib timeout 100 $B/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$1.json --weights fp8 --prefill $2 --batch none --repeat 3 --profile > $OUT/pre_$1.log 2>&1
  echo "| $1 | $(grep -E '^prefill' $OUT/pre_$1.log | awk '{printf "%s tok %s ms (floor %s)  ", $3, $4, $6}') |" >> $OUT/rows.txt
}
left 470 && pre gpt-oss-20b 8192,32768
left 510 && pre qwen3-30b-a3b 8192
case "$GPU" in *H200*) left 530 && pre gpt-oss-120b 8192;; esac
t "prefill"
rm -rf $OUT/u $OUT/rs/ab
mkdir -p $OUT/logs && mv $OUT/*.log $OUT/rs $OUT/logs/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
tar xzf $OUT/logs.tgz -O 2>/dev/null | grep -E "^not ok" | head -10
cat $OUT/rows.txt
t "end"
