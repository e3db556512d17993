#!/usr/bin/env bash
# Multi-rank workers through the paths a GPU deployment takes, run on the
# CPU (docs/OPERATIONS.md "Multi-rank workers"):
#   1. --rank-comm staged: the model's collectives (the prefiller's TP
#      all-reduce and EP combine, the decoder's DP+EP dispatch/combine) go
#      through the staged communicator, the one ranks sharing a GPU get, with
#      the CPU backend's copies: a TP=2/EP=2 prefiller and a DP=2xEP=2 decoder
#      must return HF's golden tokens for both fixtures;
#   2. a decoder group of two processes standing in for two pods, meeting at
#      rank 0's TCP rendezvous (--group-leader, or TANDEM_DECODER_GROUP_LEADER
#      for the second; --local-ranks 2: DP=4xEP=4):
#      golden tokens through all four ranks, then the second "pod" SIGKILLed:
#      the first reports the group failure to the router and exits 1, and the
#      orphaned rank of the killed pod exits too; nothing hangs.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

# golden_requests FX N: N concurrent greedy requests must return HF's tokens
golden_requests() {
    local fx=$1 n=$2 dir=tests/fixtures/$1 prompt golden body bad=0 i p
    prompt=$(golden_ids "$dir" prompt_ids)
    golden=$(golden_ids "$dir" gen_ids)
    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
    local cpids=()
    for i in $(seq 1 "$n"); do
        post /v1/completions "$body" "$CLUSTER_TMP/r$i.json" >"$CLUSTER_TMP/r$i.code" &
        cpids+=($!)
    done
    for p in "${cpids[@]}"; do wait "$p"; done
    for i in $(seq 1 "$n"); do
        got=$(json_get "$CLUSTER_TMP/r$i.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
        if [ "$(cat "$CLUSTER_TMP/r$i.code")" != 200 ] || [ "$got" != "$golden" ]; then
            bad=1
            echo "# request $i: HTTP $(cat "$CLUSTER_TMP/r$i.code"): $got"
        fi
    done
    return $bad
}

# wait_grep N PATTERN FILE...: until PATTERN has N matching lines (10 s)
wait_grep() {
    local n=$1 pat=$2
    shift 2
    for _ in $(seq 1 100); do
        [ "$(cat "$@" 2>/dev/null | grep -c -- "$pat")" -ge "$n" ] && return 0
        sleep 0.1
    done
    return 1
}

for fx in gpt_oss_tiny qwen3_moe_tiny; do
    PREFILLER_FLAGS="--tp 2 --ep 2 --rank-comm staged" \
    DECODER_FLAGS="--dp 2 --ep 2 --rank-comm staged --page-size 5 --kv-pages 256" \
        cluster_start "tests/fixtures/$fx" || continue
    wait_grep 2 "rank communicator staged" "$CLUSTER_TMP/decoder.log" &&
        wait_grep 2 "rank communicator staged" "$CLUSTER_TMP/prefiller.log"
    check "$fx: every rank's model collectives are staged" $? \
        "$(grep -h 'rank communicator' "$CLUSTER_TMP"/*.log)"
    golden_requests "$fx" 4
    check "$fx: 4 concurrent greedy requests, TP=2/EP=2 prefill + DP=2xEP=2 decode staged = HF golden" $?
    cluster_stop 1
done

# Two "pods" of one DP=4xEP=4 decoder group, meeting over TCP.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the second pod finds rank 0 through TANDEM_DECODER_GROUP_LEADER, as
# deploy/image/tandem-decoder-pod passes it
pod="--dp 4 --ep 4 --world 4 --local-ranks 2 --page-size 5 --kv-pages 256"
fx=qwen3_moe_tiny
TANDEM_DECODER_GROUP_LEADER=127.0.0.1:$port DECODER_FLAGS="$pod --rank 0 --group-leader 127.0.0.1:$port" \
    DECODER2_FLAGS="$pod --rank 2" cluster_start "tests/fixtures/$fx"
wait_grep 4 "DP 4 EP 4" "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/decoder2.log"
check "both pods' ranks register: dp0..dp3" $? "$(tail -3 "$CLUSTER_TMP/decoder.log")" \
    "$(tail -3 "$CLUSTER_TMP/decoder2.log")"
grep -q -- '-dp3: model' "$CLUSTER_TMP/decoder2.log" && grep -q -- '-dp0: model' "$CLUSTER_TMP/decoder.log" &&
    grep -q "rank communicator host" "$CLUSTER_TMP/decoder2.log"
check "the second pod runs ranks 2 and 3 on the group's host communicator" $? \
    "$(grep -h 'model' "$CLUSTER_TMP/decoder2.log")"
golden_requests "$fx" 8
check "$fx: 8 concurrent greedy requests through the 2-pod DP=4xEP=4 group = HF golden" $?
pod2=$(pid_of decoder2)
pod1=$(pid_of decoder)
orphan=$(sed -n 's/.*-dp3: model.*(pid \([0-9]*\)).*/\1/p' "$CLUSTER_TMP/decoder2.log" | tail -1)
kill -KILL "$pod2"
st=hung
for _ in $(seq 1 300); do
    kill -0 "$pod1" 2>/dev/null || break
    sleep 0.1
done
if ! kill -0 "$pod1" 2>/dev/null; then
    wait "$pod1" 2>/dev/null
    st=$?
fi
gone=1
for _ in $(seq 1 100); do
    [ -n "$orphan" ] && ! kill -0 "$orphan" 2>/dev/null && { gone=0; break; }
    sleep 0.1
done
[ "$st" = 1 ] && grep -q "decoder group failed: rank 2 (pid $pod2) died" "$CLUSTER_TMP/decoder.log" &&
    grep -q "reports error .*decoder group failed" "$CLUSTER_TMP/router.log" && [ "$gone" = 0 ]
check "a pod SIGKILLed: the other pod reports the group failure and exits 1, the orphan rank exits" $? \
    "exit $st, orphan $orphan gone=$gone" "$(tail -4 "$CLUSTER_TMP/decoder.log")"
[ -n "$orphan" ] && kill -KILL "$orphan" 2>/dev/null
cluster_stop
left=$(ls /dev/shm 2>/dev/null | grep -c -e "tandem-comm-rdv-" -e "tandem-comm-prefill-" -e "tandem-comm-decode-" || true)
[ "$left" -eq 0 ]
check "no shared-memory segment left" $? "$(ls /dev/shm | grep tandem-comm)"
cluster_finish
