#!/usr/bin/env bash
# Autoscaling on one machine, end to end: tandem-router with the local
# scaler starts real tandem-prefiller/tandem-decoder processes (min 1 each);
# a real Prometheus scrapes the router's /metrics on loopback; headless
# Chromium keeps the /dashboard page open. Under a bounded synthetic load
# (tests/integration/load_gen.py):
#   1. long prompts from 3 clients: arriving input tokens/s exceed one
#      prefiller's share (a low --autoscale-prefill-prior-tps), so the scaler
#      adds a prefiller while the decode formula stays at 1 (3 sequences,
#      max batch 4);
#   2. short prompts, long outputs from 8 clients: 8 sequences over max
#      batch 4, so it adds a decoder (the open dashboard shows it);
#   3. the heavy load stops (a trickle continues, so requests run while
#      workers drain): both pools go back to 1, the extra workers drain
#      and exit 0;
# every request gets a complete response, and PromQL over Prometheus's HTTP
# API returns the router's series (pools, autoscaler, relayed worker series).
# Short windows and cooldowns (flags) keep it to well under a minute.
. "$(dirname "$0")/cluster_lib.sh"
fx=gpt_oss_tiny
dir=tests/fixtures/$fx
logs=${TANDEM_BUILD:-build}/test-logs
mkdir -p "$logs"
PIDS=()
stop_helpers() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
}
trap 'stop_helpers; cluster_cleanup' EXIT

for tool in prometheus chromium python3 curl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        not_ok "$tool is installed (make deps)"
        cluster_finish
    fi
done

# ---- the router with the local scaler --------------------------------------
rm -f "$CLUSTER_TMP/ports"
"$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --metrics-port 0 \
    --port-file "$CLUSTER_TMP/ports" --heartbeat-ms 200 --worker-timeout-ms 5000 \
    --scaler local --scaler-local-model "$dir" --scaler-local-drain-timeout-s 60 \
    --autoscale-interval-s 0.5 \
    --autoscale-prefill-prior-tps 300 --autoscale-prefill-halflife-s 100000 \
    --autoscale-prefill-backlog-drain-s 0 \
    --autoscale-decode-max-batch 4 --autoscale-decode-headroom 0 \
    --autoscale-prefill-max 2 --autoscale-decode-max 2 \
    --autoscale-prefill-up-window-s 1 --autoscale-decode-up-window-s 1 \
    --autoscale-prefill-down-window-s 3 --autoscale-decode-down-window-s 3 \
    --autoscale-prefill-up-cooldown-s 0 --autoscale-decode-up-cooldown-s 0 \
    --autoscale-prefill-down-cooldown-s 2 --autoscale-decode-down-cooldown-s 2 \
    >>"$CLUSTER_TMP/router.log" 2>&1 &
CLUSTER_PIDS+=($!)
CLUSTER_NAMES+=(router)
for _ in $(seq 1 100); do
    grep -q metrics_port "$CLUSTER_TMP/ports" 2>/dev/null && break
    sleep 0.05
done
HTTP=$(port_of http_port)
MPORT=$(port_of metrics_port)
URL=http://127.0.0.1:$HTTP
MURL=http://127.0.0.1:$MPORT

metric() { # metric 'name{labels}' -> value from the router's /metrics
    curl -s "$MURL/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}
wait_metric() { # wait_metric 'name{labels}' VALUE SECONDS
    local i v
    for i in $(seq 1 $(($3 * 10))); do
        v=$(metric "$1")
        [ "$v" = "$2" ] && return 0
        sleep 0.1
    done
    echo "# $1 = '$v', wanted $2" >&2
    return 1
}

wait_metric 'tandem_pool_ready_replicas{pool="prefill"}' 1 60 &&
    wait_metric 'tandem_pool_ready_replicas{pool="decode"}' 1 60
check "the local scaler starts min replicas: one prefiller and one decoder register" $? \
    "$(tail -5 "$CLUSTER_TMP/router.log")"

# ---- Prometheus scraping the router on loopback ---------------------------
PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$CLUSTER_TMP/prom"
cat >"$CLUSTER_TMP/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tandem
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
EOF
prometheus --config.file="$CLUSTER_TMP/prom/prometheus.yml" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --storage.tsdb.path="$CLUSTER_TMP/prom/data" \
    >"$CLUSTER_TMP/prometheus.log" 2>&1 &
PIDS+=($!)
PROM=http://127.0.0.1:$PROM_PORT
promql() { # promql QUERY PYTHON-CHECK: the check sees r (the result list)
    curl -s -G "$PROM/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json,sys; j=json.load(sys.stdin); r=j["data"]["result"]; sys.exit(0 if j["status"]=="success" and ('"$2"') else 1)' 2>/dev/null
}
# promql_wait QUERY PYTHON-CHECK: promql until it holds, for at most 20 s (a
# value the router already has reaches Prometheus with a later scrape).
promql_wait() {
    for _ in $(seq 1 100); do
        promql "$1" "$2" && return 0
        sleep 0.2
    done
    return 1
}

# The router's /metrics is valid exposition text (promtool's own parser and lint).
curl -s "$MURL/metrics" >"$CLUSTER_TMP/metrics.txt"
promtool check metrics <"$CLUSTER_TMP/metrics.txt" >"$CLUSTER_TMP/promtool.out" 2>&1
check "promtool accepts the router's /metrics (cluster view)" $? "$(head -5 "$CLUSTER_TMP/promtool.out")"

# ---- the dashboard, open in headless Chromium -----------------------------
python3 tests/integration/dashboard_cdp.py "$MURL/dashboard" --timeout 120 \
    --screenshot "$logs/dashboard-autoscale.png" \
    --step "Number(document.body.dataset.updates) >= 2 && document.getElementById('decode-ready').textContent === '1' && document.getElementById('prefill-ready').textContent === '1' && document.getElementById('worker-count').textContent === '2'" \
    --step "document.getElementById('decode-ready').textContent === '2' && document.querySelectorAll('#workers tr[data-worker]').length >= 3" \
    --step "(() => { const r = [...document.querySelectorAll('#events tr')].map((x) => x.textContent); return r.length >= 4 && new Set(r).size === r.length; })()" \
    >"$CLUSTER_TMP/cdp.out" 2>&1 &
CDP=$!
PIDS+=($CDP)
for _ in $(seq 1 600); do
    grep -q "step 1" "$CLUSTER_TMP/cdp.out" && break
    kill -0 $CDP 2>/dev/null || break
    sleep 0.1
done
grep -q "step 1 ok" "$CLUSTER_TMP/cdp.out"
check "the dashboard loads in Chromium and shows the live workers (1 prefiller, 1 decoder)" $? \
    "$(cat "$CLUSTER_TMP/cdp.out")"

# ---- 1: prefill load -------------------------------------------------------
load() { # load NAME until-file clients prompt-len max-tokens [load_gen flags...]
    python3 tests/integration/load_gen.py "$URL" "$fx" --until-file "$2" --clients "$3" \
        --prompt-len "$4" --max-tokens "$5" --max-requests 2000 --max-seconds 150 \
        --out "$CLUSTER_TMP/$1.json" "${@:6}" >/dev/null 2>&1
}
load prefill "$CLUSTER_TMP/stop1" 3 1024 2 &
L1=$!
wait_metric 'tandem_pool_ready_replicas{pool="prefill"}' 2 90
check "under input-token load the local scaler adds a prefiller" $? \
    "$(grep -E 'autoscaler|local scaler' "$CLUSTER_TMP/router.log" | tail -5)"
[ "$(metric 'tandem_pool_current_replicas{pool="decode"}')" = 1 ]
check "the decode pool stays at 1 under prefill load (3 sequences, max batch 4)" $? \
    "$(metric 'tandem_pool_current_replicas{pool="decode"}')"
touch "$CLUSTER_TMP/stop1"

# ---- 2: decode load ----------------------------------------------------------
load decode "$CLUSTER_TMP/stop2" 8 4 200 &
L2=$!
wait_metric 'tandem_pool_ready_replicas{pool="decode"}' 2 90
check "with 8 running sequences (max batch 4) the local scaler adds a decoder" $? \
    "$(grep -E 'autoscaler|local scaler' "$CLUSTER_TMP/router.log" | tail -5)"
for _ in $(seq 1 600); do
    grep -q "step 2" "$CLUSTER_TMP/cdp.out" && break
    kill -0 $CDP 2>/dev/null || break
    sleep 0.1
done
grep -q "step 2 ok" "$CLUSTER_TMP/cdp.out"
check "the open dashboard updates to 2 decoders when the scaler adds one" $? \
    "$(cat "$CLUSTER_TMP/cdp.out")"
for _ in $(seq 1 100); do
    grep -q "step 3" "$CLUSTER_TMP/cdp.out" && break
    kill -0 $CDP 2>/dev/null || break
    sleep 0.1
done
grep -q "step 3 ok" "$CLUSTER_TMP/cdp.out"
check "its decisions table lists each scaling action once (incremental polling)" $? \
    "$(cat "$CLUSTER_TMP/cdp.out")"
# Let the new decoder take part before the load stops.
sleep 1
touch "$CLUSTER_TMP/stop2"

# ---- 3: the load stops (a trickle goes on): back to one of each ------------
# The trickle is paced (0.1 s between requests: under 80 input tokens/s, a
# third of one prefiller's 240), so the prefill pool scales down while it
# runs. Back to back, the plain build served it at ~600 tokens/s, which kept
# 2 prefillers until the trickle ran out of requests (--max-requests, ~27 s).
load trickle "$CLUSTER_TMP/stop3" 1 8 40 --pause-s 0.1 &
L3=$!
wait_metric 'tandem_pool_current_replicas{pool="prefill"}' 1 90 &&
    wait_metric 'tandem_pool_current_replicas{pool="decode"}' 1 90 &&
    wait_metric 'tandem_pool_draining_replicas{pool="prefill"}' 0 90 &&
    wait_metric 'tandem_pool_draining_replicas{pool="decode"}' 0 90 &&
    wait_metric 'tandem_pool_ready_replicas{pool="prefill"}' 1 30 &&
    wait_metric 'tandem_pool_ready_replicas{pool="decode"}' 1 30
check "after the load stops both pools scale back to one replica" $? \
    "$(grep -E 'autoscaler|local scaler' "$CLUSTER_TMP/router.log" | tail -6)"
kill -0 "$L3" 2>/dev/null
check "the trickle was still running when they did (the scale-down did not wait for it to end)" $? \
    "$(cat "$CLUSTER_TMP/trickle.json" 2>&1)"
touch "$CLUSTER_TMP/stop3"
rc=0
for l in $L1 $L2 $L3; do wait $l || rc=1; done
summary=$(cat "$CLUSTER_TMP"/prefill.json "$CLUSTER_TMP"/decode.json "$CLUSTER_TMP"/trickle.json 2>&1)
[ "$rc" = 0 ]
check "no request lost: every request of every phase got a complete response" $? "$summary"
fails=$(curl -s "$MURL/metrics" | awk '$1 ~ /^tandem_requests_total\{/ && $1 !~ /outcome="ok"/ { s += $2 } END { print s + 0 }')
[ "$fails" = 0 ]
check "the router counted no failed, rejected or cancelled request" $? "$fails not ok"
grep -q 'local scaler: prefill worker 1 (pid [0-9]*) drained and exited (status 0)' "$CLUSTER_TMP/router.log" &&
    grep -q 'local scaler: decode worker 1 (pid [0-9]*) drained and exited (status 0)' "$CLUSTER_TMP/router.log" &&
    ! grep -q 'killing it' "$CLUSTER_TMP/router.log"
check "the removed prefiller and decoder drained, deregistered and exited 0" $? \
    "$(grep -E 'local scaler|deregistered' "$CLUSTER_TMP/router.log" | tail -6)"

# The scaling decisions, in order: prefill up before decode up, both down later.
curl -s "$MURL/dashboard/state" >"$CLUSTER_TMP/state.json"
python3 - "$CLUSTER_TMP/state.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
ev = [(e["pool"], e["from"], e["to"]) for e in s["events"] if e["to"] >= 0]
ups = [e for e in ev if e[2] > e[1] and e[1] >= 1]
downs = [e for e in ev if e[2] < e[1]]
assert ups[:2] == [("prefill", 1, 2), ("decode", 1, 2)], ev
assert ("prefill", 2, 1) in downs and ("decode", 2, 1) in downs, ev
assert all(p["scaler_errors"] == 0 for p in s["pools"].values()), s["pools"]
EOF
check "decisions: prefill 1->2, then decode 1->2, then each back 2->1, no scaler error" $? \
    "$(python3 -c 'import json,sys; print([(e["pool"],e["from"],e["to"]) for e in json.load(open(sys.argv[1]))["events"]])' "$CLUSTER_TMP/state.json")"

# Incremental polling: asking with the newest point's time returns nothing old.
python3 - "$CLUSTER_TMP/state.json" "$MURL" <<'EOF'
import json, sys, urllib.request
s = json.load(open(sys.argv[1]))
last = s["history"][-1]["t"]
again = json.load(urllib.request.urlopen("%s/dashboard/state?since=%s" % (sys.argv[2], last)))
assert all(h["t"] > last for h in again["history"]), (last, again["history"][:1])
assert all(e["t"] > last for e in again["events"]), again["events"]
EOF
check "/dashboard/state?since=T returns only newer points and decisions" $?

# ---- PromQL over what Prometheus scraped -----------------------------------
ok_prom=1
for _ in $(seq 1 100); do
    promql 'tandem_pool_current_replicas{pool="decode"}' 'len(r)==1 and r[0]["value"][1]=="1"' && break
    sleep 0.2
done
promql 'up{job="tandem"}' 'len(r)==1 and r[0]["value"][1]=="1"' || ok_prom=0
check "Prometheus scrapes the router (up == 1)" $((1 - ok_prom)) "$(tail -3 "$CLUSTER_TMP/prometheus.log")"
promql 'tandem_pool_desired_replicas' 'sorted(x["metric"]["pool"] for x in r)==["decode","prefill"]'
check "PromQL: tandem_pool_desired_replicas has a series per pool" $?
promql 'max_over_time(tandem_pool_current_replicas{pool="prefill"}[10m])' 'len(r)==1 and r[0]["value"][1]=="2"' &&
    promql 'max_over_time(tandem_pool_ready_replicas{pool="decode"}[10m])' 'len(r)==1 and r[0]["value"][1]=="2"'
check "PromQL: the scale-up to 2 prefillers and 2 decoders is in Prometheus's history" $?
promql_wait 'sum(tandem_autoscale_actions_total{direction="up"})' 'float(r[0]["value"][1])>=4' &&
    promql_wait 'sum(tandem_autoscale_actions_total{direction="down"})' 'float(r[0]["value"][1])>=2'
check "PromQL: tandem_autoscale_actions_total counts the ups and downs" $? \
    "$(curl -s "$MURL/metrics" | grep '^tandem_autoscale_actions_total')"
promql 'sum(tandem_prefill_input_tokens_total)' 'float(r[0]["value"][1])>0' &&
    promql 'count(count by (worker) (tandem_decode_output_tokens_total))' 'float(r[0]["value"][1])>=1' &&
    promql 'sum(tandem_decode_step_duration_seconds_count)' 'float(r[0]["value"][1])>0' &&
    promql 'tandem_kv_transfer_bytes_total{direction="recv"}' 'len(r)>=1'
check "PromQL: worker series relayed by the router (prefill tokens, decode steps, KV transfer bytes)" $?

stop_helpers
[ -s "$logs/dashboard-autoscale.png" ]
check "a screenshot of the dashboard was taken ($logs/dashboard-autoscale.png)" $?
cluster_finish
