#!/usr/bin/env bash
# `make run`: a local three-process Tandem cluster on 127.0.0.1 -- router,
# one prefiller, one decoder -- serving a tiny fixture model on the CPU.
# Waits until both workers registered, prints the URL and a curl example,
# and runs until Ctrl-C, then stops every process it started.
#
# Environment: MODEL (default tests/fixtures/gpt_oss_tiny), TOKENIZER
# (none: prompts are token ids; bytes: UTF-8 text, see docs/API.md),
# HTTP_PORT (8000), WORKER_PORT (5555), RPC_PORT (5556), BUILD (build).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-tests/fixtures/gpt_oss_tiny}
TOKENIZER=${TOKENIZER:-none}
HTTP_PORT=${HTTP_PORT:-8000}
WORKER_PORT=${WORKER_PORT:-5555}
RPC_PORT=${RPC_PORT:-5556}
export UCX_TLS=${UCX_TLS:-tcp,sm,self}
export UCX_WARN_UNUSED_ENV_VARS=n
NAME=$(basename "$MODEL")
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/tandem-run-XXXXXX")
pids=()

stop_all() {
    trap - INT TERM EXIT
    echo
    echo "stopping the cluster..."
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
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

"$BUILD/bin/tandem-router" --http-port "$HTTP_PORT" --worker-port "$WORKER_PORT" \
    --rpc-port "$RPC_PORT" --tokenizer "$TOKENIZER" --port-file "$LOGS/ports" \
    >"$LOGS/router.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$LOGS/ports" ] && break; sleep 0.05; done
if [ ! -s "$LOGS/ports" ]; then
    echo "run_local.sh: the router did not start:" >&2
    tail -5 "$LOGS/router.log" >&2
    exit 1
fi
"$BUILD/bin/tandem-prefiller" --router "tcp://127.0.0.1:$WORKER_PORT" --model "$MODEL" \
    --worker-id prefiller-0 >"$LOGS/prefiller.log" 2>&1 &
pids+=($!)
"$BUILD/bin/tandem-decoder" --router "tcp://127.0.0.1:$WORKER_PORT" --model "$MODEL" \
    --worker-id decoder-0 >"$LOGS/decoder.log" 2>&1 &
pids+=($!)

URL=http://127.0.0.1:$HTTP_PORT
ready=0
for _ in $(seq 1 300); do
    if curl -s "$URL/healthz" | grep -q '"ready":true'; then ready=1; break; fi
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || { echo "run_local.sh: a process exited; logs:" >&2; tail -n 5 "$LOGS"/*.log >&2; exit 1; }
    done
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    echo "run_local.sh: the workers did not register within 30 s; logs in $LOGS" >&2
    exit 1
fi

cat <<EOF
Tandem is serving $NAME at $URL  (router, prefiller-0, decoder-0; logs in $LOGS)

  curl -s $URL/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "prompt": [1, 2, 3, 4], "max_tokens": 8, "temperature": 0}'

  curl -sN $URL/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$NAME", "prompt": [1, 2, 3, 4], "max_tokens": 8, "stream": true}'

  $BUILD/bin/tandem-cli generate --rpc tcp://127.0.0.1:$RPC_PORT --model $NAME --prompt-ids 1,2,3,4 --max-tokens 8 --stream
  $BUILD/bin/tandem-cli status --rpc tcp://127.0.0.1:$RPC_PORT
  curl -s $URL/metrics

Press Ctrl-C to stop.
EOF
# Run until Ctrl-C or until one of the processes dies.
while :; do
    for p in "${pids[@]}"; do
        if ! kill -0 "$p" 2>/dev/null; then
            echo "run_local.sh: process $p exited; see $LOGS" >&2
            exit 1
        fi
    done
    sleep 1
done
