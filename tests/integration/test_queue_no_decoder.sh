#!/usr/bin/env bash
# No decoder registered yet (a replacement still starting): requests for the
# model are admitted and wait in the router queue (--queue-timeout-ms, on by
# default: 30 s) instead of getting 503 at once; when a decoder registers
# they are placed and complete with tandem-generate's greedy tokens (40 s
# deadline per stream). Afterwards 20 new streams complete and the decoder
# holds no KV page. (docs/RELIABILITY.md, "Worker failures") Before any
# worker registers, a request is told 503 with Retry-After.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/failover_lib.sh

fo_references 64 || cluster_finish
rm -f "$CLUSTER_TMP/ports"
"$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --port-file "$CLUSTER_TMP/ports" \
    --heartbeat-ms 200 --worker-timeout-ms 3000 >>"$CLUSTER_TMP/router.log" 2>&1 &
CLUSTER_PIDS+=($!)
CLUSTER_NAMES+=(router)
for _ in $(seq 1 100); do
    [ -s "$CLUSTER_TMP/ports" ] && break
    sleep 0.05
done
URL=http://127.0.0.1:$(port_of http_port)
WORKER_EP=tcp://127.0.0.1:$(port_of worker_port)
CLUSTER_MODEL=$FO_DIR
# before any worker registers: whether the model exists is not known yet,
# so 503 no_capacity with Retry-After (clients retry it), not a 400
# model_not_found (they would not)
resp=$(curl -s -i --max-time 10 -H 'Content-Type: application/json' \
    -d '{"model":"m","prompt":[1,2,3],"max_tokens":2}' "$URL/v1/completions" | tr -d '\r')
echo "$resp" | head -1 | grep -q ' 503' && echo "$resp" | grep -qi '^retry-after: 1$' &&
    echo "$resp" | tail -1 | grep -q '"code":"no_capacity"'
check "no worker registered yet: 503 no_capacity with Retry-After" $? "$resp"
start_worker prefiller p1
wait_health 1 0 300
check "a router and a prefiller, no decoder" $? "$(curl -s "$URL/healthz")"

fo_streams load 50
held=""
for _ in $(seq 1 100); do
    held=$(metric 'tandem_router_queue_depth{stage="decode"}')
    [ "$held" = 50 ] && break
    sleep 0.1
done
[ "$held" = 50 ]
check "the 50 requests are admitted and held for a decoder (queue depth $held)" $? \
    "$(cat "$CLUSTER_TMP/load.out")" "$(tail -3 "$CLUSTER_TMP/router.log")"
DPORT=$(fo_free_port)
start_worker decoder d1 --metrics-port "$DPORT"
fo_check_streams load 50 "a decoder registers while requests wait"
fo_after "http://127.0.0.1:$DPORT"
cluster_finish
