#!/usr/bin/env bash
# Workers on one host with --kv-same-host shm move the KV over UCX shared
# memory, whose endpoints have no UCX failure handling: a dead peer is never
# reported by UCX. What bounds a push into a dead peer then is the router
# dropping that worker (--worker-timeout-ms, 2 s here) and, at the latest,
# the push's own --transfer-timeout-ms. (docs/RELIABILITY.md, "Same-host
# peers over shared memory")
#  1. One of two decoders SIGKILLed under 200 streams. The prefiller's
#     transfer timeout is 60 s, longer than each stream's 40 s deadline, so
#     only the router's drop (TransferPeer removed -> te_peer_fail) can end
#     a push into the dead decoder in time: every stream completes with
#     tandem-generate's tokens, the prefiller is still the same process, and
#     the surviving decoder's pages are all free afterwards.
#  2. One of two prefillers (p3, p4) SIGKILLed mid-push under 200 streams: the
#     decoder survives (same process, no UCX abort), every stream completes
#     exactly, and every page is free afterwards.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/fault_load_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
export UCX_TLS=tcp,sm,self
SHM="--kv-same-host shm"
ROUTER_FLAGS="--heartbeat-ms 100 --worker-timeout-ms 2000 --queue-timeout-ms 30000 --max-active-requests 400"
DFLAGS="$SHM --kv-pages 1024 --max-batch 64 --orphan-release-ms 4000"
fault_prompts "$dir" 4 48

# ---- 1. a decoder dies -------------------------------------------------
PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="$SHM --transfer-timeout-ms 60000" \
    DECODER_FLAGS="$DFLAGS" cluster_start "$dir" $ROUTER_FLAGS || cluster_finish
name_workers p1 d1
# shellcheck disable=SC2086
start_worker decoder d2 $DFLAGS
wait_health 1 2
check "one prefiller and two decoders registered" $? "$(curl -s "$URL/healthz")"
ppid_=$(pid_of p1)
for _ in $(seq 1 100); do
    [ "$(grep -c "connection ready (.*same host: shared memory)" "$CLUSTER_TMP/p1.log")" -ge 2 ] && break
    sleep 0.1
done
[ "$(grep -c "connection ready (.*same host: shared memory)" "$CLUSTER_TMP/p1.log")" -ge 2 ]
check "the prefiller reaches both decoders over shared memory" $? "$(grep "connection" "$CLUSTER_TMP/p1.log")"

fault_load load 200 40
lpid=$!
# Kill d1 once it holds some of the load's KV.
fault_wait_metric 'tandem_kv_cache_blocks_used{pool="decode",worker="d1"}' 20
# It stops answering first (a hung host, then killed), so that a push into
# it is surely running when it dies: the prefiller's pushes are sequential.
kill -STOP "$(pid_of d1)"
sleep 0.3
kill -KILL "$(pid_of d1)"
forget d1
wait_health 1 1 50
check "the router drops the killed d1" $? "$(curl -s "$URL/healthz")"
# The push blocked in the dead decoder ends when the router drops it (an
# error, or cancelled when the router's Cancel came first); the count
# reaches the router with the prefiller's next heartbeat.
ended=0
for _ in $(seq 1 50); do
    e=$(metric 'tandem_kv_transfers_total{pool="prefill",worker="p1",direction="send",outcome="error"}')
    c=$(metric 'tandem_kv_transfers_total{pool="prefill",worker="p1",direction="send",outcome="cancelled"}')
    ended=$((${e:-0} + ${c:-0}))
    [ "$ended" -ge 1 ] && break
    sleep 0.1
done
[ "$ended" -ge 1 ]
check "the push running into the dead decoder ended with the router's drop ($ended), not at its 60 s timeout" $? \
    "$(curl -s "$URL/metrics" | grep 'tandem_kv_transfers_total{pool="prefill"')"
wait "$lpid"
fault_survived "$ppid_" "$CLUSTER_TMP/p1.log" "the prefiller survives the decoder's death"
fault_check_load load 200
fault_load after 20 30
wait $!
fault_check_load after 20
fault_kv_free 10 d2
cluster_stop 1

# ---- 2. a prefiller dies -----------------------------------------------
PREFILLER_ID=p3 DECODER_ID=d3 PREFILLER_FLAGS="$SHM --transfer-timeout-ms 3000" \
    DECODER_FLAGS="$DFLAGS" cluster_start "$dir" $ROUTER_FLAGS || cluster_finish
name_workers p3 d3
start_worker prefiller p4 $SHM --transfer-timeout-ms 3000
wait_health 2 1
check "two prefillers and one decoder registered" $? "$(curl -s "$URL/healthz")"
dpid=$(pid_of d3)
fault_load load 200 40
lpid=$!
fault_wait_metric 'tandem_prefill_input_tokens_total{pool="prefill",worker="p3"}' 300
kill -KILL "$(pid_of p3)"
forget p3
wait_health 1 1 50
check "the router drops the killed p3" $? "$(curl -s "$URL/healthz")"
wait "$lpid"
fault_survived "$dpid" "$CLUSTER_TMP/d3.log" "the decoder survives the prefiller's death"
fault_check_load load 200
fault_load after 20 30
wait $!
fault_check_load after 20
fault_kv_free 10 d3
cluster_finish
