#!/usr/bin/env bash
# The serving benchmark on one GPU (tests/gpu/run.sh serve): tandem-router +
# tandem-prefiller + tandem-decoder, both workers on $DEVICE with $WEIGHTS
# random weights of $CONFIG's shapes (--synthetic: gpt-oss-20b's real shapes
# by default), driven by tandem-servebench with token-id prompts.
#
#   serve_bench.sh [--help] [IN/OUT ...]
#
#   1. a concurrency sweep ($CONC, default 1,4,16,64,256) for each workload
#      IN/OUT given (else $WORKLOADS, default 4096/200 32768/100 1024/1024
#      8192/256): per point at most $MAX_REQ requests, none started after
#      $SEND_S s and what still runs at $POINT_S s aborted (left out of the
#      latencies, counted in the JSON), so every point is bounded and the
#      whole step fits its budget; each point also reports where a request's
#      time goes (tandem_request_stage_seconds and the workers' histograms,
#      through the router's /metrics);
#   2. with DISAGG=1 (default), the disaggregation measurement: ITL p99 of
#      $DIS_CONC running decodes ($DIS_WORKLOAD) alone, then the same decode
#      load while $LONG-token prompts (1 output token) arrive two at a time
#      from a second client.
# One device call runs at most ~9 minutes, so the full sweep of issue 20
# takes two calls (docs/PERF.md gives the commands):
#   OUT=$OUT/a DISAGG=0 bash tests/gpu/serve_bench.sh 4096/200 32768/100
#   OUT=$OUT/b bash tests/gpu/serve_bench.sh 1024/1024 8192/256
# Writes under $OUT: serve_W.json / .svg / .txt per workload, disagg_*.json,
# the processes' logs; prints a short table last (the sweep's rows: load,
# ok/sent, throughput, TTFT, ITL, cost; the time breakdown; the ratio).
# Exit status 0 when every run ended, 1 when a process failed to start or a
# run failed.
#
# Variables:
#   DEVICE           cuda (default), cuda:N, or cpu: the same control flow on
#                    a machine without a GPU with tiny shapes (CONFIG
#                    tests/fixtures/gpt_oss_tiny/config.json, WORKLOADS
#                    "64/16 256/8 32/32 128/8", CONC 1,4,16, short points)
#   TANDEM_PREBUILT  folder from tests/gpu/make_prebuilt_cluster.sh (bin/ with
#                    tandem-servebench, lib/, ucx/), or a .tar.xz of it
#                    (unpacked under $OUT); else BIN_DIR (default
#                    build-cuda/bin, build/bin on the CPU)
#   OUT              results and logs (default /tmp/tandem-gpu-serve)
#   BUDGET_S         the whole step's time bound (default 500): a workload
#                    that would start past it is skipped and says so
#   SEND_S, POINT_S  per point: start requests for SEND_S s, abort at POINT_S
#                    s (GPU default 26 / 34: two workloads of five points
#                    and the disaggregation runs fit 500 s)
#   SAME_HOST        the workers' --kv-same-host: shm (default: the KV goes
#                    over UCX shared memory, sysv/posix) or tls (UCX_TLS's
#                    transports with failure detection: loopback tcp here)
#   UCX_TLS          default tcp,sysv,posix,self (no cma: it needs ptrace
#                    rights a container may not grant)
#   CONFIG, WEIGHTS (fp8; f32 on the CPU), CONC, WORKLOADS, MAX_REQ,
#   KV_PAGES (decoder pages of 16 tokens), MAX_BATCH, VOCAB, DISAGG,
#   DIS_CONC, DIS_WORKLOAD, LONG
set -u -o pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
for w in "$@"; do
    case "$w" in
    [0-9]*/[0-9]*) ;;
    *) echo "serve: bad workload '$w' (IN/OUT, e.g. 4096/200; --help)"; exit 2 ;;
    esac
done
[ $# -gt 0 ] && WORKLOADS="$*"
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/tandem-gpu-serve}
mkdir -p "$OUT"
export UCX_TLS=${UCX_TLS:-tcp,sysv,posix,self} UCX_WARN_UNUSED_ENV_VARS=n
SAME_HOST=${SAME_HOST:-shm}
DISAGG=${DISAGG:-1}
t_start=$(date +%s)
BUDGET=${BUDGET_S:-500}
if [ "$DEVICE" = cpu ]; then
    CONFIG=${CONFIG:-tests/fixtures/gpt_oss_tiny/config.json}
    WEIGHTS=${WEIGHTS:-f32}
    CONC=${CONC:-1,4,16}
    WORKLOADS=${WORKLOADS:-"64/16 256/8 32/32 128/8"}
    SEND_S=${SEND_S:-2}; POINT_S=${POINT_S:-4}; MAX_REQ=${MAX_REQ:-64}
    KV_PAGES=${KV_PAGES:-4096}; MAX_BATCH=${MAX_BATCH:-64}; VOCAB=${VOCAB:-512}
    DIS_CONC=${DIS_CONC:-4}; DIS_WORKLOAD=${DIS_WORKLOAD:-32/64}; LONG=${LONG:-1024}
    MAX_PROMPT=${MAX_PROMPT:-2048}; CHUNK=${CHUNK:-512}
else
    CONFIG=${CONFIG:-tests/fixtures/configs/gpt-oss-20b.json}
    WEIGHTS=${WEIGHTS:-fp8}
    CONC=${CONC:-1,4,16,64,256}
    WORKLOADS=${WORKLOADS:-"4096/200 32768/100 1024/1024 8192/256"}
    SEND_S=${SEND_S:-26}; POINT_S=${POINT_S:-34}; MAX_REQ=${MAX_REQ:-4096}
    # bf16 KV (the default on cuda): 24 layers x 8 heads x 64 x 2 x 2 B =
    # 48 KiB a token; 32768 pages of 16 tokens = 24 GiB (524288 tokens: 16
    # requests of 32768/100 at once), next to two copies of the weights
    # (2 x 23.7 GB) and the prefiller's own cache on the 139 GiB H200, and
    # as much pinned host memory (the staged KV path keeps a host copy of
    # the pools) on the 128 GiB host
    KV_PAGES=${KV_PAGES:-32768}; MAX_BATCH=${MAX_BATCH:-256}; VOCAB=${VOCAB:-200000}
    DIS_CONC=${DIS_CONC:-32}; DIS_WORKLOAD=${DIS_WORKLOAD:-128/400}; LONG=${LONG:-32768}
    MAX_PROMPT=${MAX_PROMPT:-33024}; CHUNK=${CHUNK:-8192}
fi
NAME=$(basename "$CONFIG" .json)
[ "$NAME" = config ] && NAME=$(basename "$(dirname "$CONFIG")")
LIBS=""
if [ -n "${TANDEM_PREBUILT:-}" ]; then
    case "$TANDEM_PREBUILT" in
    *.tar.xz)
        mkdir -p "$OUT/unpacked" && tar xJf "$TANDEM_PREBUILT" -C "$OUT/unpacked" ||
            { echo "serve: cannot unpack $TANDEM_PREBUILT"; exit 1; }
        TANDEM_PREBUILT=$OUT/unpacked/$(tar tJf "$TANDEM_PREBUILT" | head -1 | cut -d/ -f1) ;;
    esac
    PRE=$(cd "$TANDEM_PREBUILT" && pwd) || { echo "serve: no folder $TANDEM_PREBUILT"; exit 1; }
    BIN=$PRE/bin
    LIBS=$PRE/lib
    export UCX_MODULE_DIR=$PRE/ucx
else
    BIN=${BIN_DIR:-$([ "$DEVICE" = cpu ] && echo build/bin || echo build-cuda/bin)}
fi
for p in tandem-router tandem-prefiller tandem-decoder tandem-servebench; do
    [ -x "$BIN/$p" ] || { echo "serve: $BIN/$p missing (make_prebuilt_cluster.sh, or BIN_DIR)"; exit 1; }
done
# /healthz through python (the GPU machine may have no curl)
healthz() {
    python3 -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())
except Exception as e:
    print("ERROR", e)' "$URL/healthz"
}
spawn() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$@"; }
run() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
left() { echo $((BUDGET - ($(date +%s) - t_start))); }
echo "# serve: $NAME ($WEIGHTS, random weights) on $DEVICE, concurrency $CONC, workloads $WORKLOADS," \
    "points: <= $MAX_REQ requests, sent for $SEND_S s, cut at $POINT_S s; KV: UCX_TLS=$UCX_TLS," \
    "--kv-same-host $SAME_HOST; logs in $OUT"

PIDS=()
stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    PIDS=()
}
trap stop_all EXIT
trap 'exit 1' INT TERM

rm -f "$OUT/ports"
spawn "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --port-file "$OUT/ports" \
    --worker-timeout-ms 30000 --max-active-requests 2048 >"$OUT/router.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$OUT/ports" ] && break; sleep 0.05; done
http=$(sed -n 's/^http_port=//p' "$OUT/ports" 2>/dev/null)
wport=$(sed -n 's/^worker_port=//p' "$OUT/ports" 2>/dev/null)
[ -n "$http" ] && [ -n "$wport" ] || { echo "serve: the router did not start"; tail -3 "$OUT/router.log"; exit 1; }
URL=http://127.0.0.1:$http
common=(--router "tcp://127.0.0.1:$wport" --synthetic "$CONFIG" --model-name "$NAME"
        --device "$DEVICE" --weights "$WEIGHTS" --metrics-port -1 --kv-same-host "$SAME_HOST")
spawn "$BIN/tandem-prefiller" "${common[@]}" --worker-id prefiller-serve \
    --max-prompt-tokens "$MAX_PROMPT" --chunk-tokens "$CHUNK" >"$OUT/prefiller.log" 2>&1 &
PIDS+=($!)
spawn "$BIN/tandem-decoder" "${common[@]}" --worker-id decoder-serve --kv-pages "$KV_PAGES" \
    --max-batch "$MAX_BATCH" >"$OUT/decoder.log" 2>&1 &
PIDS+=($!)
ready=0
for _ in $(seq 1 600); do   # CUDA start-up and the synthetic weights: up to 120 s
    healthz | grep -q '"ready":true' && { ready=1; break; }
    kill -0 "${PIDS[1]}" 2>/dev/null && kill -0 "${PIDS[2]}" 2>/dev/null || break
    sleep 0.2
done
if [ "$ready" != 1 ]; then
    echo "serve: the workers did not register"
    tail -3 "$OUT/prefiller.log" "$OUT/decoder.log"
    exit 1
fi
echo "# cluster up after $(($(date +%s) - t_start)) s"
grep -h "model on\|KV transfer" "$OUT/prefiller.log" "$OUT/decoder.log" | sed 's/^/# /'
# the KV path the pushes take (transports, shared memory or not)
for _ in $(seq 1 50); do grep -q "connection ready" "$OUT/prefiller.log" && break; sleep 0.1; done
grep -h "connection ready" "$OUT/prefiller.log" | head -1 | sed 's/^/# /'

status=0
bench() { # TAG ARGS...: one tandem-servebench run, its table to $OUT/TAG.txt
    local tag=$1
    shift
    run timeout 300 "$BIN/tandem-servebench" --url "$URL" --model "$NAME" --vocab "$VOCAB" \
        --metrics-url "$URL/metrics" --settle-s 20 --timeout-s 120 --gpus 1 --usd-per-gpu-hour 3 \
        --slo-ttft-ms 2000 --slo-itl-ms 50 --json "$OUT/$tag.json" "$@" \
        >"$OUT/$tag.txt" 2>"$OUT/$tag.err"
    local rc=$?
    [ $rc -eq 0 ] || { echo "# $tag: exit $rc"; tail -3 "$OUT/$tag.err" | sed 's/^/#   /'; status=1; }
    return $rc
}
npoints=$(echo "$CONC" | tr ',' '\n' | wc -l)
for w in $WORKLOADS; do
    in=${w%/*}; out=${w#*/}
    need=$((npoints * (POINT_S + 3)))
    if [ "$(left)" -lt "$need" ]; then
        echo "# workload $w: skipped (budget: $(left) s left, needs about $need s)"; status=1; continue
    fi
    bench "serve_${in}_${out}" --sweep-concurrency "$CONC" --input-len "$in" --output-len "$out" \
        --per-client 64 --max-requests "$MAX_REQ" --send-for-s "$SEND_S" --point-limit-s "$POINT_S" \
        --label "$NAME $WEIGHTS on one GPU (router + prefiller + decoder)" \
        --svg "$OUT/serve_${in}_${out}.svg"
    echo "== $w"
    sed 's/^/  /' "$OUT/serve_${in}_${out}.txt"
done

# Disaggregation: the same decode load alone, then with long prompts arriving.
d_in=${DIS_WORKLOAD%/*}; d_out=${DIS_WORKLOAD#*/}
dis_args=(--concurrency "$DIS_CONC" --requests "$DIS_CONC" --input-len "$d_in" --output-len "$d_out"
          --point-limit-s "$POINT_S" --seed 11)
if [ "$DISAGG" != 1 ]; then
    echo "# disaggregation measurement: not asked for (DISAGG=$DISAGG)"
elif [ "$(left)" -gt $((2 * POINT_S + 10)) ]; then
    bench disagg_alone "${dis_args[@]}" --label "decodes alone"
    run timeout $((POINT_S + 30)) "$BIN/tandem-servebench" --url "$URL" --model "$NAME" \
        --vocab "$VOCAB" --concurrency 2 --requests 64 --input-len "$LONG" --output-len 1 \
        --send-for-s "$((POINT_S + 1))" --point-limit-s "$((POINT_S + 2))" --seed 12 \
        --json "$OUT/disagg_long.json" >"$OUT/disagg_long.txt" 2>"$OUT/disagg_long.err" &
    long_pid=$!
    sleep 1
    bench disagg_with_long "${dis_args[@]}" --label "decodes while $LONG-token prompts arrive"
    wait "$long_pid"
else
    echo "# disaggregation measurement: skipped (budget)"; status=1
fi

stop_all
trap - EXIT
# The short table: every sweep row, then the ratio.
python3 - "$OUT" "$NAME" "$WEIGHTS" "$DEVICE" "$LONG" <<'PYEND'
import glob, json, os, sys
out, name, weights, device, long_len = sys.argv[1:]
rows = []
print("\n== serve summary: %s %s on %s (router + prefiller + decoder, one device)" % (name, weights, device))
print("| in/out | conc | ok/sent | req/s | total tok/s | out tok/s | TTFT p50/p99 ms | ITL p50/p99 ms | TPOT p50 ms | $/M out | $/M total | streamed: out tok/s, ITL p50/p99 ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for f in sorted(glob.glob(os.path.join(out, "serve_*.json")), key=lambda p: [int(x) for x in os.path.basename(p)[6:-5].split("_")]):
    wl = os.path.basename(f)[6:-5].replace("_", "/")
    for p in json.load(open(f))["points"]:
        o = p["outcomes"]
        sent = p["requests"] - o["not_sent"]
        print("| %s | %d | %d/%d | %.2f | %.0f | %.0f | %.0f/%.0f | %.1f/%.1f | %.1f | %.3f | %.3f | %.0f, %.1f/%.1f |" % (
            wl, p["concurrency"], p["completed"], sent, p["request_throughput"],
            p["total_token_throughput"], p["output_token_throughput"], p["ttft_ms"]["p50"],
            p["ttft_ms"]["p99"], p["itl_ms"]["p50"], p["itl_ms"]["p99"], p["tpot_ms"]["p50"],
            p["usd_per_million_output_tokens"], p["usd_per_million_total_tokens"],
            p["streamed_output_token_throughput"], p["itl_streamed_ms"]["p50"],
            p["itl_streamed_ms"]["p99"]))
print("\nwhere a request's time goes (means per request, ms: the router's tandem_request_stage_seconds,"
      " the decoder's step histogram; router + admission + prefill queue + prefill + KV transfer ="
      " router TTFT)")
print("| in/out | conc | client TTFT | router TTFT | router | admission | prefill queue | prefill | KV transfer | first decode | decode step | router ITL |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for f in sorted(glob.glob(os.path.join(out, "serve_*.json")), key=lambda p: [int(x) for x in os.path.basename(p)[6:-5].split("_")]):
    wl = os.path.basename(f)[6:-5].replace("_", "/")
    for p in json.load(open(f))["points"]:
        s = p.get("stages_mean_ms")
        if not s:
            continue
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |" % (
            wl, p["concurrency"], p["ttft_ms"]["mean"], s["router_ttft"], s["stage_router"],
            s["stage_admission"], s["stage_prefill_queue"], s["stage_prefill"],
            s["stage_kv_transfer"], s["stage_first_decode"], s["decode_step"], s["router_itl"]))
try:
    a = json.load(open(os.path.join(out, "disagg_alone.json")))["points"][0]["itl_ms"]
    b = json.load(open(os.path.join(out, "disagg_with_long.json")))["points"][0]["itl_ms"]
    l = json.load(open(os.path.join(out, "disagg_long.json")))["points"][0]
    ratio = b["p99"] / a["p99"] if a["p99"] > 0 else float("nan")
    print("\ndisaggregation: decode ITL p99 %.2f ms alone, %.2f ms while %s-token prompts arrive "
          "(%d prefilled): ratio %.2f (p50 %.2f -> %.2f ms)" % (
              a["p99"], b["p99"], long_len, l["completed"], ratio, a["p50"], b["p50"]))
except (OSError, KeyError, IndexError, ValueError) as e:
    print("\ndisaggregation: no result (%s)" % e)
PYEND
echo "serve: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(($(date +%s) - t_start)) s"
exit $status
