#!/usr/bin/env bash
# s9b (s9run1): the norms folded into q/k/v and the router
# (kn_matmul_w_multi_normed, kn_moe_router_normed): their op cases and the
# neighbours', test_engine_gpu, decode rows old vs new in the same run, and
# a warm-cache per-kernel profile of a batch-1 step.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
NEWTAR=${NEWTAR:-gpu-carry/pnew2.tar.xz}
mkdir -p $OUT/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT/u && tar xJf $NEWTAR -C $OUT/u
OLD=$OUT/u/prebuilt NEW=$OUT/u/$(basename $NEWTAR .tar.xz)
C=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
i=0
for f in normed moe_router gemv norm matmul_w_multi "pool bf16" "seq decode"; do
  i=$((i+1))
  CMOCKA_MESSAGE_OUTPUT=TAP LD_LIBRARY_PATH=$NEW/lib timeout 120 $NEW/bin/test_cuda_ops 1796415011 "$f" > $OUT/ops_$i.log 2>&1
  echo "| ops $f | rc $? | ok $(grep -c '^ok' $OUT/ops_$i.log) | not ok $(grep -c '^not ok' $OUT/ops_$i.log) |" >> $OUT/rows.txt
done
echo "ops done $(( $(date +%s) - T0 )) s"
CMOCKA_MESSAGE_OUTPUT=TAP LD_LIBRARY_PATH=$NEW/lib timeout 200 $NEW/bin/test_engine_gpu > $OUT/engine.log 2>&1
echo "| engine | rc $? | ok $(grep -c '^ok' $OUT/engine.log) | not ok $(grep -c '^not ok' $OUT/engine.log) |" >> $OUT/rows.txt
echo "engine done $(( $(date +%s) - T0 )) s"
bench() { # bench TAG BUILD MODEL BATCHES
  LD_LIBRARY_PATH=$2/lib timeout 90 $2/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 \
    --synthetic $C/$3.json --weights fp8 --prefill none --batch $4 --context 8192 --steps 8 --repeat 3 > $OUT/b_$1_$3.log 2>&1
  echo "| $1 | $3 | $(grep -E '^decode' $OUT/b_$1_$3.log | awk '{printf "b%s %s  ", $3, $6}') |" >> $OUT/rows.txt
}
bench old $OLD gpt-oss-20b 1,8,32,128
bench new $NEW gpt-oss-20b 1,8,32,128
bench old $OLD gpt-oss-20b 1
bench new $NEW gpt-oss-20b 1
bench new $NEW gpt-oss-120b 1,32
bench new $NEW qwen3-30b-a3b 1,32
echo "bench done $(( $(date +%s) - T0 )) s"
LD_LIBRARY_PATH=$NEW/lib timeout 120 ncu --cache-control none --clock-control none --launch-count 400 --csv --page raw \
  --metrics gpu__time_duration.sum,launch__grid_size \
  $NEW/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 \
  --batch 1 --steps 2 --repeat 1 --cuda-graphs off > $OUT/ncu_warm.csv 2> $OUT/ncu_warm.err; echo "ncu rc $?"
python3 - $OUT/ncu_warm.csv > $OUT/ncu_warm_table.txt 2>&1 <<'PY'
import csv, sys, collections
hdr = None; data = []; unit = None
for r in csv.reader(open(sys.argv[1])):
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        try: v = float(d['gpu__time_duration.sum'].replace(',', ''))
        except: unit = d.get('gpu__time_duration.sum'); continue
        data.append((d['Kernel Name'], v, d.get('launch__grid_size', '')))
sc = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}.get(unit, 1e-3)
half = data[len(data) // 2:]
agg = collections.OrderedDict()
for n, v, g in half:
    k = n.split('(')[0].split('<')[0][:44] + ' g' + g
    a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += v * sc
tot = sum(a[1] for a in agg.values())
print("kernels in the second half:", len(half), "unit", unit)
for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("%-56s %4d %9.1f us %7.2f us each" % (k, a[0], a[1], a[1] / a[0]))
print("sum of kernel durations (warm, serialized): %.1f us" % tot)
PY
rm -rf $OUT/u
cat $OUT/smi.txt
grep -h '^not ok' $OUT/ops_*.log $OUT/engine.log | head -20
echo; tail -3 $OUT/ncu_warm.err; head -40 $OUT/ncu_warm_table.txt
echo; cat $OUT/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
