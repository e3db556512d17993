#!/usr/bin/env bash
# One request's KV cache between two processes on this machine, per UCX
# transport choice (`make bench`; docs/PERF.md "KV transfer of one request"):
# a 4096-token prompt of GPT-OSS-20B (24 layers x 8 KV heads x 64 dims x
# (K, V) x bf16 = 201,326,592 bytes; as fp32 rows of 32 dims, the same bytes
# and copies), pages of 16 tokens, scattered page tables. tandem-transfer-peer
# recv verifies every byte; the sender's time runs from submit to the
# receiver's ack. Measures, asserts nothing about speed.
#   TOKENS (4096), REPEAT (3 timed transfers after 1 warm-up), BUILD (build),
#   CASES: ';'-separated "UCX_TLS[+shm]" (+shm: --same-host-shm on both sides)
set -uo pipefail
BUILD=${BUILD:-build}
TOKENS=${TOKENS:-4096}
REPEAT=${REPEAT:-3}
CASES=${CASES:-"tcp,self;tcp,sm,self;tcp,sm,self+shm;tcp,sysv,posix,self+shm"}
PEER=$BUILD/bin/tandem-transfer-peer
[ -x "$PEER" ] || { echo "bench_kv_request: $PEER missing (make all)"; exit 1; }
geom=(--layers 24 --kv-heads 8 --head-dim 32 --page-size 16 --tokens "$TOKENS" --timeout-ms 120000)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-26s %-22s %12s %10s\n' "UCX_TLS" "endpoint" "bytes" "GB/s"
IFS=';' read -r -a cases <<<"$CASES"
status=0
for c in "${cases[@]}"; do
    tls=${c%+shm}
    shm=()
    [ "$tls" != "$c" ] && shm=(--same-host-shm)
    "$PEER" recv --tls "$tls" "${shm[@]}" "${geom[@]}" --repeat $((REPEAT + 1)) >"$tmp/recv" 2>&1 &
    rpid=$!
    ep=""
    for _ in $(seq 1 200); do
        ep=$(sed -n 's/^endpoint //p' "$tmp/recv" | head -1)
        [ -n "$ep" ] && break
        kill -0 "$rpid" 2>/dev/null || break
        sleep 0.05
    done
    if [ -z "$ep" ]; then
        echo "$c: the receiver gave no endpoint: $(tail -2 "$tmp/recv")"; status=1
        kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; continue
    fi
    timeout 200 "$PEER" send --tls "$tls" "${shm[@]}" "${geom[@]}" --connect "$ep" --warmup 1 \
        --repeat "$REPEAT" >"$tmp/send" 2>&1
    src=$?
    timeout 30 tail --pid="$rpid" -f /dev/null
    wait "$rpid"; rrc=$?
    if [ $src -ne 0 ] || [ $rrc -ne 0 ] || ! grep -q "byte exact" "$tmp/recv"; then
        echo "$c: failed (sender $src, receiver $rrc): $(tail -2 "$tmp/send" "$tmp/recv")"
        status=1; continue
    fi
    via=$(sed -n 's/.* bytes via \([^ ]*\) .*(NIC.*/\1/p' "$tmp/send" | head -1)
    read -r bytes gbs < <(sed -n 's/^sent \([0-9]*\) bytes in [0-9.]* s (\([0-9.]*\) GB\/s).*/\1 \2/p' "$tmp/send")
    printf '%-26s %-22s %12s %10s\n' "$c" "$via" "$((bytes / REPEAT))" "$gbs"
done
exit $status
