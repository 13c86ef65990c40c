#!/usr/bin/env python3
"""An independent learning curve: trains a plain model directory with
tests/ref/train_reference.py's float64 autodiff (AdamW as `latent train`
has it: betas 0.9/0.98, eps 1e-8, linear warmup of 100 steps, global-norm
clip 1, no weight decay), to tell a trainer defect from a hard task.

usage: ref_curve.py membership PREFIX N SEED
           writes PREFIX.{bin,mask,json}: N records "BOS k1..k8 ? q A",
           eight distinct letters, A the digit 0 if q is one of them else 1
           (the vocabulary of `latent data var-assign`); q drawn in or out
           with probability 1/2. One scored token a record.
       ref_curve.py train MODEL_DIR PREFIX RECORD_LEN BATCH STEPS LR
           prints "step loss accuracy seconds" every 25 steps (loss and
           accuracy of the step's own batch).

The forward and the loss are the reference's own (seq_plain, ce_sum,
mean_of), a sequence at a time; only the optimizer is written here.
"""
import json, os, sys, time
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests', 'ref'))
import train_reference as R
from train_reference import V

LETTER, QUERY, DIGIT = 16, 5, 6  # `latent data var-assign`'s ids (engine/train/data_tasks.c)


def membership(prefix, n, seed):
    rng = np.random.default_rng(seed)
    L = 12
    rec = np.zeros((n, L), np.uint32)
    mask = np.zeros((n, L), np.uint8)
    for r in range(n):
        keys = rng.choice(26, size=8, replace=False)
        inside = rng.random() < 0.5
        q = rng.choice(keys) if inside else rng.choice(np.setdiff1d(np.arange(26), keys))
        rec[r] = [1, *(keys + LETTER), QUERY, q + LETTER, DIGIT + (0 if inside else 1)]
        mask[r, L - 1] = 1
    tail = L + 1  # the last window's next token
    np.concatenate([rec.ravel(), np.zeros(tail, np.uint32)]).tofile(prefix + '.bin')
    np.concatenate([mask.ravel(), np.zeros(tail, np.uint8)]).tofile(prefix + '.mask')
    json.dump({"task": "raw", "records": True, "record_len": L, "n_records": n, "n_tokens": n * L + tail,
               "vocab_size": 42, "pad_id": 0, "bos_id": 1, "eos_id": 2, "mask": True, "labels": False,
               "flow": False, "seed": seed}, open(prefix + '.json', 'w'), indent=1)


def train(model_dir, prefix, T, B, steps, lr):
    m = R.Model(model_dir)
    assert not m.rec, 'plain models only'
    ids = np.fromfile(prefix + '.bin', dtype='<u4').astype(np.int64)
    smask = np.fromfile(prefix + '.mask', dtype=np.uint8)
    n_rec = (len(ids) - 1) // T
    pos = list(range(T))
    mom = {k: np.zeros_like(p.v) for k, p in m.p.items()}
    vel = {k: np.zeros_like(p.v) for k, p in m.p.items()}
    rng, t0 = np.random.default_rng(1), time.time()
    for step in range(1, steps + 1):
        recs = rng.integers(0, n_rec, B)
        for p in m.p.values():
            p.g = None
        parts, right = [], 0
        for r in recs:  # the reference's own forward and loss, a sequence at a time
            tgt, scored = ids[r * T + 1:r * T + T + 1], smask[r * T + 1:r * T + T + 1].astype(bool)
            lg = R.seq_plain(m, ids[r * T:r * T + T], pos)
            parts.append(R.ce_sum(lg, tgt, scored))
            right += int((lg.v.argmax(axis=1)[scored] == tgt[scored]).sum())
        loss = R.mean_of(parts)
        R.backward(loss)
        grads = {k: (p.g if p.g is not None else np.zeros_like(p.v)) for k, p in m.p.items()}
        norm = float(np.sqrt(sum(float((g * g).sum()) for g in grads.values())))
        clip, rate = min(1.0, 1.0 / norm) if norm > 0 else 1.0, lr * min(1.0, step / 100)
        for k, p in list(m.p.items()):
            g = grads[k] * clip
            mom[k] = 0.9 * mom[k] + 0.1 * g
            vel[k] = 0.98 * vel[k] + 0.02 * g * g
            m.p[k] = V(p.v - rate * (mom[k] / (1 - 0.9 ** step)) / (np.sqrt(vel[k] / (1 - 0.98 ** step)) + 1e-8))
        if step % 25 == 0:
            acc = right / max(1, sum(c for _, c in parts))
            print(step, round(float(loss.v), 4), round(acc, 3), round(time.time() - t0, 1), flush=True)


if __name__ == '__main__':
    a = sys.argv[1:]
    if a[:1] == ['membership'] and len(a) == 4:
        membership(a[1], int(a[2]), int(a[3]))
    elif a[:1] == ['train'] and len(a) == 7:
        train(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), float(a[6]))
    else:
        sys.exit(__doc__)
