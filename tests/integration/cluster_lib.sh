# Shared helpers for the cluster integration tests (sourced, not run):
# start a real router + prefiller + decoder on 127.0.0.1 with ephemeral
# ports, wait until both workers registered, stop everything on exit, and
# print TAP lines.
#
#   . tests/integration/cluster_lib.sh
#   cluster_start MODEL_DIR [router flags...]   # sets HTTP, RPC, WORKER_EP, URL
#   ok "name" / not_ok "name" "diagnostic"...
#   cluster_finish                              # prints the plan, exits
BUILD=${TANDEM_BUILD:-build}
BIN=$BUILD/bin
CLUSTER_PIDS=()
CLUSTER_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tandem-cluster-XXXXXX")
# UCX over TCP and shared memory on loopback; the code path is the RDMA one.
export UCX_TLS=${UCX_TLS:-tcp,sm,self}
export UCX_WARN_UNUSED_ENV_VARS=n

. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

CLUSTER_NAMES=()

# Stops every process (SIGTERM, bounded wait, then SIGKILL). With CHECK=1
# each must exit 0 on SIGTERM with no sanitizer report in its log: the
# processes shut down cleanly and leak nothing (LeakSanitizer in test-asan).
cluster_stop() {
    local i pid rc check=${1:-0}
    for pid in "${CLUSTER_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for i in "${!CLUSTER_PIDS[@]}"; do
        pid=${CLUSTER_PIDS[$i]}
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rc=$?
        if [ "$check" = 1 ]; then
            local name=${CLUSTER_NAMES[$i]}
            ! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$CLUSTER_TMP/$name.log" &&
                [ "$rc" -eq 0 ]
            # the log now: a later cluster_start of the same script reuses the name
            check "$name exits cleanly on SIGTERM" $? "exit status $rc" \
                "$(grep -A12 -E "Sanitizer|runtime error" "$CLUSTER_TMP/$name.log" | head -30)" \
                "$(if [ "$rc" -ne 0 ]; then
                       # a library's own report (UCX asserts before it aborts)
                       grep -m4 -E "Assertion .*failed|Fatal:|FATAL|UCX +ERROR" "$CLUSTER_TMP/$name.log"
                       echo "---- $name.log (last lines)"; tail -n 12 "$CLUSTER_TMP/$name.log"
                   fi)"
        fi
    done
    CLUSTER_PIDS=()
    CLUSTER_NAMES=()
}

cluster_cleanup() {
    cluster_stop
    if [ "$T_FAILED" -gt 0 ] && [ -d "$CLUSTER_TMP" ]; then
        for f in "$CLUSTER_TMP"/*.log; do
            [ -f "$f" ] || continue
            echo "# ---- $(basename "$f") (last lines)"
            tail -n 15 "$f" | sed 's/^/#   /'
        done
    fi
    # CLUSTER_KEEP=DIR keeps every log (for loops that study a failure).
    [ -n "${CLUSTER_KEEP:-}" ] && [ -d "$CLUSTER_TMP" ] && cp -r "$CLUSTER_TMP" "$CLUSTER_KEEP"
    rm -rf "$CLUSTER_TMP"
}
trap cluster_cleanup EXIT
trap 'exit 1' INT TERM

# Reads KEY from the router's port file.
port_of() { sed -n "s/^$1=//p" "$CLUSTER_TMP/ports"; }

# cluster_start MODEL_DIR [extra router flags]; extra worker flags come from
# PREFILLER_FLAGS / DECODER_FLAGS, worker ids from PREFILLER_ID / DECODER_ID
# (default: random). DECODER2_FLAGS starts a second decoder process (log
# decoder2.log), e.g. the other "pod" of a decoder group.
# (default: random); CLUSTER_MODEL_FLAG=--synthetic takes MODEL_DIR as a config.json;
# CLUSTER_READY_TRIES: tenths of a second to wait for both to register (300).
cluster_start() {
    local model=$1
    shift
    CLUSTER_MODEL=$model
    rm -f "$CLUSTER_TMP/ports"
    "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 \
        --port-file "$CLUSTER_TMP/ports" --heartbeat-ms 200 --worker-timeout-ms 3000 "$@" \
        >>"$CLUSTER_TMP/router.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(router)
    for _ in $(seq 1 100); do
        [ -s "$CLUSTER_TMP/ports" ] && break
        sleep 0.05
    done
    if [ ! -s "$CLUSTER_TMP/ports" ]; then
        not_ok "router starts and writes its ports" "$(tail -3 "$CLUSTER_TMP/router.log")"
        return 1
    fi
    HTTP=$(port_of http_port)
    RPC=tcp://127.0.0.1:$(port_of rpc_port)
    WORKER_EP=tcp://127.0.0.1:$(port_of worker_port)
    URL=http://127.0.0.1:$HTTP
    # shellcheck disable=SC2086
    "$BIN/tandem-prefiller" --router "$WORKER_EP" ${CLUSTER_MODEL_FLAG:---model} "$model" \
        --worker-id "${PREFILLER_ID:-prefiller-$$-$RANDOM}" ${PREFILLER_FLAGS:-} >>"$CLUSTER_TMP/prefiller.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(prefiller)
    # shellcheck disable=SC2086
    "$BIN/tandem-decoder" --router "$WORKER_EP" ${CLUSTER_MODEL_FLAG:---model} "$model" \
        --worker-id "${DECODER_ID:-decoder-$$-$RANDOM}" ${DECODER_FLAGS:-} >>"$CLUSTER_TMP/decoder.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(decoder)
    if [ -n "${DECODER2_FLAGS:-}" ]; then   # a second process of one decoder group (a "pod")
        # shellcheck disable=SC2086
        "$BIN/tandem-decoder" --router "$WORKER_EP" ${CLUSTER_MODEL_FLAG:---model} "$model" \
            --worker-id "${DECODER_ID:-decoder2-$$-$RANDOM}" $DECODER2_FLAGS >>"$CLUSTER_TMP/decoder2.log" 2>&1 &
        CLUSTER_PIDS+=($!)
        CLUSTER_NAMES+=(decoder2)
    fi
    for _ in $(seq 1 "${CLUSTER_READY_TRIES:-300}"); do
        if curl -s "$URL/healthz" 2>/dev/null | grep -q '"ready":true'; then
            return 0
        fi
        sleep 0.1
    done
    not_ok "prefiller and decoder register with the router" \
        "$(curl -s "$URL/healthz")" "$(tail -3 "$CLUSTER_TMP/prefiller.log")" \
        "$(tail -3 "$CLUSTER_TMP/decoder.log")"
    return 1
}

# start_worker prefiller|decoder ID [flags...]: one more worker of the
# running cluster (log $CLUSTER_TMP/ID.log; stopped and checked with the rest).
start_worker() {
    local role=$1 id=$2
    shift 2
    "$BIN/tandem-$role" --router "$WORKER_EP" --model "$CLUSTER_MODEL" --worker-id "$id" "$@" \
        >>"$CLUSTER_TMP/$id.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=("$id")
}

# pid_of NAME: the pid of the cluster process started under that name.
pid_of() {
    local i
    for i in "${!CLUSTER_NAMES[@]}"; do
        [ "${CLUSTER_NAMES[$i]}" = "$1" ] && { echo "${CLUSTER_PIDS[$i]}"; return 0; }
    done
    return 1
}

# forget NAME: a process the test killed on purpose is reaped and not
# stopped or checked for a clean exit at the end.
forget() {
    local i
    for i in "${!CLUSTER_NAMES[@]}"; do
        if [ "${CLUSTER_NAMES[$i]}" = "$1" ]; then
            wait "${CLUSTER_PIDS[$i]}" 2>/dev/null
            unset 'CLUSTER_PIDS[$i]' 'CLUSTER_NAMES[$i]'
        fi
    done
    CLUSTER_PIDS=("${CLUSTER_PIDS[@]}")
    CLUSTER_NAMES=("${CLUSTER_NAMES[@]}")
}

# wait_health P D [TRIES]: waits (0.1 s per try, 100 tries by default) until
# /healthz counts P prefillers and D decoders; fails otherwise.
wait_health() {
    local want="\"prefillers\":$1,\"decoders\":$2}" _
    for _ in $(seq 1 "${3:-100}"); do
        curl -s "$URL/healthz" 2>/dev/null | grep -qF "$want" && return 0
        sleep 0.1
    done
    return 1
}

# name_workers P D: after cluster_start with PREFILLER_ID=P and/or
# DECODER_ID=D, the workers go by those ids (pid_of, forget, the exit
# checks) and log to $CLUSTER_TMP/P.log and D.log; "" keeps a worker as is.
name_workers() {
    if [ -n "$1" ]; then
        CLUSTER_NAMES[1]=$1
        mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/$1.log"
    fi
    if [ -n "$2" ]; then
        CLUSTER_NAMES[2]=$2
        mv "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/$2.log"
    fi
}

# greedy_req MODEL PROMPT_IDS MAX_TOKENS [stream]: the body of a greedy
# /v1/completions request that ignores EOS (streamed when a 4th argument is
# given).
greedy_req() {
    printf '{"model":"%s","prompt":[%s],"max_tokens":%s,"temperature":0,"ignore_eos":true%s}' \
        "$1" "$2" "$3" "${4:+,\"stream\":true}"
}

# stream_start MAX_TIME BODY OUTFILE: streams a completion into OUTFILE with
# curl in the background ($! is its pid) and returns once 5 events arrived
# (or after about 10 s).
stream_start() {
    curl -s -N --max-time "$1" -H 'Content-Type: application/json' -o "$3" -d "$2" \
        "$URL/v1/completions" &
    local _ c
    for _ in $(seq 1 1000); do
        c=$(grep -c '^data: {' "$3" 2>/dev/null)
        [ "${c:-0}" -ge 5 ] && break
        sleep 0.01
    done
}

# post_bg MAX_TIME BODY OUTFILE CODEFILE: posts a completion with curl in the
# background ($! is its pid); the HTTP status goes to CODEFILE.
post_bg() {
    curl -s --max-time "$1" -o "$3" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$2" "$URL/v1/completions" >"$4" &
}

# wait_in_flight PREFILLER: polls `tandem-cli status` (about 5 s) until
# PREFILLER has one request in flight; prints the last status and fails if
# it never did.
wait_in_flight() {
    local st="" _ re="^ +prefiller +$1 .*in_flight=1 "
    for _ in $(seq 1 100); do
        st=$(timeout 10 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1)
        echo "$st" | grep -qE "$re" && break
        sleep 0.05
    done
    echo "$st"
    echo "$st" | grep -qE "$re"
}

# wait_kv_free DECODER: waits (about 5 s) until the decoder's
# tandem_kv_cache_blocks_used is 0; prints the last value, fails if it never was.
wait_kv_free() {
    local used="" _
    for _ in $(seq 1 50); do
        used=$(metric "tandem_kv_cache_blocks_used{pool=\"decode\",worker=\"$1\"}")
        [ "$used" = 0 ] && break
        sleep 0.1
    done
    echo "$used"
    [ "$used" = 0 ]
}

# metric 'NAME{LABELS}': the value of one /metrics sample ("" if absent).
metric() {
    curl -s "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}'
}

# sse_tokens FILE: the token ids of an SSE completion stream,
# comma-separated, a space, then the last finish_reason or "ERROR:message";
# checks the framing (every event "data: JSON", [DONE] last).
sse_tokens() {
    python3 - "$1" <<'PYEOF'
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
if ev[-2:] != ["data: [DONE]", ""]:
    print("malformed: no [DONE] at the end:", ev[-3:]); sys.exit()
toks, finish, err = [], None, None
for e in ev[:-2]:
    if not e.startswith("data: "):
        print("malformed event:", e[:100]); sys.exit()
    j = json.loads(e[6:])
    if "error" in j:
        err = j["error"]["message"]
        continue
    for c in j["choices"]:
        toks += c.get("token_ids", [])
        finish = c.get("finish_reason") or finish
print(",".join(map(str, toks)), ("ERROR:" + err) if err else finish)
PYEOF
}

# golden_ids FIXTURE_DIR NAME: see golden_lib.sh.
. "$(dirname "${BASH_SOURCE[0]}")/golden_lib.sh"

# json_get FILE EXPR: evaluates a Python expression on the parsed JSON `j`.
json_get() {
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# post PATH BODY OUTFILE -> prints the HTTP status
post() {
    curl -s -o "$3" -w '%{http_code}' -H 'Content-Type: application/json' \
        --max-time 120 -d "$2" "$URL$1"
}

# expect_error NAME PATH BODY STATUS PARAM CODE [MESSAGE_SUBSTRING]: POSTs BODY
# and checks an OpenAI error body (type invalid_request_error) with that
# status, param and code. PARAM/CODE "null" mean JSON null.
expect_error() {
    local name=$1 path=$2 body=$3 want_status=$4 want_param=$5 want_code=$6 want_msg=${7:-}
    local code
    code=$(post "$path" "$body" "$CLUSTER_TMP/err.json")
    local verdict
    verdict=$(python3 - "$CLUSTER_TMP/err.json" "$want_param" "$want_code" "$want_msg" <<'EOF'
import json, sys
path, param, code, msg = sys.argv[1:5]
try:
    j = json.load(open(path))
except Exception as e:
    print("body is not JSON:", open(path).read()[:200]); sys.exit()
e = j.get("error")
want = lambda v: None if v == "null" else v
if set(j) != {"error"} or not isinstance(e, dict):
    print("not an OpenAI error body:", j); sys.exit()
if set(e) != {"message", "type", "param", "code"}:
    print("error fields:", sorted(e)); sys.exit()
if e["type"] != "invalid_request_error": print("type", e["type"]); sys.exit()
if e["param"] != want(param): print("param", e["param"]); sys.exit()
if e["code"] != want(code): print("code", e["code"]); sys.exit()
if not isinstance(e["message"], str) or msg not in e["message"]: print("message", e["message"]); sys.exit()
print("ok")
EOF
)
    [ "$code" = "$want_status" ] && [ "$verdict" = ok ]
    check "$name: HTTP $want_status, param $want_param, code $want_code" $? "HTTP $code: $verdict"
}

cluster_finish() {
    [ ${#CLUSTER_PIDS[@]} -gt 0 ] && cluster_stop 1
    tap_plan
    exit $?
}
