#!/usr/bin/env bash
# Bad input and backpressure through a real cluster: oversized bodies,
# invalid UTF-8, huge max_tokens, negative / non-finite / NaN sampling
# parameters, wrong types and unknown fields each get a clear 4xx with an
# OpenAI error body naming the parameter (413 for a body over
# --max-body-bytes, 400 for the rest); past --max-active-requests the router
# answers 429 with Retry-After instead of queueing; and after all of it the
# router still serves, and every process exits cleanly.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# A long worker timeout: the 429 case below pauses the decoder (SIGSTOP) so
# that requests stay active, and it must not be dropped meanwhile.
cluster_start "$dir" --max-body-bytes 4096 --max-active-requests 2 --worker-timeout-ms 60000 ||
    cluster_finish
C=/v1/completions
CH=/v1/chat/completions
ok_prompt="\"model\":\"$fx\",\"prompt\":[1,2,3]"

# ---- oversized and malformed bodies
big=$(python3 -c 'print("[" + ",".join(["1"] * 3000) + "]")')
code=$(post $C "{\"model\":\"$fx\",\"prompt\":$big}" "$CLUSTER_TMP/big.json")
[ "$code" = 413 ] && grep -q '"code":"request_too_large"' "$CLUSTER_TMP/big.json"
check "body over --max-body-bytes: 413 request_too_large" $? "HTTP $code $(head -c 300 "$CLUSTER_TMP/big.json")"

printf '{"model":"%s","prompt":"caf\xc3\x28"}' "$fx" >"$CLUSTER_TMP/bad_utf8.json"
code=$(curl -s -o "$CLUSTER_TMP/r.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$CLUSTER_TMP/bad_utf8.json" "$URL$C")
[ "$code" = 400 ] && grep -q 'could not parse the JSON body' "$CLUSTER_TMP/r.json"
check "invalid UTF-8 in a string: 400" $? "HTTP $code $(cat "$CLUSTER_TMP/r.json")"
printf '{"model":"%s","messages":[{"role":"user","content":"\xff\xfe"}]}' "$fx" >"$CLUSTER_TMP/bad_utf8.json"
code=$(curl -s -o "$CLUSTER_TMP/r.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$CLUSTER_TMP/bad_utf8.json" "$URL$CH")
[ "$code" = 400 ] && grep -q 'could not parse the JSON body' "$CLUSTER_TMP/r.json"
check "invalid UTF-8 in chat content: 400" $? "HTTP $code $(cat "$CLUSTER_TMP/r.json")"
expect_error "lone UTF-16 surrogate escape" $C "{\"model\":\"$fx\",\"prompt\":\"\\ud800\"}" 400 null null
expect_error "NaN literal" $C "{$ok_prompt,\"temperature\":NaN}" 400 null null
expect_error "Infinity literal" $C "{$ok_prompt,\"top_p\":Infinity}" 400 null null
expect_error "truncated body" $C "{$ok_prompt,\"max_tokens\":" 400 null null

# ---- numbers out of range
expect_error "huge max_tokens" $C "{$ok_prompt,\"max_tokens\":1000000000000}" 400 max_tokens \
    context_length_exceeded
expect_error "max_tokens past 2^64" $C "{$ok_prompt,\"max_tokens\":99999999999999999999999}" 400 \
    max_tokens invalid_type
expect_error "negative max_tokens" $C "{$ok_prompt,\"max_tokens\":-5}" 400 max_tokens \
    integer_below_min_value
expect_error "negative temperature" $C "{$ok_prompt,\"temperature\":-0.5}" 400 temperature invalid_value
expect_error "temperature overflowing to infinity" $C "{$ok_prompt,\"temperature\":1e999}" 400 \
    temperature invalid_type finite
expect_error "negative top_p" $C "{$ok_prompt,\"top_p\":-1}" 400 top_p invalid_value
expect_error "top_p as a string" $C "{$ok_prompt,\"top_p\":\"0.5\"}" 400 top_p invalid_type
expect_error "negative top_k" $C "{$ok_prompt,\"top_k\":-7}" 400 top_k invalid_value
expect_error "fractional seed" $C "{$ok_prompt,\"seed\":1.5}" 400 seed invalid_type
expect_error "negative token id" $C "{\"model\":\"$fx\",\"prompt\":[1,-2]}" 400 prompt invalid_type
expect_error "chat: negative temperature" $CH \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":-1}" 400 \
    temperature invalid_value

# ---- unknown and unimplemented fields
expect_error "unknown field" $C "{$ok_prompt,\"frobnicate\":true}" 400 frobnicate unknown_parameter \
    "Unrecognized request argument supplied: frobnicate"
expect_error "misspelt parameter" $C "{$ok_prompt,\"temprature\":0}" 400 temprature unknown_parameter
expect_error "chat field on completions" $C "{$ok_prompt,\"tools\":[]}" 400 tools unknown_parameter
expect_error "unimplemented field at a non-default value" $C "{$ok_prompt,\"suffix\":\"x\"}" 400 suffix \
    unsupported_value

# ---- the router still serves
code=$(post $C "{$ok_prompt,\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true}" "$CLUSTER_TMP/ok.json")
n=$(json_get "$CLUSTER_TMP/ok.json" 'j["usage"]["completion_tokens"]' 2>/dev/null)
[ "$code" = 200 ] && [ "$n" = 3 ]
check "a valid request after the bad ones completes" $? "HTTP $code $(cat "$CLUSTER_TMP/ok.json")"

# ---- backpressure: 2 requests held active (decoder paused), the third is 429
dec_pid=${CLUSTER_PIDS[2]}
kill -STOP "$dec_pid"
pids=()
for i in 1 2; do
    curl -s -o "$CLUSTER_TMP/held.$i" -w '%{http_code}' --max-time 120 -H 'Content-Type: application/json' \
        -d "{$ok_prompt,\"max_tokens\":2,\"temperature\":0,\"ignore_eos\":true}" "$URL$C" >"$CLUSTER_TMP/held.$i.code" &
    pids+=($!)
done
for _ in $(seq 1 200); do
    curl -s "$URL/metrics" | grep -q '^tandem_requests_in_flight{api="openai"} 2$' && break
    sleep 0.05
done
curl -s -D "$CLUSTER_TMP/429.h" -o "$CLUSTER_TMP/429.json" -H 'Content-Type: application/json' \
    -d "{$ok_prompt,\"max_tokens\":2}" "$URL$C" >/dev/null
status=$(head -1 "$CLUSTER_TMP/429.h" | awk '{print $2}')
[ "$status" = 429 ] && grep -qi '^Retry-After: 1' "$CLUSTER_TMP/429.h" &&
    grep -q '"code":"rate_limit_exceeded"' "$CLUSTER_TMP/429.json"
check "past --max-active-requests: 429 with Retry-After" $? "HTTP $status $(tr -d '\r' <"$CLUSTER_TMP/429.h" | tr '\n' ' ') $(cat "$CLUSTER_TMP/429.json")"
kill -CONT "$dec_pid"
for pid in "${pids[@]}"; do wait "$pid"; done
[ "$(cat "$CLUSTER_TMP/held.1.code")" = 200 ] && [ "$(cat "$CLUSTER_TMP/held.2.code")" = 200 ]
check "the held requests complete once the decoder resumes" $? \
    "$(cat "$CLUSTER_TMP/held.1.code") $(cat "$CLUSTER_TMP/held.2.code")"
code=$(post $C "{$ok_prompt,\"max_tokens\":2}" "$CLUSTER_TMP/after.json")
[ "$code" = 200 ]
check "below the limit again: accepted" $? "HTTP $code $(cat "$CLUSTER_TMP/after.json")"

cluster_finish
