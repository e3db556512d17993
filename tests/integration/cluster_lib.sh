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
T_N=0
T_FAILED=0
CLUSTER_PIDS=()
CLUSTER_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tandem-cluster-XXXXXX")
# UCX over TCP and shared memory on loopback; the code path is the RDMA one.
export UCX_TLS=${UCX_TLS:-tcp,sm,self}
export UCX_WARN_UNUSED_ENV_VARS=n

ok() { T_N=$((T_N + 1)); echo "ok $T_N - $1"; }
not_ok() {
    T_N=$((T_N + 1))
    T_FAILED=$((T_FAILED + 1))
    echo "not ok $T_N - $1"
    shift
    local l
    for l in "$@"; do echo "# $l"; done
}
# check NAME COND_EXIT_STATUS DIAGNOSTIC...: ok if the preceding test passed.
check() {
    local name=$1 rc=$2
    shift 2
    if [ "$rc" -eq 0 ]; then ok "$name"; else not_ok "$name" "$@"; fi
}

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
            check "$name exits cleanly on SIGTERM" $? "exit status $rc" \
                "$(grep -A12 -E "Sanitizer|runtime error" "$CLUSTER_TMP/$name.log" | head -30)"
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
# (default: random).
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
    "$BIN/tandem-prefiller" --router "$WORKER_EP" --model "$model" \
        --worker-id "${PREFILLER_ID:-prefiller-$$-$RANDOM}" ${PREFILLER_FLAGS:-} >>"$CLUSTER_TMP/prefiller.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(prefiller)
    # shellcheck disable=SC2086
    "$BIN/tandem-decoder" --router "$WORKER_EP" --model "$model" \
        --worker-id "${DECODER_ID:-decoder-$$-$RANDOM}" ${DECODER_FLAGS:-} >>"$CLUSTER_TMP/decoder.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NAMES+=(decoder)
    for _ in $(seq 1 300); do
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

# An I32 tensor of a fixture's golden.safetensors as "a,b,c".
golden_ids() {
    python3 - "$1/golden.safetensors" "$2" <<'EOF'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])[sys.argv[2]]
assert entry["dtype"] == "I32"
b, e = entry["data_offsets"]
raw = data[8 + n + b:8 + n + e]
print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
EOF
}

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
    echo "1..$T_N"
    [ "$T_FAILED" -eq 0 ]
    exit $?
}
