#!/usr/bin/env bash
# Logprobs, penalties and logit_bias through the real cluster (router +
# prefiller + decoder, the gpt_oss_tiny fixture), against a float64
# recomputation from the fixture's golden logits (gen_logits[k]: the
# reference model's logits after prompt_ids + gen_ids[:k]):
#   - completions logprobs k: the greedy tokens' logprobs equal
#     log_softmax(gen_logits) in float64 within 2e-3 (the engine runs the
#     model in float32), the k alternatives in the reference's order;
#     streaming chunks carry the same logprobs;
#   - logit_bias +100 makes greedy output that token, -100 bans it (the next
#     best token of the reference, with its raw logprob);
#   - presence/frequency 2 leave no repeated token in greedy output (the
#     reference output repeats), frequency does not count the prompt;
#   - repetition_penalty 1.5 matches the float64 re-computation of one step;
#   - chat logprobs (--tokenizer bytes): content[] with token, bytes and
#     top_logprobs, streaming and not;
#   - n > 1, best_of and a list of prompts: one choice per prompt and
#     branch (index prompt * n + branch, streaming too), branch b seeded
#     seed + b and equal to tandem-generate with that seed, greedy branches
#     identical, best_of returning the highest cumulative logprob;
#   - out-of-range values get OpenAI-style 400s.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
prompt=$(golden_ids "$dir" prompt_ids)
golden=$(golden_ids "$dir" gen_ids)
C=/v1/completions
# ref.py CHECK ARGS...: the float64 reference checks (one line: ok or why).
REF=$CLUSTER_TMP/ref.py
cat >"$REF" <<'PYEOF'
import json, math, struct, sys
BOUND = 2e-3  # |float32 engine - float64 reference| for logprobs
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
def tensor(name):
    e = head[name]; b, end = e["data_offsets"]; raw = data[8 + n + b:8 + n + end]
    return struct.unpack("<%d%s" % (len(raw) // 4, "f" if e["dtype"] == "F32" else "i"), raw)
V = head["gen_logits"]["shape"][1]
logits, gen, prompt = tensor("gen_logits"), tensor("gen_ids"), tensor("prompt_ids")
row = lambda k: logits[k * V:(k + 1) * V]
def log_softmax(r):
    m = max(r); z = math.log(sum(math.exp(x - m) for x in r))
    return [x - m - z for x in r]
def order(r):  # the sampler's order: higher logit first, then lower id
    return sorted(range(V), key=lambda j: (-r[j], j))
check, args = sys.argv[2], sys.argv[3:]
def done(ok, why=""):
    print("ok" if ok else why); sys.exit()
if check == "completion_logprobs":  # FILE K N
    j = json.load(open(args[0])); k, count = int(args[1]), int(args[2])
    c = j["choices"][0]; lp = c["logprobs"]
    if c["token_ids"] != list(gen[:count]): done(0, "tokens %s" % c["token_ids"])
    if list(lp) != ["tokens", "token_logprobs", "top_logprobs", "text_offset"]: done(0, "keys %s" % list(lp))
    if lp["tokens"] != ["token_id:%d" % t for t in gen[:count]]: done(0, "token strings %s" % lp["tokens"])
    if lp["text_offset"] != [0] * count: done(0, "text_offset %s" % lp["text_offset"])
    worst = 0.0
    for i in range(count):
        ref = log_softmax(row(i)); top = order(row(i))
        worst = max(worst, abs(lp["token_logprobs"][i] - ref[gen[i]]))
        d = lp["top_logprobs"][i]
        # greedy: the sampled token is the first alternative, so exactly k keys
        if len(d) != max(k, 1) or ("token_id:%d" % gen[i]) not in d: done(0, "step %d: dict %s" % (i, d))
        got = [int(s.split(":")[1]) for s in d]
        for a in range(len(got)):
            if got[a] != top[a] and abs(row(i)[got[a]] - row(i)[top[a]]) > BOUND:
                done(0, "step %d: order %s, reference %s" % (i, got, top[:k]))
            worst = max(worst, abs(d["token_id:%d" % got[a]] - ref[got[a]]))
    done(worst <= BOUND, "max |logprob - float64 reference| = %g > %g" % (worst, BOUND))
if check == "banned":  # FILE: logit_bias -100 on gen[0], max_tokens 1, logprobs 2
    j = json.load(open(args[0])); c = j["choices"][0]
    r = row(0); ref = log_softmax(r); want = [t for t in order(r) if t != gen[0]][0]
    if c["token_ids"] != [want]: done(0, "token %s, want %d" % (c["token_ids"], want))
    lp = c["logprobs"]
    # logprobs are the raw distribution's: the banned token stays the top alternative
    if abs(lp["token_logprobs"][0] - ref[want]) > BOUND: done(0, "logprob %s vs %s" % (lp["token_logprobs"][0], ref[want]))
    done(list(lp["top_logprobs"][0])[0] == "token_id:%d" % gen[0], "top %s" % lp["top_logprobs"][0])
if check == "repetition":  # TOKEN K R: one step after prompt + gen[:K] with repetition R
    tok, k, rep = int(args[0]), int(args[1]), float(args[2])
    seen = set(prompt) | set(gen[:k])
    adj = [(x / rep if x > 0 else x * rep) if t in seen else x for t, x in enumerate(row(k))]
    want = order(adj)[0]
    if want == gen[k]: done(0, "the test needs a step where the penalty changes the token")
    done(tok == want, "token %d, float64 re-computation %d" % (tok, want))
if check == "no_repeat_but_reference_repeats":  # TOKENS
    toks = [int(t) for t in args[0].split(",")]
    done(len(set(toks)) == len(toks) and len(set(gen[:len(toks)])) < len(toks),
         "tokens %s (reference %s)" % (toks, gen[:len(toks)]))
if check == "echo_logprobs":  # FILE K N: echo with logprobs K, N generated tokens
    j = json.load(open(args[0])); k, count = int(args[1]), int(args[2])
    c = j["choices"][0]; lp = c["logprobs"]; P = len(prompt)
    plog = tensor("prompt_logits")
    prow = lambda i: plog[i * V:(i + 1) * V]
    if c["token_ids"] != list(gen[:count]): done(0, "tokens %s" % c["token_ids"])
    want = ["token_id:%d" % t for t in list(prompt) + list(gen[:count])]
    if lp["tokens"] != want: done(0, "token strings %s" % lp["tokens"][:8])
    if lp["token_logprobs"][0] is not None or lp["top_logprobs"][0] is not None:
        done(0, "first prompt token: %s %s" % (lp["token_logprobs"][0], lp["top_logprobs"][0]))
    if lp["text_offset"] != [0] * (P + count): done(0, "text_offset %s" % lp["text_offset"][:8])
    worst = 0.0
    for i in range(1, P + count):  # token i given the tokens before it
        r = prow(i - 1) if i < P else row(i - P)
        tok = prompt[i] if i < P else gen[i - P]
        ref = log_softmax(r); top = order(r)
        worst = max(worst, abs(lp["token_logprobs"][i] - ref[tok]))
        d = lp["top_logprobs"][i]
        # the k alternatives, and the token itself when it is not among them
        if ("token_id:%d" % tok) not in d or len(d) not in (k, k + 1) or len(d) < 1:
            done(0, "token %d: dict %s" % (i, d))
        got = [int(s.split(":")[1]) for s in d][:k]
        for a in range(len(got)):
            if got[a] != top[a] and abs(r[got[a]] - r[top[a]]) > BOUND:
                done(0, "token %d: order %s, reference %s" % (i, got, top[:k]))
            worst = max(worst, abs(d["token_id:%d" % got[a]] - ref[got[a]]))
    done(worst <= BOUND, "max |logprob - float64 reference| = %g > %g" % (worst, BOUND))
done(0, "unknown check " + check)
PYEOF
ref() { python3 "$REF" "$dir/golden.safetensors" "$@" 2>&1; }

cluster_start "$dir" || cluster_finish

# ---- logprobs (--tokenizer none: tokens are "token_id:N")
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":5}" "$CLUSTER_TMP/lp.json")
verdict=$(ref completion_logprobs "$CLUSTER_TMP/lp.json" 5 12)
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "completions logprobs 5: logprobs and top-5 equal the float64 softmax of the reference logits" $? \
    "HTTP $code $verdict" "$(head -c 600 "$CLUSTER_TMP/lp.json")"

code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":0}" "$CLUSTER_TMP/lp0.json")
verdict=$(ref completion_logprobs "$CLUSTER_TMP/lp0.json" 0 6)
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "completions logprobs 0: the sampled token's logprob only" $? "HTTP $code $verdict"

# echo with logprobs: the prompt tokens' logprobs (computed on the prefiller
# from every prompt position's logits) against the reference's prompt_logits,
# then the generated tokens'. The 40-token prompt takes two of the 32-token
# chunks the prefiller uses for them (the first token drawn from the last
# chunk's last row).
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":3,\"echo\":true}" "$CLUSTER_TMP/echo.json")
verdict=$(ref echo_logprobs "$CLUSTER_TMP/echo.json" 3 3)
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "completions echo + logprobs 3: the prompt tokens' logprobs equal the float64 softmax of the reference's prompt logits (first null)" $? \
    "HTTP $code $verdict" "$(head -c 600 "$CLUSTER_TMP/echo.json")"
# streamed: the echo chunk carries the prompt's entries, then one per token
curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/echo.sse" \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":3,\"echo\":true,\"stream\":true}" "$URL$C"
verdict=$(python3 - "$CLUSTER_TMP/echo.sse" "$CLUSTER_TMP/echo.json" <<'PYEOF'
import json, sys
want = json.load(open(sys.argv[2]))["choices"][0]["logprobs"]
got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
sizes = []
for line in open(sys.argv[1]):
    if not line.startswith("data: {"): continue
    c = json.loads(line[6:])["choices"][0]
    if c["logprobs"]:
        sizes.append(len(c["logprobs"]["tokens"]))
        for key in got: got[key] += c["logprobs"][key]
print("ok" if got == want and sizes[0] == len(want["tokens"]) - 3 and sizes[1:] == [1, 1, 1]
      else "streamed %s vs %s" % (sizes, len(want["tokens"])))
PYEOF
)
check "completions echo + logprobs streamed: the prompt's entries in the first chunk, the same as not streamed" \
    "$([ "$verdict" = ok ]; echo $?)" "$verdict"

# Streaming: each chunk carries its token's logprobs, together the same as above.
curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/lp.sse" \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":5,\"stream\":true}" "$URL$C"
verdict=$(python3 - "$CLUSTER_TMP/lp.sse" "$CLUSTER_TMP/lp.json" <<'PYEOF'
import json, sys
ev = [e[6:] for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: {")]
want = json.load(open(sys.argv[2]))["choices"][0]["logprobs"]
got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
for e in ev:
    c = json.loads(e)["choices"][0]
    if c["finish_reason"] is not None:
        if c["logprobs"] is not None: print("finish chunk logprobs", c["logprobs"]); sys.exit()
        continue
    if len(c["logprobs"]["tokens"]) != 1: print("chunk", c); sys.exit()
    for k in got: got[k] += c["logprobs"][k]
print("ok" if got == want else "stream %s\nbody %s" % (got, want))
PYEOF
)
[ "$verdict" = ok ]
check "streamed completion chunks carry each token's logprobs (same as the body)" $? "$verdict"

# ---- logit_bias
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logit_bias\":{\"77\":100}}" "$CLUSTER_TMP/b.json")
got=$(json_get "$CLUSTER_TMP/b.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "77,77,77,77,77,77" ]
check "logit_bias +100 on token 77: greedy output is that token" $? "HTTP $code $got"

g0=${golden%%,*}
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":1,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":2,\"logit_bias\":{\"$g0\":-100}}" "$CLUSTER_TMP/ban.json")
verdict=$(ref banned "$CLUSTER_TMP/ban.json")
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "logit_bias -100 bans the greedy token: the reference's next best, logprobs of the raw distribution" $? \
    "HTTP $code $verdict" "$(cat "$CLUSTER_TMP/ban.json")"

# ---- presence / frequency penalties
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true,\"presence_penalty\":2,\"frequency_penalty\":2}" "$CLUSTER_TMP/pf.json")
toks=$(json_get "$CLUSTER_TMP/pf.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
verdict=$(ref no_repeat_but_reference_repeats "$toks")
[ "$code" = 200 ] && [ "$verdict" = ok ]
check "presence_penalty 2 + frequency_penalty 2: no token repeats in 24 greedy tokens" $? "HTTP $code $verdict"

# Many steps: the same as tandem-generate with the same penalties and bias
# (the decoder counts every output token, and the prompt for repetition),
# greedy and seeded.
PEN='"presence_penalty":1.5,"frequency_penalty":0.5,"repetition_penalty":1.3,"logit_bias":{"12":-100,"5":3}'
PEN_FLAGS=(--presence-penalty 1.5 --frequency-penalty 0.5 --repetition-penalty 1.3 --logit-bias 12:-100,5:3)
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true,$PEN}" "$CLUSTER_TMP/pg.json")
got=$(json_get "$CLUSTER_TMP/pg.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" --max-tokens 32 --ignore-eos \
       "${PEN_FLAGS[@]}" 2>/dev/null)
[ "$code" = 200 ] && [ "$got" = "$want" ] && [ "$got" != "$(echo "$golden" | cut -d, -f1-32)" ]
check "greedy with all penalties and logit_bias = tandem-generate with the same (32 tokens)" $? \
    "HTTP $code $got" "want $want"
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0.8,\"seed\":42,\"ignore_eos\":true,$PEN}" "$CLUSTER_TMP/ps.json")
got=$(json_get "$CLUSTER_TMP/ps.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" --max-tokens 32 --ignore-eos \
       --temperature 0.8 --seed 42 "${PEN_FLAGS[@]}" 2>/dev/null)
[ "$code" = 200 ] && [ "$got" = "$want" ]
check "seeded sampling with penalties and logit_bias = tandem-generate with the same seed" $? \
    "HTTP $code $got" "want $want"

# One step after prompt + the reference's first 17 tokens: greedy gives
# gen_ids[17] (a token already in that prompt) ...
long_prompt="$prompt,$(echo "$golden" | cut -d, -f1-17)"
g17=$(echo "$golden" | cut -d, -f18)
one_step() { # one_step EXTRA_FIELDS -> the token
    post $C "{\"model\":\"$fx\",\"prompt\":[$long_prompt],\"max_tokens\":1,\"temperature\":0,\"ignore_eos\":true$1}" \
        "$CLUSTER_TMP/one.json" >/dev/null
    json_get "$CLUSTER_TMP/one.json" 'j["choices"][0]["token_ids"][0]' 2>&1
}
got=$(one_step "")
[ "$got" = "$g17" ]
check "one greedy step after the reference prefix gives the reference token" $? "$got vs $g17"
got=$(one_step ',"frequency_penalty":2,"presence_penalty":2')
[ "$got" = "$g17" ]
check "presence/frequency penalties do not count prompt tokens" $? "$got vs $g17"
got=$(one_step ',"repetition_penalty":1.5')
verdict=$(ref repetition "$got" 17 1.5)
[ "$verdict" = ok ]
check "repetition_penalty 1.5 matches a float64 re-computation of the step" $? "$verdict"

# ---- n > 1, best_of, a list of prompts
gen() { # gen PROMPT_IDS MAX_TOKENS [tandem-generate flags]: one process's tokens
    local p=$1 m=$2
    shift 2
    timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$p" --max-tokens "$m" --ignore-eos \
        "$@" 2>/dev/null
}
# choices FILE: "index:tokens" per choice, space-separated
choices() { json_get "$1" '" ".join("%d:%s" % (c["index"], ",".join(map(str, c["token_ids"]))) for c in j["choices"])' 2>&1; }
g8=$(echo "$golden" | cut -d, -f1-8)
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"n\":3}" "$CLUSTER_TMP/n3.json")
got="$(choices "$CLUSTER_TMP/n3.json") $(json_get "$CLUSTER_TMP/n3.json" 'j["usage"]' 2>&1)"
[ "$code" = 200 ] && [ "$got" = "0:$g8 1:$g8 2:$g8 {'prompt_tokens': 40, 'completion_tokens': 24, 'total_tokens': 64}" ]
check "n=3 greedy: three identical choices (the reference tokens), usage sums the completions" $? "HTTP $code $got"

SAMPLE=(--temperature 0.9 --top-p 0.95 --seed)
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0.9,\"top_p\":0.95,\"seed\":1234,\"ignore_eos\":true,\"n\":3}" "$CLUSTER_TMP/n3s.json")
got=$(choices "$CLUSTER_TMP/n3s.json")
s0=$(gen "$prompt" 8 "${SAMPLE[@]}" 1234)
s1=$(gen "$prompt" 8 "${SAMPLE[@]}" 1235)
s2=$(gen "$prompt" 8 "${SAMPLE[@]}" 1236)
[ "$code" = 200 ] && [ "$got" = "0:$s0 1:$s1 2:$s2" ] && [ "$s0" != "$s1" ] && [ "$s1" != "$s2" ] && [ "$s0" != "$s2" ]
check "n=3 seeded: branch b = tandem-generate --seed 1234+b, all different" $? "HTTP $code $got" \
    "want 0:$s0 1:$s1 2:$s2"

p1=$(echo "$prompt" | cut -d, -f1-20)
p2="5,6,7"
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[[$prompt],[$p1],[$p2]],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" "$CLUSTER_TMP/list.json")
got="$(choices "$CLUSTER_TMP/list.json") $(json_get "$CLUSTER_TMP/list.json" 'j["usage"]["prompt_tokens"]' 2>&1)"
want="0:$(gen "$prompt" 8) 1:$(gen "$p1" 8) 2:$(gen "$p2" 8) 63"
[ "$code" = 200 ] && [ "$got" = "$want" ]
check "a list of 3 prompts: one choice each, equal to tandem-generate, usage counts every prompt" $? \
    "HTTP $code $got" "want $want"

# 2 prompts x n=2, streamed: index = prompt * 2 + branch, each choice's chunks
# in order, one finish chunk each, then usage and [DONE]; the same tokens
# as the non-streamed request.
body="{\"model\":\"$fx\",\"prompt\":[[$p1],[$p2]],\"max_tokens\":6,\"temperature\":0.9,\"top_p\":0.95,\"seed\":77,\"ignore_eos\":true,\"n\":2"
code=$(post $C "$body}" "$CLUSTER_TMP/pn.json")
curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/pn.sse" \
    -d "$body,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$URL$C"
want="0:$(gen "$p1" 6 "${SAMPLE[@]}" 77) 1:$(gen "$p1" 6 "${SAMPLE[@]}" 78) 2:$(gen "$p2" 6 "${SAMPLE[@]}" 77) 3:$(gen "$p2" 6 "${SAMPLE[@]}" 78)"
got=$(choices "$CLUSTER_TMP/pn.json")
streamed=$(python3 - "$CLUSTER_TMP/pn.sse" <<'PYEOF'
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
if ev[-2:] != ["data: [DONE]", ""]: print("no [DONE]"); sys.exit()
toks, finished, usage = {}, {}, None
for e in ev[:-2]:
    j = json.loads(e[6:])
    if not j["choices"]: usage = j["usage"]; continue
    if len(j["choices"]) != 1: print("chunk with", len(j["choices"]), "choices"); sys.exit()
    c = j["choices"][0]; i = c["index"]
    if i in finished: print("chunk after the finish of", i); sys.exit()
    toks.setdefault(i, []).extend(c["token_ids"])
    if c["finish_reason"]: finished[i] = c["finish_reason"]
if sorted(finished) != [0, 1, 2, 3] or set(finished.values()) != {"length"}: print("finish", finished); sys.exit()
if usage != {"prompt_tokens": 23, "completion_tokens": 24, "total_tokens": 47}: print("usage", usage); sys.exit()
print(" ".join("%d:%s" % (i, ",".join(map(str, toks[i]))) for i in sorted(toks)))
PYEOF
)
[ "$code" = 200 ] && [ "$got" = "$want" ] && [ "$streamed" = "$want" ]
check "2 prompts x n=2, streamed and not: index prompt*2+branch, each = tandem-generate with seed+branch" $? \
    "HTTP $code body:   $got" "stream: $streamed" "want:   $want"

# best_of 3: the candidate with the highest cumulative logprob (the three
# candidates are the n=3 branches of the same seed, with their logprobs).
code=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":1,\"seed\":99,\"ignore_eos\":true,\"n\":3,\"logprobs\":0}" "$CLUSTER_TMP/cand.json")
best=$(json_get "$CLUSTER_TMP/cand.json" '",".join(map(str, max(j["choices"], key=lambda c: (sum(c["logprobs"]["token_logprobs"]), -c["index"]))["token_ids"]))' 2>&1)
code2=$(post $C "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":1,\"seed\":99,\"ignore_eos\":true,\"best_of\":3}" "$CLUSTER_TMP/best.json")
got="$(choices "$CLUSTER_TMP/best.json") $(json_get "$CLUSTER_TMP/best.json" 'j["usage"]["completion_tokens"]' 2>&1)"
[ "$code" = 200 ] && [ "$code2" = 200 ] && [ "$got" = "0:$best 24" ]
check "best_of 3: the candidate with the highest cumulative logprob (usage counts all 3)" $? \
    "HTTP $code $code2 $got" "want 0:$best" "$(choices "$CLUSTER_TMP/cand.json")"

expect_error "n = 0" $C "{\"model\":\"$fx\",\"prompt\":[1],\"n\":0}" 400 n invalid_value
expect_error "best_of < n" $C "{\"model\":\"$fx\",\"prompt\":[1],\"n\":3,\"best_of\":2}" 400 best_of invalid_value
expect_error "best_of > n streamed" $C "{\"model\":\"$fx\",\"prompt\":[1],\"best_of\":2,\"stream\":true}" 400 \
    best_of invalid_value
expect_error "one bad prompt in a list" $C "{\"model\":\"$fx\",\"prompt\":[[1],[2,512]]}" 400 prompt \
    invalid_value "outside the model's vocabulary"

# ---- errors
expect_error "logprobs above 20" $C "{\"model\":\"$fx\",\"prompt\":[1],\"logprobs\":21}" 400 \
    logprobs invalid_value
expect_error "presence_penalty above 2" $C "{\"model\":\"$fx\",\"prompt\":[1],\"presence_penalty\":2.5}" \
    400 presence_penalty invalid_value
expect_error "frequency_penalty below -2" $C "{\"model\":\"$fx\",\"prompt\":[1],\"frequency_penalty\":-3}" \
    400 frequency_penalty invalid_value
expect_error "repetition_penalty 0" $C "{\"model\":\"$fx\",\"prompt\":[1],\"repetition_penalty\":0}" \
    400 repetition_penalty invalid_value
expect_error "logit_bias outside the vocabulary" $C "{\"model\":\"$fx\",\"prompt\":[1],\"logit_bias\":{\"512\":1}}" \
    400 logit_bias invalid_value "outside the model's vocabulary"
expect_error "logit_bias above 100" $C "{\"model\":\"$fx\",\"prompt\":[1],\"logit_bias\":{\"5\":101}}" \
    400 logit_bias invalid_value
expect_error "logit_bias key not a token id" $C "{\"model\":\"$fx\",\"prompt\":[1],\"logit_bias\":{\"a\":1}}" \
    400 logit_bias invalid_value
cluster_stop 1

# ---- chat logprobs (--tokenizer bytes: token i < 256 is byte i)
cluster_start "$dir" --tokenizer bytes || cluster_finish
CH=/v1/chat/completions
body="{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true,\"logprobs\":true,\"top_logprobs\":3"
code=$(post $CH "$body}" "$CLUSTER_TMP/chat.json")
curl -s -N --max-time 60 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/chat.sse" \
    -d "$body,\"stream\":true}" "$URL$CH"
code2=$(post $C "{\"model\":\"$fx\",\"prompt\":\"<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\n\",\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":3}" "$CLUSTER_TMP/same.json")
verdict=$(python3 - "$CLUSTER_TMP/chat.json" "$CLUSTER_TMP/chat.sse" "$CLUSTER_TMP/same.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); c = j["choices"][0]; lp = c["logprobs"]
if list(lp) != ["content", "refusal"] or lp["refusal"] is not None: print("keys", list(lp)); sys.exit()
ids = c["token_ids"]; content = lp["content"]
if len(content) != len(ids) or len(ids) != 8: print("count", len(content), ids); sys.exit()
def text_bytes(t): return [t] if t < 256 else list("\ufffd".encode())
for t, e in zip(ids, content):
    if list(e) != ["token", "logprob", "bytes", "top_logprobs"]: print("entry keys", list(e)); sys.exit()
    if e["bytes"] != text_bytes(t): print("bytes", t, e); sys.exit()
    if e["token"] != bytes(e["bytes"]).decode(errors="replace"): print("token", e); sys.exit()
    tops = e["top_logprobs"]
    if len(tops) != 3 or any(list(a) != ["token", "logprob", "bytes"] for a in tops): print("tops", tops); sys.exit()
    if [a["logprob"] for a in tops] != sorted((a["logprob"] for a in tops), reverse=True): print("order", tops); sys.exit()
    # greedy: the sampled token is the most likely one
    if tops[0]["logprob"] != e["logprob"] or tops[0]["bytes"] != e["bytes"]: print("greedy", e); sys.exit()
# The same prompt as a completion: the same logprobs.
same = json.load(open(sys.argv[3]))["choices"][0]["logprobs"]["token_logprobs"]
if same != [e["logprob"] for e in content]: print("completion", same, [e["logprob"] for e in content]); sys.exit()
# Streaming: each chunk's content logprobs, together the body's.
streamed = []
for ev in open(sys.argv[2]).read().split("\n\n"):
    if ev.startswith("data: {"):
        ch = json.loads(ev[6:])["choices"][0]
        if ch["logprobs"] is not None:
            streamed += ch["logprobs"]["content"]
print("ok" if streamed == content else "stream %s\nbody %s" % (streamed, content))
PYEOF
)
[ "$code" = 200 ] && [ "$code2" = 200 ] && [ "$verdict" = ok ]
check "chat logprobs: content[] with token, bytes, top_logprobs; streamed the same; equal to the completion's" $? \
    "HTTP $code $code2 $verdict" "$(head -c 600 "$CLUSTER_TMP/chat.json")"

expect_error "chat top_logprobs without logprobs" $CH \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_logprobs\":2}" 400 \
    top_logprobs invalid_value
expect_error "chat top_logprobs above 20" $CH \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"top_logprobs\":21}" \
    400 top_logprobs invalid_value
code=$(post $CH "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"logprobs\":false}" "$CLUSTER_TMP/nolp.json")
got=$(json_get "$CLUSTER_TMP/nolp.json" 'j["choices"][0]["logprobs"]' 2>&1)
[ "$code" = 200 ] && [ "$got" = None ]
check "chat logprobs false: \"logprobs\": null" $? "HTTP $code $got"
cluster_finish
