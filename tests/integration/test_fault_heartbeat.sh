#!/usr/bin/env bash
# A worker that stops heartbeating (SIGSTOP) is removed from placement
# within a bounded time (--worker-timeout-ms 3000 here; the test allows
# 10 s), its streaming request continues on the other decoder, requests
# placed meanwhile all go to the live decoder, and when the frozen worker
# runs again its late messages about the old attempt are ignored (the
# client's tokens are exactly the engine's, none twice) and it registers
# again with no work held. (docs/RELIABILITY.md)
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
TIMEOUT_MS=3000
DECODER_ID=d2 cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms $TIMEOUT_MS || cluster_finish
name_workers "" d2
prompt=$(golden_ids "$dir" prompt_ids)
N=2000

stream_start 120 "$(greedy_req "$fx" "$prompt" $N stream)" "$CLUSTER_TMP/s.sse"
cpid=$!
# d2 freezes mid-stream; d1 joins while d2 is still registered.
kill -STOP "$(pid_of d2)"
t0=$(date +%s%N)
start_worker decoder d1
wait_health 1 2
check "a second decoder registers while d2 is frozen mid-stream" $? "$(curl -s "$URL/healthz")"
wait_health 1 1 100
removed=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$removed" -eq 0 ]
check "the frozen decoder is removed from placement in ${ms} ms (timeout ${TIMEOUT_MS} ms, bound 10 s)" $? \
    "$(curl -s "$URL/healthz")"
[ "$(metric 'tandem_worker_up{pool="decode",worker="d2"}')" = 0 ]
check "it shows as tandem_worker_up 0" $? "$(curl -s "$URL/metrics" | grep d2 | head -3)"

# Placed while d2 is frozen: all on d1.
pids=()
for i in 0 1 2 3; do
    curl -s --max-time 60 -o "$CLUSTER_TMP/r.$i" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" \
        "$URL/v1/completions" >"$CLUSTER_TMP/code.$i" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
golden=$(golden_ids "$dir" gen_ids | cut -d, -f1-8)
bad=()
for i in 0 1 2 3; do
    got=$(json_get "$CLUSTER_TMP/r.$i" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$(cat "$CLUSTER_TMP/code.$i")" = 200 ] && [ "$got" = "$golden" ] || bad+=("$i: $got")
done
[ ${#bad[@]} -eq 0 ]
check "requests placed meanwhile complete on the live decoder" $? "${bad[@]:-}"

kill -CONT "$(pid_of d2)"
wait "$cpid"
read -r toks finish <<<"$(sse_tokens "$CLUSTER_TMP/s.sse")"
n=$(echo "$toks" | tr ',' '\n' | grep -c .)
k=$(sed -n 's/.*placing it again as .* (attempt 2, after \([0-9]*\) tokens).*/\1/p' "$CLUSTER_TMP/router.log" | head -1)
ok_tokens=1
if [ -n "$k" ] && [ "$n" = "$N" ] && [ "$finish" = length ]; then
    before=$(echo "$toks" | cut -d, -f1-"$k")
    after=$(echo "$toks" | cut -d, -f$((k + 1))-)
    [ "$before" = "$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt" \
                     --max-tokens "$k" --ignore-eos 2>/dev/null)" ] &&
        [ "$after" = "$(timeout 120 "$BIN/tandem-generate" --model "$dir" --prompt-ids "$prompt,$before" \
                        --max-tokens $((N - k)) --ignore-eos 2>/dev/null)" ] && ok_tokens=0
fi
[ "$ok_tokens" -eq 0 ]
check "the frozen decoder's stream continues on d1: $N tokens, each once, the engine's (resumed after ${k:-?})" \
    $? "got $n tokens, end '$finish'" "$(grep -E 'placing|dropping' "$CLUSTER_TMP/router.log")"

wait_health 1 2
check "the thawed decoder registers again" $? "$(curl -s "$URL/healthz")"
grep -q 'registering again' "$CLUSTER_TMP/d2.log" && grep -q 'registered again: dropped' "$CLUSTER_TMP/d2.log"
check "it dropped the work the router had moved away" $? "$(tail -4 "$CLUSTER_TMP/d2.log")"
used=$(wait_kv_free d2)
check "and holds no KV pages" $? "blocks used: $used"
cluster_finish
