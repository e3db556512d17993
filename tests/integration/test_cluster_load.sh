#!/usr/bin/env bash
# Continuous batching under load and cancellation on disconnect, on a real
# cluster: 32 concurrent streaming requests with different prompts and
# lengths all complete with the right number of tokens, and each one's
# tokens equal tandem-generate's for the same prompt; a client that
# disconnects mid-stream gets its request cancelled everywhere (router
# counts it, the decoder stops and frees its KV pages).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
DECODER_FLAGS="--kv-pages 2100 --max-batch 64" cluster_start "$dir" || cluster_finish
prompt=$(golden_ids "$dir" prompt_ids)

N=32
pids=()
for i in $(seq 0 $((N - 1))); do
    p=$(echo "$prompt" | cut -d, -f1-$((8 + i)))
    mt=$((5 + (i % 7) * 3))
    echo "$p" >"$CLUSTER_TMP/prompt.$i"
    echo "$mt" >"$CLUSTER_TMP/max.$i"
    curl -s -N --max-time 120 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/stream.$i" \
        -d "{\"model\":\"$fx\",\"prompt\":[$p],\"max_tokens\":$mt,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
        "$URL/v1/completions" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

bad_count=0
bad_tokens=0
notes=()
for i in $(seq 0 $((N - 1))); do
    mt=$(cat "$CLUSTER_TMP/max.$i")
    got=$(python3 - "$CLUSTER_TMP/stream.$i" <<'EOF'
import json, sys
events = open(sys.argv[1]).read().split("\n\n")
assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
toks, finish = [], None
for e in events[:-2]:
    assert e.startswith("data: "), e
    c = json.loads(e[6:])["choices"][0]
    toks += c["token_ids"]
    if c["finish_reason"]:
        finish = c["finish_reason"]
print(",".join(map(str, toks)), finish)
EOF
)
    toks=${got% *}
    n=$(echo "$toks" | tr ',' '\n' | grep -c .)
    if [ "$n" != "$mt" ] || [ "${got##* }" != length ]; then
        bad_count=$((bad_count + 1))
        notes+=("request $i: want $mt tokens, got '$got'")
        continue
    fi
    want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$(cat "$CLUSTER_TMP/prompt.$i")" \
           --max-tokens "$mt" --ignore-eos 2>/dev/null)
    if [ "$toks" != "$want" ]; then
        bad_tokens=$((bad_tokens + 1))
        notes+=("request $i: cluster $toks != tandem-generate $want")
    fi
done
[ "$bad_count" -eq 0 ]
check "$N concurrent streaming requests all end with the right token count and [DONE]" $? "${notes[@]:-}"
[ "$bad_tokens" -eq 0 ] && [ "$bad_count" -eq 0 ]
check "each of the $N batched requests' tokens = tandem-generate for its prompt" $? "${notes[@]:-}"

# Client disconnect: stream a long request, hang up after a few events.
cancelled_before=$(sed -n 's/^tandem_requests_total{api="openai",outcome="cancelled"} //p' <(curl -s "$URL/metrics"))
curl -s -N --max-time 120 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/long.sse" \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":30000,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
    "$URL/v1/completions" &
cpid=$!
for _ in $(seq 1 200); do
    [ "$(grep -c '^data: ' "$CLUSTER_TMP/long.sse" 2>/dev/null)" -ge 3 ] && break
    sleep 0.05
done
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
cancelled=$cancelled_before
for _ in $(seq 1 100); do
    cancelled=$(curl -s "$URL/metrics" | sed -n 's/^tandem_requests_total{api="openai",outcome="cancelled"} //p')
    [ "$cancelled" -gt "$cancelled_before" ] && break
    sleep 0.1
done
[ "$cancelled" -eq $((cancelled_before + 1)) ]
check "a client disconnect cancels its request in the router" $? \
    "cancelled count $cancelled_before -> $cancelled"

# The decoder dropped the sequence and its pages (seen in its heartbeats).
status=""
for _ in $(seq 1 100); do
    status=$(timeout 10 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1)
    echo "$status" | grep -q "batch=0 waiting=0 kv_pages_free=2100/2100" && break
    sleep 0.1
done
echo "$status" | grep -q "batch=0 waiting=0 kv_pages_free=2100/2100"
check "the decoder stops the cancelled sequence and frees its KV pages" $? "$status"
generated=$(curl -s "$URL/metrics" | sed -n 's/^tandem_decode_output_tokens_total{[^}]*} //p')
total_small=0
for i in $(seq 0 $((N - 1))); do total_small=$((total_small + $(cat "$CLUSTER_TMP/max.$i") - 1)); done
python3 -c "import sys; sys.exit(0 if float('$generated') < $total_small + 29999 else 1)"
check "the decoder generated fewer tokens than the cancelled request asked for" $? \
    "decoder tokens $generated, batched requests $total_small"
cluster_finish
