#!/usr/bin/env bash
# A decoder that freezes (SIGSTOP) while a prefiller's first UCX connection
# to it is new, then comes back (SIGCONT) or dies (SIGKILL). UCX 1.13 aborts
# processes whose endpoints are closed at the wrong moment (docs/RELIABILITY.md,
# "UCX wire-up"), so this checks with real processes that no prefiller or
# decoder dies, that every request ends in exactly one outcome (the golden
# tokens, or an explicit error), and that the frozen decoder is removed and,
# once it runs again, admitted again.
#
# Phase 1, the first transfer: p1 holds an assignment (frozen) while d1
# reserves the pages; d1 freezes; p1 runs again and pushes into frozen d1,
# which times out; the request completes on d2. d1 is removed, resumes,
# registers again and serves requests.
# Phase 2, the first connection: d3 freezes before prefiller p3 exists, so
# p3's connection to d3 can never finish its set-up; a request waits in the
# router queue while d3 is placed, removed, and SIGKILLed, and completes on
# d4 once it joins.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
prompt=$(golden_ids "$dir" prompt_ids)
golden16=$(golden_ids "$dir" gen_ids | cut -d, -f1-16)
golden8=$(echo "$golden16" | cut -d, -f1-8)
TIMEOUT_MS=1500
ROUTER_FLAGS=(--heartbeat-ms 100 --worker-timeout-ms $TIMEOUT_MS --queue-timeout-ms 30000)
DFLAGS="--orphan-release-ms 3000"

# complete FILE CODEFILE N: the response is HTTP 200 with the first N golden
# tokens, or an explicit OpenAI error body (exactly one of the two).
outcome() {
    python3 - "$1" "$(cat "$2" 2>/dev/null)" "$3" <<'EOF'
import json, sys
path, code, want = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    j = json.load(open(path))
except Exception:
    print("malformed: HTTP", code, open(path).read()[:200] if code else "no response"); sys.exit()
if code == "200" and "error" not in j:
    got = ",".join(map(str, j["choices"][0]["token_ids"]))
    print("complete" if got == want else "wrong tokens " + got)
elif code != "200" and set(j) == {"error"} and j["error"].get("message"):
    print("error", j["error"]["message"])
else:
    print("malformed: HTTP", code, json.dumps(j)[:200])
EOF
}

alive() { kill -0 "$(pid_of "$1")" 2>/dev/null && ! grep -qE "Assertion|Fatal:|ERROR: AddressSanitizer" "$CLUSTER_TMP/$1.log"; }

# ---------------------------------------------------------------- phase 1
PREFILLER_ID=p1 DECODER_ID=d1 PREFILLER_FLAGS="--transfer-timeout-ms 500" DECODER_FLAGS=$DFLAGS \
    cluster_start "$dir" "${ROUTER_FLAGS[@]}" || cluster_finish
CLUSTER_NAMES[1]=p1
CLUSTER_NAMES[2]=d1
mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/p1.log"
mv "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/d1.log"

kill -STOP "$(pid_of p1)"
curl -s --max-time 60 -o "$CLUSTER_TMP/r1.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}" \
    "$URL/v1/completions" >"$CLUSTER_TMP/r1.code" &
cpid=$!
st=""
for _ in $(seq 1 100); do
    st=$(timeout 10 "$BIN/tandem-cli" status --rpc "$RPC" 2>&1)
    echo "$st" | grep -qE '^ +prefiller +p1 .*in_flight=1 ' && break
    sleep 0.05
done
echo "$st" | grep -qE '^ +prefiller +p1 .*in_flight=1 '
check "phase 1: d1 reserved the pages, the prefill waits at frozen p1" $? "$st"
start_worker decoder d2 $DFLAGS
wait_health 1 2
check "phase 1: a second decoder registers" $? "$(curl -s "$URL/healthz")"
kill -STOP "$(pid_of d1)"
kill -CONT "$(pid_of p1)"
wait "$cpid"
o=$(outcome "$CLUSTER_TMP/r1.json" "$CLUSTER_TMP/r1.code" "$golden16")
[ "$o" = complete ]
check "phase 1: the push into frozen d1 fails and the request completes on d2" $? "$o" \
    "$(grep -E 'placing|failed|dropping' "$CLUSTER_TMP/router.log" | tail -3)"
wait_health 1 1 100
check "phase 1: frozen d1 is removed from placement" $? "$(curl -s "$URL/healthz")"
alive p1
check "phase 1: p1 is alive after the failed first transfer" $? "$(tail -5 "$CLUSTER_TMP/p1.log")"
kill -CONT "$(pid_of d1)"
wait_health 1 2 100
check "phase 1: d1 runs again and is admitted again" $? "$(curl -s "$URL/healthz")" \
    "$(tail -4 "$CLUSTER_TMP/d1.log")"
pids=()
for i in 0 1 2 3 4 5; do
    curl -s --max-time 60 -o "$CLUSTER_TMP/a.$i" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" \
        "$URL/v1/completions" >"$CLUSTER_TMP/a.$i.code" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
bad=()
for i in 0 1 2 3 4 5; do
    o=$(outcome "$CLUSTER_TMP/a.$i" "$CLUSTER_TMP/a.$i.code" "$golden8")
    [ "$o" = complete ] || bad+=("$i: $o")
done
[ ${#bad[@]} -eq 0 ]
check "phase 1: requests after d1's return all complete" $? "${bad[@]:-}"
alive p1 && alive d1 && alive d2
check "phase 1: no worker died" $? "$(grep -hE 'Assertion|Fatal' "$CLUSTER_TMP"/*.log | head -3)"
cluster_stop 1

# ---------------------------------------------------------------- phase 2
mv "$CLUSTER_TMP/router.log" "$CLUSTER_TMP/router1.log"
PREFILLER_ID=p2 DECODER_ID=d3 PREFILLER_FLAGS="--transfer-timeout-ms 500" DECODER_FLAGS=$DFLAGS \
    cluster_start "$dir" "${ROUTER_FLAGS[@]}" || cluster_finish
CLUSTER_NAMES[1]=p2
CLUSTER_NAMES[2]=d3
mv "$CLUSTER_TMP/prefiller.log" "$CLUSTER_TMP/p2.log"
mv "$CLUSTER_TMP/decoder.log" "$CLUSTER_TMP/d3.log"
# p2 leaves (drains), so the next prefiller's first connection is the one
# that meets frozen d3.
kill -TERM "$(pid_of p2)"
wait "$(pid_of p2)"
p2rc=$?
forget p2
[ "$p2rc" -eq 0 ] && wait_health 0 1
check "phase 2: p2 drains, leaves and exits 0" $? "exit $p2rc $(curl -s "$URL/healthz")" \
    "$(grep -hE 'Assertion|Fatal' "$CLUSTER_TMP/p2.log" | head -2)"
kill -STOP "$(pid_of d3)"
start_worker prefiller p3 --transfer-timeout-ms 500
wait_health 1 1
check "phase 2: p3 registers while d3 is frozen" $? "$(curl -s "$URL/healthz")"
curl -s --max-time 60 -o "$CLUSTER_TMP/r2.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}" \
    "$URL/v1/completions" >"$CLUSTER_TMP/r2.code" &
cpid=$!
wait_health 1 0 100
check "phase 2: frozen d3 is removed from placement" $? "$(curl -s "$URL/healthz")"
alive p3
check "phase 2: p3 is alive after d3's removal" $? "$(tail -5 "$CLUSTER_TMP/p3.log")"
kill -KILL "$(pid_of d3)"
forget d3
start_worker decoder d4 $DFLAGS
wait "$cpid"
o=$(outcome "$CLUSTER_TMP/r2.json" "$CLUSTER_TMP/r2.code" "$golden16")
[ "$o" = complete ]
check "phase 2: the queued request completes on d4" $? "$o" \
    "$(grep -E 'placing|failed|dropping' "$CLUSTER_TMP/router.log" | tail -3)"
alive p3 && alive d4
check "phase 2: no worker died" $? "$(grep -hE 'Assertion|Fatal' "$CLUSTER_TMP"/*.log | head -3)"
cluster_finish
