#!/usr/bin/env bash
# A decoder killed mid-stream (SIGKILL) with two decoders running: the
# router notices the missed heartbeats, places the request again (a new
# prefill of the prompt plus the tokens already streamed, on the surviving
# decoder) and the client's stream simply continues: every token arrives
# exactly once, the stream ends normally, and the tokens are the ones the
# engine computes: the part before the failure equals tandem-generate on the
# prompt, the part after it equals tandem-generate on the prompt plus that
# part (the same prefill + decode the resumed request ran). The request
# carries penalties: the resumed attempt still counts the streamed tokens as
# output (tandem-generate --output-in-prompt) and the decoder gets the
# prompt they need. The surviving decoder holds no KV pages afterwards.
# (docs/RELIABILITY.md)
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# Heartbeats every 100 ms; a worker silent for 3 s is dropped.
DECODER_ID=d1 cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 3000 || cluster_finish
name_workers "" d1
prompt=$(golden_ids "$dir" prompt_ids)
N=2000

# The request starts on d1 (the only decoder). Once it streams, d1 is
# frozen (so the stream cannot finish first), a second decoder d2 joins,
# and d1 is killed.
PEN='"presence_penalty":0.5,"frequency_penalty":0.02,"repetition_penalty":1.1'
PEN_FLAGS=(--presence-penalty 0.5 --frequency-penalty 0.02 --repetition-penalty 1.1)
stream_start 120 "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":$N,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,$PEN}" \
    "$CLUSTER_TMP/s.sse"
cpid=$!
kill -STOP "$(pid_of d1)"
start_worker decoder d2
wait_health 1 2
check "a second decoder registers while the first is frozen mid-stream" $? "$(curl -s "$URL/healthz")"
kill -KILL "$(pid_of d1)"
victim=d1
forget "$victim"
survivor=d2
wait "$cpid"
read -r toks finish <<<"$(sse_tokens "$CLUSTER_TMP/s.sse")"
n=$(echo "$toks" | tr ',' '\n' | grep -c .)
[ "$finish" = length ] && [ "$n" = "$N" ]
check "the stream continues to the end: $N tokens, finish_reason length, no error" $? \
    "got $n tokens, end '$finish'" "$(tail -c 400 "$CLUSTER_TMP/s.sse")"

k=$(sed -n 's/.*placing it again as .* (attempt 2, after \([0-9]*\) tokens).*/\1/p' "$CLUSTER_TMP/router.log" | head -1)
[ -n "$k" ] && [ "$k" -gt 0 ] && [ "$k" -lt "$N" ]
check "the router placed it again after the streamed tokens (after ${k:-?} of $N)" $? \
    "$(grep -E 'placing|dropping|failed' "$CLUSTER_TMP/router.log" | tail -5)"
if [ -n "$k" ]; then
    before=$(echo "$toks" | cut -d, -f1-"$k")
    after=$(echo "$toks" | cut -d, -f$((k + 1))-)
    want_before=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
                  --max-tokens "$k" --ignore-eos "${PEN_FLAGS[@]}" 2>/dev/null)
    want_after=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt,$before" \
                 --max-tokens $((N - k)) --ignore-eos "${PEN_FLAGS[@]}" --output-in-prompt "$k" \
                 2>/dev/null)
    [ "$before" = "$want_before" ]
    check "tokens before the failure are the engine's for the prompt (with the penalties)" $? "got $before" "want $want_before"
    [ "$after" = "$want_after" ]
    check "tokens after it are the engine's for the prompt plus those tokens, counted as output" $? \
        "got $after" "want $want_after"
fi

# The survivor serves new requests and holds no KV pages.
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" "$CLUSTER_TMP/after.json")
got=$(json_get "$CLUSTER_TMP/after.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-8)" ]
check "the surviving decoder serves new requests correctly" $? "HTTP $code $got"
used=$(wait_kv_free "$survivor")
check "the surviving decoder's KV pages are all free again" $? "blocks used: $used"
cluster_finish
