#!/usr/bin/env bash
# The API port under a flood of connections, and NUL in prompt text, through
# a real cluster (bytes codec):
#   - 1,100 connections that send nothing, plus one that sends its request
#     head a byte at a time (slowloris), do not lock anyone out: while they
#     are open, completions, /healthz and /metrics on the API port answer;
#     then the idle ones are closed by --http-idle-timeout-ms and the slow
#     one by --http-request-timeout-ms (each wait bounded);
#   - a prompt "a\u0000b" is three tokens (97, 0, 98) and its greedy output
#     equals tandem-generate's on those ids (also inside a list of prompts,
#     next to "\u0000\u0000": ids 0, 0); a chat message with a NUL keeps
#     it in the ChatML rendering;
#   - with --http-memory-budget-mb 2, best_of 128 on a 4,000-id prompt is
#     refused 503 (its branches' copies of the ids are reserved), and
#     best_of 4 on a shorter prompt is served afterwards.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
dir=tests/fixtures/$fx
cluster_start "$dir" --tokenizer bytes --http-idle-timeout-ms 3000 --http-request-timeout-ms 4000 \
    --http-memory-budget-mb 2 ||
    cluster_finish

# ---- 1,100 idle connections and a slowloris, held open by a helper that
# reports when they are all connected and, later, when the router closed
# each (it waits at most 20 s for that).
cat >"$CLUSTER_TMP/flood.py" <<'EOF'
import resource, select, socket, sys, time
port, n, ready, report = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
slow = socket.create_connection(("127.0.0.1", port))
open(ready, "w").write("%d\n" % len(socks))
head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
closed, slow_closed, sent = set(), False, 0
poll = select.poll()
by_fd = {s.fileno(): i for i, s in enumerate(socks)}
for s in socks + [slow]:
    poll.register(s, select.POLLIN)
deadline = time.time() + 20
while time.time() < deadline and (len(closed) < n or not slow_closed):
    if not slow_closed and sent < len(head):
        try:
            slow.send(head[sent:sent + 1])
            sent += 1
        except OSError:
            slow_closed = True
    for fd, _ in poll.poll(300):
        s = slow if fd == slow.fileno() else socks[by_fd[fd]]
        try:
            d = s.recv(4096)
        except OSError:
            d = b""
        if d:
            continue
        poll.unregister(fd)
        if s is slow:
            slow_closed = True
        else:
            closed.add(by_fd[fd])
open(report, "w").write("idle_closed=%d slow_closed=%d slow_sent=%d\n" % (len(closed), slow_closed, sent))
EOF
python3 "$CLUSTER_TMP/flood.py" "$HTTP" 1100 "$CLUSTER_TMP/ready" "$CLUSTER_TMP/report" \
    >"$CLUSTER_TMP/flood.log" 2>&1 &
flood=$!
for _ in $(seq 1 300); do
    [ -s "$CLUSTER_TMP/ready" ] && break
    sleep 0.05
done
[ "$(cat "$CLUSTER_TMP/ready" 2>/dev/null)" = 1100 ]
check "1,100 idle connections to the API port are open" $? "$(cat "$CLUSTER_TMP/flood.log")"

body="{\"model\":\"$fx\",\"prompt\":[1,2,3],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}"
ok_n=0
for i in 1 2 3 4 5; do
    code=$(curl -s --max-time 30 -o "$CLUSTER_TMP/c$i.json" -w '%{http_code}' \
        -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions")
    n=$(json_get "$CLUSTER_TMP/c$i.json" 'j["usage"]["completion_tokens"]' 2>/dev/null)
    [ "$code" = 200 ] && [ "$n" = 4 ] && ok_n=$((ok_n + 1))
done
[ "$ok_n" = 5 ]
check "with them open, 5 completions complete" $? "$ok_n of 5: $(cat "$CLUSTER_TMP/c1.json")"
code=$(curl -s --max-time 30 -o "$CLUSTER_TMP/h.json" -w '%{http_code}' "$URL/healthz")
[ "$code" = 200 ] && grep -q '"ready":true' "$CLUSTER_TMP/h.json"
check "with them open, /healthz answers on the API port" $? "HTTP $code $(cat "$CLUSTER_TMP/h.json")"
code=$(curl -s --max-time 30 -o "$CLUSTER_TMP/m.txt" -w '%{http_code}' "$URL/metrics")
[ "$code" = 200 ] && grep -q '^tandem_requests_total' "$CLUSTER_TMP/m.txt"
check "with them open, /metrics answers on the API port" $? "HTTP $code $(head -c 300 "$CLUSTER_TMP/m.txt")"

wait "$flood"
grep -q '^idle_closed=1100 slow_closed=1 ' "$CLUSTER_TMP/report"
check "the idle connections and the slow request head are closed by the timeouts" $? \
    "$(cat "$CLUSTER_TMP/report" "$CLUSTER_TMP/flood.log" 2>/dev/null)"
code=$(curl -s --max-time 30 -o "$CLUSTER_TMP/after.json" -w '%{http_code}' \
    -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions")
[ "$code" = 200 ]
check "afterwards a completion completes" $? "HTTP $code $(cat "$CLUSTER_TMP/after.json")"

# ---- NUL in prompt text is a character, not the end of the string
want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids 97,0,98 --max-tokens 8 \
       --ignore-eos 2>/dev/null)
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":\"a\\u0000b\",\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}" \
    "$CLUSTER_TMP/nul.json")
got=$(json_get "$CLUSTER_TMP/nul.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
pt=$(json_get "$CLUSTER_TMP/nul.json" 'j["usage"]["prompt_tokens"]' 2>&1)
[ "$code" = 200 ] && [ "$pt" = 3 ] && [ -n "$want" ] && [ "$got" = "$want" ]
check "prompt \"a\\u0000b\": 3 tokens, output = tandem-generate on ids 97,0,98" $? \
    "HTTP $code prompt_tokens $pt" "$got" "$want" "$(head -c 300 "$CLUSTER_TMP/nul.json")"
# A list of prompts: each text keeps its own NULs and length.
want2=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids 0,0 --max-tokens 8 \
        --ignore-eos 2>/dev/null)
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[\"a\\u0000b\",\"\\u0000\\u0000\"],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}" \
    "$CLUSTER_TMP/nul2.json")
got=$(json_get "$CLUSTER_TMP/nul2.json" '" ".join(",".join(map(str, c["token_ids"])) for c in sorted(j["choices"], key=lambda c: c["index"]))' 2>&1)
pt=$(json_get "$CLUSTER_TMP/nul2.json" 'j["usage"]["prompt_tokens"]' 2>&1)
[ "$code" = 200 ] && [ "$pt" = 5 ] && [ -n "$want2" ] && [ "$got" = "$want $want2" ]
check "prompts [\"a\\u0000b\", \"\\u0000\\u0000\"]: 3 + 2 tokens, each = tandem-generate" $? \
    "HTTP $code prompt_tokens $pt" "$got" "$want $want2" "$(head -c 300 "$CLUSTER_TMP/nul2.json")"
code=$(post /v1/chat/completions "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000y\"}],\"max_tokens\":1}" \
    "$CLUSTER_TMP/chat.json")
pt=$(json_get "$CLUSTER_TMP/chat.json" 'j["usage"]["prompt_tokens"]' 2>&1)
want_pt=$(python3 -c 'print(len("<|im_start|>user\nx\0y<|im_end|>\n<|im_start|>assistant\n".encode()))')
[ "$code" = 200 ] && [ "$pt" = "$want_pt" ]
check "chat content \"x\\u0000y\": the NUL byte is in the ChatML prompt" $? \
    "HTTP $code prompt_tokens $pt (want $want_pt) $(head -c 300 "$CLUSTER_TMP/chat.json")"

# ---- best_of multiplies a prompt: each further branch's copy of its ids is
# reserved in the 2 MB budget (127 copies of 4,000 ids are 2 MB), so the
# request is refused 503 before it is placed, and the budget is whole again
# afterwards.
ids=$(python3 -c 'print(",".join(str(i % 200 + 1) for i in range(4000)))')
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[$ids],\"max_tokens\":1,\"best_of\":128}" \
    "$CLUSTER_TMP/bestof.json")
ecode=$(json_get "$CLUSTER_TMP/bestof.json" 'j["error"]["code"]' 2>&1)
[ "$code" = 503 ] && [ "$ecode" = no_capacity ] && grep -q 'http-memory-budget-mb 2' "$CLUSTER_TMP/bestof.json"
check "best_of 128 x 4,000 ids: the branch copies overrun --http-memory-budget-mb 2: 503" $? \
    "HTTP $code $(head -c 300 "$CLUSTER_TMP/bestof.json")"
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[${ids%%,101,*}],\"max_tokens\":1,\"best_of\":4,\"temperature\":0}" \
    "$CLUSTER_TMP/bestof2.json")
n=$(json_get "$CLUSTER_TMP/bestof2.json" 'len(j["choices"])' 2>&1)
[ "$code" = 200 ] && [ "$n" = 1 ]
check "then best_of 4 on a shorter prompt is served (the budget was given back)" $? \
    "HTTP $code $(head -c 300 "$CLUSTER_TMP/bestof2.json")"

cluster_finish
