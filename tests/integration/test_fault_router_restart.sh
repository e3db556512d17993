#!/usr/bin/env bash
# The router restarted while the workers run: the router is killed
# (SIGKILL) mid-stream and a new one starts on the same ports. The client of
# the interrupted stream sees its connection end without [DONE] (the
# request died with the router; nothing pretends otherwise). The workers
# reconnect on their own, are told the new router does not know them, and
# register again, dropping the dead router's work: new requests complete
# with the golden tokens, and the decoder holds no KV pages afterwards.
# (docs/RELIABILITY.md)
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
RFLAGS=(--heartbeat-ms 100 --worker-timeout-ms 2000)
PREFILLER_ID=p1 DECODER_ID=d1 cluster_start "$dir" "${RFLAGS[@]}" || cluster_finish
name_workers p1 d1
prompt=$(golden_ids "$dir" prompt_ids)
golden=$(golden_ids "$dir" gen_ids | cut -d, -f1-8)
req=$(greedy_req "$fx" "$prompt" 8)

code=$(post /v1/completions "$req" "$CLUSTER_TMP/before.json")
got=$(json_get "$CLUSTER_TMP/before.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$golden" ]
check "the first router serves" $? "HTTP $code $got"

# A long stream in flight when the router dies.
stream_start 60 "$(greedy_req "$fx" "$prompt" 8000 stream)" "$CLUSTER_TMP/s.sse"
cpid=$!
kill -KILL "$(pid_of router)"
forget router
wait "$cpid"
crc=$?
[ "$crc" -ne 0 ] && ! grep -q '^data: \[DONE\]' "$CLUSTER_TMP/s.sse"
check "the interrupted stream's connection ends without [DONE] (curl exit $crc)" $? \
    "$(tail -c 300 "$CLUSTER_TMP/s.sse")"

# The same ports again.
http=$(port_of http_port)
wport=$(port_of worker_port)
rport=$(port_of rpc_port)
rm -f "$CLUSTER_TMP/ports"
"$BIN/tandem-router" --http-port "$http" --worker-port "$wport" --rpc-port "$rport" \
    --port-file "$CLUSTER_TMP/ports" "${RFLAGS[@]}" >>"$CLUSTER_TMP/router2.log" 2>&1 &
CLUSTER_PIDS+=($!)
CLUSTER_NAMES+=(router2)
for _ in $(seq 1 100); do
    [ -s "$CLUSTER_TMP/ports" ] && break
    sleep 0.05
done
[ -s "$CLUSTER_TMP/ports" ]
check "a new router starts on the same ports" $? "$(tail -3 "$CLUSTER_TMP/router2.log")"
wait_health 1 1
check "both workers register with the new router" $? "$(curl -s "$URL/healthz")"
grep -q 'registering again' "$CLUSTER_TMP/p1.log" && grep -q 'registering again' "$CLUSTER_TMP/d1.log"
check "the workers noticed the router did not know them" $? "$(tail -3 "$CLUSTER_TMP/d1.log")"

code=$(post /v1/completions "$req" "$CLUSTER_TMP/after.json")
got=$(json_get "$CLUSTER_TMP/after.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$golden" ]
check "the new router serves with the same workers" $? "HTTP $code $got"
grep -q 'registered again: dropped 1 sequence' "$CLUSTER_TMP/d1.log"
check "the decoder dropped the dead router's sequence" $? "$(grep -E 'again|dropped' "$CLUSTER_TMP/d1.log")"
used=$(wait_kv_free d1)
check "the decoder holds no KV pages" $? "blocks used: $used"
cluster_finish
