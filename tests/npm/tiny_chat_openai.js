#!/usr/bin/env node
// Issue 13's answers through the served path: the trained tiny GLM-5
// (models/tiny-glm5-chat/bf16) behind a local `spar cluster` (cpu backend,
// a spar-scheduler and three pipeline-stage spar-workers on 127.0.0.1),
// asked with the official `openai` npm client over the OpenAI-compatible
// HTTP API, greedy:
//   - the 200 held-out arithmetic questions: >= 98% exact;
//   - the 60 multi-turn conversations, each continued with the model's own
//     earlier answers as assistant messages: >= 95% all correct;
//   - long-context key recall through the indexer, one case per context
//     size (8-30x index_topk; ~10 s of cpu each), as the cpu engine test
//     does in CI: >= 95%.
// The cases are tests/data/tiny_chat/evals.json, the ones the engine-level
// test (tests/chat/tiny_chat_test.cc) asks; thinking is switched per case
// through `chat_template_kwargs`, as the engine test renders it.
//
// Usage: node tiny_chat_openai.js SPAR_BINARY SOURCE_DIR WORK_DIR [NODE_MODULES_DIR]
'use strict';

const assert = require('assert/strict');
const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

const [SPAR, SOURCE, WORK] = process.argv.slice(2, 5);
const MODULES = path.resolve(process.argv[5] || path.join(__dirname, 'node_modules'));
const OpenAI = require(path.join(MODULES, 'openai'));

const { waitForFile, mapConcurrent } = require('./local_cluster');

const apply = (op, a, b) => (op === '+' ? a + b : op === '-' ? a - b : a * b);

async function main() {
  if (!SPAR || !SOURCE || !WORK) {
    throw new Error('usage: node tiny_chat_openai.js SPAR_BINARY SOURCE_DIR WORK_DIR [NODE_MODULES_DIR]');
  }
  const evals = JSON.parse(fs.readFileSync(path.join(SOURCE, 'tests/data/tiny_chat/evals.json'), 'utf8'));
  fs.rmSync(WORK, { recursive: true, force: true });
  fs.mkdirSync(WORK, { recursive: true });
  const logs = path.join(WORK, 'logs');
  const out = fs.openSync(path.join(WORK, 'cluster.out'), 'w');
  const child = spawn(SPAR, ['cluster', '--stages', '3', '--model', path.join(SOURCE, 'models/tiny-glm5-chat/bf16'),
                             '--port', '0', '--port-file', path.join(WORK, 'grpc.port'), '--http-port', '0',
                             '--http-port-file', path.join(WORK, 'http.port'), '--log-dir', logs],
                      { stdio: ['ignore', out, out] });
  let failed = false;
  try {
    await waitForFile(path.join(WORK, 'grpc.port'), child, 180);
    const httpPort = await waitForFile(path.join(WORK, 'http.port'), child, 30);
    const api = new OpenAI({ baseURL: `http://127.0.0.1:${httpPort}/v1`, apiKey: 'unused', maxRetries: 0,
                             timeout: 600000 });
    const model = (await api.models.list()).data[0].id;
    const ask = async (messages, maxTokens, kwargs) => {
      const req = { model, messages, max_tokens: maxTokens, temperature: 0 };
      if (kwargs) req.chat_template_kwargs = kwargs;
      const r = await api.chat.completions.create(req);
      // The model closes an empty thinking block before it answers (with
      // thinking on): the reasoning parser takes the tag out of the content.
      const m = r.choices[0].message;
      assert.equal(m.reasoning_content, null, JSON.stringify(m));
      assert.ok(!m.content.includes('think>'), JSON.stringify(m));
      assert.deepEqual(m.tool_calls, []);
      return m.content;
    };

    // Held-out arithmetic.
    let t0 = Date.now();
    const arith = evals.arithmetic;
    const got = await mapConcurrent(arith, 16, (c) => {
      assert.equal(c.answer, String(apply(c.op, c.a, c.b)), c.question);
      return ask([{ role: 'user', content: c.question }], 8, { enable_thinking: c.enable_thinking });
    });
    const wrong = arith.filter((c, i) => got[i] !== c.answer);
    for (const c of wrong.slice(0, 10)) console.log(`  wrong: ${c.question} -> ${JSON.stringify(got[arith.indexOf(c)])}`);
    const arithAcc = 1 - wrong.length / arith.length;
    console.log(`held-out arithmetic through the OpenAI API: ${(arithAcc * 100).toFixed(1)}% of ${arith.length} ` +
                `(${Date.now() - t0} ms)`);

    // Multi-turn: every conversation continues with the model's own answers.
    t0 = Date.now();
    let followUps = 0;
    const convs = await mapConcurrent(evals.multi_turn, 16, async (c) => {
      const history = [];
      for (const [turn, t] of c.turns.entries()) {
        assert.equal(t.answer, String(apply(t.op, t.a, t.b)), t.user);
        history.push({ role: 'user', content: t.user });
        const answer = await ask(history, 8);
        history.push({ role: 'assistant', content: answer });
        if (turn > 0) followUps++;
        if (answer !== t.answer) return false;
      }
      return true;
    });
    const multiAcc = convs.filter(Boolean).length / convs.length;
    console.log(`multi-turn conversations all correct through the OpenAI API: ${(multiAcc * 100).toFixed(1)}% of ` +
                `${convs.length} (${followUps} follow-up turns asked, ${Date.now() - t0} ms)`);

    // Recall: the first case of each context size.
    t0 = Date.now();
    const seen = new Set();
    const recall = evals.recall.filter((c) => !seen.has(c.sentences) && seen.add(c.sentences));
    const answers = await mapConcurrent(recall, 4, (c) => ask([{ role: 'user', content: c.user }], 16));
    const recallOk = recall.filter((c, i) => {
      assert.equal(c.answer, `The password of ${c.key} is ${c.value}.`);
      if (answers[i] !== c.answer) console.log(`  recall miss (${c.sentences} sentences): ${JSON.stringify(answers[i])}`);
      return answers[i] === c.answer;
    }).length;
    const recallAcc = recallOk / recall.length;
    console.log(`recall through the indexer via the OpenAI API: ${recallOk}/${recall.length} (context sizes ` +
                `${[...seen].join(', ')} sentences, ${Date.now() - t0} ms)`);

    assert.ok(arithAcc >= 0.98, `held-out arithmetic ${arithAcc}`);
    assert.ok(multiAcc >= 0.95, `multi-turn ${multiAcc}`);
    assert.ok(recallAcc >= 0.95, `recall ${recallAcc}`);
    console.log('all passed');
  } catch (e) {
    failed = true;
    console.log(e.stack || String(e));
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r() : child.on('exit', r)));
  }
  if (failed) {
    for (const f of fs.existsSync(logs) ? fs.readdirSync(logs) : []) {
      console.log(`----- ${f} (tail) -----\n${fs.readFileSync(path.join(logs, f), 'utf8').slice(-2000)}`);
    }
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(e.stack || e);
  process.exit(1);
});
