#!/usr/bin/env bash
# The engine on the GPU, in one device call (run from anywhere; it works in
# the repository root):
#   1. the programs: $TANDEM_PREBUILT (made by tests/gpu/make_prebuilt.sh on
#      a machine with nvcc) when given, else `make CUDA=1 gpu-progs
#      gpu-engine-progs` here;
#   2. the ceilings through torch (device copy bandwidth, bf16 GEMM rate on
#      random data) for the floors;
#   3. checks: test_cuda_ops (every CUDA op vs the CPU backend, with the bf16
#      weight path, the fill and the stopwatch) and test_engine_gpu (the tiny
#      HF fixtures' logits and tokens on the GPU, CPU vs GPU);
#   4. benchmarks: tandem-bench --synthetic on the real configs (random
#      weights made on the GPU): GPT-OSS-20B prefill 8192 / 32768 with the
#      per-group profile, decode at batch 1/8/32/128 with context 8192, then
#      Qwen3-30B-A3B and GPT-OSS-20B with f32 weights if time allows;
#   5. a short summary last.
# Logs go to $OUT (default /tmp/tandem-gpu-engine). Exit status non-zero if
# a check failed or a benchmark did not run. BENCH=0 skips step 4.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-engine}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
SEED=${SEED:-$(date +%s)}
BENCH=${BENCH:-1}
status=0
t_start=$(date +%s)

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.used \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"

echo "== programs"
# Our programs' library path only: torch (the ceilings) keeps its own.
LIBS=""
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
if [ -n "${TANDEM_PREBUILT:-}" ] && [ -x "$TANDEM_PREBUILT/bin/tandem-bench" ]; then
    BIN=$TANDEM_PREBUILT/bin
    LIBS=$(cd "$TANDEM_PREBUILT/lib" && pwd)
    how="prebuilt ($TANDEM_PREBUILT)"
    if run ldd "$BIN/tandem-bench" "$BIN/test_engine_gpu" "$BIN/test_cuda_ops" | grep "not found"; then
        BIN=""
        LIBS=""
    fi
fi
if [ -z "${BIN:-}" ]; then
    how="built here: make CUDA=1 gpu-progs gpu-engine-progs"
    if ! make -j"$(nproc)" CUDA=1 gpu-progs gpu-engine-progs >"$OUT/build.log" 2>&1; then
        tail -n 8 "$OUT/build.log"
        echo "build failed"; exit 1
    fi
    BIN=build-cuda/tests/gpu
    mkdir -p build-cuda/tests/gpu && cp build-cuda/gpu-bin/* "$BIN/"
fi
echo "$how"

echo "== ceilings (torch, random data)"
python3 - <<'PY' 2>&1 | tee "$OUT/ceilings.txt"
import sys
sys.path.insert(0, "tests/gpu")
from bench_attention import ceilings
bw, bf16, fp32 = ceilings()
print(f"CEILINGS copy_tbps={bw / 1e12:.3f} bf16_tflops={bf16 / 1e12:.1f} fp32_tflops={fp32 / 1e12:.1f}")
PY
read -r BW PEAK PEAK32 < <(sed -n 's/^CEILINGS copy_tbps=\([0-9.]*\) bf16_tflops=\([0-9.]*\) fp32_tflops=\([0-9.]*\)/\1 \2 \3/p' "$OUT/ceilings.txt")
BW=${BW:-4.24}; PEAK=${PEAK:-776}; PEAK32=${PEAK32:-51.2}
echo "floors use copy ${BW} TB/s, bf16 ${PEAK} TFLOP/s"

echo "== test_cuda_ops (seed $SEED)"
run "$BIN/test_cuda_ops" "$SEED" >"$OUT/test_cuda_ops.log" 2>&1
[ $? -eq 0 ] || status=1
grep -E '^not ok |bf16|fill|stopwatch' "$OUT/test_cuda_ops.log"
ops="$(grep -c '^ok ' "$OUT/test_cuda_ops.log") ok, $(grep -c '^not ok ' "$OUT/test_cuda_ops.log") not ok"

echo "== test_engine_gpu"
run timeout 300 "$BIN/test_engine_gpu" 0 2>&1 | tee "$OUT/test_engine_gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
eng="$(grep -c '^ok ' "$OUT/test_engine_gpu.log") ok, $(grep -c '^not ok ' "$OUT/test_engine_gpu.log") not ok"

echo "== tandem-generate --device cuda (f32 and default bf16 weights) vs the HF golden tokens"
gen="not run"
if [ -x "$BIN/tandem-generate" ]; then
    gen=""
    for fx in gpt_oss_tiny qwen3_moe_tiny; do
        ids() {
            python3 - "tests/fixtures/$fx/golden.safetensors" "$1" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
e = json.loads(data[8:8 + n])[sys.argv[2]]
b, end = e["data_offsets"]
raw = data[8 + n + b:8 + n + end]
print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
PY
        }
        prompt=$(ids prompt_ids); want=$(ids gen_ids)
        for w in f32 auto; do
            got=$(run timeout 60 "$BIN/tandem-generate" --model "tests/fixtures/$fx" --prompt-ids "$prompt" \
                  --max-tokens 32 --ignore-eos --device cuda --weights $w 2>>"$OUT/generate.log")
            same=0
            IFS=, read -r -a g <<<"$got"; IFS=, read -r -a h <<<"$want"
            while [ $same -lt ${#h[@]} ] && [ "${g[$same]:-x}" = "${h[$same]}" ]; do same=$((same + 1)); done
            echo "$fx --weights $w: $same of 32 tokens equal HF's"
            gen="$gen$fx/$w $same/32; "
        done
    done
    tail -n 4 "$OUT/generate.log"
fi

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
if [ "$BENCH" = 1 ]; then
    C=tests/fixtures/configs
    bench oss20b_8k 150 --synthetic $C/gpt-oss-20b.json --prefill 8192 --batch 1,8,32,128 \
        --context 8192 --steps 16 --repeat 3 --profile
    bench oss20b_32k 120 --synthetic $C/gpt-oss-20b.json --prefill 32768 --batch none --repeat 2 --profile
    if [ $(( $(date +%s) - t_start )) -lt 200 ]; then
        bench qwen30b 90 --synthetic $C/qwen3-30b-a3b.json --prefill 8192 --batch 1,32 \
            --context 8192 --steps 16 --repeat 3 --profile
    fi
    if [ $(( $(date +%s) - t_start )) -lt 240 ]; then
        bench oss20b_f32 80 --synthetic $C/gpt-oss-20b.json --weights f32 --prefill 8192 \
            --batch none --repeat 2
    fi
fi

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| programs | $how |"
echo "| ceilings | copy $BW TB/s, bf16 GEMM $PEAK TFLOP/s, fp32 GEMM $PEAK32 TFLOP/s |"
echo "| test_cuda_ops (seed $SEED) | $ops |"
echo "| test_engine_gpu | $eng |"
echo "| tandem-generate --device cuda, greedy tokens equal to HF's | $gen |"
for f in "$OUT"/bench_*.log; do
    [ -f "$f" ] || continue
    grep -E '^(prefill|decode) ' "$f" | sed "s|^|$(basename "$f" .log | sed 's/bench_//') |"
done
exit $status
