// openai_client.mjs -- drives `tandem api` with the official OpenAI client (npm package openai, installed by
// scripts/install-deps.sh into tests/node_modules). Usage: node openai_client.mjs MODE BASE_URL KEY
//   basic: models, a reply streamed and not (greedy: the same text both ways), usage arithmetic, stop reasons,
//          errors as the SDK raises them (401 wrong key, 400 bad request, 400 prompt over the context)
//   load N ROUNDS: N concurrent clients, ROUNDS requests each (streamed and not): every one answered in full
//   disconnect: (a server with one sequence and no queue) a second request meanwhile gets 429 with Retry-After;
//          a stream abandoned mid-way frees the sequence at once: the next request is taken within 2 s
// Prints "ok: ..." lines; exits 1 with "FAIL: ..." on the first failed check.
import OpenAI from "openai";

const [mode, baseURL, key, ...rest] = process.argv.slice(2);
const fail = (m) => { console.log("FAIL: " + m); process.exit(1); };
const ok = (cond, m) => { if (!cond) fail(m); };
const client = new OpenAI({ baseURL, apiKey: key || "none", maxRetries: 0, timeout: 120000 });
const user = (text) => [{ role: "user", content: text }];

async function streamText(params, signal) {
  const stream = await client.chat.completions.create({ ...params, stream: true }, { signal });
  let text = "", finish = null, usage = null, chunks = 0, id = null;
  for await (const c of stream) {
    chunks++;
    id = id ?? c.id;
    ok(c.id === id, "every chunk carries the same id");
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    text += c.choices[0].delta.content ?? "";
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  return { text, finish, usage, chunks };
}

async function expectError(promise, status, what, contains) {
  try {
    await promise;
  } catch (e) {
    ok(e.status === status, `${what}: status ${e.status}, expected ${status}`);
    ok(e.error && typeof e.error.message === "string", `${what}: an OpenAI error object`);
    if (contains) ok(e.error.message.includes(contains), `${what}: '${e.error.message}' names ${contains}`);
    return e;
  }
  fail(`${what}: no error`);
}

async function basic() {
  const models = await client.models.list();
  ok(models.data.length === 1 && models.data[0].id === process.env.API_MODEL_NAME, "models.list names API_MODEL_NAME");
  console.log("ok: models.list");
  const params = { model: "tiny", messages: user("Who are you?"), temperature: 0, max_tokens: 12 };
  const r = await client.chat.completions.create(params);
  const c = r.choices[0];
  ok(r.object === "chat.completion" && r.model === "tiny" && r.id.startsWith("chatcmpl-"), "completion object");
  ok(typeof c.message.content === "string" && c.message.role === "assistant", "message");
  ok(c.finish_reason === "length" && r.usage.completion_tokens === 12, `12 tokens end with length (${c.finish_reason}, ${r.usage.completion_tokens})`);
  ok(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens && r.usage.prompt_tokens > 5, "usage adds up");
  console.log("ok: non-streaming reply, usage " + JSON.stringify(r.usage));
  const s = await streamText({ ...params, stream_options: { include_usage: true } });
  ok(s.text === c.message.content, `greedy streamed text equals the non-streamed one: '${s.text}' vs '${c.message.content}'`);
  ok(s.finish === "length" && s.usage && s.usage.completion_tokens === 12, "stream: finish reason and usage chunk");
  console.log(`ok: streamed reply (${s.chunks} chunks), same text`);
  const seeded = { model: "tiny", messages: user("hello"), temperature: 0.9, top_p: 0.9, seed: 7, max_tokens: 10 };
  const a1 = await client.chat.completions.create(seeded), a2 = await client.chat.completions.create(seeded);
  ok(a1.choices[0].message.content === a2.choices[0].message.content, "a seed reproduces a sampled reply");
  console.log("ok: seeded sampling reproduces");
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await expectError(bad.chat.completions.create(params), 401, "wrong key");
  await expectError(bad.models.list(), 401, "wrong key on /v1/models");
  await expectError(client.chat.completions.create({ model: "tiny" }), 400, "no messages", "messages");
  await expectError(client.chat.completions.create({ messages: user("x") }), 400, "no model", "model");
  await expectError(client.chat.completions.create({ model: "tiny", messages: [{ role: "assistant", content: "x" }] }), 400, "wrong role order", "role");
  await expectError(client.chat.completions.create({ model: "tiny", messages: user("x"), temperature: "hot" }), 400, "bad temperature", "temperature");
  const long = "hello ".repeat(400);
  await expectError(client.chat.completions.create({ model: "tiny", messages: user(long) }), 400, "prompt over the context", process.env.API_CONTEXT);
  console.log("ok: errors (401, 400 x5 incl. the context limit)");
}

async function load(n, rounds) {
  const t0 = Date.now();
  let done = 0, tokens = 0;
  const one = async (i, k) => {
    const params = { model: "tiny", messages: user(`client ${i} request ${k}`), max_tokens: 16, seed: i * 100 + k };
    if ((i + k) % 2) {
      const s = await streamText({ ...params, stream_options: { include_usage: true } });
      ok(s.usage && s.usage.completion_tokens >= 1 && s.finish, `client ${i}: a complete stream`);
      tokens += s.usage.completion_tokens;
    } else {
      const r = await client.chat.completions.create(params);
      ok(r.choices[0].finish_reason && r.usage.completion_tokens >= 1, `client ${i}: a complete reply`);
      tokens += r.usage.completion_tokens;
    }
    done++;
  };
  await Promise.all([...Array(n).keys()].map(async (i) => { for (let k = 0; k < rounds; k++) await one(i, k); }));
  ok(done === n * rounds, `${done} of ${n * rounds} answered`);
  console.log(`ok: load: ${n} concurrent clients x ${rounds}: ${done} answered, ${tokens} tokens in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

async function disconnect() {
  const ctl = new AbortController();
  const stream = await client.chat.completions.create({ model: "tiny", messages: user("go on"), max_tokens: 3000, stream: true },
                                                      { signal: ctl.signal });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  await it.next();
  const e = await expectError(client.chat.completions.create({ model: "tiny", messages: user("me too"), max_tokens: 2 }), 429, "the only sequence busy, no queue");
  ok(e.headers && e.headers["retry-after"] === "1", "429 carries Retry-After");
  console.log("ok: 429 with Retry-After while the only sequence is busy");
  ctl.abort();
  const t0 = Date.now();
  for (;;) {
    try {
      await client.chat.completions.create({ model: "tiny", messages: user("now"), max_tokens: 2 });
      break;
    } catch (err) {
      ok(err.status === 429, `after the disconnect: ${err.status} ${err.message}`);
      ok(Date.now() - t0 < 2000, "the abandoned stream still holds the sequence after 2 s");
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  console.log(`ok: a stream abandoned mid-way freed its sequence within ${Date.now() - t0} ms`);
}

try {
  if (mode === "basic") await basic();
  else if (mode === "load") await load(Number(rest[0]), Number(rest[1]));
  else if (mode === "disconnect") await disconnect();
  else fail("mode: basic, load N ROUNDS or disconnect");
} catch (e) {
  fail(`${e.constructor.name}: ${e.message}`);
}
