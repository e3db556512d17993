#!/usr/bin/env bash
# tandem-servebench's accounting, never its timings:
#  1. Against a scripted fake server (servebench_fake_server.py): the known
#     outcomes (ok, several ids in a chunk, text chunks without ids, HTTP
#     error, error event, usage that disagrees with the ids, no [DONE], a
#     stream the time bound aborts, requests never sent), the token totals,
#     and the sample counts of each distribution (ITL over chunk gaps, not
#     tokens); then the whole report recomputed from the trace
#     (servebench_ref.py, an independent Python implementation).
#  2. Against a real cluster (router + prefiller + decoder, gpt_oss_tiny):
#     a concurrency sweep with token-id prompts and a Poisson-rate run with
#     text prompts over the chat API, lengths drawn from a file of pairs; every figure of the JSON recomputed
#     from the trace, exact output/prompt token counts, and the router's own
#     counters (requests ok, tokens streamed) equal to the report's totals.
#     The JSON, the table, the SVG plot and the stage breakdown exist.
#  3. tests/gpu/serve_bench.sh (the GPU step) with DEVICE=cpu, shortened.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
SB=$BIN/tandem-servebench
PY=python3
T=$CLUSTER_TMP

# --- 1. the fake server ---------------------------------------------------
$PY tests/integration/servebench_fake_server.py "$T/fake.port" >"$T/fake.log" 2>&1 &
FAKE=$!
CLUSTER_PIDS+=("$FAKE")
CLUSTER_NAMES+=(fake)
for _ in $(seq 1 100); do [ -s "$T/fake.port" ] && break; sleep 0.05; done
FURL=http://127.0.0.1:$(cat "$T/fake.port" 2>/dev/null)
# 10 requests one at a time: the script has 8 answers; the 8th never ends,
# so the 5 s bound aborts it and the last two are never sent.
timeout 60 "$SB" --url "$FURL" --model fake --input-len 3-9 --output-len 3 --vocab 100 \
    --concurrency 1 --requests 10 --point-limit-s 5 --slo-ttft-ms 60000 \
    --json "$T/fake.json" --trace "$T/fake.trace" >"$T/fake.out" 2>"$T/fake.err"
rc=$?
# lost/malformed requests make the exit status 1; here two are malformed by design
[ "$rc" = 1 ]
check "fake server: the run ends (exit 1: two streams are malformed by design)" $? "exit $rc" \
    "$(tail -5 "$T/fake.err")"
got=$($PY - "$T/fake.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))["points"][0]
o = p["outcomes"]
print(o["ok"], o["http_error"], o["stream_error"], o["malformed"], o["lost"], o["aborted"],
      o["not_sent"], p["output_tokens"], p["ttft_ms"]["n"], p["itl_ms"]["n"], p["tpot_ms"]["n"],
      p["e2e_ms"]["n"], p["good_requests"], p["ttft_streamed_ms"]["n"], p["itl_streamed_ms"]["n"],
      p["streamed_output_tokens"])
EOF
)
# ok http stream malformed lost aborted not_sent | out tokens | ttft itl tpot e2e samples | good |
# with the aborted stream (one id received): ttft itl samples, tokens
[ "$got" = "3 1 1 2 0 1 2 9 3 5 3 3 3 4 5 10" ]
check "fake server: outcomes, token totals and sample counts are the scripted ones" $? \
    "got  ok http stream malformed lost aborted not_sent out ttft itl tpot e2e good streamed: $got" \
    "want 3 1 1 2 0 1 2 9 3 5 3 3 3 4 5 10"
$PY tests/integration/servebench_ref.py "$T/fake.trace" "$T/fake.json" >"$T/fake.ref" 2>&1
check "fake server: every figure recomputed from the trace" $? "$(head -8 "$T/fake.ref")"
kill "$FAKE" 2>/dev/null
wait "$FAKE" 2>/dev/null
CLUSTER_PIDS=()
CLUSTER_NAMES=()

# --- 2. a real cluster ------------------------------------------------------
fx=gpt_oss_tiny
cluster_start "tests/fixtures/$fx" --tokenizer bytes || cluster_finish
before=$(curl -s "$URL/metrics")
timeout 120 "$SB" --url "$URL" --model "$fx" --sweep-concurrency 1,4 --per-client 3 \
    --input-len 4-40 --output-len 2-12 --vocab 512 --seed 7 --slo-ttft-ms 2000 --slo-itl-ms 200 \
    --gpus 2 --usd-per-gpu-hour 2.5 --metrics-url "$URL/metrics" --label "tiny sweep" \
    --json "$T/sweep.json" --trace "$T/sweep.trace" --svg "$T/sweep.svg" \
    >"$T/sweep.out" 2>"$T/sweep.err"
rc=$?
after=$(curl -s "$URL/metrics")
sed 's/^/# /' "$T/sweep.out"
check "cluster sweep 1,4: exit 0" $rc "$(tail -5 "$T/sweep.err")"
$PY tests/integration/servebench_ref.py "$T/sweep.trace" "$T/sweep.json" --expect-exact-output \
    >"$T/sweep.ref" 2>&1
check "cluster sweep: every figure recomputed from the trace; exact token counts" $? \
    "$(head -8 "$T/sweep.ref")"
# The router's own counters: requests ok and tokens streamed during the run.
counters() {
    echo "$1" | awk '/^tandem_requests_total\{api="openai",outcome="ok"\}/ {r = $2}
                     /^tandem_output_tokens_total / {t = $2} END {print r + 0, t + 0}'
}
read -r r0 t0 <<<"$(counters "$before")"
read -r r1 t1 <<<"$(counters "$after")"
mine=$($PY -c 'import json,sys; ps=json.load(open(sys.argv[1]))["points"]
print(sum(p["completed"] for p in ps), sum(p["output_tokens"] for p in ps))' "$T/sweep.json")
[ "$mine" = "$((r1 - r0)) $((t1 - t0))" ] && [ "${mine% *}" = 15 ]
check "cluster sweep: 15 requests, and the router counted the same requests and tokens" $? \
    "report: $mine" "router: $((r1 - r0)) $((t1 - t0))"
awk '/^conc /{f++; next} f == 1 && /^(1|4) /{n++} END{exit n != 2}' "$T/sweep.out" &&
    grep -q 'where the time goes' "$T/sweep.out" &&
    $PY -c 'import json,sys; ps=json.load(open(sys.argv[1]))["points"]
assert [p["concurrency"] for p in ps] == [1, 4]
for p in ps:
    s = p["stages_mean_ms"]; c = p["stages_count"]
    assert c["prefill"] == p["completed"] and c["kv_transfer"] == p["completed"], c
    assert c["router_ttft"] == p["completed"], c
    assert s["prefill"] > 0 and s["router_ttft"] >= s["prefill"], s
    # every request passes each stage once, and the stages up to the first
    # token add up to the router TTFT (both are means over the same requests)
    stages = ["stage_router", "stage_admission", "stage_prefill_queue", "stage_prefill",
              "stage_kv_transfer"]
    for k in stages + ["stage_first_decode"]:
        assert c[k] == p["completed"], (k, c)
    total = sum(s[k] for k in stages)
    assert abs(total - s["router_ttft"]) <= 0.01 * s["router_ttft"] + 0.5, (total, s)' "$T/sweep.json" \
        >"$T/stages.err" 2>&1
check "cluster sweep: a table row per point and the stage breakdown (one prefill and one KV push per request, the stages add up to the router TTFT)" $? \
    "$(grep -A4 '^conc' "$T/sweep.out" | head -8)" "$(tail -3 "$T/stages.err")"
$PY - "$T/sweep.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
lines = root.findall(".//" + ns + "polyline")
texts = [t.text for t in root.iter(ns + "text")]
assert root.tag == ns + "svg", root.tag
assert len(lines) == 8, len(lines)          # 4 series x 2 panels
for name in ("TTFT p50", "TTFT p99", "ITL p50", "ITL p99"):
    assert name in texts, name
for l in lines:
    assert len(l.get("points").split()) == 2  # a vertex per point
EOF
check "cluster sweep: the SVG parses, 4 series x 2 panels, a vertex per point" $? \
    "$(grep -c polyline "$T/sweep.svg") polylines"

printf '# ShareGPT-like pairs: input output\n5 3\n12,6\n\n30 1  # one token: no TPOT\n' >"$T/pairs.txt"
timeout 120 "$SB" --url "$URL" --model "$fx" --api chat --prompt text --rate 20 --requests 8 \
    --max-concurrency 3 --lengths-file "$T/pairs.txt" --seed 3 --slo-tpot-ms 1000 \
    --slo-e2e-ms 30000 --json "$T/rate.json" --trace "$T/rate.trace" \
    >"$T/rate.out" 2>"$T/rate.err"
check "chat, text prompts, Poisson rate 20/s capped at 3 in flight: exit 0" $? \
    "$(tail -5 "$T/rate.err")"
$PY tests/integration/servebench_ref.py "$T/rate.trace" "$T/rate.json" >"$T/rate.ref" 2>&1 &&
    $PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["points"][0]
assert p["rate"] == 20 and p["completed"] == 8, p["outcomes"]
rows = [json.loads(l) for l in open(sys.argv[2])]
assert all(r["completion_tokens"] == r["output_len"] for r in rows), rows
assert all((r["input_len"], r["output_len"]) in ((5, 3), (12, 6), (30, 1)) for r in rows), rows
sends = sorted(r["t_send"] for r in rows)
assert sends[-1] > sends[0], sends' "$T/rate.json" "$T/rate.trace"
check "chat run, lengths from a pairs file: 8 completed, usage counts = max_tokens, every figure recomputed from the trace" $? \
    "$(head -8 "$T/rate.ref")"

"$SB" --url "$URL" --model "$fx" --api chat >/dev/null 2>"$T/usage.err"
[ $? = 2 ] && grep -q 'text prompts' "$T/usage.err"
check "chat with token-id prompts is a usage error (exit 2)" $? "$(cat "$T/usage.err")"
"$SB" --help | grep -q -- '--sweep-concurrency'
check "--help lists the sweep options" $?
cluster_stop 1

# --- 3. the GPU step's script, on the CPU with tiny shapes -----------------
# tests/gpu/serve_bench.sh runs once, unattended, on the H200: its control
# flow (workers with --synthetic weights, the sweeps, the disaggregation
# pair, the summary) is run here, shortened.
DEVICE=cpu OUT="$T/serve" BIN_DIR="$BIN" CONC=1,2 WORKLOADS="32/8 48/4" SEND_S=1 POINT_S=3 \
    DIS_CONC=2 DIS_WORKLOAD=16/16 LONG=256 BUDGET_S=100 timeout 120 bash tests/gpu/serve_bench.sh \
    >"$T/serve.out" 2>&1
rc=$?
# the summary's rows (ok/sent in the third column), then the time
# breakdown's (a mean there); the KV over shared memory (--kv-same-host shm)
[ $rc = 0 ] && [ "$(grep -cE '^\| (32/8|48/4) \| [12] \| [0-9]+/[0-9]+ \|' "$T/serve.out")" = 4 ] &&
    [ "$(grep -cE '^\| (32/8|48/4) \| [12] \| [0-9.]+ \|' "$T/serve.out")" = 4 ] &&
    grep -qE '^disaggregation: decode ITL p99 .* ratio [0-9.]+' "$T/serve.out" &&
    [ -s "$T/serve/serve_32_8.svg" ] && [ -s "$T/serve/serve_48_4.json" ] &&
    grep -q 'model on cpu' "$T/serve/prefiller.log" &&
    grep -q 'connection ready .*sysv.*same host: shared memory' "$T/serve/prefiller.log"
check "tests/gpu/serve_bench.sh with DEVICE=cpu: workers on --synthetic weights, 2 sweeps, the disaggregation ratio, the summary and breakdown tables, KV over shared memory" $? \
    "exit $rc" "$(tail -12 "$T/serve.out")"
cluster_finish
