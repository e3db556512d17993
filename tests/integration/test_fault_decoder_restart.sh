#!/usr/bin/env bash
# The only decoder SIGKILLed under 200 concurrent streams; the local scaler
# starts a replacement under the same worker id (decode-0) within about a
# second, before the old one's heartbeats could lapse (--worker-timeout-ms is
# 20 s here, longer than the streams' deadline, so only the incarnation rule
# can save them). The replacement's registration carries a new incarnation:
# the router drops the old process's requests at once and places them again
# (a fresh prefill of prompt + streamed tokens) on the new decoder; requests
# sent while no decoder is reachable wait in the router queue
# (--queue-timeout-ms, on by default) instead of failing. Every stream must
# complete with tandem-generate's greedy tokens, none may hang (each client
# has a 40 s deadline), and afterwards 20 new streams complete and every KV
# page of the decoder is free. (docs/RELIABILITY.md, "Worker incarnations")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/failover_lib.sh

fo_references 64 || cluster_finish
fo_router_scaler 1 1 --worker-timeout-ms 20000 --scaler-local-decode-args "--max-batch 16" || cluster_finish
old=$(scaler_pid decode 0)

fo_streams load 200 30
check "200 streams are running on decode-0 (pid ${old:-?})" $? "$(cat "$CLUSTER_TMP/load.out")"
fo_wait_decoding "http://127.0.0.1:$FO_DPORT"
check "decode-0 is decoding a batch of those streams" $? "$(curl -s "http://127.0.0.1:$FO_DPORT/metrics" | grep batch_size)"
kill -KILL "$old"
# The scaler notices the exit and starts decode-0 again.
new=$(scaler_restarted decode 0 "$old")
check "the local scaler restarts decode-0 under the same id (pid $old -> ${new:-?})" $? \
    "$(grep 'local scaler' "$CLUSTER_TMP/router.log" | tail -3)"
fo_check_streams load 200 "decoder SIGKILL, restarted under the same id"

grep -q "decoder decode-0 restarted (incarnation [0-9a-f]* replaced by [0-9a-f]*)" "$CLUSTER_TMP/router.log"
check "the router saw the new incarnation and dropped the old process's requests" $? \
    "$(grep -E 'decode-0' "$CLUSTER_TMP/router.log" | tail -5)"
k=$(grep -cE "restarted .*placing it again as .* after [1-9][0-9]* tokens" "$CLUSTER_TMP/router.log")
[ "$k" -gt 0 ]
check "streams cut mid-output were placed again and resumed ($k)" $? \
    "$(grep 'placing it again' "$CLUSTER_TMP/router.log" | tail -3)"
! grep -q "missed heartbeats" "$CLUSTER_TMP/router.log"
check "no request waited for the old process's heartbeats to lapse" $? \
    "$(grep 'missed heartbeats' "$CLUSTER_TMP/router.log" | head -3)"
! grep -qE "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log"
check "the router failed no request" $? "$(grep -E "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log" | head -3)"

fo_after "http://127.0.0.1:$FO_DPORT"
cluster_finish
