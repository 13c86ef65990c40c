#!/usr/bin/env python3
"""Trains a byte-level BPE tokenizer (GPT-2 style) on a text file.

  bpe_train.py TEXT VOCAB_SIZE OUT_DIR

Writes OUT_DIR/tokenizer.json (Hugging Face tokenizers format, as the
engine's tokenizer reads it) and OUT_DIR/tokenizer_config.json. Ids: the
special tokens <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2 (as SmolLM2),
the 256 bytes 3..258, then one token per merge until VOCAB_SIZE.

The text is pre-tokenized with the GPT-2 regex (tests/ref/bpe_py.py's
version, exact for ASCII), special tokens are cut out first and never
merged, and merges are learned by pair frequency over the distinct words,
incrementally (only the words holding the merged pair are updated), so a few
MB of text take a minute or two. Ties go to the lexicographically smallest
pair: the result is deterministic.
"""
import collections
import heapq
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
import bpe_py  # noqa: E402

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def word_counts(text):
    specials = "|".join(re.escape(s) for s in bpe_py.SPECIAL_TOKENS)
    counts = collections.Counter()
    for part in re.split(specials, text):
        counts.update(bpe_py.pretokenize(part))
    return counts


def train(text, vocab_size):
    vocab = {s: i for i, s in enumerate(bpe_py.SPECIAL_TOKENS)}
    for b in range(256):
        vocab[bpe_py.B2U[b]] = len(vocab)
    counts = word_counts(text)
    words = [bpe_py.word_symbols(w) for w in counts]
    freqs = list(counts.values())
    pair_count = collections.Counter()
    where = collections.defaultdict(set)  # pair -> indices of words holding it
    for i, (w, f) in enumerate(zip(words, freqs)):
        for p in zip(w, w[1:]):
            pair_count[p] += f
            where[p].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c or c == 0:
            continue  # stale entry: the count changed since it was pushed
        merged = p[0] + p[1]
        if merged in vocab:  # another pair already makes this string
            pair_count[p] = 0
            continue
        merges.append(p)
        vocab[merged] = len(vocab)
        touched = collections.Counter()
        for i in list(where[p]):
            w, f = words[i], freqs[i]
            for q in zip(w, w[1:]):
                pair_count[q] -= f
                touched[q] += 0
            out, j = [], 0
            while j < len(w):
                if j < len(w) - 1 and w[j] == p[0] and w[j + 1] == p[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for q in zip(out, out[1:]):
                pair_count[q] += f
                touched[q] += 0
                where[q].add(i)
        del where[p]
        pair_count.pop(p, None)
        for q in touched:
            if q != p and pair_count.get(q, 0) > 0:
                heapq.heappush(heap, (-pair_count[q], q))
        if len(merges) % 500 == 0:
            print("bpe_train: %d merges, vocabulary %d, last %r" % (len(merges), len(vocab), merged), file=sys.stderr)
    return vocab, merges


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, vocab_size, out = argv[0], int(argv[1]), argv[2]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    vocab, merges = train(text, vocab_size)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(bpe_py.tokenizer_json(vocab, merges), f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                   "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "model_max_length": 1024,
                   "clean_up_tokenization_spaces": False, "tokenizer_class": "GPT2Tokenizer",
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
        f.write("\n")
    print("bpe_train: wrote %s/tokenizer.json: %d tokens, %d merges" % (out, len(vocab), len(merges)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
