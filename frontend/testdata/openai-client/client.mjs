// Drives a kvroute frontend with the official openai client: chat, streaming chat, completions, and an
// error case. Usage: node client.mjs BASE_URL MODEL. Prints one JSON line of results; exits 1 on failure.
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 20000 });
const out = {};

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hello to the router." }],
  max_tokens: 5,
});
out.chat = { content: chat.choices[0].message.content, usage: chat.usage, finish: chat.choices[0].finish_reason };

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Stream a few words, please." }],
  max_tokens: 4,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "", chunks = 0, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
out.stream = { text, chunks, usage };

const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 3 });
out.completion = { text: comp.choices[0].text, usage: comp.usage };

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
  out.error = { status: 0 };
} catch (e) {
  out.error = { status: e.status, type: e.error?.type ?? e.type, message: e.error?.message ?? e.message };
}
try {
  await client.chat.completions.create({ model, messages: [] });
  out.empty = { status: 0 };
} catch (e) {
  out.empty = { status: e.status };
}
console.log(JSON.stringify(out));
