// Typed calls of the official OpenAI Node SDK against a running Tandem
// router (--tokenizer bytes, the gpt_oss_tiny fixture) with the sampling
// fields Tandem implements: logprobs, top_logprobs, n, best_of, a list of
// prompts, presence/frequency penalties, logit_bias, echo, and structured
// outputs (response_format json_schema through chat.completions.parse, and
// json_object; the workers run with --tokenizer bytes). Prints one TAP-style
// line per call ("ok - NAME" or "not ok - NAME: why"); exits 1 on a failure.
//   node tests/openai_sdk/sdk_calls.mjs BASE_URL MODEL
import OpenAI from "openai";
import { makeParseableResponseFormat } from "openai/lib/parser";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
let failed = 0;

async function check(name, fn) {
    try {
        const why = await fn();
        if (why) throw new Error(why);
        console.log(`ok - ${name}`);
    } catch (e) {
        failed++;
        console.log(`not ok - ${name}: ${e && e.message ? e.message : e}`);
    }
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

await check("completions: logprobs 3, n 2, penalties", async () => {
    const r = await client.completions.create({
        model, prompt: "Hello", max_tokens: 4, temperature: 0, n: 2, logprobs: 3,
        presence_penalty: 0.5, frequency_penalty: 0.5, ignore_eos: true,
    });
    if (r.choices.length !== 2) return `choices ${r.choices.length}`;
    for (const [i, c] of r.choices.entries()) {
        if (c.index !== i) return `index ${c.index}`;
        const lp = c.logprobs;
        if (!lp || lp.tokens.length !== 4 || lp.token_logprobs.length !== 4 ||
            lp.top_logprobs.length !== 4 || lp.text_offset.length !== 4)
            return `logprobs ${JSON.stringify(lp)}`;
        if (lp.token_logprobs.some((v) => !(v <= 0))) return `token_logprobs ${lp.token_logprobs}`;
    }
    if (!same(r.choices[0].logprobs, r.choices[1].logprobs)) return "greedy choices differ";
    if (r.usage.completion_tokens !== 8) return `usage ${JSON.stringify(r.usage)}`;
});

await check("completions: a list of prompts with n 2", async () => {
    const r = await client.completions.create({
        model, prompt: ["ab", "cd", "ef"], max_tokens: 2, n: 2, seed: 7, ignore_eos: true,
    });
    const idx = r.choices.map((c) => c.index);
    if (!same(idx, [0, 1, 2, 3, 4, 5])) return `indices ${idx}`;
});

await check("completions: best_of 3", async () => {
    const r = await client.completions.create({
        model, prompt: "xyz", max_tokens: 3, best_of: 3, seed: 5, ignore_eos: true,
    });
    if (r.choices.length !== 1 || r.usage.completion_tokens !== 9)
        return `choices ${r.choices.length}, usage ${JSON.stringify(r.usage)}`;
});

await check("completions: logit_bias +100 forces the token", async () => {
    const r = await client.completions.create({
        model, prompt: "Hello", max_tokens: 3, temperature: 0, logit_bias: { "65": 100 },
        ignore_eos: true,
    });
    if (r.choices[0].text !== "AAA") return `text ${JSON.stringify(r.choices[0].text)}`;
});

await check("chat: logprobs, top_logprobs 2, n 2, penalties, logit_bias", async () => {
    const r = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Hi" }], max_completion_tokens: 3,
        temperature: 0, n: 2, logprobs: true, top_logprobs: 2, presence_penalty: 1,
        frequency_penalty: -1, logit_bias: { "66": 100 }, ignore_eos: true,
    });
    if (r.choices.length !== 2) return `choices ${r.choices.length}`;
    for (const c of r.choices) {
        if (c.message.content !== "BBB") return `content ${JSON.stringify(c.message.content)}`;
        const content = c.logprobs && c.logprobs.content;
        if (!content || content.length !== 3) return `logprobs ${JSON.stringify(c.logprobs)}`;
        for (const t of content)
            if (t.token !== "B" || !same(t.bytes, [66]) || t.top_logprobs.length !== 2)
                return `entry ${JSON.stringify(t)}`;
    }
});

await check("chat stream: logprobs in the chunks, n 2", async () => {
    const stream = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0,
        n: 2, logprobs: true, top_logprobs: 1, stream: true, stream_options: { include_usage: true },
        ignore_eos: true,
    });
    const got = { 0: [], 1: [] };
    let usage = null;
    for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices)
            if (c.logprobs && c.logprobs.content) got[c.index].push(...c.logprobs.content);
    }
    if (got[0].length !== 4 || !same(got[0], got[1])) return `streamed ${JSON.stringify(got)}`;
    if (!usage || usage.completion_tokens !== 8) return `usage ${JSON.stringify(usage)}`;
});

await check("completions: echo puts the prompt before the text, streamed too", async () => {
    const r = await client.completions.create({
        model, prompt: ["Hello", "abc"], max_tokens: 3, temperature: 0, echo: true,
        ignore_eos: true,
    });
    const plain = await client.completions.create({
        model, prompt: ["Hello", "abc"], max_tokens: 3, temperature: 0, ignore_eos: true,
    });
    for (const [i, p] of ["Hello", "abc"].entries())
        if (r.choices[i].text !== p + plain.choices[i].text)
            return `choice ${i}: ${JSON.stringify(r.choices[i].text)} vs ${JSON.stringify(plain.choices[i].text)}`;
    const stream = await client.completions.create({
        model, prompt: "Hello", max_tokens: 3, temperature: 0, echo: true, stream: true,
        ignore_eos: true,
    });
    let text = "";
    for await (const chunk of stream) for (const c of chunk.choices) text += c.text;
    if (text !== r.choices[0].text) return `streamed ${JSON.stringify(text)}`;
});

await check("completions: echo with logprobs lists the prompt's tokens first", async () => {
    const r = await client.completions.create({
        model, prompt: "Hi", max_tokens: 2, temperature: 0, echo: true, logprobs: 1, ignore_eos: true,
    });
    const c = r.choices[0], lp = c.logprobs;
    if (!c.text.startsWith("Hi")) return `text ${JSON.stringify(c.text)}`;
    if (lp.tokens.length !== 4 || lp.tokens[0] !== "H" || lp.tokens[1] !== "i") return `tokens ${lp.tokens}`;
    if (lp.token_logprobs[0] !== null || lp.top_logprobs[0] !== null) return "first prompt token not null";
    if (!lp.token_logprobs.slice(1).every((v) => v <= 0)) return `token_logprobs ${lp.token_logprobs}`;
    if (!same(lp.text_offset.slice(0, 3), [0, 1, 2])) return `text_offset ${lp.text_offset}`;
});

// A schema the random-weight fixture could never follow by chance; the
// grammar keeps every string short so the object ends within max_tokens.
const itemSchema = {
    type: "object",
    properties: {
        name: { type: "string", maxLength: 6 },
        count: { type: "integer" },
        color: { enum: ["red", "green", "blue"] },
        tags: { type: "array", items: { type: "boolean" }, maxItems: 3 },
        ok: { type: "boolean" },
    },
    required: ["name", "count", "color", "tags", "ok"],
    additionalProperties: false,
};
function validItem(x) {
    return x && typeof x === "object" && !Array.isArray(x) &&
        same(Object.keys(x), ["name", "count", "color", "tags", "ok"]) &&
        typeof x.name === "string" && [...x.name].length <= 6 && Number.isInteger(x.count) &&
        ["red", "green", "blue"].includes(x.color) && Array.isArray(x.tags) && x.tags.length <= 3 &&
        x.tags.every((t) => typeof t === "boolean") && typeof x.ok === "boolean";
}

await check("chat.completions.parse: json_schema (strict) gives a parsed object, 3 seeds", async () => {
    // the SDK's own parseable response format (what zodResponseFormat builds),
    // here over a plain JSON schema with JSON.parse as the parser
    const response_format = makeParseableResponseFormat(
        { type: "json_schema", json_schema: { name: "item", strict: true, schema: itemSchema } },
        (content) => JSON.parse(content));
    for (const seed of [1, 2, 3]) {
        const r = await client.chat.completions.parse({
            model, messages: [{ role: "user", content: "An item, please." }], max_tokens: 200,
            temperature: 1, seed, response_format,
        });
        const c = r.choices[0];
        if (c.finish_reason !== "stop") return `seed ${seed}: finish_reason ${c.finish_reason}`;
        if (!validItem(c.message.parsed)) return `seed ${seed}: parsed ${JSON.stringify(c.message.parsed)}`;
        if (c.message.refusal !== null) return `refusal ${c.message.refusal}`;
    }
});

await check("chat.completions.create: json_object, streamed, parses", async () => {
    const stream = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "JSON" }], max_tokens: 300, seed: 11,
        response_format: { type: "json_object" }, stream: true,
    });
    let text = "", finish = null;
    for await (const chunk of stream)
        for (const c of chunk.choices) {
            text += c.delta.content || "";
            if (c.finish_reason) finish = c.finish_reason;
        }
    if (finish === "length") return "";   // cut by max_tokens: allowed, as OpenAI
    const v = JSON.parse(text);
    if (!v || typeof v !== "object" || Array.isArray(v)) return `not an object: ${text}`;
});

await check("tool_choice required without a chat format is a BadRequestError", async () => {
    try {
        await client.chat.completions.create({
            model, messages: [{ role: "user", content: "Hi" }], tool_choice: "required",
            tools: [{ type: "function", function: { name: "f", strict: true,
                parameters: { type: "object", properties: {}, additionalProperties: false } } }],
        });
    } catch (e) {
        if (e instanceof OpenAI.BadRequestError) return "";
        return `error ${e}`;
    }
    return "no error";
});

await check("a bad value is an SDK BadRequestError with the param", async () => {
    try {
        await client.chat.completions.create({
            model, messages: [{ role: "user", content: "Hi" }], top_logprobs: 3,
        });
    } catch (e) {
        if (e instanceof OpenAI.BadRequestError && e.param === "top_logprobs") return "";
        return `error ${e}`;
    }
    return "no error";
});

process.exit(failed ? 1 : 0);
