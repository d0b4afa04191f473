// api_load.mjs -- server throughput for bench/bench_api.sh: C concurrent clients, each streaming R requests through
// the official OpenAI client (tests/node_modules/openai), greedy, max_tokens M. Prints one JSON line: tokens/s summed
// over the clients (completion tokens / wall time), time to first token p50/p99 (request sent -> first content chunk).
// Usage: node bench/api_load.mjs BASE_URL CLIENTS REQUESTS_EACH MAX_TOKENS
import { createRequire } from "module";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "tests", "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const [baseURL, C, R, M] = [process.argv[2], ...process.argv.slice(3).map(Number)];
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 600000 });
const ttft = [];
let tokens = 0;

async function one(i, k) {
  const t0 = performance.now();
  let first = null;
  const stream = await client.chat.completions.create({
    model: "bench", stream: true, stream_options: { include_usage: true }, temperature: 0, max_tokens: M,
    messages: [{ role: "user", content: `Client ${i}, request ${k}: write a short story about a lighthouse keeper.` }],
  });
  for await (const c of stream) {
    if (first === null && c.choices.length && c.choices[0].delta.content) first = performance.now() - t0;
    if (c.usage) tokens += c.usage.completion_tokens;
  }
  ttft.push(first ?? performance.now() - t0);
}

// One untimed request first: the client's first call loads its modules and opens the connection (52 ms against
// 10 ms for the next ones on a 2-core Xeon at load 7, tiny Qwen3), a cost of the client, not of the server.
await one(-1, 0);
ttft.length = 0, tokens = 0;
const t0 = performance.now();
await Promise.all([...Array(C).keys()].map(async (i) => { for (let k = 0; k < R; k++) await one(i, k); }));
const wall = (performance.now() - t0) / 1000;
ttft.sort((a, b) => a - b);
const q = (p) => ttft[Math.min(ttft.length - 1, Math.floor(p * ttft.length))];
console.log(JSON.stringify({ clients: C, requests: C * R, max_tokens: M, tokens, wall_s: +wall.toFixed(2),
  tok_s: +(tokens / wall).toFixed(2), ttft_p50_ms: Math.round(q(0.5)), ttft_p99_ms: Math.round(q(0.99)) }));
