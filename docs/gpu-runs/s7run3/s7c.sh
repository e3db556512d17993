#!/usr/bin/env bash
# s7c: bulk-copy (TMA) FP8 GEMVs and expert GEMVs, q/k/v in one launch, parallel split combine, 64-key splits: checks + memcheck + decode/prefill rows + ncu.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz
OUT0=$OUT
OUT=$OUT0/c BUDGET_S=240 bash tests/gpu/run.sh ops engine ranks > $OUT0/checks.txt 2>&1
echo "checks rc $?"
B=$OUT0/c/unpacked/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
C=tests/fixtures/configs
for f in gemv matmul_w_multi moe_router "pool decode"; do
  OPS_FILTER="$f" timeout 80 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 $B/bin/test_cuda_ops 7 > $OUT0/memcheck_${f// /_}.log 2>&1
  echo "| memcheck $f | rc $? | $(grep -c '^ok' $OUT0/memcheck_${f// /_}.log) ok | $(grep -c '^not ok' $OUT0/memcheck_${f// /_}.log) not ok | $(grep -oE 'ERROR SUMMARY: [0-9]+' $OUT0/memcheck_${f// /_}.log | tail -1) |" >> $OUT0/memcheck.txt
done
bench() { local n=$1; shift
  timeout 90 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
bench oss20b --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192 --batch 1,2,4,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
bench oss120b --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
bench qwen30b --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill none --batch 1,32 --context 8192 --steps 8 --repeat 3
timeout 90 $B/bin/bench_ops > $OUT0/bench_ops.log 2>&1; echo "bench_ops rc $?"
K='regex:gemv|attn|rms|rope|route|router|gather|embed|add_|sample|logit|kv_append|moe_|quant|to_bf16|bias|gemm|nvjet|xmma|cutlass|sm90|combine'
timeout 200 ncu --clock-control none -k "$K" --launch-count 340 --csv --page raw \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
  $B/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 --batch 1 --steps 1 --repeat 1 --cuda-graphs off > $OUT0/ncu_b1.csv 2> $OUT0/ncu_b1.err; echo "ncu rc $?"
python3 - $OUT0/ncu_b1.csv > $OUT0/ncu_b1_table.txt 2>&1 <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None; data = []; units = {}
for r in rows:
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and not units and len(r) == len(hdr): units = dict(zip(hdr, r)); continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        try: float(d['gpu__time_duration.sum'].replace(',','')); data.append(d)
        except: pass
f = lambda x: float(x.replace(',', '')) if x.replace(',', '').replace('.', '').isdigit() else 0.0
agg = collections.OrderedDict()
for d in data:
    n = d['Kernel Name'].split('(')[0].replace('void ', '').replace('<unnamed>::', '')[:44]
    a = agg.setdefault(n, [0, 0.0, 0.0, 0.0, d['launch__grid_size'], d['launch__registers_per_thread']])
    a[0] += 1; a[1] += f(d['gpu__time_duration.sum']); a[2] += f(d['dram__bytes_read.sum']); a[3] += f(d['dram__throughput.avg.pct_of_peak_sustained_elapsed'])
print("units", units.get('gpu__time_duration.sum'), units.get('dram__bytes_read.sum'), "kernels", len(data))
print("%-44s %5s %9s %8s %8s %6s %6s %5s" % ("kernel", "n", "total us", "mean us", "MB", "dram%", "grid", "regs"))
tot = 0
for n, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    tot += a[1]
    print("%-44s %5d %9.1f %8.2f %8.2f %6.1f %6s %5s" % (n, a[0], a[1]/1e3, a[1]/1e3/a[0], a[2]/1e6/a[0], a[3]/a[0], a[4], a[5]))
print("sum %.1f us" % (tot/1e3))
PY
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked c b_*.log ncu_b1.csv memcheck_*.log 2>/dev/null; rm -rf c ncu_b1.csv memcheck_*.log)
echo; tail -8 $OUT0/checks.txt; cat $OUT0/memcheck.txt; echo; grep -E "^#   |^decode" $OUT0/b_oss20b.log | head -30
echo; grep -E "gemv .* 1 x|gemv .* 8 x|experts .*1 token|router.*1 rows" $OUT0/bench_ops.log | head -16
echo; head -30 $OUT0/ncu_b1_table.txt; echo; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
