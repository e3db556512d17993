#!/usr/bin/env bash
# s8d (s8run5, s8run6 with P = copies started by several warps): the streaming GEMVs' chunk order, ring depth and grid as
# experiments (env knobs): ncu time of the GEMV kernels per variant, decode b1.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
OUT0=$OUT
mkdir -p $OUT0/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u
B=$OUT0/u/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
s=$(date +%s); OPS_FILTER=gemv timeout 100 $B/bin/test_cuda_ops 11 > $OUT0/ops_gemv.log 2>&1
echo "| ops gemv | rc $? | $(grep -c '^ok' $OUT0/ops_gemv.log) ok | $(grep -c '^not ok' $OUT0/ops_gemv.log) not ok |" >> $OUT0/rows.txt
timeout 60 $B/bin/test_engine_gpu 0 > $OUT0/engine.log 2>&1
echo "| engine | rc $? | $(grep -c '^ok' $OUT0/engine.log) ok | $(grep -c '^not ok' $OUT0/engine.log) not ok |" >> $OUT0/rows.txt
for v in "I1 S0 G2 P0" "I1 S0 G2 P1" "I0 S0 G2 P1" "I1 S8 G1 P1" "I1 S2 G2 P1"; do
  set -- $v; export TANDEM_CUDA_GEMV_INTERLEAVE=${1#I} TANDEM_CUDA_GEMV_STAGES=${2#S} TANDEM_CUDA_GEMV_GRID=${3#G} TANDEM_CUDA_GEMV_SPREAD=${4#P}
  timeout 60 ncu --clock-control none -k "regex:gemv" --launch-count 4 --csv --page raw --metrics gpu__time_duration.sum \
    $B/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 --batch 1 --steps 1 --repeat 1 --cuda-graphs off > $OUT0/ncu.csv 2>/dev/null
  t=$(python3 -c "
import csv,sys
rows=list(csv.reader(open('$OUT0/ncu.csv'))); h=None; out=[]
for r in rows:
    if 'Kernel Name' in r: h=r; continue
    if h and len(r)==len(h):
        d=dict(zip(h,r))
        try: out.append('%s %.1f' % (d['Kernel Name'][:12], float(d['gpu__time_duration.sum'].replace(',',''))/1000))
        except: pass
print(' / '.join(out))")
  b=$(timeout 60 $B/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1 --context 8192 --steps 8 --repeat 3 2>&1 | grep -E '^decode' | awk '{print $6}')
  echo "| $v | $t | b1 $b ms |" >> $OUT0/rows.txt
done
rm -rf $OUT0/u $OUT0/ncu.csv
cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
