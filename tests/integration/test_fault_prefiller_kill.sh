#!/usr/bin/env bash
# A prefiller killed with queued work: four requests are assigned to
# prefiller p1 (frozen with SIGSTOP, so all of them wait in its queue), a
# second prefiller p2 joins, and p1 is killed. The router drops p1 after its
# missed heartbeats, tells the decoder to release the KV pages it reserved
# for p1's work, and places the requests again: every one completes on p2
# with tandem-generate's tokens, and the decoder ends up holding no pages.
# (docs/RELIABILITY.md)
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
PREFILLER_ID=p1 DECODER_ID=d1 cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 3000 ||
    cluster_finish
CLUSTER_NAMES[1]=p1
mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/p1.log"
prompt=$(golden_ids "$dir" prompt_ids)

kill -STOP "$(pid_of p1)"
M=4
pids=()
for i in $(seq 0 $((M - 1))); do
    p=$(echo "$prompt" | cut -d, -f$((i + 1))-$((i + 30)))
    echo "$p" >"$CLUSTER_TMP/p.$i"
    curl -s --max-time 120 -o "$CLUSTER_TMP/r.$i" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"model\":\"$fx\",\"prompt\":[$p],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}" \
        "$URL/v1/completions" >"$CLUSTER_TMP/code.$i" &
    pids+=($!)
done
queued=""
for _ in $(seq 1 100); do
    queued=$(timeout 10 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1 | grep -E '^ +prefiller +p1 ')
    echo "$queued" | grep -q "in_flight=$M " && break
    sleep 0.05
done
echo "$queued" | grep -q "in_flight=$M "
check "$M requests are queued at the frozen prefiller p1" $? "$queued"

start_worker prefiller p2
wait_health 2 1
check "a second prefiller registers" $? "$(curl -s "$URL/healthz")"
kill -KILL "$(pid_of p1)"
forget p1

for pid in "${pids[@]}"; do wait "$pid"; done
bad=()
for i in $(seq 0 $((M - 1))); do
    got=$(json_get "$CLUSTER_TMP/r.$i" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    want=$(timeout 60 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$(cat "$CLUSTER_TMP/p.$i")" \
           --max-tokens 12 --ignore-eos 2>/dev/null)
    [ "$(cat "$CLUSTER_TMP/code.$i")" = 200 ] && [ "$got" = "$want" ] ||
        bad+=("request $i: HTTP $(cat "$CLUSTER_TMP/code.$i") $(head -c 300 "$CLUSTER_TMP/r.$i")")
done
[ ${#bad[@]} -eq 0 ]
check "all $M requeued requests complete on p2 with the engine's tokens" $? "${bad[@]:-}"

n=$(grep -c 'prefiller p1 stopped responding; placing it again' "$CLUSTER_TMP/router.log")
[ "$n" = "$M" ]
check "the router placed each of p1's requests again" $? "$n requeue lines" \
    "$(grep -E 'placing|dropping|failed' "$CLUSTER_TMP/router.log" | tail -6)"
[ "$(metric 'tandem_prefill_input_tokens_total{pool="prefill",worker="p2"}')" -ge $((M * 30)) ] 2>/dev/null
check "p2 prefilled them" $? "$(curl -s "$URL/metrics" | grep prefill_input_tokens)"
used=$(wait_kv_free d1)
check "the decoder released every page reserved for p1's work" $? "blocks used: $used"
cluster_finish
