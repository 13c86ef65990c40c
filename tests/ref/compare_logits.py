#!/usr/bin/env python3
"""compare_logits.py A.json B.json TOL: prints max|A - B| / max|B| over all positions
and exits 1 when the shapes differ or the error is >= TOL (TOL 0: must be exactly 0)."""
import json
import sys

import numpy as np


def load(path):
    with open(path) as f:
        return np.array(json.load(f)["logits"], dtype=np.float64)


def main(a):
    try:
        eng = load(a[0])
    except Exception as e:  # noqa: BLE001 - any unreadable engine output is a failure
        print("engine output unreadable: %s" % e)
        return 1
    ref = load(a[1])
    tol = float(a[2])
    if eng.shape != ref.shape:
        print("shape mismatch: engine %s, reference %s" % (eng.shape, ref.shape))
        return 1
    if not np.all(np.isfinite(eng)):
        print("engine logits not finite")
        return 1
    diff = np.abs(eng - ref)
    err = diff.max() / np.abs(ref).max()
    per_pos = diff.max(axis=1) / np.abs(ref).max()
    worst = int(per_pos.argmax())
    bad = [i for i, e in enumerate(per_pos) if e >= tol]
    print("rel err %.3e (worst position %d%s)" % (err, worst,
          "" if not bad else "; failing positions %s" % bad))
    return 0 if err < tol or (tol == 0 and err == 0) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
