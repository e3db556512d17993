# Shared steps of the failover tests (sourced after cluster_lib.sh): greedy
# references from tandem-generate, a router with the local scaler, streaming
# clients with a deadline each (stream_clients.py), and the checks every
# failover test ends with: no stream lost, and afterwards 20 new streams
# complete and every KV page of every decoder is free.
#
#   fo_references MAX_TOKENS           # prompts.json, expect.json in $CLUSTER_TMP
#   fo_router_scaler P D [flags...]    # router + local scaler: P prefillers, D decoders
#   fo_streams NAME N [READY_AFTER]    # N streams in the background (FO_PID)
#   fo_check_streams NAME N WHAT       # 0 never ended, 0 failed, 0 mismatched
#   fo_after DECODER_METRICS_URL...    # 20 new streams, then every KV page free
FO_FX=gpt_oss_tiny
FO_DIR=tests/fixtures/$FO_FX
FO_DEADLINE=${FO_DEADLINE:-40}

# Four prompts (lengths 4-20); the expected output of each is tandem-generate's
# greedy output. A stream placed again after a failure continues from the
# prompt plus its streamed tokens; for these prompts that continuation equals
# the uninterrupted output at every split point, so every stream must match.
fo_references() {
    FO_M=$1
    local prompts=("5,17,33,80,120,7,9,11" "300,2,44,61,99,150,210,12,13,14,15,16"
                   "401,402,403,404" "77,88,99,111,222,333,444,55,66,77,88,99,10,20,30,40,50,60,70,80")
    local p out sep="" esep=""
    printf '[' >"$CLUSTER_TMP/prompts.json"
    printf '[' >"$CLUSTER_TMP/expect.json"
    for p in "${prompts[@]}"; do
        out=$(timeout 60 "$BIN/tandem-generate" --model "$FO_DIR" --prompt-ids "$p" \
              --max-tokens "$FO_M" --ignore-eos 2>/dev/null)
        if [ -z "$out" ]; then
            not_ok "tandem-generate computes the references" "prompt $p"
            return 1
        fi
        printf '%s[%s]' "$sep" "$p" >>"$CLUSTER_TMP/prompts.json"
        printf '%s[%s]' "$esep" "$out" >>"$CLUSTER_TMP/expect.json"
        sep=, esep=,
    done
    printf ']' >>"$CLUSTER_TMP/prompts.json"
    printf ']' >>"$CLUSTER_TMP/expect.json"
}

# fo_free_port [N]: the first of N consecutive free TCP ports on 127.0.0.1
# (the workers' own /metrics: the local scaler gives worker i base + i),
# below the ephemeral range, so no outgoing connection takes one meanwhile.
fo_free_port() {
    python3 - "${1:-1}" <<'PYEOF2'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 32000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PYEOF2
}

# fo_router_scaler P D [flags...]: tandem-router with the local scaler keeping
# P prefillers and D decoders (ids prefill-i, decode-i; decoder i serves its
# /metrics on $FO_DPORT + i); waits until they registered.
fo_router_scaler() {
    local np=$1 nd=$2
    shift 2
    FO_DPORT=$(fo_free_port "$nd")
    rm -f "$CLUSTER_TMP/ports"
    "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 \
        --port-file "$CLUSTER_TMP/ports" --heartbeat-ms 200 \
        --scaler local --scaler-local-model "$FO_DIR" --autoscale-interval-s 0.5 \
        --autoscale-prefill-min "$np" --autoscale-prefill-max "$np" \
        --autoscale-decode-min "$nd" --autoscale-decode-max "$nd" \
        --scaler-local-decode-metrics-port "$FO_DPORT" --scaler-local-drain-timeout-s 10 \
        "$@" >>"$CLUSTER_TMP/router.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(router)
    for _ in $(seq 1 100); do
        [ -s "$CLUSTER_TMP/ports" ] && break
        sleep 0.05
    done
    HTTP=$(port_of http_port)
    RPC=tcp://127.0.0.1:$(port_of rpc_port)
    WORKER_EP=tcp://127.0.0.1:$(port_of worker_port)
    URL=http://127.0.0.1:$HTTP
    wait_health "$np" "$nd" 300
    check "the local scaler starts $np prefiller(s) and $nd decoder(s), which register" $? \
        "$(curl -s "$URL/healthz")" "$(tail -5 "$CLUSTER_TMP/router.log")"
}

# scaler_pid POOL INDEX: the pid of the local scaler's latest worker there.
scaler_pid() {
    sed -n "s/.*local scaler: started $1 worker $2 (pid \([0-9]*\)).*/\1/p" \
        "$CLUSTER_TMP/router.log" | tail -1
}

# scaler_restarted POOL INDEX OLD_PID: waits (20 s at most) for the local
# scaler to start that worker again; prints the new pid, fails when none.
scaler_restarted() {
    local new=""
    for _ in $(seq 1 200); do
        new=$(scaler_pid "$1" "$2")
        [ -n "$new" ] && [ "$new" != "$3" ] && break
        sleep 0.1
    done
    echo "$new"
    [ -n "$new" ] && [ "$new" != "$3" ]
}

# fo_streams NAME N [READY_AFTER]: N concurrent greedy streams of $FO_M
# tokens in the background ($FO_PID); with READY_AFTER, returns once that
# many streams got a token (or after about 20 s).
fo_streams() {
    local name=$1 n=$2 ready=${3:-}
    rm -f "$CLUSTER_TMP/$name.ready"
    python3 tests/integration/stream_clients.py "$URL" "$FO_FX" --streams "$n" \
        --prompts "$CLUSTER_TMP/prompts.json" --expect "$CLUSTER_TMP/expect.json" \
        --max-tokens "$FO_M" --deadline "$FO_DEADLINE" --out "$CLUSTER_TMP/$name.json" \
        ${ready:+--ready-file "$CLUSTER_TMP/$name.ready" --ready-after "$ready"} \
        >"$CLUSTER_TMP/$name.out" 2>&1 &
    FO_PID=$!
    if [ -n "$ready" ]; then
        for _ in $(seq 1 200); do
            [ -e "$CLUSTER_TMP/$name.ready" ] && return 0
            kill -0 $FO_PID 2>/dev/null || return 1
            sleep 0.1
        done
        return 1
    fi
}

# fo_wait_decoding METRICS_URL: waits (about 20 s) until that decoder runs
# a batch (its sequences have streamed tokens: they joined the batch with
# their first one), so a kill now cuts streams mid-output.
fo_wait_decoding() {
    local b="" _
    for _ in $(seq 1 200); do
        b=$(curl -s "$1/metrics" | awk '$1 ~ /^tandem_decode_batch_size\{/ { print $2; exit }')
        [ "${b:-0}" -gt 0 ] 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# fo_check_streams NAME N WHAT: waits for the clients and checks that all N
# streams completed with the reference tokens.
fo_check_streams() {
    wait "$FO_PID"
    local v
    v=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["never_ended"], j["failed"], j["mismatched"], j["ok"])' \
        "$CLUSTER_TMP/$1.json" 2>/dev/null)
    [ "$v" = "0 0 0 $2" ]
    check "$3: $2 of $2 streams complete with tandem-generate's tokens (0 never ended, 0 failed)" $? \
        "never_ended failed mismatched ok: ${v:-none}" "$(cat "$CLUSTER_TMP/$1.out" | cut -c1-1500)"
}

# fo_kv_free METRICS_URL: waits (about 10 s) until that decoder's own
# /metrics shows no KV page in use; prints the last value.
fo_kv_free() {
    local used="" _
    for _ in $(seq 1 100); do
        used=$(curl -s "$1/metrics" | awk '$1 ~ /^tandem_kv_cache_blocks_used\{/ { print $2; exit }')
        [ "$used" = 0 ] && break
        sleep 0.1
    done
    echo "${used:-none}"
    [ "$used" = 0 ]
}

# fo_after DECODER_METRICS_URL...: 20 new streams complete, then every KV
# page of each decoder is free.
fo_after() {
    fo_streams after 20
    fo_check_streams after 20 "afterwards"
    local u used
    for u in "$@"; do
        used=$(fo_kv_free "$u")
        check "every KV page of the decoder at $u is free afterwards" $? "blocks used: $used"
    done
}
