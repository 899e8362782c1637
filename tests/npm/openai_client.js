#!/usr/bin/env node
// The official `openai` npm client against a running local spar cluster
// (real processes: `spar cluster` = a spar-scheduler and two pipeline-stage
// spar-workers on 127.0.0.1, ports picked by the daemons, cpu backend, the
// make-tiny GLM-5). The tiny model has random weights, so nothing here
// depends on what it says: the checks are the API's structure, seeded
// determinism, agreement between streamed and non-streamed answers and with
// the gRPC API (`spar generate --server`) for the same request, and
// OpenAI-shaped errors raised by the client as typed APIErrors.
//
// Usage: node openai_client.js SPAR_BINARY WORK_DIR [NODE_MODULES_DIR]
'use strict';

const assert = require('assert/strict');
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const [SPAR, WORK] = process.argv.slice(2, 4);
const MODULES = path.resolve(process.argv[4] || path.join(__dirname, 'node_modules'));
const OpenAI = require(path.join(MODULES, 'openai'));
const API_KEY = 'sk-spar-test';

const { sleep, waitForFile, runAgainstCluster } = require('./local_cluster');

async function startCluster() {
  fs.rmSync(WORK, { recursive: true, force: true });
  fs.mkdirSync(WORK, { recursive: true });
  const model = path.join(WORK, 'tiny-glm5');
  execFileSync(SPAR, ['make-tiny', '--arch', 'glm5', '--out', model, '--seed', '11'], { stdio: 'inherit' });
  const logs = path.join(WORK, 'logs');
  fs.mkdirSync(logs);
  const out = fs.openSync(path.join(WORK, 'cluster.out'), 'w');
  const child = spawn(SPAR, ['cluster', '--stages', '2', '--model', model, '--port', '0', '--port-file',
                             path.join(WORK, 'grpc.port'), '--http-port', '0', '--http-port-file',
                             path.join(WORK, 'http.port'), '--log-dir', logs],
                      { stdio: ['ignore', out, out], env: { ...process.env, SPAR_API_KEY: API_KEY } });
  const grpcPort = await waitForFile(path.join(WORK, 'grpc.port'), child, 120);
  const httpPort = await waitForFile(path.join(WORK, 'http.port'), child, 10);
  let banner = '';
  for (let i = 0; i < 100 && !banner.includes('OpenAI API at'); i++) {
    await sleep(100);
    banner = fs.readFileSync(path.join(WORK, 'cluster.out'), 'utf8');
  }
  assert.match(banner, new RegExp(`OpenAI API at http://127\\.0\\.0\\.1:${httpPort}/v1`), 'spar cluster prints the HTTP API');
  return { child, model, grpcPort, httpPort };
}

function client(httpPort, apiKey = API_KEY) {
  // No retries: a 429 or 5xx must show up as what it is.
  return new OpenAI({ baseURL: `http://127.0.0.1:${httpPort}/v1`, apiKey, maxRetries: 0, timeout: 120000 });
}

async function expectApiError(promise, status, check) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(typeof e.error.message, 'string');
    check(e);
    return;
  }
  assert.fail(`expected HTTP ${status}`);
}

function checkUsage(usage) {
  assert.ok(usage.prompt_tokens > 0);
  assert.ok(usage.completion_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

async function collectChatStream(stream) {
  const content = {}, finish = {}, roles = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles[c.index] = c.delta.role;
      content[c.index] = (content[c.index] || '') + (c.delta.content || '');
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { content, finish, roles, usage, chunks };
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('models.list names the served model', async ({ api, model }) => {
  const models = await api.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [path.basename(model)]);
  assert.equal(models.data[0].object, 'model');
});

test('chat: non-streaming answer, usage, seeded determinism, n > 1', async ({ api, served }) => {
  const req = { model: served, messages: [{ role: 'system', content: 'You are terse.' },
                                          { role: 'user', content: 'What is 2 + 2?' }],
                max_tokens: 12, temperature: 0.9, seed: 42 };
  const a = await api.chat.completions.create(req);
  assert.equal(a.object, 'chat.completion');
  assert.match(a.id, /^chatcmpl-/);
  assert.equal(a.model, served);
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].index, 0);
  assert.equal(a.choices[0].message.role, 'assistant');
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(a.choices[0].finish_reason));
  checkUsage(a.usage);
  assert.ok(a.usage.completion_tokens <= 12);
  const b = await api.chat.completions.create(req);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content, 'same seed, same answer');
  assert.deepEqual(b.usage, a.usage);
  const n = await api.chat.completions.create({ ...req, n: 3, ignore_eos: true });
  assert.deepEqual(n.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(n.usage.completion_tokens, 36);
  assert.ok(n.choices.every((c) => c.finish_reason === 'length'));
  // Choice 0 of n uses the request's seed: the same as the single answer
  // (when that one ran to max_tokens too).
  const single = await api.chat.completions.create({ ...req, ignore_eos: true });
  assert.equal(n.choices[0].message.content, single.choices[0].message.content);
});

test('chat: streaming with include_usage equals the non-streaming answer', async ({ api, served }) => {
  const req = { model: served, messages: [{ role: 'user', content: 'Count to five.' }], max_tokens: 10,
                temperature: 0.8, seed: 7, n: 2, ignore_eos: true };
  const whole = await api.chat.completions.create(req);
  const s = await collectChatStream(await api.chat.completions.create(
      { ...req, stream: true, stream_options: { include_usage: true } }));
  for (const i of [0, 1]) {
    assert.equal(s.roles[i], 'assistant');
    assert.equal(s.content[i], whole.choices[i].message.content, `choice ${i}`);
    assert.equal(s.finish[i], 'length');
  }
  assert.deepEqual(s.usage, whole.usage);
  assert.ok(s.chunks >= 4);
  // Without include_usage no usage chunk comes.
  const plain = await collectChatStream(await api.chat.completions.create({ ...req, n: 1, stream: true }));
  assert.equal(plain.usage, null);
  assert.equal(plain.content[0], whole.choices[0].message.content);
});

test('chat: multi-turn, the second turn carries the first answer', async ({ api, served }) => {
  const history = [{ role: 'user', content: 'Name a colour.' }];
  const first = await api.chat.completions.create({ model: served, messages: history, max_tokens: 8, seed: 3 });
  const answer = first.choices[0].message.content;
  history.push({ role: 'assistant', content: answer }, { role: 'user', content: 'And another one?' });
  const second = await api.chat.completions.create({ model: served, messages: history, max_tokens: 8, seed: 3 });
  assert.equal(second.choices[0].message.role, 'assistant');
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens,
            `turn 2 prompt (${second.usage.prompt_tokens}) includes turn 1 (${first.usage.prompt_tokens})`);
  // The answer message the client got back can be sent as it is.
  history.push(second.choices[0].message, { role: 'user', content: 'Thanks.' });
  const third = await api.chat.completions.create({ model: served, messages: history, max_tokens: 4, seed: 3 });
  assert.ok(third.usage.prompt_tokens > second.usage.prompt_tokens);
});

test('chat: logprobs with top_logprobs', async ({ api, served }) => {
  const r = await api.chat.completions.create({ model: served, messages: [{ role: 'user', content: 'Hi' }],
                                                max_tokens: 6, seed: 1, ignore_eos: true, logprobs: true,
                                                top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 6);
  for (const t of lp) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
    assert.ok(t.logprob <= t.top_logprobs[0].logprob + 1e-6);
  }
});

test('completions: text, stop, echo, logprobs; streaming equals non-streaming', async ({ api, served }) => {
  const req = { model: served, prompt: 'The capital of France is', max_tokens: 16, temperature: 0.7, seed: 5,
                ignore_eos: true };
  const a = await api.completions.create(req);
  assert.equal(a.object, 'text_completion');
  assert.match(a.id, /^cmpl-/);
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 16);
  const text = a.choices[0].text;
  let streamed = '', usage = null;
  for await (const chunk of await api.completions.create({ ...req, stream: true,
                                                            stream_options: { include_usage: true } })) {
    for (const c of chunk.choices) streamed += c.text;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(streamed, text);
  assert.deepEqual(usage, a.usage);
  const echo = await api.completions.create({ ...req, echo: true });
  assert.equal(echo.choices[0].text, req.prompt + text);
  const lp = await api.completions.create({ ...req, logprobs: 2 });
  assert.equal(lp.choices[0].text, text);
  assert.equal(lp.choices[0].logprobs.tokens.length, 16);
  assert.equal(lp.choices[0].logprobs.token_logprobs.length, 16);
  assert.equal(lp.choices[0].logprobs.text_offset[0], 0);
  // A stop string taken from the seeded text cuts it right there.
  // (Two whole characters, not U+FFFD: the random model writes any bytes.)
  const chars = Array.from(text);
  let stopAt = null;
  for (let i = 1; i + 2 <= chars.length && stopAt === null; i++) {
    const s = chars.slice(i, i + 2).join('');
    if (!s.includes('\ufffd') && s.trim() !== '') stopAt = s;
  }
  assert.ok(stopAt !== null, `no stop string candidate in ${JSON.stringify(text)}`);
  const stopped = await api.completions.create({ ...req, stop: ['never-there', stopAt] });
  assert.equal(stopped.choices[0].text, text.substring(0, text.indexOf(stopAt)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].stop_reason, stopAt);
  // Two prompts, n = 2: four choices, prompt-major.
  const multi = await api.completions.create({ ...req, prompt: [req.prompt, 'Hello'], n: 2 });
  assert.deepEqual(multi.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(multi.choices[0].text, text);
});

test('completions equal the gRPC API (spar generate --server) for the same request', async ({ api, served, grpcPort }) => {
  const ids = [17, 60, 3, 120, 9, 44];
  const r = await api.completions.create({ model: served, prompt: ids, max_tokens: 10, temperature: 0.6, seed: 99,
                                           ignore_eos: true, return_token_ids: true });
  const out = execFileSync(SPAR, ['generate', '--server', `127.0.0.1:${grpcPort}`, '--prompt-ids', ids.join(','),
                                  '--max-tokens', '10', '--temperature', '0.6', '--seed', '99', '--ignore-eos',
                                  '--show-ids'], { encoding: 'utf8', env: { ...process.env, SPAR_API_KEY: API_KEY } });
  const lines = out.trimEnd().split('\n');
  const grpcIds = lines[lines.length - 1].trim().split(/\s+/).map(Number);
  assert.deepEqual(r.choices[0].token_ids, grpcIds);
  assert.equal(lines.slice(0, -1).join('\n'), r.choices[0].text);
});

test('bad requests get OpenAI-shaped 4xx errors', async ({ api, served, httpPort }) => {
  const msgs = [{ role: 'user', content: 'x' }];
  await expectApiError(api.chat.completions.create({ model: served, messages: msgs, temperature: -1 }), 400, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, 'temperature');
  });
  await expectApiError(api.chat.completions.create({ model: served, messages: msgs, max_tokens: 10000000 }), 400,
                       (e) => assert.equal(e.param, 'max_tokens'));
  await expectApiError(api.chat.completions.create({ model: served, messages: [{ role: 'robot', content: 'x' }] }),
                       400, (e) => assert.equal(e.param, 'messages[0].role'));
  await expectApiError(api.completions.create({ model: served, prompt: 'x', n: 99 }), 400,
                       (e) => assert.equal(e.param, 'n'));
  await expectApiError(api.chat.completions.create({ model: 'gpt-4o', messages: msgs }), 404, (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    assert.equal(e.code, 'model_not_found');
  });
  await expectApiError(client(httpPort, 'sk-wrong').chat.completions.create({ model: served, messages: msgs }), 401,
                       (e) => {
                         assert.ok(e instanceof OpenAI.AuthenticationError);
                         assert.equal(e.code, 'invalid_api_key');
                       });
  // An error while streaming is raised the same way.
  await expectApiError(api.chat.completions.create({ model: served, messages: msgs, stream: true, top_p: 2 }), 400,
                       (e) => assert.equal(e.param, 'top_p'));
});

async function main() {
  if (!SPAR || !WORK) throw new Error('usage: node openai_client.js SPAR_BINARY WORK_DIR [NODE_MODULES_DIR]');
  const cluster = await startCluster();
  cluster.logs = path.join(WORK, 'logs');
  await runAgainstCluster(tests, cluster, { ...cluster, api: client(cluster.httpPort), served: path.basename(cluster.model) });
}

main().catch((e) => {
  console.error(e.stack || e);
  process.exit(1);
});
