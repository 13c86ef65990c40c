#!/usr/bin/env python3
"""Serving the experiment's evidence: records of a `latent data group` test set
sent to latentd through /v1/completions must get the answers `latent eval`
gives offline, position by position.

usage: s3_client.py URL DATA_PREFIX EVAL_SHOW_FILE N_RECORDS TOKENIZER_JSON

One request per record: the prompt is the record's text up to its last
element (BOS and the elements, as the task tokenizer's symbols), with
`echo: true, logprobs: 1, max_tokens: 1, temperature: 0`. The top token of
the echoed prompt's logprobs at position p is the model's answer for the
target at p (predicted from position p - 1), and the generated token answers
the last target. EVAL_SHOW_FILE is `latent eval --show N` of the same file:
lines "record R: p:target:predicted ...". TOKENIZER_JSON is the model's
tokenizer.json, whose added tokens are the task's symbols.
"""
import json
import re
import struct
import sys
import urllib.request


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main():
    url, prefix, show_path, n, tok_path = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    meta = json.load(open(prefix + ".json"))
    L = meta["record_len"]
    raw = open(prefix + ".bin", "rb").read()
    toks = struct.unpack("<%dI" % (len(raw) // 4), raw)
    offline = {}
    for line in open(show_path):
        m = re.match(r"record (\d+): (.*?)\s+\|", line)
        if m:
            offline[int(m.group(1))] = {int(p): (int(t), int(q)) for p, t, q in
                                        (x.split(":") for x in m.group(2).split())}
    if len(offline) < n:
        sys.exit("eval --show printed %d records, need %d" % (len(offline), n))
    # symbol text <-> id from the tokenizer the model ships (latent data writes
    # the task's symbols as added tokens)
    tok = json.load(open(tok_path))
    sym = {t["id"]: t["content"] for t in tok["added_tokens"]}
    ids = {v: k for k, v in sym.items()}
    right_served = right_offline = total = 0
    for r in range(n):
        rec = toks[r * L:(r + 1) * L]
        targets = offline[r]
        last = max(targets)  # the last target is answered by the generated token
        prompt_ids = rec[:last]
        prompt = "".join(sym[i] for i in prompt_ids)
        resp = post(url, {"prompt": prompt, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1,
                          "ignore_eos": True})
        lp = resp["choices"][0]["logprobs"]
        echoed = [ids.get(t) for t in lp["tokens"][:len(prompt_ids)]]
        if echoed != list(prompt_ids):
            sys.exit("record %d: the server read the prompt as %s, the record is %s" % (r, echoed, list(prompt_ids)))
        for p, (target, predicted) in sorted(targets.items()):
            top = lp["top_logprobs"][p]
            served = ids.get(max(top, key=top.get)) if top else None
            if served != predicted:
                sys.exit("record %d, position %d: served %s, latent eval predicted %s (target %s)" %
                         (r, p, served, predicted, target))
            total += 1
            right_served += served == target
            right_offline += predicted == target
    print("%d records, %d targets: served accuracy %.4f = offline accuracy %.4f, every answer equal" %
          (n, total, right_served / total, right_offline / total))


if __name__ == "__main__":
    main()
