#!/usr/bin/env bash
# The KV cache dtype through the real cluster (docs/PERF.md "KV cache
# dtype"): a bf16 prefiller and a bf16 decoder (different page sizes, so
# the transfer re-pages) serve the same greedy tokens as tandem-generate
# with a bf16 cache, which on the Qwen3 fixture are HF's golden tokens
# (GPT-OSS's tiny fixture has top-2 margins small enough for bf16 to flip
# its 23rd token: test_engine_kv_dtype bounds its logits instead), and the
# TransferEngine moves exactly the prompt's bf16 bytes (half of f32's); a
# decoder with an f32 cache joining that bf16 model is refused at
# registration, with the reason in the router's log and the worker's, and
# is never paired. Then an FP8 pair: the same tokens as tandem-generate
# --kv-dtype fp8, and the push carries each row's scale with its codes.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
dir=tests/fixtures/$fx
prompt=$(golden_ids "$dir" prompt_ids)
n_prompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
golden=$(golden_ids "$dir" gen_ids)

single=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
         --max-tokens 32 --ignore-eos --kv-dtype bf16 2>"$CLUSTER_TMP/generate.err")
[ "$single" = "$golden" ] && grep -q "bf16 KV cache" "$CLUSTER_TMP/generate.err"
check "tandem-generate --kv-dtype bf16 (a bf16 cache) gives HF's golden tokens" $? "$single" \
    "$golden" "$(cat "$CLUSTER_TMP/generate.err")"

"$BIN/tandem-generate" --model "$dir" --prompt-ids 1 --max-tokens 1 --kv-dtype fp16 \
    >/dev/null 2>"$CLUSTER_TMP/bad.err"
rc=$?
[ "$rc" = 2 ] && grep -q "kv-dtype must be auto, f32, bf16 or fp8" "$CLUSTER_TMP/bad.err"
check "an unknown --kv-dtype is a usage error" $? "exit $rc" "$(cat "$CLUSTER_TMP/bad.err")"

for prog in tandem-prefiller tandem-decoder tandem-bench; do
    out=$("$BIN/$prog" --model "$dir" --kv-dtype e5m2 2>&1 >/dev/null)
    rc=$?
    [ "$rc" = 2 ] && echo "$out" | grep -q "kv-dtype must be auto, f32, bf16 or fp8" &&
        "$BIN/$prog" --help | grep -q -- "--kv-dtype"
    check "$prog: --kv-dtype in --help, an unknown dtype refused (exit 2)" $? "exit $rc" "$out"
done

PREFILLER_ID=pre-bf16 DECODER_ID=dec-bf16 \
PREFILLER_FLAGS="--kv-dtype bf16 --page-size 16" \
DECODER_FLAGS="--kv-dtype bf16 --page-size 5 --kv-pages 256" \
    cluster_start "$dir" || { cluster_finish; exit 1; }

grep -q "bf16 KV cache" "$CLUSTER_TMP/prefiller.log" && grep -q "bf16 KV cache" "$CLUSTER_TMP/decoder.log"
check "both workers hold a bf16 KV cache" $? "$(grep "KV cache" "$CLUSTER_TMP"/*.log)"

body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
code=$(post /v1/completions "$body" "$CLUSTER_TMP/greedy.json")
got=$(json_get "$CLUSTER_TMP/greedy.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$single" ] && [ "$got" = "$golden" ]
check "a bf16 pair serves tandem-generate --kv-dtype bf16's greedy tokens = HF golden" $? \
    "HTTP $code" "cluster: $got" "single:  $single"

# One push of the prompt's K and V for every layer: 2 x layers x tokens x
# KV heads x head_dim x 2 bytes (f32 would be twice that).
want=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]+"/config.json")); n=int(sys.argv[2]); print(2*c["num_hidden_layers"]*n*c["num_key_value_heads"]*c["head_dim"]*2)' "$dir" "$n_prompt")
sent=""
for _ in $(seq 1 50); do   # the byte count arrives with the next heartbeat
    sent=$(curl -s "$URL/metrics" | awk '/^tandem_kv_transfer_bytes_total\{/ && /worker="pre-bf16"/ && /direction="send"/ {print $2}')
    [ "$sent" = "$want" ] && break
    sleep 0.1
done
[ "$sent" = "$want" ]
check "the transfer moved the prompt's bf16 bytes ($want)" $? "sent '$sent', want $want" \
    "$(curl -s "$URL/metrics" | grep tandem_kv_transfer_bytes_total)"

# An f32 decoder for the same model: refused, never paired.
start_worker decoder dec-f32 --kv-dtype f32 --page-size 16 --kv-pages 64
refused=1
for _ in $(seq 1 100); do
    if grep -q "registration refused: worker dec-f32: KV cache mismatch" "$CLUSTER_TMP/router.log" &&
       grep -q "KV cache mismatch" "$CLUSTER_TMP/dec-f32.log"; then
        refused=0
        break
    fi
    sleep 0.1
done
check "an f32 decoder next to bf16 workers is refused at registration, with the reason logged on both sides" \
    $refused "$(grep -i "mismatch\|refused" "$CLUSTER_TMP/router.log" | tail -2)" \
    "$(tail -3 "$CLUSTER_TMP/dec-f32.log")"
grep "registration refused: worker dec-f32" "$CLUSTER_TMP/router.log" | head -1 | grep -q "f32 (1)" &&
    grep "registration refused: worker dec-f32" "$CLUSTER_TMP/router.log" | head -1 | grep -q "bf16 (2)"
check "the refusal names both KV dtypes" $? "$(grep "dec-f32" "$CLUSTER_TMP/router.log" | head -1)"

status=$(timeout 30 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1)
! echo "$status" | grep -q "dec-f32" && echo "$status" | grep -q "dec-bf16"
check "the refused decoder is not in the cluster" $? "$status"

# Requests keep going to the bf16 pair only.
for i in 1 2 3; do
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/again$i.json")
    got=$(json_get "$CLUSTER_TMP/again$i.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$single" ] || break
done
[ "$code" = 200 ] && [ "$got" = "$single" ]
check "with the f32 decoder refused, requests still get the bf16 tokens" $? "HTTP $code" "$got"

cluster_stop 1

# An FP8 pair (e4m3 rows with their scale): the cluster gives what one
# process gives with the same cache, and each pushed row is head_dim codes
# plus its 4-byte scale.
single8=$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
          --max-tokens 32 --ignore-eos --kv-dtype fp8 2>"$CLUSTER_TMP/generate8.err")
[ -n "$single8" ] && grep -q "fp8 KV cache" "$CLUSTER_TMP/generate8.err"
check "tandem-generate --kv-dtype fp8 runs with an fp8 cache" $? "$single8" \
    "$(cat "$CLUSTER_TMP/generate8.err")"
PREFILLER_ID=pre-fp8 DECODER_ID=dec-fp8 \
PREFILLER_FLAGS="--kv-dtype fp8 --page-size 16" \
DECODER_FLAGS="--kv-dtype fp8 --page-size 5 --kv-pages 256" \
    cluster_start "$dir" || { cluster_finish; exit 1; }
code=$(post /v1/completions "$body" "$CLUSTER_TMP/fp8.json")
got=$(json_get "$CLUSTER_TMP/fp8.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$single8" ]
check "an fp8 pair serves tandem-generate --kv-dtype fp8's greedy tokens" $? "HTTP $code" \
    "cluster: $got" "single:  $single8"
want8=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]+"/config.json")); n=int(sys.argv[2]); print(2*c["num_hidden_layers"]*n*c["num_key_value_heads"]*(c["head_dim"]+4))' "$dir" "$n_prompt")
sent=""
for _ in $(seq 1 50); do
    sent=$(curl -s "$URL/metrics" | awk '/^tandem_kv_transfer_bytes_total\{/ && /worker="pre-fp8"/ && /direction="send"/ {print $2}')
    [ "$sent" = "$want8" ] && break
    sleep 0.1
done
[ "$sent" = "$want8" ]
check "the fp8 transfer moved each prompt row's codes and scale ($want8 bytes)" $? \
    "sent '$sent', want $want8"
cluster_stop 1
cluster_finish
