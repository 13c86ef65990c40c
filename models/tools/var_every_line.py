#!/usr/bin/env python3
"""Which lines of a var-assign program does a model resolve?

    var_every_line.py make TEST OUT N     # TEST, OUT: prefixes (.bin/.mask/.json)
    latent eval --model M --data OUT.bin --bucket-width 1 --show 1000000 > OUT.show
    var_every_line.py score OUT TEST OUT.show

`make` takes the first N records of a one-query var-assign test set (written
by `latent data var-assign`, program order) and writes, for each variable
that a record's program assigns, the same record asking for that variable
instead of the task's query (the answer changed to its digit; the mask
unchanged). `score` reads `latent eval --show` of that set and prints the
accuracy per depth (0: a digit variable), and, over the queries that are not
the task's own, how many were answered with the task query's digit: a model
that follows only the chain the test asks about gives that digit to other
variables too (docs/experiments.md, "The fourteenth session").
"""
import collections
import json
import sys

import numpy as np

LETTER0 = 16  # token ids: 6..15 the digits, 16.. the names (one letter)


def records(prefix):
    meta = json.load(open(prefix + ".json"))
    tok = np.fromfile(prefix + ".bin", dtype=np.int32)
    mask = np.fromfile(prefix + ".mask", dtype=np.uint8)
    return meta, tok, mask


def program(rec, answer_at):
    """name -> rhs token (a digit or a name), and the names in line order"""
    rhs, order = {}, []
    for p in range(1, answer_at - 2, 4):  # "name = rhs ;"
        rhs[int(rec[p])] = int(rec[p + 2])
        order.append(int(rec[p]))
    return rhs, order


def resolve(rhs, v):
    depth = 0
    while rhs[v] >= LETTER0:
        v, depth = rhs[v], depth + 1
    return rhs[v], depth


def make(test, out, n):
    meta, tok, mask = records(test)
    L = meta["record_len"]
    if meta.get("n_queries", 1) != 1 or not meta.get("program_order") or n > meta["n_records"]:
        sys.exit("var_every_line: a one-query test set in program order, with at least N records")
    if meta["n_base"] + meta["max_depth"] + meta["n_distractors"] > 26:
        sys.exit("var_every_line: one-letter names only (at most 26 variables a program)")
    recs, masks, info = [], [], []
    for r in range(n):
        rec, mk = tok[r * L:(r + 1) * L], mask[r * L:(r + 1) * L]
        at = int(np.nonzero(mk)[0][0])
        rhs, order = program(rec, at)
        for v in order:
            digit, depth = resolve(rhs, v)
            q = rec.copy()
            q[at - 2], q[at] = v, digit
            recs.append(q)
            masks.append(mk)
            info.append({"record": r, "depth": depth, "task": v == int(rec[at - 2])})
    tail = len(tok) - meta["n_records"] * L  # the padding after the last record
    np.concatenate(recs + [np.zeros(tail, np.int32)]).tofile(out + ".bin")
    np.concatenate(masks + [np.zeros(tail, np.uint8)]).tofile(out + ".mask")
    meta.update(n_records=len(recs), n_tokens=len(recs) * L + tail, min_depth=0)
    json.dump(meta, open(out + ".json", "w"), indent=1)
    json.dump(info, open(out + ".lines.json", "w"))
    print("var_every_line: %d queries from %d programs" % (len(recs), n))


def score(out, test, show):
    info = json.load(open(out + ".lines.json"))
    meta, tok, mask = records(test)
    L = meta["record_len"]
    pred = {}
    for line in open(show):
        f = line.split()
        if len(f) > 2 and f[0] == "record" and f[1].rstrip(":").isdigit():
            _, want, got = f[2].split(":")
            pred[int(f[1].rstrip(":"))] = (int(want), int(got))
    if len(pred) != len(info):
        sys.exit("var_every_line: %d predictions for %d queries (--show at least that many)" % (len(pred), len(info)))
    by_depth = collections.defaultdict(lambda: [0, 0])
    others = collections.Counter()
    for i, x in enumerate(info):
        want, got = pred[i]
        by_depth[x["depth"]][0] += want == got
        by_depth[x["depth"]][1] += 1
        if not x["task"]:
            r = x["record"]
            task_digit = int(tok[r * L + int(np.nonzero(mask[r * L:(r + 1) * L])[0][0])])
            others["right" if want == got else "the task's digit" if got == task_digit else "another digit"] += 1
    print("depth  queries  accuracy")
    for d in sorted(by_depth):
        ok, n = by_depth[d]
        print("%5d  %7d  %.3f" % (d, n, ok / n))
    n = sum(others.values())
    print("queries other than the task's: %d; right %d (%.3f), the task's digit %d (%.3f), another digit %d (%.3f)"
          % (n, others["right"], others["right"] / n, others["the task's digit"], others["the task's digit"] / n,
             others["another digit"], others["another digit"] / n))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
