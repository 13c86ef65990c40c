#!/usr/bin/env python3
"""What the next chunk of a state-tracking run trains with, read from the
run's learning curve (models/experiment.sh writes a JSON line per chunk).

usage: chunk_schedule.py lr CURVE FINAL_STAGE COOL BASE STEP [FOLLOW]
       chunk_schedule.py data CURVE STAGE DECOY_FROM GATE DEPTH STEP [FOLLOW]

lr:   the learning rate of the chunk that ends at STEP: BASE, halved once
      for each line of the final stage at or past COOL CPU seconds, or at
      or past step N where COOL is "step:N" (at most 4 times, to 1/16).
data: the suffix of its training set: "d" (the records with decoys) once
      the gate is open, that is once STAGE >= DECOY_FROM and the curve's
      last line trained on decoys, or had |gamma_rec| >= GATE
      (STATE_VAR_DECOY_GAMMA) and depths 1..DEPTH learnt: their mean
      accuracy on the stage's test set >= 0.9, stage DEPTH's criterion,
      in stage DEPTH or later (STATE_VAR_DECOY_DEPTH; 0: no such
      condition); else "". An empty GATE: never.

FOLLOW is another run's curve: a run on that run's schedule (a plain
control on T2MLR's) takes the rate and data that run had at STEP, so the
two see the same batches at the same rates.
"""
import json
import os
import sys


def curve_lines(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def at_step(path, step, field, default):
    """FIELD of the line of curve PATH that ends at STEP (DEFAULT if none)."""
    by_step = {line["step"]: line.get(field, default) for line in curve_lines(path)}
    return by_step.get(int(step), default)


def chunk_lr(curve, final, cool, base, step, follow=""):
    if follow:
        return at_step(follow, step, "lr", float(base))
    # "step:N" counts steps, which every machine takes alike; CPU seconds do not
    field, at = ("step", cool[5:]) if cool.startswith("step:") else ("cpu_s", cool)
    n = sum(1 for line in curve_lines(curve)
            if str(line["stage"]) == final and line[field] >= float(at))
    return float(base) / 2 ** min(n, 4)


def path_open(line, gate):
    """Whether LINE's recurrent path is open to GATE: |gamma_rec| >= GATE.
    The path enters as tanh(gamma_rec) times a learnt projection
    (../shared/spec/models.md), so a negative gamma_rec opens it as well."""
    return abs(line.get("gamma_rec", 0.0)) >= float(gate)


def stage_met(acc, depth):
    """Depth stage DEPTH's criterion on accuracies ACC by depth ({"1": 0.93,
    ...}): depths 1..DEPTH at least 0.9 on average (a depth missing: not met).
    experiment.sh's curriculum advances on it, and the decoy gate waits for it."""
    v = [acc.get(str(k)) for k in range(1, int(depth) + 1)]
    return None not in v and (not v or sum(v) / len(v) >= 0.9)


def depths_learnt(line, depth):
    """Whether LINE's stage test set meets stage DEPTH's criterion (a stage
    before DEPTH has not)."""
    return stage_met(line.get("stage_acc", {}), depth)


def chunk_data(curve, stage, first, gate, depth, step, follow=""):
    # the lookup stages (L2, L8) and the stages before DECOY_FROM never have decoys
    if not gate or stage.startswith("L") or int(stage) < int(first):
        return ""
    if follow:
        return "d" if at_step(follow, step, "decoy", 0) == 1 else ""
    last = curve_lines(curve)[-1:]
    on = bool(last) and (last[0].get("decoy", 0) == 1
                         or (path_open(last[0], gate) and depths_learnt(last[0], depth)))
    return "d" if on else ""


def main(argv):
    if len(argv) in (7, 8) and argv[1] == "lr":
        print(repr(chunk_lr(*argv[2:])))
    elif len(argv) in (8, 9) and argv[1] == "data":
        print(chunk_data(*argv[2:]))
    else:
        sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main(sys.argv)
