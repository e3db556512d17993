// The official OpenAI Node SDK, used exactly as an application would, against
// a Tandem router serving a demo model (tests/integration/test_demo_openai_sdk.sh):
// a text completion, a chat completion (and streamed), a chat completion with
// a tool definition that gets a tool call, streamed tool calls, and the
// follow-up carrying the tool's result.
//
//   node check.mjs BASE_URL MODEL
//
// Prints "PASS\tname" or "FAIL\tname\tdiagnostic" per check.
import OpenAI from "openai";

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
