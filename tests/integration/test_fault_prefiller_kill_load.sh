#!/usr/bin/env bash
# A prefiller killed (SIGKILL) under 200 concurrent streams, with a second
# prefiller to take its work. Issue 14 saw streams that never ended and a
# decoder that kept 798 of its 1024 KV pages with nothing in flight.
#
# The router drops p1 after its missed heartbeats (2 s here) and places its
# requests again on p2; the decoder's KV leases for p1's work end (the
# router's release, the failed transfers, or the lease bound), so afterwards
# every page is free. Asserted: none of the 200 streams never ends and none
# fails, each equals tandem-generate for its prompt; then 20 new streams
# complete and every KV page is free within the bound, and the decoder is
# still the process it was (a prefiller that dies mid-push must not take
# it down: over tcp the KV goes as data messages, not UCX's emulated puts,
# whose receiver aborted in 3 of 20 runs before; docs/RELIABILITY.md).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/fault_load_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
DFLAGS="--kv-pages 1024 --max-batch 128 --orphan-release-ms 4000"
PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="--transfer-timeout-ms 3000" DECODER_FLAGS="$DFLAGS" \
    cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 2000 --queue-timeout-ms 30000 \
    --max-active-requests 400 || cluster_finish
name_workers p1 d1
dpid=$(pid_of d1)
start_worker prefiller p2 --transfer-timeout-ms 3000
wait_health 2 1
check "two prefillers and one decoder registered" $? "$(curl -s "$URL/healthz")"
fault_prompts "$dir" 4 48

fault_load load 200 50
lpid=$!
# Kill p1 once it has prefilled part of the load (and has more queued).
fault_wait_metric 'tandem_prefill_input_tokens_total{pool="prefill",worker="p1"}' 300
kill -KILL "$(pid_of p1)"
forget p1
wait_health 1 1 50
check "the router drops the killed p1" $? "$(curl -s "$URL/healthz")"
wait "$lpid"
fault_survived "$dpid" "$CLUSTER_TMP/d1.log" "the decoder survives the prefiller's death"
fault_check_load load 200

fault_load after 20 30
wait $!
fault_check_load after 20
fault_kv_free 10 d1
cluster_finish
