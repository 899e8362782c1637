#!/usr/bin/env node
// Constrained decoding checked by an independent validator: `ajv` (2020-12
// dialect) against a running local spar cluster (real processes, cpu
// backend) serving the trained tiny GLM-5 (models/tiny-glm5-chat/bf16),
// which knows no JSON at all. With a fixed seed (mulberry32) the test
// generates random JSON Schemas from the supported subset — objects with
// required / optional properties and additionalProperties, arrays with
// items / prefixItems / minItems / maxItems, strings with enum / const /
// lengths, numbers and integers with (exclusive) bounds, booleans, null,
// anyOf / oneOf of disjoint types, $defs with $ref (recursion included) —
// and random prompts, sampling settings, thinking on and off, and asks:
//   - response_format json_schema: every answer parses and validates;
//   - response_format json_object: every answer is a JSON object;
//   - tool_choice "required" and a named function over random tool sets:
//     every answer is a call (of the named tool), with arguments that
//     validate against the tool's schema.
// max_tokens always leaves room for the schema's shortest instance (the
// masks' budget then guarantees a complete output).
//
// Usage: node constrained_outputs.js SPAR_BINARY SOURCE_DIR WORK_DIR [NODE_MODULES_DIR]
'use strict';

const assert = require('assert/strict');
const path = require('path');

const [SPAR, SOURCE, WORK] = process.argv.slice(2, 5);
const MODULES = path.resolve(process.argv[5] || path.join(__dirname, 'node_modules'));
const OpenAI = require(path.join(MODULES, 'openai'));
const Ajv2020 = require(path.join(MODULES, 'ajv/dist/2020')).default;
const { startCluster, stopCluster, dumpLogs, mapConcurrent } = require('./local_cluster');

const MODEL = 'tiny-glm5';
const SCHEMA_CASES = 200, OBJECT_CASES = 20, TOOL_CASES = 24;

function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(20261201);
const below = (n) => Math.floor(rand() * n);
const pick = (xs) => xs[below(xs.length)];
const chance = (p) => rand() < p;

const WORDS = ['name', 'age', 'city', 'tags', 'score', 'id', 'items', 'ok', 'note', 'kind', 'value', 'size',
               'first name', 'año', '名前', 'a"quote', 'x\\y'];

// A random schema of the supported subset; `defs` collects $defs.
function randomSchema(depth, defs) {
  const leaf = depth >= 3;
  const kinds = leaf ? ['string', 'integer', 'number', 'boolean', 'null', 'enum', 'const']
                     : ['object', 'object', 'array', 'string', 'integer', 'number', 'boolean', 'enum', 'anyOf', 'ref'];
  switch (pick(kinds)) {
    case 'string': {
      const s = { type: 'string' };
      if (chance(0.4)) s.minLength = below(4);
      if (chance(0.4)) s.maxLength = (s.minLength || 0) + below(8);
      return s;
    }
    case 'integer': {  // within [lo, hi], each side optional, inclusive or exclusive
      const s = { type: 'integer' };
      const lo = below(200) - 100, hi = lo + below(300);
      if (chance(0.5)) s[chance(0.7) ? 'minimum' : 'exclusiveMinimum'] = s.minimum === undefined ? lo : lo;
      if (s.exclusiveMinimum !== undefined) s.exclusiveMinimum = lo - 1;
      if (chance(0.5)) s[chance(0.7) ? 'maximum' : 'exclusiveMaximum'] = hi;
      if (s.exclusiveMaximum !== undefined) s.exclusiveMaximum = hi + 1;
      return s;
    }
    case 'number': {
      const s = { type: 'number' };
      const lo = Math.round((rand() * 20 - 10) * 100) / 100, hi = lo + Math.round(rand() * 3000) / 100 + 0.5;
      if (chance(0.5)) s[chance(0.7) ? 'minimum' : 'exclusiveMinimum'] = lo;
      if (chance(0.5)) s[chance(0.7) ? 'maximum' : 'exclusiveMaximum'] = hi;
      return s;
    }
    case 'boolean': return { type: 'boolean' };
    case 'null': return { type: 'null' };
    case 'enum': return { enum: pick([['red', 'green', 'blue'], [1, 2, 3], ['a', 7, null, true], [{ k: [1] }, 'x']]) };
    case 'const': return { const: pick(['fixed', 42, false, ['a', 1]]) };
    case 'anyOf': {
      // Disjoint branches (different JSON types), so oneOf holds too.
      const branches = [{ type: 'string', maxLength: 6 }, { type: 'integer', minimum: 0 }, { type: 'null' },
                        { type: 'boolean' }, { type: 'array', items: { type: 'integer' }, maxItems: 3 }];
      const n = 2 + below(2);
      const chosen = [];
      for (const b of branches) if (chosen.length < n && chance(0.6)) chosen.push(b);
      while (chosen.length < 2) chosen.push(branches[chosen.length + 2]);
      return { [chance(0.5) ? 'anyOf' : 'oneOf']: chosen };
    }
    case 'ref': {
      const name = `d${Object.keys(defs).length}`;
      defs[name] = true;  // reserved: nested refs take other names
      if (chance(0.5)) {
        // A recursive list: { value, next: node | null }.
        defs[name] = { type: 'object', properties: { value: { type: 'integer', minimum: 0, maximum: 9 },
                                                     next: { anyOf: [{ $ref: `#/$defs/${name}` }, { type: 'null' }] } },
                       required: ['value', 'next'], additionalProperties: false };
      } else {
        defs[name] = randomSchema(depth + 1, defs);
      }
      return { $ref: `#/$defs/${name}` };
    }
    case 'array': {
      const s = { type: 'array' };
      if (chance(0.3)) {
        s.prefixItems = [randomSchema(depth + 1, defs), randomSchema(depth + 1, defs)];
        s.items = chance(0.5) ? false : randomSchema(depth + 1, defs);
      } else {
        s.items = randomSchema(depth + 1, defs);
      }
      if (chance(0.4)) s.minItems = below(3);
      if (chance(0.5)) s.maxItems = (s.minItems || 0) + below(4);
      return s;
    }
    default: {  // object
      const s = { type: 'object', properties: {} };
      const n = 1 + below(4);
      const names = new Set();
      while (names.size < n) names.add(pick(WORDS));
      for (const k of names) s.properties[k] = randomSchema(depth + 1, defs);
      const req = [...names].filter(() => chance(0.5));
      if (req.length) s.required = req;
      if (chance(0.5)) s.additionalProperties = false;
      if (chance(0.15)) {  // a map instead
        return { type: 'object', additionalProperties: randomSchema(depth + 1, defs), maxProperties: 3 };
      }
      return s;
    }
  }
}

function resolve(schema, root) {
  let s = schema;
  for (let i = 0; i < 8 && s && s.$ref; i++) s = root.$defs[s.$ref.slice('#/$defs/'.length)];
  return s;
}

// A shortest instance (an upper bound on what the grammar's shortest
// output needs), to size max_tokens.
function minimal(schema, root, depth = 0) {
  const s = resolve(schema, root);
  if (s === true || s === undefined) return 0;
  if ('const' in s) return s.const;
  if (s.enum) return s.enum.reduce((a, b) => (JSON.stringify(a).length <= JSON.stringify(b).length ? a : b));
  if (s.anyOf || s.oneOf) return minimal((s.anyOf || s.oneOf).find((b) => b.type === 'null') || (s.anyOf || s.oneOf)[0], root, depth);
  switch (s.type) {
    case 'string': return 'x'.repeat(s.minLength || 0);
    case 'integer': return s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 0);
    case 'number': return s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 0);
    case 'boolean': return true;
    case 'null': return null;
    case 'array': {
      const out = [];
      for (let i = 0; i < (s.minItems || 0); i++) {
        out.push(minimal(s.prefixItems && i < s.prefixItems.length ? s.prefixItems[i] : s.items, root, depth + 1));
      }
      return out;
    }
    default: {
      const out = {};
      for (const k of s.required || []) out[k] = depth > 8 ? null : minimal(s.properties[k], root, depth + 1);
      return out;
    }
  }
}
const budgetFor = (schema) => JSON.stringify(minimal(schema, schema)).length + 24 + below(100);

const QUESTIONS = ['What is 6 times 7?', 'Describe a city.', 'The password of KEY9 is RED. What is it?',
                   'List some numbers.', 'Hello!', 'Give me a JSON object about a cat.', '给我一个例子。'];

function sampling(i) {
  const thinking = i % 3 === 0;
  return { temperature: pick([0, 0.7, 1.0, 1.3]), top_p: pick([1, 0.9]), seed: 1000 + i,
           chat_template_kwargs: { enable_thinking: thinking } };
}

function randomTool(i) {
  const defs = {};
  const params = { type: 'object', properties: {} };
  const n = below(4);
  const names = new Set();
  while (names.size < n) names.add(pick(['city', 'days', 'query', 'limit', 'flags', 'mode', 'path', 'text']));
  for (const k of names) params.properties[k] = randomSchema(1, defs);
  const req = [...names].filter(() => chance(0.6));
  if (req.length) params.required = req;
  if (Object.keys(defs).length) params.$defs = defs;
  return { type: 'function', function: { name: `tool_${i}_${pick(['get', 'set', 'find', 'run'])}`, parameters: params } };
}

async function main() {
  if (!SPAR || !SOURCE || !WORK) throw new Error('usage: node constrained_outputs.js SPAR SOURCE WORK [NODE_MODULES]');
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const cluster = await startCluster(SPAR, WORK, { model: path.join(SOURCE, 'models/tiny-glm5-chat/bf16'), stages: 2,
                                                   servedName: MODEL });
  const api = new OpenAI({ baseURL: `http://127.0.0.1:${cluster.httpPort}/v1`, apiKey: 'unused', maxRetries: 0,
                           timeout: 600000 });
  const failures = [];
  const t0 = Date.now();
  try {
    // json_schema
    const schemaCases = [];
    for (let i = 0; i < SCHEMA_CASES; ++i) {
      const defs = {};
      const schema = randomSchema(0, defs);
      if (Object.keys(defs).length) schema.$defs = defs;
      schemaCases.push({ schema, question: pick(QUESTIONS), max_tokens: budgetFor(schema), ...sampling(i) });
    }
    let lengthFinishes = 0;
    await mapConcurrent(schemaCases, 16, async (c, i) => {
      const { schema, question, ...opts } = c;
      let r;
      try {
        r = await api.chat.completions.create({
          model: MODEL, messages: [{ role: 'user', content: question }], ...opts,
          response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema } } });
      } catch (e) {
        failures.push(`schema case ${i}: ${e}\n  schema ${JSON.stringify(schema)}`);
        return;
      }
      const text = r.choices[0].message.content;
      if (r.choices[0].finish_reason === 'length') lengthFinishes++;
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        failures.push(`schema case ${i}: not JSON: ${JSON.stringify(text)}\n  schema ${JSON.stringify(schema)}`);
        return;
      }
      const validate = ajv.compile(schema);
      if (!validate(value)) {
        failures.push(`schema case ${i}: ${ajv.errorsText(validate.errors)}\n  value ${text}\n  schema ${JSON.stringify(schema)}`);
      }
    });
    console.log(`json_schema: ${SCHEMA_CASES} random schemas, ${failures.length} failures ` +
                `(${lengthFinishes} finished at max_tokens, complete) (${Date.now() - t0} ms)`);

    // json_object
    const t1 = Date.now();
    const before = failures.length;
    await mapConcurrent([...Array(OBJECT_CASES).keys()], 8, async (i) => {
      const r = await api.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: pick(QUESTIONS) }], max_tokens: 30 + below(80),
        ...sampling(500 + i), response_format: { type: 'json_object' } });
      const text = r.choices[0].message.content;
      let v;
      try {
        v = JSON.parse(text);
      } catch (e) {
        failures.push(`json_object case ${i}: not JSON: ${JSON.stringify(text)}`);
        return;
      }
      if (typeof v !== 'object' || v === null || Array.isArray(v)) failures.push(`json_object case ${i}: ${text}`);
    });
    console.log(`json_object: ${OBJECT_CASES} answers, ${failures.length - before} failures (${Date.now() - t1} ms)`);

    // tool_choice required / named
    const t2 = Date.now();
    const beforeTools = failures.length;
    await mapConcurrent([...Array(TOOL_CASES).keys()], 16, async (i) => {
      const tools = Array.from({ length: 1 + below(2) }, (_, k) => randomTool(i * 10 + k));
      const named = chance(0.5) ? pick(tools).function.name : null;
      const tool_choice = named ? { type: 'function', function: { name: named } } : 'required';
      // Tags are one token each; names and minimal arguments at most a token a byte.
      const budget = 30 + Math.max(...tools.map((t) => t.function.name.length +
        JSON.stringify(minimal(t.function.parameters, t.function.parameters)).length * 2)) + below(30);
      let r;
      try {
        r = await api.chat.completions.create({
          model: MODEL, messages: [{ role: 'user', content: pick(QUESTIONS) }], max_tokens: budget, tools, tool_choice,
          parallel_tool_calls: chance(0.5), ...sampling(900 + i) });
      } catch (e) {
        failures.push(`tool case ${i}: ${e}\n  tools ${JSON.stringify(tools)}`);
        return;
      }
      const m = r.choices[0].message;
      if (!m.tool_calls || m.tool_calls.length === 0) {
        failures.push(`tool case ${i}: no call: ${JSON.stringify(m)}\n  tools ${JSON.stringify(tools)}`);
        return;
      }
      if (r.choices[0].finish_reason !== 'tool_calls') failures.push(`tool case ${i}: finish ${r.choices[0].finish_reason}`);
      if (named && m.tool_calls.length !== 1) failures.push(`tool case ${i}: ${m.tool_calls.length} calls of a named tool`);
      for (const call of m.tool_calls) {
        const tool = tools.find((t) => t.function.name === call.function.name);
        if (!tool || (named && call.function.name !== named)) {
          failures.push(`tool case ${i}: called ${call.function.name}`);
          continue;
        }
        const validate = ajv.compile(tool.function.parameters);
        const args = JSON.parse(call.function.arguments);
        if (!validate(args)) {
          failures.push(`tool case ${i}: ${ajv.errorsText(validate.errors)}\n  args ${call.function.arguments}\n  ` +
                        `schema ${JSON.stringify(tool.function.parameters)}`);
        }
      }
    });
    console.log(`tool calls: ${TOOL_CASES} required / named choices, ${failures.length - beforeTools} failures ` +
                `(${Date.now() - t2} ms)`);
  } catch (e) {
    failures.push(e.stack || String(e));
  } finally {
    await stopCluster(cluster);
  }
  if (failures.length > 0) {
    for (const f of failures.slice(0, 20)) console.log(`FAIL ${f}`);
    dumpLogs(cluster.logs);
    console.log(`${failures.length} failures`);
    process.exit(1);
  }
  console.log('all passed');
}

main().catch((e) => {
  console.error(e.stack || e);
  process.exit(1);
});
