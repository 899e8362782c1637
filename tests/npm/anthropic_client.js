#!/usr/bin/env node
// The official `@anthropic-ai/sdk` client against a running local spar
// cluster (real processes: `spar cluster`, a spar-scheduler and two
// pipeline-stage spar-workers, cpu backend) serving the trained tiny GLM-5
// (models/tiny-glm5-chat/bf16) with an API key: the Messages API
// (POST /v1/messages, /v1/messages/count_tokens) non-streamed and
// streamed (the SDK's own event parsing and MessageStream accumulation),
// with tools (auto, any, a named tool; tool_use / tool_result turns),
// thinking, stop_sequences, token counting, x-api-key and Bearer auth, and
// Anthropic-shaped errors raised as the SDK's typed errors.
//
// Usage: node anthropic_client.js SPAR_BINARY SOURCE_DIR WORK_DIR [NODE_MODULES_DIR]
'use strict';

const assert = require('assert/strict');
const path = require('path');

const [SPAR, SOURCE, WORK] = process.argv.slice(2, 5);
const MODULES = path.resolve(process.argv[5] || path.join(__dirname, 'node_modules'));
const AnthropicModule = require(path.join(MODULES, '@anthropic-ai/sdk'));
const Anthropic = AnthropicModule.default || AnthropicModule.Anthropic || AnthropicModule;
const { startCluster, runAgainstCluster } = require('./local_cluster');

const API_KEY = 'sk-spar-anthropic-test';
const MODEL = 'tiny-glm5';

function client(port, opts = {}) {
  // No retries: an error must show up as what it is.
  return new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: API_KEY, maxRetries: 0, timeout: 120000,
                         ...opts });
}

const WEATHER = {
  name: 'get_weather',
  description: 'Current weather for a city.',
  input_schema: {
    type: 'object',
    properties: {
      city: { type: 'string' },
      days: { type: 'integer', minimum: 1, maximum: 7 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    },
    required: ['city', 'days'],
  },
};
const NOTE = {
  name: 'save_note',
  description: 'Save a note.',
  input_schema: { type: 'object', properties: { text: { type: 'string', maxLength: 20 } }, required: ['text'] },
};

function checkWeatherInput(input) {
  assert.equal(typeof input.city, 'string');
  assert.ok(Number.isInteger(input.days) && input.days >= 1 && input.days <= 7, JSON.stringify(input));
  if ('unit' in input) assert.ok(['celsius', 'fahrenheit'].includes(input.unit));
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('a plain message: the trained answer, Anthropic shape and usage', async ({ api }) => {
  const m = await api.messages.create({ model: MODEL, max_tokens: 8, temperature: 0,
                                        messages: [{ role: 'user', content: 'What is 6 times 7?' }] });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, MODEL);
  assert.match(m.id, /^msg_/);
  assert.deepEqual(m.content, [{ type: 'text', text: '42' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, JSON.stringify(m.usage));
});

test('streamed events follow the documented sequence and add up to the message', async ({ api }) => {
  const params = { model: MODEL, max_tokens: 8, temperature: 0, system: 'You are a calculator.',
                   messages: [{ role: 'user', content: 'What is 12 plus 30?' }] };
  const whole = await api.messages.create(params);
  const raw = await api.messages.create({ ...params, stream: true });
  const types = [];
  let text = '';
  for await (const ev of raw) {
    types.push(ev.type === 'content_block_delta' ? `delta:${ev.delta.type}` : ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') {
      assert.equal(ev.delta.stop_reason, whole.stop_reason);
      assert.equal(ev.usage.output_tokens, whole.usage.output_tokens);
    }
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'), types.join());
  assert.equal(text, whole.content[0].text);
  // The SDK's MessageStream accumulates the same Message.
  const streamed = await api.messages.stream(params).finalMessage();
  assert.deepEqual(streamed.content, whole.content);
  assert.equal(streamed.stop_reason, whole.stop_reason);
});

test('thinking enabled opens with a thinking block, then the answer', async ({ api }) => {
  const params = { model: MODEL, max_tokens: 16, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
                   messages: [{ role: 'user', content: 'What is 6 times 7?' }] };
  const m = await api.messages.create(params);
  assert.equal(m.content[0].type, 'thinking', JSON.stringify(m.content));
  assert.equal(typeof m.content[0].thinking, 'string');
  assert.equal(m.content.at(-1).type, 'text');
  assert.equal(m.content.at(-1).text, '42');
  const streamed = await api.messages.stream(params).finalMessage();
  assert.deepEqual(streamed.content.map((b) => b.type), m.content.map((b) => b.type));
  // Thinking from an earlier turn goes back to the template as reasoning.
  const again = await api.messages.create({ ...params, messages: [
    { role: 'user', content: 'What is 6 times 7?' },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'six sevens', signature: '' }, { type: 'text', text: '42' }] },
    { role: 'user', content: 'What is 2 times 3?' },
  ] });
  assert.equal(again.content.at(-1).type, 'text');
});

test('tool_choice any and a named tool always call, with schema-valid input', async ({ api }) => {
  for (const [i, tool_choice] of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }, { type: 'any' }].entries()) {
    const m = await api.messages.create({ model: MODEL, max_tokens: 80, temperature: i === 2 ? 1 : 0,
                                          tools: [WEATHER, NOTE], tool_choice,
                                          messages: [{ role: 'user', content: 'What is the weather in Paris?' }] });
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1, JSON.stringify(m.content));
    for (const u of uses) {
      assert.match(u.id, /^toolu_/);
      if (tool_choice.name) assert.equal(u.name, 'get_weather');
      if (u.name === 'get_weather') checkWeatherInput(u.input);
      else assert.equal(typeof u.input.text, 'string');
    }
  }
});

test('streamed tool use arrives as input_json_delta and accumulates', async ({ api }) => {
  const stream = api.messages.stream({ model: MODEL, max_tokens: 80, temperature: 0, tools: [WEATHER],
                                       tool_choice: { type: 'tool', name: 'get_weather' },
                                       messages: [{ role: 'user', content: 'Weather in Oslo for 3 days?' }] });
  let json = '';
  stream.on('inputJson', (partial) => { json += partial; });
  const m = await stream.finalMessage();
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  checkWeatherInput(use.input);
  assert.deepEqual(JSON.parse(json), use.input);
  assert.equal(m.stop_reason, 'tool_use');
});

test('a tool_use / tool_result conversation continues', async ({ api }) => {
  const m = await api.messages.create({ model: MODEL, max_tokens: 12, temperature: 0, tools: [WEATHER],
                                        messages: [
                                          { role: 'user', content: 'Weather in Paris?' },
                                          { role: 'assistant', content: [
                                            { type: 'text', text: 'Checking.' },
                                            { type: 'tool_use', id: 'toolu_01', name: 'get_weather',
                                              input: { city: 'Paris', days: 1 } }] },
                                          { role: 'user', content: [
                                            { type: 'tool_result', tool_use_id: 'toolu_01',
                                              content: [{ type: 'text', text: '21 C, sunny' }] },
                                            { type: 'text', text: 'Thanks. What is 6 times 7?' }] },
                                        ] });
  assert.equal(m.type, 'message');
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason), m.stop_reason);
});

test('stop_sequences cut the answer and are reported', async ({ api }) => {
  const m = await api.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, stop_sequences: ['2'],
                                        messages: [{ role: 'user', content: 'What is 6 times 7?' }] });
  assert.deepEqual(m.content, [{ type: 'text', text: '4' }]);
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, '2');
  const streamed = await api.messages.stream({ model: MODEL, max_tokens: 8, temperature: 0, stop_sequences: ['2'],
                                               messages: [{ role: 'user', content: 'What is 6 times 7?' }] })
    .finalMessage();
  assert.equal(streamed.stop_reason, 'stop_sequence');
  assert.equal(streamed.stop_sequence, '2');
});

test('count_tokens equals the input tokens the message used', async ({ api }) => {
  const params = { model: MODEL, system: 'Be brief.', tools: [WEATHER],
                   messages: [{ role: 'user', content: 'What is the weather in Rome?' }] };
  const counted = await api.messages.countTokens(params);
  assert.ok(counted.input_tokens > 20, JSON.stringify(counted));
  const m = await api.messages.create({ ...params, max_tokens: 4, temperature: 0 });
  assert.equal(m.usage.input_tokens, counted.input_tokens);
  const shorter = await api.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] });
  assert.ok(shorter.input_tokens < counted.input_tokens);
});

test('x-api-key and Bearer both authenticate; a wrong key is an AuthenticationError', async ({ httpPort }) => {
  const bearer = new Anthropic({ baseURL: `http://127.0.0.1:${httpPort}`, apiKey: null, authToken: API_KEY,
                                 maxRetries: 0 });
  const m = await bearer.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(m.type, 'message');
  try {
    await client(httpPort, { apiKey: 'sk-wrong' }).messages.create({ model: MODEL, max_tokens: 2,
                                                                     messages: [{ role: 'user', content: 'Hi' }] });
    assert.fail('expected a 401');
  } catch (e) {
    assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'authentication_error');
  }
});

async function expectError(promise, Type, status, errorType, messagePart) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof Type, `expected ${Type.name}, got ${e}`);
    assert.equal(e.status, status);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, errorType);
    if (messagePart) assert.ok(e.error.error.message.includes(messagePart), e.error.error.message);
    return;
  }
  assert.fail(`expected HTTP ${status}`);
}

test('bad requests are Anthropic-shaped errors the SDK raises by type', async ({ api }) => {
  const msgs = [{ role: 'user', content: 'Hi' }];
  await expectError(api.messages.create({ model: 'claude-nonexistent', max_tokens: 4, messages: msgs }),
                    Anthropic.NotFoundError, 404, 'not_found_error', 'claude-nonexistent');
  await expectError(api.messages.create({ model: MODEL, max_tokens: 0, messages: msgs }), Anthropic.BadRequestError,
                    400, 'invalid_request_error', 'max_tokens');
  await expectError(api.messages.create({ model: MODEL, max_tokens: 4, messages: [
    { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
  Anthropic.BadRequestError, 400, 'invalid_request_error', 'messages[0].content[0].type');
  await expectError(api.messages.create({ model: MODEL, max_tokens: 4, messages: msgs, tools: [WEATHER],
                                          tool_choice: { type: 'tool', name: 'nope' } }),
                    Anthropic.BadRequestError, 400, 'invalid_request_error', 'tool_choice.name');
  await expectError(api.messages.create({ model: MODEL, max_tokens: 4, messages: msgs, top_p: 5 }),
                    Anthropic.BadRequestError, 400, 'invalid_request_error', 'top_p');
  // Streamed requests fail the same way (before the stream starts).
  await expectError(api.messages.create({ model: MODEL, max_tokens: 4, messages: msgs, stream: true, temperature: -1 }),
                    Anthropic.BadRequestError, 400, 'invalid_request_error', 'temperature');
  await expectError(api.messages.countTokens({ model: MODEL, messages: [] }), Anthropic.BadRequestError, 400,
                    'invalid_request_error', 'messages');
});

async function main() {
  if (!SPAR || !SOURCE || !WORK) {
    throw new Error('usage: node anthropic_client.js SPAR_BINARY SOURCE_DIR WORK_DIR [NODE_MODULES_DIR]');
  }
  const cluster = await startCluster(SPAR, WORK, { model: path.join(SOURCE, 'models/tiny-glm5-chat/bf16'), stages: 2,
                                                   apiKey: API_KEY, servedName: MODEL });
  await runAgainstCluster(tests, cluster, { ...cluster, api: client(cluster.httpPort) });
}

main().catch((e) => {
  console.error(e.stack || e);
  process.exit(1);
});
