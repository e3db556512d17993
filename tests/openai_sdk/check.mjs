// The official OpenAI Node SDK, used exactly as an application would, against
// a Tandem router serving a demo model (tests/integration/test_demo_openai_sdk.sh):
// a text completion, a chat completion (and streamed), a chat completion with
// a tool definition that gets a tool call, streamed tool calls, the
// follow-up carrying the tool's result, and the structured outputs built on
// the workers' vocabulary: chat.completions.parse with strict tools and
// tool_choice "required" / a named function, and a json_schema answer.
//
//   node check.mjs BASE_URL MODEL
//
// Prints "PASS\tname" or "FAIL\tname\tdiagnostic" per check.
import OpenAI from "openai";
import { makeParseableResponseFormat } from "openai/lib/parser";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "City name, e.g. Paris" } },
      required: ["city"],
    },
  },
};
const askWeather = [{ role: "user", content: "What's the weather in Paris?" }];

function assert(cond, what) {
  if (!cond) throw new Error(what);
}

async function check(name, fn) {
  try {
    await fn();
    console.log(`PASS\t${name}`);
  } catch (e) {
    console.log(`FAIL\t${name}\t${String(e && e.stack ? e.stack : e).replace(/\n/g, "\\n").slice(0, 1500)}`);
  }
}

let call = null;
let chatText = null;

await check("completions.create: a text completion with usage", async () => {
  const r = await client.completions.create({
    model, prompt: "The capital of France is", max_tokens: 8, temperature: 0,
  });
  assert(r.object === "text_completion", `object ${r.object}`);
  assert(typeof r.choices[0].text === "string" && r.choices[0].text.length > 0, JSON.stringify(r));
  assert(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8, JSON.stringify(r.usage));
  console.log(`# completion: ${JSON.stringify(r.choices[0].text)}`);
});

await check("chat.completions.create: an answer with content", async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "What is the capital of France?" }], temperature: 0,
  });
  const m = r.choices[0].message;
  assert(r.choices[0].finish_reason === "stop", JSON.stringify(r.choices[0]));
  assert(m.role === "assistant" && typeof m.content === "string" && m.content.length > 0,
    JSON.stringify(m));
  assert(typeof m.reasoning_content === "string" && m.reasoning_content.length > 0, JSON.stringify(m));
  chatText = m.content;
  console.log(`# chat: ${JSON.stringify(m.content)}`);
});

await check("chat.completions.create with stream: the chunks join to the same content", async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "What is the capital of France?" }], temperature: 0,
    stream: true,
  });
  let content = "";
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert(finish === "stop", `finish_reason ${finish}`);
  assert(chatText !== null && content === chatText, `${JSON.stringify(content)} vs ${JSON.stringify(chatText)}`);
});

await check("chat.completions.create with a tool definition gets a tool call", async () => {
  const r = await client.chat.completions.create({
    model, messages: askWeather, tools: [weatherTool], temperature: 0,
  });
  const c = r.choices[0];
  assert(c.finish_reason === "tool_calls", JSON.stringify(c));
  const calls = c.message.tool_calls;
  assert(Array.isArray(calls) && calls.length === 1 && calls[0].type === "function", JSON.stringify(c));
  assert(calls[0].function.name === "get_weather", JSON.stringify(calls[0]));
  const args = JSON.parse(calls[0].function.arguments);
  assert(typeof args.city === "string", JSON.stringify(args));
  call = calls[0];
  console.log(`# tool call: ${call.function.name}(${call.function.arguments})`);
});

await check("chat.completions.create with a tool, streamed: the tool call assembles", async () => {
  const stream = await client.chat.completions.create({
    model, messages: askWeather, tools: [weatherTool], temperature: 0, stream: true,
  });
  let name = "";
  let args = "";
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const tc of c.delta.tool_calls ?? []) {
      name += tc.function?.name ?? "";
      args += tc.function?.arguments ?? "";
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert(finish === "tool_calls", `finish_reason ${finish}`);
  assert(call && name === call.function.name, `name ${name}`);
  assert(JSON.stringify(JSON.parse(args)) === JSON.stringify(JSON.parse(call.function.arguments)), args);
});

await check("the tool result goes back and the model answers from it", async () => {
  assert(call, "no tool call to answer");
  const city = JSON.parse(call.function.arguments).city;
  const r = await client.chat.completions.create({
    model, temperature: 0, tools: [weatherTool],
    messages: [
      ...askWeather,
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id,
        content: JSON.stringify({ city, temperature_c: 18, condition: "cloudy" }) },
    ],
  });
  const c = r.choices[0];
  assert(c.finish_reason === "stop" && typeof c.message.content === "string" &&
    c.message.content.length > 0, JSON.stringify(c));
  console.log(`# answer: ${JSON.stringify(c.message.content)}`);
});

// Strict tools: parse() turns the arguments into parsed_arguments; a forced
// call must match the function's parameters whatever the model prefers.
const strictWeather = {
  type: "function",
  function: {
    name: "get_weather", description: "Get the current weather in a city.", strict: true,
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 20 }, unit: { enum: ["c", "f"] } },
      required: ["city", "unit"], additionalProperties: false,
    },
  },
};
const strictTime = {
  type: "function",
  function: {
    name: "get_time", description: "The local time in a city.", strict: true,
    parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 20 } },
      required: ["city"], additionalProperties: false,
    },
  },
};

async function forcedCall(tool_choice, want) {
  const r = await client.chat.completions.parse({
    model, messages: [{ role: "user", content: "Hello there" }], tools: [strictWeather, strictTime],
    tool_choice, temperature: 0, max_tokens: 120,
  });
  const c = r.choices[0];
  assert(c.finish_reason === "tool_calls", JSON.stringify(c));
  const calls = c.message.tool_calls;
  assert(Array.isArray(calls) && calls.length === 1, JSON.stringify(c.message));
  const f = calls[0].function;
  assert(!want || f.name === want, `called ${f.name}, want ${want}`);
  const a = f.parsed_arguments;
  const keys = f.name === "get_weather" ? ["city", "unit"] : ["city"];
  assert(a && JSON.stringify(Object.keys(a)) === JSON.stringify(keys) && typeof a.city === "string" &&
    (f.name !== "get_weather" || ["c", "f"].includes(a.unit)), JSON.stringify(f));
  console.log(`# forced (${JSON.stringify(tool_choice)}): ${f.name}(${f.arguments})`);
}

await check("chat.completions.parse: strict tools, tool_choice required", async () => {
  await forcedCall("required", null);
});

await check("chat.completions.parse: strict tools, a named function (get_time)", async () => {
  await forcedCall({ type: "function", function: { name: "get_time" } }, "get_time");
});

await check("chat.completions.parse: response_format json_schema (strict)", async () => {
  const response_format = makeParseableResponseFormat(
    { type: "json_schema", json_schema: { name: "city", strict: true, schema: {
      type: "object", properties: { city: { type: "string", maxLength: 20 }, sunny: { type: "boolean" } },
      required: ["city", "sunny"], additionalProperties: false } } },
    (content) => JSON.parse(content));
  const r = await client.chat.completions.parse({
    model, messages: [{ role: "user", content: "What's the weather in Paris?" }], temperature: 0,
    max_tokens: 120, response_format,
  });
  const c = r.choices[0];
  assert(c.finish_reason === "stop", JSON.stringify(c));
  const p = c.message.parsed;
  assert(p && typeof p.city === "string" && typeof p.sunny === "boolean" &&
    JSON.stringify(Object.keys(p)) === '["city","sunny"]', JSON.stringify(c.message));
  console.log(`# json_schema: ${c.message.content}`);
});
