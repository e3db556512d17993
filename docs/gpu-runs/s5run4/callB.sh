#!/usr/bin/env bash
# s5run4: main with every branch merged and the s5run3 defaults (attention
# wgmma mode 7, per-expert FP8 prefill experts, decode graphs): checks and
# the engine benchmark.
set -u
TSTART=$(date +%s)
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz TANDEM_PREBUILT_CLUSTER=gpu-carry/prebuilt-cluster.tar.xz
OUT0=$OUT
OUT=$OUT0/c BUDGET_S=230 bash tests/gpu/run.sh ops engine cluster > $OUT0/checks.txt 2>&1
echo "checks rc $?"
B=$OUT0/c/unpacked/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
bench() { # NAME LIMIT ARGS...
  local n=$1 lim=$2; shift 2
  local left=$(( 400 - ($(date +%s) - TSTART) ))
  [ $left -lt 25 ] && { echo "| $n | skipped (time) |" >> $OUT0/rows.txt; return; }
  [ $lim -gt $left ] && lim=$left
  timeout $lim $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) |attention kernel|MoE experts|prefill runs' $OUT0/b_$n.log | head -24
  grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b_fp8 75 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192,32768 --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
bench qwen30b_fp8 55 --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 --batch 1,32 --context 8192 --steps 8 --repeat 3 --profile
left=$(( 470 - ($(date +%s) - TSTART) ))
if [ $left -gt 70 ]; then
  OUT=$OUT0/c BUDGET_S=$left bash tests/gpu/run.sh cluster-ranks > $OUT0/checks2.txt 2>&1; echo "cluster-ranks rc $?"
fi
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked c b_*.log checks2.txt 2>/dev/null; rm -rf c b_*.log)
echo; tail -12 $OUT0/checks.txt; tail -6 $OUT0/checks2.txt 2>/dev/null; echo; cat $OUT0/rows.txt
