"""A tiny byte-level BPE (GPT-2 / SmolLM2 style) for the test reference:
a trainer that writes a Hugging Face tokenizer.json, and an encoder/decoder
that reads one. Independent of the C engine's tokenizer.

Pre-tokenization uses Python's `re` in place of the GPT-2 \\p{L}/\\p{N} regex;
it is exact for ASCII text (all the tests use), approximate beyond it.
"""
import json
import re

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as SmolLM2

# GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
_PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character table."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    n = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


B2U = bytes_to_unicode()
U2B = {u: b for b, u in B2U.items()}


def pretokenize(text):
    return _PAT.findall(text)


def word_symbols(piece):
    return [B2U[b] for b in piece.encode("utf-8")]


CORPUS = """The quick brown fox jumps over the lazy dog. A recurrent state carries
information from one token to the next, beside the key and value cache.
Once upon a time there was a little girl who lived in a village near the forest.
Whenever she went out, the little girl wore a red riding cloak, so everyone in
the village called her Little Red Riding Hood. One morning she asked her mother
if she could go to visit her grandmother, as it had been a while since they had
seen each other. The sun was shining and the birds were singing in the trees.
Hello world! How are you today? I am fine, thank you. What is the weather like?
Transformers process every token with attention over the previous tokens, and
the middle layers can feed their output back into the next position. Training
uses a parallel approximation; inference is exact and sequential. Numbers like
12, 345 and 2024 appear too, with punctuation: commas, periods; colons (and more).
She walked along the path, picked some flowers, and listened to the wind.
"""


def train(vocab_size, extra_text=""):
    """Learns merges until the vocabulary (specials + 256 bytes + merges) has
    vocab_size entries. Deterministic: ties go to the lexicographically
    smallest pair. Returns (vocab dict token->id, merges list of (a, b))."""
    base = len(SPECIAL_TOKENS) + 256
    if vocab_size < base:
        raise ValueError("vocab must be >= %d" % base)
    vocab = {}
    for i, s in enumerate(SPECIAL_TOKENS):
        vocab[s] = i
    for b in range(256):
        vocab[B2U[b]] = len(SPECIAL_TOKENS) + b
    counts = {}
    for piece in pretokenize(CORPUS + extra_text):
        w = tuple(word_symbols(piece))
        counts[w] = counts.get(w, 0) + 1
    words = [list(w) for w in counts]
    freqs = [counts[w] for w in counts]
    merges = []
    while len(vocab) < vocab_size:
        pairs = {}
        for w, f in zip(words, freqs):
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + f
        pairs = {p: c for p, c in pairs.items() if p[0] + p[1] not in vocab}
        if pairs:
            best = min(pairs, key=lambda p: (-pairs[p], p))
        else:
            # The corpus is used up: add valid but rarely applied merges of
            # existing tokens so the vocabulary still reaches vocab_size.
            toks = sorted(vocab, key=lambda t: vocab[t])[len(SPECIAL_TOKENS):]
            best = None
            for a in toks:
                for b in toks:
                    if a + b not in vocab:
                        best = (a, b)
                        break
                if best:
                    break
        merged = best[0] + best[1]
        merges.append(best)
        vocab[merged] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == best[0] and w[i + 1] == best[1]:
                    w[i:i + 2] = [merged]
                i += 1
    return vocab, merges


def tokenizer_json(vocab, merges):
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIAL_TOKENS)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": bl,
        "post_processor": dict(bl, trim_offsets=False),
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


class Tokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.vocab = dict(j["model"]["vocab"])
        for t in j.get("added_tokens", []):
            self.vocab[t["content"]] = t["id"]
        self.specials = {t["content"]: t["id"] for t in j.get("added_tokens", [])}
        self.id_to_tok = {i: t for t, i in self.vocab.items()}
        self.ranks = {}
        for r, m in enumerate(j["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = r

    def _bpe(self, piece):
        w = word_symbols(piece)
        while len(w) > 1:
            best = None
            for i in range(len(w) - 1):
                r = self.ranks.get((w[i], w[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, w[i], w[i + 1])
            if best is None:
                break
            _, a, b = best
            out = []
            i = 0
            while i < len(w):
                if i < len(w) - 1 and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            w = out
        return [self.vocab[s] for s in w]

    def encode(self, text):
        ids = []
        if self.specials:
            parts = re.split("(" + "|".join(re.escape(s) for s in self.specials) + ")", text)
        else:
            parts = [text]
        for part in parts:
            if part in self.specials:
                ids.append(self.specials[part])
                continue
            for piece in pretokenize(part):
                ids.extend(self._bpe(piece))
        return ids

    def decode_bytes(self, ids, skip_special=False):
        out = bytearray()
        for i in ids:
            t = self.id_to_tok[i]
            if t in self.specials:
                if not skip_special:
                    out += t.encode("utf-8")
            else:
                out += bytes(U2B[c] for c in t)
        return bytes(out)

    def decode(self, ids, skip_special=False):
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")
