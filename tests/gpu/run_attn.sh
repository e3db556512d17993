#!/usr/bin/env bash
# The bf16 tensor-core attention in one device call (run from anywhere; it
# works in the repository root), with programs prebuilt by
# tests/gpu/make_prebuilt.sh DEST and given as $TANDEM_PREBUILT=DEST:
#   1. test_cuda_ops: every CUDA op vs the CPU and float64, with the bf16
#      attention cases (bound 1e-2); compute-sanitizer memcheck if time;
#   2. test_comm_nccl: the NCCL communicator at world size 1 (NVLink
#      multicast stays off: NCCL_NVLS_ENABLE=0), against the machine's
#      libnccl (/usr/local/cuda or the nvidia-nccl Python package's);
#   3. bench_attention.py: our bf16 and fp32 kernels next to torch SDPA
#      flash (bf16) and mem-efficient (fp32), GPT-OSS shapes, 8192 / 32768,
#      full and window 128;
#   4. tandem-bench --synthetic gpt-oss-20b --device cuda: prefill 8192 and
#      32768 with --profile (bf16 weights, so bf16 attention), and 8192
#      with TANDEM_CUDA_ATTN_BF16=0 (fp32 attention) for the same-run
#      comparison;
#   5. a short summary last. Logs go to $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-attn}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
SEED=${SEED:-$(date +%s)}
status=0
t_start=$(date +%s)
P=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a make_prebuilt.sh folder}
BIN=$(cd "$P/bin" && pwd)
LIBS=$(cd "$P/lib" && pwd)
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.used \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
run ldd "$BIN/tandem-bench" "$BIN/test_cuda_ops" "$BIN/bench_attention" | grep "not found"

if [ -f "$P/attention_mma.o" ] && command -v cuobjdump >/dev/null; then
    echo "== SASS of attention_mma.o (instruction counts)"
    cuobjdump --dump-sass "$P/attention_mma.o" | grep -oE '(HMMA|LDSM|LDL|STL|MUFU\.EX2|BAR)[.A-Z0-9]*' |
        sort | uniq -c | tee "$OUT/sass_counts.txt"
fi

echo "== test_cuda_ops (seed $SEED)"
run timeout 240 "$BIN/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops.log" 2>&1
[ $? -eq 0 ] || status=1
grep -E '^not ok |attention bf16|Bail' "$OUT/test_cuda_ops.log"
ops="$(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok"
bf16ops="$(grep -c '^ok .*attention bf16' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok .*attention bf16' "$OUT/test_cuda_ops.log") not ok"
worst=$(grep -E '^(not )?ok .*attention bf16 .* vs float64' "$OUT/test_cuda_ops.log" |
        sed -n 's/.*rel err \([0-9.e+-]*\) .*/\1/p' | sort -g | tail -1)

echo "== NCCL communicator, world size 1 (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE)"
nccl_dir=""
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null); do
    [ -e "$d/libnccl.so.2" ] && { nccl_dir=$d; break; }
done
ls /usr/local/cuda/include/nccl.h $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include", "nccl.h"))' 2>/dev/null) 2>&1 | sed 's/^/nccl.h: /'
nccl="not run"
if [ -z "$nccl_dir" ]; then
    nccl="no libnccl.so.2 found (/usr/local/cuda/lib64, python nvidia.nccl)"
    echo "$nccl"
elif [ ! -x "$BIN/test_comm_nccl" ]; then
    nccl="test_comm_nccl not in the prebuilt folder"
else
    echo "libnccl: $nccl_dir/libnccl.so.2"
    LD_LIBRARY_PATH="$LIBS:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=WARN \
        timeout 60 "$BIN/test_comm_nccl" >"$OUT/test_comm_nccl.log" 2>&1
    rc=$?
    cat "$OUT/test_comm_nccl.log" | tail -20
    nccl="exit $rc, $(grep -c '^\[       OK \]' "$OUT/test_comm_nccl.log") OK / $(grep -c '^\[  FAILED  \]' "$OUT/test_comm_nccl.log") FAILED lines (libnccl from $nccl_dir)"
    [ $rc -eq 0 ] || status=1
fi

echo "== attention benchmark"
mkdir -p "$OUT/ab/tests/gpu" && cp "$BIN/bench_attention" "$OUT/ab/tests/gpu/"
BENCH_DECODE=0 run timeout 200 python3 tests/gpu/bench_attention.py "$OUT/ab" "$OUT" 2>&1 | tee "$OUT/bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
rm -rf "$OUT/ab"
read -r BW PEAK < <(sed -n 's/.*copy \([0-9.]*\) TB\/s, bf16 GEMM \([0-9.]*\) TFLOP.*/\1 \2/p' "$OUT/bench.log")
BW=${BW:-4.23}; PEAK=${PEAK:-790}

bench() {   # NAME TIMEOUT ARGS...
    local name=$1 limit=$2
    shift 2
    echo "== bench $name: tandem-bench $*"
    run timeout "$limit" "$BIN/tandem-bench" --device cuda --peak-tflops "$PEAK" --hbm-tbps "$BW" "$@" \
        >"$OUT/bench_$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench_$name.log"
    [ $rc -eq 0 ] || { echo "bench $name: exit $rc"; status=1; }
}
C=tests/fixtures/configs
bench oss20b_8k 90 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch none --repeat 3 --profile
bench oss20b_32k 90 --synthetic $C/gpt-oss-20b.json --prefill 32768 --batch none --repeat 3 --profile
TANDEM_CUDA_ATTN_BF16=0 bench oss20b_8k_f32attn 60 --synthetic $C/gpt-oss-20b.json --prefill 8192 \
    --batch none --repeat 3

if [ $(( $(date +%s) - t_start )) -lt 150 ] && command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (test_cuda_ops)"
    run timeout 100 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
        "$BIN/test_cuda_ops" "$SEED" >"$OUT/memcheck.log" 2>&1
    rc=$?
    san="exit $rc, $(grep -c '^ok ' "$OUT/memcheck.log") ok / $(grep -c '^not ok ' "$OUT/memcheck.log") not ok, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck.log" | tail -1)"
    [ "$rc" -eq 124 ] && san="timed out after 100 s ($san)"
    tail -n 3 "$OUT/memcheck.log"
else
    san="not run (time)"
fi

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| test_cuda_ops (seed $SEED) | $ops |"
echo "| of which bf16 attention | $bf16ops; worst rel err vs float64 $worst (bound 1e-2) |"
echo "| compute-sanitizer memcheck | $san |"
echo "| test_comm_nccl (world size 1) | $nccl |"
grep -E '^GPU: ' "$OUT/bench.log"
grep -E '^\| ' "$OUT/bench.log" | grep -v decode
for f in "$OUT"/bench_oss*.log; do
    [ -f "$f" ] || continue
    grep -E '^prefill ' "$f" | sed "s|^|$(basename "$f" .log | sed 's/bench_//') |"
    grep -E '^# +(attention|MoE experts|total)' "$f" | sed "s|^|$(basename "$f" .log | sed 's/bench_//') |"
done
exit $status
