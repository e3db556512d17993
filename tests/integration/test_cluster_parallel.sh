#!/usr/bin/env bash
# The cluster with parallel workers: a TP=2 prefiller (attention heads split
# over two forked ranks, each pushing its KV heads to the decoder) and a
# DP=2 x EP=2 decoder group (two forked ranks, each a decoder of its own with
# the experts split between them, stepping together). Concurrent greedy
# requests must return HF's golden tokens for both fixture models; the
# groups shut down cleanly on SIGTERM; a rank killed with SIGKILL makes its
# group report the failure to the router and exit 1 instead of hanging.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

# wait_exit PID: waits (bounded) for the process to end; its status in ST
# ("hung" if it did not end).
wait_exit() {
    for _ in $(seq 1 300); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$1" 2>/dev/null; then
        ST=hung
        return
    fi
    wait "$1" 2>/dev/null
    ST=$?
}

for fx in gpt_oss_tiny qwen3_moe_tiny; do
    dir=tests/fixtures/$fx
    prompt=$(golden_ids "$dir" prompt_ids)
    golden=$(golden_ids "$dir" gen_ids)
    PREFILLER_FLAGS="--tp 2 --page-size 16" \
    DECODER_FLAGS="--dp 2 --ep 2 --page-size 5 --kv-pages 256" \
        cluster_start "$dir" || continue
    # both DP ranks register as decoders of their own
    for _ in $(seq 1 100); do
        [ "$(grep -c 'DP 2 EP 2' "$CLUSTER_TMP/decoder.log")" -ge 2 ] && break
        sleep 0.1
    done
    grep -q -- '-dp0: model' "$CLUSTER_TMP/decoder.log" && grep -q -- '-dp1: model' "$CLUSTER_TMP/decoder.log"
    check "$fx: decoder --dp 2 --ep 2 starts two ranks" $? "$(tail -5 "$CLUSTER_TMP/decoder.log")"
    grep -q 'TP rank 1 of 2 ready' "$CLUSTER_TMP/prefiller.log"
    check "$fx: prefiller --tp 2 starts two ranks" $? "$(tail -5 "$CLUSTER_TMP/prefiller.log")"

    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
    cpids=()
    for i in 1 2 3 4; do
        post /v1/completions "$body" "$CLUSTER_TMP/r$i.json" >"$CLUSTER_TMP/r$i.code" &
        cpids+=($!)
    done
    for p in "${cpids[@]}"; do wait "$p"; done
    bad=0
    for i in 1 2 3 4; do
        got=$(json_get "$CLUSTER_TMP/r$i.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
        if [ "$(cat "$CLUSTER_TMP/r$i.code")" != 200 ] || [ "$got" != "$golden" ]; then
            bad=1
            echo "# request $i: HTTP $(cat "$CLUSTER_TMP/r$i.code"): $got"
        fi
    done
    check "$fx: 4 concurrent greedy requests through TP=2 prefill + DP=2xEP=2 decode = HF golden" $bad \
        "golden: $golden"
    # clean shutdown: SIGTERM to each group's rank 0 stops every rank, status 0
    cluster_stop 1
done

# A rank dies: its group reports to the router and exits 1.
dir=tests/fixtures/qwen3_moe_tiny
PREFILLER_FLAGS="--tp 2" DECODER_FLAGS="--dp 2 --ep 2 --kv-pages 256" cluster_start "$dir"
pre_pid=${CLUSTER_PIDS[1]}
dec_pid=${CLUSTER_PIDS[2]}
# one request first, so every TransferEngine connection is fully set up
prompt=$(golden_ids "$dir" prompt_ids)
body="{\"model\":\"qwen3_moe_tiny\",\"prompt\":[$prompt],\"max_tokens\":4,\"temperature\":0}"
code=$(post /v1/completions "$body" "$CLUSTER_TMP/warm.json")
check "a request before the crashes" $([ "$code" = 200 ]; echo $?) "HTTP $code"
# kill_rank ROLE GROUP_PID PID_SED RANK TAIL: SIGKILLs rank 1 of ROLE's
# group (its pid from ROLE.log by the sed expression PID_SED) and checks that
# the group tells the router and exits 1; TAIL log lines go with a failure.
kill_rank() {
    local role=$1 gpid=$2 log="$CLUSTER_TMP/$1.log" victim st
    victim=$(sed -n "s/$3/\\1/p" "$log" | tail -1)
    if [ -z "$victim" ]; then
        not_ok "$role $4 logs its pid" "$(tail -"$5" "$log")"
        return
    fi
    kill -KILL "$victim"
    wait_exit "$gpid"
    st=$ST
    grep -q "$role group failed: rank 1 (pid $victim) died" "$log" &&
        [ "$st" = 1 ] && grep -q "reports error .*$role group failed" "$CLUSTER_TMP/router.log"
    check "$role $4 SIGKILLed: the group tells the router and exits 1" $? \
        "exit: $st" "$(tail -"$5" "$log")"
}
kill_rank prefiller "$pre_pid" '.*TP rank 1 of 2 ready (pid \([0-9]*\)).*' "TP rank 1" 40
kill_rank decoder "$dec_pid" '.*-dp1: model.*(pid \([0-9]*\)).*' "DP rank 1" 4
cluster_stop
left=$(ls /dev/shm 2>/dev/null | grep -c -e "tandem-comm-prefill-" -e "tandem-comm-decode-" || true)
[ "$left" -eq 0 ]
check "no shared-memory segment left" $? "$(ls /dev/shm | grep tandem-comm)"
cluster_finish
