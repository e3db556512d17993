#!/usr/bin/env bash
# n > 1 and best_of with one prefill (docs/API.md, "n and best_of";
# decoder/scheduler.h, branches): the router places a prompt's choices as
# one request whose other choices ride along as decoder branches sharing
# the prompt's KV pages copy-on-write. Checked through the real cluster:
# n = 3 greedy choices are identical and equal to tandem-generate; n = 3
# with a seed differ and choice i equals tandem-generate with seed + i (not
# streamed and streamed, indexed as OpenAI does); best_of = 3 returns one of
# those three; and each such request is one prefill (the prefiller's
# tandem_prefill_requests_total, the router's log).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
dir=tests/fixtures/$fx
PREFILLER_ID=p1 cluster_start "$dir" --tokenizer bytes || cluster_finish
name_workers p1 ""
prompt=$(golden_ids "$dir" prompt_ids)
N=24
SEED=1234

prefills() { metric 'tandem_prefill_requests_total{pool="prefill",worker="p1",outcome="ok"}'; }
# the prefiller's count as the router last heard it (heartbeats every 200 ms)
wait_prefills() {
    local got="" _
    for _ in $(seq 1 50); do
        got=$(prefills)
        [ "${got:-0}" = "$1" ] && break
        sleep 0.1
    done
    echo "${got:-0}"
    [ "${got:-0}" = "$1" ]
}
gen() { timeout 50 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" --max-tokens $N \
            --ignore-eos "$@" 2>/dev/null; }
# choices' token ids, one line each in index order (checks the indices)
choices_of() {
    python3 - "$1" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
cs = j["choices"]
assert [c["index"] for c in cs] == list(range(len(cs))), [c["index"] for c in cs]
for c in cs:
    assert c["finish_reason"] == "length", c
    print(",".join(map(str, c["token_ids"])))
EOF
}
body() {
    printf '{"model":"%s","prompt":[%s],"max_tokens":%d,"ignore_eos":true,"return_token_ids":true,%s}' \
        "$fx" "$prompt" $N "$1"
}

base=$(wait_prefills 0)
greedy=$(gen)
code=$(post /v1/completions "$(body '"n":3,"temperature":0')" "$CLUSTER_TMP/greedy.json")
got=$(choices_of "$CLUSTER_TMP/greedy.json" 2>&1)
want=$(printf '%s\n%s\n%s' "$greedy" "$greedy" "$greedy")
[ "$code" = 200 ] && [ "$got" = "$want" ]
check "n=3 greedy: three identical choices equal to tandem-generate" $? "HTTP $code" "got $got" "want $greedy"
n=$(wait_prefills 1)
check "n=3 greedy is one prefill (prefill requests $base -> $n)" $? "$(grep -c 'choices on decoder' "$CLUSTER_TMP/router.log")"

w0=$(gen --temperature 1 --seed $SEED)
w1=$(gen --temperature 1 --seed $((SEED + 1)))
w2=$(gen --temperature 1 --seed $((SEED + 2)))
code=$(post /v1/completions "$(body "\"n\":3,\"temperature\":1,\"seed\":$SEED")" "$CLUSTER_TMP/seeded.json")
got=$(choices_of "$CLUSTER_TMP/seeded.json" 2>&1)
want=$(printf '%s\n%s\n%s' "$w0" "$w1" "$w2")
[ "$code" = 200 ] && [ "$got" = "$want" ] && [ "$w0" != "$w1" ] && [ "$w1" != "$w2" ]
check "n=3 with seed $SEED: choice i equals tandem-generate --seed $SEED+i, and they differ" $? \
    "HTTP $code" "got  $got" "want $want"
n=$(wait_prefills 2)
check "n=3 seeded is one prefill" $? "prefill requests: $n"

# streamed: each index's tokens, in order
curl -s -N --max-time 50 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/s.sse" \
    -d "$(body "\"n\":3,\"temperature\":1,\"seed\":$SEED,\"stream\":true")" "$URL/v1/completions"
got=$(python3 - "$CLUSTER_TMP/s.sse" <<'EOF'
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
assert ev[-2:] == ["data: [DONE]", ""], ev[-3:]
toks, fin = {}, {}
for e in ev[:-2]:
    j = json.loads(e[6:])
    for c in j["choices"]:
        toks.setdefault(c["index"], []).extend(c.get("token_ids", []))
        if c.get("finish_reason"):
            fin[c["index"]] = c["finish_reason"]
assert sorted(toks) == [0, 1, 2] and fin == {0: "length", 1: "length", 2: "length"}, (toks, fin)
for i in range(3):
    print(",".join(map(str, toks[i])))
EOF
)
[ "$got" = "$want" ]
check "n=3 seeded, streamed: index i's tokens equal tandem-generate --seed $SEED+i" $? "got  $got" "want $want"
n=$(wait_prefills 3)
check "the streamed n=3 is one prefill" $? "prefill requests: $n"

code=$(post /v1/completions "$(body "\"n\":1,\"best_of\":3,\"temperature\":1,\"seed\":$SEED")" "$CLUSTER_TMP/best.json")
got=$(choices_of "$CLUSTER_TMP/best.json" 2>&1)
[ "$code" = 200 ] && { [ "$got" = "$w0" ] || [ "$got" = "$w1" ] || [ "$got" = "$w2" ]; }
check "best_of=3: the returned choice is one of the three seeded candidates" $? "HTTP $code: $got"
n=$(wait_prefills 4)
check "best_of=3 is one prefill" $? "prefill requests: $n"
grep -q "3 choices on decoder .* as one prefill" "$CLUSTER_TMP/router.log"
check "the router logs the choices placed as one prefill" $? "$(grep -c choices "$CLUSTER_TMP/router.log")"

# echo with logprobs: the prompt's logprobs come from the one prefill, and
# every choice lists them before its own
code=$(post /v1/completions "$(body '"n":2,"temperature":0,"echo":true,"logprobs":1')" "$CLUSTER_TMP/echo.json")
verdict=$(python3 - "$CLUSTER_TMP/echo.json" "$(echo "$prompt" | tr ',' '\n' | grep -c .)" $N <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
n_prompt, n = int(sys.argv[2]), int(sys.argv[3])
a, b = (c["logprobs"]["token_logprobs"] for c in j["choices"])
assert len(j["choices"]) == 2 and a == b, (a, b)
assert len(a) == n_prompt + n and a[0] is None and all(x is not None for x in a[1:]), a
print("ok")
EOF
)
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "n=2 with echo + logprobs: both choices list the prompt's logprobs (from the one prefill)" $? \
    "HTTP $code: $verdict" "$(head -c 300 "$CLUSTER_TMP/echo.json")"
n=$(wait_prefills 5)
check "echo n=2 is one prefill" $? "prefill requests: $n"

used=$(wait_kv_free "$(curl -s "$URL/metrics" | sed -n 's/^tandem_kv_cache_blocks_used{pool="decode",worker="\([^"]*\)"}.*/\1/p' | head -1)")
check "the decoder's KV pages (shared and copied) are all free again" $? "blocks used: $used"
cluster_finish
