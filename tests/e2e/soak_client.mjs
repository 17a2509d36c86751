// Soak load for `kvserve serve` (bench/soak_serve.sh runs it; not part of CI): for
// SOAK_SECONDS, SOAK_CONCURRENCY workers send a mix of streaming and non-streaming
// completions and chats with the official openai client, and a fraction of the streaming ones
// hang up mid-stream (AbortController: the TCP connection is closed). Every request must end
// in a response, an error object or our own abort; nothing may hang (each request has a
// deadline). Prints one JSON summary line on stdout; exits 1 when a request was lost.
import OpenAI from 'openai';

const baseURL = process.env.KVSERVE_BASE_URL + '/v1';
const model = process.env.KVSERVE_MODEL;
const seconds = Number(process.env.SOAK_SECONDS ?? 600);
const concurrency = Number(process.env.SOAK_CONCURRENCY ?? 16);
const disconnectFraction = Number(process.env.SOAK_DISCONNECT_FRACTION ?? 0.2);
const requestTimeoutMs = Number(process.env.SOAK_REQUEST_TIMEOUT_MS ?? 120_000);
const client = new OpenAI({ baseURL, apiKey: 'soak', maxRetries: 0, timeout: requestTimeoutMs });

const counts = { ok: 0, stream_ok: 0, disconnected: 0, http_errors: 0, lost: 0, tokens: 0 };
const errors = {};
let seed = 1;
function rand() {  // xorshift: reproducible mixes
  seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
  return ((seed >>> 0) % 1_000_000) / 1_000_000;
}
function prompt(len) {
  return Array.from({ length: len }, (_, i) => 20 + ((i * 31 + Math.floor(rand() * 7)) % 400));
}

async function one() {
  const stream = rand() < 0.7;
  const chat = rand() < 0.3;
  const maxTokens = 8 + Math.floor(rand() * 120);
  const body = chat
    ? { model, messages: [{ role: 'system', content: 'shared system prompt '.repeat(8) },
                          { role: 'user', content: `question ${Math.floor(rand() * 50)}` }],
        max_tokens: maxTokens, ignore_eos: true }
    : { model, prompt: prompt(16 + Math.floor(rand() * 400)), max_tokens: maxTokens, ignore_eos: true };
  const hangUp = stream && rand() < disconnectFraction;
  const controller = new AbortController();
  const api = chat ? client.chat.completions : client.completions;
  try {
    if (!stream) {
      const r = await api.create(body, { signal: controller.signal });
      counts.ok++;
      counts.tokens += r.usage.completion_tokens;
      return;
    }
    const s = await api.create({ ...body, stream: true }, { signal: controller.signal });
    let chunks = 0;
    const hangAfter = 1 + Math.floor(rand() * 10);
    let finish = null;
    for await (const chunk of s) {
      chunks++;
      for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
      if (hangUp && chunks >= hangAfter) { controller.abort(); break; }
    }
    if (hangUp && !finish) counts.disconnected++;
    else if (finish) { counts.stream_ok++; counts.tokens += chunks; }
    else { counts.lost++; errors.no_finish = (errors.no_finish ?? 0) + 1; }
  } catch (e) {
    if (e instanceof OpenAI.APIUserAbortError || e?.name === 'AbortError') { counts.disconnected++; return; }
    if (e instanceof OpenAI.APIError && e.status) {
      counts.http_errors++;
      errors[e.status] = (errors[e.status] ?? 0) + 1;
      return;
    }
    counts.lost++;
    const k = String(e?.constructor?.name ?? e);
    errors[k] = (errors[k] ?? 0) + 1;
  }
}

const deadline = Date.now() + seconds * 1000;
let lastReport = Date.now();
async function worker() {
  while (Date.now() < deadline) {
    await one();
    if (Date.now() - lastReport > 30_000) {
      lastReport = Date.now();
      const left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
      process.stderr.write(`soak: ${JSON.stringify(counts)} (${left} s left)\n`);
    }
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
console.log(JSON.stringify({ ...counts, errors }));
process.exit(counts.lost === 0 ? 0 : 1);
