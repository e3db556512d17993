#!/usr/bin/env bash
# KV leases: a decoder frees the pages it reserved for a prefill when the
# lease ends, even when nobody tells it (the router frozen, the prefiller
# frozen with the work queued), and the prefiller pushes nothing into
# pages whose lease ended.
#
# p1 is frozen (SIGSTOP) with 8 requests queued whose pages d1 reserved;
# then the router is frozen too, so no Cancel can reach d1. With
# --kv-lease-ms 3000, d1's own /metrics shows every page free within the
# lease plus its 2 s grace (asserted within 8 s). p1 and the router are
# resumed: p1 starts no push for the expired leases ("lease ... ended
# before the push could start; nothing was sent"), every request ends
# (placed again and completed, or an explicit error: none hangs), and
# afterwards a new request completes with tandem-generate's tokens and
# every page is free. (docs/RELIABILITY.md, "KV leases")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
PREFILLER_ID=p1 DECODER_ID=d1 DECODER_FLAGS="--kv-lease-ms 3000 --orphan-release-ms 4000" \
    PREFILLER_FLAGS="--transfer-timeout-ms 2000" \
    cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 30000 || cluster_finish
name_workers p1 d1
prompt=$(golden_ids "$dir" prompt_ids)
dport=$(sed -n 's|.*d1: /metrics and /healthz on http://127.0.0.1:\([0-9]*\).*|\1|p' "$CLUSTER_TMP/d1.log")
dused() { curl -s "http://127.0.0.1:$dport/metrics" | awk '$1 ~ /^tandem_kv_cache_blocks_used/ {print $2}'; }

kill -STOP "$(pid_of p1)"
M=8
for i in $(seq 1 $M); do
    post_bg 60 "$(greedy_req "$fx" "$(echo "$prompt" | cut -d, -f1-$((10 + i)))" 8)" \
        "$CLUSTER_TMP/r.$i" "$CLUSTER_TMP/code.$i"
    pids[$i]=$!
done
used=""
for _ in $(seq 1 100); do
    used=$(dused)
    [ "${used:-0}" -gt 0 ] 2>/dev/null && break
    sleep 0.05
done
[ "${used:-0}" -gt 0 ] 2>/dev/null
check "d1 reserved pages for the $M requests queued at the frozen p1" $? "blocks used: $used"

queued=""
for _ in $(seq 1 100); do
    queued=$(timeout 10 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1 | grep -E '^ +prefiller +p1 ')
    echo "$queued" | grep -q "in_flight=$M " && break
    sleep 0.05
done
echo "$queued" | grep -q "in_flight=$M "
check "the router assigned all $M prefills to the frozen p1" $? "$queued"
# Let the assignments cross to p1's socket, then freeze the router.
sleep 0.3
kill -STOP "$(pid_of router)"
for _ in $(seq 1 80); do
    used=$(dused)
    [ "$used" = 0 ] && break
    sleep 0.1
done
[ "$used" = 0 ]
check "with the router frozen too, d1 frees them when the lease ends (within 8 s)" $? \
    "blocks used: $used" "$(tail -3 "$CLUSTER_TMP/d1.log")"

# p1 runs first, while the router (which would cancel its queue) is still
# frozen: it must not push into the expired pages.
kill -CONT "$(pid_of p1)"
lease_line="KV lease ended [0-9]* ms before the push could start; nothing was sent"
for _ in $(seq 1 100); do
    n=$(grep -c "$lease_line" "$CLUSTER_TMP/p1.log")
    [ "$n" -ge $M ] && break
    sleep 0.1
done
kill -CONT "$(pid_of router)"
for i in $(seq 1 $M); do wait "${pids[$i]}"; done
[ "$n" -ge $M ]
check "the resumed p1 pushes nothing into the $M reservations whose lease ended" $? "$n such lines" \
    "$(grep -E 'request' "$CLUSTER_TMP/p1.log" | tail -3)"
hung=""
for i in $(seq 1 $M); do
    c=$(cat "$CLUSTER_TMP/code.$i")
    case "$c" in
    200) [ "$(json_get "$CLUSTER_TMP/r.$i" 'j["choices"][0]["finish_reason"]')" = length ] ||
             hung="$hung $i:200-bad" ;;
    4??|5??) json_get "$CLUSTER_TMP/r.$i" 'j["error"]["message"]' >/dev/null 2>&1 || hung="$hung $i:$c-no-body" ;;
    *) hung="$hung $i:$c" ;;
    esac
done
[ -z "$hung" ]
check "every request ends: completed, or an explicit error (none hangs)" $? "$hung"

code=$(post /v1/completions "$(greedy_req "$fx" "$prompt" 8)" "$CLUSTER_TMP/after.json")
got=$(json_get "$CLUSTER_TMP/after.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-8)" ]
check "a new request completes with the engine's tokens" $? "HTTP $code $got"
used=$(wait_kv_free d1)
check "every KV page is free afterwards" $? "blocks used: $used"
cluster_finish
