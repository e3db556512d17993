#!/usr/bin/env bash
# A KV transfer that times out: the request's decoder d1 is frozen
# (SIGSTOP) after it reserved the KV pages and before the prefiller pushes
# into them, so the push is never acknowledged. The prefiller gives up after
# its --transfer-timeout-ms and reports the failure; the router releases
# d1's reservation and places the request again; the request completes with
# tandem-generate's tokens, and once d1 runs again it frees the pages of the
# failed transfer (no leak). (docs/RELIABILITY.md)
#
# The order is made deterministic by freezing the prefiller too: it holds
# the assignment (so d1 has answered KvReady) until d1 is frozen.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
# A long worker timeout: the frozen workers must not be dropped, the
# transfer timeout is what this test exercises.
PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="--transfer-timeout-ms 500" \
    cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 20000 || cluster_finish
name_workers p1 d1
prompt=$(golden_ids "$dir" prompt_ids)

# A first request goes through d1, so this tests the steady state (a
# decoder that freezes during the first connection or transfer is
# test_fault_wireup_freeze.sh).
code=$(post /v1/completions "$(greedy_req "$fx" "$prompt" 4)" "$CLUSTER_TMP/warm.json")
[ "$code" = 200 ]
check "a first request through d1 connects the prefiller to it" $? "HTTP $code $(cat "$CLUSTER_TMP/warm.json")"

kill -STOP "$(pid_of p1)"
post_bg 120 "$(greedy_req "$fx" "$prompt" 16)" "$CLUSTER_TMP/r.json" "$CLUSTER_TMP/code"
cpid=$!
st=$(wait_in_flight p1)
check "d1 reserved the pages and the prefill is assigned" $? "$st"
start_worker decoder d2
wait_health 1 2
check "a second decoder registers" $? "$(curl -s "$URL/healthz")"
kill -STOP "$(pid_of d1)"
kill -CONT "$(pid_of p1)"

for _ in $(seq 1 200); do
    grep -q 'placing it again' "$CLUSTER_TMP/router.log" && break
    sleep 0.05
done
grep -q 'KV transfer to d1 failed' "$CLUSTER_TMP/router.log" &&
    grep -q 'placing it again' "$CLUSTER_TMP/router.log"
check "the push times out and the router places the request again" $? \
    "$(grep -E 'placing|failed|dropping' "$CLUSTER_TMP/router.log" | tail -4)" "$(tail -3 "$CLUSTER_TMP/p1.log")"
kill -CONT "$(pid_of d1)"

wait "$cpid"
got=$(json_get "$CLUSTER_TMP/r.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$(cat "$CLUSTER_TMP/code")" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-16)" ]
check "the request completes with the golden tokens" $? "HTTP $(cat "$CLUSTER_TMP/code") $got"
free_ok=""
for _ in $(seq 1 100); do
    u1=$(metric 'tandem_kv_cache_blocks_used{pool="decode",worker="d1"}')
    u2=$(metric 'tandem_kv_cache_blocks_used{pool="decode",worker="d2"}')
    [ "$u1" = 0 ] && [ "$u2" = 0 ] && { free_ok=1; break; }
    sleep 0.1
done
[ -n "$free_ok" ]
check "no KV pages stay held on either decoder (the failed transfer's are freed)" $? "d1 $u1 d2 $u2"
cluster_finish
