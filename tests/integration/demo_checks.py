#!/usr/bin/env python3
"""Checks a running cluster that serves a demo model (models/demo/) with its
real vocabulary: every answer must be the model's own output, so each
request's tokens are compared with tandem-generate's greedy tokens for the
prompt that tandem-chat-data renders (the router's chat code, run apart
from the router), and the router's reasoning_content / content / tool_calls
with an independent parse of those tokens' text (tandem-tokenize --decode,
split here by regular expressions).

  demo_checks.py URL MODEL_NAME MODEL_DIR VOCAB FORMAT BIN_DIR

FORMAT is harmony or qwen3. Prints one line per check, "PASS\\tname" or
"FAIL\\tname\\tdiagnostic" (the calling shell script turns them into TAP).
"""
import datetime
import json
import re
import subprocess
import sys
import urllib.request

URL, MODEL, MODEL_DIR, VOCAB, FORMAT, BIN = sys.argv[1:7]
TIMEOUT = 60

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"}},
        "required": ["city"]}}}


def report(name, ok, diag=""):
    line = ("PASS\t" if ok else "FAIL\t") + name
    if not ok:
        line += "\t" + str(diag).replace("\n", "\\n")[:1500]
    print(line, flush=True)


def post(path, body):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return json.loads(r.read())


def post_stream(path, body):
    """The data: events of an SSE response, as parsed JSON (without [DONE])."""
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        text = r.read().decode()
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]", events[-3:]
    return [json.loads(e[len("data: "):]) for e in events[:-1]]


def run(args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {r.stderr.strip()}")
    return r.stdout


def prompt_ids(messages, tools=None):
    """The prompt the router renders for this conversation today (UTC)."""
    s = {"messages": messages, "date": datetime.datetime.utcnow().date().isoformat()}
    if tools:
        s["tools"] = tools
    r = subprocess.run([f"{BIN}/tandem-chat-data", "--vocab", VOCAB, "--in", "-",
                        "--print-prompts"], input=json.dumps(s) + "\n", capture_output=True,
                       text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError("tandem-chat-data failed: " + r.stderr.strip())
    return [int(x) for x in r.stdout.strip().split(",")]


def greedy(ids, max_tokens):
    out = run([f"{BIN}/tandem-generate", "--model", MODEL_DIR, "--prompt-ids",
               ",".join(map(str, ids)), "--max-tokens", str(max_tokens)])
    return [int(x) for x in out.strip().split(",")]


def decode(ids, skip_special=False):
    args = [f"{BIN}/tandem-tokenize", "--vocab", VOCAB, "--decode", ",".join(map(str, ids))]
    if skip_special:
        args.append("--skip-special")
    out = run(args)
    return out[:-1] if out.endswith("\n") else out


def encode(text):
    return [int(x) for x in run([f"{BIN}/tandem-tokenize", "--vocab", VOCAB, "--encode",
                                 text]).split()]


HARMONY_ANSWER = re.compile(r"<\|channel\|>analysis<\|message\|>(.*?)<\|end\|><\|start\|>assistant"
                            r"<\|channel\|>final<\|message\|>(.*?)<\|return\|>", re.S)
HARMONY_CALL = re.compile(r"<\|channel\|>analysis<\|message\|>(.*?)<\|end\|><\|start\|>assistant"
                          r"<\|channel\|>commentary to=functions\.(\w+) <\|constrain\|>json"
                          r"<\|message\|>(.*?)<\|call\|>", re.S)
QWEN_ANSWER = re.compile(r"<think>\n(.*?)\n</think>\n\n(.*?)<\|im_end\|>", re.S)
QWEN_CALL = re.compile(r"<think>\n(.*?)\n</think>\n\n<tool_call>\n(.*?)\n</tool_call><\|im_end\|>",
                       re.S)


def parse_answer(text):
    """(reasoning, content) of a whole answer in the format, or None."""
    m = (HARMONY_ANSWER if FORMAT == "harmony" else QWEN_ANSWER).fullmatch(text)
    return (m.group(1), m.group(2)) if m else None


def parse_call(text):
    """(reasoning, name, arguments as a Python object) of one tool call, or None."""
    if FORMAT == "harmony":
        m = HARMONY_CALL.fullmatch(text)
        return (m.group(1), m.group(2), json.loads(m.group(3))) if m else None
    m = QWEN_CALL.fullmatch(text)
    if not m:
        return None
    call = json.loads(m.group(2))
    return m.group(1), call["name"], call["arguments"]


def check(name, fn):
    try:
        fn()
        report(name, True)
    except Exception as e:  # a failed assertion or a request error
        report(name, False, f"{type(e).__name__}: {e}")


def chat_body(messages, tools=None, **kw):
    b = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 160,
         "return_token_ids": True}
    if tools:
        b["tools"] = tools
    b.update(kw)
    return b


state = {}
Q_CHAT = [{"role": "user", "content": "What is the capital of France?"}]
Q_TOOL = [{"role": "user", "content": "What's the weather in Paris?"}]


def chat_answer():
    j = post("/v1/chat/completions", chat_body(Q_CHAT))
    c = j["choices"][0]
    want = greedy(prompt_ids(Q_CHAT), 160)
    assert c["token_ids"] == want, (c["token_ids"], want)
    text = decode(want)
    ref = parse_answer(text)
    assert ref, f"the model's output is not a {FORMAT} answer: {text!r}"
    m = c["message"]
    assert c["finish_reason"] == "stop", c
    assert m["reasoning_content"] and m["content"], m
    assert m["reasoning_content"].strip() == ref[0].strip(), (m["reasoning_content"], ref[0])
    assert m["content"] == ref[1], (m["content"], ref[1])
    assert "tool_calls" not in m or not m["tool_calls"], m
    u = j["usage"]
    assert u["completion_tokens"] == len(want) and u["prompt_tokens"] == len(prompt_ids(Q_CHAT)), u
    state["chat"] = m
    print(f"# chat: reasoning {m['reasoning_content']!r}, content {m['content']!r}", flush=True)


def chat_stream():
    ev = post_stream("/v1/chat/completions", chat_body(Q_CHAT, stream=True))
    d = [e["choices"][0] for e in ev]
    assert d[0]["delta"].get("role") == "assistant", d[0]
    reasoning = "".join(x["delta"].get("reasoning_content") or "" for x in d)
    content = "".join(x["delta"].get("content") or "" for x in d)
    assert d[-1]["finish_reason"] == "stop", d[-1]
    m = state["chat"]
    assert reasoning == m["reasoning_content"] and content == m["content"], (reasoning, content)


def tool_call():
    j = post("/v1/chat/completions", chat_body(Q_TOOL, [WEATHER_TOOL]))
    c = j["choices"][0]
    want = greedy(prompt_ids(Q_TOOL, [WEATHER_TOOL]), 160)
    assert c["token_ids"] == want, (c["token_ids"], want)
    text = decode(want)
    ref = parse_call(text)
    assert ref, f"the model's output is not a {FORMAT} tool call: {text!r}"
    assert c["finish_reason"] == "tool_calls", c
    m = c["message"]
    calls = m["tool_calls"]
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"], calls
    fn = calls[0]["function"]
    args = json.loads(fn["arguments"])
    assert fn["name"] == ref[1] == "get_weather", (fn, ref)
    assert isinstance(args, dict) and args == ref[2] and isinstance(args.get("city"), str), (args, ref)
    assert not m.get("content"), m
    assert m["reasoning_content"].strip() == ref[0].strip(), (m["reasoning_content"], ref[0])
    state["call"] = calls[0]
    print(f"# tool call: {fn['name']}({fn['arguments']})", flush=True)


def tool_call_stream():
    ev = post_stream("/v1/chat/completions", chat_body(Q_TOOL, [WEATHER_TOOL], stream=True))
    d = [e["choices"][0] for e in ev]
    name, args, ids = "", "", set()
    for x in d:
        for tc in x["delta"].get("tool_calls") or []:
            assert tc["index"] == 0, tc
            ids.add(tc.get("id"))
            f = tc.get("function") or {}
            name += f.get("name") or ""
            args += f.get("arguments") or ""
    assert d[-1]["finish_reason"] == "tool_calls", d[-1]
    want = state["call"]["function"]
    assert name == want["name"] and json.loads(args) == json.loads(want["arguments"]), (name, args)


def tool_result():
    call = state["call"]
    city = json.loads(call["function"]["arguments"]).get("city", "Paris")
    result = json.dumps({"city": city, "temperature_c": 18, "condition": "cloudy"})
    msgs = Q_TOOL + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result}]
    j = post("/v1/chat/completions", chat_body(msgs, [WEATHER_TOOL]))
    c = j["choices"][0]
    want = greedy(prompt_ids(msgs, [WEATHER_TOOL]), 160)
    assert c["token_ids"] == want, (c["token_ids"], want)
    ref = parse_answer(decode(want))
    assert ref, f"the model's output is not a {FORMAT} answer: {decode(want)!r}"
    assert c["finish_reason"] == "stop" and c["message"]["content"] == ref[1], (c, ref)
    print(f"# answer from the tool result: {c['message']['content']!r}", flush=True)


TEXT = "The capital of France is"


def text_mode():
    pids = encode(TEXT)
    want = greedy(pids, 24)
    j = post("/v1/completions", {"model": MODEL, "prompt": TEXT, "max_tokens": 24,
                                 "temperature": 0, "return_token_ids": True})
    c = j["choices"][0]
    assert c["token_ids"] == want, (c["token_ids"], want)
    assert c["text"] == decode(want, skip_special=True), (c["text"], decode(want, True))
    assert c["finish_reason"] == ("length" if len(want) == 24 else "stop"), c
    u = j["usage"]
    assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == \
        (len(pids), len(want), len(pids) + len(want)), u
    state["text"] = (want, c["text"])
    print(f"# text: {TEXT!r} -> {c['text']!r}", flush=True)


def text_max_tokens():
    want, _ = state["text"]
    j = post("/v1/completions", {"model": MODEL, "prompt": TEXT, "max_tokens": 2,
                                 "temperature": 0, "return_token_ids": True})
    c = j["choices"][0]
    assert c["token_ids"] == want[:2] and c["finish_reason"] == "length", c
    assert j["usage"]["completion_tokens"] == 2, j["usage"]


def text_stop():
    want, text = state["text"]
    # a stop string from the middle of the output: the first visible
    # character after the start that did not occur before it
    k = next((k for k in range(1, len(text)) if not text[k].isspace() and text[k] not in text[:k]),
             None)
    assert k is not None, f"no character to stop at in {text!r}"
    stop = text[k]
    expect = text[:k]
    body = {"model": MODEL, "prompt": TEXT, "max_tokens": 24, "temperature": 0,
            "stop": [stop, "never-in-the-output"]}
    c = post("/v1/completions", body)["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] == expect, (stop, c, expect)
    ev = post_stream("/v1/completions", dict(body, stream=True))
    got = "".join(e["choices"][0]["text"] for e in ev)
    assert got == expect and ev[-1]["choices"][0]["finish_reason"] == "stop", (got, expect)


for name, fn in [
        ("chat: reasoning_content and content are the model's own greedy output, parsed", chat_answer),
        ("chat, streamed: the deltas join to the same reasoning and content", chat_stream),
        ("tools: a get_weather call with JSON arguments, finish_reason tool_calls", tool_call),
        ("tools, streamed: the same call assembled from the deltas, finish_reason tool_calls",
         tool_call_stream),
        ("tool result: the follow-up is rendered and answered (= tandem-generate)", tool_result),
        ("text: tokens = tandem-generate, text = their decoding, usage counts", text_mode),
        ("text: max_tokens 2 gives 2 tokens, finish_reason length", text_max_tokens),
        ("text: a stop string ends the output before it, streamed and not", text_stop)]:
    if name.startswith(("chat,", "tools, streamed", "tool result")) and \
            not state.get("chat" if name.startswith("chat,") else "call"):
        report(name, False, "skipped: the check it builds on failed")
        continue
    if name.startswith("text: m") or name.startswith("text: a"):
        if "text" not in state:
            report(name, False, "skipped: the check it builds on failed")
            continue
    check(name, fn)
