#!/usr/bin/env bash
# Load test on a real cluster (loopback only, bounded in count and time):
# LOAD_CLIENTS concurrent streaming clients (default 256; `make test-load
# LOAD_CLIENTS=1000` for more), one request each (LOAD_REQUESTS to change
# that), with prompts of 4..200 random tokens and 1..64 output tokens,
# against two prefillers and two decoders. tandem-loadgen checks every
# stream (framing, JSON, exact token count, one finish_reason, [DONE]) and
# reports TTFT and inter-token latency percentiles. Asserted: nothing lost,
# nothing malformed, every request ok; afterwards nothing is left in flight
# and no KV page is held; every process exits cleanly.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

CLIENTS=${LOAD_CLIENTS:-256}
REQUESTS=${LOAD_REQUESTS:-$CLIENTS}
fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# Room for every client (the router's own limit answers 429 beyond it; the
# load generator would retry those after Retry-After).
PREFILLER_ID=p1 DECODER_ID=d1 DECODER_FLAGS="--kv-pages 4096 --max-batch 128" \
    cluster_start "$dir" --max-active-requests $((CLIENTS + 64)) || cluster_finish
CLUSTER_NAMES[1]=p1
CLUSTER_NAMES[2]=d1
mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/p1.log"
mv "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/d1.log"
start_worker prefiller p2
start_worker decoder d2 --kv-pages 4096 --max-batch 128
wait_health 2 2
check "two prefillers and two decoders registered" $? "$(curl -s "$URL/healthz")"

timeout 600 "$BIN/tandem-loadgen" --url "$URL" --model "$fx" --clients "$CLIENTS" \
    --requests "$REQUESTS" --prompt-min 4 --prompt-max 200 --out-min 1 --out-max 64 --vocab 512 \
    --retry-429 --timeout-s 300 >"$CLUSTER_TMP/load.out" 2>"$CLUSTER_TMP/load.err"
rc=$?
sed 's/^/# /' "$CLUSTER_TMP/load.out"
res=$(grep '^RESULT ' "$CLUSTER_TMP/load.out")
val() { echo "$res" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
[ "$rc" -eq 0 ] && [ "$(val lost)" = 0 ] && [ "$(val malformed)" = 0 ]
check "$REQUESTS streaming requests from $CLIENTS concurrent clients: zero lost, zero malformed" $? \
    "exit $rc: $res" "$(head -5 "$CLUSTER_TMP/load.err")"
[ "$(val ok)" = "$REQUESTS" ]
check "every request completed with its exact token count" $? "$res" "$(head -5 "$CLUSTER_TMP/load.err")"

settled=""
for _ in $(seq 1 100); do
    m=$(curl -s "$URL/metrics")
    if echo "$m" | grep -q '^tandem_requests_in_flight{api="openai"} 0$' &&
        echo "$m" | grep -qE '^tandem_kv_cache_blocks_used\{pool="decode",worker="d1"\} 0$' &&
        echo "$m" | grep -qE '^tandem_kv_cache_blocks_used\{pool="decode",worker="d2"\} 0$'; then
        settled=1
        break
    fi
    sleep 0.1
done
[ -n "$settled" ]
check "afterwards nothing is in flight and no KV page is held" $? \
    "$(echo "$m" | grep -E 'in_flight|blocks_used')"
cluster_finish
