#!/usr/bin/env bash
# One of two decoders SIGKILLed under 200 concurrent streams (the local
# scaler keeps two: it starts decode-0 again under the same id). Requests on
# the dead decoder are placed again, on decode-1 or on the replacement, and
# continue after the tokens they streamed; a request whose assignment cannot
# be sent (the dead decoder's connection is gone) goes to the other decoder
# instead of failing with "unreachable". Every stream completes with
# tandem-generate's greedy tokens, none hangs (40 s deadline per stream), and
# afterwards 20 new streams complete and both decoders hold no KV page.
# (docs/RELIABILITY.md, "Worker failures")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/failover_lib.sh

fo_references 64 || cluster_finish
fo_router_scaler 1 2 --worker-timeout-ms 3000 --scaler-local-decode-args "--max-batch 16" || cluster_finish
old=$(scaler_pid decode 0)

fo_streams load 200 30
check "200 streams are running on two decoders" $? "$(cat "$CLUSTER_TMP/load.out")"
fo_wait_decoding "http://127.0.0.1:$FO_DPORT"
check "decode-0 is decoding a batch of those streams" $? "$(curl -s "http://127.0.0.1:$FO_DPORT/metrics" | grep batch_size)"
kill -KILL "$old"
fo_check_streams load 200 "one of two decoders SIGKILLed"

# How many were cut mid-output varies with the moment of the kill (the
# batch may be between waves); test_fault_decoder_restart.sh and
# test_fault_decoder_kill.sh assert resumption mid-output.
echo "# $(grep -cE "placing it again as .* after [1-9][0-9]* tokens" "$CLUSTER_TMP/router.log") streams were cut mid-output and resumed"
! grep -qE "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log"
check "the router failed no request" $? \
    "$(grep -E "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log" | head -3)"
wait_health 1 2 100
check "the scaler's replacement decode-0 registers again" $? "$(curl -s "$URL/healthz")"

fo_after "http://127.0.0.1:$FO_DPORT" "http://127.0.0.1:$((FO_DPORT + 1))"
cluster_finish
