#!/usr/bin/env bash
# Tokens through the real three-process cluster (router, prefiller, decoder;
# KV over the TransferEngine) equal the single-process engine
# (tandem-generate) and HF's golden tokens, for both fixture models, over
# HTTP and over the RPC API; a seeded sampled request gives the same tokens
# as tandem-generate with the same seed (the sampler state crosses from the
# prefiller to the decoder); the RPC client streams and cancels.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

for fx in gpt_oss_tiny qwen3_moe_tiny; do
    dir=tests/fixtures/$fx
    prompt=$(golden_ids "$dir" prompt_ids)
    golden=$(golden_ids "$dir" gen_ids)
    single=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
             --max-tokens 32 --ignore-eos 2>/dev/null)
    [ "$single" = "$golden" ]
    check "$fx: tandem-generate reproduces the HF golden tokens" $? "$single" "$golden"

    # The decoder's pages are smaller than the prefiller's, so the transfer
    # reshards between the two page layouts. --device cpu is the default, given
    # here explicitly.
    PREFILLER_FLAGS="--page-size 16 --device cpu" DECODER_FLAGS="--page-size 5 --kv-pages 256 --device cpu" \
        cluster_start "$dir" || continue

    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/greedy.json")
    got=$(json_get "$CLUSTER_TMP/greedy.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$golden" ] && [ "$got" = "$single" ]
    check "$fx: greedy /v1/completions through the cluster = tandem-generate = HF golden" $? \
        "HTTP $code" "cluster: $got" "golden:  $golden"
    finish=$(json_get "$CLUSTER_TMP/greedy.json" 'j["choices"][0]["finish_reason"], j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"]' 2>&1)
    n_prompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
    [ "$finish" = "('length', $n_prompt, 32)" ]
    check "$fx: finish_reason length and usage counts" $? "$finish"

    # Seeded sampling: same seed, same tokens as one process.
    single_s=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
               --max-tokens 24 --ignore-eos --temperature 0.9 --top-p 0.95 --top-k 50 \
               --seed 1234 2>/dev/null)
    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":24,\"temperature\":0.9,\"top_p\":0.95,\"top_k\":50,\"seed\":1234,\"ignore_eos\":true}"
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/seeded.json")
    got=$(json_get "$CLUSTER_TMP/seeded.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$single_s" ] && [ "$got" != "$(echo "$golden" | cut -d, -f1-24)" ]
    check "$fx: seeded sampling through the cluster = tandem-generate with the same seed" $? \
        "HTTP $code" "cluster: $got" "single:  $single_s"

    # The RPC API: streamed chunks concatenate to the same greedy tokens.
    got=$(timeout 60 "$BIN/tandem-cli" generate --rpc "$RPC" --model "$fx" --prompt-ids "$prompt" \
          --max-tokens 32 --ignore-eos --stream 2>"$CLUSTER_TMP/cli.err")
    rc=$?
    [ "$rc" = 0 ] && [ "$got" = "$golden" ] && grep -q "finish_reason length" "$CLUSTER_TMP/cli.err"
    check "$fx: tandem-cli generate --stream over RPC = HF golden" $? "exit $rc" "$got" \
        "$(cat "$CLUSTER_TMP/cli.err")"

    # A stop token id chosen from the golden sequence ends it right there
    # (the stop token is returned, as tandem-generate returns EOS).
    stop_at=$(echo "$golden" | cut -d, -f5)
    want=$(echo "$golden" | tr ',' '\n' | awk -v s="$stop_at" '{print; if ($1 == s) exit}' | paste -sd,)
    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"stop_token_ids\":[$stop_at],\"ignore_eos\":true}"
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/stop.json")
    got=$(json_get "$CLUSTER_TMP/stop.json" '",".join(map(str, j["choices"][0]["token_ids"])) + " " + j["choices"][0]["finish_reason"]' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$want stop" ]
    check "$fx: a stop token id ends the request with finish_reason stop" $? "$got" "want $want stop"

    # RPC cancel: the client cancels after 3 tokens; the request ends as cancelled.
    timeout 60 "$BIN/tandem-cli" generate --rpc "$RPC" --model "$fx" --prompt-ids "$prompt" \
        --max-tokens 1200 --ignore-eos --stream --cancel-after 3 >"$CLUSTER_TMP/cancel.out" \
        2>"$CLUSTER_TMP/cancel.err"
    rc=$?
    n_got=$(tr ',' '\n' <"$CLUSTER_TMP/cancel.out" | grep -c .)
    [ "$rc" = 1 ] && grep -q "finish_reason cancelled" "$CLUSTER_TMP/cancel.err" && [ "$n_got" -lt 1200 ]
    check "$fx: RPC cancel ends a streaming request early" $? "exit $rc, $n_got tokens" \
        "$(cat "$CLUSTER_TMP/cancel.err")"

    status=$(timeout 30 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1)
    echo "$status" | grep -q "prefiller .*model=$fx" && echo "$status" | grep -q "decoder .*model=$fx"
    check "$fx: tandem-cli status lists both workers" $? "$status"
    cluster_stop 1
done

# Same-host workers with --kv-same-host shm: the KV goes over UCX shared
# memory (the prefiller's connection line names the transports) although
# UCX_TLS also offers tcp, and the tokens are still the golden ones (the
# pages are resharded 16 -> 5 on the way, as above).
dir=tests/fixtures/gpt_oss_tiny
prompt=$(golden_ids "$dir" prompt_ids)
golden=$(golden_ids "$dir" gen_ids)
if UCX_TLS=tcp,sm,self PREFILLER_FLAGS="--page-size 16 --kv-same-host shm"     DECODER_FLAGS="--page-size 5 --kv-pages 256 --kv-same-host shm" cluster_start "$dir"; then
    body="{\"model\":\"gpt_oss_tiny\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/shm.json")
    got=$(json_get "$CLUSTER_TMP/shm.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    line=$(grep "connection ready" "$CLUSTER_TMP/prefiller.log" | tail -1)
    [ "$code" = 200 ] && [ "$got" = "$golden" ] && echo "$line" | grep -q "sysv" &&
        echo "$line" | grep -q "same host: shared memory"
    check "gpt_oss_tiny: --kv-same-host shm moves the KV over shared memory, tokens = HF golden" $? \
        "HTTP $code" "cluster: $got" "golden:  $golden" "prefiller: $line"
    cluster_stop 1
fi
cluster_finish
