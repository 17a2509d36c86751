// End-to-end: the official `openai` npm package's embeddings.create against /v1/embeddings.
// Run by tests/e2e/run_e2e.sh on two servers: a generator with --embedding-model and
// --semantic-cache (KVSERVE_EMBEDDINGS_ONLY unset), then an embedding model served alone
// (KVSERVE_EMBEDDINGS_ONLY=1). The embedding model has random weights (mkmodel
// all-minilm-l6-v2), so the checks are about the API: shapes, dimensions, normalisation, the
// float and base64 encodings agreeing, usage, errors; and determinism.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVSERVE_BASE_URL + '/v1';
const apiKey = process.env.KVSERVE_API_KEY;
const model = process.env.KVSERVE_MODEL;                 // the generator's name
const embeddingModel = process.env.KVSERVE_EMBEDDING_MODEL;
const embeddingsOnly = process.env.KVSERVE_EMBEDDINGS_ONLY === '1';
const DIM = 384;  // all-MiniLM-L6-v2
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

function cosine(a, b) {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i] * b[i];
  return dot / (norm(a) * norm(b));
}

test('models.list names the embedding model', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.deepEqual(ids, embeddingsOnly ? [embeddingModel] : [model, embeddingModel]);
});

test('embeddings.create: one string (the client asks for base64 and decodes it)', async () => {
  const r = await client.embeddings.create({ model: embeddingModel, input: 'The quick brown fox' });
  assert.equal(r.object, 'list');
  assert.equal(r.model, embeddingModel);
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].object, 'embedding');
  assert.equal(r.data[0].index, 0);
  assert.equal(r.data[0].embedding.length, DIM);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-4, 'L2-normalised');
  assert.ok(r.usage.prompt_tokens >= 3);  // [CLS] ... [SEP]
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
});

test('embeddings.create: arrays, token ids, float equals base64, deterministic', async () => {
  const texts = ['refund window for EU orders', 'refund window for US orders', 'cancel my card'];
  const asFloat = await client.embeddings.create({
    model: embeddingModel, input: texts, encoding_format: 'float',
  });
  const asBase64 = await client.embeddings.create({ model: embeddingModel, input: texts });
  assert.equal(asFloat.data.length, 3);
  for (let i = 0; i < 3; i++) {
    assert.equal(asFloat.data[i].index, i);
    assert.equal(asFloat.data[i].embedding.length, DIM);
    assert.ok(cosine(asFloat.data[i].embedding, asBase64.data[i].embedding) > 0.999999);
  }
  // Token ids are embedded as given ([CLS] 101 and [SEP] 102 included): the same answer each
  // time, and (to rounding: the batch changes the matmul tiles) in a batch.
  const ids = [101, 7592, 2088, 102];
  const a = await client.embeddings.create({ model: embeddingModel, input: ids, encoding_format: 'float' });
  const again = await client.embeddings.create({ model: embeddingModel, input: ids, encoding_format: 'float' });
  const b = await client.embeddings.create({ model: embeddingModel, input: [ids, ids], encoding_format: 'float' });
  assert.equal(a.usage.prompt_tokens, 4);
  assert.deepEqual(again.data[0].embedding, a.data[0].embedding);
  assert.equal(b.data.length, 2);
  assert.ok(cosine(b.data[0].embedding, a.data[0].embedding) > 0.99999);
  assert.ok(cosine(b.data[1].embedding, a.data[0].embedding) > 0.99999);
  // dimensions equal to the model's are accepted.
  const d = await client.embeddings.create({ model: embeddingModel, input: 'x', dimensions: DIM });
  assert.equal(d.data[0].embedding.length, DIM);
});

test('embeddings.create: errors are OpenAI errors', async () => {
  await assert.rejects(
    client.embeddings.create({ model: embeddingModel, input: 'x', dimensions: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && /dimensions/.test(e.message));
  await assert.rejects(
    client.embeddings.create({ model: 'no-such-model', input: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.embeddings.create({ model: embeddingModel, input: 'word '.repeat(600) }),
    (e) => e instanceof OpenAI.BadRequestError && /at most 512/.test(e.message));
  await assert.rejects(
    client.embeddings.create({ model: embeddingModel, input: [] }),
    (e) => e instanceof OpenAI.BadRequestError);
});

test('generation beside embeddings, or refused without a generator', async () => {
  if (embeddingsOnly) {
    await assert.rejects(
      client.completions.create({ model: embeddingModel, prompt: 'hi', max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && /embedding model/.test(e.message));
    return;
  }
  // The response cache: a repeat is an exact hit (its embedding comes from the embedding model).
  const body = {
    model, messages: [{ role: 'user', content: 'Name three colours.' }], max_tokens: 4, temperature: 0,
  };
  const first = await client.chat.completions.create(body).withResponse();
  const second = await client.chat.completions.create(body).withResponse();
  assert.equal(first.response.headers.get('x-kvserve-cache'), 'miss');
  assert.equal(second.response.headers.get('x-kvserve-cache'), 'exact');
  assert.equal(second.data.choices[0].message.content, first.data.choices[0].message.content);
});
