// The official openai client against `kvroute serve` with two models (run by cmd/kvroute
// TestOpenAINodeClient, which starts the server and sets KVROUTE_BASE_URL, MODEL_A and MODEL_B).
// Every response is checked field by field; the first mismatch exits 1 with what was wrong.
import OpenAI from 'openai';

const base = process.env.KVROUTE_BASE_URL;
const A = process.env.MODEL_A;
const B = process.env.MODEL_B;
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 30000 });

let checks = 0;
function check(cond, what, got) {
  checks++;
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
}
const isStr = (s) => typeof s === 'string';
const isNum = (n) => typeof n === 'number' && Number.isFinite(n);

function checkUsage(u, completion, what) {
  check(u && isNum(u.prompt_tokens) && u.prompt_tokens > 0, `${what}: usage.prompt_tokens`, u);
  check(u.completion_tokens === completion, `${what}: usage.completion_tokens == ${completion}`, u);
  check(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: usage.total_tokens`, u);
}

// models.list and models.retrieve
const list = await client.models.list();
const ids = list.data.map((m) => m.id);
check(ids.length === 2 && ids.includes(A) && ids.includes(B), 'models.list ids', ids);
for (const m of list.data) {
  check(m.object === 'model' && isNum(m.created) && isStr(m.owned_by), 'models.list entry', m);
}
const ma = await client.models.retrieve(A);
check(ma.id === A && ma.object === 'model' && isStr(ma.owned_by), 'models.retrieve', ma);

// chat (model A)
const msgs = [{ role: 'user', content: 'Hello! Tell me about caching.' }];
const chat = await client.chat.completions.create({ model: A, messages: msgs, max_tokens: 5 });
check(isStr(chat.id) && chat.object === 'chat.completion' && chat.model === A && isNum(chat.created), 'chat envelope', chat);
check(chat.choices.length === 1 && chat.choices[0].index === 0, 'chat choices', chat.choices);
check(chat.choices[0].message.role === 'assistant' && isStr(chat.choices[0].message.content) && chat.choices[0].message.content.length > 0,
  'chat message', chat.choices[0].message);
check(chat.choices[0].finish_reason === 'length', 'chat finish_reason', chat.choices[0]);
checkUsage(chat.usage, 5, 'chat');

// stream (model B), with the final usage chunk
const stream = await client.chat.completions.create({ model: B, messages: msgs, max_tokens: 6, stream: true,
  stream_options: { include_usage: true } });
let text = '', finish = null, usage = null, chunks = 0;
for await (const c of stream) {
  chunks++;
  check(c.object === 'chat.completion.chunk' && c.model === B && isStr(c.id), 'stream chunk envelope', c);
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) {
    check(ch.index === 0, 'stream choice index', ch);
    if (ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
check(chunks >= 6 && text.length > 0 && finish === 'length', 'stream content and finish', { chunks, text, finish });
checkUsage(usage, 6, 'stream');

// completions (model B)
const comp = await client.completions.create({ model: B, prompt: 'Once upon a time', max_tokens: 4 });
check(comp.object === 'text_completion' && comp.model === B && isStr(comp.id), 'completion envelope', comp);
check(comp.choices.length === 1 && isStr(comp.choices[0].text) && comp.choices[0].finish_reason === 'length', 'completion choice', comp.choices);
checkUsage(comp.usage, 4, 'completion');

// embeddings (model A): the client asks for base64 and decodes it
const emb = await client.embeddings.create({ model: A, input: ['first text', 'second text'] });
check(emb.object === 'list' && emb.model === A && emb.data.length === 2, 'embeddings envelope', emb);
for (const [i, d] of emb.data.entries()) {
  check(d.object === 'embedding' && d.index === i && Array.isArray(d.embedding) && d.embedding.length === 32 && d.embedding.every(isNum),
    'embedding vector', d);
  const norm = Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0));
  check(Math.abs(norm - 1) < 1e-3, 'embedding is a unit vector', norm);
}
check(emb.usage.prompt_tokens > 0 && emb.usage.total_tokens === emb.usage.prompt_tokens, 'embeddings usage', emb.usage);
const embF = await client.embeddings.create({ model: A, input: 'first text', encoding_format: 'float' });
check(embF.data[0].embedding.every((x, k) => Math.abs(x - emb.data[0].embedding[k]) < 1e-6), 'float and base64 embeddings agree', embF.data[0]);

// responses (model B)
const resp = await client.responses.create({ model: B, input: 'Say something short.', instructions: 'Be brief.', max_output_tokens: 5 });
check(isStr(resp.id) && resp.id.startsWith('resp_') && resp.object === 'response' && resp.model === B && resp.status === 'completed',
  'response envelope', resp);
check(resp.output.length === 1 && resp.output[0].type === 'message' && resp.output[0].role === 'assistant' &&
  resp.output[0].content[0].type === 'output_text', 'response output', resp.output);
check(isStr(resp.output_text) && resp.output_text.length > 0, 'response output_text', resp.output_text);
check(resp.usage.input_tokens > 0 && resp.usage.output_tokens === 5 && resp.usage.total_tokens === resp.usage.input_tokens + 5,
  'response usage', resp.usage);
const rstream = await client.responses.create({ model: A, input: 'Stream please.', max_output_tokens: 3, stream: true });
const types = [];
let rtext = '';
for await (const ev of rstream) {
  types.push(ev.type);
  if (ev.type === 'response.output_text.delta') rtext += ev.delta;
  if (ev.type === 'response.completed') check(ev.response.status === 'completed' && ev.response.output[0].content[0].text === rtext,
    'response stream completed', ev.response);
}
check(types[0] === 'response.created' && types.at(-1) === 'response.completed' && rtext.length > 0, 'response stream events', types);

// n: 2 (model A)
const n2 = await client.chat.completions.create({ model: A, messages: msgs, max_tokens: 3, n: 2 });
check(n2.choices.length === 2 && n2.choices[0].index === 0 && n2.choices[1].index === 1, 'n=2 choices', n2.choices);
for (const c of n2.choices) check(isStr(c.message.content) && c.finish_reason === 'length', 'n=2 choice', c);
checkUsage(n2.usage, 6, 'n=2');

// a forced tool call (model A)
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } }];
const tc = await client.chat.completions.create({ model: A, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools,
  tool_choice: { type: 'function', function: { name: 'get_weather' } } });
const call = tc.choices[0].message.tool_calls?.[0];
check(tc.choices[0].finish_reason === 'tool_calls' && tc.choices[0].message.role === 'assistant', 'tool call finish', tc.choices[0]);
check(call && isStr(call.id) && call.type === 'function' && call.function.name === 'get_weather', 'tool call', call);
const args = JSON.parse(call.function.arguments);
check(isStr(args.city) && isNum(args.days), 'tool call arguments follow the schema', args);

// an unknown model is OpenAI's 404
try {
  await client.chat.completions.create({ model: 'no-such-model', messages: msgs });
  check(false, 'unknown model answered', null);
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, 'unknown model error class', { name: e.name, status: e.status });
  check(e.param === 'model' && isStr(e.message) && e.message.includes('no-such-model'), 'unknown model error body', e.error);
}
try {
  await client.models.retrieve('no-such-model');
  check(false, 'unknown model retrieved', null);
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, 'models.retrieve unknown', { name: e.name, status: e.status });
}

console.log(`ok: ${checks} checks`);
