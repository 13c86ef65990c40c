// The official `openai` npm package as a real client of latentd: completions
// and chat, streaming and not, include_usage, n, stop (never leaked, also
// when it spans tokens), seed determinism, logprobs, and the SDK's error
// classes for 400/401/404, structured output through chat.completions.parse.
// usage: node openai_client.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;
let failures = 0, count = 0;

async function check(name, fn) {
  count++;
  try {
    const note = await fn();
    console.log(`ok   ${name}${note ? ` (${note})` : ""}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n     ${String(e && e.stack || e).split("\n").slice(0, 4).join("\n     ")}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
const eq = (a, b, what) => assert(JSON.stringify(a) === JSON.stringify(b), `${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);

const greedy = { model, temperature: 0, max_tokens: 24, ignore_eos: true };
const prompt = "The quick brown fox jumps over the lazy dog and";

await check("completions.create", async () => {
  const r = await client.completions.create({ ...greedy, prompt });
  assert(r.object === "text_completion" && r.choices.length === 1, JSON.stringify(r));
  assert(r.usage.completion_tokens === 24 && r.choices[0].finish_reason === "length", JSON.stringify(r.usage));
  return JSON.stringify(r.choices[0].text.slice(0, 30));
});

await check("completions stream equals non-stream; include_usage", async () => {
  const whole = (await client.completions.create({ ...greedy, prompt })).choices[0].text;
  const stream = await client.completions.create({ ...greedy, prompt, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) { usage = chunk.usage; eq(chunk.choices, [], "usage chunk choices"); continue; }
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  eq(text, whole, "streamed text");
  assert(usage && usage.completion_tokens === 24 && usage.total_tokens === usage.prompt_tokens + 24, JSON.stringify(usage));
  eq(finish, "length", "finish_reason");
});

await check("one chunk per token: 1 and 8 concurrent streams, logprobs", async () => {
  const one = async (i) => {
    const stream = await client.completions.create({ ...greedy, temperature: 0.8, seed: i, prompt: `word ${i}`, logprobs: 1,
      stream: true, stream_options: { include_usage: true } });
    let chunks = 0, usage = null, finish = null;
    for await (const c of stream) {
      if (c.usage) { usage = c.usage; continue; }
      const n = (c.choices[0].logprobs?.tokens ?? []).length;
      assert(n <= 1, `a chunk carries ${n} tokens`);
      chunks += n;
      finish = c.choices[0].finish_reason ?? finish;
    }
    assert(usage && chunks === usage.completion_tokens, `${chunks} token chunks for ${usage && usage.completion_tokens} tokens`);
    return chunks;
  };
  const counts = [await one(0), ...(await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(one)))];
  return `${counts.reduce((a, b) => a + b, 0)} tokens in as many chunks`;
});

await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: undefined, max_completion_tokens: 12,
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Say something." }] });
  assert(r.object === "chat.completion" && r.choices[0].message.role === "assistant", JSON.stringify(r));
  eq(r.usage.completion_tokens, 12, "completion tokens");
});

await check("chat stream: role first, deltas equal the non-streamed message", async () => {
  const messages = [{ role: "user", content: [{ type: "text", text: "Tell me" }, { type: "text", text: "a story." }] }];
  const whole = (await client.chat.completions.create({ ...greedy, messages })).choices[0].message.content;
  const stream = await client.chat.completions.create({ ...greedy, messages, stream: true });
  let text = "", first = null, finish = null;
  for await (const chunk of stream) {
    if (!first) first = chunk;
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  eq(first.choices[0].delta.role, "assistant", "first delta role");
  eq(text, whole, "streamed chat text");
  eq(finish, "length", "finish_reason");
});

await check("n = 3: three choices, greedy ones equal", async () => {
  const r = await client.completions.create({ ...greedy, prompt, n: 3 });
  const texts = r.choices.sort((a, b) => a.index - b.index).map(c => c.text);
  eq(texts.length, 3, "choices");
  assert(texts[0] === texts[1] && texts[1] === texts[2], JSON.stringify(texts));
  const s = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], n: 3, max_tokens: 16,
    temperature: 1.2, seed: 5, ignore_eos: true });
  assert(new Set(s.choices.map(c => c.message.content)).size > 1, "sampled chat choices all equal");
  eq(s.usage.completion_tokens, 48, "chat n=3 usage");
});

await check("n = 2 streamed: both indexes, each finishes", async () => {
  const stream = await client.completions.create({ ...greedy, prompt, n: 2, stream: true });
  const text = ["", ""], fin = [null, null];
  for await (const c of stream) for (const ch of c.choices) { text[ch.index] += ch.text; fin[ch.index] = ch.finish_reason ?? fin[ch.index]; }
  eq(fin, ["length", "length"], "finish reasons");
  eq(text[0], text[1], "greedy texts");
});

await check("seed determinism", async () => {
  const body = { model, prompt, max_tokens: 24, temperature: 1.0, top_p: 0.95, ignore_eos: true };
  const a = (await client.completions.create({ ...body, seed: 1234 })).choices[0].text;
  const b = (await client.completions.create({ ...body, seed: 1234 })).choices[0].text;
  eq(a, b, "same seed");
  let differs = false;
  for (const seed of [1, 2, 3]) differs ||= (await client.completions.create({ ...body, seed })).choices[0].text !== a;
  assert(differs, "other seeds all gave the same text");
  const sa = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 16, temperature: 0.9, seed: 9 });
  const sb = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 16, temperature: 0.9, seed: 9 });
  eq(sa.choices[0].message.content, sb.choices[0].message.content, "chat same seed");
});

await check("stop strings (spanning tokens) cut the text and never leak", async () => {
  const full = (await client.completions.create({ ...greedy, prompt, max_tokens: 40 })).choices[0].text;
  // three printable ASCII characters from the middle of the greedy text: most likely spanning tokens
  let at = -1;
  for (let i = 4; i + 3 <= full.length; i++) if (/^[ -~]{3}$/.test(full.slice(i, i + 3))) { at = i; break; }
  assert(at >= 0, `no ASCII window in ${JSON.stringify(full)}`);
  const stop = full.slice(at, at + 3), want = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...greedy, prompt, max_tokens: 40, stop: ["\u0000never", stop] });
  eq(r.choices[0].text, want, "stopped text");
  eq(r.choices[0].finish_reason, "stop", "finish_reason");
  let streamed = "";
  for await (const c of await client.completions.create({ ...greedy, prompt, max_tokens: 40, stop, stream: true })) {
    streamed += c.choices[0]?.text ?? "";
    assert(!streamed.includes(stop), "stop string leaked into the stream");
  }
  eq(streamed, want, "streamed stopped text");
  return `stop ${JSON.stringify(stop)}`;
});

await check("logprobs (completions and chat)", async () => {
  const r = await client.completions.create({ ...greedy, prompt, max_tokens: 5, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  eq(lp.tokens.length, 5, "tokens");
  assert(lp.top_logprobs.every(t => Object.keys(t).length >= 1 && Object.keys(t).length <= 3), JSON.stringify(lp.top_logprobs));
  assert(lp.tokens.join("") === r.choices[0].text || r.choices[0].text.includes("\ufffd"), "tokens join to the text");
  const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs.content;
  assert(content.length >= 1 && content.every(t => t.top_logprobs.length === 2 && t.logprob <= 0), JSON.stringify(content));
});

await check("SDK error classes: 400, 404, 401", async () => {
  try { await client.completions.create({ model, prompt, temperature: 9 }); throw new Error("no error"); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "temperature", String(e)); }
  try { await client.completions.create({ model: "nope", prompt }); throw new Error("no error"); }
  catch (e) { assert(e instanceof OpenAI.NotFoundError && e.code === "model_not_found", String(e)); }
  const bad = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "wrong", maxRetries: 0 });
  try { await bad.models.list(); throw new Error("no error"); }
  catch (e) { assert(e instanceof OpenAI.AuthenticationError && e.status === 401, String(e)); }
});

await check("8 concurrent SDK streams", async () => {
  const one = async i => {
    let t = "";
    for await (const c of await client.chat.completions.create({ ...greedy, messages: [{ role: "user", content: `story ${i}` }], stream: true }))
      t += c.choices[0]?.delta?.content ?? "";
    return t;
  };
  const together = await Promise.all([...Array(8).keys()].map(one));
  for (let i = 0; i < 8; i++) eq(together[i], await one(i), `stream ${i}`);
});

// Structured output through the SDK's own parse helper (it JSON.parses
// message.content for a json_schema response_format, and throws on "length").
const person = {
  type: "object", additionalProperties: false, required: ["name", "mood", "ok"],
  properties: { name: { type: "string", maxLength: 6 }, mood: { enum: ["happy", "sad"] }, ok: { type: "boolean" } },
};
await check("chat.completions.parse with a json_schema response_format", async () => {
  const r = await client.chat.completions.parse({
    model, temperature: 1, seed: 3, max_completion_tokens: 200, messages: [{ role: "user", content: "A person, as JSON." }],
    response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
  });
  const p = r.choices[0].message.parsed;
  assert(r.choices[0].finish_reason === "stop", r.choices[0].finish_reason);
  assert(p && typeof p.name === "string" && p.name.length <= 6 && ["happy", "sad"].includes(p.mood) && typeof p.ok === "boolean",
         JSON.stringify(p));
  eq(Object.keys(p), ["name", "mood", "ok"], "keys in the schema's order");
  return r.choices[0].message.content;
});

await check("response_format json_object and an unsupported keyword (BadRequestError)", async () => {
  const r = await client.chat.completions.create({
    model, temperature: 1, seed: 4, max_completion_tokens: 200, messages: [{ role: "user", content: "JSON" }],
    response_format: { type: "json_object" } });
  if (r.choices[0].finish_reason === "stop") assert(typeof JSON.parse(r.choices[0].message.content) === "object", "an object");
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "date" } } } });
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError && /format/.test(e.message), String(e));
    return e.message.slice(0, 80);
  }
  throw new Error("no 400");
});

console.log(`${count - failures} of ${count} checks passed`);
process.exit(failures ? 1 : 0);
