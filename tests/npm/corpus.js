// Deterministic tokenizer test corpus: hand-written edge cases plus seeded
// random mixtures. Each entry is either a JS string ("text") or a raw byte
// string given as hex ("bytes_hex") that is not valid UTF-8.
'use strict';

// mulberry32: small, fast, and identical on every Node version.
function rng(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIXED = [
  '', ' ', '  ', '\n', '\n\n\n', '\t', '\r\n', ' \r\n ', 'a', 'A', '0', '.', '😀',
  'Hello world', 'Hello, world!', ' leading space', 'trailing space ', '  two leading', 'multiple   inner    spaces',
  "It's John's book; they'll go, we've won, I'm here, you'd see, don't.",
  "IT'S LOUD, THEY'LL SHOUT, WE'VE WON, I'M HERE, YOU'D SEE, DON'T",
  'The quick brown fox jumps over the lazy dog.',
  '你好，世界！这是一个测试。', '我爱北京天安门，天安门上太阳升。', '日本語のテキストとカタカナ、ひらがな。',
  '한국어 텍스트입니다. 안녕하세요!', 'Привет, мир! Съешь же ещё этих мягких французских булок.',
  'Γειά σου Κόσμε', 'مرحبا بالعالم', 'שלום עולם', 'नमस्ते दुनिया', 'สวัสดีชาวโลก', 'Xin chào thế giới',
  'Mixed 中文 and English 混合 text 123 数字456',
  '1', '12', '123', '1234', '12345', '1234567890', '3.14159265358979', '1,000,000.00', '-42', '+1 (555) 010-9999',
  '2026-11-30T10:31:48Z', '0x1F600', '1e-10', '１２３４５', '٣٤٥', '½ ¾ ⅓ ², ³', 'Ⅻ ⅷ',
  'def foo(x):\n    return x * 2\n', 'int main() {\n\treturn 0;\n}\n',
  'for (int i = 0; i < n; ++i) { sum += a[i]; }', 'const x = {"a": [1, 2, 3], "b": null};',
  '<div class="x">Hello &amp; bye</div>', 'SELECT * FROM users WHERE id = 42;', '#!/bin/bash\necho "$HOME"\n',
  '    indented four\n        eight\n', '\t\ttabs\tinside\t', 'a\n\nb\n\n\nc', 'line\r\nwindows\r\n',
  'trailing newlines\n\n\n', 'spaces before newline   \n', ' \n \n ', '\u00a0nbsp\u00a0\u00a0x', 'ideographic\u3000\u3000space',
  'em\u2003space', 'line\u2028sep', 'nel\u0085x', 'mongolian\u180evs', 'zero\u200bwidth\u200cjoin\u200dx', '\ufeffbom',
  'control\u0001\u0002\u001f\u007f chars', 'nul\u0000byte',
  'e\u0301 combining', 'A\u030a vs Å', '\u1100\u1161\u11a8 jamo', 'ﬁ ligature', 'ｆｕｌｌｗｉｄｔｈ', 'Ｈｅｌｌｏ！',
  '👋🏽 wave', '👨‍👩‍👧‍👦 family', '🇺🇸🇨🇳 flags', '❤️ heart', '🤖🚀✨', 'emoji😀in😃text', '😀😀😀😀😀',
  '∀x∈ℝ: x² ≥ 0', '∑_{i=1}^{n} i = n(n+1)/2', '→ ← ↑ ↓ ⇒', '© ® ™ § ¶', '«quotes» „German“ “curly”',
  '...', '!!!???', '---', '***', '~~~', '```python\nprint(1)\n```', '$$x^2$$', '@user #tag $var %mod ^caret &amp',
  "'s", "'S", "'ll", " 's", "x's", "’s curly apostrophe",
  'https://example.com/path?q=1&r=2#frag', 'user@example.com', 'C:\\Windows\\System32', '/usr/local/bin',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  'ab'.repeat(60), ' '.repeat(40), '\n'.repeat(30), ' \t'.repeat(25), '-'.repeat(80), '='.repeat(33),
  'supercalifragilisticexpialidocious', 'pneumonoultramicroscopicsilicovolcanoconiosis',
  'camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case',
  // Special tokens of the tested tokenizers, alone, adjacent to text and partial.
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
  'text<|im_end|>text', ' <|im_end|> ', '<|im_start|><|im_end|>', '<|im_', '<|im_end', '<|im_end|', '<<|im_end|>>',
  '<tool_call>\n{"name": "f"}\n</tool_call>', '<think>\nreason\n</think>\n\nanswer',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>hi<｜Assistant｜>hello<｜end▁of▁sentence｜>',
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get', '<｜User', '<｜▁pad▁｜>',
  '[gMASK]<sop><|system|>\nYou are helpful.<|user|>\nHi<|assistant|>\n<think></think>\n',
  '<|user|>', '<|assistant|>', '<|observation|>', '<think></think>',
];

// Fragments for random mixtures.
const POOLS = {
  english: ['the', 'of', 'and', 'tokenizer', 'model', 'attention', 'sparse', 'GPU', 'Ampere', 'A100', 'serving',
            'Hello', 'world', "don't", "it's", 'running', 'quickly', 'JSON', 'HTTP/2', 'e.g.', 'i.e.', 'U.S.A.'],
  chinese: ['你好', '世界', '模型', '推理', '注意力', '稀疏', '的', '了', '是', '在', '我们', '中华人民共和国', '北京', '上海',
            '机器学习', '深度学习', '，', '。', '！', '？', '“', '”', '、', '：', '；'],
  japanese: ['こんにちは', 'カタカナ', 'ひらがな', '漢字', 'トークナイザー', 'です', 'ます', '。'],
  korean: ['안녕하세요', '모델', '한국어', '입니다'],
  code: ['def', 'return', '{', '}', '(', ')', '[', ']', ';', '=>', '->', '::', '==', '!=', '<=', '>=', '&&', '||',
         'std::vector<int>', 'self.x', '__init__', '#include', '//', '/*', '*/', '"str"', "'c'", '0x7fff', '\\n',
         'if', 'else', 'for', 'while', 'x += 1', 'nullptr', 'async', 'await', '`tpl`', '${x}'],
  numbers: ['0', '7', '42', '123', '2026', '65536', '3.14', '1e9', '99.99%', '1/2', '-1', '000123', '9876543210'],
  emoji: ['😀', '🚀', '👍🏻', '🇯🇵', '👩‍💻', '❤️', '🔥', '✅', '⚡', '🤔', '🎉', '💯'],
  symbols: ['.', ',', '!', '?', ':', ';', '-', '—', '–', '…', '(', ')', '"', "'", '@', '#', '$', '%', '^', '&', '*',
            '+', '=', '/', '\\', '|', '<', '>', '~', '`', '§', '°', '€', '£', '¥', '•', '·'],
  other: ['Привет', 'мир', 'Γειά', 'مرحبا', 'שלום', 'नमस्ते', 'สวัสดี', 'Việt', 'Ελληνικά', 'e\u0301', 'n\u0303',
          'ﬁ', 'Å', 'ß', 'ǅ', 'İ', 'ı', 'ſ'],
  special: ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<｜User｜>', '<｜Assistant｜>', '<｜end▁of▁sentence｜>',
            '<think>', '</think>', '<tool_call>', '</tool_call>'],
};
const SEPARATORS = [' ', ' ', ' ', ' ', '', '', '\n', '\n\n', '\t', '  ', '   ', '\r\n', ' \n', '\u3000', '\u00a0', '    '];

function pick(r, arr) {
  return arr[Math.floor(r() * arr.length)];
}

function randomText(r) {
  const names = Object.keys(POOLS);
  const weights = { english: 6, chinese: 4, japanese: 1, korean: 1, code: 3, numbers: 2, emoji: 1, symbols: 2,
                    other: 1, special: 1 };
  const bag = [];
  for (const n of names) for (let k = 0; k < weights[n]; ++k) bag.push(n);
  const n = 1 + Math.floor(r() * 30);
  let s = r() < 0.15 ? pick(r, SEPARATORS) : '';
  for (let i = 0; i < n; ++i) {
    s += pick(r, POOLS[pick(r, bag)]);
    if (r() < 0.7) s += pick(r, SEPARATORS);
  }
  return s;
}

function randomCodePoints(r) {
  // Random scalar values from well-populated, long-stable ranges.
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x4e00, 0x9fa5], [0x3040, 0x30ff],
                  [0xac00, 0xd7a3], [0x1f600, 0x1f64f], [0x2000, 0x206f], [0x0, 0x1f], [0xff01, 0xff5e]];
  const n = 1 + Math.floor(r() * 40);
  let s = '';
  for (let i = 0; i < n; ++i) {
    const [lo, hi] = pick(r, ranges);
    s += String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
  }
  return s;
}

function randomBytes(r) {
  // Mostly ASCII and valid UTF-8 with ill-formed pieces spliced in.
  const bad = [[0xff], [0xfe], [0xc0, 0xaf], [0xe0, 0x80, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80],
               [0xe4, 0xb8], [0xf0, 0x9f, 0x98], [0x80], [0xbf, 0xbf], [0xc3], [0xf8, 0x88, 0x80, 0x80, 0x80]];
  const parts = [];
  const n = 1 + Math.floor(r() * 8);
  for (let i = 0; i < n; ++i) {
    if (r() < 0.5) parts.push(...Buffer.from(randomText(r).slice(0, 20), 'utf8'));
    parts.push(...pick(r, bad));
  }
  return Buffer.from(parts);
}

function buildCorpus() {
  const r = rng(20261130);
  const out = FIXED.map((text) => ({ text }));
  // Lone surrogates: HF's Node binding turns each into U+FFFD.
  out.push({ text: 'lone \ud800 high' }, { text: 'lone \udc00 low' }, { text: '\ud83d' }, { text: 'x\udfffy\ud800' });
  for (let i = 0; i < 1500; ++i) out.push({ text: randomText(r) });
  for (let i = 0; i < 400; ++i) out.push({ text: randomCodePoints(r) });
  for (let i = 0; i < 150; ++i) out.push({ bytes_hex: randomBytes(r).toString('hex') });
  // A few long inputs.
  let long = '';
  while (long.length < 20000) long += randomText(r) + '\n';
  out.push({ text: long });
  out.push({ text: ' '.repeat(5000) + 'x' + '\n'.repeat(3000) });
  out.push({ text: '1'.repeat(3001) + 'a'.repeat(3000) + '你'.repeat(2000) });
  return out;
}

module.exports = { buildCorpus, rng };
