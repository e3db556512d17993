#!/usr/bin/env bash
# The whole cluster on the GPU: tandem-router + tandem-prefiller +
# tandem-decoder on 127.0.0.1, both workers with --device $DEVICE, f32
# weights and --kv-dtype $KV_DTYPE, for each tiny HF fixture (gpt_oss_tiny,
# qwen3_moe_tiny):
#   - one greedy /v1/completions of the fixture's prompt, 32 tokens: the
#     token ids must equal HF's golden 32 (golden.safetensors gen_ids) with
#     an f32 cache; with a bf16 cache (the CUDA default) they must equal
#     tandem-generate --device $DEVICE --kv-dtype $KV_DTYPE's (a bf16 cache
#     may flip a token where HF's top-2 margin is tiny: gpt_oss_tiny's 23rd
#     on the CPU), which must share a prefix of at least 16 with HF's (with
#     KV_DTYPE=fp8 the prefix is only printed);
#   - four concurrent identical requests (the decoder batches them): each
#     must equal the golden too;
#   - one request with n = 3 (one prefill; the decoder's branches share the
#     prompt's pages, copying the last one on the device): each choice must
#     equal the golden too;
#   - a seeded sampled request (temperature 0.9, top-p 0.95, top-k 50, seed
#     1234, 24 tokens) must equal tandem-generate --device $DEVICE with the
#     same seed: the first token is sampled on the prefiller's GPU, the rest
#     on the decoder's, continuing the sampler state the prefiller handed
#     over (skipped when tandem-generate is not in the programs' folder);
#   - the workers' logs must name the device, the KV cache dtype and the KV
#     path they took;
#   - SIGTERM stops all three, each exits 0.
# RANKS=1: multi-rank workers all on the one GPU: a TP=2/EP=2 prefiller and
# a DP=2xEP=2 decoder (--rank-devices N,N: both ranks of each on GPU N, so
# the model's collectives take the staged communicator, logged per rank);
# the same checks (every DP rank of the decoder registers), plus 64
# concurrent streamed greedy requests (SSE), each returning HF's golden
# tokens, and (qwen3_moe_tiny) the prefiller's rank 1 SIGKILLed: the group
# must report the failure to the router and exit 1 within 30 s.
# The prefiller's pages hold 16 tokens and the decoder's 5, so the KV push
# reshards between page layouts (on the GPU through pinned host buffers
# when UCX has no CUDA transports, which Debian's lacks).
# Prints TAP lines, then a short table; exit status 0 when all passed.
#
# Variables:
#   DEVICE           cuda (default), cuda:N or cpu (to debug the script on a
#                    machine without a GPU, with a CPU build)
#   TANDEM_PREBUILT  folder from tests/gpu/make_prebuilt_cluster.sh (bin/,
#                    lib/, ucx/); else BIN_DIR (default build-cuda/bin) with
#                    the system's libraries
#   PYTHON           the HTTP client's interpreter (default
#                    /opt/torch/.venv/bin/python3, else python3)
#   OUT              logs (default /tmp/tandem-gpu-cluster)
#   KV_DTYPE         the workers' --kv-dtype: auto (default: bf16 on cuda, f32
#                    on cpu), f32, bf16 or fp8
#   WORKER_FLAGS     more flags for both workers (e.g. --kv-path staged, to
#                    take the GPU's staging path on the CPU too)
#   UCX_TLS          default tcp,self (loopback TCP: no shared-memory or
#                    ptrace permissions needed in a container)
#   RANKS            1: the multi-rank layout above
#   NCCL_LIB         where libnccl.so.2 is (the workers link NCCL in a
#                    CUDA=1 build with nccl.h; the GPU image keeps it in
#                    the nvidia-nccl Python package)
# Bounded: every wait has a limit; a fixture takes a few seconds.
set -u -o pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda}
KV_DTYPE=${KV_DTYPE:-auto}
case "$KV_DTYPE:$DEVICE" in
auto:cpu | f32:*) KV_RESOLVED=f32 ;;
fp8:*) KV_RESOLVED=fp8 ;;
*) KV_RESOLVED=bf16 ;;
esac
OUT=${OUT:-/tmp/tandem-gpu-cluster}
mkdir -p "$OUT"
export UCX_TLS=${UCX_TLS:-tcp,self} UCX_WARN_UNUSED_ENV_VARS=n PYTHONUNBUFFERED=1
if [ -n "${PYTHON:-}" ]; then :
elif [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3
else PYTHON=python3; fi
LIBS=""
if [ -n "${TANDEM_PREBUILT:-}" ]; then
    PRE=$(cd "$TANDEM_PREBUILT" && pwd) || { echo "Bail out! no folder $TANDEM_PREBUILT"; exit 1; }
    BIN=$PRE/bin
    LIBS=$PRE/lib
    export UCX_MODULE_DIR=$PRE/ucx
    how="prebuilt $TANDEM_PREBUILT ($(head -1 "$PRE/BUILD_INFO" 2>/dev/null))"
else
    BIN=${BIN_DIR:-build-cuda/bin}
    how="$BIN"
fi
# Runs a program with our library path only (python keeps its own); used
# with & so that $! is the program itself (exec), which SIGTERM must reach.
NCCL_LIB=${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
LIBS="$LIBS${LIBS:+:}$NCCL_LIB"
spawn() { LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$@"; }
# RANKS=1: both ranks of each worker on the one device
PRE_RANKS=()
DEC_RANKS=()
if [ "${RANKS:-0}" = 1 ]; then
    PRE_RANKS=(--tp 2 --ep 2)
    DEC_RANKS=(--dp 2 --ep 2)
    case "$DEVICE" in
    cuda) PRE_RANKS+=(--rank-devices 0,0); DEC_RANKS+=(--rank-devices 0,0) ;;
    cuda:*) n=${DEVICE#cuda:}; PRE_RANKS+=(--rank-devices "$n,$n"); DEC_RANKS+=(--rank-devices "$n,$n") ;;
    esac
fi
for p in tandem-router tandem-prefiller tandem-decoder; do
    [ -x "$BIN/$p" ] || { echo "Bail out! $BIN/$p missing (make CUDA=1, or TANDEM_PREBUILT)"; exit 1; }
done
command -v "$PYTHON" >/dev/null || { echo "Bail out! no python ($PYTHON) for the HTTP client"; exit 1; }
echo "# device $DEVICE, $KV_RESOLVED KV cache${WORKER_FLAGS:+ ($WORKER_FLAGS)}, programs: $how, UCX_TLS=$UCX_TLS, logs in $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total \
    --format=csv,noheader 2>&1 | sed 's/^/# GPU: /'

. tests/tap.sh   # (the working directory is the repository root)

PIDS=()
NAMES=()
stop_all() {   # stop_all [CHECK]: SIGTERM, 10 s, SIGKILL; CHECK=1: TAP on exit statuses
    local i pid rc
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for i in "${!PIDS[@]}"; do
        pid=${PIDS[$i]}
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rc=$?
        if [ "${1:-0}" = 1 ] && [ "${NAMES[$i]}" = "${KILLED:-}" ]; then
            :   # its exit was checked when its rank was killed
        elif [ "${1:-0}" = 1 ]; then
            check "$FX: ${NAMES[$i]} exits 0 on SIGTERM" "$rc" "exit $rc" \
                "$(tail -3 "$OUT/$FX.${NAMES[$i]}.log")"
        fi
    done
    PIDS=()
    NAMES=()
}
trap 'stop_all' EXIT
trap 'exit 1' INT TERM

# The HTTP client: py get URL | py post URL BODY | py golden DIR KEY |
# py check URL MODEL PROMPT GOLDEN N (N concurrent greedy requests; prints
# one line per request: "same" or the ids it got, then the seconds).
py() {
    "$PYTHON" - "$@" <<'PYEOF'
import json, struct, sys, time, threading, urllib.request
def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()
def post(url, body):
    req = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
cmd = sys.argv[1]
if cmd == "get":
    try:
        print(get(sys.argv[2]))
    except Exception as e:
        print("ERROR", e)
elif cmd == "golden":
    data = open(sys.argv[2] + "/golden.safetensors", "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    entry = json.loads(data[8:8 + n])[sys.argv[3]]
    b, e = entry["data_offsets"]
    raw = data[8 + n + b:8 + n + e]
    print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
elif cmd == "seeded":
    url, model, prompt = sys.argv[2], sys.argv[3], sys.argv[4]
    body = json.dumps({"model": model, "prompt": [int(t) for t in prompt.split(",")],
                       "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "top_k": 50,
                       "seed": 1234, "ignore_eos": True})
    code, text = post(url + "/v1/completions", body)
    if code != 200:
        print("HTTP %d %s" % (code, text[:200]))
    else:
        print(",".join(map(str, json.loads(text)["choices"][0]["token_ids"])))
elif cmd == "streams":
    # N concurrent streamed greedy requests: each must end [DONE] with the
    # golden ids; prints how many did, then the seconds
    url, model, prompt, golden, n = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
    body = json.dumps({"model": model, "prompt": [int(t) for t in prompt.split(",")],
                       "max_tokens": 32, "temperature": 0, "ignore_eos": True, "stream": True})
    res = [None] * n
    def one(i):
        try:
            req = urllib.request.Request(url + "/v1/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                text = r.read().decode()
            ev = text.split("\n\n")
            if ev[-2:] != ["data: [DONE]", ""]:
                res[i] = "no [DONE]"
                return
            toks = []
            for e in ev[:-2]:
                j = json.loads(e[6:])
                if "error" in j:
                    res[i] = "error " + j["error"]["message"]
                    return
                for c in j["choices"]:
                    toks += c.get("token_ids", [])
            ids = ",".join(map(str, toks))
            res[i] = "same" if ids == golden else ids
        except Exception as e:
            res[i] = "ERROR %s" % e
    t0 = time.time()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    bad = [r for r in res if r != "same"]
    print(n - len(bad))
    for r in bad[:3]: print("# " + str(r))
    print("%.3f" % (time.time() - t0))
elif cmd == "nchoices":
    # n = 3 greedy choices of one prompt (one prefill, decoder branches
    # sharing its KV pages, the partly filled last page copied on the
    # device): prints how many equal the golden, then the ids of the others
    url, model, prompt, golden = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    body = json.dumps({"model": model, "prompt": [int(t) for t in prompt.split(",")],
                       "max_tokens": 32, "temperature": 0, "ignore_eos": True, "n": 3})
    code, text = post(url + "/v1/completions", body)
    if code != 200:
        print("0\n# HTTP %d %s" % (code, text[:200]))
    else:
        ids = [",".join(map(str, c["token_ids"])) for c in json.loads(text)["choices"]]
        print(sum(i == golden for i in ids))
        for i in ids:
            if i != golden: print("# " + i)
elif cmd == "check":
    url, model, prompt, golden, n = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
    body = json.dumps({"model": model, "prompt": [int(t) for t in prompt.split(",")],
                       "max_tokens": 32, "temperature": 0, "ignore_eos": True})
    res = [None] * n
    def one(i):
        try:
            code, text = post(url + "/v1/completions", body)
            if code != 200:
                res[i] = "HTTP %d %s" % (code, text[:200])
                return
            ids = ",".join(map(str, json.loads(text)["choices"][0]["token_ids"]))
            res[i] = "same" if ids == golden else ids
        except Exception as e:
            res[i] = "ERROR %s" % e
    t0 = time.time()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    for r in res: print(r)
    print("%.3f" % (time.time() - t0))
PYEOF
}

ROWS=()
for FX in gpt_oss_tiny qwen3_moe_tiny; do
    dir=tests/fixtures/$FX
    t0=$(date +%s%N)
    rm -f "$OUT/$FX".*
    prompt=$(py golden "$dir" prompt_ids)
    golden=$(py golden "$dir" gen_ids)
    if [ "$KV_RESOLVED" != f32 ]; then
        # the reference is the one-process engine with the same cache dtype
        hf=$golden
        golden=""
        [ -x "$BIN/tandem-generate" ] &&
            golden=$(LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 60 \
                     "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" --max-tokens 32 \
                     --ignore-eos --device "$DEVICE" --weights f32 --kv-dtype "$KV_DTYPE" \
                     2>"$OUT/$FX.generate_greedy.log")
        shared=0
        IFS=, read -r -a ga <<<"$golden"; IFS=, read -r -a ha <<<"$hf"
        while [ $shared -lt ${#ha[@]} ] && [ "${ga[$shared]:-x}" = "${ha[$shared]}" ]; do shared=$((shared + 1)); done
        echo "# $FX: tandem-generate with a $KV_RESOLVED cache shares HF's first $shared tokens"
        # bf16 must keep HF's first 16 (gpt_oss_tiny keeps 22 on the CPU); an
        # fp8 cache may leave them earlier (test_engine_kv_dtype bounds it)
        [ -n "$golden" ] && { [ "$KV_RESOLVED" = fp8 ] || [ $shared -ge 16 ]; }
        rc=$?
        what="runs"
        [ "$KV_RESOLVED" = bf16 ] && what="runs and shares HF's first 16 tokens"
        check "$FX: tandem-generate on $DEVICE with a $KV_RESOLVED cache $what" $rc \
            "generate: $golden" "HF:       $hf" "$(tail -2 "$OUT/$FX.generate_greedy.log" 2>/dev/null)"
    fi
    spawn "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --metrics-port -1 \
        --port-file "$OUT/$FX.ports" --heartbeat-ms 200 --worker-timeout-ms 10000 \
        >"$OUT/$FX.router.log" 2>&1 &
    PIDS+=($!); NAMES+=(router)
    for _ in $(seq 1 100); do [ -s "$OUT/$FX.ports" ] && break; sleep 0.05; done
    http=$(sed -n 's/^http_port=//p' "$OUT/$FX.ports" 2>/dev/null)
    wport=$(sed -n 's/^worker_port=//p' "$OUT/$FX.ports" 2>/dev/null)
    if [ -z "$http" ] || [ -z "$wport" ]; then
        not_ok "$FX: the router starts" "$(tail -3 "$OUT/$FX.router.log")"
        stop_all; ROWS+=("$FX|router failed|-|-|-|-|-"); continue
    fi
    URL=http://127.0.0.1:$http
    common=(--router "tcp://127.0.0.1:$wport" --model "$dir" --device "$DEVICE" --weights f32
            --kv-dtype "$KV_DTYPE" --metrics-port -1 ${WORKER_FLAGS:-})
    spawn "$BIN/tandem-prefiller" "${common[@]}" --worker-id "prefiller-gpu-$$" --page-size 16 \
        "${PRE_RANKS[@]}" >"$OUT/$FX.prefiller.log" 2>&1 &
    PIDS+=($!); NAMES+=(prefiller)
    spawn "$BIN/tandem-decoder" "${common[@]}" --worker-id "decoder-gpu-$$" --page-size 5 \
        --kv-pages 1024 "${DEC_RANKS[@]}" >"$OUT/$FX.decoder.log" 2>&1 &
    PIDS+=($!); NAMES+=(decoder)
    ready=0
    for _ in $(seq 1 600); do   # CUDA start-up and the model load: up to 60 s
        py get "$URL/healthz" | grep -q '"ready":true' && { ready=1; break; }
        for i in 1 2; do kill -0 "${PIDS[$i]}" 2>/dev/null || break 2; done
        sleep 0.1
    done
    t_ready=$((($(date +%s%N) - t0) / 1000000))
    check "$FX: prefiller and decoder start on $DEVICE and register" $((1 - ready)) \
        "$(py get "$URL/healthz")" "$(tail -3 "$OUT/$FX.prefiller.log")" "$(tail -3 "$OUT/$FX.decoder.log")"
    if [ "$ready" != 1 ]; then
        stop_all; ROWS+=("$FX|not ready|-|-|-|-|-"); continue
    fi
    if [ "${RANKS:-0}" = 1 ]; then
        # both DP ranks register (each a decoder of its own); every rank of
        # both workers logs its device and communicator
        for _ in $(seq 1 300); do
            [ "$(grep -c 'DP 2 EP 2' "$OUT/$FX.decoder.log")" -ge 2 ] && break
            sleep 0.1
        done
        want=host; [ "$DEVICE" = cpu ] || want=staged
        [ "$(grep -c "rank communicator $want" "$OUT/$FX.prefiller.log")" = 2 ] &&
            [ "$(grep -c "rank communicator $want" "$OUT/$FX.decoder.log")" = 2 ] &&
            [ "$(grep -c 'DP 2 EP 2' "$OUT/$FX.decoder.log")" = 2 ]
        check "$FX: TP=2/EP=2 prefiller and DP=2xEP=2 decoder, every rank on $DEVICE, communicator $want" $? \
            "$(grep -h "model on" "$OUT/$FX".{prefiller,decoder}.log)"
    else
        grep -qF "model on $DEVICE, f32 weights" "$OUT/$FX.prefiller.log" &&
            grep -qF "model on $DEVICE, f32 weights" "$OUT/$FX.decoder.log"
        check "$FX: both workers log the model on $DEVICE with f32 weights" $? \
            "$(grep -h "model on" "$OUT/$FX".{prefiller,decoder}.log)"
    fi
    grep -qF "$KV_RESOLVED KV cache" "$OUT/$FX.prefiller.log" &&
        grep -qF "$KV_RESOLVED KV cache" "$OUT/$FX.decoder.log"
    check "$FX: both workers hold a $KV_RESOLVED KV cache" $? \
        "$(grep -h "KV cache" "$OUT/$FX".{prefiller,decoder}.log)"
    path_p=$(sed -n 's/.*KV transfer \(.*\)$/\1/p' "$OUT/$FX.prefiller.log" | head -1)
    path_d=$(sed -n 's/.*KV transfer \(.*\)$/\1/p' "$OUT/$FX.decoder.log" | head -1)
    [ -n "$path_p" ] && [ -n "$path_d" ]
    check "$FX: both workers log their KV path" $? "prefiller: $path_p" "decoder: $path_d"
    echo "# $FX prefiller KV path: $path_p"
    echo "# $FX decoder KV path:   $path_d"

    res=$(py check "$URL" "$FX" "$prompt" "$golden" 1)
    first=$(echo "$res" | head -1)
    t_one=$(echo "$res" | tail -1)
    [ "$first" = same ]
    check "$FX: greedy /v1/completions on $DEVICE = $([ "$KV_RESOLVED" = f32 ] && echo "HF golden" || echo "tandem-generate's") 32 tokens" $? \
        "got:    $first" "golden: $golden"
    r_one=$([ "$first" = same ] && echo ok || echo FAIL)

    res=$(py check "$URL" "$FX" "$prompt" "$golden" 4)
    n_same=$(echo "$res" | head -4 | grep -c '^same$')
    t_four=$(echo "$res" | tail -1)
    [ "$n_same" = 4 ]
    check "$FX: 4 concurrent greedy requests on $DEVICE = the same 32 tokens" $? \
        "$(echo "$res" | head -4 | grep -v '^same$' | head -2)"
    r_four="$n_same/4"

    res=$(py nchoices "$URL" "$FX" "$prompt" "$golden")
    [ "$(echo "$res" | head -1)" = 3 ] && grep -q "3 choices on decoder .* as one prefill" "$OUT/$FX.router.log"
    check "$FX: n=3 greedy on $DEVICE: one prefill, three branches (copy-on-write pages) = the same 32 tokens" $? \
        "$(echo "$res" | head -3)" "$(grep -c 'as one prefill' "$OUT/$FX.router.log") one-prefill log lines"

    if [ "${RANKS:-0}" = 1 ]; then
        res=$(py streams "$URL" "$FX" "$prompt" "$golden" 64)
        n_same=$(echo "$res" | head -1)
        [ "$n_same" = 64 ]
        check "$FX: 64 concurrent streamed greedy requests = HF golden ($(echo "$res" | tail -1) s)" $? \
            "$(echo "$res" | grep '^#' | head -3)"
        r_four="$r_four, 64 streams $n_same/64"
    fi

    r_seed="-"
    if [ -x "$BIN/tandem-generate" ]; then
        want=$(LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 60 \
               "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" --max-tokens 24 \
               --ignore-eos --temperature 0.9 --top-p 0.95 --top-k 50 --seed 1234 \
               --device "$DEVICE" --weights f32 --kv-dtype "$KV_DTYPE" 2>"$OUT/$FX.generate.log")
        got=$(py seeded "$URL" "$FX" "$prompt")
        [ -n "$want" ] && [ "$got" = "$want" ] && [ "$got" != "$(echo "$golden" | cut -d, -f1-24)" ]
        check "$FX: seeded sampling on $DEVICE through the cluster = tandem-generate, same seed" $? \
            "cluster:  $got" "generate: $want" "$(tail -2 "$OUT/$FX.generate.log")"
        r_seed=$([ -n "$want" ] && [ "$got" = "$want" ] && echo ok || echo FAIL)
    fi
    KILLED=""
    if [ "${RANKS:-0}" = 1 ] && [ "$FX" = qwen3_moe_tiny ]; then
        # a rank dies: its group reports to the router and exits 1, no hang
        victim=$(sed -n 's/.*TP rank 1 of 2 ready (pid \([0-9]*\)).*/\1/p' "$OUT/$FX.prefiller.log" | tail -1)
        ppid_=${PIDS[1]}
        st=hung
        if [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null; then
            for _ in $(seq 1 300); do kill -0 "$ppid_" 2>/dev/null || break; sleep 0.1; done
            if ! kill -0 "$ppid_" 2>/dev/null; then wait "$ppid_" 2>/dev/null; st=$?; fi
        fi
        [ "$st" = 1 ] && grep -q "prefiller group failed: rank 1 (pid $victim) died" "$OUT/$FX.prefiller.log" &&
            grep -q "reports error .*prefiller group failed" "$OUT/$FX.router.log"
        check "$FX: prefiller TP rank 1 SIGKILLed: the group tells the router and exits 1" $? \
            "exit $st (victim ${victim:-not found})" "$(tail -3 "$OUT/$FX.prefiller.log")"
        KILLED=prefiller
    fi
    stop_all 1
    kind=$(echo "$path_d" | awk '{print $1}')
    ROWS+=("$FX|$t_ready ms|$r_one (${t_one} s)|$r_four (${t_four} s)|$r_seed|$kind|$(grep -c . "$OUT/$FX.decoder.log") log lines")
done
trap - EXIT

echo "1..$T_N"
echo "== cluster on $DEVICE: $((T_N - T_FAILED)) ok / $T_FAILED not ok"
printf '%-16s %-10s %-20s %-22s %-7s %-8s\n' fixture "up after" "1 request" "4 concurrent" seeded "KV path"
for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c d e f _ <<<"$r"
    printf '%-16s %-10s %-20s %-22s %-7s %-8s\n' "$a" "$b" "$c" "$d" "$e" "$f"
done
[ "$T_FAILED" -eq 0 ]
