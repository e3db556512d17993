#!/usr/bin/env bash
# Router SIGTERM during 100 concurrent streams (a rolling update of the
# router): new requests get 503 with Retry-After at once while every stream
# in flight finishes with tandem-generate's greedy tokens (none cut, none
# hanging: 40 s deadline per stream); the router then exits 0 on its own,
# within its --drain-timeout-ms. A new router on the same worker port serves
# at once: the workers register with it, 20 new streams complete, and the
# decoder holds no KV page. (docs/RELIABILITY.md, "Router shutdown")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/failover_lib.sh

fo_references 64 || cluster_finish
WPORT=$(fo_free_port)
DPORT=$(fo_free_port)
start_router() { # start_router NAME: a router on the fixed worker port
    rm -f "$CLUSTER_TMP/ports"
    "$BIN/tandem-router" --http-port 0 --worker-port "$WPORT" --rpc-port 0 \
        --port-file "$CLUSTER_TMP/ports" --heartbeat-ms 200 --worker-timeout-ms 3000 \
        --drain-timeout-ms 30000 >>"$CLUSTER_TMP/$1.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=("$1")
    for _ in $(seq 1 100); do
        [ -s "$CLUSTER_TMP/ports" ] && break
        sleep 0.05
    done
    URL=http://127.0.0.1:$(port_of http_port)
}
start_router router1
WORKER_EP=tcp://127.0.0.1:$WPORT
CLUSTER_MODEL=$FO_DIR
start_worker prefiller p1
start_worker decoder d1 --metrics-port "$DPORT"
wait_health 1 1 300
check "a router, a prefiller and a decoder are up" $? "$(curl -s "$URL/healthz")"

fo_streams load 100 30
check "100 streams are running" $? "$(cat "$CLUSTER_TMP/load.out")"
r1=$(pid_of router1)
kill -TERM "$r1"
# A request sent now is refused with 503 and Retry-After (the first ones
# may still have been taken before the signal was handled: they finish).
code="" hdr=""
for _ in $(seq 1 50); do
    code=$(curl -s -D "$CLUSTER_TMP/h503" -o "$CLUSTER_TMP/b503" -w '%{http_code}' --max-time 10 \
        -H 'Content-Type: application/json' -d "$(greedy_req "$FO_FX" 1,2,3 4)" "$URL/v1/completions")
    [ "$code" = 503 ] && break
    sleep 0.05
done
grep -qi '^Retry-After: 1' "$CLUSTER_TMP/h503" && grep -q '"code":"no_capacity"' "$CLUSTER_TMP/b503" &&
    grep -q 'shutting down' "$CLUSTER_TMP/b503"
check "while draining, a new request gets 503 no_capacity with Retry-After" $? \
    "HTTP $code $(cat "$CLUSTER_TMP/b503" 2>/dev/null)"
fo_check_streams load 100 "router SIGTERM"
n=$(sed -n 's/.*router: draining: \([0-9]*\) requests in flight.*/\1/p' "$CLUSTER_TMP/router1.log")
[ "${n:-0}" -gt 0 ]
check "the signal came while ${n:-?} requests were in flight" $? "$(grep draining "$CLUSTER_TMP/router1.log")"

for _ in $(seq 1 150); do
    kill -0 "$r1" 2>/dev/null || break
    sleep 0.1
done
wait "$r1"
rc=$?
forget router1
[ "$rc" = 0 ] && grep -q "drained: every request in flight finished" "$CLUSTER_TMP/router1.log"
check "the router exits 0 once every stream finished" $? "exit $rc" \
    "$(tail -5 "$CLUSTER_TMP/router1.log")"

start_router router2
wait_health 1 1 100
check "a new router on the same port gets the workers back" $? "$(curl -s "$URL/healthz")"
fo_after "http://127.0.0.1:$DPORT"
cluster_finish
