#!/usr/bin/env bash
# Admission control through the real processes: a decoder whose KV cache
# holds one request's worst case at a time makes concurrent requests wait
# (KvReady only once pages free up) instead of failing, and every one of
# them still returns tandem-generate's tokens. With the router queue off
# (--queue-timeout-ms 0; it is on by default, test_queue_no_decoder.sh) a
# worker killed mid-request with no other worker of its role fails its
# requests with an error (streaming: an error event and [DONE]), the router
# drops it after missing heartbeats, and new requests get 503 until a worker
# of that role registers again.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# 6 pages of 16 tokens; each request below needs 40 + 40 - 1 = 79 tokens = 5 pages.
DECODER_FLAGS="--kv-pages 6" cluster_start "$dir" || cluster_finish
prompt=$(golden_ids "$dir" prompt_ids)

pids=()
for i in 0 1 2 3; do
    p=$(echo "$prompt" | cut -d, -f$((i + 1))-$((i + 40)))
    [ "$i" -gt 0 ] && p="$p,$i"
    p=$(echo "$p" | cut -d, -f1-40)
    echo "$p" >"$CLUSTER_TMP/ap.$i"
    curl -s --max-time 120 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/ar.$i" \
        -d "{\"model\":\"$fx\",\"prompt\":[$p],\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}" \
        "$URL/v1/completions" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
bad=()
for i in 0 1 2 3; do
    got=$(json_get "$CLUSTER_TMP/ar.$i" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$(cat "$CLUSTER_TMP/ap.$i")" \
           --max-tokens 40 --ignore-eos 2>/dev/null)
    [ "$got" = "$want" ] || bad+=("request $i: $(head -c 300 "$CLUSTER_TMP/ar.$i")")
done
[ ${#bad[@]} -eq 0 ]
check "4 requests that fit the KV cache one at a time all wait their turn and complete" $? "${bad[@]:-}"

cluster_stop 1

# A decoder killed mid-stream: the client sees an error event, then [DONE].
DECODER_FLAGS="--kv-pages 2100" cluster_start "$dir" --queue-timeout-ms 0 || cluster_finish
curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/dead.sse" \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":30000,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
    "$URL/v1/completions" &
cpid=$!
for _ in $(seq 1 200); do
    [ -s "$CLUSTER_TMP/dead.sse" ] && break
    sleep 0.05
done
kill -KILL "${CLUSTER_PIDS[2]}" 2>/dev/null # the decoder
wait "$cpid"
python3 - "$CLUSTER_TMP/dead.sse" <<'EOF'
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
assert ev[-2:] == ["data: [DONE]", ""], ev[-3:]
last = json.loads(ev[-3][6:])
e = last["error"]
assert e["type"] == "server_error" and "stopped responding" in e["message"], e
assert len(ev) - 3 < 30000, "the request finished before the decoder died"
EOF
check "a decoder killed mid-stream ends the stream with an error event and [DONE]" $? \
    "$(tail -c 600 "$CLUSTER_TMP/dead.sse")"

ready=""
for _ in $(seq 1 100); do
    ready=$(curl -s "$URL/healthz")
    [ "$ready" = '{"status":"ok","ready":false,"prefillers":1,"decoders":0}' ] && break
    sleep 0.1
done
[ "$ready" = '{"status":"ok","ready":false,"prefillers":1,"decoders":0}' ]
check "the router drops the dead decoder after missed heartbeats" $? "$ready"
curl -s "$URL/metrics" | grep -q '^tandem_worker_up{pool="decode",worker="decoder-[^"]*"} 0$'
check "the dropped decoder shows as tandem_worker_up 0 (for the TandemWorkerDown alert)" $? \
    "$(curl -s "$URL/metrics" | grep tandem_worker_up)"
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[1,2,3]}" "$CLUSTER_TMP/503.json")
[ "$code" = 503 ] && grep -q '"code":"no_capacity"' "$CLUSTER_TMP/503.json"
check "with no decoder, requests get 503 no_capacity" $? "HTTP $code $(cat "$CLUSTER_TMP/503.json")"
# The killed decoder is not checked for a clean exit.
unset 'CLUSTER_PIDS[2]' 'CLUSTER_NAMES[2]'
CLUSTER_PIDS=("${CLUSTER_PIDS[@]}")
CLUSTER_NAMES=("${CLUSTER_NAMES[@]}")

# A new decoder registers: service resumes.
"$BIN/tandem-decoder" --router "$WORKER_EP" --model "$dir" --worker-id "decoder-$$-b" \
    >>"$CLUSTER_TMP/decoder.log" 2>&1 &
CLUSTER_PIDS+=($!)
CLUSTER_NAMES+=(decoder)
for _ in $(seq 1 100); do
    curl -s "$URL/healthz" | grep -q '"ready":true' && break
    sleep 0.1
done
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" "$CLUSTER_TMP/back.json")
got=$(json_get "$CLUSTER_TMP/back.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-8)" ]
check "a replacement decoder registers and serves correct tokens" $? "HTTP $code $got"
cluster_finish
