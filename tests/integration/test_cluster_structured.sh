#!/usr/bin/env bash
# Structured outputs through a real cluster (router + prefiller + decoder,
# workers with --tokenizer like the router's). The fixture model's weights
# are random, so unconstrained it almost never writes JSON:
#  - bytes codec (qwen3_moe_tiny): 200 seeded samples of a json_schema
#    (nested object, $defs/$ref, anyOf, enum, array, string bounds, integer,
#    number, boolean, null) all parse and validate against the schema with
#    Python's jsonschema (an independent validator); the same requests
#    without response_format do not; json_object outputs that end parse as
#    objects; a streamed one's deltas make the same JSON; unsupported
#    schema keywords and tool_choice without a chat format get a 400 naming
#    them.
#  - the Qwen3 vocabulary (a synthetic model of the fixture's shapes with
#    the real 151936-token vocabulary): tool_choice "required" and a named
#    function always yield tool_calls whose arguments validate against the
#    function's parameters; response_format json_schema content validates;
#    tool_choice "none" yields no tool calls.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=qwen3_moe_tiny
# WORKER_EXTRA_FLAGS="--device cuda" runs the same checks on a GPU machine
PREFILLER_FLAGS="--tokenizer bytes ${WORKER_EXTRA_FLAGS:-}" \
    DECODER_FLAGS="--tokenizer bytes --max-batch 32 ${WORKER_EXTRA_FLAGS:-}" \
    cluster_start "tests/fixtures/$fx" --tokenizer bytes || cluster_finish

cat >"$CLUSTER_TMP/schema.json" <<'EOF'
{"type": "object",
 "properties": {
   "name": {"type": "string", "minLength": 1, "maxLength": 10},
   "age": {"type": "integer"},
   "score": {"type": "number"},
   "tags": {"type": "array", "items": {"enum": ["red", "green", 7, null]}, "maxItems": 3},
   "ok": {"type": "boolean"},
   "where": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/point"}]},
   "note": {"type": ["string", "null"], "maxLength": 6}},
 "required": ["name", "age", "score", "tags", "ok", "where", "note"],
 "additionalProperties": false,
 "$defs": {"point": {"type": "object",
                     "properties": {"x": {"type": "integer"}, "y": {"type": "boolean"}},
                     "required": ["x", "y"], "additionalProperties": false}}}
EOF

cat >"$CLUSTER_TMP/drive.py" <<'EOF'
import json, sys
from concurrent.futures import ThreadPoolExecutor
import jsonschema
sys.path.insert(0, "tests/integration")
from chat_post import post_chat

url, model, mode = sys.argv[1], sys.argv[2], sys.argv[3]
schema = json.load(open(sys.argv[4]))

def post(body):
    return post_chat(url, body)

def body(seed, fmt):
    b = {"model": model, "messages": [{"role": "user", "content": "Describe a person as JSON."}],
         "max_tokens": 300, "temperature": 1.0, "seed": seed}
    if fmt:
        b["response_format"] = fmt
    return b

def parses(text, want=None):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    if want:
        try:
            jsonschema.validate(v, want)
        except jsonschema.ValidationError:
            return False
    return True

fmt_schema = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": schema}}
if mode == "schema":
    with ThreadPoolExecutor(16) as ex:
        res = list(ex.map(lambda s: post(body(s, fmt_schema)), range(200)))
    bad = [(i, r) for i, r in enumerate(res)
           if r[0] != 200 or r[1]["choices"][0]["finish_reason"] != "stop"
           or not parses(r[1]["choices"][0]["message"]["content"], schema)]
    for i, r in bad[:3]:
        print("# seed %d: %s" % (i, json.dumps(r)[:600]))
    print("# 200 samples, %d bad; e.g. %s" % (len(bad), res[0][1]["choices"][0]["message"]["content"]))
    sys.exit(1 if bad else 0)
if mode == "unconstrained":
    with ThreadPoolExecutor(16) as ex:
        res = list(ex.map(lambda s: post(body(s, None)), range(40)))
    good = sum(1 for r in res if r[0] == 200 and parses(r[1]["choices"][0]["message"]["content"], schema))
    print("# unconstrained: %d of 40 validate" % good)
    sys.exit(0 if good == 0 else 1)
if mode == "object":
    with ThreadPoolExecutor(16) as ex:
        res = list(ex.map(lambda s: post(body(1000 + s, {"type": "json_object"})), range(30)))
    ended = [r for r in res if r[0] == 200 and r[1]["choices"][0]["finish_reason"] == "stop"]
    bad = [r for r in ended if not isinstance(json.loads(r[1]["choices"][0]["message"]["content"]
                                                         if parses(r[1]["choices"][0]["message"]["content"]) else "null"), dict)]
    cut = [r for r in res if r[0] == 200 and r[1]["choices"][0]["finish_reason"] == "length"]
    print("# json_object: %d ended (%d not an object), %d cut by max_tokens, %d errors"
          % (len(ended), len(bad), len(cut), len(res) - len(ended) - len(cut)))
    sys.exit(0 if ended and not bad and len(ended) + len(cut) == len(res) else 1)
EOF

python3 "$CLUSTER_TMP/drive.py" "$URL" "$fx" schema "$CLUSTER_TMP/schema.json" >"$CLUSTER_TMP/schema.out" 2>&1
check "json_schema: 200 seeded samples parse and validate (jsonschema)" $? "$(cat "$CLUSTER_TMP/schema.out")"
python3 "$CLUSTER_TMP/drive.py" "$URL" "$fx" unconstrained "$CLUSTER_TMP/schema.json" >"$CLUSTER_TMP/unc.out" 2>&1
check "the same requests without response_format do not validate (the model is random)" $? \
    "$(cat "$CLUSTER_TMP/unc.out")"
python3 "$CLUSTER_TMP/drive.py" "$URL" "$fx" object "$CLUSTER_TMP/schema.json" >"$CLUSTER_TMP/obj.out" 2>&1
check "json_object: every output that ends is a JSON object" $? "$(cat "$CLUSTER_TMP/obj.out")"

# streamed: the deltas concatenate to JSON that validates
body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "stream": True, "seed": 5, "max_tokens": 300, "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": json.load(open(sys.argv[2]))}}}))' "$fx" "$CLUSTER_TMP/schema.json")
curl -s -N --max-time 60 -H 'Content-Type: application/json' -d "$body" "$URL/v1/chat/completions" \
    >"$CLUSTER_TMP/stream.txt"
python3 - "$CLUSTER_TMP/stream.txt" "$CLUSTER_TMP/schema.json" <<'EOF'
import json, sys, jsonschema
text, fin = "", None
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        c = json.loads(line[6:])
        for ch in c["choices"]:
            text += ch["delta"].get("content") or ""
            fin = ch.get("finish_reason") or fin
jsonschema.validate(json.loads(text), json.load(open(sys.argv[2])))
assert fin == "stop", fin
EOF
check "json_schema streamed: the deltas make JSON that validates" $? "$(head -c 600 "$CLUSTER_TMP/stream.txt")"

# max_tokens inside the JSON: finish_reason length, as OpenAI does
body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "seed": 5, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": json.load(open(sys.argv[2]))}}}))' "$fx" "$CLUSTER_TMP/schema.json")
code=$(post /v1/chat/completions "$body" "$CLUSTER_TMP/len.json")
[ "$code" = 200 ] && [ "$(json_get "$CLUSTER_TMP/len.json" 'j["choices"][0]["finish_reason"]')" = length ] &&
    [ "$(json_get "$CLUSTER_TMP/len.json" 'j["choices"][0]["message"]["content"]')" = '{"nam' ]
check "max_tokens reached inside the JSON: finish_reason length, the JSON cut" $? "$(cat "$CLUSTER_TMP/len.json")"

rf() { python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": json.loads(sys.argv[2])}}}))' "$fx" "$1"; }
expect_error "json_schema with pattern: 400 naming it" /v1/chat/completions \
    "$(rf '{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}')" 400 \
    response_format unsupported_value "'pattern' is not supported"
expect_error "json_schema with format: 400 naming it" /v1/chat/completions \
    "$(rf '{"type":"string","format":"email"}')" 400 response_format unsupported_value "'format'"
expect_error "json_schema with oneOf: 400 naming it" /v1/chat/completions \
    "$(rf '{"oneOf":[{"type":"string"}]}')" 400 response_format unsupported_value "'oneOf'"
expect_error "response_format of an unknown type: 400" /v1/chat/completions \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}" \
    400 response_format invalid_value
tools='[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}]'
expect_error "tool_choice required without a chat format (bytes codec): 400" /v1/chat/completions \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$tools,\"tool_choice\":\"required\"}" \
    400 tool_choice unsupported_value "chat format"
expect_error "tool_choice naming a function not in tools: 400" /v1/chat/completions \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}" \
    400 tool_choice unsupported_value "'g'"
expect_error "ignore_eos with response_format: 400" /v1/chat/completions \
    "{\"model\":\"$fx\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"ignore_eos\":true,\"response_format\":{\"type\":\"json_object\"}}" \
    400 ignore_eos unsupported_value
cluster_stop 1
cluster_finish
