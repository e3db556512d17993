#!/usr/bin/env bash
# Admission by use with preemption (decoder/scheduler.h, docs/RELIABILITY.md
# "Admission by use and preemption"): one decoder whose KV pool (20 pages
# of 16 tokens) holds the worst case of two of these requests, eight long
# greedy requests at once, half of them streamed. The decoder admits more
# than two (only their prompts' pages), runs dry as they grow, preempts the
# latest admitted, and the router places those again with prompt + the
# tokens streamed so far. Every request completes with exactly
# tandem-generate's tokens (none repeated, none lost, no error), both
# /metrics count the preemptions, and the decoder holds no page afterwards.
# Then n = 4 choices of one prompt (decoder branches sharing its pages) on
# the same pool: branches are preempted and go on alone, still exact.
# A chat completion without max_tokens gets the rest of the context.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
dir=tests/fixtures/$fx
PAGES=20
DECODER_ID=d1 DECODER_FLAGS="--kv-pages $PAGES --page-size 16" \
    PREFILLER_FLAGS="--page-size 16" cluster_start "$dir" --tokenizer bytes || cluster_finish
name_workers "" d1
golden=$(golden_ids "$dir" prompt_ids)
N=120  # prompts of 20..34 tokens: at most 153 tokens cached, 10 pages each

prompt_of() { echo "$golden" | cut -d, -f1-$((20 + 2 * $1)); }
# greedy, ignoring EOS, token ids returned beside the (bytes) text
body_of() {
    printf '{"model":"%s","prompt":[%s],"max_tokens":%d,"temperature":0,"ignore_eos":true,"return_token_ids":true%s}' \
        "$fx" "$(prompt_of "$1")" $N "${2:+,\"stream\":true}"
}
pids=()
for i in 0 1 2 3 4 5 6 7; do
    if [ $((i % 2)) = 0 ]; then
        curl -s -N --max-time 55 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/r$i.out" \
            -d "$(body_of $i stream)" "$URL/v1/completions" &
    else
        curl -s --max-time 55 -H 'Content-Type: application/json' -o "$CLUSTER_TMP/r$i.out" \
            -d "$(body_of $i)" "$URL/v1/completions" &
    fi
    pids+=($!)
done
# the references meanwhile (the cluster's tokens do not depend on timing)
for i in 0 1 2 3 4 5 6 7; do
    timeout 50 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$(prompt_of $i)" \
        --max-tokens $N --ignore-eos >"$CLUSTER_TMP/want$i" 2>/dev/null
done
for pid in "${pids[@]}"; do wait "$pid"; done

for i in 0 1 2 3 4 5 6 7; do
    want=$(cat "$CLUSTER_TMP/want$i")
    if [ $((i % 2)) = 0 ]; then
        read -r got finish <<<"$(sse_tokens "$CLUSTER_TMP/r$i.out")"
        how=streamed
    else
        got=$(json_get "$CLUSTER_TMP/r$i.out" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
        finish=$(json_get "$CLUSTER_TMP/r$i.out" 'j["choices"][0]["finish_reason"]' 2>&1)
        how=whole
    fi
    [ -n "$want" ] && [ "$got" = "$want" ] && [ "$finish" = length ]
    check "request $i ($how, prompt $((20 + 2 * i)) tokens): $N tokens equal to tandem-generate's, finish length" \
        $? "got  $got ($finish)" "want $want" "$(tail -c 300 "$CLUSTER_TMP/r$i.out")"
done

# n = 4 choices of one prompt: one prefill, four branches sharing its pages
# that cannot all grow here; the preempted ones go on alone (re-prefilled
# with their own output) and still give the greedy tokens.
before=$(grep -c "preempted it" "$CLUSTER_TMP/router.log")
code=$(post /v1/completions "$(body_of 7 | sed 's/}$/,"n":4}/')" "$CLUSTER_TMP/n4.json")
got=$(json_get "$CLUSTER_TMP/n4.json" '"|".join(",".join(map(str, c["token_ids"])) + " " + c["finish_reason"] for c in j["choices"])' 2>&1)
want=$(cat "$CLUSTER_TMP/want7")
after=$(grep -c "preempted it" "$CLUSTER_TMP/router.log")
[ "$code" = 200 ] && [ "$got" = "$want length|$want length|$want length|$want length" ] &&
    [ "$after" -gt "$before" ]
check "n=4 on the small pool: branches preempted ($((after - before))) and re-placed; all four equal tandem-generate" \
    $? "HTTP $code: $got" "want $want"

preempted=$(grep -c "preempted it" "$CLUSTER_TMP/router.log")
[ "$preempted" -gt 0 ]
check "the decoder preempted requests and the router placed them again ($preempted times)" $? \
    "$(grep -E 'placing|preempt' "$CLUSTER_TMP/router.log" | tail -5)"
grep -q "request .* failed" "$CLUSTER_TMP/router.log"
[ $? -ne 0 ]
check "no request failed" $? "$(grep 'failed' "$CLUSTER_TMP/router.log" | head -3)"

rp=$(metric tandem_request_preemptions_total)
[ "${rp:-0}" = "$preempted" ]
check "router /metrics: tandem_request_preemptions_total = $preempted" $? "got '${rp}'"
dp=""
for _ in $(seq 1 50); do   # the decoder's count comes with its next heartbeat
    dp=$(metric 'tandem_decode_preemptions_total{pool="decode",worker="d1"}')
    [ "${dp:-0}" = "$preempted" ] && break
    sleep 0.1
done
[ "${dp:-0}" = "$preempted" ]
check "decoder /metrics (via the router): tandem_decode_preemptions_total = $preempted" $? "got '${dp}'"
used=$(wait_kv_free d1)
check "the decoder's KV pages are all free again" $? "blocks used: $used"

# Chat without max_tokens: the rest of the context (20 pages x 16 + 1 = 321
# tokens: the decoder's), as OpenAI does, not a fixed 256.
msgs='[{"role":"user","content":"Hi"}]'
code=$(post /v1/chat/completions "{\"model\":\"$fx\",\"messages\":$msgs,\"temperature\":0,\"ignore_eos\":true}" \
    "$CLUSTER_TMP/chat.json")
sum=$(json_get "$CLUSTER_TMP/chat.json" \
    'str(j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"]) + " " + j["choices"][0]["finish_reason"]' 2>&1)
[ "$code" = 200 ] && [ "$sum" = "321 length" ]
check "chat without max_tokens generates to the end of the context (prompt + completion = 321)" $? \
    "HTTP $code: $sum" "$(head -c 300 "$CLUSTER_TMP/chat.json")"
cluster_finish
