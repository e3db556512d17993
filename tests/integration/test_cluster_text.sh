#!/usr/bin/env bash
# Text in and out through a real cluster with the router's `bytes` codec
# (UTF-8 bytes are token ids 0..255): a text prompt's tokens and the
# returned text match tandem-generate on the same ids; a stop string ends
# the output before it (finish_reason stop); chat completions, streamed and
# not, render ChatML and return the same tokens as tandem-generate, with the
# streamed deltas concatenating to the whole text.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
dir=tests/fixtures/$fx
cluster_start "$dir" --tokenizer bytes || cluster_finish

ids_of() { python3 -c 'import sys; print(",".join(str(b) for b in sys.argv[1].encode()))' "$1"; }
# What the bytes codec makes of ids: bytes for ids < 256, U+FFFD otherwise,
# then lossy UTF-8 (Python's errors="replace"). A module, not $(...), so
# trailing newlines survive.
cat >"$CLUSTER_TMP/bytes_text.py" <<'EOF'
def text_of(ids):
    toks = [int(t) for t in ids.split(",") if t]
    raw = b"".join(bytes([t]) if t < 256 else "\ufffd".encode() for t in toks)
    return raw.decode("utf-8", errors="replace")
EOF
export PYTHONPATH=$CLUSTER_TMP

text="Hello, Tandem! Grüße 👋"
pids=$(ids_of "$text")
want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$pids" --max-tokens 48 \
       --ignore-eos 2>/dev/null)
body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "prompt": sys.argv[2], "max_tokens": 48, "temperature": 0, "ignore_eos": True, "return_token_ids": True}))' "$fx" "$text")
code=$(post /v1/completions "$body" "$CLUSTER_TMP/t.json")
got=$(json_get "$CLUSTER_TMP/t.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$want" ]
check "text prompt: byte ids through the cluster = tandem-generate" $? "HTTP $code" "$got" "$want"
python3 - "$CLUSTER_TMP/t.json" "$want" "$(echo "$pids" | tr ',' '\n' | wc -l)" <<'EOF'
import json, sys
from bytes_text import text_of
j = json.load(open(sys.argv[1]))
assert j["choices"][0]["text"] == text_of(sys.argv[2]), (j["choices"][0]["text"], sys.argv[2])
assert j["usage"]["prompt_tokens"] == int(sys.argv[3]), j["usage"]
EOF
check "text prompt: returned text is the tokens' bytes (lossy UTF-8) and usage counts the bytes" $?

# A stop string: the first printable ASCII token after the first one.
read -r stop k < <(python3 -c '
import sys
t = [int(x) for x in sys.argv[1].split(",")]
for i in range(1, len(t)):
    if 33 <= t[i] <= 126 and chr(t[i]) not in "\"\\\\":
        print(chr(t[i]), i); break' "$want")
if [ -z "${stop:-}" ]; then
    not_ok "the greedy output has a printable ASCII token to use as a stop string" "$want"
else
    want_ids=$(echo "$want" | cut -d, -f1-$((k + 1)))
    want_text_ids=$(echo "$want" | cut -d, -f1-$k)
    body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "prompt": sys.argv[2], "max_tokens": 48, "temperature": 0, "ignore_eos": True, "return_token_ids": True, "stop": [sys.argv[3], "never-in-output"]}))' "$fx" "$text" "$stop")
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/stop.json")
    python3 - "$CLUSTER_TMP/stop.json" "$want_text_ids" "$want_ids" <<'EOF'
import json, sys
from bytes_text import text_of
c = json.load(open(sys.argv[1]))["choices"][0]
assert c["finish_reason"] == "stop", c
assert c["text"] == text_of(sys.argv[2]), (c["text"], text_of(sys.argv[2]))
assert ",".join(map(str, c["token_ids"])) == sys.argv[3], c["token_ids"]
EOF
    check "stop string '$stop': output ends before it, finish_reason stop" $? "HTTP $code $(cat "$CLUSTER_TMP/stop.json")"

    # Streamed with the same stop string: the deltas concatenate to the same text.
    body=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["stream"]=True; print(json.dumps(d))' "$body")
    curl -s -N --max-time 60 -H 'Content-Type: application/json' -d "$body" -o "$CLUSTER_TMP/stop.sse" \
        "$URL/v1/completions"
    python3 - "$CLUSTER_TMP/stop.sse" "$want_text_ids" <<'EOF'
import json, sys
from bytes_text import text_of
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-2:] == ["data: [DONE]", ""], ev[-3:]
chunks = [json.loads(e[6:])["choices"][0] for e in ev[:-2]]
assert "".join(c["text"] for c in chunks) == text_of(sys.argv[2])
assert chunks[-1]["finish_reason"] == "stop" and all(c["finish_reason"] is None for c in chunks[:-1])
EOF
    check "streamed stop string: deltas concatenate to the same text" $? "$(head -c 600 "$CLUSTER_TMP/stop.sse")"
fi

# Chat completions: ChatML rendered as bytes.
chat_ids=$(ids_of $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n')
want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$chat_ids" --max-tokens 20 \
       --ignore-eos 2>/dev/null)
msgs='[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"}]'
code=$(post /v1/chat/completions "{\"model\":\"$fx\",\"messages\":$msgs,\"max_tokens\":20,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}" "$CLUSTER_TMP/chat.json")
python3 - "$CLUSTER_TMP/chat.json" "$want" <<'EOF'
import json, sys
from bytes_text import text_of
j = json.load(open(sys.argv[1]))
assert j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-"), j
c = j["choices"][0]
assert c["message"]["role"] == "assistant"
assert list(c["message"]) == ["role", "content", "refusal"] and c["message"]["refusal"] is None, c
assert j["system_fingerprint"] == "tandem-1-" + j["model"], j
assert ",".join(map(str, c["token_ids"])) == sys.argv[2], (c["token_ids"], sys.argv[2])
assert c["message"]["content"] == text_of(sys.argv[2])
assert c["finish_reason"] == "length"
EOF
check "chat completion: ChatML prompt, tokens = tandem-generate, content = their text" $? \
    "HTTP $code $(head -c 400 "$CLUSTER_TMP/chat.json")"

curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/chat.sse" \
    -d "{\"model\":\"$fx\",\"messages\":$msgs,\"max_tokens\":20,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
    "$URL/v1/chat/completions"
python3 - "$CLUSTER_TMP/chat.sse" "$want" "$fx" <<'EOF'
import json, sys
from bytes_text import text_of
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-2:] == ["data: [DONE]", ""], ev[-3:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
assert all(c["object"] == "chat.completion.chunk" and c["model"] == sys.argv[3] for c in chunks)
assert len({c["id"] for c in chunks}) == 1
d = [c["choices"][0] for c in chunks]
assert d[0]["delta"] == {"role": "assistant", "content": ""}, d[0]
assert d[-1]["delta"] == {} and d[-1]["finish_reason"] == "length", d[-1]
assert len(d) == 1 + 20 + 1, len(d)
assert "".join(x["delta"].get("content", "") for x in d) == text_of(sys.argv[2])
assert all(c["system_fingerprint"] == "tandem-1-" + sys.argv[3] for c in chunks)
assert all("usage" not in c for c in chunks)
EOF
check "streamed chat completion: role chunk, one delta per token, finish chunk, [DONE]" $? \
    "$(head -c 800 "$CLUSTER_TMP/chat.sse")"

curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/chatu.sse" \
    -d "{\"model\":\"$fx\",\"messages\":$msgs,\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
    "$URL/v1/chat/completions"
python3 - "$CLUSTER_TMP/chatu.sse" "$fx" <<'EOF'
import json, sys
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-2:] == ["data: [DONE]", ""], ev[-3:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
assert len(chunks) == 1 + 3 + 1 + 1, len(chunks)
assert all(c["system_fingerprint"] == "tandem-1-" + sys.argv[2] for c in chunks)
assert all(list(c) == ["id", "object", "created", "model", "system_fingerprint", "choices", "usage"]
           and c["usage"] is None for c in chunks[:-1]), chunks[:-1]
u = chunks[-1]
assert u["choices"] == [] and u["usage"]["completion_tokens"] == 3, u
assert u["usage"]["total_tokens"] == u["usage"]["prompt_tokens"] + 3, u
EOF
check "streamed chat with include_usage: usage null on every chunk, the usage object last" $? \
    "$(head -c 800 "$CLUSTER_TMP/chatu.sse")"
cluster_finish
