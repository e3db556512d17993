#!/usr/bin/env bash
# Security basics through the real processes (docs/SECURITY.md):
#  - by default every router socket listens on 127.0.0.1 only;
#  - with --api-key-file, HTTP /v1/* needs "Authorization: Bearer KEY"
#    (401 otherwise, a wrong key included) while /healthz and /metrics stay
#    open, and the RPC API only talks to clients holding the key (CURVE);
#  - with --worker-secret-file, workers holding the secret register and
#    serve, and a worker without it (or with another secret) never
#    registers;
#  - key files that are missing or too short stop the router with a message.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
head -c 48 /dev/urandom | base64 -w0 >"$CLUSTER_TMP/api.key"
head -c 48 /dev/urandom | base64 -w0 >"$CLUSTER_TMP/worker.secret"
head -c 48 /dev/urandom | base64 -w0 >"$CLUSTER_TMP/other.secret"
echo "too-short" >"$CLUSTER_TMP/short.key"

# ---- refused configurations
for f in short.key missing.key; do
    timeout 20 "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 \
        --api-key-file "$CLUSTER_TMP/$f" >"$CLUSTER_TMP/bad.out" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && grep -qE 'at least 32 bytes|cannot read' "$CLUSTER_TMP/bad.out"
    check "router refuses --api-key-file $f (exit $rc)" $? "$(cat "$CLUSTER_TMP/bad.out")"
done

PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="--worker-secret-file $CLUSTER_TMP/worker.secret" \
    DECODER_FLAGS="--worker-secret-file $CLUSTER_TMP/worker.secret" \
    cluster_start "$dir" --api-key-file "$CLUSTER_TMP/api.key" \
    --worker-secret-file "$CLUSTER_TMP/worker.secret" || cluster_finish
CLUSTER_NAMES[1]=p1
CLUSTER_NAMES[2]=d1
mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/p1.log"
mv "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/d1.log"
ok "workers holding the shared secret register over CURVE"

# ---- loopback only
listen=$(python3 - "$(pid_of router)" <<'PYEOF'
import os, sys
pid = sys.argv[1]
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        l = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if l.startswith("socket:["):
        inodes.add(l[8:-1])
out = []
for proto in ("tcp", "tcp6"):
    for line in open(f"/proc/net/{proto}").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            addr, port = f[1].split(":")
            out.append(f"{proto}:{addr}:{int(port, 16)}")
print(" ".join(sorted(out)))
PYEOF
)
n=$(echo "$listen" | wc -w)
[ "$n" -eq 3 ] && [ "$(echo "$listen" | tr ' ' '\n' | grep -vc '^tcp:0100007F:')" -eq 0 ]
check "the router's 3 listening sockets are bound to 127.0.0.1 by default" $? "$listen"

# ---- HTTP API key
key=$(cat "$CLUSTER_TMP/api.key")
prompt=$(golden_ids "$dir" prompt_ids)
body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}"
code=$(curl -s -D "$CLUSTER_TMP/h" -o "$CLUSTER_TMP/r.json" -w '%{http_code}' \
    -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions")
[ "$code" = 401 ] && grep -qi '^WWW-Authenticate: Bearer' "$CLUSTER_TMP/h" &&
    grep -q '"code":"invalid_api_key"' "$CLUSTER_TMP/r.json"
check "no API key: 401 invalid_api_key with WWW-Authenticate" $? "HTTP $code $(cat "$CLUSTER_TMP/r.json")"
code=$(curl -s -o "$CLUSTER_TMP/r.json" -w '%{http_code}' -H "Authorization: Bearer x$key" \
    -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions")
[ "$code" = 401 ]
check "a wrong API key: 401" $? "HTTP $code"
code=$(curl -s -o "$CLUSTER_TMP/r.json" -w '%{http_code}' "$URL/v1/models")
[ "$code" = 401 ]
check "GET /v1/models needs the key too" $? "HTTP $code"
code=$(curl -s -o "$CLUSTER_TMP/r.json" -w '%{http_code}' -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions")
got=$(json_get "$CLUSTER_TMP/r.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
[ "$code" = 200 ] && [ "$got" = "$(golden_ids "$dir" gen_ids | cut -d, -f1-4)" ]
check "the right API key: 200 with the golden tokens" $? "HTTP $code $got"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")" = 200 ]
check "/healthz and /metrics stay open for probes and scrapers" $?
timeout 120 "$BIN/tandem-loadgen" --url "$URL" --model "$fx" --clients 16 --prompt-max 40 --out-max 8 \
    --api-key-file "$CLUSTER_TMP/api.key" >"$CLUSTER_TMP/load.out" 2>&1
check "16 concurrent streaming clients with the key all complete" $? "$(tail -3 "$CLUSTER_TMP/load.out")"

# ---- RPC API key
timeout 20 "$BIN/tandem-cli" status --rpc "$RPC" --api-key-file "$CLUSTER_TMP/api.key" \
    >"$CLUSTER_TMP/st.out" 2>&1
[ $? -eq 0 ] && grep -q 'workers: 2' "$CLUSTER_TMP/st.out"
check "RPC with the key: status answers" $? "$(cat "$CLUSTER_TMP/st.out")"
timeout 20 "$BIN/tandem-cli" status --rpc "$RPC" --timeout-ms 1500 >"$CLUSTER_TMP/st2.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && ! grep -q 'workers:' "$CLUSTER_TMP/st2.out"
check "RPC without the key: no answer (exit $rc)" $? "$(cat "$CLUSTER_TMP/st2.out")"

# ---- workers without the secret
start_worker decoder intruder
start_worker decoder intruder2 --worker-secret-file "$CLUSTER_TMP/other.secret"
# They retry registration every second; give them three tries.
sleep 3.5
h=$(curl -s "$URL/healthz")
[ "$h" = '{"status":"ok","ready":true,"prefillers":1,"decoders":1}' ] &&
    ! grep -q 'registered with the router' "$CLUSTER_TMP/intruder.log" &&
    ! grep -q 'registered with the router' "$CLUSTER_TMP/intruder2.log" &&
    ! grep -qE 'registered decoder intruder' "$CLUSTER_TMP/router.log"
check "workers without the secret or with another one never register" $? "$h" \
    "$(grep -h registered "$CLUSTER_TMP"/intruder*.log "$CLUSTER_TMP/router.log")"
cluster_finish
