#!/usr/bin/env bash
# The only prefiller SIGKILLed under 200 concurrent streams; the local scaler
# starts a replacement under the same id (prefill-0) before the old one's
# heartbeats could lapse (--worker-timeout-ms 20 s, longer than the streams'
# deadline). Its new incarnation tells the router the old process is gone:
# every prefill queued or running there is placed again at once (the
# decoder told to release the pages reserved for it), on the new process.
# Every stream completes with tandem-generate's greedy tokens, none hangs
# (40 s deadline each), and afterwards 20 new streams complete and every KV
# page of the decoder is free. (docs/RELIABILITY.md, "Worker incarnations")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/failover_lib.sh

fo_references 64 || cluster_finish
# Room for all 200 in the decoder's batch, so the prefiller gets all 200
# prompts at once and has most still queued when it dies.
fo_router_scaler 1 1 --worker-timeout-ms 20000 --scaler-local-decode-args "--max-batch 256" ||
    cluster_finish
old=$(scaler_pid prefill 0)

fo_streams load 200 1
check "200 streams are running through prefill-0 (pid ${old:-?})" $? "$(cat "$CLUSTER_TMP/load.out")"
kill -KILL "$old"
new=$(scaler_restarted prefill 0 "$old")
check "the local scaler restarts prefill-0 under the same id (pid $old -> ${new:-?})" $? \
    "$(grep 'local scaler' "$CLUSTER_TMP/router.log" | tail -3)"
fo_check_streams load 200 "prefiller SIGKILL, restarted under the same id"

k=$(grep -cE "prefiller prefill-0 restarted .*placing it again as" "$CLUSTER_TMP/router.log")
grep -q "prefiller prefill-0 restarted (incarnation [0-9a-f]* replaced by [0-9a-f]*)" "$CLUSTER_TMP/router.log"
check "the router saw the new incarnation and placed the old process's prefills again ($k)" $? \
    "$(grep -E 'prefill-0' "$CLUSTER_TMP/router.log" | tail -5)"
! grep -q "missed heartbeats" "$CLUSTER_TMP/router.log"
check "no request waited for the old process's heartbeats to lapse" $? \
    "$(grep 'missed heartbeats' "$CLUSTER_TMP/router.log" | head -3)"
! grep -qE "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log"
check "the router failed no request" $? \
    "$(grep -E "router: request [0-9a-f]+ failed" "$CLUSTER_TMP/router.log" | head -3)"

fo_after "http://127.0.0.1:$FO_DPORT"
cluster_finish
