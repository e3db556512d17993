#!/usr/bin/env bash
# A decoder that freezes (SIGSTOP) while a prefiller's first UCX connection
# to it is new, then comes back (SIGCONT) or dies (SIGKILL). UCX 1.13 aborts
# processes whose endpoints are closed at the wrong moment (docs/RELIABILITY.md,
# "UCX connection set-up (wire-up)"), so this checks with real processes
# that no prefiller or decoder dies, that every request ends in exactly one
# outcome, here always the golden tokens (an explicit error or a malformed
# response is reported as what it is), and that the frozen decoder is
# removed and, once it runs again, admitted again.
#
# Phase 1, the first transfer: p1 holds an assignment (frozen) while d1
# reserves the pages; d1 freezes; p1 runs again and pushes into frozen d1,
# which fails (the connection set-up does not finish, or the transfer times
# out); the request completes on d2. d1 is removed, resumes, registers
# again and serves requests. Phase 1b is the same once p1b's connection to
# d1b is set up, so the push starts and times out with data in flight.
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

# outcome FILE CODEFILE WANT: "complete" for HTTP 200 with exactly the
# tokens WANT, "error MESSAGE" for an explicit OpenAI error body, otherwise
# what is wrong with the response.
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

# first_transfer PHASE P D D2 READY: the first-transfer scenario with
# prefiller P, decoder D (frozen) and decoder D2 (joins, takes the request).
# READY=1 waits until P reports its connection to D set up before freezing
# (the push then starts and times out with data in flight); READY=0 freezes
# P at once, so its connection to D is usually still being set up when D
# freezes (the push waits for it and fails without sending).
first_transfer() {
    local ph=$1 P=$2 D=$3 D2=$4 ready=$5 st o i pid cpid
    PREFILLER_ID=$P DECODER_ID=$D PREFILLER_FLAGS="--transfer-timeout-ms 500" DECODER_FLAGS=$DFLAGS \
        cluster_start "$dir" "${ROUTER_FLAGS[@]}" || cluster_finish
    name_workers "$P" "$D"
    if [ "$ready" = 1 ]; then
        for _ in $(seq 1 100); do
            grep -q "decoder $D: connection ready" "$CLUSTER_TMP/$P.log" && break
            sleep 0.05
        done
        grep -q "decoder $D: connection ready" "$CLUSTER_TMP/$P.log"
        check "$ph: $P connected to $D when the router introduced it" $? "$(tail -3 "$CLUSTER_TMP/$P.log")"
    fi
    kill -STOP "$(pid_of "$P")"
    post_bg 60 "$(greedy_req "$fx" "$prompt" 16)" "$CLUSTER_TMP/$ph.json" "$CLUSTER_TMP/$ph.code"
    cpid=$!
    st=$(wait_in_flight "$P")
    check "$ph: $D reserved the pages, the prefill waits at frozen $P" $? "$st"
    start_worker decoder "$D2" $DFLAGS
    # decoders only: frozen $P may already be past --worker-timeout-ms and
    # out of the router's table (it registers again once it runs), which
    # on a slow machine (ASan) happens before $D2 is up
    for _ in $(seq 1 100); do
        curl -s "$URL/healthz" | grep -qF '"decoders":2}' && break
        sleep 0.1
    done
    curl -s "$URL/healthz" | grep -qF '"decoders":2}'
    check "$ph: a second decoder registers" $? "$(curl -s "$URL/healthz")"
    kill -STOP "$(pid_of "$D")"
    kill -CONT "$(pid_of "$P")"
    wait "$cpid"
    o=$(outcome "$CLUSTER_TMP/$ph.json" "$CLUSTER_TMP/$ph.code" "$golden16")
    [ "$o" = complete ]
    check "$ph: the push into frozen $D fails and the request completes on $D2" $? "$o" \
        "$(grep -E 'placing|failed|dropping' "$CLUSTER_TMP/router.log" | tail -3)"
    wait_health 1 1 100
    check "$ph: frozen $D is removed from placement" $? "$(curl -s "$URL/healthz")"
    alive "$P"
    check "$ph: $P is alive after the failed first transfer" $? "$(tail -5 "$CLUSTER_TMP/$P.log")"
    kill -CONT "$(pid_of "$D")"
    wait_health 1 2 100
    check "$ph: $D runs again and is admitted again" $? "$(curl -s "$URL/healthz")" \
        "$(tail -4 "$CLUSTER_TMP/$D.log")"
    local pids=()
    for i in 0 1 2 3 4 5; do
        curl -s --max-time 60 -o "$CLUSTER_TMP/a.$i" -w '%{http_code}' -H 'Content-Type: application/json' \
            -d "{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}" \
            "$URL/v1/completions" >"$CLUSTER_TMP/a.$i.code" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    local bad=()
    for i in 0 1 2 3 4 5; do
        o=$(outcome "$CLUSTER_TMP/a.$i" "$CLUSTER_TMP/a.$i.code" "$golden8")
        [ "$o" = complete ] || bad+=("$i: $o")
    done
    [ ${#bad[@]} -eq 0 ]
    check "$ph: requests after $D's return all complete" $? "${bad[@]:-}"
    alive "$P" && alive "$D" && alive "$D2"
    check "$ph: no worker died" $? "$(grep -hE 'Assertion|Fatal' "$CLUSTER_TMP"/*.log | head -3)"
    cluster_stop 1
    mv "$CLUSTER_TMP/router.log" "$CLUSTER_TMP/router-$ph.log"
}

# ---------------------------------------------------------------- phase 1
first_transfer "phase 1" p1 d1 d2 0
# ---------------------------------------------------------------- phase 1b
first_transfer "phase 1b" p1b d1b d2b 1

# ---------------------------------------------------------------- phase 2
PREFILLER_ID=p2 DECODER_ID=d3 PREFILLER_FLAGS="--transfer-timeout-ms 500" DECODER_FLAGS=$DFLAGS \
    cluster_start "$dir" "${ROUTER_FLAGS[@]}" || cluster_finish
name_workers p2 d3
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
post_bg 60 "$(greedy_req "$fx" "$prompt" 16)" "$CLUSTER_TMP/r2.json" "$CLUSTER_TMP/r2.code"
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
