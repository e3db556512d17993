#!/usr/bin/env bash
# s7a: where a GPT-OSS-20B FP8 batch-1 decode step goes, per kernel (ncu),
# and the FP8 GEMV rows of bench_ops.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $OUT/u && tar xJf gpu-carry/pb.tar.xz -C $OUT/u
B=$OUT/u/pb7
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
which ncu > $OUT/ncu_which.txt 2>&1
BENCH="$B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192"
timeout 60 $BENCH --batch 1,32 --steps 8 --repeat 3 > $OUT/b1.log 2>&1; echo "bench rc $?"
timeout 90 $B/bin/bench_ops > $OUT/bench_ops.log 2>&1; echo "bench_ops rc $?"
K='regex:gemv|attn|rms|rope|route|router|gather|embed|add_|sample|logit|kv_append|moe_|quant|to_bf16|bias|gemm|nvjet|xmma|cutlass|sm90'
timeout 240 ncu --clock-control none -k "$K" --launch-count 320 --csv --page raw \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
  $BENCH --batch 1 --steps 1 --repeat 1 --cuda-graphs off > $OUT/ncu_b1.csv 2> $OUT/ncu_b1.err; echo "ncu rc $?"
python3 - $OUT/ncu_b1.csv > $OUT/ncu_b1_table.txt 2>&1 <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
data = []
units = {}
for r in rows:
    if 'Kernel Name' in r:
        hdr = r; continue
    if hdr and not units and len(r) == len(hdr):
        units = dict(zip(hdr, r)); print('units:', units.get('gpu__time_duration.sum'), units.get('dram__bytes_read.sum'))
    if hdr and len(r) == len(hdr) and r[0] != '' and not r[0].startswith('=='):
        d = dict(zip(hdr, r))
        try: float(d['gpu__time_duration.sum'].replace(',',''))
        except: continue
        data.append(d)
def f(x):
    try: return float(x.replace(',', ''))
    except: return 0.0
agg = collections.OrderedDict()
for d in data:
    n = d['Kernel Name'].split('(')[0].split('<')[0][:40]
    a = agg.setdefault(n, [0, 0.0, 0.0, 0.0, d.get('launch__grid_size',''), d.get('launch__registers_per_thread',''), 0.0])
    a[0] += 1; a[1] += f(d['gpu__time_duration.sum']); a[2] += f(d['dram__bytes_read.sum']); a[3] += f(d['dram__throughput.avg.pct_of_peak_sustained_elapsed']); a[6] += f(d['sm__warps_active.avg.pct_of_peak_sustained_active'])
print("kernels profiled:", len(data))
print("%-40s %5s %10s %9s %8s %7s %6s %5s %6s" % ("kernel", "n", "total us", "mean us", "MB read", "dram%", "grid", "regs", "occ%"))
tot = 0
for n, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    tot += a[1]
    unit = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}.get(units.get('gpu__time_duration.sum'), 1e-3)
    print("%-40s %5d %10.1f %9.2f %8.2f %7.1f %6s %5s %6.1f" % (n, a[0], a[1]*unit, a[1]*unit/a[0], a[2]*{'byte':1,'Kbyte':1e3,'Mbyte':1e6,'Gbyte':1e9}.get(units.get('dram__bytes_read.sum'),1)/1e6/a[0], a[3]/a[0], a[4], a[5], a[6]/a[0]))
print("sum of kernel durations: %.1f us" % (tot*unit))
PY
echo; cat $OUT/smi.txt; grep -E "^decode|^#   " $OUT/b1.log | head -24
echo; grep -E "gemv|experts" $OUT/bench_ops.log | head -40
echo; tail -5 $OUT/ncu_b1.err; head -60 $OUT/ncu_b1_table.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
