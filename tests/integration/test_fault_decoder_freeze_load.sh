#!/usr/bin/env bash
# A decoder frozen (SIGSTOP) under 200 concurrent streams, then resumed
# (SIGCONT): a GC pause, a stuck driver, a live migration. Issue 14 saw a
# 30 s freeze leave most streams never ending, and every request after the
# SIGCONT too ("cannot acknowledge transfer ... connection failed").
#
# The freeze here is shorter than 30 s but runs the same failure paths: it
# outlasts the router's worker timeout (2 s: d1 is dropped and its requests
# are placed again on d2), the prefiller's transfer timeout (3 s: pushes
# into d1 fail and its endpoint is given up) and UCX's keepalive (1 s
# interval, set below: UCX declares the endpoint to the frozen d1 dead and
# the prefiller closes it, so the resumed d1 finds its own endpoint to the
# prefiller failed, as after 30 s with the default 20 s keepalive).
#
# Asserted: none of the 200 streams never ends and none fails (d2 takes
# d1's work), each equals tandem-generate for its prompt; after the SIGCONT
# d1 registers again and the TransferEngine connections recover (new
# endpoints, acks on them), so 20 new streams complete, d1 serving some of
# them; afterwards every KV page of both decoders is free.
# (docs/RELIABILITY.md, "Frozen and restarted peers")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/fault_load_lib.sh

export UCX_KEEPALIVE_INTERVAL=1s
fx=gpt_oss_tiny
dir=tests/fixtures/$fx
FREEZE_S=${FREEZE_S:-7}
DFLAGS="--kv-pages 1024 --max-batch 128 --orphan-release-ms 4000"
PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="--transfer-timeout-ms 3000" DECODER_FLAGS="$DFLAGS" \
    cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 2000 --queue-timeout-ms 30000 \
    --max-active-requests 400 || cluster_finish
name_workers p1 d1
# shellcheck disable=SC2086
start_worker decoder d2 $DFLAGS
wait_health 1 2
check "one prefiller and two decoders registered" $? "$(curl -s "$URL/healthz")"
fault_prompts "$dir" 4 48

fault_load load 200 50
lpid=$!
# Freeze d1 once it decodes part of the load.
fault_wait_metric 'tandem_decode_batch_size{pool="decode",worker="d1"}' 4
kill -STOP "$(pid_of d1)"
t0=$(date +%s.%N)
wait_health 1 1 $((FREEZE_S * 10))
check "the router drops the frozen d1" $? "$(curl -s "$URL/healthz")"
sleep "$(python3 -c "import time; print(max(0, $FREEZE_S - (time.time() - $t0)))")"
kill -CONT "$(pid_of d1)"
wait "$lpid"
fault_check_load load 200

wait_health 1 2 100
check "d1 registers again after SIGCONT" $? "$(curl -s "$URL/healthz")"
before=$(metric 'tandem_decode_output_tokens_total{pool="decode",worker="d1"}')
fault_load after 20 30
wait $!
fault_check_load after 20
after=$(metric 'tandem_decode_output_tokens_total{pool="decode",worker="d1"}')
[ "${after:-0}" -gt "${before:-0}" ] 2>/dev/null
check "the resumed d1 serves new requests (KV pushed into it and acknowledged)" $? \
    "d1 output tokens $before -> $after" "$(grep -iE 'ack|connect|endpoint' "$CLUSTER_TMP/d1.log" | tail -5)"
fault_kv_free 10 d1 d2
cluster_finish
