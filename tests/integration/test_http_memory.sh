#!/usr/bin/env bash
# The router's memory under large bodies, measured in /proc/PID/status
# (a resource check, not a timing): a router alone with
# --http-memory-budget-mb 192 gets
#   - one 15 MB text-prompt body (answered 400): its peak (VmHWM) grows by
#     at most 7 times the body (the body, the parse, the text copied out);
#   - 16 of them at once, half text prompts (400) and half 15 MB arrays of
#     token ids too dense to parse (413): each ends in its 400 / 413, or in
#     503 with Retry-After (budget in use) and then, retried, in its 400 /
#     413; the peak stays within the budget (plus 64 MB for the process's
#     own growth), and afterwards the resident set is back within 32 MB of
#     where it started.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

budget=192
# Under AddressSanitizer freed memory sits in its quarantine (256 MB) and
# malloc's settings do not apply: the bounds below measure glibc's malloc,
# so that build checks only the answers.
sanitized=0
ldd "$BIN/tandem-router" 2>/dev/null | grep -q libasan && sanitized=1
# bound NAME COND...: a memory bound, skipped under the sanitizer.
bound() {
    local name=$1
    shift
    if [ "$sanitized" = 1 ]; then
        ok "$name # SKIP sanitizer allocator"
    else
        "$@"
        check "$name" $? "base ${base} kB peak ${peak:-$one} kB now $(kb VmRSS) kB"
    fi
}
"$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --port-file "$CLUSTER_TMP/ports" \
    --http-memory-budget-mb $budget >>"$CLUSTER_TMP/router.log" 2>&1 &
rpid=$!
CLUSTER_PIDS+=($rpid)
CLUSTER_NAMES+=(router)
for _ in $(seq 1 100); do
    [ -s "$CLUSTER_TMP/ports" ] && break
    sleep 0.05
done
HTTP=$(port_of http_port)
kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$rpid/status"; }
curl -s --max-time 10 "http://127.0.0.1:$HTTP/healthz" >/dev/null
base=$(kb VmRSS)

cat >"$CLUSTER_TMP/bodies.py" <<'EOF'
import http.client, sys, threading, time
port, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
size = 15 << 20
text = ('{"model":"m","prompt":"%s","temperature":-1}' % ("a" * (size - 100))).encode()
dense = ('{"model":"m","prompt":[' + ",".join(["1"] * ((size - 40) // 2)) + ']}').encode()
want = {0: 400, 1: 413}
res = [None] * n
def go(i):
    body, retries, no_retry_after = (text if i % 2 == 0 else dense), 0, 0
    for _ in range(120):  # bounded: 503 means "retry after 1 s"
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            status, ra = r.status, r.getheader("Retry-After")
            r.read()
        except OSError as e:
            status, ra = "error %s" % e, None
        c.close()
        if status != 503:
            break
        retries += 1
        no_retry_after += ra != "1"
        time.sleep(0.2)
    res[i] = (i, status, want[i % 2], retries, no_retry_after)
ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
with open(out, "w") as f:
    for r in res:
        f.write("%d %s %d %d %d\n" % r)
EOF
python3 "$CLUSTER_TMP/bodies.py" "$HTTP" 1 "$CLUSTER_TMP/one.txt"
one=$(kb VmHWM)
read -r _ status _ _ _ <"$CLUSTER_TMP/one.txt"
[ "$status" = 400 ]
check "one 15 MB body: 400" $? "$(cat "$CLUSTER_TMP/one.txt")"
bound "one 15 MB body: peak +$(((one - base) / 1024)) MB <= 7 x 15 MB" \
    test $((one - base)) -le $((7 * 15 * 1024))

python3 "$CLUSTER_TMP/bodies.py" "$HTTP" 16 "$CLUSTER_TMP/16.txt"
peak=$(kb VmHWM)
awk '$2 != $3 || $5 != 0 {bad = 1} END {exit bad}' "$CLUSTER_TMP/16.txt"
check "16 concurrent 15 MB bodies: each its 400 / 413 (503s had Retry-After: 1)" $? \
    "$(cat "$CLUSTER_TMP/16.txt")"
retried=$(awk '$4 > 0' "$CLUSTER_TMP/16.txt" | wc -l)
[ "$retried" -gt 0 ]
check "the budget was in use: $retried of them were told 503 first" $? "$(cat "$CLUSTER_TMP/16.txt")"
bound "peak +$(((peak - base) / 1024)) MB <= budget $budget MB + 64 MB" \
    test $((peak - base)) -le $(((budget + 64) * 1024))
after=$(kb VmRSS)
bound "afterwards the resident set is back: +$(((after - base) / 1024)) MB <= 32 MB" \
    test $((after - base)) -le $((32 * 1024))
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/healthz")
[ "$code" = 200 ]
check "the router still serves" $? "HTTP $code"

cluster_finish
