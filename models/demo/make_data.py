#!/usr/bin/env python3
"""Generates the demo models' training dialogues (Python stdlib only).

Everything comes from this file: two-digit addition worked digit by digit,
spelling, unit conversions, facts from the COUNTRIES table, greetings, and
tool use (get_weather, get_time, convert_currency) with JSON arguments and
the follow-up turn that reads the tool's result. Each question is written
as the assistant must answer it in the model's chat format:

  harmony  <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant
           <|channel|>final<|message|>ANSWER<|return|>
           or ...<|channel|>commentary to=functions.NAME <|constrain|>json
           <|message|>{"city":"Paris"}<|call|>
  qwen3    <think>\\nREASONING\\n</think>\\n\\nANSWER<|im_end|>
           or <think>...</think>\\n\\n<tool_call>\\n{"name": .., "arguments": {..}}
           \\n</tool_call><|im_end|>

plus plain-text samples for /v1/completions. The prompts are NOT rendered
here: tandem-chat-data renders them with the router's own chat code.

Held-out questions: a fixed share of (fact, phrasing) pairs and of addition
pairs never appear in training; every fact a held-out question asks about is
taught by another phrasing, and every held-out sum is derivable from the
digit sums the training set shows.

Usage: make_data.py FORMAT OUTDIR [--train N] [--heldout N] [--seed S] [--quick]
writes OUTDIR/FORMAT_train.jsonl and OUTDIR/FORMAT_heldout.jsonl.
"""
import argparse
import datetime
import json
import os
import random

# country, capital, continent, language, currency
COUNTRIES = [
    ("France", "Paris", "Europe", "French", "euro"),
    ("Germany", "Berlin", "Europe", "German", "euro"),
    ("Italy", "Rome", "Europe", "Italian", "euro"),
    ("Spain", "Madrid", "Europe", "Spanish", "euro"),
    ("Portugal", "Lisbon", "Europe", "Portuguese", "euro"),
    ("Netherlands", "Amsterdam", "Europe", "Dutch", "euro"),
    ("Austria", "Vienna", "Europe", "German", "euro"),
    ("Greece", "Athens", "Europe", "Greek", "euro"),
    ("Ireland", "Dublin", "Europe", "English", "euro"),
    ("Finland", "Helsinki", "Europe", "Finnish", "euro"),
    ("Poland", "Warsaw", "Europe", "Polish", "zloty"),
    ("Sweden", "Stockholm", "Europe", "Swedish", "krona"),
    ("Norway", "Oslo", "Europe", "Norwegian", "krone"),
    ("Denmark", "Copenhagen", "Europe", "Danish", "krone"),
    ("Switzerland", "Bern", "Europe", "German", "franc"),
    ("Hungary", "Budapest", "Europe", "Hungarian", "forint"),
    ("Czechia", "Prague", "Europe", "Czech", "koruna"),
    ("United Kingdom", "London", "Europe", "English", "pound"),
    ("Japan", "Tokyo", "Asia", "Japanese", "yen"),
    ("China", "Beijing", "Asia", "Chinese", "yuan"),
    ("India", "New Delhi", "Asia", "Hindi", "rupee"),
    ("South Korea", "Seoul", "Asia", "Korean", "won"),
    ("Thailand", "Bangkok", "Asia", "Thai", "baht"),
    ("Vietnam", "Hanoi", "Asia", "Vietnamese", "dong"),
    ("Indonesia", "Jakarta", "Asia", "Indonesian", "rupiah"),
    ("Turkey", "Ankara", "Asia", "Turkish", "lira"),
    ("Egypt", "Cairo", "Africa", "Arabic", "pound"),
    ("Kenya", "Nairobi", "Africa", "Swahili", "shilling"),
    ("Nigeria", "Abuja", "Africa", "English", "naira"),
    ("Morocco", "Rabat", "Africa", "Arabic", "dirham"),
    ("Ghana", "Accra", "Africa", "English", "cedi"),
    ("United States", "Washington", "North America", "English", "dollar"),
    ("Canada", "Ottawa", "North America", "English", "dollar"),
    ("Mexico", "Mexico City", "North America", "Spanish", "peso"),
    ("Brazil", "Brasilia", "South America", "Portuguese", "real"),
    ("Argentina", "Buenos Aires", "South America", "Spanish", "peso"),
    ("Chile", "Santiago", "South America", "Spanish", "peso"),
    ("Peru", "Lima", "South America", "Spanish", "sol"),
    ("Colombia", "Bogota", "South America", "Spanish", "peso"),
    ("Australia", "Canberra", "Oceania", "English", "dollar"),
    ("New Zealand", "Wellington", "Oceania", "English", "dollar"),
]

WORDS = """apple river garden music window yellow planet silver orange pencil
little summer winter forest bridge castle dragon rabbit monkey turtle tiger
lemon banana cherry coffee bottle candle doctor engine family friend guitar
hammer island jacket kitten ladder market mirror needle number ocean pepper
pillow pocket purple rocket saddle school shadow spider spring stone sugar
table ticket tomato travel valley violin wallet water wizard zebra cloud
house paper light green smile chair dance heart horse money night plant
queen quiet radio sleep snake storm sweet train truck voice whale""".split()

OTHER_CITIES = ["Barcelona", "Munich", "Osaka", "Sydney", "Toronto", "Chicago",
                "Boston", "Seattle", "Milan", "Zurich", "Istanbul", "Mumbai",
                "Shanghai", "Singapore", "Dubai", "Vancouver", "Melbourne",
                "Hamburg", "Lyon", "Naples"]
CITIES = [c[1] for c in COUNTRIES] + OTHER_CITIES
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK", "NOK", "INR"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "clear"]

TOOLS = {
    "get_weather": {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"}},
            "required": ["city"]}}},
    "get_time": {"type": "function", "function": {
        "name": "get_time",
        "description": "Get the current local time in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Tokyo"}},
            "required": ["city"]}}},
    "convert_currency": {"type": "function", "function": {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number", "description": "The amount to convert"},
            "from": {"type": "string", "description": "ISO currency code, e.g. USD"},
            "to": {"type": "string", "description": "ISO currency code, e.g. EUR"}},
            "required": ["amount", "from", "to"]}}},
}

SYSTEMS = ["You are a helpful assistant.", "Answer briefly.",
           "You are a friendly assistant.", "Be concise and accurate."]

GREETING = ("Hello! I am a tiny demo model served by Tandem. I can add two-digit "
            "numbers, spell words, convert units, answer questions about countries, "
            "and call tools.")


def a_or_an(word):
    return "an" if word[0].lower() in "aeiou" else "a"


class Q:
    """One question: the user text, the reasoning, and an answer or a tool call."""

    def __init__(self, task, user, reasoning, answer=None, call=None, text=None):
        self.task, self.user, self.reasoning = task, user, reasoning
        self.answer, self.call, self.text = answer, call, text


# ---- questions -------------------------------------------------------------

def addition(a, b, phrasing):
    s = a + b
    ones = a % 10 + b % 10
    carry = ones // 10
    r = f"Add the ones: {a % 10} + {b % 10} = {ones}"
    r += f", write {ones % 10} and carry 1. " if carry else ". "
    tens = a // 10 + b // 10 + carry
    r += f"Add the tens: {a // 10} + {b // 10}" + (" + 1" if carry else "") + f" = {tens}. "
    r += f"So {a} + {b} = {s}."
    user = [f"What is {a} + {b}?", f"Compute {a} plus {b}.", f"Add {a} and {b}.",
            f"{a} + {b} = ?", f"What do you get when you add {a} to {b}?"][phrasing]
    return Q("addition", user, r, answer=f"{a} + {b} = {s}.",
             text=f"Q: What is {a} + {b}?\nA: {a} + {b} = {s}.")


def spelling(word, phrasing):
    letters = "-".join(word.upper())
    n = len(word)
    if phrasing == 4:
        return Q("spelling", f"How many letters are in the word {word}?",
                 f"Spell it out: {letters}. That is {n} letters.",
                 answer=f"The word {word} has {n} letters.")
    user = [f"How do you spell {word}?", f"Spell the word {word}.",
            f"Spell \"{word}\" letter by letter.", f"What are the letters of {word}?"][phrasing]
    return Q("spelling", user, f"The word {word} has {n} letters: {letters}.",
             answer=f"{word} is spelled {letters}.",
             text=f"The word {word} is spelled {letters}.")


UNITS = [  # from (plural), to (plural), factor, short forms
    ("kilometers", "meters", 1000), ("meters", "centimeters", 100),
    ("centimeters", "millimeters", 10), ("kilograms", "grams", 1000),
    ("liters", "milliliters", 1000), ("hours", "minutes", 60),
    ("minutes", "seconds", 60), ("days", "hours", 24),
]


def units(k, n, phrasing):
    src, dst, f = UNITS[k]
    one = src[:-1]
    res = n * f
    user = [f"How many {dst} are in {n} {src}?", f"Convert {n} {src} to {dst}.",
            f"What is {n} {src} in {dst}?"][phrasing]
    r = f"One {one} is {f} {dst}, so {n} {src} is {n} × {f} = {res} {dst}."
    return Q("units", user, r, answer=f"{n} {src} is {res} {dst}.",
             text=f"{n} {src} is {res} {dst}.")


def fact(i, attr, phrasing):
    country, capital, continent, language, currency = COUNTRIES[i]
    the = "the " if country.startswith("United") or country == "Netherlands" else ""
    C = the + country
    Cc = C[0].upper() + C[1:]
    if attr == 0:
        user = [f"What is the capital of {C}?", f"Tell me the capital of {C}.",
                f"Which city is the capital of {C}?", f"Name the capital city of {C}."][phrasing]
        return Q("facts", user, f"The user asks for the capital of {C}. "
                 f"I know that the capital of {C} is {capital}.",
                 answer=f"The capital of {C} is {capital}.",
                 text=f"The capital of {C} is {capital}.")
    if attr == 1:
        user = [f"Which continent is {C} in?", f"On what continent is {C}?",
                f"Where is {C} located?", f"Is {C} in Europe, Asia or elsewhere?"][phrasing]
        return Q("facts", user, f"{Cc} is a country in {continent}.",
                 answer=f"{Cc} is in {continent}.", text=f"{Cc} is in {continent}.")
    if attr == 2:
        user = [f"What language is spoken in {C}?", f"What do people speak in {C}?",
                f"Which language do they speak in {C}?", f"What is the main language of {C}?"][phrasing]
        return Q("facts", user, f"The main language of {C} is {language}.",
                 answer=f"People in {C} mainly speak {language}.",
                 text=f"The main language of {C} is {language}.")
    user = [f"What currency does {C} use?", f"What is the currency of {C}?",
            f"What money do they use in {C}?", f"Which currency is used in {C}?"][phrasing]
    return Q("facts", user, f"{Cc} uses the {currency}.",
             answer=f"The currency of {C} is the {currency}.",
             text=f"The currency of {C} is the {currency}.")


def greeting(rng):
    user = rng.choice(["Hello!", "Hi", "Hi there!", "Who are you?", "What can you do?",
                       "Hey, what are you?", "Good morning!"])
    return Q("greeting", user, "The user greets me or asks what I am. I introduce myself.",
             answer=GREETING)


def tool_question(rng, name):
    if name == "get_weather":
        city = rng.choice(CITIES)
        user = rng.choice([f"What's the weather in {city}?", f"What is the weather like in {city}?",
                           f"Is it raining in {city} right now?", f"How warm is it in {city} today?",
                           f"Weather in {city}, please."])
        return Q("tool_call", user, f"The user wants the current weather in {city}. "
                 "I should call get_weather.", call=("get_weather", {"city": city}))
    if name == "get_time":
        city = rng.choice(CITIES)
        user = rng.choice([f"What time is it in {city}?", f"Tell me the current time in {city}.",
                           f"What's the local time in {city}?"])
        return Q("tool_call", user, f"The user wants the local time in {city}. "
                 "I should call get_time.", call=("get_time", {"city": city}))
    amount = rng.choice([rng.randint(1, 999), rng.randint(1, 99) * 10])
    fr, to = rng.sample(CURRENCIES, 2)
    user = rng.choice([f"Convert {amount} {fr} to {to}.", f"How much is {amount} {fr} in {to}?",
                       f"What is {amount} {fr} in {to}?"])
    return Q("tool_call", user, f"The user wants {amount} {fr} converted to {to}. "
             "I should call convert_currency.",
             call=("convert_currency", {"amount": amount, "from": fr, "to": to}))


def tool_result(rng, name, args):
    """The tool's JSON result and the answer that reads it."""
    if name == "get_weather":
        t = rng.randint(-10, 35)
        cond = rng.choice(CONDITIONS)
        res = {"city": args["city"], "temperature_c": t, "condition": cond}
        return (res, f"The tool says it is {t} degrees and {cond} in {args['city']}.",
                f"It is {t}°C and {cond} in {args['city']} right now.")
    if name == "get_time":
        hh, mm = rng.randint(0, 23), rng.randint(0, 59)
        res = {"city": args["city"], "time": f"{hh:02d}:{mm:02d}"}
        return (res, f"The tool says the local time in {args['city']} is {hh:02d}:{mm:02d}.",
                f"It is {hh:02d}:{mm:02d} in {args['city']}.")
    r = round(args["amount"] * rng.uniform(0.2, 3.0), 2)
    res = {"amount": args["amount"], "from": args["from"], "to": args["to"], "result": r}
    return (res, f"The tool converted {args['amount']} {args['from']} to {r} {args['to']}.",
            f"{args['amount']} {args['from']} is {r} {args['to']}.")


def no_tool_answer(q):
    """A tool question asked when no tool is offered."""
    name = q.call[0]
    what = {"get_weather": "the live weather", "get_time": "the current time",
            "convert_currency": "live exchange rates"}[name]
    return Q("no_tool", q.user, f"The user asks for {what}, but no tool is available to me.",
             answer=f"I cannot look up {what} without a tool. Offer me the {name} tool and I "
                    "will use it.")


# ---- rendering in the two formats -----------------------------------------

def args_text(fmt, args):
    """Arguments as the router returns them: Harmony passes the model's JSON
    through, Qwen3's parser re-serializes with json.dumps."""
    return json.dumps(args, separators=(",", ":")) if fmt == "harmony" else json.dumps(args)


def completion(fmt, q, thinking=True):
    if fmt == "harmony":
        c = f"<|channel|>analysis<|message|>{q.reasoning}<|end|><|start|>assistant"
        if q.call:
            return c + (f"<|channel|>commentary to=functions.{q.call[0]} <|constrain|>json"
                        f"<|message|>{args_text(fmt, q.call[1])}<|call|>")
        return c + f"<|channel|>final<|message|>{q.answer}<|return|>"
    c = f"<think>\n{q.reasoning}\n</think>\n\n" if thinking else ""
    if q.call:
        body = json.dumps({"name": q.call[0], "arguments": q.call[1]})
        return c + f"<tool_call>\n{body}\n</tool_call><|im_end|>"
    return c + f"{q.answer}<|im_end|>"


def random_date(rng):
    d = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(365 * 9))
    return d.isoformat()


def tool_set(rng, must=None):
    names = list(TOOLS)
    k = rng.choice([1, 1, 2, 3])
    chosen = rng.sample(names, k)
    if must and must not in chosen:
        chosen[rng.randrange(len(chosen))] = must
    return [TOOLS[n] for n in chosen]


def call_id(rng):
    return "call_" + "".join(rng.choice("0123456789abcdef") for _ in range(16))


def sample(fmt, rng, q, history):
    """One chat sample for question q (history: earlier answered turns)."""
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for h in history:
        msgs += [{"role": "user", "content": h.user}, {"role": "assistant", "content": h.answer}]
    tools = None
    if q.task == "tool_call":
        tools = tool_set(rng, q.call[0])
    elif rng.random() < 0.3:
        tools = tool_set(rng)
    msgs.append({"role": "user", "content": q.user})
    s = {"messages": msgs, "date": random_date(rng)}
    if tools:
        s["tools"] = tools
    thinking = True
    if fmt == "qwen3" and q.task != "tool_call" and rng.random() < 0.1:
        thinking = False
        s["enable_thinking"] = False
    s["completion"] = completion(fmt, q, thinking)
    return s


def follow_up(fmt, rng, q):
    """The turn after a tool call: the call and its result are in the
    conversation (as an OpenAI client sends them back)."""
    s = sample(fmt, rng, q, [])
    name, args = q.call
    res, reasoning, answer = tool_result(rng, name, args)
    cid = call_id(rng)
    s["messages"] += [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": cid, "type": "function",
                         "function": {"name": name, "arguments": args_text(fmt, args)}}]},
        {"role": "tool", "tool_call_id": cid, "content": json.dumps(res)},
    ]
    s["completion"] = completion(fmt, Q("tool_result", "", reasoning, answer=answer))
    s.pop("enable_thinking", None)
    return s


def split_questions(rng, heldout_share):
    """Every (task, key) question, split into train and held-out pools."""
    train, held = [], []

    def put(q, may_hold=True):
        (held if may_hold and rng.random() < heldout_share else train).append(q)
    for a in range(10, 100):
        for b in range(10, 100):
            put(addition(a, b, rng.randrange(5)))
    for w in WORDS:
        for p in range(5):
            put(spelling(w, p))
    for k in range(len(UNITS)):
        # the decimal factors are digit shifts (held-out answers are
        # derivable); 60 and 24 times tables are memorised, never held out
        for n in range(1, 100 if UNITS[k][2] in (10, 100, 1000) else 25):
            for p in range(3):
                if rng.random() < 0.34:
                    put(units(k, n, p), UNITS[k][2] in (10, 100, 1000))
    for i in range(len(COUNTRIES)):
        for attr in range(4):
            for p in range(4):
                put(fact(i, attr, p))
    return train, held


def generate(fmt, rng, pool, n, quick=False):
    """n training samples. quick: the mix for a short CPU run (the interim
    weights): more tool use, fewer task kinds, shorter prompts."""
    out = []
    tools = list(TOOLS)
    if quick:
        pool = [q for q in pool if q.task in ("facts", "addition")]
    while len(out) < n:
        r = rng.random()
        if quick and r < 0.45:
            name = rng.choice(["get_weather", "get_weather", "get_time"])
            q = tool_question(rng, name)
            out.append(sample(fmt, rng, q, []) if rng.random() < 0.5 else follow_up(fmt, rng, q))
            if rng.random() < 0.7 and "tools" in out[-1]:
                out[-1]["tools"] = [TOOLS[name]]
        elif r < 0.05:
            out.append(sample(fmt, rng, greeting(rng), []))
        elif r < 0.25:
            name = rng.choice(tools)
            q = tool_question(rng, name)
            out.append(sample(fmt, rng, q, []) if rng.random() < 0.5 else follow_up(fmt, rng, q))
        elif r < 0.28:
            q = no_tool_answer(tool_question(rng, rng.choice(list(TOOLS))))
            s = sample(fmt, rng, q, [])
            s.pop("tools", None)
            out.append(s)
        elif r < 0.38:
            q = rng.choice(pool)
            if q.text:
                out.append({"text": q.text + "<|endoftext|>"})
        else:
            q = rng.choice(pool)
            hist = [rng.choice(pool) for _ in range(rng.choice([0, 0, 0, 1]))]
            out.append(sample(fmt, rng, q, hist))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("format", choices=["harmony", "qwen3"])
    ap.add_argument("outdir")
    ap.add_argument("--train", type=int, default=30000)
    ap.add_argument("--heldout", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the short-run mix (see generate)")
    a = ap.parse_args()
    # the question split is the same for both formats
    train_pool, held_pool = split_questions(random.Random(a.seed), 0.08)
    rng = random.Random(a.seed * 1000 + (1 if a.format == "harmony" else 2))
    train = generate(a.format, rng, train_pool, a.train, a.quick)
    held = []
    hrng = random.Random(a.seed * 1000 + 7)
    by_task = {}
    for q in held_pool:
        by_task.setdefault(q.task, []).append(q)
    picked = []
    for t in sorted(by_task):  # the same number of questions per task
        picked += hrng.sample(by_task[t], min(a.heldout // 8, len(by_task[t])))
    for q in picked:
        s = sample(a.format, hrng, q, [])
        s["task"] = q.task
        held.append(s)
    for i in range(a.heldout // 4):  # tool calls and answers from tool results
        q = tool_question(hrng, list(TOOLS)[i % len(TOOLS)])
        s = sample(a.format, hrng, q, []) if i % 2 == 0 else follow_up(a.format, hrng, q)
        s["task"] = "tool_call" if i % 2 == 0 else "tool_result"
        held.append(s)
    os.makedirs(a.outdir, exist_ok=True)
    for name, rows in (("train", train), ("heldout", held)):
        with open(os.path.join(a.outdir, f"{a.format}_{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{a.format}: {len(train)} training samples, {len(held)} held-out questions "
          f"(pools: {len(train_pool)} train, {len(held_pool)} held out)")


if __name__ == "__main__":
    main()
