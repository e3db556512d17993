#!/usr/bin/env bash
# s9c: warm-cache per-kernel durations of one GPT-OSS-20B batch-1 decode step, old build vs new.
set -u
export PATH=/usr/local/cuda/bin:$PATH
NEWTAR=${NEWTAR:-gpu-carry/pnew2.tar.xz}
mkdir -p $OUT/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT/u && tar xJf $NEWTAR -C $OUT/u
OLD=$OUT/u/prebuilt NEW=$OUT/u/$(basename $NEWTAR .tar.xz)
C=tests/fixtures/configs
K='regex:gemv|attn|rms|rope|route|router|gather|embed|add_|sample|logit|kv_append|moe_|quant|to_bf16|bias|gemm|nvjet|xmma|cutlass|sm90|combine|argmax|copy'
for t in old new; do
  B=$OLD; [ $t = new ] && B=$NEW
  LD_LIBRARY_PATH=$B/lib timeout 120 ncu --cache-control none --clock-control none -k "$K" --launch-count 500 --csv --page raw \
    --metrics gpu__time_duration.sum,launch__grid_size \
    $B/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 \
    --batch ${BATCH:-1} --steps 2 --repeat 1 --cuda-graphs off > $OUT/ncu_$t.csv 2> $OUT/ncu_$t.err
  echo "ncu $t rc $?"
  python3 - $OUT/ncu_$t.csv > $OUT/ncu_$t.txt 2>&1 <<'PY'
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
    k = n.split('(')[0].split('<')[0][:40] + ' g' + g
    a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += v * sc
tot = sum(a[1] for a in agg.values())
print("kernels (second half of", len(data), "):", len(half))
for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:22]:
    print("%-50s %4d %9.1f us %7.2f us each" % (k, a[0], a[1], a[1] / a[0]))
print("sum: %.1f us" % tot)
PY
done
rm -rf $OUT/u
tail -2 $OUT/ncu_new.err
echo OLD; cat $OUT/ncu_old.txt; echo NEW; cat $OUT/ncu_new.txt
