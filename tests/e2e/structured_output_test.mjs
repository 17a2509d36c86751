// End-to-end suite for structured outputs and tool calls: the official `openai` npm package
// against `kvserve serve` on the built-in RANDOM-weight model, every output checked with the
// ajv JSON Schema validator (formats by ajv-formats). A random model makes this a strong test:
// without the constraint almost nothing it writes parses (the control test measures that).
// Run by tests/e2e/run_e2e.sh with a server started with --enable-auto-tool-choice and a Qwen3
// (Hermes-format) chat template; it sets KVSERVE_BASE_URL, KVSERVE_API_KEY, KVSERVE_MODEL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const baseURL = process.env.KVSERVE_BASE_URL + '/v1';
const apiKey = process.env.KVSERVE_API_KEY;
const model = process.env.KVSERVE_MODEL;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);

// Runs `fn` over `items` with at most `limit` in flight.
async function pool(items, limit, fn) {
  const results = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: limit }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  });
  await Promise.all(workers);
  return results;
}

// Schemas written for this test: nested objects, arrays, enums, required fields, anyOf,
// $ref/$defs, const, patterns and formats. Strings and arrays are bounded so that a random
// model ends within max_tokens.
const SCHEMAS = [
  {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer' },
      tags: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
    },
    required: ['name', 'age', 'tags'],
  },
  {
    type: 'object',
    properties: {
      user: {
        type: 'object',
        properties: {
          id: { type: 'integer' },
          active: { type: 'boolean' },
          role: { enum: ['admin', 'user', 'guest'] },
          email: { type: 'string', format: 'email' },
        },
        required: ['id', 'active', 'role', 'email'],
      },
      address: {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 10 },
          zip: { type: 'string', pattern: '^[0-9]{5}$' },
        },
        required: ['city', 'zip'],
      },
    },
    required: ['user', 'address'],
  },
  {
    type: 'object',
    properties: {
      items: {
        type: 'array',
        minItems: 1,
        maxItems: 4,
        items: {
          type: 'object',
          properties: {
            sku: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{4}$' },
            qty: { type: 'integer' },
            price: { type: 'number' },
          },
          required: ['sku', 'qty'],
        },
      },
      note: { type: 'string', maxLength: 8 },
    },
    required: ['items'],
  },
  {
    type: 'object',
    properties: {
      status: { const: 'ok' },
      result: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 8 }, { type: 'integer' }] },
      when: { type: 'string', format: 'date' },
    },
    required: ['status', 'result', 'when'],
  },
  {
    type: 'object',
    $defs: {
      point: {
        type: 'object',
        properties: { x: { type: 'number' }, y: { type: 'number' } },
        required: ['x', 'y'],
      },
    },
    properties: {
      from: { $ref: '#/$defs/point' },
      to: { $ref: '#/$defs/point' },
      label: { enum: ['a', 'b', null] },
    },
    required: ['from', 'to'],
  },
  { type: 'array', items: { type: 'string', maxLength: 6 }, minItems: 2, maxItems: 5 },
  {
    type: 'object',
    properties: {
      color: { enum: ['red', 'green', 'blue'] },
      count: { type: 'integer' },
      flags: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
      id: { type: 'string', format: 'uuid' },
    },
    required: ['color', 'count', 'flags', 'id'],
  },
  {
    type: 'object',
    properties: {
      answer: { type: 'string', enum: ['yes', 'no'] },
      confidence: { type: 'number' },
      at: { type: 'string', format: 'date-time' },
      sources: {
        type: 'array',
        maxItems: 2,
        items: {
          type: 'object',
          properties: { title: { type: 'string', maxLength: 10 }, year: { type: 'integer' } },
          required: ['title'],
        },
      },
    },
    required: ['answer', 'confidence', 'at', 'sources'],
  },
];
const validators = SCHEMAS.map((s) => ajv.compile(s));

function validate(i, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return `does not parse (${e.message}): ${JSON.stringify(text)}`;
  }
  if (!validators[i](value)) {
    return `does not validate against schema ${i}: ${ajv.errorsText(validators[i].errors)}: ${text}`;
  }
  return null;
}

test('200 json_schema requests: every output parses and validates', async () => {
  const requests = Array.from({ length: 200 }, (_, k) => k);
  const failures = [];
  let tokens = 0;
  await pool(requests, 16, async (k) => {
    const i = k % SCHEMAS.length;
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: `Give me object number ${k}.` }],
      max_tokens: 600,
      temperature: 1.0,
      seed: k,
      response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema: SCHEMAS[i] } },
    });
    tokens += r.usage.completion_tokens;
    const c = r.choices[0];
    if (c.finish_reason !== 'stop') failures.push(`#${k}: finish_reason ${c.finish_reason}`);
    const err = validate(i, c.message.content);
    if (err) failures.push(`#${k}: ${err}`);
  });
  assert.deepEqual(failures, []);
  console.log(`  200 outputs valid, ${tokens} completion tokens`);
});

test('control: without the constraint the random model writes no valid JSON', async () => {
  let valid = 0;
  await pool(Array.from({ length: 24 }, (_, k) => k), 8, async (k) => {
    const i = k % SCHEMAS.length;
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: `Answer in JSON with schema ${JSON.stringify(SCHEMAS[i])}` }],
      max_tokens: 60,
      temperature: 1.0,
      seed: k,
    });
    if (validate(i, r.choices[0].message.content) === null) valid += 1;
  });
  assert.ok(valid <= 1, `${valid} of 24 unconstrained outputs validated`);
});

test('response_format json_schema, streaming: the concatenated deltas validate', async () => {
  for (let k = 0; k < 8; ++k) {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Stream an object.' }],
      max_tokens: 600,
      temperature: 1.0,
      seed: 1000 + k,
      stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMAS[k] } },
    });
    let text = '';
    let finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    assert.equal(finish, 'stop');
    assert.equal(validate(k, text), null);
  }
});

test('response_format json_object and completions guided fields', async () => {
  for (let k = 0; k < 6; ++k) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 300,
      temperature: 0.7, seed: k, response_format: { type: 'json_object' },
    });
    const c = r.choices[0];
    // An open-ended object may run past max_tokens; what finished is an object.
    if (c.finish_reason === 'stop') {
      const v = JSON.parse(c.message.content);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v));
    }
  }
  // vLLM's guided_* fields on /v1/completions.
  const choice = await client.completions.create({
    model, prompt: 'Pick:', max_tokens: 20, seed: 3, guided_choice: ['alpha', 'beta', 'gamma delta'],
  });
  assert.ok(['alpha', 'beta', 'gamma delta'].includes(choice.choices[0].text), choice.choices[0].text);
  const regex = await client.completions.create({
    model, prompt: 'Code:', max_tokens: 20, seed: 4, guided_regex: '[A-Z]{2}-[0-9]{3}',
  });
  assert.match(regex.choices[0].text, /^[A-Z]{2}-[0-9]{3}$/);
  const gbnf = await client.completions.create({
    model, prompt: 'Say:', max_tokens: 40, seed: 5,
    grammar: 'root ::= "(" num ("," num)* ")"\nnum ::= [0-9]{1,3}',
  });
  assert.match(gbnf.choices[0].text, /^\(\d{1,3}(,\d{1,3})*\)$/);
});

test('an unsupported schema keyword is a 400 naming it and where it is', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'x' }],
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'x', schema: { type: 'object', properties: { n: { type: 'integer', minimum: 3 } } } },
      },
    }),
    (e) => e.status === 400 && /minimum/.test(e.message) && /properties\/n/.test(e.message),
  );
});

// Tools: the parameters schemas double as the validators of the calls' arguments.
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'book_flight',
      parameters: {
        type: 'object',
        properties: {
          from: { type: 'string', pattern: '^[A-Z]{3}$' },
          to: { type: 'string', pattern: '^[A-Z]{3}$' },
          passengers: { type: 'integer' },
          date: { type: 'string', format: 'date' },
        },
        required: ['from', 'to', 'passengers'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      parameters: {
        type: 'object',
        properties: {
          query: { type: 'string', maxLength: 16 },
          limit: { type: 'integer' },
          filters: { type: 'array', items: { enum: ['news', 'images', 'video'] }, maxItems: 2 },
        },
        required: ['query'],
      },
    },
  },
];
const toolValidators = Object.fromEntries(
  TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]),
);

function checkCalls(calls, where) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, `${where}: no tool_calls`);
  for (const call of calls) {
    assert.equal(call.type, 'function', where);
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/, where);
    const validator = toolValidators[call.function.name];
    assert.ok(validator, `${where}: unknown function ${call.function.name}`);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validator(args), `${where}: ${call.function.name}(${call.function.arguments}): ` +
      ajv.errorsText(validator.errors));
  }
}

// Collects a streamed chat completion: content, tool calls assembled from their deltas by
// index, finish reason.
async function collectStream(stream) {
  let content = '';
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) content += c.delta.content;
    for (const d of c.delta.tool_calls ?? []) {
      if (!calls[d.index]) {
        assert.ok(d.id && d.function?.name, 'the first delta of a call has its id and name');
        calls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } };
      }
      calls[d.index].function.arguments += d.function?.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, calls, finish };
}

test('100 tool_choice "required" requests: every call names a tool and its arguments validate', async () => {
  const failures = [];
  let numCalls = 0;
  await pool(Array.from({ length: 100 }, (_, k) => k), 16, async (k) => {
    const streaming = k % 3 === 0;
    const parallel = k % 5 !== 0;
    const req = {
      model,
      messages: [{ role: 'user', content: `Task ${k}: use the tools.` }],
      tools: TOOLS,
      tool_choice: 'required',
      parallel_tool_calls: parallel,
      max_tokens: 850,
      temperature: 1.0,
      seed: 500 + k,
    };
    try {
      let calls;
      let finish;
      if (streaming) {
        ({ calls, finish } = await collectStream(await client.chat.completions.create({ ...req, stream: true })));
      } else {
        const r = await client.chat.completions.create(req);
        calls = r.choices[0].message.tool_calls;
        finish = r.choices[0].finish_reason;
        assert.equal(r.choices[0].message.content, null);
      }
      assert.equal(finish, 'tool_calls');
      checkCalls(calls, `#${k}`);
      if (!parallel) assert.equal(calls.length, 1, `#${k}: parallel_tool_calls false`);
      numCalls += calls.length;
    } catch (e) {
      failures.push(`#${k}${streaming ? ' (stream)' : ''}: ${e.message}`);
    }
  });
  assert.deepEqual(failures, []);
  console.log(`  100 requests, ${numCalls} valid calls`);
});

test('a named tool_choice calls that function, streaming and not', async () => {
  for (const stream of [false, true]) {
    const req = {
      model,
      messages: [{ role: 'user', content: 'Book it.' }],
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'book_flight' } },
      max_tokens: 600,
      seed: 77,
    };
    let calls;
    let finish;
    if (stream) {
      ({ calls, finish } = await collectStream(await client.chat.completions.create({ ...req, stream })));
    } else {
      const r = await client.chat.completions.create(req);
      ({ tool_calls: calls } = r.choices[0].message);
      finish = r.choices[0].finish_reason;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'book_flight');
    checkCalls(calls, stream ? 'stream' : 'non-stream');
  }
});

test('tool_choice "auto": the Hermes parser turns <tool_call> blocks into tool_calls', async () => {
  // The random model would not write <tool_call> by itself: a regex makes it, so that the
  // parser path (the server's --tool-call-parser, from the Qwen3 template) is what is tested.
  const guided_regex =
    'Let me check\\.\\n<tool_call>\\n\\{"name": "get_weather", "arguments": \\{"city": "[a-z]{3,8}"\\}\\}\\n</tool_call>';
  const req = {
    model, messages: [{ role: 'user', content: 'Weather?' }], tools: TOOLS, max_tokens: 200, guided_regex,
    seed: 11,
  };
  const r = await client.chat.completions.create(req);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.content, 'Let me check.');
  checkCalls(r.choices[0].message.tool_calls, 'auto');
  const s = await collectStream(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(s.finish, 'tool_calls');
  assert.equal(s.content, 'Let me check.');
  assert.deepEqual(s.calls.map((c) => [c.function.name, c.function.arguments]),
    r.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  // Two calls; parallel_tool_calls false keeps the first, streaming and not.
  const two = '<tool_call>\\n\\{"name": "get_weather", "arguments": \\{"city": "ab"\\}\\}\\n</tool_call>\\n' +
    '<tool_call>\\n\\{"name": "search", "arguments": \\{"query": "cd"\\}\\}\\n</tool_call>';
  const both = await client.chat.completions.create({ ...req, guided_regex: two });
  assert.deepEqual(both.choices[0].message.tool_calls.map((c) => c.function.name), ['get_weather', 'search']);
  const one = await client.chat.completions.create({ ...req, guided_regex: two, parallel_tool_calls: false });
  assert.deepEqual(one.choices[0].message.tool_calls.map((c) => c.function.name), ['get_weather']);
  const oneStream = await collectStream(await client.chat.completions.create({
    ...req, guided_regex: two, parallel_tool_calls: false, stream: true,
  }));
  assert.deepEqual(oneStream.calls.map((c) => c.function.name), ['get_weather']);
  // Plain text with tools and tool_choice "auto" stays content.
  const plain = await client.chat.completions.create({ ...req, guided_regex: 'No tools needed\\.' });
  assert.equal(plain.choices[0].message.content, 'No tools needed.');
  assert.equal(plain.choices[0].finish_reason, 'stop');
  assert.equal(plain.choices[0].message.tool_calls, undefined);
});

test('a conversation with tool results renders and continues', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ],
    tools: TOOLS,
    tool_choice: 'none',
    max_tokens: 5,
    ignore_eos: true,
  });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
});

test('bad tool requests are 400s naming the field', async () => {
  const base = { model, messages: [{ role: 'user', content: 'x' }] };
  await assert.rejects(client.chat.completions.create({ ...base, tool_choice: 'required' }),
    (e) => e.status === 400 && /tools/.test(e.message));
  await assert.rejects(client.chat.completions.create({
    ...base, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } },
  }), (e) => e.status === 400 && /nope/.test(e.message));
  await assert.rejects(client.chat.completions.create({
    ...base, tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' },
  }), (e) => e.status === 400 && /both constrain/.test(e.message));
});
