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

# ---- strings with an embedded NUL: cJSON would cut them at the NUL; outside
# prompt and message text (test_http_connections.sh serves those exactly)
# they are refused naming the field
nul_msg='NUL (\u0000) is allowed only in prompt and message text.'
expect_error "model name with an embedded NUL" $C "{\"model\":\"$fx\\u0000junk\",\"prompt\":[1,2,3]}" \
    400 model invalid_value "Invalid 'model': $nul_msg"
expect_error "stop string with an embedded NUL" $C "{$ok_prompt,\"stop\":[\"a\\u0000\"]}" \
    400 stop invalid_value "Invalid 'stop': $nul_msg"
expect_error "tool name with an embedded NUL" $CH \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000\"}}]}" \
    400 tools invalid_value "Invalid 'tools': $nul_msg"
# An escaped backslash followed by u0000 is plain text, not a NUL.
expect_error "escaped backslash before u0000 is not a NUL" $C \
    "{\"model\":\"$fx\",\"prompt\":[1,2,3],\"x\\\\u0000\":1}" 400 'x\u0000' unknown_parameter

# ---- request smuggling: ambiguous framing is refused before the body is read
# raw REQUEST: sends REQUEST (Python escapes such as \r\n) over a socket,
# prints the seconds until the server closed the connection, then the response.
raw() {
    python3 - "$HTTP" "$1" <<'EOF'
import socket, sys, time
port, req = int(sys.argv[1]), sys.argv[2].encode().decode("unicode_escape").encode("latin1")
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(5)
t = time.time()
s.sendall(req)
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except socket.timeout:
    out += b"<no close within 5 s>"
print("%.1f" % (time.time() - t))
sys.stdout.write(out.decode("latin1"))
EOF
}
# expect_early NAME REQUEST STATUS_LINE CODE MESSAGE: that status with exactly
# this OpenAI error body and Connection: close, the connection closed in
# under a second (the body is not waited for).
expect_early() {
    raw "$2" >"$CLUSTER_TMP/raw.out"
    python3 - "$CLUSTER_TMP/raw.out" "$3" "$4" "$5" <<'EOF'
import json, sys
secs, resp = open(sys.argv[1], encoding="latin1", newline="").read().split("\n", 1)
head, _, body = resp.partition("\r\n\r\n")
hl = head.split("\r\n")
want = {"error": {"message": sys.argv[4], "type": "invalid_request_error", "param": None,
                  "code": sys.argv[3]}}
ok = (float(secs) < 1 and hl[0] == sys.argv[2] and "Connection: close" in hl
      and "Content-Type: application/json" in hl and json.loads(body) == want)
sys.exit(0 if ok else 1)
EOF
    check "$1: ${3#HTTP/1.1 } at once" $? "$(cat "$CLUSTER_TMP/raw.out")"
}
body="{$ok_prompt,\"max_tokens\":1}"
expect_early "two different Content-Length headers" \
    "POST $C HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${#body}\r\nContent-Length: 2\r\n\r\n$body" \
    "HTTP/1.1 400 Bad Request" invalid_request "The request has two different Content-Length headers."
expect_early "Content-Length and Transfer-Encoding: chunked" \
    "POST $C HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" \
    "HTTP/1.1 400 Bad Request" invalid_request "The request has both Content-Length and Transfer-Encoding headers."
# A declared length over --max-body-bytes: 413 before any body is sent.
expect_early "declared Content-Length 2^64-1" \
    "POST $C HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 18446744073709551615\r\n\r\n{" \
    "HTTP/1.1 413 Content Too Large" request_too_large "The request body exceeds 4096 bytes."
expect_early "declared Content-Length one over the limit" \
    "POST $CH HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4097\r\n\r\n" \
    "HTTP/1.1 413 Content Too Large" request_too_large "The request body exceeds 4096 bytes."
# Chunked bodies: a chunk-size line that takes the body past the limit is
# answered 413 as soon as it arrives (the front sees it; libmicrohttpd would
# wait for the chunk), whatever follows; a chunked body within the limit is
# served. raw waits at most 5 s for the close, and the answer must be there.
# expect_chunk_413 NAME REQUEST
expect_chunk_413() {
    raw "$2" >"$CLUSTER_TMP/raw.out"
    python3 - "$CLUSTER_TMP/raw.out" <<'EOF'
import json, sys
secs, resp = open(sys.argv[1], encoding="latin1", newline="").read().split("\n", 1)
head, _, body = resp.partition("\r\n\r\n")
hl = head.split("\r\n")
want = {"error": {"message": "The request body exceeds 4096 bytes.", "type": "invalid_request_error",
                  "param": None, "code": "request_too_large"}}
sys.exit(0 if hl[0] == "HTTP/1.1 413 Content Too Large" and "Connection: close" in hl
         and "<no close" not in body and json.loads(body) == want else 1)
EOF
    check "$1: 413 request_too_large" $? "$(cat "$CLUSTER_TMP/raw.out")"
}
chunked="POST $C HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
expect_chunk_413 "chunk size 2^64-1, nothing after it" "${chunked}ffffffffffffffff"
expect_chunk_413 "chunk size 2^64-1 with its line and some data" "${chunked}ffffffffffffffff\r\n{\"model\":"
pad=$(printf '%*s' 2048 '')
expect_chunk_413 "chunks adding up to one byte over the limit" "${chunked}800\r\n$pad\r\n801\r\n"
raw "POST $C HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n$(printf '%x' ${#body})\r\n$body\r\n0\r\n\r\n" \
    >"$CLUSTER_TMP/raw.out"
sed -n 2p "$CLUSTER_TMP/raw.out" | grep -q '^HTTP/1.1 200 OK' && grep -q '"completion_tokens":1' "$CLUSTER_TMP/raw.out"
check "a chunked body within the limit: served" $? "$(cat "$CLUSTER_TMP/raw.out")"
# The same Content-Length twice is not ambiguous (RFC 9112 6.3): served.
raw "POST $C HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${#body}\r\nContent-Length: ${#body}\r\n\r\n$body" \
    >"$CLUSTER_TMP/raw.out"
sed -n 2p "$CLUSTER_TMP/raw.out" | grep -q '^HTTP/1.1 200 OK' && grep -q '"completion_tokens":1' "$CLUSTER_TMP/raw.out"
check "the same Content-Length twice: served" $? "$(cat "$CLUSTER_TMP/raw.out")"

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
