#!/usr/bin/env bash
# Scale-down drains, and the router's queue. Real processes on loopback.
# Where a check needs a worker to stay busy (draining with work left), the
# prefiller is paused (SIGSTOP): placed requests then sit reserved at their
# decoder until it resumes, so nothing depends on how fast the model runs.
#   - a decoder told to leave (SIGTERM) while it streams requests: its
#     /healthz?ready=1 turns 503 (liveness stays 200), the router stops
#     placing on it (new requests all go to the other decoder), every
#     running request finishes completely, then it deregisters and exits 0;
#   - a prefiller told to leave with prompts queued: it finishes them, takes
#     no new ones, deregisters and exits 0;
#   - worker /metrics: the decoder's own endpoint serves its series;
#   - with --queue-timeout-ms a request that no decoder can take yet waits
#     at the router (tandem_router_queue_depth) and is served when one
#     registers; past the timeout it gets 503 no_capacity.
. "$(dirname "$0")/cluster_lib.sh"
EXTRA_PIDS=()
trap 'for p in "${EXTRA_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; cluster_cleanup' EXIT
fx=gpt_oss_tiny
dir=tests/fixtures/$fx

metric_of() { # metric_of URL 'name{labels}'
    curl -s "$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'
}
health() { curl -s -o /dev/null -w '%{http_code}' "$1"; }
# start_worker KIND ID: a worker with its metrics port in $CLUSTER_TMP/ID.port
start_worker() {
    "$BIN/tandem-$1" --router "$WORKER_EP" --model "$dir" --worker-id "$2" --metrics-port 0 \
        --port-file "$CLUSTER_TMP/$2.port" >>"$CLUSTER_TMP/$2.log" 2>&1 &
    LAST_PID=$!
}
wait_port_file() {
    for _ in $(seq 1 100); do [ -s "$1" ] && break; sleep 0.05; done
    sed -n 's/^metrics_port=//p' "$1"
}
registered() { # registered N-prefillers N-decoders
    local want="\"prefillers\":$1,\"decoders\":$2}"
    for _ in $(seq 1 300); do
        curl -s "$URL/healthz" | grep -q "$want" && return 0
        sleep 0.1
    done
    return 1
}
# stream N TAG MAX_TOKENS: N streaming requests in the background, each to $CLUSTER_TMP/TAG-i.sse
stream() {
    local i
    STREAMS=()
    for i in $(seq 1 "$1"); do
        curl -sN --max-time 120 -H 'Content-Type: application/json' \
            -d "{\"model\":\"$fx\",\"prompt\":[1,2,3,$i],\"max_tokens\":$3,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
            "$URL/v1/completions" >"$CLUSTER_TMP/$2-$i.sse" &
        STREAMS+=($!)
    done
}
# complete TAG N MAX_TOKENS: every stream has MAX_TOKENS tokens, finish "length", [DONE]
complete() {
    python3 - "$CLUSTER_TMP" "$1" "$2" "$3" <<'EOF'
import json, sys
tmp, tag, n, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(1, n + 1):
    ev = [l[6:] for l in open("%s/%s-%d.sse" % (tmp, tag, i)).read().splitlines() if l.startswith("data: ")]
    assert ev and ev[-1] == "[DONE]", (i, ev[-2:])
    chunks = [json.loads(e) for e in ev[:-1]]
    assert all("error" not in c for c in chunks), (i, chunks[-1])
    toks = sum(len(c["choices"][0]["token_ids"]) for c in chunks)
    assert toks == want and chunks[-1]["choices"][0]["finish_reason"] == "length", (i, toks)
EOF
}

# ---- a decoder drains -------------------------------------------------------
# Workers are paused (SIGSTOP) below to hold them in a state: a long
# heartbeat timeout keeps the router from dropping them meanwhile.
DECODER_FLAGS="--metrics-port 0 --port-file $CLUSTER_TMP/decoder-a.port" \
    cluster_start "$dir" --worker-timeout-ms 30000 || cluster_finish
DEC_A=$(wait_port_file "$CLUSTER_TMP/decoder-a.port")
start_worker decoder decoder-b
DEC_B_PID=$LAST_PID
EXTRA_PIDS+=($DEC_B_PID)
DEC_B=$(wait_port_file "$CLUSTER_TMP/decoder-b.port")
registered 1 2
check "a second decoder registers" $? "$(curl -s "$URL/healthz")"
[ "$(health "http://127.0.0.1:$DEC_B/healthz?ready=1")" = 200 ]
check "a serving decoder's /healthz?ready=1 answers 200" $?
curl -s "http://127.0.0.1:$DEC_A/metrics" |
    grep -q '^tandem_kv_cache_blocks_capacity{pool="decode",worker="decoder-[^"]*"} 1024$'
check "a decoder's own /metrics serves its series (KV capacity 1024 pages)" $? \
    "$(curl -s "http://127.0.0.1:$DEC_A/metrics" | grep kv_cache | head -3)"

in_flight_of() { # in_flight_of WORKER: the router's count of requests placed on it
    curl -s "$URL/dashboard/state" | python3 -c 'import json,sys; w=[x for x in json.load(sys.stdin)["workers"] if x["id"]==sys.argv[1]]; print(w[0]["in_flight"] if w else "gone")' "$1"
}
PREFILLER_PID=${CLUSTER_PIDS[1]}
DEC_A_ID=$(curl -s "$URL/dashboard/state" | python3 -c 'import json,sys; print([w["id"] for w in json.load(sys.stdin)["workers"] if w["pool"]=="decode" and w["id"]!="decoder-b"][0])')
# With the prefiller paused, 6 streams are placed (3 per decoder, smallest
# batch first) and wait at their decoders for their prompts' KV.
kill -STOP "$PREFILLER_PID"
stream 6 first 64
first_streams=("${STREAMS[@]}")
for _ in $(seq 1 200); do
    [ "$(in_flight_of decoder-b)" = 3 ] && [ "$(in_flight_of "$DEC_A_ID")" = 3 ] && break
    sleep 0.05
done
held=$(in_flight_of decoder-b)
[ "$held" = 3 ]
check "decoder-b holds 3 of the 6 requests before it is told to leave" $? "decoder-b $held, $DEC_A_ID $(in_flight_of "$DEC_A_ID")"
kill -TERM "$DEC_B_PID"
ready_code=000
for _ in $(seq 1 100); do
    ready_code=$(health "http://127.0.0.1:$DEC_B/healthz?ready=1")
    [ "$ready_code" = 503 ] && break
    sleep 0.05
done
live_code=$(health "http://127.0.0.1:$DEC_B/healthz")
[ "$ready_code" = 503 ] && [ "$live_code" = 200 ]
check "draining: /healthz?ready=1 answers 503, /healthz (liveness) 200" $? "ready $ready_code live $live_code"
for _ in $(seq 1 100); do
    [ "$(metric_of "$URL" 'tandem_worker_draining{pool="decode",worker="decoder-b"}')" = 1 ] && break
    sleep 0.05
done
[ "$(metric_of "$URL" 'tandem_worker_draining{pool="decode",worker="decoder-b"}')" = 1 ] &&
    [ "$(metric_of "$URL" 'tandem_pool_draining_replicas{pool="decode"}')" = 1 ] &&
    [ "$(metric_of "$URL" 'tandem_pool_ready_replicas{pool="decode"}')" = 1 ]
check "the router's /metrics shows decoder-b draining (1 draining, 1 ready)" $?
# New requests while it drains: all four go to the other decoder.
stream 4 during 40
during_streams=("${STREAMS[@]}")
for _ in $(seq 1 200); do
    [ "$(in_flight_of "$DEC_A_ID")" = 7 ] && break
    sleep 0.05
done
[ "$(in_flight_of "$DEC_A_ID")" = 7 ] && [ "$(in_flight_of decoder-b)" = 3 ]
check "nothing new is placed on the draining decoder (the 4 new requests all go to the other)" $? \
    "decoder-b $(in_flight_of decoder-b), $DEC_A_ID $(in_flight_of "$DEC_A_ID")"
kill -CONT "$PREFILLER_PID"
rc=0
for p in "${first_streams[@]}" "${during_streams[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] && complete first 6 64 && complete during 4 40
check "every stream, on the draining decoder too, finishes completely" $? "$(tail -c 300 "$CLUSTER_TMP/first-1.sse")"
wait "$DEC_B_PID"
rc=$?
[ "$rc" = 0 ] && grep -q "deregistered: leaving" "$CLUSTER_TMP/decoder-b.log" &&
    ! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$CLUSTER_TMP/decoder-b.log"
check "the drained decoder deregisters and exits 0" $? "exit $rc" "$(tail -5 "$CLUSTER_TMP/decoder-b.log")"
registered 1 1 && ! curl -s "$URL/metrics" | grep -q 'worker="decoder-b"'
check "the router forgets decoder-b (no series left)" $? "$(curl -s "$URL/healthz")"

# ---- a prefiller drains with prompts queued -------------------------------
start_worker prefiller prefiller-b
PRE_B_PID=$LAST_PID
EXTRA_PIDS+=($PRE_B_PID)
registered 2 1
check "a second prefiller registers" $?
# Paused, prefiller-b gets its share of 4 requests (fewest queued tokens
# first) and cannot start them; it is told to leave while they wait.
# The first prefiller is paused too while the burst is placed, so placement
# (fewest queued tokens) splits it between the two instead of racing the
# first one's progress; it resumes once prefiller-b is told to leave.
kill -STOP "$PREFILLER_PID"
kill -STOP "$PRE_B_PID"
PRE=()
for i in $(seq 1 4); do
    curl -s --max-time 120 -o "$CLUSTER_TMP/pre-$i.json" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"model\":\"$fx\",\"prompt\":[5,6,7,$i],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}" \
        "$URL/v1/completions" >"$CLUSTER_TMP/pre-$i.code" &
    PRE+=($!)
done
# With both paused, 2 of the 4 land on prefiller-b; the check is about
# state: whatever was queued at prefiller-b when it was told to leave.
for _ in $(seq 1 200); do
    q=$(in_flight_of prefiller-b)
    [ "$q" != gone ] && [ "$q" -ge 2 ] 2>/dev/null && break
    sleep 0.05
done
sleep 0.3
queued=$(in_flight_of prefiller-b)
kill -TERM "$PRE_B_PID"
kill -CONT "$PRE_B_PID"
kill -CONT "$PREFILLER_PID"
rc=0
for p in "${PRE[@]}"; do wait "$p" || rc=1; done
codes=$(cat "$CLUSTER_TMP"/pre-*.code)
[ "$rc" = 0 ] && [ "$codes" = "200200200200" ] && [ "$queued" != gone ] && [ "$queued" -ge 1 ]
check "the requests queued at a prefiller told to leave are still served (all 4: 200)" $? \
    "queued $queued, codes $codes"
wait "$PRE_B_PID"
rc=$?
[ "$rc" = 0 ] && grep -q "deregistered: leaving" "$CLUSTER_TMP/prefiller-b.log"
check "the drained prefiller deregisters and exits 0" $? "exit $rc" "$(tail -5 "$CLUSTER_TMP/prefiller-b.log")"
cluster_stop 1

# ---- the router's queue ------------------------------------------------------
# start_router NAME QUEUE_TIMEOUT_MS, with a prefiller and a decoder. The
# prefiller is paused, so a first request stays reserved at the decoder; the
# decoder is told to leave: it drains (holding that request) until the
# prefiller resumes, and meanwhile no decoder can take anything new.
start_router() {
    rm -f "$CLUSTER_TMP/ports"
    "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --port-file "$CLUSTER_TMP/ports" \
        --heartbeat-ms 200 --worker-timeout-ms 30000 --queue-timeout-ms "$2" \
        >>"$CLUSTER_TMP/$1.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=("$1")
    for _ in $(seq 1 100); do [ -s "$CLUSTER_TMP/ports" ] && break; sleep 0.05; done
    URL=http://127.0.0.1:$(port_of http_port)
    WORKER_EP=tcp://127.0.0.1:$(port_of worker_port)
    start_worker prefiller "$1-prefiller"
    PAUSED_PID=$LAST_PID
    CLUSTER_PIDS+=($LAST_PID)
    CLUSTER_NAMES+=("$1-prefiller")
    start_worker decoder "$1-decoder"
    DRAINING_PID=$LAST_PID
    EXTRA_PIDS+=($LAST_PID)
    registered 1 1
    kill -STOP "$PAUSED_PID"
    stream 1 "$1-first" 16
    FIRST=${STREAMS[0]}
    for _ in $(seq 1 200); do
        [ "$(in_flight_of "$1-decoder")" = 1 ] && break
        sleep 0.05
    done
    kill -TERM "$DRAINING_PID"
    for _ in $(seq 1 100); do
        [ "$(metric_of "$URL" 'tandem_pool_draining_replicas{pool="decode"}')" = 1 ] && break
        sleep 0.05
    done
}
start_router router-q 60000
curl -s "$URL/healthz" | grep -q '"ready":false,"prefillers":1,"decoders":1}' &&
    [ "$(health "$URL/healthz?ready=1")" = 200 ]
check "while its only decoder drains the router says ready:false (and still takes requests)" $? \
    "$(curl -s "$URL/healthz")"
curl -s --max-time 90 -o "$CLUSTER_TMP/held.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[$(golden_ids "$dir" prompt_ids)],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" \
    "$URL/v1/completions" >"$CLUSTER_TMP/held.code" &
HELD=$!
for _ in $(seq 1 100); do
    [ "$(metric_of "$URL" 'tandem_router_queue_depth{stage="decode"}')" = 1 ] && break
    sleep 0.05
done
[ "$(metric_of "$URL" 'tandem_router_queue_depth{stage="decode"}')" = 1 ] && kill -0 "$HELD" 2>/dev/null
check "with every decoder draining a new request waits at the router (tandem_router_queue_depth{stage=\"decode\"} 1)" $?
start_worker decoder router-q-decoder2
CLUSTER_PIDS+=($LAST_PID)
CLUSTER_NAMES+=(router-q-decoder2)
for _ in $(seq 1 200); do
    [ "$(in_flight_of router-q-decoder2)" = 1 ] && break
    sleep 0.05
done
[ "$(in_flight_of router-q-decoder2)" = 1 ] && [ "$(metric_of "$URL" 'tandem_router_queue_depth{stage="decode"}')" = 0 ]
check "when a new decoder registers, the held request is placed on it" $? "$(in_flight_of router-q-decoder2)"
kill -CONT "$PAUSED_PID"
wait "$HELD"
got=$(json_get "$CLUSTER_TMP/held.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$(cat "$CLUSTER_TMP/held.code")" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-8)" ] &&
    [ "$(metric_of "$URL" 'tandem_router_queue_depth{stage="decode"}')" = 0 ]
check "the held request is served by the new decoder (golden tokens) and the queue empties" $? \
    "HTTP $(cat "$CLUSTER_TMP/held.code") $got"
wait "$FIRST" && complete router-q-first 1 16 && wait "$DRAINING_PID"
check "the draining decoder finishes its request and exits 0" $?
cluster_stop 1

start_router router-t 700
code=$(post /v1/completions "{\"model\":\"$fx\",\"prompt\":[1,2,3]}" "$CLUSTER_TMP/timeout.json")
[ "$code" = 503 ] && grep -q '"code":"no_capacity"' "$CLUSTER_TMP/timeout.json" &&
    grep -q 'within 700 ms' "$CLUSTER_TMP/timeout.json"
check "a request held past --queue-timeout-ms gets 503 no_capacity" $? "HTTP $code $(cat "$CLUSTER_TMP/timeout.json")"
kill -CONT "$PAUSED_PID"
wait "$FIRST" && complete router-t-first 1 16 && wait "$DRAINING_PID"
check "the draining decoder finishes its request and exits 0" $?
cluster_finish
