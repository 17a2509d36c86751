// End-to-end suite: the official `openai` npm package against a running `kvserve serve`.
// Run by tests/e2e/run_e2e.sh, which starts the server and sets KVSERVE_BASE_URL,
// KVSERVE_API_KEY and KVSERVE_MODEL. The served model has random weights, so the checks are
// about the API (shapes, counts, finish reasons, determinism), not about the text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVSERVE_BASE_URL + '/v1';
const apiKey = process.env.KVSERVE_API_KEY;
const model = process.env.KVSERVE_MODEL;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

// Ids of a long prompt: token ids are accepted as a prompt on /v1/completions.
const longPrompt = Array.from({ length: 80 }, (_, i) => 20 + ((i * 37) % 400));

test('models.list names the served model', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.deepEqual(ids, [model]);
});

test('completions: text, finish reason and usage', async () => {
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  // Greedy decoding is deterministic.
  const again = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  assert.equal(again.choices[0].text, r.choices[0].text);
});

test('completions: streaming equals non-streaming, usage chunk last', async () => {
  const whole = await client.completions.create({
    model, prompt: 'The cat', max_tokens: 12, temperature: 0, ignore_eos: true,
  });
  const stream = await client.completions.create({
    model, prompt: 'The cat', max_tokens: 12, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

test('chat: non-streaming and streaming', async () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Say something.' },
  ];
  const r = await client.chat.completions.create({
    model, messages, max_completion_tokens: 6, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, ignore_eos: true, stream: true,
  });
  let content = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const d = chunk.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) content += d.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(content, r.choices[0].message.content);
  assert.equal(finish, 'length');
});

test('n > 1 gives n choices; the same seed gives the same choices', async () => {
  const req = { model, prompt: 'Hello', max_tokens: 5, n: 3, seed: 42, temperature: 1.0, ignore_eos: true };
  const a = await client.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
  assert.equal(a.usage.completion_tokens, 15);
  const b = await client.completions.create(req);
  assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
});

test('stop strings end the text before the stop', async () => {
  const base = { model, prompt: 'abc', max_tokens: 30, temperature: 0, ignore_eos: true };
  const full = (await client.completions.create(base)).choices[0].text;
  assert.ok(full.length >= 8, `need some text, got ${JSON.stringify(full)}`);
  const stop = full.slice(4, 6);
  const r = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
});

test('logprobs on completions and chat', async () => {
  const r = await client.completions.create({
    model, prompt: 'Hi', max_tokens: 4, temperature: 0, logprobs: 2, ignore_eos: true,
  });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  for (const v of lp.token_logprobs) assert.ok(v <= 0);
  const c = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, temperature: 0,
    logprobs: true, top_logprobs: 2, ignore_eos: true,
  });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, 3);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);  // greedy: the most likely token
  }
});

test('usage reports cached prompt tokens on a repeated prefix', async () => {
  const req = { model, prompt: longPrompt, max_tokens: 2, temperature: 0, ignore_eos: true };
  const first = await client.completions.create(req);
  assert.equal(first.usage.prompt_tokens, longPrompt.length);
  const second = await client.completions.create(req);
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached < longPrompt.length, `cached_tokens=${cached}`);
});

test('errors: a bad request is a 400 BadRequestError, a wrong key a 401', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: -3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x' }),
    (e) => e.status === 400 && /does not exist/.test(e.message),
  );
  const wrongKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(
    wrongKey.models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
});

test('echo returns the prompt first, with its logprobs; max_tokens 0 scores the prompt', async () => {
  const r = await client.completions.create({
    model, prompt: 'Hello there', max_tokens: 3, temperature: 0, logprobs: 1, echo: true, ignore_eos: true,
  });
  const plain = await client.completions.create({
    model, prompt: 'Hello there', max_tokens: 3, temperature: 0, ignore_eos: true,
  });
  const c = r.choices[0];
  assert.equal(c.text, 'Hello there' + plain.choices[0].text);
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, r.usage.prompt_tokens + 3);
  assert.equal(lp.token_logprobs[0], null);  // the first prompt token has no context
  assert.equal(lp.top_logprobs[0], null);
  for (const v of lp.token_logprobs.slice(1)) assert.ok(v <= 0);
  assert.equal(lp.tokens.slice(0, r.usage.prompt_tokens).join(''), 'Hello there');
  const scored = await client.completions.create({ model, prompt: 'Hello there', max_tokens: 0, echo: true, logprobs: 0 });
  assert.equal(scored.choices[0].text, 'Hello there');
  assert.equal(scored.usage.completion_tokens, 0);
  assert.deepEqual(scored.choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, r.usage.prompt_tokens));
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 0 }),
    (e) => e.status === 400 && /echo/.test(e.message));
});

test('best_of generates more and returns the n most likely', async () => {
  const req = { model, prompt: 'Hi', max_tokens: 4, n: 2, best_of: 5, seed: 9, ignore_eos: true };
  const r = await client.completions.create(req);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 20);  // all five candidates are billed
  // The returned two are the best two of the five (same seeds: choice j has seed 9 + j).
  const all = await client.completions.create({ ...req, n: 5, best_of: 5, logprobs: 0 });
  const mean = (c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0) / c.logprobs.token_logprobs.length;
  const ranked = [...all.choices].sort((a, b) => mean(b) - mean(a)).map((c) => c.text);
  assert.deepEqual(r.choices.map((c) => c.text), ranked.slice(0, 2));
  await assert.rejects(client.completions.create({ ...req, stream: true }),
    (e) => e.status === 400 && /best_of/.test(e.message));
});
