#!/usr/bin/env bash
# The seed article's cost tables ("GPT-OSS on day 0", Perplexity, H200 at a
# nominal $3 per GPU-hour), measured with Tandem on this machine:
#
#   prefill  latency of one prompt and $ per million input tokens for
#            EP1/TP1, EP2/TP2, EP4/TP4, EP8/TP8 at 8192, 32768, 65536 and
#            128000 tokens, gpt-oss-20b and gpt-oss-120b (FP8 weights,
#            random values of the real shapes: tandem-bench --synthetic);
#   decode   tokens/s per GPU for DP+EP layouts (DP1, DP2xEP2, DP4xEP4,
#            DP8xEP8) at batch 1..128 per rank, context 8192;
#   comm     bench_comm: the rank communicator's all-reduce and EP
#            dispatch/combine latencies at prefill (8192 tokens) and decode
#            (batch 1..128) sizes, for docs/PERF.md.
#
# A layout of N ranks gets one GPU per rank when the machine has N GPUs
# (NCCL). Otherwise its ranks share GPU 0 through the staged communicator
# (host memory): those rows measure what the communicator costs on top of
# the same work, NOT a speed-up (the ranks take turns on one GPU); they are
# labelled "shared", their cost column is "-", and to fit the time budget
# they run a smaller grid: prefill at 8192 tokens only (SHARED_LENS), for
# the 20b at TP2/4/8 and the 120b at TP2 only (SHARED_MAX_120B); decode
# of the 20b at DP2/DP4 with batch 1, 8, 32 (SHARED_BATCHES); one timed
# run after the warm-up. The TP1 prefill rows also time one run after the
# warm-up (a 128000-token prefill takes seconds; prefill times vary by
# about 1% between runs), decode rows the median of 2. The seed's figures
# are printed next to ours.
#
# Usage: tests/gpu/seed_table.sh
#   Programs: $TANDEM_PREBUILT (tests/gpu/make_prebuilt.sh DEST: bin/ and
#   lib/, or a .tar.xz of it), else build-cuda/ (make CUDA=1 gpu-progs
#   gpu-engine-progs). Environment: OUT (default /tmp/tandem-seed),
#   BUDGET_S (default 400: a run that would not fit is skipped and says so),
#   NGPU (default: nvidia-smi's count), GPU_PRICE (default 3.00 $/hour),
#   SHARED_LENS, SHARED_BATCHES, MODELS (default "20b 120b"; "20b" on a GPU
#   under 100 GB, where GPT-OSS-120B does not fit one card). For a dry
#   run of the script's plumbing on the CPU: DEVICE=cpu NGPU=1 CONFIGS=DIR
#   (DIR/gpt-oss-20b.json ... small configs) LENS=64,128 BATCHES=1,2.
# Expected run time on one H200: about 5-6 minutes.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-seed}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
# NVLink multicast stays off (a program using it can take shared GPUs down)
export NCCL_NVLS_ENABLE=0
BUDGET=${BUDGET_S:-400}
SHARED_MAX_120B=${SHARED_MAX_120B:-2}
PRICE=${GPU_PRICE:-3.00}
SHARED_LENS=${SHARED_LENS:-8192}
SHARED_BATCHES=${SHARED_BATCHES:-1,8,32}
NCCL_LIB=${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[ "$NGPU" -ge 1 ] || { echo "seed_table: no GPU found (NGPU=0)"; exit 1; }
. tests/gpu/oss120b_fits.sh
if [ -z "${MODELS:-}" ] && [ "${DEVICE:-cuda:0}" != cpu ] && ! oss120b_fits; then
    echo "seed_table: GPT-OSS-120B does not fit this GPU's $GPU_MIB MiB: MODELS=20b (set MODELS to override)"
    MODELS=20b
fi
MODELS=${MODELS:-20b 120b}
ALL_LENS=${LENS:-8192,32768,65536,128000}
ALL_BATCHES=${BATCHES:-1,2,4,8,16,32,64,128}
DEVICE=${DEVICE:-cuda:0}
CONFIGS=${CONFIGS:-tests/fixtures/configs}
CONTEXT=${CONTEXT:-8192}
CHUNK_ABOVE=${CHUNK_ABOVE:-65536}
PREFILL_CHUNK=${PREFILL_CHUNK:-32768}
t_start=$(date +%s)
status=0

case "${TANDEM_PREBUILT:-}" in
*.tar.xz) mkdir -p "$OUT/unpacked" && tar xJf "$TANDEM_PREBUILT" -C "$OUT/unpacked" &&
          TANDEM_PREBUILT="$OUT/unpacked/$(tar tJf "$TANDEM_PREBUILT" | head -1 | cut -d/ -f1)" ;;
esac
LIBS=""
if [ -n "${TANDEM_PREBUILT:-}" ]; then
    BENCH=$TANDEM_PREBUILT/bin/tandem-bench COMM=$TANDEM_PREBUILT/bin/bench_comm
    LIBS=$(cd "$TANDEM_PREBUILT/lib" && pwd)
fi
BENCH=${BENCH:-build-cuda/gpu-bin/tandem-bench}
COMM=${COMM:-build-cuda/tests/gpu/bench_comm}
for p in "$BENCH" "$COMM"; do
    [ -x "$p" ] || { echo "seed_table: $p missing (TANDEM_PREBUILT, or make CUDA=1 gpu-progs gpu-engine-progs)"; exit 1; }
done
run() { LD_LIBRARY_PATH="$LIBS:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
left() { echo $(( BUDGET - ($(date +%s) - t_start) )); }

# The seed's prefill table: "latency_s cost" per model, layout and length.
seed_prefill() { # MODEL N LEN
    case "$1/$2" in
    120b/1) set -- 0.364:0.037 2.421:0.062 7.375:0.094 23.902:0.156 "$3" ;;
    120b/2) set -- 0.190:0.039 1.245:0.063 3.786:0.096 12.116:0.158 "$3" ;;
    120b/4) set -- 0.165:0.067 0.900:0.092 2.449:0.125 7.165:0.187 "$3" ;;
    120b/8) set -- 0.179:0.145 0.839:0.171 2.003:0.204 5.119:0.267 "$3" ;;
    20b/1) set -- 0.239:0.024 1.610:0.041 4.895:0.062 16.037:0.104 "$3" ;;
    20b/2) set -- 0.127:0.026 0.833:0.042 2.522:0.064 8.143:0.106 "$3" ;;
    20b/4) set -- 0.108:0.044 0.593:0.060 1.616:0.082 4.766:0.124 "$3" ;;
    20b/8) set -- 0.116:0.094 0.547:0.111 1.310:0.133 3.365:0.175 "$3" ;;
    esac
    case "$5" in 8192) v=$1 ;; 32768) v=$2 ;; 65536) v=$3 ;; 128000) v=$4 ;; *) echo "seed: -"; return ;; esac
    echo "${v%:*} s, \$${v#*:}"
}

# devices N: "0,1,..,N-1" when the machine has N GPUs, else N zeros
devices() {
    local n=$1 i d=""
    for ((i = 0; i < n; i++)); do
        if [ "$NGPU" -ge "$n" ]; then d="$d${d:+,}$i"; else d="$d${d:+,}0"; fi
    done
    echo "$d"
}
shared() { [ "$NGPU" -lt "$1" ]; }

# bench NAME SECONDS ARGS...: one tandem-bench run within the budget
bench() {
    local name=$1 limit=$2 l
    shift 2
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 30 ]; then
        echo "== $name: skipped (time budget)"; echo "skipped: time budget" >"$OUT/$name.log"; return 1
    fi
    echo "== $name (${limit} s at most): tandem-bench $*"
    run timeout "$limit" "$BENCH" --device "$DEVICE" --weights fp8 "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    grep -E '^(prefill|decode) |^# layout|did not fit' "$OUT/$name.log"
    [ $rc -eq 0 ] || { echo "$name: exit $rc"; tail -n 4 "$OUT/$name.log"; status=1; }
    return $rc
}

echo "== GPUs: $NGPU ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)); budget ${BUDGET} s"

# 1. the communicator alone (2 and 4 ranks; one GPU each when there are enough)
for n in 2 4; do
    l=$(left)
    if [ "$l" -lt 60 ]; then echo "== bench_comm $n ranks: skipped (time budget)"; continue; fi
    echo "== bench_comm --ranks $n --devices $(devices "$n")$(shared "$n" && echo ' (ranks sharing GPU 0: staged)')"
    comm_dev=(--devices "$(devices "$n")"); [ "$DEVICE" = cpu ] && comm_dev=(--cpu)
    run timeout 100 "$COMM" --ranks "$n" "${comm_dev[@]}" --repeat 10 >"$OUT/comm$n.log" 2>&1 ||
        { status=1; tail -n 4 "$OUT/comm$n.log"; }
    grep -E '^# |^\| ' "$OUT/comm$n.log"
done

# 2. one rank per model: the TP1 prefill rows and the DP1 decode rows (two
# runs, so that a prefill that does not fit cannot take the decode rows)
for m in $MODELS; do
    cfg=$CONFIGS/gpt-oss-$m.json
    # prompts longer than CHUNK_ABOVE tokens go in chunks of PREFILL_CHUNK (as
    # the prefiller's --chunk-tokens does): a 128000-token forward of the
    # 120b in one piece needs more expert temporaries than the H200 has left
    short=$(echo "$ALL_LENS" | tr ',' '\n' | awk -v c="$CHUNK_ABOVE" '$1 <= c' | paste -sd,)
    long=$(echo "$ALL_LENS" | tr ',' '\n' | awk -v c="$CHUNK_ABOVE" '$1 > c' | paste -sd,)
    [ -n "$short" ] && bench "oss${m}_tp1" 120 --synthetic "$cfg" --prefill "$short" --batch none --repeat 1
    [ -n "$long" ] && bench "oss${m}_tp1long" 120 --synthetic "$cfg" --prefill "$long" --batch none \
        --repeat 1 --chunk-tokens "$PREFILL_CHUNK"
    # 120b's decode at batch 128 x 8192 cached tokens needs an FP8 KV cache
    # next to its 65 GB of weights on one GPU
    kv=bf16; [ "$m" = 120b ] && kv=fp8
    bench "oss${m}_dp1" 90 --synthetic "$cfg" --prefill none --batch $ALL_BATCHES \
        --context "$CONTEXT" --steps 8 --repeat 2 --kv-dtype $kv
done

# 3. the multi-rank layouts: TP=EP=N prefill, DP=EP=N decode
for n in 2 4 8; do
    for m in $MODELS; do
        cfg=$CONFIGS/gpt-oss-$m.json
        lens=$ALL_LENS repeat=1
        if shared "$n"; then
            [ "$m" = 120b ] && [ "$n" -gt "$SHARED_MAX_120B" ] && continue
            lens=$SHARED_LENS
        fi
        bench "oss${m}_tp$n" 90 --synthetic "$cfg" --tp "$n" --ep "$n" --rank-devices "$(devices "$n")" \
            --prefill "$lens" --batch none --repeat $repeat
    done
    # shared decode: the 20b only, and not 8 ranks (8 KV caches on one GPU)
    for m in $MODELS; do
        if shared "$n" && { [ "$m" != 20b ] || [ "$n" -gt 4 ]; }; then continue; fi
        cfg=$CONFIGS/gpt-oss-$m.json
        batches=$ALL_BATCHES repeat=2
        shared "$n" && batches=$SHARED_BATCHES repeat=1
        bench "oss${m}_dp$n" 60 --synthetic "$cfg" --dp "$n" --ep "$n" --rank-devices "$(devices "$n")" \
            --prefill none --batch "$batches" --context "$CONTEXT" --steps 8 --repeat $repeat
    done
done

# 4. the tables
ms_of() { # LOG PHASE KEY: the median ms of the row whose size is KEY (the
    # rows end "ms tokens/s floor x-floor"; a row saying why it did not run
    # has no number there)
    [ -f "$1" ] || return 0
    if [ "$2" = prefill ]; then
        awk -v k="$3" '$1 == "prefill" && $3 == k && $(NF-3) ~ /^[0-9.]+$/ { print $(NF-3); exit }' "$1"
    else
        awk -v k="$3," '$1 == "decode" && $3 == k && $(NF-3) ~ /^[0-9.]+$/ { print $(NF-3); exit }' "$1"
    fi
}
why_not() { # LOG PHASE KEY: "did not fit" / "out of memory" / "not run"
    if [ -f "$1" ] && grep -qE "^$2 .* $3,? .*did not fit" "$1"; then echo "did not fit"
    elif [ -f "$1" ] && grep -q "out of memory" "$1"; then echo "out of memory"
    else echo "not run"; fi
}
echo
echo "== seed table: prefill latency and \$ per million input tokens at \$$PRICE/GPU-hour"
echo "(Tandem, FP8 random weights of the real shapes; the seed's figures in brackets)"
for m in $MODELS; do
    echo
    echo "GPT-OSS ${m^^}:"
    echo
    echo "| layout | GPUs | $(echo $ALL_LENS | sed 's/,/ | /g') |"
    echo "| --- | --- |$(echo $ALL_LENS | sed 's/[0-9]*/ --- |/g; s/,//g')"
    for n in 1 2 4 8; do
        log=$OUT/oss${m}_tp$n.log
        if [ "$n" -gt 1 ] && shared "$n"; then gpus="1 shared by $n ranks"; else gpus=$n; fi
        row="| EP$n DP1 TP$n | $gpus |"
        for len in ${ALL_LENS//,/ }; do
            ms=$(ms_of "$log" prefill "$len")
            [ -z "$ms" ] && [ "$n" = 1 ] && ms=$(ms_of "$OUT/oss${m}_tp1long.log" prefill "$len")
            if [ -z "$ms" ]; then
                cell=$(why_not "$log" prefill "$len")
                [ "$n" = 1 ] && [ "$len" -gt "$CHUNK_ABOVE" ] &&
                    cell=$(why_not "$OUT/oss${m}_tp1long.log" prefill "$len")
            elif [ "$n" -gt 1 ] && shared "$n"; then
                cell=$(awk -v ms="$ms" 'BEGIN { printf "%.3f s, -", ms / 1e3 }')
            else
                cell=$(awk -v ms="$ms" -v n="$n" -v len="$len" -v p="$PRICE" \
                       'BEGIN { printf "%.3f s, $%.3f", ms / 1e3, n * p / 3600 * ms / 1e3 / len * 1e6 }')
            fi
            row="$row $cell ($(seed_prefill "$m" "$n" "$len")) |"
        done
        echo "$row"
    done
done
echo
echo "Shared rows (GPUs \"1 shared by N ranks\"): the N ranks take turns on one GPU and"
echo "their collectives are staged through host memory, so the latency is the work plus the"
echo "communicator's overhead, not a multi-GPU speed-up; no cost is given for them."
echo "Prompts longer than $CHUNK_ABOVE tokens ran in chunks of $PREFILL_CHUNK (the prefiller's"
echo "--chunk-tokens; every chunk attends to the cached ones), shorter ones in one forward."
echo
echo "== decode tokens/s per GPU (context $CONTEXT, batch per rank)"
echo
echo "| model | layout | GPUs | $(echo $ALL_BATCHES | sed 's/,/ | /g') |"
echo "| --- | --- | --- |$(echo $ALL_BATCHES | sed 's/[0-9]*/ --- |/g; s/,//g')"
for m in $MODELS; do
    for n in 1 2 4 8; do
        log=$OUT/oss${m}_dp$n.log
        [ -f "$log" ] || continue
        if [ "$n" -gt 1 ] && shared "$n"; then gpus="1 shared (tokens/s per rank)"; else gpus=$n; fi
        row="| $m | DP$n EP$n | $gpus |"
        for b in ${ALL_BATCHES//,/ }; do
            ms=$(ms_of "$log" decode "$b")
            if [ -n "$ms" ]; then
                row="$row $(awk -v ms="$ms" -v b="$b" 'BEGIN { printf "%.0f", b / (ms / 1e3) }') |"
            elif grep -qE "^decode +batch $b, .*did not fit" "$log"; then
                row="$row no fit |"
            else
                row="$row - |"
            fi
        done
        echo "$row"
    done
done
echo
echo "seed_table: $(( $(date +%s) - t_start )) s; logs in $OUT"
exit $status
