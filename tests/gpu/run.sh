#!/usr/bin/env bash
# Every GPU check and benchmark, one script, steps chosen by argument:
#
#   tests/gpu/run.sh [STEP|GROUP ...]       (default: checks)
#
# checks:
#   ops          the op case table on every backend (CPU and CUDA, each case
#                vs float64 and CUDA vs CPU), seed $SEED
#   ops-tf32     the same with TANDEM_CUDA_TF32=1 (cuBLAS TF32 products)
#   memcheck     the op table under compute-sanitizer memcheck (if installed)
#   engine       test_engine_gpu: the HF fixtures on the GPU (f32, bf16, FP8)
#   generate     tandem-generate --device cuda vs the fixtures' HF golden tokens
#                (f32 weights with an f32 cache: exact; the default bf16
#                cache and default weights: counted)
#   nccl         test_comm_nccl and test_parallel_nccl at world size 1, and TP=2
#                as two processes on the one GPU
#   cluster      router + prefiller + decoder on --device cuda
#                (tests/gpu/cluster_check.sh; needs TANDEM_PREBUILT_CLUSTER)
#   ranks        test_rank_groups_gpu: TP=2, TP=2/EP=2, TP=4/EP=4 prefill and
#                DP=2xEP=2, DP=4xEP=4 decode (f32, bf16, FP8), one process per
#                rank, all on the one GPU (the staged communicator), vs the
#                single rank
#   cluster-ranks  the cluster with a TP=2/EP=2 prefiller and a DP=2xEP=2
#                decoder, every rank on the one GPU, incl. 64 concurrent
#                streams (cluster_check.sh with RANKS=1)
# serve:
#   serve        the serving benchmark (tests/gpu/serve_bench.sh; needs
#                TANDEM_PREBUILT_CLUSTER with tandem-servebench): router +
#                prefiller + decoder on cuda:0, GPT-OSS-20B shapes, FP8
#                random weights, token-id prompts, concurrency 1..256 for
#                4096/200, 32768/100, 1024/1024, 8192/256 (points bounded in
#                time; WORKLOADS, POINT_S, DISAGG pass through: the full
#                sweep takes two device calls, docs/PERF.md) and the decode
#                ITL p99 alone vs while 32k prompts arrive; KV over UCX
#                shared memory (--kv-same-host shm); JSON, SVG and logs in
#                $OUT/serve (DEVICE=cpu runs its control flow with tiny shapes)
# bench:
#   ceilings     device copy bandwidth and bf16/fp32 GEMM rate through torch
#                (the floors of every row below)
#   bench-attention  our attention next to torch SDPA (bench_attention.py)
#   bench-ops    the dense ops on GPT-OSS-20B prefill shapes (bench_ops)
#   bench-moe    the expert paths alone, bf16 and FP8, and cached cuBLASLt
#                plans under fresh row counts (bench_moe), next to torch's
#                _grouped_mm / _scaled_grouped_mm (bench_moe_peer.py)
#   bench-comm   the rank communicators' all-reduce and all-to-all-v at
#                prefill and decode sizes, 2 and 4 ranks sharing the GPU
#                (staged), with the host collective and the copies alone
#   bench-engine tandem-bench --synthetic (random weights of the real
#                configs): GPT-OSS-20B FP8 and bf16, GPT-OSS-120B FP8,
#                Qwen3-30B-A3B: prefill 8192/32768, decode batch 1..128
#   seed-table   the seed article's prefill cost table and DP+EP decode
#                rows (tests/gpu/seed_table.sh: about 6 minutes on one H200;
#                asked for by name, like serve)
# all = checks + bench (serve is asked for by name: it needs its own ~6 min).
#
# Programs: $TANDEM_PREBUILT (a folder made by tests/gpu/make_prebuilt.sh on
# a machine with nvcc: bin/ and lib/), else built here with
# `make CUDA=1 gpu-progs gpu-engine-progs`. The cluster step takes
# $TANDEM_PREBUILT_CLUSTER (tests/gpu/make_prebuilt_cluster.sh). Either may
# be given as a .tar.xz of that folder (`tar cJf prebuilt.tar.xz prebuilt`:
# OpenBLAS alone is 35 MB, 6 MB packed, and a device call carries at most
# 64 MiB), unpacked under $OUT first. Logs go to
# $OUT (default /tmp/tandem-gpu); BUDGET_S (default 540) bounds the whole
# run: a benchmark that would pass it is skipped and says so. A short table
# is printed last. Exit status non-zero when a check failed or a step did
# not run.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
# NVLink multicast stays off (a program using it can take shared GPUs down)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SEED=${SEED:-$(date +%s)}
BUDGET=${BUDGET_S:-540}
NCCL_LIB=${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
t_start=$(date +%s)
status=0
rows=()

steps=()
for a in "${@:-checks}"; do
    case "$a" in
    checks) steps+=(ops ops-tf32 memcheck engine generate nccl ranks cluster cluster-ranks) ;;
    bench) steps+=(ceilings bench-attention bench-ops bench-moe bench-comm bench-engine) ;;
    all) steps+=(ops ops-tf32 memcheck engine generate nccl ranks cluster cluster-ranks
                 ceilings bench-attention bench-ops bench-moe bench-comm bench-engine) ;;
    ops|ops-tf32|memcheck|engine|generate|nccl|ranks|cluster|cluster-ranks|serve|ceilings|bench-attention|bench-ops|bench-moe|bench-comm|bench-engine|seed-table)
        steps+=("$a") ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown step '$a' (run.sh --help lists them)"; exit 2 ;;
    esac
done

left() { echo $(( BUDGET - ($(date +%s) - t_start) )); }
tap_counts() { echo "$(grep -c '^ok ' "$1") ok, $(grep -c '^not ok ' "$1") not ok"; }

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total,memory.used \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
echo "seed $SEED, tree $(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"

echo "== programs"
unpack() { # a .tar.xz of a prebuilt folder -> the folder, unpacked under $OUT
    case "$1" in
    *.tar.xz) mkdir -p "$OUT/unpacked" && tar xJf "$1" -C "$OUT/unpacked" &&
              echo "$OUT/unpacked/$(tar tJf "$1" | head -1 | cut -d/ -f1)" ;;
    *) echo "$1" ;;
    esac
}
[ -n "${TANDEM_PREBUILT:-}" ] && TANDEM_PREBUILT=$(unpack "$TANDEM_PREBUILT")
[ -n "${TANDEM_PREBUILT_CLUSTER:-}" ] && TANDEM_PREBUILT_CLUSTER=$(unpack "$TANDEM_PREBUILT_CLUSTER")
LIBS=""
BIN=""
# the cluster steps use only TANDEM_PREBUILT_CLUSTER: nothing to build for them
only_cluster=1
for s in "${steps[@]}"; do case "$s" in cluster|cluster-ranks|serve) ;; *) only_cluster=0 ;; esac; done
if [ "$only_cluster" = 1 ]; then
    how="none needed (cluster steps: TANDEM_PREBUILT_CLUSTER)"
elif [ -n "${TANDEM_PREBUILT:-}" ]; then
    BIN=$(cd "$TANDEM_PREBUILT/bin" && pwd) && LIBS=$(cd "$TANDEM_PREBUILT/lib" && pwd)
    how="prebuilt ($TANDEM_PREBUILT)"
else
    how="built here: make CUDA=1 gpu-progs gpu-engine-progs"
    if make -j"$(nproc)" CUDA=1 gpu-progs gpu-engine-progs >"$OUT/build.log" 2>&1; then
        BIN=build-cuda/tests/gpu
        cp build-cuda/gpu-bin/* build-cuda/tests/test_comm_nccl "$BIN/" 2>/dev/null
    else
        tail -n 8 "$OUT/build.log"
        echo "build failed"; exit 1
    fi
fi
echo "$how"
rows+=("| programs | $how |")
# Our programs get our library path (and the image's NCCL); python keeps its own.
run() { LD_LIBRARY_PATH="$LIBS:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
OPS=$BIN/test_ops
[ -x "$OPS" ] || OPS=$BIN/test_cuda_ops

# check NAME TIMEOUT LOG CMD...: a TAP program; its counts make a row
check() {
    local name=$1 limit=$2 log=$3
    shift 3
    echo "== $name"
    if [ ! -x "$1" ]; then
        echo "$1 missing"; rows+=("| $name | not run: $1 missing |"); status=1; return
    fi
    CMOCKA_MESSAGE_OUTPUT=TAP run timeout "$limit" "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^not ok |Bail' "$log" | head -20
    tail -n 2 "$log"
    [ $rc -eq 0 ] || status=1
    rows+=("| $name | exit $rc, $(tap_counts "$log") |")
}

step_generate() {
    echo "== tandem-generate --device cuda (f32 and default weights and KV cache) vs the HF golden tokens"
    local gen="" fx w kv prompt want got same
    ids() {
        python3 - "tests/fixtures/$1/golden.safetensors" "$2" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
e = json.loads(data[8:8 + n])[sys.argv[2]]
b, end = e["data_offsets"]
raw = data[8 + n + b:8 + n + end]
print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
PY
    }
    for fx in gpt_oss_tiny qwen3_moe_tiny; do
        prompt=$(ids $fx prompt_ids); want=$(ids $fx gen_ids)
        for wk in f32:f32 f32:auto auto:auto; do
            w=${wk%:*} kv=${wk#*:}
            got=$(run timeout 60 "$BIN/tandem-generate" --model "tests/fixtures/$fx" --prompt-ids "$prompt" \
                  --max-tokens 32 --ignore-eos --device cuda --weights $w --kv-dtype $kv 2>>"$OUT/generate.log")
            IFS=, read -r -a g <<<"$got"; IFS=, read -r -a h <<<"$want"
            same=0
            while [ $same -lt ${#h[@]} ] && [ "${g[$same]:-x}" = "${h[$same]}" ]; do same=$((same + 1)); done
            echo "$fx --weights $w --kv-dtype $kv: $same of ${#h[@]} tokens equal HF's"
            gen="$gen$fx/$w/kv-$kv $same/${#h[@]}; "
            # f32 weights with an f32 cache must reproduce HF's greedy tokens exactly
            [ $wk = f32:f32 ] && [ $same -ne ${#h[@]} ] && status=1
        done
    done
    rows+=("| tandem-generate --device cuda, greedy tokens equal to HF's | $gen|")
}

step_nccl() {
    check "test_comm_nccl (world size 1)" 30 "$OUT/test_comm_nccl.log" "$BIN/test_comm_nccl"
    check "test_parallel_nccl (TP, TP+EP, DP x EP, world size 1)" 60 "$OUT/test_parallel_nccl.log" \
        "$BIN/test_parallel_nccl"
    # NCCL refuses two ranks on one device: the program reports it as a skip
    NCCL_DEBUG=WARN check "test_parallel_nccl --two-ranks (TP=2, one GPU)" 30 "$OUT/two_ranks.log" \
        "$BIN/test_parallel_nccl" --two-ranks
}

step_ranks() {
    # the ranks are processes on the one GPU: auto picks the staged
    # communicator (NCCL refuses two ranks on one device)
    check "test_rank_groups_gpu (TP=2, TP=2/EP=2, TP=4/EP=4, DP=2xEP=2, DP=4xEP=4; ranks sharing the GPU)" \
        400 "$OUT/test_rank_groups_gpu.log" "$BIN/test_rank_groups_gpu"
    grep -E '^# .*(communicator|rel err)' "$OUT/test_rank_groups_gpu.log" | head -8
}

# step_cluster [ranks]: cluster_check.sh, with RANKS=1 for "ranks"
step_cluster() {
    local tag=cluster${1:+-$1}
    if [ -z "${TANDEM_PREBUILT_CLUSTER:-}" ]; then
        rows+=("| $tag | not run: no TANDEM_PREBUILT_CLUSTER |"); status=1; return
    fi
    echo "== $tag (tests/gpu/cluster_check.sh${1:+ RANKS=1})"
    OUT="$OUT/$tag" TANDEM_PREBUILT="$TANDEM_PREBUILT_CLUSTER" RANKS=${1:+1} NCCL_LIB="$NCCL_LIB" \
        timeout 240 bash tests/gpu/cluster_check.sh >"$OUT/$tag.txt" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || status=1
    grep -E '^not ok ' "$OUT/$tag.txt" | head; tail -n 4 "$OUT/$tag.txt"
    rows+=("| $tag on the GPU | exit $rc, $(tap_counts "$OUT/$tag.txt") |")
}

step_seed_table() {
    local budget l
    l=$(left)
    budget=$(( l - 30 < 400 ? l - 30 : 400 ))
    if [ "$budget" -lt 120 ]; then
        rows+=("| seed-table | skipped: time budget |"); status=1; return
    fi
    echo "== seed-table (tests/gpu/seed_table.sh, ${budget} s at most)"
    OUT="$OUT/seed" BUDGET_S=$budget BENCH="$BIN/tandem-bench" COMM="$BIN/bench_comm" \
        LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_LIB="$NCCL_LIB" \
        timeout $((budget + 60)) bash tests/gpu/seed_table.sh >"$OUT/seed_table.txt" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || status=1
    sed -n '/^== seed table/,$p' "$OUT/seed_table.txt"
    rows+=("| seed-table: prefill cost table, DP+EP decode | exit $rc; seed_table.txt |")
}

step_serve() {
    if [ -z "${TANDEM_PREBUILT_CLUSTER:-}" ]; then
        rows+=("| serve | not run: no TANDEM_PREBUILT_CLUSTER |"); status=1; return
    fi
    local budget l
    l=$(left)
    budget=$(( l - 20 < 500 ? l - 20 : 500 ))
    if [ "$budget" -lt 120 ]; then
        rows+=("| serve | skipped: time budget |"); status=1; return
    fi
    echo "== serve (tests/gpu/serve_bench.sh, ${budget} s at most)"
    OUT="$OUT/serve" TANDEM_PREBUILT="$TANDEM_PREBUILT_CLUSTER" BUDGET_S=$budget \
        timeout $((budget + 60)) bash tests/gpu/serve_bench.sh >"$OUT/serve.txt" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { status=1; tail -n 5 "$OUT/serve.txt"; }
    rows+=("| serve: servebench sweep + disaggregation | exit $rc, $(grep -c '^| [0-9]' "$OUT/serve.txt") points; JSON/SVG in serve/ |")
}

PEAK=${PEAK_TFLOPS:-}
HBM=${HBM_TBPS:-}
PEAK32=""
step_ceilings() {
    echo "== ceilings (torch, random data)"
    python3 - <<'PY' 2>&1 | tee "$OUT/ceilings.txt"
import sys
sys.path.insert(0, "tests/gpu")
from bench_attention import ceilings
bw, bf16, fp32 = ceilings()
print(f"CEILINGS copy_tbps={bw / 1e12:.3f} bf16_tflops={bf16 / 1e12:.1f} fp32_tflops={fp32 / 1e12:.1f}")
PY
    read -r HBM PEAK PEAK32 < <(sed -n 's/^CEILINGS copy_tbps=\([0-9.]*\) bf16_tflops=\([0-9.]*\) fp32_tflops=\([0-9.]*\)/\1 \2 \3/p' "$OUT/ceilings.txt")
    rows+=("| ceilings | copy ${HBM:-?} TB/s, bf16 GEMM ${PEAK:-?} TFLOP/s, fp32 GEMM ${PEAK32:-?} TFLOP/s |")
}
floors() { # the measured ceilings, else the ones measured on 2026-12-02 (docs/PERF.md)
    PEAK=${PEAK:-789.8}; HBM=${HBM:-4.229}
}

# timed NAME MAX_SECONDS LOG CMD...: a benchmark within what is left of the budget
timed() {
    local name=$1 limit=$2 log=$3 l
    shift 3
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        echo "== $name: skipped (time budget spent)"; rows+=("| $name | skipped: time budget |"); return 1
    fi
    echo "== $name (${limit} s at most)"
    run timeout "$limit" "$@" >"$log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { echo "$name: exit $rc"; tail -n 5 "$log"; status=1; rows+=("| $name | exit $rc |"); }
    return $rc
}

step_bench_attention() {
    mkdir -p "$OUT/ab/tests/gpu" && cp "$BIN/bench_attention" "$OUT/ab/tests/gpu/" || return
    timed bench-attention 200 "$OUT/bench_attention.log" python3 tests/gpu/bench_attention.py "$OUT/ab" "$OUT" &&
        grep -E '^GPU: |^\| ' "$OUT/bench_attention.log"
}
step_bench_ops() {
    floors
    timed bench-ops 90 "$OUT/bench_ops.log" "$BIN/bench_ops" --hbm-tbps "$HBM" && grep -E '^\| ' "$OUT/bench_ops.log"
}
step_bench_moe() {
    floors
    timed bench-moe 170 "$OUT/bench_moe.log" "$BIN/bench_moe" --hbm-tbps "$HBM" --peak-tflops "$PEAK" &&
        grep -E '^\| ' "$OUT/bench_moe.log"
    timed "torch grouped_mm peer" 90 "$OUT/bench_moe_peer.log" python3 tests/gpu/bench_moe_peer.py "$OUT" &&
        grep -E '^\| |^torch ' "$OUT/bench_moe_peer.log"
    timed "bench-moe --varying-m" 90 "$OUT/bench_moe_varying_m.log" "$BIN/bench_moe" --varying-m &&
        grep -E '^\| ' "$OUT/bench_moe_varying_m.log"
}
step_bench_comm() {
    timed "bench-comm 2 ranks" 100 "$OUT/bench_comm2.log" "$BIN/bench_comm" --ranks 2 &&
        grep -E '^# |^\| ' "$OUT/bench_comm2.log"
    timed "bench-comm 4 ranks" 120 "$OUT/bench_comm4.log" "$BIN/bench_comm" --ranks 4 &&
        grep -E '^# |^\| ' "$OUT/bench_comm4.log"
}
engine_bench() { # NAME MAX_SECONDS ARGS... (tandem-bench; env before the call passes through)
    local name=$1 limit=$2
    shift 2
    timed "bench $name" "$limit" "$OUT/bench_$name.log" "$BIN/tandem-bench" --device cuda \
        --peak-tflops "$PEAK" --hbm-tbps "$HBM" "$@" &&
        grep -E '^(prefill|decode) |^# (tandem-bench|prefill runs|decode steps so far|decode batch)|^#   window layers' "$OUT/bench_$name.log"
}
# Where GPT-OSS-120B does not fit the card (oss120b_fits.sh), its rows
# say so in the summary instead of failing.
. tests/gpu/oss120b_fits.sh
fits_120b() { # NAME
    oss120b_fits && return 0
    echo "== $1: skipped (GPT-OSS-120B needs more than this GPU's $GPU_MIB MiB)"
    rows+=("| $1 | skipped: GPT-OSS-120B does not fit $GPU_MIB MiB |")
    return 1
}
step_bench_engine() {
    floors
    local C=tests/fixtures/configs
    engine_bench oss20b_fp8 90 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill 8192,32768 \
        --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --profile
    fits_120b "bench oss120b_fp8" && engine_bench oss120b_fp8 110 --synthetic $C/gpt-oss-120b.json --weights fp8 --prefill 8192,32768 \
        --batch 1,8 --context 8192 --steps 8 --repeat 3 --profile
    engine_bench oss20b_bf16 90 --synthetic $C/gpt-oss-20b.json --weights bf16 --prefill 8192,32768 \
        --batch 1,8,32,128 --context 8192 --steps 8 --repeat 5 --profile
    engine_bench qwen30b_fp8 90 --synthetic $C/qwen3-30b-a3b.json --weights fp8 --prefill 8192 \
        --batch 1,32 --context 8192 --steps 8 --repeat 3 --profile
    # an FP8 KV cache (the tensor-core decode kernel over FP8 pages) with
    # the window pool (window layers keep only their window): 120B at batch
    # 128 and context 8192 fits (~21 GB of KV instead of ~41 GB)
    fits_120b "bench oss120b_fp8_kvfp8" && engine_bench oss120b_fp8_kvfp8 150 --synthetic $C/gpt-oss-120b.json --weights fp8 --kv-dtype fp8 \
        --prefill none --batch 1,32,128 --context 8192 --steps 8 --repeat 3
    engine_bench oss20b_fp8_kvfp8 90 --synthetic $C/gpt-oss-20b.json --weights fp8 --kv-dtype fp8 \
        --prefill none --batch 1,32,128 --context 8192 --steps 8 --repeat 3
    # the same decode steps without CUDA graphs (unpadded, eager): what the
    # graphs save, batch by batch
    engine_bench oss20b_fp8_nographs 60 --synthetic $C/gpt-oss-20b.json --weights fp8 --prefill none \
        --batch 1,8,32,128 --context 8192 --steps 8 --repeat 3 --cuda-graphs off
}

for s in "${steps[@]}"; do
    case "$s" in
    ops) check "ops on every backend (seed $SEED)" 420 "$OUT/ops.log" "$OPS" "$SEED" ;;
    ops-tf32) TANDEM_CUDA_TF32=1 check "ops, TANDEM_CUDA_TF32=1" 420 "$OUT/ops_tf32.log" "$OPS" "$SEED" ;;
    memcheck)
        # the CUDA image keeps it beside nvcc or under its own folder
        san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
              /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
        if [ -n "$san" ] && [ "$(left)" -gt 200 ]; then
            check "ops under compute-sanitizer memcheck" 180 "$OUT/memcheck.log" \
                "$san" --tool memcheck --leak-check no --error-exitcode 9 "$OPS" "$SEED"
            grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$OUT/memcheck.log" | tail -1
        else
            rows+=("| memcheck | skipped: no compute-sanitizer or no time |")
        fi ;;
    engine) check "test_engine_gpu" 240 "$OUT/test_engine_gpu.log" "$BIN/test_engine_gpu" 0 ;;
    generate) step_generate ;;
    nccl) step_nccl ;;
    ranks) step_ranks ;;
    cluster) step_cluster ;;
    cluster-ranks) step_cluster ranks ;;
    serve) step_serve ;;
    seed-table) step_seed_table ;;
    ceilings) step_ceilings ;;
    bench-attention) step_bench_attention ;;
    bench-ops) step_bench_ops ;;
    bench-moe) step_bench_moe ;;
    bench-comm) step_bench_comm ;;
    bench-engine) step_bench_engine ;;
    esac
done

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
for f in "$OUT"/bench_*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log | sed 's/^bench_//')
    grep -E '^(prefill|decode) ' "$f" | sed "s#^#| $n: #; s#\$# |#"
done
# the serving table last: it is the one to read
[ -f "$OUT/serve.txt" ] && sed -n '/^== serve summary/,$p' "$OUT/serve.txt"
echo "RESULT: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
