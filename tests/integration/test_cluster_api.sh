#!/usr/bin/env bash
# The router's HTTP API against a real cluster: OpenAI-style 400s for bad
# JSON, an unknown model, over-long prompts and invalid sampling parameters
# (exact status and error fields); the SSE stream byte for byte (data:
# lines, final [DONE], system_fingerprint, "usage":null with include_usage);
# non-streaming bodies; /v1/models, /v1/models/{id}, /healthz, /metrics;
# 404/405 for unknown routes; x-request-id on every response.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# A small decoder cache: 8 pages of 16 tokens -> a context of 129 tokens.
DECODER_FLAGS="--kv-pages 8" cluster_start "$dir" || cluster_finish
prompt=$(golden_ids "$dir" prompt_ids)
golden=$(golden_ids "$dir" gen_ids)

C=/v1/completions
expect_error "bad JSON" $C '{"model": "gpt_oss_tiny", "prompt": [1,2' 400 null null \
    "could not parse the JSON body"
expect_error "NaN is not JSON" $C "{\"model\":\"$fx\",\"prompt\":[1],\"temperature\":NaN}" 400 null null
expect_error "body that is not an object" $C '[1,2,3]' 400 null null
expect_error "unknown model" $C '{"model":"no-such-model","prompt":[1,2,3]}' 400 model \
    model_not_found "no-such-model"
long=$(seq -s, 1 200)
expect_error "over-long prompt" $C "{\"model\":\"$fx\",\"prompt\":[$long],\"max_tokens\":1}" 400 \
    prompt context_length_exceeded "maximum context length is 129 tokens"
expect_error "prompt + max_tokens over the context" $C \
    "{\"model\":\"$fx\",\"prompt\":[1,2,3],\"max_tokens\":127}" 400 max_tokens context_length_exceeded \
    "(3 in the prompt, 127 for the completion)"
expect_error "negative temperature" $C "{\"model\":\"$fx\",\"prompt\":[1],\"temperature\":-1}" 400 \
    temperature invalid_value
expect_error "temperature above 2" $C "{\"model\":\"$fx\",\"prompt\":[1],\"temperature\":2.5}" 400 \
    temperature invalid_value
expect_error "top_p = 0" $C "{\"model\":\"$fx\",\"prompt\":[1],\"top_p\":0}" 400 top_p invalid_value
expect_error "top_p > 1" $C "{\"model\":\"$fx\",\"prompt\":[1],\"top_p\":1.5}" 400 top_p invalid_value
expect_error "max_tokens = 0" $C "{\"model\":\"$fx\",\"prompt\":[1],\"max_tokens\":0}" 400 \
    max_tokens integer_below_min_value
expect_error "max_tokens not an integer" $C "{\"model\":\"$fx\",\"prompt\":[1],\"max_tokens\":1.5}" \
    400 max_tokens invalid_type
expect_error "token id outside the vocabulary" $C "{\"model\":\"$fx\",\"prompt\":[1,512]}" 400 \
    prompt invalid_value "outside the model's vocabulary"
expect_error "text prompt without a tokenizer" $C "{\"model\":\"$fx\",\"prompt\":\"hello\"}" 400 \
    prompt invalid_type "--tokenizer none"
expect_error "chat without a tokenizer" /v1/chat/completions \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" 400 messages \
    unsupported_value "--tokenizer none"
expect_error "n above 128" $C "{\"model\":\"$fx\",\"prompt\":[1],\"n\":129}" 400 n invalid_value

expect_error "unknown field" $C "{\"model\":\"$fx\",\"prompt\":[1],\"frobnicate\":{\"a\":[1]}}" 400 \
    frobnicate unknown_parameter

# Metadata fields are accepted and ignored; the default max_tokens is 16.
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"temperature\":0,\"ignore_eos\":true,\"user\":\"u1\",\"metadata\":{\"a\":\"b\"}}" "$CLUSTER_TMP/ok.json")
got=$(json_get "$CLUSTER_TMP/ok.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$(echo "$golden" | cut -d, -f1-16)" ]
check "metadata fields accepted, default max_tokens 16" $? "HTTP $code $got"

# Non-streaming body: exact field set.
verdict=$(python3 - "$CLUSTER_TMP/ok.json" "$fx" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert list(j) == ["id", "object", "created", "model", "system_fingerprint", "choices", "usage"], list(j)
assert j["id"].startswith("cmpl-") and j["object"] == "text_completion" and j["model"] == sys.argv[2]
assert j["system_fingerprint"] == "tandem-1-" + sys.argv[2], j["system_fingerprint"]
assert isinstance(j["created"], int)
c = j["choices"][0]
assert list(c) == ["index", "text", "logprobs", "finish_reason", "token_ids"], list(c)
assert c["index"] == 0 and c["text"] == "" and c["logprobs"] is None and c["finish_reason"] == "length"
u = j["usage"]
assert u == {"prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56}, u
print("ok")
EOF
)
[ "$verdict" = ok ]
check "non-streaming completion has OpenAI's fields" $? "$verdict"

# SSE byte for byte: 4 greedy tokens, then the finish chunk, usage, [DONE].
curl -s -N -D "$CLUSTER_TMP/sse.headers" -o "$CLUSTER_TMP/sse.body" --max-time 60 \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
    "$URL$C"
verdict=$(python3 - "$CLUSTER_TMP/sse.body" "$fx" "$golden" <<'EOF'
import re, sys
body = open(sys.argv[1], "rb").read()
model, golden = sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
m = re.match(rb'data: \{"id":"(cmpl-[0-9a-f]{16})","object":"text_completion","created":(\d+),', body)
if not m:
    print("first event:", body[:120]); sys.exit()
rid, created = m.group(1).decode(), m.group(2).decode()
head = '{"id":"%s","object":"text_completion","created":%s,"model":"%s","system_fingerprint":"tandem-1-%s","choices":' % (rid, created, model, model)
want = ""
# include_usage: every chunk but the last carries "usage":null.
for t in golden[:4]:
    want += 'data: %s[{"index":0,"text":"","logprobs":null,"finish_reason":null,"token_ids":[%d]}],"usage":null}\n\n' % (head, t)
want += 'data: %s[{"index":0,"text":"","logprobs":null,"finish_reason":"length","token_ids":[]}],"usage":null}\n\n' % head
want += 'data: %s[],"usage":{"prompt_tokens":40,"completion_tokens":4,"total_tokens":44}}\n\n' % head
want += "data: [DONE]\n\n"
print("ok" if body == want.encode() else "got:\n%s\nwant:\n%s" % (body.decode(errors="replace"), want))
EOF
)
[ "$verdict" = ok ]
check "SSE stream is byte for byte OpenAI's shape, ending with data: [DONE]" $? "$verdict"
grep -qi '^content-type: text/event-stream' "$CLUSTER_TMP/sse.headers"
check "SSE content type is text/event-stream" $? "$(cat "$CLUSTER_TMP/sse.headers")"
# rid_of HEADERS: the x-request-id header's value ("" if none).
rid_of() { sed -n 's/^[xX]-[rR]equest-[iI][dD]: \(.*\)\r$/\1/p' "$1"; }
got=$(rid_of "$CLUSTER_TMP/sse.headers")
[[ "$got" =~ ^[0-9a-f]{32}$ ]]
check "SSE response without x-request-id gets a generated one (32 hex digits)" $? "'$got'"

code=$(curl -s -o "$CLUSTER_TMP/models.json" -w '%{http_code}' "$URL/v1/models")
got=$(json_get "$CLUSTER_TMP/models.json" '(j["object"], [m["id"] for m in j["data"]], j["data"][0]["object"])' 2>&1)
[ "$code" = 200 ] && [ "$got" = "('list', ['$fx'], 'model')" ]
check "GET /v1/models lists the served model" $? "HTTP $code $got"

got=$(curl -s "$URL/healthz")
[ "$got" = '{"status":"ok","ready":true,"prefillers":1,"decoders":1}' ]
check "GET /healthz" $? "$got"

curl -s "$URL/metrics" >"$CLUSTER_TMP/metrics.txt"
# Names and labels as docs/METRICS.md. So far 17 requests were refused and 2
# completed (16 + 4 tokens from 40-token prompts: 2 first tokens, 18 gaps).
grep -q '^tandem_requests_total{api="openai",outcome="ok"} 2$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_requests_total{api="openai",outcome="client_error"} 17$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_requests_in_flight{api="openai"} 0$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_input_tokens_total 80$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_output_tokens_total 20$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_kv_cache_blocks_capacity{pool="decode",worker="decoder-[^"]*"} 8$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_worker_up{pool="prefill",worker="prefiller-[^"]*"} 1$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_time_to_first_token_seconds_count 2$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_inter_token_latency_seconds_count 18$' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^tandem_time_to_first_token_seconds_bucket{le="0.025"} ' "$CLUSTER_TMP/metrics.txt" &&
    grep -q '^# TYPE tandem_decode_batch_size gauge$' "$CLUSTER_TMP/metrics.txt"
check "GET /metrics: Prometheus text with the docs/METRICS.md request and worker series" $? \
    "$(grep -v '^#' "$CLUSTER_TMP/metrics.txt" | head -30)"

code=$(curl -s -o "$CLUSTER_TMP/404.json" -w '%{http_code}' "$URL/v1/nothing")
[ "$code" = 404 ] && grep -q '"code":"unknown_url"' "$CLUSTER_TMP/404.json"
check "unknown URL: 404 with an error body" $? "HTTP $code $(cat "$CLUSTER_TMP/404.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions")
[ "$code" = 405 ]
check "GET on a POST route: 405" $? "HTTP $code"

# GET /v1/models/{id}: the list's entry, or a 404 model_not_found body.
code=$(curl -s -o "$CLUSTER_TMP/model.json" -w '%{http_code}' "$URL/v1/models/$fx")
got=$(json_get "$CLUSTER_TMP/model.json" '(list(j), j["id"], j["object"], j["owned_by"], type(j["created"]).__name__)' 2>&1)
[ "$code" = 200 ] && [ "$got" = "(['id', 'object', 'created', 'owned_by'], '$fx', 'model', 'tandem', 'int')" ]
check "GET /v1/models/$fx: the model object" $? "HTTP $code $got"
code=$(curl -s -o "$CLUSTER_TMP/model404.json" -w '%{http_code}' "$URL/v1/models/no-such-model")
got=$(cat "$CLUSTER_TMP/model404.json")
[ "$code" = 404 ] && [ "$got" = '{"error":{"message":"The model '"'no-such-model'"' does not exist.","type":"invalid_request_error","param":null,"code":"model_not_found"}}' ]
check "GET /v1/models/no-such-model: 404 model_not_found" $? "HTTP $code $got"

# x-request-id on every API response: the client's when sane, else generated.
hdr=$CLUSTER_TMP/rid.headers
rid_req() { # rid_req HEADER_VALUE CURL_ARGS... -> prints "HTTP x-request-id"
    local v=$1 code
    shift
    code=$(curl -s -D "$hdr" -o "$CLUSTER_TMP/rid.body" -w '%{http_code}' --max-time 60 \
        -H "x-request-id: $v" "$@")
    echo "$code $(rid_of "$hdr")"
}
got=$(rid_req 'my req-42' -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[1,2,3],\"max_tokens\":2}" "$URL$C")
[ "$got" = "200 my req-42" ]
check "x-request-id echoed on a completion" $? "$got"
got=$(rid_req 'sse-1' -N -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":true}" "$URL$C")
[ "$got" = "200 sse-1" ]
check "x-request-id echoed on a stream" $? "$got"
got=$(rid_req 'm-1' "$URL/v1/models")
[ "$got" = "200 m-1" ]
check "x-request-id echoed on GET /v1/models" $? "$got"
got=$(rid_req 'm-2' "$URL/v1/models/no-such-model")
[ "$got" = "404 m-2" ]
check "x-request-id echoed on a 404" $? "$got"
got=$(rid_req 'e-1' -H 'Content-Type: application/json' -d '{"model":' "$URL$C")
[ "$got" = "400 e-1" ]
check "x-request-id echoed on a 400" $? "$got"
got=$(rid_req 'e-2' "$URL/v1/chat/completions")
[ "$got" = "405 e-2" ]
check "x-request-id echoed on a 405" $? "$got"
long=$(printf 'a%.0s' $(seq 128))
got=$(rid_req "$long" "$URL/v1/models")
[ "$got" = "200 $long" ]
check "x-request-id of 128 bytes echoed" $? "$got"
got=$(rid_req "${long}b" "$URL/v1/models")
[[ "$got" =~ ^200\ [0-9a-f]{32}$ ]]
check "x-request-id of 129 bytes replaced by a generated one" $? "$got"
got=$(rid_req $'caf\xc3\xa9' "$URL/v1/models")
[[ "$got" =~ ^200\ [0-9a-f]{32}$ ]]
check "non-ASCII x-request-id replaced by a generated one" $? "$got"
a=$(curl -s -D - -o /dev/null "$URL/v1/models" | sed -n 's/^[xX]-[rR]equest-[iI][dD]: \(.*\)\r$/\1/p')
b=$(curl -s -D - -o /dev/null "$URL/v1/models" | sed -n 's/^[xX]-[rR]equest-[iI][dD]: \(.*\)\r$/\1/p')
[[ "$a" =~ ^[0-9a-f]{32}$ ]] && [[ "$b" =~ ^[0-9a-f]{32}$ ]] && [ "$a" != "$b" ]
check "without x-request-id each response gets its own" $? "'$a' '$b'"
cluster_finish
