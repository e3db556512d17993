// Typed calls of the official OpenAI Node SDK against a running Tandem
// router (--tokenizer bytes, the gpt_oss_tiny fixture) with the sampling
// fields Tandem implements: logprobs, top_logprobs, n, best_of, a list of
// prompts, presence/frequency penalties, logit_bias. Prints one TAP-style
// line per call ("ok - NAME" or "not ok - NAME: why"); exits 1 on a failure.
//   node tests/openai_sdk/sdk_calls.mjs BASE_URL MODEL
import OpenAI from "openai";

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
