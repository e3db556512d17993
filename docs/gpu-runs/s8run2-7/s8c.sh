#!/usr/bin/env bash
# s8c (s8run3, s8run4): the streaming GEMVs (s8run4: scales by the bulk copies, epilogue loads before the wait):
# op cases, engine, decode new vs old, bench_ops, ncu of the GEMV kernels
# (duration, DRAM bytes, achieved occupancy) over one eager step.
set -u
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT0=$OUT
mkdir -p $OUT0/u $OUT0/o && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u && tar xJf gpu-carry/prebuilt-old.tar.xz -C $OUT0/o
B=$OUT0/u/prebuilt; O=$OUT0/o/prebuilt
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
for f in gemv "moe_paths/fp8 gpt" matmul_w_multi; do
  s=$(date +%s); OPS_FILTER="$f" timeout 150 $B/bin/test_cuda_ops 11 > "$OUT0/ops_${f//[ \/]/_}.log" 2>&1
  echo "| ops $f | rc $? | $(grep -c '^ok' "$OUT0/ops_${f//[ \/]/_}.log") ok | $(grep -c '^not ok' "$OUT0/ops_${f//[ \/]/_}.log") not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
done
s=$(date +%s); timeout 150 $B/bin/test_engine_gpu 0 > $OUT0/engine.log 2>&1
echo "| test_engine_gpu | rc $? | $(grep -c '^ok' $OUT0/engine.log) ok | $(grep -c '^not ok' $OUT0/engine.log) not ok | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
C=tests/fixtures/configs
bench() { local n=$1 bin=$2; shift 2
  timeout 60 $bin/bin/tandem-bench --device cuda --peak-tflops 789.8 --hbm-tbps 4.229 "$@" > $OUT0/b_$n.log 2>&1
  echo "== $n rc=$?"; grep -E '^(prefill|decode) ' $OUT0/b_$n.log | sed "s/^/| $n | /; s/$/ |/" >> $OUT0/rows.txt
}
for v in new old; do
  bin=$B; [ $v = old ] && bin=$O
  bench oss20b_$v $bin --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --batch 1,4,8 --context 8192 --steps 8 --repeat 3
  bench oss120b_$v $bin --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 --prefill none --batch 1 --context 8192 --steps 8 --repeat 3
done
s=$(date +%s); timeout 90 $B/bin/bench_ops > $OUT0/bench_ops.log 2>&1; echo "| bench_ops | rc $? | $(( $(date +%s) - s )) s |" >> $OUT0/rows.txt
for v in new old; do
  bin=$B; [ $v = old ] && bin=$O
  timeout 120 ncu --clock-control none -k "regex:gemv" --launch-count 8 --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__grid_size,launch__registers_per_thread \
    $bin/bin/tandem-bench --device cuda --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none --context 8192 --batch 1 --steps 1 --repeat 1 --cuda-graphs off > $OUT0/ncu_$v.csv 2> $OUT0/ncu_$v.err; echo "ncu $v rc $?"
  python3 - $OUT0/ncu_$v.csv $v >> $OUT0/ncu_table.txt <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1]))); hdr = None; n = 0
for r in rows:
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        try: t = float(d['gpu__time_duration.sum'].replace(',', ''))
        except: continue
        b = float(d['dram__bytes_read.sum'].replace(',', '') or 0)
        print("| %s | %s | grid %s regs %s | %.2f us | %.1f MB | %s%% warps | occ lim smem %s regs %s |" % (sys.argv[2], d['Kernel Name'][:40], d['launch__grid_size'], d['launch__registers_per_thread'], t/1000 if t > 1000 else t, b/1e6, d['sm__warps_active.avg.pct_of_peak_sustained_active'], d['launch__occupancy_limit_shared_mem'], d['launch__occupancy_limit_registers']))
PY
done
grep -h "^not ok" $OUT0/ops_*.log $OUT0/engine.log | head
(cd $OUT0 && tar czf logs.tgz ops_*.log engine.log b_*.log ncu_*.csv ncu_*.err 2>/dev/null; rm -rf u o ops_*.log engine.log ncu_*.csv)
echo; grep -E '^\| ' $OUT0/bench_ops.log | grep -i "gemv\|expert" | grep -v cuBLASLt | cut -c1-150; cat $OUT0/ncu_table.txt; cat $OUT0/rows.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
